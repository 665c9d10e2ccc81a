"""``multi_label_classification``: one text (``text``) with any number of labels (``label``, a list of ClassLabel
ids, possibly empty); ``[CLS]`` (or mean) -> Linear with one logit per label, each read through a sigmoid and
trained with binary cross-entropy (Hugging Face ``problem_type="multi_label_classification"``, as for GoEmotions,
Demszky et al. 2020). A label is predicted when its probability is above 0.5 (logit > 0). Scored by micro-F1
(main: over every example's label decisions), macro-F1 (unweighted mean over the labels) and subset accuracy (the
predicted set equals the gold set), as scikit-learn's ``f1_score`` and ``accuracy_score`` define them.

A user task gives the labels of an example in its ``label_column`` separated by ``label_separator`` (CSV, e.g.
``sports|politics``; empty for none) or, in JSONL, as a list of strings. Task-specific distillation does not serve
the kind yet (its soft targets would be one Bernoulli per label).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bert_pipeline.tasks.base import ServeRequest, f1_from_counts, max_length, rows, token_counts
from bert_pipeline.tasks.sequence import SequenceKind

if TYPE_CHECKING:
    from datasets import Dataset

log = logging.getLogger(__name__)

THRESHOLD_LOGIT = 0.0
"""A label is predicted when its logit is above this: sigmoid(0) = 0.5."""


def multi_label_metrics(labels: Sequence[Sequence[int]], preds: Sequence[Sequence[int]],
                        num_labels: int) -> dict[str, float]:
    """Micro-F1, macro-F1 and subset accuracy of predicted label sets against gold label sets.

    Micro-F1 sums true positives, false positives and false negatives over every (example, label) decision; macro-F1
    averages each label's F1, a label absent from both gold and predictions counting 0 (scikit-learn's
    ``zero_division=0``); subset accuracy is the share of examples whose predicted set equals the gold set.

    Args:
        labels, preds: per example the label ids (any order, no repeats), ids in ``range(num_labels)``.
    Returns:
        ``{"micro_f1", "macro_f1", "subset_accuracy"}`` as fractions; an F1 with nothing gold or predicted is 0.
    Raises:
        ValueError: empty or unequal inputs, or an id outside ``range(num_labels)``.
    """
    if not labels or len(labels) != len(preds):
        raise ValueError(f"need equal, non-empty label and prediction lists, got {len(labels)} and {len(preds)}")
    gold, pred = multi_hot(labels, num_labels), multi_hot(preds, num_labels)
    tp = (gold & pred).sum(axis=0)
    fp = (~gold & pred).sum(axis=0)
    fn = (gold & ~pred).sum(axis=0)

    def f1(t, p, n):
        return float(2 * t / (2 * t + p + n)) if t + p + n else 0.0
    return {"micro_f1": f1(tp.sum(), fp.sum(), fn.sum()),
            "macro_f1": float(np.mean([f1(t, p, n) for t, p, n in zip(tp, fp, fn, strict=True)])),
            "subset_accuracy": float((gold == pred).all(axis=1).mean())}


def multi_hot(label_sets: Sequence[Sequence[int]], num_labels: int) -> np.ndarray:
    """Label-id lists as a bool matrix ``(examples, num_labels)``.

    Raises:
        ValueError: an id outside ``range(num_labels)``.
    """
    out = np.zeros((len(label_sets), num_labels), dtype=bool)
    for i, ids in enumerate(label_sets):
        for j in ids:
            if not 0 <= int(j) < num_labels:
                raise ValueError(f"label id {j} outside 0..{num_labels - 1}")
            out[i, int(j)] = True
    return out


SEPARATORS = ("|", ",", ";")
"""Separators a label list is commonly written with: a label holding another than the one given is reported."""


def parse_labels(value: Any, separator: str) -> list[str]:
    """One example's labels: a list of strings as given (JSONL), or a string split at ``separator`` (CSV; empty or
    null for none), blanks dropped, first occurrences kept in order.

    Raises:
        ValueError: a value that is neither a string, null nor a list of strings.
    """
    if isinstance(value, list):
        if not all(isinstance(p, str) for p in value):
            raise ValueError(f"expected a list of label strings, got {value!r}")
        parts = value
    elif value is None or isinstance(value, str):
        parts = (value or "").split(separator)
    else:
        raise ValueError(f"expected labels separated by {separator!r} or a list of strings, got {value!r}")
    return list(dict.fromkeys(p.strip() for p in parts if p.strip()))


class MultiLabelKind(SequenceKind):
    """Any number of labels per text: a sigmoid per label."""

    name = "multi_label_classification"
    main_metric = "micro_f1"
    problem_type = "multi_label_classification"
    distillable = False
    accepts_pair = False
    user_options = ("label_separator",)
    transformers_flavour = False  # the flavour's text-classification pipeline takes a softmax over the labels
    objective_text = "binary cross-entropy per label (a sigmoid per label)"
    predict_note = "every label with probability above 0.5, most probable first"

    # ----------------------------------------------------------------------------------------------- data
    def read_user_files(self, spec, paths):
        """CSV/JSONL files with ``spec.text_column`` and ``spec.label_column`` (labels separated by
        ``spec.label_separator``, or a JSONL list); the label names are the sorted distinct labels of all splits.

        Raises:
            TaskDataError: a bad row (one line naming the file and row), or fewer than two labels in all.
        """
        from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
        from datasets import Sequence as HFSequence

        from bert_pipeline.data.task_features import TaskDataError
        from bert_pipeline.data.task_loaders import read_rows

        read = {}
        for split, p in paths.items():
            found, unit = read_rows(Path(p), [spec.text_column, spec.label_column])
            read[split] = []
            for i, (text, value) in found:
                if not isinstance(text, str) or not text.strip():
                    raise TaskDataError(f"{p}: {unit} {i}: empty or non-text {spec.text_column!r}")
                try:
                    read[split].append((text, parse_labels(value, spec.label_separator)))
                except ValueError as exc:
                    raise TaskDataError(f"{p}: {unit} {i}: {spec.label_column!r}: {exc}") from None
        names = sorted({name for part in read.values() for _, labels in part for name in labels})
        for name in names:  # a likely wrong separator: kept (a label may hold one), but said
            other = [s for s in SEPARATORS if s != spec.label_separator and s in name]
            if other:
                log.warning("%s: label %r holds %r; are the labels separated by %r rather than %r "
                            "(label_separator)?", spec.name, name, other[0], other[0], spec.label_separator)
        trained = {name for _, labels in read["train"] for name in labels}
        unseen = [name for name in names if name not in trained]
        if unseen:
            log.warning("%s: label(s) %s occur only outside the training split: the model cannot learn them",
                        spec.name, ", ".join(map(repr, unseen)))
        if len(names) < 2:
            raise TaskDataError(f"{paths['train']}: column {spec.label_column!r} holds {len(names)} distinct "
                                f"label(s) in all splits; expected at least 2 (separated by "
                                f"{spec.label_separator!r})")
        features = Features({"text": Value("string"), "label": HFSequence(ClassLabel(names=names))})
        index = {name: i for i, name in enumerate(names)}
        dd = DatasetDict({split: Dataset.from_dict({"text": [t for t, _ in part],
                                                    "label": [sorted(index[n] for n in labels) for _, labels in part]},
                                                   features=features) for split, part in read.items()})
        return dd, {"label_names": names}

    def hub_info(self, dd, spec):
        """The label names of a hub dataset whose ``label_column`` is a list of class labels.

        Raises:
            PipelineError: a column that is missing or not a list of class labels (named with its feature type).
        """
        from bert_pipeline.errors import PipelineError

        feature = dd["train"].features.get(spec.label_column)
        names = getattr(getattr(feature, "feature", None), "names", None)
        if spec.label_column != "label" or not names:
            raise PipelineError(f"prepare_tasks.user_tasks[{spec.name}].hf_dataset: a {self.name} dataset needs a "
                                f"'label' column of lists of class labels (Sequence(ClassLabel)); got "
                                f"{spec.label_column!r}: {feature!r}. Save it as CSV/JSONL files per split instead")
        return {"label_names": list(names)}

    def label_stats(self, ds):
        names = ds.features["label"].feature.names
        counts = np.zeros(len(names), dtype=int)
        none = 0
        for labels in ds["label"]:
            counts[list(labels)] += 1
            none += not labels
        return {"label_counts": {name: int(c) for name, c in zip(names, counts, strict=True)}, "no_label": none}

    # ------------------------------------------------------------------------------------- model and scoring
    def encode_train(self, tokenizer, ds: Dataset, task: dict[str, Any]) -> list[dict[str, list[int]]]:
        """Labels as multi-hot float vectors ``(num_labels,)``: what the model's binary cross-entropy reads."""
        enc = self.encode_split(tokenizer, ds, task["max_length"])
        hot = multi_hot(self.labels(ds), ds.features["label"].feature.num_classes)
        enc["labels"] = hot.astype(np.float32).tolist()
        return rows(enc)

    def labels(self, ds: Dataset) -> list[Any]:
        return [sorted(int(j) for j in labels) for labels in ds["label"]]

    def label_config(self, label_names):
        return {**super().label_config(label_names), "problem_type": self.problem_type}

    def model_class(self, config, pooling: str):
        config.task_kind = self.name  # serving reads it: a sigmoid per label, not a softmax
        return super().model_class(config, pooling)

    def prediction(self, output: np.ndarray) -> list[int]:
        """The ids of the labels whose logit is above :data:`THRESHOLD_LOGIT`."""
        return np.flatnonzero(np.asarray(output) > THRESHOLD_LOGIT).tolist()

    def metrics(self, references, predictions, label_names=None) -> dict[str, float]:
        return multi_label_metrics(references, predictions, len(label_names))

    interval_metrics = ("micro_f1", "macro_f1", "subset_accuracy")

    def example_columns(self, references, predictions, label_names):
        """``gold`` and ``pred``: the label sets as bit masks over ``label_names`` (uint64 when up to 64 labels),
        else per label ``gold_j`` / ``pred_j`` (0/1)."""
        gold, pred = multi_hot(references, len(label_names)), multi_hot(predictions, len(label_names))
        if len(label_names) <= 64:
            weights = np.left_shift(np.uint64(1), np.arange(len(label_names), dtype=np.uint64))
            return {"gold": (gold.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64),
                    "pred": (pred.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)}
        return {**{f"gold_{j}": gold[:, j].astype(np.int64) for j in range(len(label_names))},
                **{f"pred_{j}": pred[:, j].astype(np.int64) for j in range(len(label_names))}}

    def example_sums(self, columns, label_names):
        """Per label ``tp_j`` / ``fp_j`` / ``fn_j`` and ``exact`` (the predicted set equals the gold set)."""
        k = len(label_names)
        if "gold" in columns:
            bits = np.left_shift(np.uint64(1), np.arange(k, dtype=np.uint64))
            gold = (columns["gold"].astype(np.uint64)[:, None] & bits) > 0
            pred = (columns["pred"].astype(np.uint64)[:, None] & bits) > 0
        else:
            gold = np.stack([columns[f"gold_{j}"] for j in range(k)], axis=1) > 0
            pred = np.stack([columns[f"pred_{j}"] for j in range(k)], axis=1) > 0
        out = {"exact": (gold == pred).all(axis=1).astype(np.float64)}
        for j in range(k):
            out[f"tp_{j}"] = (gold[:, j] & pred[:, j]).astype(np.float64)
            out[f"fp_{j}"] = (~gold[:, j] & pred[:, j]).astype(np.float64)
            out[f"fn_{j}"] = (gold[:, j] & ~pred[:, j]).astype(np.float64)
        return out

    def metrics_from_sums(self, sums, n, label_names):
        k = len(label_names)
        tp = sum(sums[f"tp_{j}"] for j in range(k))
        fp = sum(sums[f"fp_{j}"] for j in range(k))
        fn = sum(sums[f"fn_{j}"] for j in range(k))
        macro = sum(f1_from_counts(sums[f"tp_{j}"], sums[f"fp_{j}"], sums[f"fn_{j}"]) for j in range(k)) / k
        return {"micro_f1": f1_from_counts(tp, fp, fn), "macro_f1": macro, "subset_accuracy": sums["exact"] / n}

    # -------------------------------------------------------------------------------------------- serving
    def serve(self, pred, texts, request: ServeRequest) -> list[dict[str, Any]]:
        """``{"labels": [{"label", "probability"}], "tokens", "truncated"}`` per text: every label with probability
        above 0.5, most probable first (ties by label id)."""
        import torch

        from bert_pipeline.tasks.sequence import sequence_outputs

        limit = max_length(pred, request.max_seq_length)
        counts = token_counts(pred, texts)
        probs = torch.sigmoid(sequence_outputs(pred, texts, max_seq_length=request.max_seq_length)).numpy()
        id2label = pred.model.config.id2label
        out = []
        for p, n in zip(probs, counts, strict=True):
            chosen = sorted(np.flatnonzero(p > 0.5).tolist(), key=lambda j: (-p[j], j))
            out.append({"labels": [{"label": id2label[j], "probability": round(float(p[j]), 4)} for j in chosen],
                        "tokens": n, "truncated": n > limit})
        return out

    def window_predictions(self, enc, logits, n_best, max_answer_length):
        """Each sentence's predicted label ids."""
        return [self.prediction(x) for x in logits["logits"]]

    def _outputs_text(self, label_names) -> str:
        return f"{len(label_names)} labels, a sigmoid each (multi-label)"


KIND = MultiLabelKind()
