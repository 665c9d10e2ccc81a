"""Stage ``evaluate``: one report that compares the model family.

Reads every ``metrics/finetune/{model}-{task}.json`` and the fine-tuned folders ``models/finetuned/{model}-{task}/``,
measures each member's CPU inference cost, and writes:

- ``reports/summary.md``: the table (a row per member: parameters, each task's test score, the average, relative
  speed with the teacher = 1.0x), the findings (pre-training gain over scratch, the student's share and speed-up),
  corpus and tokenizer facts, sources, and the report card (provenance);
- ``metrics/evaluate.json``: flat quality figures for ``dvc metrics show/diff`` (byte-identical on rerun);
- ``metrics/evaluate-timing.json``: latency, throughput, relative speed, the report card's wall times (``cache: false``);
- plots: ``plots/evaluate/sentiment_confusion/{model}.csv`` (actual, predicted per test example),
  ``plots/evaluate/ner_f1_per_type.csv`` (silver labels), ``plots/evaluate/score_vs_speed.csv`` (``cache: false``).

Registering and promoting models is not done here (``python -m stages.promote``).
"""

from __future__ import annotations

import csv
import io
import json
import logging
import time
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.predictor import class_probabilities, load_predictor
from bert_pipeline.evaluation.report import (
    FinetuneResult,
    ModelFacts,
    average_score,
    by_model_task,
    family_order,
    findings,
    load_finetune_results,
    relative_speed,
    render_summary,
    report_card,
    table,
    task_order,
    tokens_seen_of,
    upstream_findings,
)
from bert_pipeline.evaluation.speed import encoder_parameters, measure_speed, size_on_disk_mb
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.mlops import tracking
from stages.params import EvaluateParams, load_params

log = logging.getLogger(__name__)

METRICS = Path("metrics")
FINETUNE_METRICS = METRICS / "finetune"
FINETUNED = Path("models/finetuned")
TASKS = Path("data/tasks")
SOURCES = Path("data/raw/SOURCES.json")
REPORT = Path("reports/summary.md")
PLOTS = Path("plots/evaluate")
OUT_METRICS = METRICS / "evaluate.json"
OUT_TIMING = METRICS / "evaluate-timing.json"


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


def model_folder(model: str, task: str, root: Path = FINETUNED) -> Path:
    """``models/finetuned/{model}-{task}``.

    Raises:
        PipelineError: the folder is missing though a metrics file names it.
    """
    folder = root / f"{model}-{task}"
    if not (folder / "config.json").exists():
        raise PipelineError(f"{folder}: missing (metrics/finetune/{model}-{task}.json exists; expected a save_pretrained folder)")
    return folder


def load_test_split(task: str, root: Path = TASKS):
    """The ``test`` split of ``data/tasks/{task}`` (a ``datasets.Dataset``).

    Raises:
        PipelineError: not a saved DatasetDict with a test split.
    """
    from datasets import load_from_disk

    try:
        return load_from_disk(str(root / task))["test"]
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise PipelineError(f"{root / task}: expected a saved DatasetDict with a test split ({exc})") from None


def csv_text(header: list[str], rows: list[list[Any]]) -> str:
    """CSV text with ``\\n`` line ends."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def sentiment_confusion(models: list[str], max_examples: int | None, seq_length: int) -> dict[str, list[list[str]]]:
    """Per model, ``[actual, predicted]`` label names for the sentiment test examples (first ``max_examples``)."""
    if not any((FINETUNED / f"{m}-sentiment").exists() for m in models):
        return {}
    ds = load_test_split("sentiment")
    if max_examples is not None:
        ds = ds.select(range(min(max_examples, len(ds))))
    names = ds.features["label"].names if hasattr(ds.features["label"], "names") else None
    texts, gold = list(ds["text"]), list(ds["label"])
    out = {}
    for m in models:
        folder = FINETUNED / f"{m}-sentiment"
        if not folder.exists():
            continue
        pred = load_predictor(folder)
        # label ids are the dataset's ClassLabel ids (finetune trains on them); names from the dataset if it has them
        label = names or [pred.model.config.id2label[i] for i in range(pred.model.config.num_labels)]
        guess = class_probabilities(pred, texts, max_seq_length=seq_length).argmax(dim=-1).tolist()
        out[m] = [[label[g], label[p]] for g, p in zip(gold, guess, strict=True)]
        log.info("%s-sentiment: %d test predictions", m, len(guess))
    return out


def ner_per_type(index: dict[tuple[str, str], FinetuneResult], models: list[str]) -> list[list[Any]]:
    """Rows ``[model, type, f1 points, "TYPE model"]`` from the ``f1_TYPE`` test means of ``{model}-ner``."""
    rows = []
    for m in models:
        r = index.get((m, "ner"))
        if r is None:
            continue
        for key in sorted(k for k in r.test if k.startswith("f1_")):
            rows.append([m, key[3:], round(100 * r.test[key], 2), f"{key[3:]} {m}"])
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
        if (teacher, t) in index and (student, t) in index and index[teacher, t].score > 0:
            out[f"student_share.{t}"] = round(index[student, t].score / index[teacher, t].score, 6)
    return out


def main() -> None:
    start = time.perf_counter()
    p = load_params().evaluate
    with tracking.stage_run("evaluate", p.model_dump()) as run:
        flat, timing = evaluate(p, start)
        run.log_metrics(flat)
        run.log_metrics(timing)
        for path in (REPORT, OUT_METRICS, OUT_TIMING, PLOTS / "score_vs_speed.csv", PLOTS / "ner_f1_per_type.csv"):
            run.log_artifact(path)


def evaluate(p: EvaluateParams, start: float) -> tuple[dict[str, float], dict[str, Any]]:
    """The stage's work (see the module docstring); returns the flat quality metrics and the timing figures."""
    results = load_finetune_results(FINETUNE_METRICS)
    index = by_model_task(results)
    models = family_order({m for m, _ in index}, p.teacher, p.student, p.scratch)
    tasks = task_order({t for _, t in index})
    reference = p.teacher if p.teacher in models else models[0]
    if reference != p.teacher:
        log.warning("no metrics/finetune/%s-*.json (evaluate.teacher): speeds relative to %s", p.teacher, reference)

    texts = None
    facts: dict[str, ModelFacts] = {}
    speeds = {}
    for m in models:
        task = p.speed_task if (m, p.speed_task) in index else next(t for t in tasks if (m, t) in index)
        folder = model_folder(m, task)
        pred = load_predictor(folder)
        if texts is None:
            texts = [str(x) for x in load_test_split(p.speed_task)["text"][: max(p.latency_examples,
                                                                              p.throughput_batch_size)]]
        speed = measure_speed(pred.model, pred.tokenizer, texts, p.seq_length, p.latency_examples,
                              p.throughput_batch_size, p.warmup_runs, p.timed_runs, p.num_threads)
        speeds[m] = speed
        facts[m] = ModelFacts(encoder_parameters(pred.model), size_on_disk_mb(folder), speed.latency_ms,
                              speed.throughput)
        log.info("%s: %.1f ms/example (b=1), %.0f examples/s (b=%d)", m, speed.latency_ms, speed.throughput,
                 p.throughput_batch_size)

    confusion = sentiment_confusion(models, p.confusion_max_examples, p.seq_length)
    tokens_seen = tokens_seen_of(read_json(METRICS / "pretrain.json"), read_json(METRICS / "pretrain-timing.json"))
    header, rows = table(results, facts, p.teacher, p.student, p.scratch, reference)
    lines = findings(results, facts, p.teacher, p.student, p.scratch, tokens_seen)
    lines += upstream_findings(read_json(METRICS / "pretrain.json"), read_json(METRICS / "distill.json"))
    card = report_card(Path.cwd(), METRICS, SOURCES, tokens_seen)
    lengths = "/".join(str(n) for n in sorted({s.seq_length for s in speeds.values()}))
    note = (f"Speed: CPU, {p.num_threads} thread(s), inputs padded to {lengths} tokens, median of "
            f"{p.timed_runs} runs after {p.warmup_runs} warm-up; throughput at batch {p.throughput_batch_size}; "
            f"relative speed: {reference} = 1.0x.")
    summary = render_summary(header, rows, lines, read_json(METRICS / "corpus.json"),
                             read_json(METRICS / "tokenizer.json"), card, note)

    with atomic_dir(PLOTS) as tmp:
        (tmp / "sentiment_confusion").mkdir()
        for m, pairs in confusion.items():
            (tmp / "sentiment_confusion" / f"{m}.csv").write_text(csv_text(["actual", "predicted"], pairs))
        (tmp / "ner_f1_per_type.csv").write_text(csv_text(["model", "type", "f1", "type_model"],
                                                          ner_per_type(index, models)))
        (tmp / "score_vs_speed.csv").write_text(csv_text(
            ["model", "average", "relative_speed", "latency_ms", "throughput"],
            [[m, round(100 * avg, 2) if (avg := average_score(index, m, tasks)) is not None else "",
              round(relative_speed(facts, m, reference) or 0.0, 3), round(facts[m].latency_ms or 0, 3),
              round(facts[m].throughput or 0, 2)] for m in models]))
    flat = flat_metrics(index, facts, models, tasks, p.teacher, p.student, p.scratch)
    for m, pairs in confusion.items():  # the saved (first-seed) model on the confusion matrix's examples
        flat[f"{m}.sentiment.confusion_examples"] = len(pairs)
        flat[f"{m}.sentiment.confusion_accuracy"] = round(sum(a == b for a, b in pairs) / max(len(pairs), 1), 6)
    write_json(OUT_METRICS, flat)
    atomic_write_text(REPORT, summary)
    timing: dict[str, Any] = {}
    for m, s in speeds.items():
        timing[f"{m}.latency_ms_b1"] = round(s.latency_ms, 3)
        timing[f"{m}.throughput_b{s.batch_size}"] = round(s.throughput, 2)
        timing[f"{m}.relative_speed"] = round(relative_speed(facts, m, reference) or 0.0, 3)
    timing["wall_seconds"] = round(time.perf_counter() - start, 2)
    write_json(OUT_TIMING, timing)
    log.info("wrote %s, %s, %s, %s/", REPORT, OUT_METRICS, OUT_TIMING, PLOTS)
    return flat, timing


if __name__ == "__main__":
    run_main(main)
