"""BERT shapes, config building and the pre-training model with the masked-position MLM decoder.

Reused by ``pretrain``, ``distill`` and ``finetune``. Everything here takes plain arguments (no params objects).

- :data:`SIZES`: the published shapes by name: ``tiny`` (L=2, H=128), ``mini`` (4/256), ``small`` (4/512),
  ``medium`` (8/512) from Turc et al. 2019 ("Well-Read Students Learn Better", Table 1 / the released 24 BERT
  miniatures, A = H/64, FFN = 4H); ``base`` (12/768, A=12, 110M) and ``large`` (24/1024, A=16, 340M) from
  Devlin et al. 2019, §3.
- :func:`build_config`: a ``BertConfig`` from a size name, the tokenizer's ``vocab_size`` and field overrides,
  with one-line :class:`ModelConfigError` messages for the mistakes users make.
- :class:`MaskedPositionPretrainer`: wraps a stock ``BertForPreTraining`` / ``BertForMaskedLM`` and computes the
  same loss as the stock forward, but applies the MLM decoder (transform + vocabulary projection) only to the
  masked positions. The wrapped model is saved with ``save_pretrained`` as the standard class, so
  ``AutoModelForPreTraining`` / ``AutoModelForMaskedLM`` load it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import BertConfig, BertForMaskedLM, BertForPreTraining, PreTrainedModel

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
"""Label value of positions without an MLM prediction (Hugging Face convention)."""

SIZES: dict[str, dict[str, int]] = {
    # Turc et al. 2019 (BERT miniatures): heads = H / 64, intermediate = 4 H.
    "tiny": {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2, "intermediate_size": 512},
    "mini": {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024},
    "small": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048},
    "medium": {"num_hidden_layers": 8, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 2048},
    # Devlin et al. 2019, §3: BERT-Base (110M) and BERT-Large (340M).
    "base": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072},
    "large": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096},
}

PAIR_LABEL_KEYS = ("next_sentence_label", "sentence_order_label")
"""Batch keys of the sentence-pair label: NSP (Devlin et al. 2019) or SOP (Lan et al. 2020)."""


class ModelConfigError(ValueError):
    """A model shape or start point that cannot work. ``str(err)`` is one line naming the key."""


def build_config(
    size: str,
    vocab_size: int,
    overrides: dict[str, Any] | None = None,
    max_seq_length: int | None = None,
    pad_token_id: int = 0,
    key: str = "pretrain.model",
) -> BertConfig:
    """A ``BertConfig`` of the named size with the tokenizer's vocabulary size and any field overridden.

    Args:
        size: a key of :data:`SIZES`.
        vocab_size: the tokenizer's vocabulary size (``len(tokenizer)``).
        overrides: ``BertConfig`` fields to set (e.g. ``{"hidden_dropout_prob": 0.0}``). An explicit
            ``vocab_size`` must equal ``vocab_size``.
        max_seq_length: the longest instance the model will see; must be <= ``max_position_embeddings``.
        pad_token_id: the tokenizer's ``[PAD]`` id.
        key: the params key named in error messages.

    Raises:
        ModelConfigError: unknown size, unknown field, vocab_size mismatch, max_seq_length too long, or hidden
            size not divisible by the number of heads.
    """
    if size not in SIZES:
        raise ModelConfigError(f"{key}.size: unknown size {size!r}, expected one of {', '.join(SIZES)}")
    overrides = dict(overrides or {})
    known = set(BertConfig().to_dict())
    unknown = sorted(k for k in overrides if k not in known)
    if unknown:
        raise ModelConfigError(f"{key}.config.{unknown[0]}: not a BertConfig field")
    if "vocab_size" in overrides and overrides["vocab_size"] != vocab_size:
        raise ModelConfigError(
            f"{key}.config.vocab_size: {overrides['vocab_size']} does not match the tokenizer's vocabulary "
            f"of {vocab_size} tokens (leave it out: vocab_size comes from the tokenizer)"
        )
    fields = {**SIZES[size], "pad_token_id": pad_token_id, **overrides, "vocab_size": vocab_size}
    config = BertConfig(**fields)
    if config.hidden_size % config.num_attention_heads:
        raise ModelConfigError(
            f"{key}: hidden_size {config.hidden_size} is not a multiple of num_attention_heads "
            f"{config.num_attention_heads}"
        )
    check_max_seq_length(config, max_seq_length, key)
    return config


def check_max_seq_length(config: BertConfig, max_seq_length: int | None, key: str = "pretrain") -> None:
    """Raise :class:`ModelConfigError` when instances are longer than the model's position table."""
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise ModelConfigError(
            f"{key}: max_seq_length {max_seq_length} exceeds the model's max_position_embeddings "
            f"{config.max_position_embeddings}"
        )


def check_vocab(config: BertConfig, vocab_size: int, where: str) -> None:
    """Raise :class:`ModelConfigError` when a model's embedding table does not match the tokenizer."""
    if config.vocab_size != vocab_size:
        raise ModelConfigError(
            f"{where}: model vocab_size {config.vocab_size} does not match the tokenizer's {vocab_size} tokens"
        )


def new_pretraining_model(config: BertConfig, with_pair_head: bool, seed: int) -> PreTrainedModel:
    """A freshly initialised ``BertForPreTraining`` (``with_pair_head``) or ``BertForMaskedLM``, SDPA attention.

    The initial weights depend only on ``config`` and ``seed`` (the global torch RNG is seeded here).
    """
    torch.manual_seed(seed)
    config = BertConfig.from_dict(config.to_dict())
    config._attn_implementation = "sdpa"
    cls = BertForPreTraining if with_pair_head else BertForMaskedLM
    return cls(config)


def load_pretraining_model(folder: str | Path, with_pair_head: bool, seed: int) -> PreTrainedModel:
    """Load a BERT checkpoint (folder or hub name) as ``BertForPreTraining`` / ``BertForMaskedLM`` for DAPT.

    Heads missing from the checkpoint (e.g. a sentence-embedding BERT such as MiniLM has no MLM head) are freshly
    initialised with the torch RNG seeded by ``seed``, and the log names them (Gururangan et al. 2020 continue
    a model's pre-training on domain text the same way).

    Raises:
        ModelConfigError: the checkpoint is not a BERT model.
    """
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"pretrain.init: cannot load a model config from {folder!s} ({exc})") from None
    if config.model_type != "bert":
        raise ModelConfigError(f"pretrain.init: {folder!s} is a {config.model_type!r} model, expected 'bert'")
    torch.manual_seed(seed)
    cls = BertForPreTraining if with_pair_head else BertForMaskedLM
    model, info = cls.from_pretrained(str(folder), attn_implementation="sdpa", output_loading_info=True)
    missing = sorted(k for k in info.get("missing_keys", ()) if "decoder.weight" not in k)
    if missing:
        heads = sorted({".".join(k.split(".")[:3]) for k in missing})
        log.warning(
            "%s has no weights for %d tensors (%s): freshly initialised (seed %d)",
            folder, len(missing), ", ".join(heads), seed,
        )
    return model


@dataclass
class PretrainOutput:
    """Losses and counts of one pre-training forward pass (all tensors are 0-d).

    ``loss`` = ``mlm_loss`` + ``pair_loss`` (the sum BERT optimises, Devlin et al. 2019 Appendix A.2);
    ``mlm_loss`` is the mean cross-entropy (nats) over predicted positions; ``*_correct``/``*_count`` let
    evaluation aggregate exact token-weighted accuracies across batches.
    """

    loss: torch.Tensor
    mlm_loss: torch.Tensor
    mlm_correct: torch.Tensor
    mlm_count: torch.Tensor
    pair_loss: torch.Tensor | None = None
    pair_correct: torch.Tensor | None = None
    pair_count: torch.Tensor | None = None


class MaskedPositionPretrainer(nn.Module):
    """A stock BERT pre-training model whose MLM decoder runs only on the predicted positions.

    BERT predicts about 15% of the tokens (Devlin et al. 2019, §3.1), yet ``BertForPreTraining.forward``
    projects every position to the vocabulary: with a small model and an 8k vocabulary that
    ``(batch, seq_len, vocab)`` projection costs as much as the encoder. Here the encoder output is gathered at
    the positions whose label is not -100, ``(n_predicted, hidden)``, before the head's transform and
    projection, as NVIDIA's and Google's reference implementations do (``masked_lm_positions``). The loss is the
    same as the stock forward's (mean cross-entropy over predicted positions, plus the pair loss).

    Args:
        model: a ``BertForPreTraining`` (MLM + NSP/SOP head) or ``BertForMaskedLM`` (MLM only).
    """

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        if not isinstance(model, (BertForPreTraining, BertForMaskedLM)):
            raise TypeError(f"expected BertForPreTraining or BertForMaskedLM, got {type(model).__name__}")
        self.model = model
        self.has_pair_head = isinstance(model, BertForPreTraining)

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        sentence_order_label: torch.Tensor | None = None,
    ) -> PretrainOutput:
        """Compute the pre-training loss.

        Args:
            input_ids, attention_mask, token_type_ids: ``(batch, seq_len)`` int64.
            labels: ``(batch, seq_len)`` int64, the original token id at predicted positions, -100 elsewhere.
            next_sentence_label / sentence_order_label: ``(batch,)`` int64 in {0, 1}; used when the model has
                the pair head (at most one of them is given).
        """
        model = self.model
        outputs = model.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        sequence_output = outputs.last_hidden_state
        predicted = labels != IGNORE_INDEX  # (batch, seq_len) bool
        hidden = sequence_output[predicted]  # (n_predicted, hidden): gather before the vocabulary projection
        targets = labels[predicted]  # (n_predicted,)
        heads = model.cls
        logits = heads.predictions(hidden).float()  # (n_predicted, vocab)
        mlm_loss = F.cross_entropy(logits, targets)
        mlm_correct = (logits.argmax(-1) == targets).sum()
        mlm_count = torch.tensor(targets.numel(), device=targets.device)
        out = PretrainOutput(loss=mlm_loss, mlm_loss=mlm_loss, mlm_correct=mlm_correct, mlm_count=mlm_count)
        pair_label = next_sentence_label if next_sentence_label is not None else sentence_order_label
        if self.has_pair_head and pair_label is not None:
            pair_logits = heads.seq_relationship(outputs.pooler_output).float()  # (batch, 2)
            out.pair_loss = F.cross_entropy(pair_logits, pair_label.view(-1))
            out.pair_correct = (pair_logits.argmax(-1) == pair_label.view(-1)).sum()
            out.pair_count = torch.tensor(pair_label.numel(), device=pair_label.device)
            out.loss = mlm_loss + out.pair_loss
        return out


def save_model(model: PreTrainedModel, folder: str | Path, tokenizer=None) -> None:
    """``save_pretrained`` (safetensors) of the standard class with the tokenizer beside it.

    The config's ``architectures`` names the stock class, so ``AutoModelForPreTraining`` /
    ``AutoModelForMaskedLM`` load the folder.
    """
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(str(folder), safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(folder))


def count_parameters(model: nn.Module, exclude_embeddings: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once); optionally without embedding tables."""
    seen: set[int] = set()
    total = 0
    for name, p in model.named_parameters():
        if id(p) in seen or (exclude_embeddings and "embeddings" in name):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def training_flops_per_step(config: BertConfig, batch: int, seq_len: int, predicted: int, full_decoder: bool) -> float:
    """Model FLOPs of one training step (forward + backward = 3x forward), counting matmuls only.

    Encoder per layer and token: QKV/output projections 8 H^2, FFN 4 H I, attention scores and values 4 S H
    (multiply-add = 2 FLOPs). MLM head per predicted position (or per position with ``full_decoder``):
    transform 2 H^2, projection 2 H V. This is the "model FLOPs" of Chowdhery et al. 2022 (PaLM, Appendix B),
    so the MLM head's FLOPs are those actually required by each variant.

    Args:
        batch: sequences per step; seq_len: padded length; predicted: predicted positions in the step.
    """
    h, i, layers, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    tokens = batch * seq_len
    encoder = layers * tokens * (8 * h * h + 4 * h * i + 4 * seq_len * h)
    head_positions = tokens if full_decoder else predicted
    head = head_positions * (2 * h * h + 2 * h * v)
    pooler = batch * 2 * h * h
    return 3.0 * (encoder + head + pooler)
