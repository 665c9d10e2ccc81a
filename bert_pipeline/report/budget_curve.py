"""The pre-training budget curve: what pre-training buys downstream, against the tokens it saw.

The gain of a budget is the fine-tuned pre-trained model's test main metric minus the same architecture's
from scratch (random weights, the same fine-tuning settings), paired by fine-tuning seed, per task and per
low-resource run. Budget 0 is no pre-training: the from-scratch baseline itself, gain 0 by definition. The curve
over budgets is the small-model counterpart of the data-scaling curves of pre-training (Kaplan et al. 2020; for
downstream transfer, Zhang et al. 2021, "When Do You Need Billions of Words of Pretraining Data?"), with the
from-scratch baseline that tells whether pre-training paid at all.

Each gain carries its interval (:func:`with_intervals`): the paired bootstrap of the mean gain from the two
members' per-example records (:mod:`bert_pipeline.report.contrasts`), test examples resampled by source article or
film, and seeds too where there are several, both sides drawn alike; the seeds' own range (lowest and highest
per-seed gain) stays beside it, apart: it is the spread of the fine-tuning seeds alone, not an interval.

Everything here reads fine-tuning results (:class:`bert_pipeline.report.report.FinetuneResult`) and per-example
records and returns records, CSV and Markdown; the ``budget_curve`` stage trains the points and writes them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError
from bert_pipeline.evaluation.intervals import Bootstrap, Interval
from bert_pipeline.report.contrasts import (
    bracketed,
    check_pairable,
    check_seed_scores,
    estimate,
    interval_entry,
    mixed_sources,
    settings,
    sources_text,
)
from bert_pipeline.report.report import FinetuneResult, markdown_table


@dataclass(frozen=True)
class Gain:
    """One score of a budget point, per fine-tuning seed: the pre-trained and from-scratch values (fractions in
    [0, 1]) and their difference; ``interval``: the mean gain's paired bootstrap interval (:func:`with_intervals`),
    None until computed."""

    pretrained: tuple[float, ...]
    scratch: tuple[float, ...]
    interval: Interval | None = None

    @property
    def seeds(self) -> tuple[float, ...]:
        """Pre-trained minus from-scratch, per seed (fraction)."""
        return tuple(p - s for p, s in zip(self.pretrained, self.scratch, strict=True))

    @property
    def mean(self) -> float:
        return sum(self.seeds) / len(self.seeds)

    def record(self) -> dict[str, Any]:
        """``{"mean", "min", "max", "seeds", "pretrained", "scratch"}`` (fractions, 6 decimals; ``min``/``max``: the
        seeds' range), with the interval's ``"ci_low", "ci_high", "sources"`` when it has one."""
        gains = [round(g, 6) for g in self.seeds]
        out = {"mean": round(self.mean, 6), "min": min(gains), "max": max(gains), "seeds": gains,
               "pretrained": [round(v, 6) for v in self.pretrained], "scratch": [round(v, 6) for v in self.scratch]}
        if self.interval is not None:
            out.update(interval_entry(self.interval))
        return out


@dataclass(frozen=True)
class BudgetPoint:
    """One pre-training budget: ``fraction`` of the pipeline's own steps, the steps and tokens it trained
    (``tokens_seen``: real tokens, no padding), its held-out MLM accuracy (None for budget 0) and its gains by score
    key (:func:`gains`)."""

    fraction: float
    steps: int
    tokens_seen: int
    mlm_accuracy: float | None
    gains: Mapping[str, Gain]


def score_key(task: str, low_resource_examples: int | None = None) -> str:
    """The curve's name of a score: the task (``ner``), or ``{task}@{n}`` for its run on ``n`` labelled examples."""
    return task if low_resource_examples is None else f"{task}@{low_resource_examples}"


def key_run(key: str) -> tuple[str, str]:
    """A score key's task and its run in the per-example record: ``ner`` -> ``("ner", "full")``, ``ner@500`` ->
    ``("ner", "low_resource")``."""
    task, _, examples = key.partition("@")
    return task, "low_resource" if examples else "full"


def _scores(result: FinetuneResult) -> dict[str, tuple[float, ...]]:
    main = result.main_metric
    out = {score_key(result.task): tuple(result.test_seeds.get(main) or (result.test[main],))}
    if result.low_resource_examples is not None and main in result.low_resource_test:
        out[score_key(result.task, result.low_resource_examples)] = tuple(
            result.low_resource_test_seeds.get(main) or (result.low_resource_test[main],))
    return out


def gains(pretrained: Sequence[FinetuneResult], scratch: Sequence[FinetuneResult]) -> dict[str, Gain]:
    """Pre-trained minus from-scratch on every task's main test metric and every low-resource run, paired by seed.

    Raises:
        PipelineError: a task of one side missing on the other, other main metrics, or other seed counts (one line
            naming both files).
    """
    by_task = {r.task: r for r in scratch}
    out: dict[str, Gain] = {}
    for result in pretrained:
        base = by_task.get(result.task)
        if base is None:
            raise PipelineError(f"{result.source}: no from-scratch result for task {result.task!r} to compare with")
        if base.main_metric != result.main_metric:
            raise PipelineError(f"{result.source} vs {base.source}: main metric {result.main_metric!r} vs "
                                f"{base.main_metric!r}")
        ours, theirs = _scores(result), _scores(base)
        if set(ours) != set(theirs):
            raise PipelineError(f"{result.source} vs {base.source}: scores {sorted(ours)} vs {sorted(theirs)}; "
                                "fine-tune both with the same finetune.low_resource_tasks and "
                                "low_resource_train_examples")
        for key, values in ours.items():
            if len(theirs[key]) != len(values):
                raise PipelineError(f"{result.source} vs {base.source}: {key} has {len(values)} seed(s) against "
                                    f"{len(theirs[key])}; fine-tune both at the same finetune.seeds")
            out[key] = Gain(values, theirs[key])
    return dict(sorted(out.items()))


def no_pretraining(scratch: Sequence[FinetuneResult]) -> BudgetPoint:
    """Budget 0: the from-scratch baseline against itself (every gain exactly 0)."""
    scores: dict[str, tuple[float, ...]] = {}
    for result in scratch:
        scores.update(_scores(result))
    return BudgetPoint(0.0, 0, 0, None, {k: Gain(v, v) for k, v in sorted(scores.items())})


def with_intervals(point: BudgetPoint, pretrained: Mapping[str, ExampleRecord], scratch: Mapping[str, ExampleRecord],
                   boot: Bootstrap) -> BudgetPoint:
    """``point`` with each gain's interval: the pre-trained member's test main metric minus the from-scratch
    baseline's, paired on examples and seeds (:func:`bert_pipeline.report.contrasts.difference`), from their
    per-example records by task (``pretrained``, ``scratch``; a ``{task}@{n}`` key reads the records'
    ``low_resource`` run). Budget 0 (the baseline against itself) gets exactly ``[0, 0]``. Each side's per-seed
    scores must be the gain's: the records and the metrics files come from the same runs.

    Raises:
        ExamplesError: a task without a record on either side, records not paired (other examples or seeds), or
            per-seed scores other than the gain's (one line naming the score and the side).
    """
    gains_out: dict[str, Gain] = {}
    for key, gain in point.gains.items():
        task, run = key_run(key)
        sides = {"pre-trained": pretrained.get(task), "from-scratch": scratch.get(task)}
        for side, rec in sides.items():
            if rec is None:
                raise ExamplesError(f"{key}: no {side} per-example record of task {task!r}")
        a_rec, b_rec = sides["pre-trained"], sides["from-scratch"]
        check_pairable(a_rec, b_rec, (f"the pre-trained {task} record", f"the from-scratch {task} record"), run)
        a, b = estimate(a_rec, boot, run), estimate(b_rec, boot, run)
        check_seed_scores(a, gain.pretrained, f"{key}, pre-trained")
        check_seed_scores(b, gain.scratch, f"{key}, from scratch")
        gains_out[key] = replace(gain, interval=boot.difference(a, b))
    return replace(point, gains=gains_out)


def curve_record(points: Sequence[BudgetPoint], seeds: Sequence[int], member: str, baseline: str,
                 boot: Bootstrap | None = None) -> dict[str, Any]:
    """The budget curve's quality record: ``{"member", "baseline", "seeds", "points": [{"fraction",
    "steps", "tokens_seen", "mlm_accuracy", "gain": {key: Gain.record()}}]}``, points by budget (byte-identical
    for the same inputs); with ``boot`` (the bootstrap the gains' intervals were drawn with), ``"intervals"``: its
    settings."""
    extra = {"intervals": settings(boot)} if boot is not None else {}
    return {"member": member, "baseline": baseline, "seeds": list(seeds), **extra, "points": [
        {"fraction": p.fraction, "steps": p.steps, "tokens_seen": p.tokens_seen,
         "mlm_accuracy": None if p.mlm_accuracy is None else round(p.mlm_accuracy, 6),
         "gain": {k: g.record() for k, g in p.gains.items()}}
        for p in sorted(points, key=lambda p: p.fraction)]}


def column(key: str) -> str:
    """A score key as a CSV column whatever the example count (``sentiment@500`` -> ``sentiment_low_resource``),
    so the CSV's columns and the headline keys stay the same across profiles."""
    task, _, examples = key.partition("@")
    return f"{task}_low_resource" if examples else task


def curve_csv(record: Mapping[str, Any]) -> str:
    """The budget curve's plot table: ``fraction, tokens_seen, mlm_accuracy`` and each score's mean gain in
    points (x100), a row per budget."""
    keys = sorted({k for p in record["points"] for k in p["gain"]})
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["fraction", "tokens_seen", "mlm_accuracy", *map(column, keys)])
    for p in record["points"]:
        writer.writerow([p["fraction"], p["tokens_seen"], "" if p["mlm_accuracy"] is None else p["mlm_accuracy"],
                         *(round(100 * p["gain"][k]["mean"], 4) if k in p["gain"] else "" for k in keys)])
    return buffer.getvalue()


def _points(value: float) -> str:
    return f"{100 * value:+.1f}"


def _gain_cell(gain: Mapping[str, Any], fraction: float, with_sources: bool) -> str:
    """A gain in points with its interval (``+4.0 [2.1, 6.0]``) and, apart, the seeds' range
    (``; seeds +3.0 to +5.0``) where there are several seeds; budget 0 (exactly 0) the point alone."""
    if fraction == 0:
        return _points(gain["mean"])
    text = bracketed(gain["mean"], gain, with_sources=with_sources)
    if len(gain["seeds"]) > 1:
        text += f"; seeds {_points(gain['min'])} to {_points(gain['max'])}"
    return text


def budget_curve_section(record: Mapping[str, Any] | None, timing: Mapping[str, Any] | None,
                         source: str, source_timing: str) -> str:
    """The report's "Pre-training budget curve" section: per budget the steps, tokens, pre-training CPU minutes
    (``timing``: ``{"points": [{"fraction", "pretrain_cpu_seconds"}]}``), held-out MLM accuracy and each score's gain
    in points: the mean over seeds with its interval (``+4.0 [2.1, 6.0]``, a record's ``ci_low``/``ci_high``) and,
    apart, the seeds' range (``seeds +3.0 to +5.0``, when there are several). A record from before the intervals
    shows the point and the seeds' range. Empty without a record or with fewer than two points."""
    if not record or len(record.get("points", ())) < 2:
        return ""
    cpu = {t["fraction"]: t.get("pretrain_cpu_seconds") for t in (timing or {}).get("points", ())}
    keys = sorted({k for p in record["points"] for k in p["gain"]})
    seeds = record.get("seeds", [])
    shown = [g for p in record["points"] if p["fraction"] > 0 for g in p["gain"].values()]
    mixed = mixed_sources(shown)
    header = ["budget", "steps", "tokens seen", "pre-training CPU min", "held-out MLM acc",
              *(k.replace("@", " @") for k in keys)]
    rows = []
    for p in record["points"]:
        seconds = cpu.get(p["fraction"])
        cells = ["" if p["gain"].get(k) is None else _gain_cell(p["gain"][k], p["fraction"], mixed) for k in keys]
        rows.append([f"{p['fraction']:g}x", f"{p['steps']:,}", f"{p['tokens_seen'] / 1e6:.2f}M",
                     "" if seconds is None else f"{seconds / 60:.1f}",
                     "" if p["mlm_accuracy"] is None else f"{100 * p['mlm_accuracy']:.2f}%", *cells])
    first = next((p for p in record["points"] if p["fraction"] == 0), None)
    baseline = ""
    if first:
        baseline = " From scratch: " + ", ".join(
            f"{k.replace('@', ' @')} {100 * sum(g['scratch']) / len(g['scratch']):.1f}" for k, g in first["gain"].items()
        ) + "."
    intervals = sources_text(shown, record.get("intervals"))
    several = len(seeds) > 1
    return "\n".join([
        "## Pre-training budget curve", "",
        f"Test main metric of `{record['member']}` minus `{record['baseline']}` (the same model from random weights, "
        f"the same fine-tuning), in points: the mean over fine-tuning seeds {seeds}"
        + (" with its interval [low, high]" if intervals else "")
        + ("; apart, `seeds a to b`: the lowest and highest per-seed gain, the seeds' own spread (not an interval)"
           if several else "")
        + "; `@N`: fine-tuned on N labelled examples. Budget "
        "1x is the pipeline's own pre-training, 0 the baseline itself; CPU minutes are the pre-training's "
        f"(`{source_timing}`)." + baseline + (f" {intervals}" if intervals else ""), "",
        markdown_table(header, rows),
        f"Source: `{source}`.", "",
    ])
