"""The family report's intervals: every published score, gain and share with its paired bootstrap interval
(:mod:`bert_pipeline.evaluation.intervals`), computed from the members' per-example records, and the page's
"How sure" section.

The keys are the flat quality metrics' keys (:func:`bert_pipeline.report.family.flat_metrics`):
``{member}.{task}.{metric}`` (each kind's interval metrics, test split, mean over seeds), ``{member}.average``,
``{member}.{task}.low_resource_{main}``, ``gain_over_scratch.{task}``, ``low_resource_gain.{task}``,
``student_share.{task}``, ``distillation.{student}.{task}_share`` and ``distillation.{student}.average_share``;
the flat file carries each as ``KEY_ci_low`` / ``KEY_ci_high`` beside ``KEY``.

Primary and exploratory: the contrast families named ``primary`` (declared in the params before the run) are
Bonferroni-adjusted over all their contrasts in the report (each interval at ``1 - (1 - confidence) / m``), so the
family-wise level holds over the declared comparisons; every other interval is at the nominal ``confidence`` and is
labelled exploratory (Bender and Lange 2001: adjust the confirmatory, label the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bert_pipeline.evaluation.examples import ExampleRecord
from bert_pipeline.evaluation.intervals import Bootstrap, Estimate, Interval, ratio_estimate
from bert_pipeline.report.contrasts import mean_estimate
from bert_pipeline.report.report import fmt_change, fmt_share, markdown_table

log = logging.getLogger(__name__)

CONTRAST_TEXT = {
    "gain_over_scratch": "pre-trained minus scratch",
    "low_resource_gain": "pre-trained minus scratch, low-resource runs",
    "student_share": "the general-distillation student's share of the teacher",
    "distillation_share": "each task-specific student's share of its teacher",
}
"""The contrast families (``evaluate.intervals.primary`` names them) and what each compares."""


@dataclass(frozen=True)
class Contrast:
    """One published comparison: its flat ``key``, contrast ``family``, ``task`` (or ``average``), ``interval``,
    whether it is ``primary`` (adjusted) or exploratory, and ``seed_range``: the smallest and largest of the
    per-seed contrasts (seed i of one side against seed i of the other; None with one seed a side)."""

    key: str
    family: str
    task: str
    interval: Interval
    primary: bool
    seed_range: tuple[float, float] | None = None


@dataclass
class FamilyIntervals:
    """What :func:`family_intervals` computed: ``intervals`` by flat key (scores and contrasts), the
    ``contrasts`` in report order, per task its held-out facts (``held_out``: ``{task: {"n", "clusters",
    "resolvable"}}``, ``resolvable`` the half-width of the primary or first contrast on the task, in fractions),
    and the settings (``confidence``, ``adjusted``: the primary contrasts' level, ``resamples``, ``method``)."""

    intervals: dict[str, Interval] = field(default_factory=dict)
    contrasts: list[Contrast] = field(default_factory=list)
    held_out: dict[str, dict[str, float]] = field(default_factory=dict)
    confidence: float = 0.95
    adjusted: float = 0.95
    resamples: int = 0
    method: str = "percentile"


def load_records(folder: Path, pairs: Sequence[tuple[str, str]]) -> dict[tuple[str, str], ExampleRecord]:
    """The per-example records ``folder/{member}-{task}.arrow`` of the ``(member, task)`` pairs that have one
    (a member fine-tuned before the records existed has none: its scores get no interval, with a warning).

    Raises:
        ExamplesError: a record that cannot be read (one line naming the file).
    """
    out = {}
    missing = []
    for m, t in pairs:
        path = folder / f"{m.replace('/', '--')}-{t}.arrow"
        if path.exists():
            out[m, t] = ExampleRecord.read(path)
        else:
            missing.append(path.name)
    if missing:
        log.warning("no per-example record for %s in %s: no intervals for them", ", ".join(sorted(missing)), folder)
    return out


def family_intervals(records: Mapping[tuple[str, str], ExampleRecord], models: Sequence[str], tasks: Sequence[str],
                     teacher: str, student: str, scratch: str, pairs: Sequence[tuple[str, str]], boot: Bootstrap,
                     primary: Sequence[str]) -> FamilyIntervals:
    """Intervals of every score and contrast the family report publishes, on the test split.

    Args:
        records: per ``(member, task)`` its per-example record (:func:`load_records`).
        models, tasks: the report's members and tasks, in order; ``teacher``, ``student``, ``scratch``: the roles.
        pairs: ``(teacher, student)`` of every distillation pair (general and task-specific).
        boot: the bootstrap settings and shared draws; ``primary``: the contrast families adjusted for
            multiplicity (:data:`CONTRAST_TEXT`'s keys).
    Returns:
        :class:`FamilyIntervals`.
    Raises:
        ExamplesError: two members of a task scored on different test examples (a record from another run).
    """
    out = FamilyIntervals(confidence=boot.confidence, resamples=boot.resamples, method=boot.method)
    est: dict[tuple[str, str, str], dict[str, Estimate]] = {}
    for (m, t), rec in records.items():
        if t not in tasks or m not in models:
            continue
        est[m, t, "full"] = boot.estimates(rec, "test")
        if rec.seeds("test", "low_resource"):
            est[m, t, "low_resource"] = boot.estimates(rec, "test", "low_resource")
    main = {t: rec.main_metric for (_, t), rec in records.items()}

    def pick(m: str, t: str, run: str = "full") -> Estimate | None:
        got = est.get((m, t, run))
        return got[main[t]] if got and main[t] in got else None

    # contrasts first: the primary ones' count sets their adjusted level
    planned: list[tuple[str, str, str, str, Estimate, Estimate]] = []  # key, family, task, op, a, b
    for t in tasks:
        a, b = pick(teacher, t), pick(scratch, t)
        if a and b:
            planned.append((f"gain_over_scratch.{t}", "gain_over_scratch", t, "difference", a, b))
        a, b = pick(teacher, t, "low_resource"), pick(scratch, t, "low_resource")
        if a and b:
            planned.append((f"low_resource_gain.{t}", "low_resource_gain", t, "difference", a, b))
        a, b = pick(student, t), pick(teacher, t)
        if a and b and b.point > 0:
            planned.append((f"student_share.{t}", "student_share", t, "ratio", a, b))
    for of, s in pairs:
        shares = []
        for t in tasks:
            a, b = pick(s, t), pick(of, t)
            if a and b and b.point > 0:
                if (of, s) != (teacher, student):  # the general pair's share is student_share's, counted once
                    planned.append((f"distillation.{s}.{t}_share", "distillation_share", t, "ratio", a, b))
                shares.append((a, b))
        if len(shares) > 1:
            avg = mean_estimate([(ratio_estimate(a, b), None) for a, b in shares])
            out.intervals[f"distillation.{s}.average_share"] = boot.score(avg)
    n_primary = sum(1 for p in planned if p[1] in primary)
    out.adjusted = 1.0 - (1.0 - boot.confidence) / max(n_primary, 1)
    for key, family, t, op, a, b in planned:
        is_primary = family in primary
        level = out.adjusted if is_primary else boot.confidence
        iv = boot.difference(a, b, level) if op == "difference" else boot.ratio(a, b, level)
        out.intervals[key] = iv
        if family == "student_share":  # the same ratio under the distillation table's key
            out.intervals[f"distillation.{student}.{t}_share"] = iv
        per_seed = None
        if len(a.seed_values) > 1 and len(a.seed_values) == len(b.seed_values):
            per_seed = [x - y if op == "difference" else (x / y if y else float("nan"))
                        for x, y in zip(a.seed_values, b.seed_values, strict=True)]
        out.contrasts.append(Contrast(key, family, t, iv, is_primary,
                                      (min(per_seed), max(per_seed)) if per_seed else None))
    # scores: every interval metric of every member and task, the low-resource main metric, the averages
    for (m, t, run), metrics in est.items():
        if run == "low_resource":
            out.intervals[f"{m}.{t}.low_resource_{main[t]}"] = boot.score(metrics[main[t]])
            continue
        for metric, e in metrics.items():
            out.intervals[f"{m}.{t}.{metric}"] = boot.score(e)
    for m in models:
        parts = [pick(m, t) for t in tasks]
        if parts and all(parts):
            out.intervals[f"{m}.average"] = boot.score(mean_estimate([(p, None) for p in parts]))
    # what each task's held-out set can resolve: the half-width of its primary (else first) paired difference
    for t in tasks:
        rec = next((r for (m, tt), r in records.items() if tt == t and m in models), None)
        if rec is None:
            continue
        diffs = [c for c in out.contrasts if c.task == t and "gain" in c.family]
        chosen = next((c for c in diffs if c.primary), diffs[0] if diffs else None)
        info = rec.splits["test"]
        out.held_out[t] = {"n": len(info.ids), "clusters": len(set(info.clusters)),
                           "resolvable": chosen.interval.half_width if chosen else None,
                           "contrast": chosen.key if chosen else None}
    return out


def flat_intervals(fi: FamilyIntervals) -> dict[str, float]:
    """``KEY_ci_low`` / ``KEY_ci_high`` of every interval (fractions rounded to 6 digits), for
    the flat quality metrics and MLflow."""
    out = {}
    for key, iv in sorted(fi.intervals.items()):
        r = iv.rounded()
        if np.isfinite(r.low) and np.isfinite(r.high):
            out[f"{key}_ci_low"], out[f"{key}_ci_high"] = r.low, r.high
    return out


def _seed_range(c: Contrast) -> str:
    if c.seed_range is None:
        return "–"
    low, high = c.seed_range
    return f"{100 * low:.1f}%..{100 * high:.1f}%" if "share" in c.family else f"{100 * low:+.1f}..{100 * high:+.1f}"


def how_sure_section(fi: FamilyIntervals, records_dir: str) -> str:
    """The page's "How sure" section (Markdown; ``""`` without intervals): the settings, per task the held-out
    test set's size, clusters and the smallest difference it resolves, and every contrast with its interval, the
    sources it resamples, primary or exploratory, and whether it excludes no difference (0, or a share of 100%)."""
    if not fi.contrasts and not fi.held_out:
        return ""
    level = f"{100 * fi.confidence:g}%"
    rows = []
    for t, h in fi.held_out.items():
        res = h["resolvable"]
        rows.append([t, str(h["n"]), str(h["clusters"]),
                     "–" if res is None else f"{100 * res:.1f} points ({h['contrast']})"])
    lines = [
        "## How sure", "",
        f"Every score, gain and share on this page carries a paired bootstrap interval ({fi.resamples:,} draws, "
        f"{fi.method}, {level}) from the per-example records (`{records_dir}`): whole source articles (films for "
        "sentiment) are resampled, not single examples, with one draw matrix per test split shared by every model, "
        "so a difference is paired; where a model has several seeds, each draw resamples its seeds too "
        "(Sellam et al. 2022's multi-bootstrap: sources `examples+seeds`); the seed range beside it is the raw spread "
        "of the per-seed contrasts, which the interval does not replace.", "",
        markdown_table(["task", "test examples", "clusters", "smallest resolvable difference (half-width)"],
                       rows).rstrip(), "",
    ]
    primary = [c for c in fi.contrasts if c.primary]
    if fi.contrasts:
        lines += [
            f"Primary contrasts (declared in `evaluate.intervals.primary`): {len(primary)}, each at "
            f"{100 * fi.adjusted:.2f}% (Bonferroni, family-wise {level}); the others are exploratory, at {level}, "
            "unadjusted.", "",
            markdown_table(["contrast", "task", "estimate [interval]", "resamples", "seed range", "kind",
                            "excludes no difference"],
                           [[CONTRAST_TEXT[c.family], c.task,
                             fmt_share(c.interval.point, c.interval, 1) if "share" in c.family
                             else fmt_change(c.interval.point, c.interval, ""),
                             c.interval.sources, _seed_range(c), "primary" if c.primary else "exploratory",
                             "yes" if c.interval.excludes(1.0 if "share" in c.family else 0.0) else "no"]
                            for c in fi.contrasts]), ""]
    return "\n".join(lines).rstrip() + "\n"
