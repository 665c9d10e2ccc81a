"""Statistics over a task's per-example results: the paired bootstrap of one model's score as a share of another's
(:func:`paired_bootstrap_share`). Each kind's own metrics (accuracy and macro-F1, Pearson/Spearman/MSE, seqeval
entity F1, SQuAD EM/F1) are its module's in :mod:`bert_pipeline.tasks`.

Shares are fractions (not percentages).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


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
