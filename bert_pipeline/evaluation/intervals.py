"""Paired bootstrap intervals from per-example records (:mod:`bert_pipeline.evaluation.examples`): a score, a
difference (a gain, a challenger minus the champion) or a ratio (a student's share), each with its interval.

How it resamples (Efron and Tibshirani 1993, ch. 13, the percentile interval, and ch. 13.5 for ``basic``):

- **clusters, not examples**: examples that share a source article (or film) are drawn together (the cluster
  bootstrap, Davison and Hinkley 1997, §3.8): drawing them one by one as if independent makes the interval too
  narrow. With one example per cluster it is the ordinary bootstrap, drawn exactly as ``scipy.stats.bootstrap``
  draws it (``rng.integers(0, n, (resamples, n))``), so its bounds equal scipy's (tests/test_intervals.py).
- **one draw matrix per split** (:class:`ClusterDraws`), shared by every model scored on it: every contrast on a
  split is paired (Koehn 2004): the examples both models find hard cancel.
- **corpus metrics recomputed per draw**: each draw sums the kind's per-example statistics
  (:meth:`bert_pipeline.tasks.base.TaskKind.example_sums`) and recomputes the metric from the sums
  (:meth:`~bert_pipeline.tasks.base.TaskKind.metrics_from_sums`): entity micro-F1 from summed tp/fp/fn, not a
  mean of per-sentence F1s. One matrix product per model and split: ``counts (resamples, clusters) @ sums
  (clusters, statistics)``. A retrieval record (kind ``retrieval``: each query's gold rank) is summed by
  :data:`bert_pipeline.evaluation.retrieval.STATISTICS`, which has the same methods (:func:`statistics_of`).
- **seeds as a second source** (the multi-bootstrap of Sellam et al. 2022, §3): where a model has several seeds,
  each draw also resamples its seeds and averages their scores on the drawn examples; two sides with the same
  number of seeds draw the same seed positions (seeds sorted), so they are paired on seeds too. The point estimate
  is the mean over seeds; :attr:`Estimate.seed_values` keeps the raw seed range beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, SplitInfo

METHODS = ("percentile", "basic")
"""The interval methods: ``percentile`` (the draws' quantiles) and ``basic`` (reflected about the estimate)."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its interval: ``point``, ``low``, ``high`` (the metric's units: fractions for
    scores and differences, a fraction of the reference for a ratio); ``sources``: what was resampled
    (``examples`` or ``examples+seeds``)."""

    point: float
    low: float
    high: float
    sources: str = "examples"

    @property
    def half_width(self) -> float:
        """Half the interval's width: a difference smaller than this cannot be told from the resampling noise."""
        return (self.high - self.low) / 2

    def excludes(self, value: float = 0.0) -> bool:
        """Whether ``value`` lies outside the interval (a difference different from 0 at this confidence)."""
        return value < self.low or value > self.high

    def rounded(self, digits: int = 6) -> Interval:
        """The same interval with each bound rounded (for byte-identical metrics files)."""
        return Interval(round(self.point, digits), round(self.low, digits), round(self.high, digits), self.sources)


@dataclass(frozen=True)
class Estimate:
    """One model's metric on one split: ``point`` (the mean over seeds of the whole split's metric), ``draws``
    ``(resamples,)`` float64 (the metric on each draw, seeds resampled where there are several), ``seed_values``
    (each seed's whole-split metric, seeds ascending), and the split's ``hash`` (what a contrast checks)."""

    point: float
    draws: np.ndarray
    seed_values: tuple[float, ...]
    hash: str

    @property
    def sources(self) -> str:
        return "examples+seeds" if len(self.seed_values) > 1 else "examples"


class ClusterDraws:
    """One split's bootstrap draws: ``counts`` ``(resamples, clusters)`` float64, how often each cluster is drawn
    (clusters numbered in order of first appearance), and ``index`` ``(n,)``, each example's cluster.

    Args:
        clusters: each example's cluster label, in the split's order.
        resamples: draws (>= 1); ``seed``: numpy's ``default_rng`` seed (an int or a sequence of ints).
    """

    def __init__(self, clusters: Sequence[str], resamples: int, seed: int | Sequence[int]):
        labels: dict[str, int] = {}
        self.index = np.fromiter((labels.setdefault(c, len(labels)) for c in clusters), dtype=np.int64,
                                 count=len(clusters))
        k = len(labels)
        if k == 0:
            raise ExamplesError("a split with no examples has no bootstrap")
        pick = np.random.default_rng(seed).integers(0, k, size=(resamples, k))
        flat = (pick + np.arange(resamples)[:, None] * k).ravel()
        self.counts = np.bincount(flat, minlength=resamples * k).reshape(resamples, k).astype(np.float64)
        self.clusters = k

    @property
    def n(self) -> int:
        return len(self.index)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per draw the sum of ``values`` ``(n, statistics)`` over the drawn examples: ``(resamples, statistics)``."""
        per_cluster = np.zeros((self.clusters, values.shape[1]), dtype=np.float64)
        np.add.at(per_cluster, self.index, values)
        return self.counts @ per_cluster

    def sizes(self) -> np.ndarray:
        """How many examples each draw holds ``(resamples,)`` (clusters differ in size, so it varies)."""
        return self.counts @ np.bincount(self.index, minlength=self.clusters).astype(np.float64)


class Bootstrap:
    """The paired bootstrap of one report or comparison: settings, and one :class:`ClusterDraws` per split (by
    its hash), so every model scored on a split is resampled with the same draws.

    Args:
        resamples: draws per split (10,000 by default); ``confidence``: in (0, 1); ``seed``: the draws' seed;
        method: one of :data:`METHODS`.
    Raises:
        ValueError: a setting out of range.
    """

    def __init__(self, resamples: int = 10_000, confidence: float = 0.95, seed: int = 0, method: str = "percentile"):
        if resamples < 1:
            raise ValueError(f"resamples: expected >= 1, got {resamples}")
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence: expected a value in (0, 1), got {confidence}")
        if method not in METHODS:
            raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
        self.resamples, self.confidence, self.seed, self.method = resamples, confidence, seed, method
        self._draws: dict[str, ClusterDraws] = {}

    def split_seed(self, info: SplitInfo) -> list[int]:
        """The seed of a split's draws: the settings' ``seed`` with the split's hash, so the draws of different
        splits are independent (an average over tasks resamples each task apart) and reproducible."""
        return [self.seed, int(info.hash[:15], 16)]

    def draws(self, info: SplitInfo) -> ClusterDraws:
        """The split's :class:`ClusterDraws` (made once per split hash)."""
        if info.hash not in self._draws:
            self._draws[info.hash] = ClusterDraws(info.clusters, self.resamples, self.split_seed(info))
        return self._draws[info.hash]

    def seed_picks(self, m: int) -> np.ndarray:
        """Which of ``m`` seeds (positions, seeds ascending) each draw averages ``(resamples, m)``: the same for
        every side with ``m`` seeds, so two such sides are paired on seeds."""
        return np.random.default_rng([self.seed, m]).integers(0, m, size=(self.resamples, m))

    # ------------------------------------------------------------------------------------------- estimates
    def estimates(self, record: ExampleRecord, split: str, run: str = "full") -> dict[str, Estimate]:
        """Each of the kind's :attr:`~bert_pipeline.tasks.base.TaskKind.interval_metrics` for ``record``'s
        ``run`` on ``split``, over all its seeds (the kind's statistics: :func:`statistics_of`).

        Raises:
            ExamplesError: no such run in the record.
            ValueError: a record kind that is neither a task kind nor retrieval's.
        """
        seeds = record.seeds(split, run)
        if not seeds:
            raise ExamplesError(f"no {run} run on {split} in the per-example record")
        kind = statistics_of(record.kind)
        info = self.draws(record.splits[split])
        n_draw = info.sizes()
        n_all = float(info.n)
        per_seed_draws: dict[str, list[np.ndarray]] = {}
        per_seed_point: dict[str, list[float]] = {}
        for seed in seeds:
            sums = kind.example_sums(record.runs[(split, run, seed)], record.label_names)
            names = list(sums)
            values = np.stack([np.asarray(sums[k], dtype=np.float64) for k in names], axis=1)
            drawn = info.sums(values)
            whole = values.sum(axis=0)
            m_draw = kind.metrics_from_sums({k: drawn[:, j] for j, k in enumerate(names)}, n_draw, record.label_names)
            m_all = kind.metrics_from_sums({k: np.asarray(whole[j]) for j, k in enumerate(names)}, np.asarray(n_all),
                                           record.label_names)
            for metric, v in m_draw.items():
                per_seed_draws.setdefault(metric, []).append(np.asarray(v, dtype=np.float64))
                per_seed_point.setdefault(metric, []).append(float(m_all[metric]))
        out = {}
        picks = self.seed_picks(len(seeds)) if len(seeds) > 1 else None
        for metric, rows in per_seed_draws.items():
            stacked = np.stack(rows)  # (seeds, resamples)
            draws = stacked[0] if picks is None else stacked[picks, np.arange(self.resamples)[:, None]].mean(axis=1)
            points = per_seed_point[metric]
            out[metric] = Estimate(float(np.mean(points)), draws, tuple(points), record.splits[split].hash)
        return out

    # ------------------------------------------------------------------------------------------- intervals
    def _bounds(self, point: float, draws: np.ndarray, confidence: float | None) -> tuple[float, float]:
        level = self.confidence if confidence is None else confidence
        alpha = (1.0 - level) / 2
        finite = draws[np.isfinite(draws)]
        if finite.size == 0:
            return float("nan"), float("nan")
        low, high = np.quantile(finite, [alpha, 1.0 - alpha])
        if self.method == "basic":
            low, high = 2 * point - high, 2 * point - low
        return float(low), float(high)

    def score(self, est: Estimate, confidence: float | None = None) -> Interval:
        """The interval of one model's metric."""
        return Interval(est.point, *self._bounds(est.point, est.draws, confidence), est.sources)

    def difference(self, a: Estimate, b: Estimate, confidence: float | None = None) -> Interval:
        """``a - b`` on the same split, paired draw by draw.

        Raises:
            ExamplesError: the two were scored on different examples (split hashes differ).
        """
        _check_pair(a, b)
        point = a.point - b.point
        return Interval(point, *self._bounds(point, a.draws - b.draws, confidence), _sources(a, b))

    def ratio(self, a: Estimate, b: Estimate, confidence: float | None = None) -> Interval:
        """``a / b`` (a student's share of its teacher's score) on the same split, paired draw by draw; draws on
        which ``b`` is 0 are left out (the ratio is undefined there).

        Raises:
            ExamplesError: different examples (split hashes differ), or ``b`` is 0 on the whole split.
        """
        share = ratio_estimate(a, b)
        return Interval(share.point, *self._bounds(share.point, share.draws, confidence), _sources(a, b))

    def share_at_least(self, a: Estimate, b: Estimate, goal: float) -> float:
        """The fraction of draws on which ``a / b`` is at least ``goal`` (draws with ``b`` = 0 left out).

        Raises:
            ExamplesError: as :func:`ratio_estimate`.
        """
        draws = ratio_estimate(a, b).draws
        ok = np.isfinite(draws)
        return float(np.mean(draws[ok] >= goal)) if ok.any() else float("nan")


def ratio_estimate(a: Estimate, b: Estimate) -> Estimate:
    """``a / b`` as an estimate of its own: the whole split's ratio, the ratio on each draw (NaN where ``b`` is 0
    on the draw: undefined there), and the per-seed ratios where both have the same number of seeds.

    Raises:
        ExamplesError: different examples (split hashes differ), or ``b`` is 0 on the whole split.
    """
    _check_pair(a, b)
    if b.point == 0:
        raise ExamplesError("the reference scores 0 on the whole split: a share of it is undefined")
    draws = np.where(b.draws != 0, a.draws / np.where(b.draws != 0, b.draws, 1.0), np.nan)
    seeds = (tuple(x / y if y else float("nan") for x, y in zip(a.seed_values, b.seed_values, strict=True))
             if len(a.seed_values) == len(b.seed_values) else ())
    return Estimate(a.point / b.point, draws, seeds, a.hash)


def statistics_of(kind: str) -> Any:
    """What turns a record of kind ``kind`` into summed statistics and metrics (``example_sums``,
    ``metrics_from_sums``, ``interval_metrics``): the task kind of that name (:func:`bert_pipeline.tasks.get`), or
    for a retrieval record (kind ``retrieval``, not a task kind) the per-query statistics of
    :data:`bert_pipeline.evaluation.retrieval.STATISTICS`.

    Raises:
        ValueError: an unknown kind (the message lists the task kinds).
    """
    if kind == "retrieval":
        from bert_pipeline.evaluation.retrieval import STATISTICS

        return STATISTICS
    from bert_pipeline import tasks

    return tasks.get(kind)


def _check_pair(a: Estimate, b: Estimate) -> None:
    if a.hash != b.hash:
        raise ExamplesError(f"the two were scored on different examples (split hashes {a.hash[:12]} vs "
                            f"{b.hash[:12]}): not paired")


def _sources(a: Estimate, b: Estimate) -> str:
    return "examples+seeds" if "seeds" in a.sources or "seeds" in b.sources else "examples"
