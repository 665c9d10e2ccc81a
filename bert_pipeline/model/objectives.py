"""BERT's pre-training objectives: MLM with the decoder on the masked positions only, plus NSP or SOP; for every
family of :mod:`bert_pipeline.model.families` (RoBERTa: MLM only; ALBERT: MLM + SOP, Lan et al. 2020, §4.6).

- :func:`masked_lm_forward`: the encoder on every token and the MLM head (transform + vocabulary projection) only
  on the positions that carry a label, as ``masked_lm_positions`` in Google's BERT code and NVIDIA's; the one
  implementation that pre-training (:class:`MaskedPositionPretrainer`) and distillation
  (:class:`bert_pipeline.model.distillation.DistillationModel`) share.
- :class:`MaskedPositionPretrainer`: wraps a stock ``BertForPreTraining`` / ``BertForMaskedLM`` and computes the
  same loss as the stock forward (Devlin et al. 2019, §3.1 and Appendix A.2). The wrapped model is saved with
  ``save_pretrained`` as the standard class, so ``AutoModelForPreTraining`` / ``AutoModelForMaskedLM`` load it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional
from transformers import PreTrainedModel

from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.model.families import PRETRAINING_CLASSES, family_of


def masked_lm_forward(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    token_type_ids: torch.Tensor | None = None,
    masked_positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """MLM logits at the labelled positions only.

    BERT predicts about 15% of the tokens (Devlin et al. 2019, §3.1), yet ``BertForPreTraining.forward`` projects
    every position to the vocabulary: with a small model and an 8k vocabulary that ``(batch, seq_len, vocab)``
    projection costs as much as the encoder. Here the encoder output is gathered at the positions whose label is
    not ``IGNORE_INDEX`` before the head runs.

    Args:
        model: a pre-training model of any family (:data:`bert_pipeline.model.families.FAMILIES`: its encoder
            and MLM head, e.g. ``.bert`` and ``.cls.predictions``; token types dropped for the families without them:
            RoBERTa, ModernBERT, DeBERTa).
        input_ids, labels, attention_mask, token_type_ids: ``(batch, seq_len)`` int64; ``labels`` holds the
            original id where a prediction is made and ``IGNORE_INDEX`` (-100) elsewhere.
        masked_positions: ``(n_predicted,)`` int64 flat indices into ``labels.view(-1)`` of those positions in
            row-major order (:func:`bert_pipeline.train.loop.masked_positions`, computed on the host); None:
            found here with a boolean mask, which on a GPU makes the host wait for the device.

    Returns:
        ``(logits, outputs, targets)``: ``(n_predicted, vocab_size)`` float32 logits in row-major order of the
        predicted positions, the encoder's outputs (``last_hidden_state`` ``(batch, seq_len, hidden)``,
        ``pooler_output`` ``(batch, hidden)`` where the encoder has a pooler: the pair objective reads it; RoBERTa's
        MLM model, ModernBERT and DeBERTa have none and take objective none), and the ``(n_predicted,)`` int64
        target ids.
    """
    family = family_of(model)
    # RoBERTa has one token type, ModernBERT and DeBERTa-v3 none: the data's 0/1 segments are not inputs (and
    # ModernBERT's forward would swallow a stray token_type_ids in its **kwargs without a word)
    types = {"token_type_ids": token_type_ids} if family.token_types else {}
    outputs = getattr(model, family.encoder)(input_ids=input_ids, attention_mask=attention_mask, return_dict=True,
                                             **types)
    if masked_positions is None:
        masked_positions = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
    hidden = outputs.last_hidden_state
    gathered = hidden.reshape(-1, hidden.shape[-1]).index_select(0, masked_positions)  # (n_predicted, hidden)
    logits = family.mlm_head(model)(gathered).float()  # (n_predicted, vocab)
    return logits, outputs, labels.reshape(-1).index_select(0, masked_positions)


def top1_hits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The 0-d int64 count of rows of ``logits`` ``(n, classes)`` whose argmax is the row's ``targets`` ``(n,)``."""
    return (logits.argmax(-1) == targets).sum()


@dataclass
class PretrainOutput:
    """Losses and counts of one pre-training forward pass (the losses and counts are 0-d tensors).

    ``loss`` = ``mlm_loss`` + ``pair_loss`` (the sum BERT optimises, Devlin et al. 2019 Appendix A.2), or, when the
    forward was given ``mlm_normalizer``, the summed MLM cross-entropy divided by it + ``pair_loss``;
    ``mlm_loss`` is the mean cross-entropy (nats) over this batch's predicted positions. ``mlm_correct`` /
    ``pair_correct`` (top-1 hits) are computed from the detached logits only when read: evaluation reads them
    to aggregate exact token-weighted accuracies, and a training step, which does not, skips the argmax over the
    vocabulary (2.5% of a tiny model's step in ``bench/pretrain.py --profile``).
    """

    loss: torch.Tensor
    mlm_loss: torch.Tensor
    mlm_count: torch.Tensor
    mlm_logits: torch.Tensor  # (n_predicted, vocab_size) float32, detached
    mlm_targets: torch.Tensor  # (n_predicted,) int64
    pair_loss: torch.Tensor | None = None
    pair_count: torch.Tensor | None = None
    pair_logits: torch.Tensor | None = None  # (batch, 2) float32, detached
    pair_targets: torch.Tensor | None = None  # (batch,) int64

    @property
    def mlm_correct(self) -> torch.Tensor:
        """Top-1 hits at the predicted positions (0-d int64)."""
        return top1_hits(self.mlm_logits, self.mlm_targets)

    @property
    def pair_correct(self) -> torch.Tensor | None:
        """Top-1 hits of the pair (NSP/SOP) head (0-d int64), or None without a pair label."""
        return None if self.pair_logits is None else top1_hits(self.pair_logits, self.pair_targets)


class MaskedPositionPretrainer(nn.Module):
    """A stock BERT pre-training model whose MLM decoder runs only on the predicted positions
    (:func:`masked_lm_forward`). The loss is the stock forward's: mean cross-entropy over the predicted positions,
    plus the pair (NSP/SOP) cross-entropy when the model has the pair head.

    Args:
        model: a ``BertForPreTraining`` / ``AlbertForPreTraining`` (MLM + NSP/SOP head) or a ``*ForMaskedLM``
            of any family (MLM only; :mod:`bert_pipeline.model.families`).
    """

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        if type(model).__name__ not in PRETRAINING_CLASSES:
            raise TypeError(f"expected one of {', '.join(PRETRAINING_CLASSES)}, got {type(model).__name__}")
        self.model = model
        self.family = family_of(model)
        self.has_pair_head = type(model) is self.family.pretraining_class

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
        mlm_normalizer: float | torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
    ) -> PretrainOutput:
        """Compute the pre-training loss.

        Args:
            input_ids, attention_mask, token_type_ids: ``(batch, seq_len)`` int64.
            labels: ``(batch, seq_len)`` int64, the original token id at predicted positions, -100 elsewhere.
            next_sentence_label / sentence_order_label: ``(batch,)`` int64 in {0, 1}; used when the model has
                the pair head (at most one of them is given).
            mlm_normalizer: the divisor of the summed MLM cross-entropy in ``loss`` (None: this batch's count of
                predicted positions, a mean). Under DDP the training loop passes the global micro-batch's count
                over the number of processes, so that the processes' averaged gradients are those of the global
                token mean (:mod:`bert_pipeline.train.loop`); a 0-d tensor keeps it on the device.
            masked_positions: see :func:`masked_lm_forward`.
        """
        logits, outputs, targets = masked_lm_forward(self.model, input_ids, labels, attention_mask, token_type_ids,
                                                     masked_positions)
        mlm_loss = functional.cross_entropy(logits, targets)
        mlm_count = torch.tensor(targets.numel())  # a host tensor: its value is the shape's, known without the device
        loss = mlm_loss if mlm_normalizer is None else (
            functional.cross_entropy(logits, targets, reduction="sum") / mlm_normalizer)
        out = PretrainOutput(loss=loss, mlm_loss=mlm_loss, mlm_count=mlm_count, mlm_logits=logits.detach(),
                             mlm_targets=targets)
        pair_label = next_sentence_label if next_sentence_label is not None else sentence_order_label
        if self.has_pair_head and pair_label is not None:
            pair_logits = self.family.pair_head(self.model)(outputs.pooler_output).float()  # (batch, 2)
            out.pair_loss = functional.cross_entropy(pair_logits, pair_label.view(-1))
            out.pair_logits, out.pair_targets = pair_logits.detach(), pair_label.view(-1)
            out.pair_count = torch.tensor(pair_label.numel())
            out.loss = loss + out.pair_loss
        return out
