"""The intervals a report section's record carries beside its figures, from the per-example records
(:mod:`bert_pipeline.evaluation.examples`) of the members it compares, with the paired bootstrap
(:mod:`bert_pipeline.evaluation.intervals`): a member's score, the difference of two members scored on the same
held-out examples (a gain over scratch, a family against BERT), and their means over tasks.

What an interval resamples (its ``sources``): the test examples, whole clusters (source article, film) at a time,
and, where the members have several fine-tuning seeds, the seeds too (the multi-bootstrap): ``examples`` or
``examples+seeds``. A difference is paired twice: the same draws of examples for both sides (one draw matrix per
split) and the same seed positions (both sides must have the same seeds). A mean over tasks averages the tasks'
draws, each task's split drawn apart (:meth:`~bert_pipeline.evaluation.intervals.Bootstrap.split_seed`): the draws
of the mean, tasks independent.

A record's entry beside a figure is :func:`interval_entry`: ``{"ci_low", "ci_high", "sources"}`` (fractions, 6
decimals); :func:`bracketed` prints a figure with its interval in points, ``+10.4 [6.8, 14.0]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, check_paired
from bert_pipeline.evaluation.intervals import Bootstrap, Estimate, Interval

SPLIT = "test"
"""The split every published interval is on (the one the metrics records publish)."""
TOLERANCE = 1e-6
"""How far a record's per-seed score may lie from the metrics file's (rounded to 6 decimals) and still be the same run."""


def settings(boot: Bootstrap) -> dict[str, Any]:
    """The bootstrap's settings as a record's ``intervals`` entry: ``{"resamples", "confidence", "seed", "method"}``."""
    return {"resamples": boot.resamples, "confidence": boot.confidence, "seed": boot.seed, "method": boot.method}


def estimate(record: ExampleRecord, boot: Bootstrap, run: str = "full", split: str = SPLIT) -> Estimate:
    """The member's main metric on ``split`` in ``run`` (``full`` or ``low_resource``), over all its seeds.

    Raises:
        ExamplesError: no such run or split in the record.
    """
    if split not in record.splits:
        raise ExamplesError(f"no {split} examples in the per-example record")
    return boot.estimates(record, split, run)[record.main_metric]


def check_pairable(a: ExampleRecord, b: ExampleRecord, names: tuple[str, str], run: str = "full",
                   split: str = SPLIT) -> None:
    """Raises :class:`ExamplesError` (naming both sides by ``names``) unless ``a`` and ``b`` scored the same
    examples of ``split`` against the same gold, on the same main metric, with the same seeds in ``run``: what a
    paired difference needs."""
    check_paired(a, b, split, *names)
    if a.main_metric != b.main_metric:
        raise ExamplesError(f"{names[0]} and {names[1]}: main metric {a.main_metric!r} vs {b.main_metric!r}")
    seeds_a, seeds_b = a.seeds(split, run), b.seeds(split, run)
    if seeds_a != seeds_b:
        raise ExamplesError(f"{names[0]} has {run} seeds {seeds_a} on {split}, {names[1]} {seeds_b}: not paired on "
                            "seeds (fine-tune both at the same seeds)")


def difference(a: ExampleRecord, b: ExampleRecord, boot: Bootstrap, names: tuple[str, str] = ("a", "b"),
               run: str = "full", split: str = SPLIT) -> Interval:
    """``a`` minus ``b`` on ``split``'s main metric, paired on examples and seeds (identical records: exactly
    ``[0, 0]``).

    Raises:
        ExamplesError: the two are not paired (:func:`check_pairable`).
    """
    check_pairable(a, b, names, run, split)
    return boot.difference(estimate(a, boot, run, split), estimate(b, boot, run, split))


def mean_interval(boot: Bootstrap, parts: Sequence[tuple[Estimate, Estimate | None]]) -> Interval:
    """The interval of :func:`mean_estimate` over ``parts``.

    Raises:
        ExamplesError: no parts, or a difference whose sides were scored on different examples.
    """
    return boot.score(mean_estimate(parts))


def mean_estimate(parts: Sequence[tuple[Estimate, Estimate | None]]) -> Estimate:
    """The mean over tasks of scores (``(estimate, None)`` each) or of differences (``(a, b)``: ``a - b``), each
    task's draws averaged draw by draw (the tasks' splits are drawn apart: independent).

    Raises:
        ExamplesError: no parts, or a difference whose sides were scored on different examples.
    """
    if not parts:
        raise ExamplesError("a mean over no tasks")
    points, draws, seeds = [], [], ()
    for a, b in parts:
        if b is None:
            points.append(a.point)
            draws.append(a.draws)
        else:
            if a.hash != b.hash:
                raise ExamplesError(f"a difference over different examples (split hashes {a.hash[:12]} vs "
                                    f"{b.hash[:12]}): not paired")
            points.append(a.point - b.point)
            draws.append(a.draws - b.draws)
        seeds = max(seeds, a.seed_values, *(() if b is None else (b.seed_values,)), key=len)
    return Estimate(float(np.mean(points)), np.mean(np.stack(draws), axis=0), seeds, "mean over tasks")


def interval_entry(interval: Interval) -> dict[str, Any]:
    """``{"ci_low", "ci_high", "sources"}``: the entries a record puts beside a figure (fractions, 6 decimals)."""
    rounded = interval.rounded(6)
    return {"ci_low": rounded.low, "ci_high": rounded.high, "sources": interval.sources}


def check_seed_scores(est: Estimate, values: Sequence[float], what: str) -> None:
    """Raises :class:`ExamplesError` unless the per-example record's per-seed scores (``est.seed_values``) are the
    metrics record's ``values`` (rounded to 6 decimals, in any seed order): the record and the figure beside which
    its interval goes come from the same runs."""
    ours, theirs = sorted(est.seed_values), sorted(values)
    if len(ours) != len(theirs) or any(abs(x - y) > TOLERANCE for x, y in zip(ours, theirs, strict=True)):
        raise ExamplesError(f"{what}: the per-example record gives per-seed scores {[round(v, 6) for v in ours]}, "
                            f"the metrics record {list(theirs)}: not the same runs (rerun the stage that wrote both)")


def _pts(value: float, signed: bool) -> str:
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def bracketed(value: float, entry: Mapping[str, Any] | None, signed: bool = True, with_sources: bool = False) -> str:
    """``value`` in points, one decimal, with ``entry``'s interval where it has one: ``+10.4 [6.8, 14.0]``
    (``signed``: a difference, its point with a sign; bounds always plain); just the point without an interval.
    ``with_sources``: the interval's sources after it (``+10.4 [6.8, 14.0] examples``), for a table whose intervals
    do not all resample the same (:func:`mixed_sources`)."""
    text = _pts(value, signed)
    if entry and entry.get("ci_low") is not None and entry.get("ci_high") is not None:
        text += f" [{_pts(entry['ci_low'], False)}, {_pts(entry['ci_high'], False)}]"
        if with_sources and entry.get("sources"):
            text += f" {entry['sources']}"
    return text


def mixed_sources(entries: Sequence[Mapping[str, Any] | None]) -> bool:
    """Whether the intervals among ``entries`` resample different sources (some seeds, some not): each cell then
    names its own."""
    return len({e["sources"] for e in entries if e and e.get("sources")}) > 1


def sources_text(entries: Sequence[Mapping[str, Any]], intervals: Mapping[str, Any] | None) -> str:
    """The sentence a section states its intervals with: the confidence, method and draws (``intervals``: a
    record's :func:`settings` entry) and what they resample (the ``sources`` of ``entries``, those with an
    interval); empty when none has one."""
    found = sorted({e["sources"] for e in entries if e and e.get("sources")})
    if not found:
        return ""
    how = "paired bootstrap interval"
    if intervals:
        how = (f"{100 * intervals['confidence']:g}% {how} ({intervals['method']}, {intervals['resamples']:,} draws, "
               f"seed {intervals['seed']})")
    what = {"examples": "the test examples, whole source articles or films at a time",
            "examples+seeds": "the test examples, whole source articles or films at a time, and the fine-tuning "
                              "seeds"}
    covers = "; ".join(f"{what.get(s, s)} (sources `{s}`)" for s in found)
    return f"[low, high]: the {how}, resampling {covers}."
