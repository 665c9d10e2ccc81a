"""What the sequence kinds share (classification, pair classification, regression): one text or a text pair in,
one output row per example out, from ``[CLS]`` (or mean) pooling -> Linear (Devlin et al. 2019, §4.1 and Fig. 4a-b).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch
    from datasets import Dataset
from bert_pipeline.tasks.base import (
    EncodedInputs,
    Forward,
    HeldoutScorer,
    ServeRequest,
    TaskKind,
    check_temperature,
    masked_cross_entropy,
    max_length,
    rows,
    token_counts,
)


def encode_sequences(tokenizer, texts: Sequence[str], text_pairs: Sequence[str] | None, max_length: int) -> Any:
    """Tokenize single texts or pairs for a sequence head, truncated to ``max_length`` tokens.

    Pairs go through the tokenizer's own pair template (``[CLS] a [SEP] b [SEP]`` for BERT, ``<s> a </s></s> b
    </s>`` for RoBERTa), so ``token_type_ids`` (where the tokenizer returns them) are 0 over ``[CLS] a [SEP]`` and
    1 over ``b [SEP]``; ``truncation="longest_first"`` trims the longer segment first.

    Returns:
        the tokenizer's ``BatchEncoding`` (lists of ints per example).
    """
    if text_pairs is None:
        return tokenizer(list(texts), truncation=True, max_length=max_length)
    return tokenizer(list(texts), list(text_pairs), truncation="longest_first", max_length=max_length)


def sequence_outputs(pred, texts: Sequence[str], batch_size: int = 32, max_seq_length: int = 128,
                     text_pairs: Sequence[str] | None = None) -> torch.Tensor:
    """Raw head outputs ``(len(texts), num_labels)`` float32 in the order of ``texts``: logits, or a regression
    head's predicted values (``num_labels`` 1). With ``text_pairs`` each example is the pair ``(texts[i],
    text_pairs[i])``, encoded as fine-tuning encoded it (:func:`bert_pipeline.tasks.sequence.encode_sequences`:
    ``token_type_ids`` 0 then 1, the longer segment truncated first). Texts are batched by length
    (``batch_size`` at a time, padded to the longest in the batch), so little compute goes to padding."""
    import torch

    with torch.no_grad():
        lengths = [len(t) + (len(text_pairs[i]) if text_pairs is not None else 0) for i, t in enumerate(texts)]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])
        out = torch.zeros(len(texts), pred.model.config.num_labels)
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            args = ([texts[j] for j in idx],) + (([text_pairs[j] for j in idx],) if text_pairs is not None else ())
            enc = pred.tokenizer(*args, padding=True, truncation="longest_first" if text_pairs is not None else True,
                                 max_length=max_length(pred, max_seq_length), return_tensors="pt")
            out[idx] = pred.model(**enc).logits.float()
        return out


def class_probabilities(pred, texts: Sequence[str], batch_size: int = 32,
                        max_seq_length: int = 128) -> torch.Tensor:
    """Softmax class probabilities, ``(len(texts), num_labels)`` float32, in the order of ``texts``
    (:func:`sequence_outputs`: each text read up to ``max_seq_length`` tokens, capped at the model's
    ``max_position_embeddings``, as fine-tuning read it; batched by length, so the result does not depend on the
    batching)."""
    import torch

    return torch.softmax(sequence_outputs(pred, texts, batch_size, max_seq_length), dim=-1)


def classify(pred, texts: Sequence[str], batch_size: int = 32, max_seq_length: int = 128,
             text_pairs: Sequence[str] | None = None) -> list[dict]:
    """``[{"label", "probability", "tokens", "truncated"}]`` per text: the arg-max class, its softmax probability,
    the text's length in tokens and whether the model read only its first ``max_seq_length`` tokens (capped at the
    model's ``max_position_embeddings``): a long text is classified on its beginning, and the output says so. With
    ``text_pairs`` (a pair classifier) each input is the pair ``(texts[i], text_pairs[i])``."""
    import torch

    limit = max_length(pred, max_seq_length)
    counts = token_counts(pred, texts, text_pairs)
    probs = torch.softmax(sequence_outputs(pred, texts, batch_size, max_seq_length, text_pairs), dim=-1)
    id2label = pred.model.config.id2label
    return [{"label": id2label[int(p.argmax())], "probability": round(float(p.max()), 4), "tokens": n,
             "truncated": n > limit} for p, n in zip(probs, counts, strict=True)]


class SequenceKind(TaskKind):
    """A kind whose model is a sequence classifier (``AutoModelForSequenceClassification``, or the family's
    mean-pooling class): one output row per example."""

    pipeline_tag = "text-classification"
    auto_class = "AutoModelForSequenceClassification"
    head = "sequence-classification"
    per_example = True
    pooled = True
    accepts_pair = True
    objective_text = "cross-entropy over the labels"
    predict_example = '"a gripping, beautifully acted film"'
    predict_note = "label and probability"
    pairs = False
    """True when every example is a text pair (``text``, ``text_pair``)."""

    def has_pair(self, columns: Sequence[str] = ()) -> bool:
        """True when examples are text pairs: always for a pair kind, else when the data has ``text_pair``."""
        return self.pairs

    def split_stats(self, ds):
        entry = self.label_stats(ds)
        lens = [len(t.split()) for t in ds["text"]]
        if "text_pair" in ds.column_names:
            entry["avg_pair_words"] = round(sum(len(t.split()) for t in ds["text_pair"]) / max(len(ds), 1), 2)
        entry["avg_words"] = round(sum(lens) / max(len(lens), 1), 2)
        return entry

    def label_stats(self, ds) -> dict[str, Any]:
        """What a split's labels look like (:meth:`split_stats`)."""
        raise NotImplementedError

    def encode_split(self, tokenizer, ds: Dataset, max_length: int) -> Any:
        """One split encoded (:func:`encode_sequences`): pairs when :meth:`has_pair` says so, else single texts."""
        pairs = list(ds["text_pair"]) if self.has_pair(ds.column_names) else None
        return encode_sequences(tokenizer, list(ds["text"]), pairs, max_length)

    def labels(self, ds: Dataset) -> list[Any]:
        """The gold label per example, as the head's loss reads it."""
        return list(ds["label"])

    def encode_train(self, tokenizer, ds: Dataset, task: dict[str, Any]) -> list[dict[str, list[int]]]:
        enc = self.encode_split(tokenizer, ds, task["max_length"])
        enc["labels"] = self.labels(ds)
        return rows(enc)

    def model_class(self, config, pooling: str):
        from bert_pipeline.model.heads import sequence_classifier_class

        config.classifier_pooling = pooling
        return sequence_classifier_class(pooling, config.model_type)

    def prediction(self, output: np.ndarray) -> Any:
        """One example's prediction from its output row ``(num_labels,)``."""
        raise NotImplementedError

    def scorer(self, tokenizer, ds: Dataset, task: dict[str, Any], label_names: Sequence[str] | None,
               forward: Forward) -> HeldoutScorer:
        from transformers import DataCollatorWithPadding

        collate = DataCollatorWithPadding(tokenizer, return_tensors="pt")
        enc = self.encode_split(tokenizer, ds, task["max_length"])
        feats = [{k: enc[k][i] for k in enc} for i in range(len(ds))]
        return HeldoutScorer(self.labels(ds), lambda model: [self.prediction(x) for x in forward(model, feats, collate)],
                             lambda gold, pred: self.metrics(gold, pred, label_names))

    def encode_inputs(self, tokenizer, examples, input_names, max_length, doc_stride):
        """One window per text; a text pair (``text_pair`` in every input) encoded as fine-tuning encodes pairs
        (:func:`encode_sequences`: ``token_type_ids`` 0 then 1)."""
        from bert_pipeline.errors import PipelineError

        pairs = [str(ex["text_pair"]) for ex in examples] if any("text_pair" in ex for ex in examples) else None
        if pairs is not None and not all("text_pair" in ex for ex in examples):
            raise PipelineError("check inputs: some have text_pair and some do not; a pair classifier reads "
                                "text and text_pair in every input")
        enc = encode_sequences(tokenizer, [str(ex["text"]) for ex in examples], pairs, max_length)
        return EncodedInputs(self, [{k: enc[k][i] for k in input_names} for i in range(len(examples))],
                             len(examples))

    def window_predictions(self, enc, logits, n_best, max_answer_length):
        """The arg-max label id of each sentence."""
        return [int(np.argmax(x)) for x in logits["logits"]]

    def serve(self, pred, texts, request: ServeRequest) -> list[dict[str, Any]]:
        """:func:`classify` each text (or pair, with ``request.text_pair``)."""
        pairs = [request.text_pair] * len(texts) if request.text_pair is not None else None
        return classify(pred, texts, max_seq_length=request.max_seq_length, text_pairs=pairs)

    def soft_target_loss(self, student_logits, teacher_logits, mask, temperature: float):
        """One distribution per example: ``(batch, num_labels)`` logits (``mask`` unused)."""
        from bert_pipeline.model.losses import kl_loss

        check_temperature(temperature)
        return kl_loss(student_logits, teacher_logits, temperature)

    def hard_target_loss(self, student_logits, labels):
        """Cross-entropy of ``labels`` ``(batch,)``."""
        return masked_cross_entropy(student_logits, labels)

    def head_text(self, pooling: str | None, label_names: Sequence[str]) -> str:
        pool = "mean of the last hidden states" if pooling == "mean" else "the `[CLS]` pooler output"
        return f"sequence classification{self._inputs_text()}: {pool} -> linear over {self._outputs_text(label_names)}"

    def _inputs_text(self) -> str:
        return ""

    def _outputs_text(self, label_names: Sequence[str]) -> str:
        return f"{len(label_names)} labels"
