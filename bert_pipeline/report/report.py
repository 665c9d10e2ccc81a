"""The family report: fine-tuning metrics files -> one comparison table, the lines that matter, the Markdown page.

Pure functions over plain data (parsed JSON, paths): :func:`load_finetune_results` reads a folder of fine-tuning
metrics files (the layout in ARCHITECTURE.md), :func:`table` builds the rows a person reads first (one per family
member: parameters, each task's test score, the average, relative speed with the teacher = 1.0x),
:func:`findings` the sentences that answer the family's questions (gain of pre-training over the same model from
scratch, the student's share of the teacher's score and its speed-up), :func:`flat_metrics` the figures for
``dvc metrics``, and :func:`render_summary` the Markdown page with its figures (:func:`figures_section`, the PNGs
of :mod:`bert_pipeline.report.figures` linked relative to the page) and the report card
(:mod:`bert_pipeline.report.provenance`). Every number in the report names the file it came from; the
caller says where those files are (:class:`ReportSources`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bert_pipeline import tasks as task_kinds
from bert_pipeline.errors import PipelineError
from bert_pipeline.report.provenance import render_report_card

if TYPE_CHECKING:  # typing only: the report is plain text and needs no matplotlib
    from bert_pipeline.report.figures import ReportFigure

log = logging.getLogger(__name__)

# Tasks in table order; others follow alphabetically. NER scores are agreement with spaCy's silver labels.
TASK_ORDER = ("sentiment", "ner", "qa", "headline_match")
SILVER_TASKS = frozenset({"ner"})


@dataclass(frozen=True, kw_only=True)
class ReportSources:
    """The files the report cites, as paths relative to the repository (the pipeline's layout, given by the stage).

    ``finetune_metrics``: the folder of ``{model}-{task}.json`` fine-tuning metrics; ``finetuned_models``: the
    folder of ``{model}-{task}/`` models; ``metrics_dir``: the folder of the timing files; ``figures``: the PNG
    folder as the page links it; ``lock_file``: the pipeline's lock file, whose hash the report card shows; the
    others are single files.
    """

    finetune_metrics: str
    finetuned_models: str
    metrics_dir: str
    pretrain: str
    distill: str
    corpus: str
    tokenizer: str
    evaluate: str
    evaluate_timing: str
    sources_json: str
    figures: str
    """The figures folder relative to the page's own folder (the links' prefix: ``figures/x.png``)."""
    export: str
    export_timing: str
    budget_curve: str
    budget_curve_timing: str
    variants: str
    variants_timing: str
    retrieval: str
    lock_file: str
    examples: str


@dataclass(frozen=True)
class FinetuneResult:
    """One fine-tuning metrics file ``{model}-{task}.json``.

    Attributes:
        model: family member (``pretrained``, ``distilled``, ``scratch``, ``minilm``, ...).
        task: ``sentiment``, ``ner``, ``qa``, ...
        main_metric: the key of ``test`` that ranks models on this task (e.g. ``accuracy``, ``f1``).
        test: metric name -> mean over seeds on the test split, as a fraction in [0, 1].
        test_seeds: metric name -> the per-seed values.
        low_resource_examples: training examples of the low-resource run, or None when there was none.
        low_resource_test: metric name -> mean on the test split of the low-resource run ({} when none).
        low_resource_test_seeds: metric name -> the low-resource run's per-seed values.
        source: the file it was read from.
        teacher: the family member a task-specific student learned from (its metrics file's ``teacher``), else
            None.
    """

    model: str
    task: str
    main_metric: str
    test: Mapping[str, float]
    test_seeds: Mapping[str, Sequence[float]] = field(default_factory=dict)
    low_resource_examples: int | None = None
    low_resource_test: Mapping[str, float] = field(default_factory=dict)
    low_resource_test_seeds: Mapping[str, Sequence[float]] = field(default_factory=dict)
    source: str = ""
    teacher: str | None = None
    kind: str | None = None
    """The task kind (:data:`bert_pipeline.tasks.KINDS`) the metrics file names, None in older files."""

    @property
    def score(self) -> float:
        """The main metric's test mean (fraction)."""
        return self.test[self.main_metric]


@dataclass(frozen=True)
class ModelFacts:
    """Size and speed of one family member (speed fields None when not measured).

    Attributes:
        parameters: parameters of the encoder (``model.base_model``), without the task head.
        size_mb: size of the weight files on disk in MB (10**6 bytes).
        latency_ms: median milliseconds per example at batch size 1.
        throughput: median examples per second at the throughput batch size.
        encoder_parameters: the encoder's layers alone (no embeddings, no head): what distillation halves.
    """

    parameters: int
    size_mb: float
    latency_ms: float | None = None
    throughput: float | None = None
    encoder_parameters: int | None = None


def _means(block: Any, where: str) -> tuple[dict[str, float], dict[str, list[float]]]:
    """``{METRIC: {"mean", "seeds"}}`` -> (means, seeds); bare numbers are accepted as means."""
    if not isinstance(block, Mapping):
        raise PipelineError(f"{where}: expected a mapping of metric -> {{mean, seeds}}")
    means: dict[str, float] = {}
    seeds: dict[str, list[float]] = {}
    for name, value in block.items():
        if isinstance(value, Mapping) and isinstance(value.get("mean"), int | float):
            means[name] = float(value["mean"])
            seeds[name] = [float(v) for v in value.get("seeds", [])]
        elif isinstance(value, int | float) and not isinstance(value, bool):
            means[name] = float(value)
    return means, seeds


def parse_finetune_metrics(raw: Mapping[str, Any], source: str) -> FinetuneResult:
    """Validate one parsed fine-tuning metrics file (ARCHITECTURE.md layout) into a :class:`FinetuneResult`.

    Raises:
        PipelineError: a required key is missing or the main metric has no test mean.
    """
    for key in ("model", "task", "main_metric", "test"):
        if key not in raw:
            raise PipelineError(f"{source}: missing key {key!r} (expected model, task, main_metric, test)")
    test, seeds = _means(raw["test"], f"{source}: test")
    main = str(raw["main_metric"])
    if main not in test:
        raise PipelineError(f"{source}: test.{main}.mean missing (main_metric is {main!r})")
    low = raw.get("low_resource") or {}
    low_test, low_seeds = _means(low.get("test", {}), f"{source}: low_resource.test") if low else ({}, {})
    return FinetuneResult(
        model=str(raw["model"]),
        task=str(raw["task"]),
        main_metric=main,
        test=test,
        test_seeds=seeds,
        low_resource_examples=int(low["train_examples"]) if low.get("train_examples") is not None else None,
        low_resource_test=low_test,
        low_resource_test_seeds=low_seeds,
        source=source,
        teacher=str(raw["teacher"]) if raw.get("teacher") else None,
        kind=str(raw["kind"]) if raw.get("kind") else None,
    )


def load_finetune_results(folder: Path) -> list[FinetuneResult]:
    """Read every ``{model}-{task}.json`` in ``folder`` (timing files excluded), sorted by file name.

    Raises:
        PipelineError: no metrics files, unreadable JSON, or a file not in ARCHITECTURE.md's layout.
    """
    files = sorted(p for p in Path(folder).glob("*.json") if not p.name.endswith("-timing.json"))
    if not files:
        raise PipelineError(f"{folder}: no fine-tuning metrics files (expected {{model}}-{{task}}.json from finetune)")
    return [read_finetune_metrics(path) for path in files]


def read_finetune_metrics(path: Path) -> FinetuneResult:
    """Read and validate one ``{model}-{task}.json`` (:func:`parse_finetune_metrics`).

    Raises:
        FileNotFoundError: no such file (the caller knows which stage makes it).
        PipelineError: unreadable JSON or a file not in ARCHITECTURE.md's layout.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_finetune_metrics(raw, Path(path).as_posix())


def family_order(models: Iterable[str], teacher: str, student: str, scratch: str) -> list[str]:
    """Table order: teacher, student, scratch, then the other members alphabetically (absent roles skipped)."""
    present = set(models)
    head = [m for m in (teacher, student, scratch) if m in present]
    return head + sorted(present - set(head))


def task_order(tasks: Iterable[str]) -> list[str]:
    """``sentiment``, ``ner``, ``qa`` first, then other tasks alphabetically."""
    present = set(tasks)
    return [t for t in TASK_ORDER if t in present] + sorted(present - set(TASK_ORDER))


def by_model_task(results: Iterable[FinetuneResult]) -> dict[tuple[str, str], FinetuneResult]:
    """Index results by ``(model, task)``.

    Raises:
        PipelineError: two files claim the same model and task.
    """
    index: dict[tuple[str, str], FinetuneResult] = {}
    for r in results:
        if (r.model, r.task) in index:
            raise PipelineError(f"{r.source}: model {r.model!r} task {r.task!r} also in {index[r.model, r.task].source}")
        index[r.model, r.task] = r
    return index


def average_score(index: Mapping[tuple[str, str], FinetuneResult], model: str, tasks: Sequence[str]) -> float | None:
    """Unweighted mean of the model's main-metric test means over ``tasks``; None if any task is missing."""
    scores = [index[model, t].score for t in tasks if (model, t) in index]
    return sum(scores) / len(scores) if scores and len(scores) == len(tasks) else None


def student_shares(index: Mapping[tuple[str, str], FinetuneResult], teacher: str, student: str,
                   tasks: Sequence[str]) -> dict[str, float]:
    """``{task: student's main-metric test mean / the teacher's}`` over the tasks both have (teacher score > 0),
    in ``tasks`` order: the one definition of the student's share that the findings, the distillation tables and
    the flat evaluation metrics use; their "mean over tasks" is the unweighted mean of these ratios."""
    return {t: index[student, t].score / index[teacher, t].score for t in tasks
            if (teacher, t) in index and (student, t) in index and index[teacher, t].score > 0}


def relative_speed(facts: Mapping[str, ModelFacts], model: str, teacher: str) -> float | None:
    """Teacher's batch-1 latency / the model's (teacher = 1.0; 2.0 = twice as fast); None when unmeasured."""
    mine = facts.get(model)
    ref = facts.get(teacher)
    if not mine or not ref or not mine.latency_ms or not ref.latency_ms:
        return None
    return ref.latency_ms / mine.latency_ms


def fmt_score(value: float | None) -> str:
    """A fraction as points with one decimal (0.8234 -> ``82.3``); ``–`` when missing."""
    return "–" if value is None else f"{100 * value:.1f}"


def fmt_scored(value: float | None, interval: Any = None) -> str:
    """A score in points (:func:`fmt_score`) with its interval where there is one: ``82.3 [80.1, 84.4]``."""
    if value is None or interval is None:
        return fmt_score(value)
    return f"{fmt_score(value)} [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"


def fmt_change(value: float, interval: Any = None, unit: str = " points") -> str:
    """A difference in points, signed, with its interval where there is one: ``+10.4 points [6.8, 14.0]``."""
    text = f"{100 * value:+.1f}{unit}"
    return text if interval is None else f"{text} [{100 * interval.low:+.1f}, {100 * interval.high:+.1f}]"


def fmt_share(value: float, interval: Any = None, digits: int = 0) -> str:
    """A share in percent with its interval where there is one: ``98.9% [96.5, 101.1]``."""
    text = f"{100 * value:.{digits}f}%"
    return text if interval is None else f"{text} [{100 * interval.low:.1f}, {100 * interval.high:.1f}]"


def fmt_params(n: int | None) -> str:
    """Parameter count in millions with one decimal (22_713_216 -> ``22.7M``); small counts as thousands."""
    if n is None:
        return "–"
    return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n / 1e3:.1f}k"


def task_header(task: str, metric: str) -> str:
    """Column header of a task, e.g. ``ner f1 (silver)``."""
    return f"{task} {metric}" + (" (silver)" if task in SILVER_TASKS else "")


def table(
    results: Sequence[FinetuneResult],
    facts: Mapping[str, ModelFacts],
    teacher: str,
    student: str,
    scratch: str,
    reference: str | None = None,
    intervals: Mapping[str, Any] | None = None,
) -> tuple[list[str], list[list[str]]]:
    """The comparison table: header and one row of cells per family member.

    Columns: model, role, parameters, one per task (main metric, test mean over seeds, in points, with its
    interval from ``intervals`` where it has one: ``82.3 [80.1, 84.4]``), average of the tasks' main metrics,
    latency (ms/example, batch 1), throughput (examples/s), relative speed (``reference`` = 1.0x; default the
    teacher). ``intervals``: :class:`bert_pipeline.evaluation.intervals.Interval` by flat metric key
    (:mod:`bert_pipeline.report.intervals`).

    Raises:
        PipelineError: two results disagree on a task's main metric.
    """
    index = by_model_task(results)
    models = family_order({m for m, _ in index}, teacher, student, scratch)
    tasks = task_order({t for _, t in index})
    main = {}
    for r in results:
        if main.setdefault(r.task, r.main_metric) != r.main_metric:
            raise PipelineError(f"{r.source}: main_metric {r.main_metric!r}, other {r.task} files say {main[r.task]!r}")
    roles = {teacher: "teacher", student: "student", scratch: "scratch"}
    roles.update({r.model: f"student of {r.teacher}" for r in results if r.teacher and r.model not in roles})
    iv = intervals or {}
    header = ["model", "role", "parameters", *(task_header(t, main[t]) for t in tasks), "average",
              "latency ms (b=1)", "throughput ex/s", "relative speed"]
    rows = []
    for m in models:
        f = facts.get(m)
        rel = relative_speed(facts, m, reference or teacher)
        rows.append([
            m,
            roles.get(m, "external"),  # a member this pipeline did not pre-train (MiniLM, a user model)
            fmt_params(f.parameters if f else None),
            *(fmt_scored(index[m, t].score if (m, t) in index else None, iv.get(f"{m}.{t}.{main[t]}"))
              for t in tasks),
            fmt_scored(average_score(index, m, tasks), iv.get(f"{m}.average")),
            "–" if not f or f.latency_ms is None else f"{f.latency_ms:.1f}",
            "–" if not f or f.throughput is None else f"{f.throughput:.0f}",
            "–" if rel is None else f"{rel:.1f}x",
        ])
    return header, rows


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (text columns left, number columns right-aligned)."""
    numeric = [all(_is_number(r[i]) for r in rows) and bool(rows) for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _is_number(cell: str) -> bool:
    text = cell.rstrip("xMk")
    if text == "–":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def find_key(obj: Any, key: str) -> Any:
    """The first value stored under ``key`` anywhere in nested mappings (depth-first), or None."""
    if isinstance(obj, Mapping):
        if key in obj:
            return obj[key]
        for value in obj.values():
            found = find_key(value, key)
            if found is not None:
                return found
    return None


def tokens_seen_of(pretrain: Mapping[str, Any] | None, timing: Mapping[str, Any] | None = None) -> int | None:
    """Tokens seen in pre-training: ``tokens_seen`` at any depth of pre-training's metrics, else its top-level
    ``tokens`` or ``train_tokens``, else ``tokens_per_second * seconds`` of its timing file
    (rounded to the nearest thousand, as that product is only as exact as the rounded rate); None when absent."""
    for value in (find_key(pretrain or {}, "tokens_seen"), (pretrain or {}).get("train_tokens"),
                  (pretrain or {}).get("tokens")):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    rate, seconds = (timing or {}).get("tokens_per_second"), (timing or {}).get("seconds")
    if isinstance(rate, int | float) and isinstance(seconds, int | float) and rate > 0:
        return int(round(rate * seconds, -3))
    return None


def findings(
    results: Sequence[FinetuneResult],
    facts: Mapping[str, ModelFacts],
    teacher: str,
    student: str,
    scratch: str,
    tokens_seen: int | None,
    sources: ReportSources,
    intervals: Mapping[str, Any] | None = None,
) -> list[str]:
    """The sentences that matter, each with its source file.

    - pre-training gain: teacher minus scratch on each task's main metric (points), and on the low-resource run
      of each task that has one, with the tokens seen in pre-training;
    - the student's share of the teacher's score per task (student / teacher, %) and its speed-up (latency ratio).

    Each gain and share carries its paired interval from ``intervals`` (flat keys ``gain_over_scratch.{task}``,
    ``low_resource_gain.{task}``, ``student_share.{task}``) where there is one: ``+10.4 points [6.8, 14.0]``.
    """
    iv = intervals or {}
    index = by_model_task(results)
    tasks = task_order({t for _, t in index})
    lines = []
    gains = []
    low = []
    for t in tasks:
        if (teacher, t) in index and (scratch, t) in index:
            a, b = index[teacher, t], index[scratch, t]
            gains.append(f"{t} {fmt_change(a.score - b.score, iv.get(f'gain_over_scratch.{t}'))} {a.main_metric}")
            if a.low_resource_test.get(a.main_metric) is not None and b.low_resource_test.get(b.main_metric) is not None:
                n = a.low_resource_examples
                low.append(
                    f"{t} with {n if n is not None else '?'} training examples "
                    + fmt_change(a.low_resource_test[a.main_metric] - b.low_resource_test[b.main_metric],
                                 iv.get(f"low_resource_gain.{t}"))
                )
    if gains:
        cost = f" after {tokens_seen:,} tokens seen in pre-training ({sources.pretrain})" if tokens_seen else ""
        lines.append(
            f"Pre-training gain of the teacher ({teacher}) over the same model from scratch ({scratch}): "
            + "; ".join(gains) + (f"; low-resource: {'; '.join(low)}" if low else "") + cost
            + f" ({sources.finetune_metrics}/{teacher}-*.json, {sources.finetune_metrics}/{scratch}-*.json)."
        )
    shares = student_shares(index, teacher, student, tasks)
    speed = relative_speed(facts, student, teacher)
    if shares or speed:
        text = (f"The student ({student}) keeps "
                + (", ".join(f"{t} {fmt_share(v, iv.get(f'student_share.{t}'))}" for t, v in shares.items())
                   if shares else "–")
                + " of the teacher's score")
        if shares:
            text += f" ({100 * sum(shares.values()) / len(shares):.0f}% on average over tasks)"
        if speed:
            text += f" and is {speed:.1f}x as fast at batch 1 ({sources.evaluate_timing})"
        pf = facts.get(student), facts.get(teacher)
        if pf[0] and pf[1]:
            text += f", with {100 * pf[0].parameters / pf[1].parameters:.0f}% of its parameters (encoder with embeddings"
            if pf[0].encoder_parameters and pf[1].encoder_parameters:
                text += f"; {100 * pf[0].encoder_parameters / pf[1].encoder_parameters:.0f}% of its encoder layers'"
            text += ")"
        lines.append(text + f" ({sources.finetune_metrics}/{student}-*.json).")
    return lines


def upstream_findings(pretrain: Mapping[str, Any] | None, distill: Mapping[str, Any] | None,
                      sources: ReportSources) -> list[str]:
    """What the pre-training budget bought and what distillation kept, from the stages' quality metrics.

    ``pretrain``: pre-training's metrics (``eval.mlm_accuracy``, ``eval.unigram_accuracy``, ``tokens_seen``,
    ``size``, ``steps``, and where recorded ``eval.mlm_loss`` against ``unigram_loss``, in nats); ``distill``:
    distillation's (``student``/``teacher`` blocks, ``mlm_accuracy_share``, ``parameter_ratio``). Absent files or keys give no line.
    """
    lines = []
    ev = (pretrain or {}).get("eval") or {}
    if ev.get("mlm_accuracy") is not None and ev.get("unigram_accuracy"):
        seen = pretrain.get("tokens_seen")
        lines.append(
            f"Pre-training ({pretrain.get('size', '?')}, {pretrain.get('steps', '?')} steps"
            + (f", {seen:,} tokens seen" if seen else "") + f"): held-out MLM accuracy "
            f"{100 * ev['mlm_accuracy']:.2f}% vs {100 * ev['unigram_accuracy']:.2f}% for always guessing the most "
            f"frequent token ({ev['mlm_accuracy'] / ev['unigram_accuracy']:.2f}x)"
            + (f"; held-out loss {ev['mlm_loss']:.2f} nats per masked token vs {pretrain['unigram_loss']:.2f} from "
               f"token frequency alone, {abs(pretrain['unigram_loss'] - ev['mlm_loss']):.2f} "
               + ("below it" if ev["mlm_loss"] <= pretrain["unigram_loss"] else "above it, not yet learnt")
               if pretrain.get("unigram_loss") is not None and ev.get("mlm_loss") is not None else "")
            + f" ({sources.pretrain}).")
    st, te = (distill or {}).get("student") or {}, (distill or {}).get("teacher") or {}
    if st.get("mlm_accuracy") is not None and te.get("mlm_accuracy") is not None:
        lines.append(
            f"Distillation: the {st.get('layers', '?')}-layer student reaches {100 * st['mlm_accuracy']:.2f}% held-out "
            f"MLM accuracy vs {100 * te['mlm_accuracy']:.2f}% for the {te.get('layers', '?')}-layer teacher"
            + (f", with {100 * distill['parameter_ratio']:.1f}% of its parameters" if distill.get("parameter_ratio")
               else "") + f" ({sources.distill}).")
    return lines


def scalar_facts(obj: Mapping[str, Any], limit: int = 12) -> list[str]:
    """``key: value`` for the top-level numbers and strings of a metrics file (first ``limit``, sorted)."""
    items = []
    for key in sorted(obj):
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        items.append(f"{key}: {value:,}" if isinstance(value, int) else
                     f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return items[:limit]


def figures_section(figures: Sequence[ReportFigure], link_dir: str) -> list[str]:
    """Markdown lines of the page's figures: a ``## Figures`` heading, then per figure an image with a relative
    link (``![caption](link_dir/name)``) and a numbered caption naming the file its numbers come from; ``[]`` when
    there is no figure. ``figures``: objects with ``name``, ``caption`` and ``source``
    (:class:`bert_pipeline.report.figures.ReportFigure`)."""
    if not figures:
        return []
    out = ["## Figures", ""]
    for i, f in enumerate(figures, 1):
        out += [f"![{f.caption}]({link_dir}/{f.name})", "", f"*Figure {i}. {f.caption} (`{f.source}`).*", ""]
    return out


UNITS = {"sequence-classification": "sentences", "token-classification": "tokens", "question-answering": "answers"}


@dataclass(frozen=True)
class DistillationPair:
    """A teacher and the student distilled from it: ``method`` (how, with its source) and the student's training
    cost (``train_seconds``: wall seconds of every run that made it; ``cost_note``: what they cover)."""

    teacher: str
    student: str
    method: str
    train_seconds: float | None = None
    cost_note: str = ""


def distillation_section(pairs: Sequence[DistillationPair], index: Mapping[tuple[str, str], FinetuneResult],
                         facts: Mapping[str, ModelFacts], tasks: Sequence[str], throughput_batch_size: int,
                         sources: ReportSources, intervals: Mapping[str, Any] | None = None) -> str:
    """One table per teacher/student pair (Markdown; ``""`` when no pair has results): parameters (total and
    encoder), each task's test score (mean over seeds, seed count) and the student's share of the teacher's,
    latency at batch 1 and throughput at ``throughput_batch_size`` on the same inputs and threads, the speed
    ratios, and the student's training cost. Scores and shares carry their intervals from ``intervals`` (flat keys
    ``{member}.{task}.{metric}``, ``distillation.{student}.{task}_share``) where there is one."""
    iv = intervals or {}
    blocks = []
    for pair in pairs:
        t, s = pair.teacher, pair.student
        if not any((s, task) in index for task in tasks) or not any((t, task) in index for task in tasks):
            continue
        rows: list[list[str]] = []
        ft, fs = facts.get(t), facts.get(s)

        def ratio(a: float | None, b: float | None) -> str:
            return f"{a / b:.2f}" if a and b else "–"

        for label, attr in (("parameters, encoder with embeddings (as the family table)", "parameters"),
                            ("parameters, encoder layers", "encoder_parameters")):
            a, b = getattr(ft, attr, None), getattr(fs, attr, None)
            rows.append([label, fmt_params(a), fmt_params(b), ratio(b, a)])
        shares = student_shares(index, t, s, tasks)
        for task in tasks:
            rt, rs = index.get((t, task)), index.get((s, task))
            if rt is None or rs is None:
                continue
            seeds_t, seeds_s = len(rt.test_seeds.get(rt.main_metric, ())) or 1, len(rs.test_seeds.get(rs.main_metric, ())) or 1
            share = shares.get(task)
            rows.append([f"{task_header(task, rt.main_metric)} (test; seeds {seeds_t} / {seeds_s})",
                         fmt_scored(rt.score, iv.get(f"{t}.{task}.{rt.main_metric}")),
                         fmt_scored(rs.score, iv.get(f"{s}.{task}.{rs.main_metric}")),
                         "–" if share is None else fmt_share(share, iv.get(f"distillation.{s}.{task}_share"), 1)])
        if shares:
            rows.append(["student's share, mean over tasks", "", "",
                         fmt_share(sum(shares.values()) / len(shares), iv.get(f"distillation.{s}.average_share"), 1)])
        lat_t, lat_s = getattr(ft, "latency_ms", None), getattr(fs, "latency_ms", None)
        thr_t, thr_s = getattr(ft, "throughput", None), getattr(fs, "throughput", None)
        rows.append(["latency ms/example (b=1)", "–" if lat_t is None else f"{lat_t:.2f}",
                     "–" if lat_s is None else f"{lat_s:.2f}", f"{ratio(lat_t, lat_s)}x faster"])
        rows.append([f"throughput examples/s (b={throughput_batch_size})", "–" if thr_t is None else f"{thr_t:.0f}",
                     "–" if thr_s is None else f"{thr_s:.0f}", f"{ratio(thr_s, thr_t)}x"])
        cost = "–" if pair.train_seconds is None else f"{pair.train_seconds / 60:.1f} min"
        rows.append(["student's training (wall)", "", cost, pair.cost_note])
        blocks += [f"### {t} → {s}: {pair.method}", "",
                   markdown_table(["", f"teacher `{t}`", f"student `{s}`", "student / teacher"], rows), ""]
    if not blocks:
        return ""
    return "\n".join([
        "## Distillation", "",
        "Each student against the teacher it learned from, on the same test sets; speed on the same inputs and CPU "
        f"threads as the family table (`{sources.evaluate_timing}`); scores from `{sources.finetune_metrics}`.", "",
        *blocks]).rstrip() + "\n"


PAIR_REGRESSION_METRICS = {"pair_classification": (("accuracy", "accuracy"), ("macro_f1", "macro F1")),
                           "regression": (("pearson", "Pearson r"), ("spearman", "Spearman rho"), ("mse", "MSE"))}
"""The test metrics the pair and regression table shows per kind (key, column label)."""


def pair_regression_section(results: Sequence[FinetuneResult], models: Sequence[str]) -> str:
    """The sentence-pair and regression tasks' test metrics (Markdown), ``""`` when there is none: per task one
    table, a row per family member (in ``models`` order), pair classification's accuracy and macro-F1 in points,
    regression's Pearson and Spearman correlation (x 100, as GLUE reports STS-B) and MSE (label units squared)."""
    by_task: dict[str, dict[str, FinetuneResult]] = {}
    for r in results:
        if r.kind in PAIR_REGRESSION_METRICS:
            by_task.setdefault(r.task, {})[r.model] = r
    if not by_task:
        return ""
    blocks = []
    for task in task_order(by_task):
        members = by_task[task]
        kind = next(iter(members.values())).kind
        cols = PAIR_REGRESSION_METRICS[kind]
        rows = []
        for m in [m for m in models if m in members] + sorted(set(members) - set(models)):
            test = members[m].test
            rows.append([m, *("–" if key not in test else (f"{test[key]:.4f}" if key == "mse" else fmt_score(test[key]))
                              for key, _ in cols)])
        what = task_kinds.get(kind).report_data_text
        blocks += [f"### {task}: {what}", "", markdown_table(["model", *(label for _, label in cols)], rows), ""]
    return "\n".join(["## Sentence-pair and regression tasks", "",
                      "Test means over seeds; the main metric is also in the family table.", "", *blocks]).rstrip() + "\n"


def onnx_section(parity: Mapping[str, Any] | None, timing: Mapping[str, Any] | None, sources: ReportSources) -> str:
    """The ONNX export table (Markdown), ``""`` when nothing was exported.

    ``parity``: the export stage's quality file, per ``{model}-{task}`` ``{"kind", "max_abs_diff": {OUTPUT: float},
    "agreement", "compared", ...}``; ``timing``: its timing file, per ``{model}-{task}`` ``{"pytorch_ms",
    "onnxruntime_ms", "speedup", "threads"}`` (absent: latency columns show ``–``). One row per export: the largest
    absolute logit difference over its outputs, the share of equal predictions (labels, per-token tags, decoded
    answers), PyTorch and ONNX Runtime ms per window at batch 1 and their ratio.
    """
    if not parity:
        return ""
    header = ["export", "max abs logit diff", "equal predictions", "PyTorch ms (b=1)", "ONNX Runtime ms (b=1)",
              "ONNX Runtime speed-up"]
    rows = []
    threads = set()
    for name, rec in parity.items():
        t = (timing or {}).get(name) or {}
        diffs = list((rec.get("max_abs_diff") or {}).values())
        threads.add(t.get("threads"))
        rows.append([name, f"{max(diffs):.1e}" if diffs else "–",
                     f"{100 * rec['agreement']:.1f}% of {rec.get('compared', '?')} {UNITS.get(rec.get('kind'), '')}"
                     .rstrip(),
                     "–" if t.get("pytorch_ms") is None else f"{t['pytorch_ms']:.2f}",
                     "–" if t.get("onnxruntime_ms") is None else f"{t['onnxruntime_ms']:.2f}",
                     "–" if not t.get("speedup") else f"{t['speedup']:.1f}x"])
    n_threads = "/".join(str(x) for x in sorted(x for x in threads if x is not None)) or "?"
    return "\n".join([
        "## ONNX export", "",
        "Each exported head checked against PyTorch on its task's test inputs (dynamic batch and sequence axes); "
        f"latency: CPU, {n_threads} thread(s), ms per window at batch 1, ONNX Runtime speed-up = PyTorch ms / "
        f"ONNX Runtime ms (`{sources.export}`, `{sources.export_timing}`).", "",
        markdown_table(header, rows)])


def render_summary(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    lines: Sequence[str],
    corpus: Mapping[str, Any] | None,
    tokenizer: Mapping[str, Any] | None,
    card: Mapping[str, Any] | None,
    sources: ReportSources,
    speed_note: str = "",
    figures: Sequence[ReportFigure] = (),
    sections: Sequence[str] = (),
) -> str:
    """The whole summary page: table, findings, figures (:func:`figures_section`), ``sections`` (Markdown blocks,
    e.g. :func:`onnx_section`), corpus and tokenizer facts, sources, report card."""
    out = ["# The model family", "",
           "Test-split scores in points (mean over fine-tuning seeds) of each task's main metric; NER is scored",
           "against spaCy's **silver** labels (agreement with spaCy, not accuracy). " + speed_note, "",
           markdown_table(header, rows)]
    if lines:
        out += [f"- {line}" for line in lines] + [""]
    out += figures_section(figures, sources.figures)
    out += [block for block in sections if block]
    if corpus:
        out += [f"Corpus ({sources.corpus}): " + ", ".join(scalar_facts(corpus)) + ".", ""]
    if tokenizer:
        out += [f"Tokenizer ({sources.tokenizer}): " + ", ".join(scalar_facts(tokenizer)) + ".", ""]
    out += [f"Sources: scores from `{sources.finetune_metrics}/{{model}}-{{task}}.json`; parameters and size on disk from",
            f"`{sources.finetuned_models}/{{model}}-{{task}}/` (`{sources.evaluate}`); latency, throughput and relative "
            "speed from", f"`{sources.evaluate_timing}`.", ""]
    if card:
        out.append(render_report_card(card, sources))
    return "\n".join(out).rstrip("\n") + "\n"
