"""Stage ``evaluate``: one report that compares the model family.

Reads every ``metrics/finetune/{model}-{task}.json`` and the fine-tuned folders ``models/finetuned/{model}-{task}/``,
measures each member's CPU inference cost (:func:`bert_pipeline.report.family.evaluate_family`), and writes:

- ``reports/summary.md``: the table (a row per member: parameters, each task's test score, the average, relative
  speed with the teacher = 1.0x), the findings (pre-training gain over scratch, the student's share and speed-up),
  the figures (linked as ``figures/NAME.png``), corpus and tokenizer facts, sources, and the report card
  (provenance: git, the sha256 of ``dvc.lock`` as it stands while this stage runs, :mod:`stages.dvc_adapter`); a
  cached output, so ``dvc exp apply`` brings it back;
- ``reports/figures/*.png``: the page's figures, drawn offline (:mod:`bert_pipeline.report.figures`) from
  ``plots/pretrain.csv``, ``plots/distill.csv``, ``plots/tokenizer_fertility.csv`` and this stage's tables; DVC's
  image plots (``dvc plots show`` shows them with no JavaScript);
- ``metrics/evaluate.json``: flat quality figures for ``dvc metrics show/diff`` (byte-identical on rerun);
- ``metrics/evaluate-timing.json``: latency, throughput, relative speed, wall seconds (``cache: false``);
- ``plots/evaluate/``: ``sentiment_confusion/{model}.csv`` (actual, predicted per test example),
  ``ner_f1_per_type.csv`` (silver labels), ``score_vs_speed.csv``; a cached output.

The page, ``score_vs_speed.csv`` and ``reports/figures/score_vs_speed.png`` hold wall-clock speed, so their bytes
change from run to run; they are cached all the same (the run's own record, restored by ``dvc exp apply``).

The report also shows the export stage's ONNX table (``metrics/export.json``, ``metrics/export-timing.json``:
parity and ONNX Runtime vs PyTorch latency per exported model-task) when those files exist.

Registering and promoting models is not done here (``bert-pipeline promote``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.report.family import FamilyInputs, csv_text, evaluate_family
from bert_pipeline.report.figures import FigureSources
from bert_pipeline.report.report import ReportSources
from bert_pipeline.train.runtime import make_runtime
from stages import dvc_adapter, require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.evaluate import EvaluateView

log = logging.getLogger(__name__)

METRICS = Path("metrics")
FINETUNE_METRICS = METRICS / "finetune"
EXAMPLES = METRICS / "examples"
FINETUNED = Path("models/finetuned")
TASKS = Path("data/tasks")
SOURCES = Path("data/raw/SOURCES.json")
REPORT = Path("reports/summary.md")
FIGURES = Path("reports/figures")
PLOTS = Path("plots/evaluate")
PRETRAIN_HISTORY = Path("plots/pretrain.csv")
DISTILL_HISTORY = Path("plots/distill.csv")
FERTILITY = Path("plots/tokenizer_fertility.csv")
BUDGET_CURVE = METRICS / "budget_curve.json"
OUT_METRICS = METRICS / "evaluate.json"
OUT_TIMING = METRICS / "evaluate-timing.json"
REPORT_SOURCES = ReportSources(
    finetune_metrics=FINETUNE_METRICS.as_posix(), finetuned_models=FINETUNED.as_posix(), metrics_dir=METRICS.as_posix(),
    pretrain="metrics/pretrain.json", distill="metrics/distill.json", corpus="metrics/corpus.json",
    tokenizer="metrics/tokenizer.json", evaluate=OUT_METRICS.as_posix(), evaluate_timing=OUT_TIMING.as_posix(),
    sources_json=SOURCES.as_posix(), figures=FIGURES.relative_to(REPORT.parent).as_posix(),
    export="metrics/export.json", export_timing="metrics/export-timing.json", budget_curve=BUDGET_CURVE.as_posix(),
    budget_curve_timing="metrics/budget_curve-timing.json", variants="metrics/variants.json",
    variants_timing="metrics/variants-timing.json", retrieval="metrics/retrieval.json",
    lock_file=dvc_adapter.LOCK_FILE.as_posix(), examples=EXAMPLES.as_posix())
FIGURE_SOURCES = FigureSources(
    pretrain_history=PRETRAIN_HISTORY, distill_history=DISTILL_HISTORY, fertility=FERTILITY,
    cite_pretrain_history=PRETRAIN_HISTORY.as_posix(), cite_distill_history=DISTILL_HISTORY.as_posix(),
    cite_fertility=FERTILITY.as_posix(), cite_evaluate_plots=PLOTS.as_posix(), cite_budget_curve=BUDGET_CURVE.as_posix())


def main() -> None:
    require_inputs("evaluate")
    p = load_view(EvaluateView).evaluate
    inputs = FamilyInputs(FINETUNE_METRICS, FINETUNED, TASKS, METRICS, SOURCES, Path.cwd(), REPORT_SOURCES,
                          FIGURE_SOURCES, dvc_adapter.lock_sha256(), EXAMPLES)
    with dvc_adapter.stage_run("evaluate", p.model_dump()) as run:
        # serving costs on the CPU, whatever the worker has (the report compares CPU latency and throughput)
        result = evaluate_family(inputs, runtime=make_runtime("fp32", cpu=True), **p.model_dump())
        with atomic_dir(PLOTS) as tmp:
            (tmp / "sentiment_confusion").mkdir()
            for model, pairs in result.confusion.items():
                (tmp / "sentiment_confusion" / f"{model}.csv").write_text(csv_text(["actual", "predicted"], pairs))
            (tmp / "ner_f1_per_type.csv").write_text(csv_text(
                ["model", "type", "f1", "type_model", "f1_ci_low", "f1_ci_high"], result.ner_per_type))
            (tmp / "score_vs_speed.csv").write_text(csv_text(
                ["model", "average", "relative_speed", "latency_ms", "throughput", "average_ci_low",
                 "average_ci_high"], result.score_vs_speed))
        write_figures(result.figures)
        write_json(OUT_METRICS, result.flat)
        write_headline("evaluate", headline(result.flat))
        atomic_write_text(REPORT, result.summary)
        write_json(OUT_TIMING, result.timing)
        log.info("wrote %s, %s/ (%d figures), %s, %s, %s/", REPORT, FIGURES, len(result.figures), OUT_METRICS,
                 OUT_TIMING, PLOTS)
        run.log_metrics(result.flat)
        run.log_metrics(result.timing)
        for path in (REPORT, OUT_METRICS, OUT_TIMING, PLOTS / "score_vs_speed.csv", PLOTS / "ner_f1_per_type.csv",
                     *(FIGURES / f.name for f in result.figures)):
            run.log_artifact(path)


def headline(flat: dict[str, float]) -> dict[str, dict[str, float]]:
    """The evaluate stage's DVC metrics: each member's average main test metric over the tasks
    (``{member: {"average"}}``) and each distilled student's share of its teacher's (``"teacher_share"``), each with
    its interval where the flat metrics have one (``average_ci_low`` / ``average_ci_high``,
    ``teacher_share_ci_low`` / ``teacher_share_ci_high``), so ``dvc metrics diff`` shows how sure a change is."""
    out: dict[str, dict[str, float]] = {}
    for key, value in flat.items():
        bound = next((b for b in ("_ci_low", "_ci_high") if key.endswith(b)), "")
        base = key.removesuffix(bound)
        if base.endswith(".average") and not base.startswith("distillation."):
            out.setdefault(base.removesuffix(".average"), {})["average" + bound] = value
        elif base.startswith("distillation.") and base.endswith(".average_share"):
            member = base.removeprefix("distillation.").removesuffix(".average_share")
            out.setdefault(member, {})["teacher_share" + bound] = value
    return out


def write_figures(figures) -> None:
    """Replace ``reports/figures/`` with the page's PNGs (one atomic folder; an empty folder when there are none,
    so the declared output always exists)."""
    with atomic_dir(FIGURES) as tmp:
        for figure in figures:
            (tmp / figure.name).write_bytes(figure.png)


if __name__ == "__main__":
    run_main(main)
