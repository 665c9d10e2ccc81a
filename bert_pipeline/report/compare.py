"""Two runs of the family side by side: for every member and task both runs scored, each run's main metric with
its interval and the paired difference (B minus A) with its interval, from the per-example records of both runs
(:mod:`bert_pipeline.evaluation.examples`), resampled with one :class:`~bert_pipeline.evaluation.intervals.Bootstrap`
so both sides see the same draws of each split.

The records come in as ``{name: ExampleRecord}``, ``name`` being ``{member}-{task}`` (a member's name holds no
hyphen; a task's may): the caller reads them from wherever the runs keep them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bert_pipeline.evaluation.examples import ExampleRecord, check_paired
from bert_pipeline.evaluation.intervals import Bootstrap, Interval
from bert_pipeline.report.report import fmt_change, fmt_scored


@dataclass(frozen=True)
class CompareRow:
    """One member on one task: ``metric`` (the task's main metric), ``a`` and ``b`` (each run's score with its
    interval: the mean over its seeds, a fraction), ``difference`` (``b - a``, paired draw by draw, a fraction)."""

    member: str
    task: str
    metric: str
    a: Interval
    b: Interval
    difference: Interval

    @property
    def name(self) -> str:
        return f"{self.member}-{self.task}"


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare_records` found: ``rows`` (one per name both sides have, sorted by name), ``only_a`` and
    ``only_b`` (the names one side alone has, sorted), the held-out ``split`` and the intervals' ``confidence``."""

    split: str
    confidence: float
    rows: list[CompareRow] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)


def member_task(name: str) -> tuple[str, str]:
    """``(member, task)`` of a record's name ``{member}-{task}`` (split at the first hyphen)."""
    member, _, task = name.partition("-")
    return member, task


def compare_records(a: Mapping[str, ExampleRecord], b: Mapping[str, ExampleRecord], boot: Bootstrap,
                    split: str = "test", run: str = "full", a_name: str = "A", b_name: str = "B",
                    label: Callable[[str], str] = str) -> Comparison:
    """Compare run B against run A on ``split`` (its ``run``, ``full`` by default), member by member.

    Args:
        a, b: each run's records by name (``{member}-{task}``).
        boot: the bootstrap both sides are resampled with (one set of draws per split hash: paired).
        a_name, b_name: the runs' names in error messages; ``label``: a record's name as errors cite it (the
            caller's file path, say).
    Returns:
        :class:`Comparison`; every interval in fractions (0.012 is 1.2 points).
    Raises:
        ExamplesError: a record both sides have scored different examples of ``split`` in A and in B (different
            split hashes; one line naming ``label(name)`` and both hashes), is a different task in each, or has
            no ``run`` on ``split``.
    """
    out = Comparison(split, boot.confidence, only_a=sorted(set(a) - set(b)), only_b=sorted(set(b) - set(a)))
    for name in sorted(set(a) & set(b)):
        rec_a, rec_b = a[name], b[name]
        check_paired(rec_a, rec_b, split, f"{label(name)}: {a_name}", b_name)
        metric = rec_a.main_metric
        est_a = boot.estimates(rec_a, split, run)[metric]
        est_b = boot.estimates(rec_b, split, run)[metric]
        member, task = member_task(name)
        out.rows.append(CompareRow(member, task, metric, boot.score(est_a), boot.score(est_b),
                                   boot.difference(est_b, est_a)))
    return out


def comparison_table(comparison: Comparison, a_name: str, b_name: str) -> str:
    """The comparison as a Markdown table (columns padded for a terminal), one row per member and task: member,
    task, metric, A's and B's score with its interval (``63.9 [58.1, 69.2]``, points), ``B - A`` with its paired
    interval (``+1.2 [-0.8, +3.1]``; the report's formats: :func:`~bert_pipeline.report.report.fmt_scored`,
    :func:`~bert_pipeline.report.report.fmt_change`), and whether that interval excludes 0; then, when one side has
    records the other lacks, a blank line and a line naming them. Ends with a newline."""
    level = f"{comparison.confidence * 100:g}%"
    header = ["member", "task", "metric", f"A: {a_name}", f"B: {b_name}", f"B - A [{level}]", "excludes 0"]
    right = {3, 4, 5}
    body = [[r.member, r.task, r.metric, fmt_scored(r.a.point, r.a), fmt_scored(r.b.point, r.b),
             fmt_change(r.difference.point, r.difference, unit=""), "yes" if r.difference.excludes(0.0) else "no"]
            for r in comparison.rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i in right else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    rule = "| " + " | ".join("-" * (w - 1) + ":" if i in right else "-" * w for i, w in enumerate(widths)) + " |"
    lines = [line(header), rule, *(line(row) for row in body)]
    missing = [f"only in {name}: {', '.join(names)}" for name, names in ((a_name, comparison.only_a),
                                                                          (b_name, comparison.only_b)) if names]
    if missing:
        lines += ["", "; ".join(missing)]
    return "\n".join(lines) + "\n"
