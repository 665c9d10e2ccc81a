"""``classification``: one text (``text``), a class label (``label``, ClassLabel); ``[CLS]`` (or mean) -> Linear,
cross-entropy (Devlin et al. 2019, §4.1); scored by accuracy (main) and macro-F1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bert_pipeline.tasks.base import f1_from_counts
from bert_pipeline.tasks.sequence import SequenceKind


def classification_metrics(labels: Sequence[int], preds: Sequence[int], num_labels: int) -> dict[str, float]:
    """Accuracy and macro-F1 (unweighted mean of per-class F1 over the ``num_labels`` classes; a class absent
    from both gold and predictions is skipped).

    Returns:
        ``{"accuracy", "macro_f1"}``.
    Raises:
        ValueError: empty or unequal inputs.
    """
    if not labels or len(labels) != len(preds):
        raise ValueError(f"need equal, non-empty label and prediction lists, got {len(labels)} and {len(preds)}")
    correct = sum(int(a == b) for a, b in zip(labels, preds, strict=True))
    f1s = []
    for c in range(num_labels):
        tp = sum(1 for a, b in zip(labels, preds, strict=True) if a == c and b == c)
        fp = sum(1 for a, b in zip(labels, preds, strict=True) if a != c and b == c)
        fn = sum(1 for a, b in zip(labels, preds, strict=True) if a == c and b != c)
        if tp + fp + fn == 0:
            continue
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return {"accuracy": correct / len(labels), "macro_f1": sum(f1s) / len(f1s) if f1s else 0.0}


class ClassificationKind(SequenceKind):
    """Single-label classification of one text: the label id with the highest logit."""

    name = "classification"
    main_metric = "accuracy"
    transformers_flavour = True

    def read_user_files(self, spec, paths):
        """CSV/JSONL files with ``spec.text_column`` and ``spec.label_column`` (and ``spec.text_pair_column`` for
        pairs); every split names the same labels.

        Raises:
            PipelineError: a split whose labels differ from the others'.
        """
        from datasets import DatasetDict

        from bert_pipeline.data.task_loaders import load_classification_file
        from bert_pipeline.errors import PipelineError

        pair = spec.text_pair_column if self.pairs else None
        parts = {s: load_classification_file(p, spec.text_column, spec.label_column, pair) for s, p in paths.items()}
        names = sorted({n for d in parts.values() for n in d.features["label"].names})
        for s, d in parts.items():
            if d.features["label"].names != names:
                raise PipelineError(f"{paths[s]}: labels {d.features['label'].names} differ from the other splits' {names}")
        return DatasetDict(parts), {"label_names": names}

    def hub_info(self, dd, spec):
        return {"label_names": dd["train"].features[spec.label_column].names}

    def label_stats(self, ds):
        from bert_pipeline.data.task_features import label_counts

        return {"label_counts": label_counts(ds, "label")}

    def prediction(self, output: np.ndarray) -> int:
        return int(np.argmax(output))

    def metrics(self, references, predictions, label_names=None) -> dict[str, float]:
        return classification_metrics(references, predictions, len(label_names))

    interval_metrics = ("accuracy", "macro_f1")

    def example_columns(self, references, predictions, label_names):
        """``gold`` and ``pred``: the label ids."""
        return {"gold": np.asarray(references, dtype=np.int64), "pred": np.asarray(predictions, dtype=np.int64)}

    def example_sums(self, columns, label_names):
        """``correct`` and, per class ``c``, ``tp_c`` / ``fp_c`` / ``fn_c`` (0 or 1 per example)."""
        gold, pred = columns["gold"], columns["pred"]
        out = {"correct": (gold == pred).astype(np.float64)}
        for c in range(len(label_names)):
            out[f"tp_{c}"] = ((gold == c) & (pred == c)).astype(np.float64)
            out[f"fp_{c}"] = ((gold != c) & (pred == c)).astype(np.float64)
            out[f"fn_{c}"] = ((gold == c) & (pred != c)).astype(np.float64)
        return out

    def metrics_from_sums(self, sums, n, label_names):
        """Accuracy, and macro-F1 over the classes present in the sample's gold or predictions
        (:func:`classification_metrics`)."""
        total, present = np.zeros(np.shape(n)), np.zeros(np.shape(n))
        for c in range(len(label_names)):
            tp, fp, fn = sums[f"tp_{c}"], sums[f"fp_{c}"], sums[f"fn_{c}"]
            total = total + f1_from_counts(tp, fp, fn)
            present = present + (tp + fp + fn > 0)
        macro = np.divide(total, present, out=np.zeros(np.shape(n)), where=present > 0)
        return {"accuracy": sums["correct"] / n, "macro_f1": macro}


KIND = ClassificationKind()
