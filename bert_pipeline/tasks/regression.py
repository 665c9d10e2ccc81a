"""``regression``: one text (and optionally ``text_pair``) with a float ``label``; ``[CLS]`` -> Linear with one
output, mean squared error (Hugging Face ``problem_type="regression"``), scored by Pearson (main) and Spearman
correlation and MSE (as GLUE scores STS-B, Wang et al. 2019). Task-specific distillation does not serve it: one
float has no distribution to match."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from datasets import Dataset

from bert_pipeline.tasks.base import max_length, token_counts
from bert_pipeline.tasks.sequence import SequenceKind, sequence_outputs


def regression_metrics(labels: Sequence[float], preds: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman correlation (``scipy.stats``) and mean squared error of float predictions, as GLUE
    scores STS-B (Wang et al. 2019). A constant prediction or target has no correlation: 0.0 is reported.

    Returns:
        ``{"pearson", "spearman", "mse"}``.
    Raises:
        ValueError: empty or unequal inputs.
    """
    from scipy.stats import pearsonr, spearmanr

    if not labels or len(labels) != len(preds):
        raise ValueError(f"need equal, non-empty label and prediction lists, got {len(labels)} and {len(preds)}")
    y, p = np.asarray(labels, dtype=np.float64), np.asarray(preds, dtype=np.float64)
    constant = len(y) < 2 or np.ptp(y) == 0 or np.ptp(p) == 0
    pearson = 0.0 if constant else float(pearsonr(y, p)[0])
    spearman = 0.0 if constant else float(spearmanr(y, p)[0])
    return {"pearson": pearson, "spearman": spearman, "mse": float(np.mean((y - p) ** 2))}


class RegressionKind(SequenceKind):
    """One float per example; pairs when the data has a ``text_pair`` column."""

    name = "regression"
    main_metric = "pearson"
    problem_type = "regression"
    distillable = False
    user_options = ("text_pair_column",)
    report_data_text = "regression (float label)"
    transformers_flavour = False  # a value out: the flavour's pipeline gives labels
    objective_text = "mean squared error"
    predict_note = "the predicted value"

    def has_pair(self, columns: Sequence[str] = ()) -> bool:
        return "text_pair" in columns

    def read_user_files(self, spec, paths):
        """CSV/JSONL files with ``spec.text_column`` (and ``spec.text_pair_column``, if given) and a numeric
        ``spec.label_column``."""
        from datasets import DatasetDict

        from bert_pipeline.data.task_loaders import load_classification_file

        return DatasetDict({s: load_classification_file(p, spec.text_column, spec.label_column, spec.text_pair_column,
                                                        regression=True) for s, p in paths.items()}), {}

    def label_stats(self, ds):
        targets = np.asarray(ds["label"], dtype=np.float64)
        return {"label_mean": round(float(targets.mean()), 4) if len(targets) else 0.0,
                "label_std": round(float(targets.std()), 4) if len(targets) else 0.0}

    def labels(self, ds: Dataset) -> list[Any]:
        return [float(x) for x in ds["label"]]

    def label_config(self, label_names):
        return {"num_labels": 1, "problem_type": self.problem_type}

    def model_class(self, config, pooling: str):
        config.task_kind = self.name  # serving reads it: one value out
        return super().model_class(config, pooling)

    def serve(self, pred, texts, request):
        """``{"value", "tokens", "truncated"}`` per text (or pair, with ``request.text_pair``): the predicted float."""
        pairs = [request.text_pair] * len(texts) if request.text_pair is not None else None
        limit = max_length(pred, request.max_seq_length)
        outputs = sequence_outputs(pred, texts, max_seq_length=request.max_seq_length, text_pairs=pairs)
        return [{"value": round(float(o[0]), 4), "tokens": n, "truncated": n > limit}
                for o, n in zip(outputs, token_counts(pred, texts, pairs), strict=True)]

    def prediction(self, output: np.ndarray) -> float:
        return float(output[0])

    def metrics(self, references, predictions, label_names=None) -> dict[str, float]:
        return regression_metrics(references, predictions)

    interval_metrics = ("pearson", "mse")
    """Spearman's correlation ranks the whole sample, so no per-example sum gives it: it has no interval."""

    def example_columns(self, references, predictions, label_names):
        """``label`` and ``prediction`` (float64)."""
        return {"label": np.asarray(references, dtype=np.float64),
                "prediction": np.asarray(predictions, dtype=np.float64)}

    def example_sums(self, columns, label_names):
        """The moments Pearson's r reads (``x``, ``y``, ``xx``, ``yy``, ``xy``, centred on the split's means so
        the sums lose no precision; r does not change with a shift) and the squared error ``se``."""
        y, p = columns["label"], columns["prediction"]
        x, t = p - p.mean(), y - y.mean()
        return {"x": x, "y": t, "xx": x * x, "yy": t * t, "xy": x * t, "se": (y - p) ** 2}

    def metrics_from_sums(self, sums, n, label_names):
        """Pearson's r from the moments (0 where either side is constant, as :func:`regression_metrics`) and the
        mean squared error."""
        sxx = sums["xx"] - sums["x"] ** 2 / n
        syy = sums["yy"] - sums["y"] ** 2 / n
        sxy = sums["xy"] - sums["x"] * sums["y"] / n
        den = np.sqrt(np.clip(sxx, 0, None) * np.clip(syy, 0, None))
        # a spread within rounding of 0 is a constant side: no correlation, as regression_metrics reports
        flat = (sxx <= 1e-12 * np.maximum(sums["xx"], 1e-300)) | (syy <= 1e-12 * np.maximum(sums["yy"], 1e-300))
        pearson = np.divide(sxy, den, out=np.zeros(np.shape(den)), where=(den > 0) & ~flat)
        return {"pearson": np.clip(pearson, -1.0, 1.0), "mse": sums["se"] / n}

    def _inputs_text(self) -> str:
        return " of a text"

    def _outputs_text(self, label_names) -> str:
        return "one float (regression)"


KIND = RegressionKind()
