"""Stage ``evaluate``: one report that compares the model family.

Reads every ``metrics/finetune/{model}-{task}.json`` and the fine-tuned folders ``models/finetuned/{model}-{task}/``,
measures each member's CPU inference cost (:func:`bert_pipeline.evaluation.family.evaluate_family`), and writes:

- ``reports/summary.md``: the table (a row per member: parameters, each task's test score, the average, relative
  speed with the teacher = 1.0x), the findings (pre-training gain over scratch, the student's share and speed-up),
  corpus and tokenizer facts, sources, and the report card (provenance);
- ``metrics/evaluate.json``: flat quality figures for ``dvc metrics show/diff`` (byte-identical on rerun);
- ``metrics/evaluate-timing.json``: latency, throughput, relative speed, wall seconds (``cache: false``);
- plots: ``plots/evaluate/sentiment_confusion/{model}.csv`` (actual, predicted per test example),
  ``plots/evaluate/ner_f1_per_type.csv`` (silver labels), ``plots/evaluate/score_vs_speed.csv`` (``cache: false``).

Registering and promoting models is not done here (``bert-pipeline promote``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.evaluation.family import FamilyInputs, csv_text, evaluate_family
from bert_pipeline.evaluation.report import ReportSources
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.mlops import tracking
from stages import require_inputs
from stages.params import load_params

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
REPORT_SOURCES = ReportSources(
    finetune_metrics=FINETUNE_METRICS.as_posix(), finetuned_models=FINETUNED.as_posix(), metrics_dir=METRICS.as_posix(),
    pretrain="metrics/pretrain.json", distill="metrics/distill.json", corpus="metrics/corpus.json",
    tokenizer="metrics/tokenizer.json", evaluate=OUT_METRICS.as_posix(), evaluate_timing=OUT_TIMING.as_posix(),
    sources_json=SOURCES.as_posix())


def main() -> None:
    require_inputs("evaluate")
    p = load_params().evaluate
    inputs = FamilyInputs(FINETUNE_METRICS, FINETUNED, TASKS, METRICS, SOURCES, Path.cwd(), REPORT_SOURCES)
    with tracking.stage_run("evaluate", p.model_dump()) as run:
        result = evaluate_family(inputs, **p.model_dump())
        with atomic_dir(PLOTS) as tmp:
            (tmp / "sentiment_confusion").mkdir()
            for model, pairs in result.confusion.items():
                (tmp / "sentiment_confusion" / f"{model}.csv").write_text(csv_text(["actual", "predicted"], pairs))
            (tmp / "ner_f1_per_type.csv").write_text(csv_text(["model", "type", "f1", "type_model"],
                                                              result.ner_per_type))
            (tmp / "score_vs_speed.csv").write_text(csv_text(
                ["model", "average", "relative_speed", "latency_ms", "throughput"], result.score_vs_speed))
        write_json(OUT_METRICS, result.flat)
        atomic_write_text(REPORT, result.summary)
        write_json(OUT_TIMING, result.timing)
        log.info("wrote %s, %s, %s, %s/", REPORT, OUT_METRICS, OUT_TIMING, PLOTS)
        run.log_metrics(result.flat)
        run.log_metrics(result.timing)
        for path in (REPORT, OUT_METRICS, OUT_TIMING, PLOTS / "score_vs_speed.csv", PLOTS / "ner_f1_per_type.csv"):
            run.log_artifact(path)


if __name__ == "__main__":
    run_main(main)
