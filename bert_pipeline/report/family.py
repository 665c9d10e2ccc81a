"""Evaluating the model family as one: each member's inference cost, the sentiment confusion matrix, the NER
per-type scores, and the inputs of the report (:mod:`bert_pipeline.report.report`).

:func:`evaluate_family` is the evaluate stage's work over folders the caller names (:class:`FamilyInputs`); it
returns the page, the flat quality metrics, the timing record, the plot tables and the page's figures (PNG bytes,
:mod:`bert_pipeline.report.figures`), and writes nothing.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.evaluation.predictor import load_predictor
from bert_pipeline.evaluation.speed import measure_speed, size_on_disk_mb
from bert_pipeline.model.configs import count_parameters
from bert_pipeline.report.budget_curve import budget_curve_section
from bert_pipeline.report.figures import FigureSources, ReportFigure, family_figures
from bert_pipeline.report.intervals import (
    FamilyIntervals,
    family_intervals,
    flat_intervals,
    how_sure_section,
    load_records,
)
from bert_pipeline.report.provenance import report_card
from bert_pipeline.report.report import (
    DistillationPair,
    FinetuneResult,
    ModelFacts,
    ReportSources,
    average_score,
    by_model_task,
    distillation_section,
    family_order,
    findings,
    load_finetune_results,
    onnx_section,
    pair_regression_section,
    relative_speed,
    render_summary,
    student_shares,
    table,
    task_order,
    tokens_seen_of,
    upstream_findings,
)
from bert_pipeline.report.retrieval import retrieval_section
from bert_pipeline.report.variants import variants_section
from bert_pipeline.tasks.sequence import class_probabilities

log = logging.getLogger(__name__)


def read_json(path: Path) -> dict[str, Any] | None:
    """Parsed JSON of ``path``, or None when the file does not exist.

    Raises:
        PipelineError: the file exists but is not valid JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None


def model_folder(model: str, task: str, root: Path) -> Path:
    """``root/{model}-{task}``, the fine-tuned folder a metrics file names.

    Raises:
        PipelineError: the folder is missing.
    """
    folder = root / f"{model}-{task}"
    if not (folder / "config.json").exists():
        raise PipelineError(f"{folder}: missing (a fine-tuning metrics file names {model}-{task}; expected a "
                            "save_pretrained folder)")
    return folder


def load_test_split(task_dir: Path):
    """The ``test`` split of a task folder (a ``datasets.Dataset``).

    Raises:
        PipelineError: not a saved DatasetDict with a test split.
    """
    from datasets import load_from_disk

    try:
        return load_from_disk(str(task_dir))["test"]
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise PipelineError(f"{task_dir}: expected a saved DatasetDict with a test split ({exc})") from None


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    """CSV text with ``\\n`` line ends."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def sentiment_confusion(models: list[str], finetuned: Path, task_dir: Path, max_examples: int | None,
                        seq_length: int) -> dict[str, list[list[str]]]:
    """Per model, ``[actual, predicted]`` label names for the sentiment test examples (first ``max_examples``)."""
    if not any((finetuned / f"{m}-sentiment").exists() for m in models):
        return {}
    ds = load_test_split(task_dir)
    if max_examples is not None:
        ds = ds.select(range(min(max_examples, len(ds))))
    names = ds.features["label"].names if hasattr(ds.features["label"], "names") else None
    texts, gold = list(ds["text"]), list(ds["label"])
    out = {}
    for m in models:
        folder = finetuned / f"{m}-sentiment"
        if not folder.exists():
            continue
        pred = load_predictor(folder)
        # label ids are the dataset's ClassLabel ids (finetune trains on them); names from the dataset if it has them
        label = names or [pred.model.config.id2label[i] for i in range(pred.model.config.num_labels)]
        guess = class_probabilities(pred, texts, max_seq_length=seq_length).argmax(dim=-1).tolist()
        out[m] = [[label[g], label[p]] for g, p in zip(gold, guess, strict=True)]
        log.info("%s-sentiment: %d test predictions", m, len(guess))
    return out


def ner_per_type(index: dict[tuple[str, str], FinetuneResult], models: list[str],
                 intervals: Mapping[str, Any] | None = None) -> list[list[Any]]:
    """Rows ``[model, type, f1 points, "TYPE model", interval low, high]`` from the ``f1_TYPE`` test means of
    ``{model}-ner`` (the interval in points from ``intervals``' ``{model}.ner.f1_TYPE``, empty without one)."""
    rows = []
    iv = intervals or {}
    for m in models:
        r = index.get((m, "ner"))
        if r is None:
            continue
        for key in sorted(k for k in r.test if k.startswith("f1_")):
            b = iv.get(f"{m}.ner.{key}")
            rows.append([m, key[3:], round(100 * r.test[key], 2), f"{key[3:]} {m}",
                         "" if b is None else round(100 * b.low, 2), "" if b is None else round(100 * b.high, 2)])
    return rows


def flat_metrics(index: dict[tuple[str, str], FinetuneResult], facts: dict[str, ModelFacts], models: list[str],
                 tasks: list[str], teacher: str, student: str, scratch: str) -> dict[str, float]:
    """Flat ``{key: number}`` of the deterministic figures: every test mean, averages, parameters, MB on disk,
    pre-training gain over scratch and the student's share of the teacher's score per task."""
    out: dict[str, float] = {}
    for (m, t), r in index.items():
        for metric, value in r.test.items():
            out[f"{m}.{t}.{metric}"] = round(value, 6)
        if r.low_resource_test.get(r.main_metric) is not None:
            out[f"{m}.{t}.low_resource_{r.main_metric}"] = round(r.low_resource_test[r.main_metric], 6)
    for m in models:
        scores = [index[m, t].score for t in tasks if (m, t) in index]
        if len(scores) == len(tasks):
            out[f"{m}.average"] = round(sum(scores) / len(scores), 6)
        if m in facts:
            out[f"{m}.parameters"] = facts[m].parameters
            out[f"{m}.size_mb"] = round(facts[m].size_mb, 3)
    for t in tasks:
        if (teacher, t) in index and (scratch, t) in index:
            out[f"gain_over_scratch.{t}"] = round(index[teacher, t].score - index[scratch, t].score, 6)
    for t, share in student_shares(index, teacher, student, tasks).items():
        out[f"student_share.{t}"] = round(share, 6)
    return out


def low_resource_gains(index: dict[tuple[str, str], FinetuneResult], tasks: list[str], teacher: str,
                       scratch: str) -> dict[str, float]:
    """``low_resource_gain.{task}``: the teacher's low-resource main test metric minus the scratch baseline's, for
    the tasks where both ran one."""
    out = {}
    for t in tasks:
        a, b = index.get((teacher, t)), index.get((scratch, t))
        if a and b and a.low_resource_test.get(a.main_metric) is not None \
                and b.low_resource_test.get(b.main_metric) is not None:
            out[f"low_resource_gain.{t}"] = round(a.low_resource_test[a.main_metric]
                                                  - b.low_resource_test[b.main_metric], 6)
    return out


def distillation_pairs(results: list[FinetuneResult], teacher: str, student: str,
                       metrics_dir: Path) -> list[DistillationPair]:
    """The family's teacher/student pairs: ``teacher`` -> ``student`` (general distillation, the distill stage) and
    every task-specific student (a metrics file naming its ``teacher``), with the student's training wall seconds
    from the timing files present in ``metrics_dir`` (``distill-timing.json``; ``finetune-timing/`` and
    ``teacher_logits-timing/``); None where none is on record."""
    general = read_json(metrics_dir / "distill-timing.json") or {}
    pairs = [DistillationPair(teacher, student, "general distillation (Sanh et al. 2019, §3), then fine-tuning",
                              general.get("train_seconds"), "distill stage (MLM triple loss) only")]
    students: dict[str, tuple[str, list[str]]] = {}
    for r in results:
        if r.teacher:
            students.setdefault(r.model, (r.teacher, []))[1].append(r.task)
    for name, (of, tasks) in sorted(students.items()):
        seconds, parts = 0.0, 0
        for task in sorted(tasks):
            run = read_json(metrics_dir / "finetune-timing" / f"{name}-{task}.json") or {}
            labels = read_json(metrics_dir / "teacher_logits-timing" / f"{task}.json") or {}
            seconds += sum(run.get("train_seconds", ())) + labels.get("wall_seconds", 0.0)
            parts += bool(run)
        pairs.append(DistillationPair(of, name, "task-specific distillation (Sanh et al. 2019, §4.2)",
                                      seconds if parts else None,
                                      f"{len(tasks)} tasks, every seed, teacher logits included"))
    return pairs


def pair_shares(pairs: list[DistillationPair], index: dict[tuple[str, str], FinetuneResult],
                tasks: list[str]) -> dict[str, float]:
    """``distillation.{student}.{task}_share`` (student's main test metric / its teacher's) and
    ``distillation.{student}.average_share`` (their mean over the tasks both have)."""
    out: dict[str, float] = {}
    for pair in pairs:
        shares = student_shares(index, pair.teacher, pair.student, tasks)
        for t, share in shares.items():
            out[f"distillation.{pair.student}.{t}_share"] = round(share, 6)
        if shares:
            out[f"distillation.{pair.student}.average_share"] = round(sum(shares.values()) / len(shares), 6)
    return out


@dataclass(frozen=True)
class FamilyInputs:
    """Where the family's results are: fine-tuning metrics and models, the task sets, the upstream metrics files
    (``metrics_dir`` holds ``pretrain.json``, ``distill.json``, ``corpus.json``, ``tokenizer.json`` and the timing
    files), the raw data's ``SOURCES.json``, the repository (git), what the page cites (``sources``), the upstream
    plot CSVs the figures are drawn from (``figures``), the sha256 of the pipeline's lock file for the report
    card (``lock_sha256``, None when there is none), and the members' per-example records (``examples``:
    ``{member}-{task}.arrow``, :mod:`bert_pipeline.evaluation.examples`)."""

    finetune_metrics: Path
    finetuned: Path
    tasks: Path
    metrics_dir: Path
    sources_json: Path
    repo: Path
    sources: ReportSources
    figures: FigureSources
    lock_sha256: str | None
    examples: Path


@dataclass
class FamilyEvaluation:
    """What :func:`evaluate_family` produced (nothing is written): the Markdown page, the flat quality metrics, the
    timing record, the plot tables (``confusion``: per model ``[actual, predicted]`` rows) and the figures the page
    links (``figures``: PNG bytes each, to be written under the folder ``ReportSources.figures`` names)."""

    summary: str
    flat: dict[str, float]
    timing: dict[str, Any]
    confusion: dict[str, list[list[str]]]
    ner_per_type: list[list[Any]]
    score_vs_speed: list[list[Any]] = field(default_factory=list)
    figures: list[ReportFigure] = field(default_factory=list)


def distilled_row(index: Mapping[tuple[str, str], FinetuneResult], facts: Mapping[str, ModelFacts], student: str,
                  reference: str, tasks: Sequence[str]) -> dict[str, Any] | None:
    """The pipeline's own student as the variants table's DistilBERT counterpart: ``{"parameters", "scores": {task:
    {"mean"}}, "speed"}`` (encoder parameters, the test main metric of each of ``tasks`` it was fine-tuned on, speed
    relative to ``reference``), or None when the student has no fine-tuning metrics."""
    if student not in facts:
        return None
    scores = {t: {"mean": index[(student, t)].test[index[(student, t)].main_metric]} for t in tasks
              if (student, t) in index}
    return {"parameters": facts[student].parameters, "scores": scores,
            "speed": relative_speed(facts, student, reference)}


def evaluate_family(inputs: FamilyInputs, *, runtime: Any, teacher: str, student: str, scratch: str, speed_task: str,
                    seq_length: int, latency_examples: int, throughput_batch_size: int, warmup_runs: int,
                    timed_runs: int, num_threads: int, confusion_max_examples: int | None,
                    intervals: Mapping[str, Any] | None = None) -> FamilyEvaluation:
    """Compare the family: test scores from the metrics files, the speed of each member's ``speed_task`` model on
    ``runtime``'s device (:func:`bert_pipeline.evaluation.speed.measure_speed`; the stage gives a CPU runtime: the
    report's figures are CPU serving costs), the confusion matrix of every sentiment model, the
    findings, the figures (:func:`bert_pipeline.report.figures.family_figures`; score vs speed is wall clock)
    and the report card. ``intervals`` (``resamples``, ``confidence``, ``seed``, ``method``, ``primary``; None:
    no intervals) gives every score, gain and share its paired bootstrap interval from the per-example records
    (:func:`bert_pipeline.report.intervals.family_intervals`), in the tables, the findings, the "How sure" section,
    the figures' error bars and the flat metrics (``KEY_ci_low`` / ``KEY_ci_high``).

    Raises:
        PipelineError: no metrics files, a malformed one, a fine-tuned folder missing, or a plot CSV without its
            columns.
    """
    start = time.perf_counter()
    results = load_finetune_results(inputs.finetune_metrics)
    index = by_model_task(results)
    models = family_order({m for m, _ in index}, teacher, student, scratch)
    tasks = task_order({t for _, t in index})
    reference = teacher if teacher in models else models[0]
    if reference != teacher:
        log.warning("no fine-tuning metrics of %s (evaluate.teacher): speeds relative to %s", teacher, reference)

    texts = None
    facts: dict[str, ModelFacts] = {}
    speeds = {}
    for m in models:
        task = speed_task if (m, speed_task) in index else next(t for t in tasks if (m, t) in index)
        folder = model_folder(m, task, inputs.finetuned)
        pred = load_predictor(folder)
        if texts is None:
            texts = [str(x) for x in load_test_split(inputs.tasks / speed_task)["text"][
                : max(latency_examples, throughput_batch_size)]]
        speed = measure_speed(pred.model, pred.tokenizer, texts, runtime, seq_length, latency_examples,
                              throughput_batch_size, warmup_runs, timed_runs, num_threads)
        speeds[m] = speed
        facts[m] = ModelFacts(count_parameters(pred.model.base_model), size_on_disk_mb(folder), speed.latency_ms,
                              speed.throughput, encoder_parameters=count_parameters(pred.model.base_model, exclude_embeddings=True))
        log.info("%s: %.1f ms/example (b=1), %.0f examples/s (b=%d)", m, speed.latency_ms, speed.throughput,
                 throughput_batch_size)

    confusion = sentiment_confusion(models, inputs.finetuned, inputs.tasks / "sentiment", confusion_max_examples,
                                    seq_length)
    pretrain = read_json(inputs.metrics_dir / "pretrain.json")
    tokens_seen = tokens_seen_of(pretrain, read_json(inputs.metrics_dir / "pretrain-timing.json"))
    pairs = distillation_pairs(results, teacher, student, inputs.metrics_dir)
    sure = FamilyIntervals()
    if intervals is not None:
        boot = Bootstrap(intervals["resamples"], intervals["confidence"], intervals["seed"], intervals["method"])
        records = load_records(inputs.examples, sorted(index))
        sure = family_intervals(records, models, tasks, teacher, student, scratch,
                                [(p.teacher, p.student) for p in pairs], boot, intervals["primary"])
    header, rows = table(results, facts, teacher, student, scratch, reference, sure.intervals)
    lines = findings(results, facts, teacher, student, scratch, tokens_seen, inputs.sources, sure.intervals)
    lines += upstream_findings(pretrain, read_json(inputs.metrics_dir / "distill.json"), inputs.sources)
    card = report_card(inputs.repo, inputs.metrics_dir, inputs.sources_json, tokens_seen, inputs.lock_sha256)
    lengths = "/".join(str(n) for n in sorted({s.seq_length for s in speeds.values()}))
    note = (f"Speed: CPU, {num_threads} thread(s), inputs padded to {lengths} tokens, median of "
            f"{timed_runs} runs after {warmup_runs} warm-up; throughput at batch {throughput_batch_size}; "
            f"relative speed: {reference} = 1.0x.")
    score_vs_speed = [[m, round(100 * avg, 2) if (avg := average_score(index, m, tasks)) is not None else "",
                       round(relative_speed(facts, m, reference) or 0.0, 3), round(facts[m].latency_ms or 0, 3),
                       round(facts[m].throughput or 0, 2),
                       *((round(100 * b.low, 2), round(100 * b.high, 2)) if (b := sure.intervals.get(f"{m}.average"))
                         else ("", ""))] for m in models]
    per_type = ner_per_type(index, models, sure.intervals)
    curve = read_json(inputs.metrics_dir / "budget_curve.json")
    figures = family_figures(inputs.figures, score_vs_speed=score_vs_speed, confusion=confusion,
                             ner_per_type=per_type, reference=reference, budget_curve=curve)
    budget = budget_curve_section(curve, read_json(inputs.metrics_dir / "budget_curve-timing.json"),
                                  inputs.sources.budget_curve, inputs.sources.budget_curve_timing)
    onnx = onnx_section(read_json(inputs.metrics_dir / "export.json"),
                        read_json(inputs.metrics_dir / "export-timing.json"), inputs.sources)
    retrieval = retrieval_section(read_json(inputs.metrics_dir / "retrieval.json"), inputs.sources.retrieval,
                                  order=models)
    variants_record = read_json(inputs.metrics_dir / "variants.json")
    variants = variants_section(variants_record, read_json(inputs.metrics_dir / "variants-timing.json"),
                                inputs.sources.variants, inputs.sources.variants_timing,
                                distilled_row(index, facts, student, reference, (variants_record or {}).get("tasks", ())))
    distilled = distillation_section(pairs, index, facts, tasks, throughput_batch_size, inputs.sources,
                                     sure.intervals)
    summary = render_summary(header, rows, lines, read_json(inputs.metrics_dir / "corpus.json"),
                             read_json(inputs.metrics_dir / "tokenizer.json"), card, inputs.sources, note, figures,
                             sections=[how_sure_section(sure, inputs.sources.examples),
                                       pair_regression_section(results, models), retrieval, budget, variants, distilled,
                                       onnx])

    flat = flat_metrics(index, facts, models, tasks, teacher, student, scratch)
    flat.update(pair_shares(pairs, index, tasks))
    flat.update(low_resource_gains(index, tasks, teacher, scratch))
    flat.update(flat_intervals(sure))
    for m, pairs in confusion.items():  # the saved (first-seed) model on the confusion matrix's examples
        flat[f"{m}.sentiment.confusion_examples"] = len(pairs)
        flat[f"{m}.sentiment.confusion_accuracy"] = round(sum(a == b for a, b in pairs) / max(len(pairs), 1), 6)
    timing: dict[str, Any] = {}
    for m, s in speeds.items():
        timing[f"{m}.latency_ms_b1"] = round(s.latency_ms, 3)
        timing[f"{m}.throughput_b{s.batch_size}"] = round(s.throughput, 2)
        timing[f"{m}.relative_speed"] = round(relative_speed(facts, m, reference) or 0.0, 3)
    timing["wall_seconds"] = round(time.perf_counter() - start, 2)
    return FamilyEvaluation(summary, flat, timing, confusion, per_type, score_vs_speed, figures)
