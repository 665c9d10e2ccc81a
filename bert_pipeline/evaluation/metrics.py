"""Per-task metrics: accuracy and macro-F1, regression Pearson/Spearman/MSE, seqeval entity-level P/R/F1, SQuAD v1.1 EM and F1;
the paired bootstrap of one model's score as a share of another's (:func:`paired_bootstrap_share`).

All scores are fractions in ``[0, 1]`` (not percentages), except the correlations (``[-1, 1]``) and MSE (label units squared).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


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


def ner_metrics(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Entity-level precision/recall/F1 with ``seqeval`` (CoNLL-2000 style span matching): micro over all
    entities, and F1 per type as ``f1_TYPE``.

    Returns:
        ``{"precision", "recall", "f1", "f1_PERSON", ...}`` (types found in gold or predictions).
    """
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    out = {
        "precision": float(precision_score(gold, pred, zero_division=0)),
        "recall": float(recall_score(gold, pred, zero_division=0)),
        "f1": float(f1_score(gold, pred, zero_division=0)),
    }
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    for key, vals in report.items():
        if key not in ("micro avg", "macro avg", "weighted avg"):
            out[f"f1_{key}"] = float(vals["f1-score"])
    return out


# ------------------------------------------------------------------------------------- SQuAD v1.1
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 answer normalisation (Rajpurkar et al. 2016, official ``evaluate-v1.1.py``): lower-case,
    remove punctuation, remove the articles a/an/the, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, ground_truth: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def token_f1(prediction: str, ground_truth: str) -> float:
    """Bag-of-tokens F1 between normalised prediction and ground truth (0.0 when nothing overlaps)."""
    p = normalize_answer(prediction).split()
    g = normalize_answer(ground_truth).split()
    common = collections.Counter(p) & collections.Counter(g)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(p), overlap / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Mean over questions of the best exact match and F1 against any of the gold answers.

    Returns:
        ``{"exact_match", "f1"}`` as fractions.
    Raises:
        ValueError: unequal lengths or no questions.
    """
    if not predictions or len(predictions) != len(references):
        raise ValueError(f"need equal, non-empty lists, got {len(predictions)} and {len(references)}")
    em = sum(max(exact_match(p, g) for g in golds) for p, golds in zip(predictions, references, strict=True))
    f1 = sum(max(token_f1(p, g) for g in golds) for p, golds in zip(predictions, references, strict=True))
    return {"exact_match": em / len(predictions), "f1": f1 / len(predictions)}


@dataclass(frozen=True)
class ShareInterval:
    """``share``: the point estimate ``score(student) / score(teacher)`` on the whole split; ``low`` / ``high``: the
    percentile interval of the resampled shares at the requested confidence; ``at_least``: the fraction of resamples
    whose share is at least the ``goal`` given; ``resamples``: how many were drawn. All fractions, not percentages."""

    share: float
    low: float
    high: float
    at_least: float
    resamples: int


def paired_bootstrap_share(references: Sequence[Any], student: Sequence[Any], teacher: Sequence[Any],
                           score: Callable[[Sequence[Any], Sequence[Any]], float], *, resamples: int, seed: int,
                           confidence: float = 0.95, goal: float = 0.97) -> ShareInterval:
    """The paired bootstrap of a student's share of its teacher's score on one held-out split: draw the split's
    examples with replacement ``resamples`` times (numpy's generator seeded with ``seed``), score both models' per-example
    predictions on the same draw, and take the ratio (Efron and Tibshirani 1993, ch. 13, the percentile interval;
    Koehn 2004 pairs the systems on each draw, so the examples both find hard cancel). A corpus-level score such as
    entity-level F1 is recomputed on each draw, not averaged per example.

    Args:
        references: the gold value of each example; ``student`` / ``teacher``: each model's prediction per example,
            in the same order.
        score: ``(references, predictions) -> float``, the main metric (higher is better).
    Returns:
        :class:`ShareInterval`; a draw on which the teacher scores 0 is skipped (its share is undefined).
    Raises:
        ValueError: unequal or empty lists, ``resamples`` < 1, ``confidence`` outside (0, 1), or a teacher scoring 0 on
            the whole split or on every draw.
    """
    n = len(references)
    if n == 0 or len(student) != n or len(teacher) != n:
        raise ValueError(f"need equal, non-empty lists, got {n}, {len(student)} and {len(teacher)}")
    if resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need resamples >= 1 and 0 < confidence < 1, got {resamples} and {confidence}")
    whole = score(references, teacher)
    if whole == 0:
        raise ValueError("the teacher scores 0 on the whole split: its share is undefined")
    point = score(references, student) / whole
    rng = np.random.default_rng(seed)
    shares = []
    for _ in range(resamples):
        pick = rng.integers(0, n, size=n)
        refs = [references[i] for i in pick]
        base = score(refs, [teacher[i] for i in pick])
        if base != 0:
            shares.append(score(refs, [student[i] for i in pick]) / base)
    if not shares:
        raise ValueError("the teacher scores 0 on every draw: the share is undefined")
    tail = (1.0 - confidence) / 2 * 100
    low, high = np.percentile(shares, [tail, 100 - tail])
    return ShareInterval(float(point), float(low), float(high), float(np.mean(np.asarray(shares) >= goal)), len(shares))
