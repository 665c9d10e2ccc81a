"""Stage ``budget_curve``: the downstream gain of pre-training against its token budget.

    python -m stages.budget_curve        (dvc repro budget_curve)

A point per pre-training budget, in fractions of ``pretrain.max_steps`` (:mod:`bert_pipeline.report.budget_curve`):

- 0: no pre-training, the from-scratch baseline (``budget_curve.baseline``) against itself;
- 1: the pipeline's own ``models/pretrained``: ``metrics/finetune/{member}-{task}.json`` against
  ``metrics/finetune/{baseline}-{task}.json``, read, not retrained (its CPU seconds from
  ``metrics/pretrain-timing.json`` when that wall-clock file is there: not a DVC dep, ``dvc exp apply`` does not
  bring it back);
- each of ``budget_curve.fractions``: pre-trained here on the same ``data/pretraining/`` with every ``pretrain``
  setting but ``max_steps`` (``round(fraction * max_steps)``, its own warmup and decay to 0; the same code as the
  ``pretrain`` stage, one process), then fine-tuned on each of ``budget_curve.tasks`` with the member's
  ``finetune.models`` settings at ``finetune.seeds`` (low-resource runs too), the same code as ``finetune``.

Each gain's interval is the paired bootstrap (``evaluate.intervals``' ``resamples``, ``confidence``, ``seed``,
``method``) of the two members' per-example records: the baseline's ``metrics/examples/{baseline}-{task}.arrow``
against the member's (``metrics/examples/{member}-{task}.arrow`` at budget 1, the stage's own at each fraction),
resampling test examples by source article or film, and seeds where there are several.

Writes

- ``metrics/budget_curve.json``: per budget the steps, tokens seen, held-out MLM accuracy and each score's gain
  per seed, its mean with the interval (``ci_low``, ``ci_high``, ``sources``) and, apart, the seeds' range
  (``min``, ``max``) (quality only, byte-identical on CPU);
- ``metrics/examples-budget_curve/{member}@{fraction}-{task}.arrow``: the per-example record of each extra
  budget's fine-tuning (every seed's validation and test predictions' statistics, low-resource run included;
  byte-identical on CPU);
- ``metrics/headline/budget_curve.json``: the mean gain of each score at budget 1 (the DVC metric; every budget is in
  the record);
- ``plots/budget_curve.csv``: the mean gains in points by tokens seen (the table ``evaluate`` draws as
  ``reports/figures/budget_curve.png``, the DVC image plot);
- ``metrics/budget_curve-timing.json``: wall and CPU seconds of each point's pre-training and fine-tuning
  (``cache: false``).

A finished point is kept in ``checkpoints/budget_curve/{fraction}/`` (its pre-trained model, its per-example records
``examples/{task}.arrow`` and ``point.json``, fingerprinted by its params, inputs and this package's code), so a
stopped run resumes at the next point; its pre-training resumes from its own checkpoints.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.report.budget_curve import (
    BudgetPoint,
    Gain,
    column,
    curve_csv,
    curve_record,
    gains,
    no_pretraining,
    with_intervals,
)
from bert_pipeline.report.report import FinetuneResult, parse_finetune_metrics, read_finetune_metrics
from stages import require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.budget_curve import BudgetCurveView

log = logging.getLogger(__name__)

FINETUNE_METRICS = Path("metrics/finetune")
FINETUNE_EXAMPLES = Path("metrics/examples")  # the finetune stage's per-example records (stages.members.EXAMPLES)
PRETRAIN_METRICS = Path("metrics/pretrain.json")
PRETRAIN_TIMING = Path("metrics/pretrain-timing.json")
METRICS = Path("metrics/budget_curve.json")
EXAMPLES = Path("metrics/examples-budget_curve")
TIMING = Path("metrics/budget_curve-timing.json")
PLOT = Path("plots/budget_curve.csv")
WORK = Path("checkpoints/budget_curve")
PRETRAINED = "models/pretrained"  # the pretrain stage's output, the curve's budget-1 model
# What a point's result depends on besides its params: its inputs and the code that trains and scores it.
POINT_INPUTS = ("data/pretraining", "data/tasks", "models/tokenizer")
CODE = ("bert_pipeline", "stages")


def read_result(path: Path) -> FinetuneResult:
    """One fine-tuning metrics file.

    Raises:
        PipelineError: missing (run its finetune stage first) or malformed.
    """
    try:
        return read_finetune_metrics(path)
    except FileNotFoundError:
        raise PipelineError(f"{path}: not found; run `dvc repro budget_curve` (it fine-tunes the budget's "
                            "members first)") from None


def read_examples(path: Path) -> ExampleRecord:
    """One per-example record.

    Raises:
        PipelineError: missing (run its finetune stage first) or not a record of this layout.
    """
    try:
        return ExampleRecord.read(path)
    except FileNotFoundError:
        raise PipelineError(f"{path}: not found; run `dvc repro budget_curve` (it fine-tunes the budget's "
                            "members first)") from None
    except ExamplesError as exc:
        raise PipelineError(str(exc)) from None


def _point_from(raw: dict[str, Any]) -> BudgetPoint:
    return BudgetPoint(raw["fraction"], raw["steps"], raw["tokens_seen"], raw["mlm_accuracy"],
                       {k: Gain(tuple(g["pretrained"]), tuple(g["scratch"])) for k, g in raw["gain"].items()})


def train_point(fraction: float, params: BudgetCurveView, baseline: list[FinetuneResult]
                ) -> tuple[BudgetPoint, dict[str, Any], dict[str, ExampleRecord]]:
    """Pre-train and fine-tune budget ``fraction`` (or reuse its finished ``point.json`` and per-example records);
    returns the point (gains without intervals), its timing row and its per-example records by task.

    Raises:
        PipelineError: pre-training or fine-tuning failed.
    """
    from bert_pipeline.model.configs import save_model
    from bert_pipeline.train.checkpoint import fingerprint
    from bert_pipeline.train.runtime import make_runtime
    from stages.members import train_member
    from stages.pretraining import load_pretraining, pretrain_model

    curve, pre, fine = params.budget_curve, params.pretrain, params.finetune
    steps = max(1, round(fraction * pre.max_steps))
    settings = pre.model_copy(update={"max_steps": steps, "warmup_steps": min(pre.warmup_steps, steps),
                                      "compute": pre.compute.model_copy(update={"num_processes": 1})})
    member = fine.models[curve.member]
    folder = WORK / f"{fraction:g}"
    code = sorted(path for root in CODE for path in Path(root).rglob("*.py"))
    # the member's own fine-tuning settings only, as dvc.yaml declares them: another member's edit keeps the point
    key = fingerprint({"pretrain": settings.model_dump(mode="json"),
                       "finetune": fine.member_training(curve.member, curve.tasks),
                       "member": curve.member, "tasks": curve.tasks}, [*POINT_INPUTS, *code])
    done = folder / "point.json"
    kept = {task: folder / "examples" / f"{task}.arrow" for task in curve.tasks}
    if done.is_file() and all(path.is_file() for path in kept.values()):
        saved = json.loads(done.read_text(encoding="utf-8"))
        if saved.get("fingerprint") == key:
            log.info("budget %gx: reusing %s (same params, inputs and code)", fraction, done)
            return _point_from(saved["point"]), saved["timing"], {t: read_examples(p) for t, p in kept.items()}
    log.info("budget %gx: pre-training %d steps (pretrain.max_steps %d)", fraction, steps, pre.max_steps)
    loaded = load_pretraining(settings)
    start, cpu_start = time.perf_counter(), time.process_time()
    outcome = pretrain_model(settings, loaded, folder / "checkpoints", make_runtime(settings.precision))
    timing = {"fraction": fraction, "pretrain_seconds": round(time.perf_counter() - start, 1),
              "pretrain_cpu_seconds": round(time.process_time() - cpu_start, 1)}
    with atomic_dir(folder / "model") as out:
        save_model(outcome.model, out, loaded.tokenizer)
    spec = member.model_copy(update={"path": (folder / "model").as_posix()})
    results, records = [], {}
    start, cpu_start = time.perf_counter(), time.process_time()
    for task in curve.tasks:
        log.info("budget %gx: fine-tuning %s", fraction, task)
        outcome_task = train_member(curve.member, spec, task, fine)
        results.append(parse_finetune_metrics({"model": curve.member, "task": task, **outcome_task.metrics},
                                              f"{folder}/{curve.member}-{task}"))
        records[task] = outcome_task.examples
        records[task].write(kept[task])  # before point.json, which says the point is finished
    timing.update(finetune_seconds=round(time.perf_counter() - start, 1),
                  finetune_cpu_seconds=round(time.process_time() - cpu_start, 1))
    point = BudgetPoint(fraction, steps, int(outcome.quality["tokens_seen"]),
                        float(outcome.quality["eval"]["mlm_accuracy"]), gains(results, baseline))
    raw = curve_record([point], fine.seeds, curve.member, curve.baseline)["points"][0]
    atomic_write_text(done, json.dumps({"fingerprint": key, "point": raw, "timing": timing}, indent=1) + "\n")
    return point, timing, records


def examples_name(member: str, fraction: float, task: str) -> str:
    """The file name of an extra budget's per-example record in :data:`EXAMPLES`: ``{member}@{fraction}-{task}.arrow``."""
    return f"{member}@{fraction:g}-{task}.arrow"


def bootstrap(params: BudgetCurveView) -> Bootstrap:
    """The paired bootstrap of ``evaluate.intervals``' resampling settings."""
    settings = params.evaluate.intervals
    return Bootstrap(settings.resamples, settings.confidence, settings.seed, settings.method)


def intervals_of(point: BudgetPoint, pretrained: dict[str, ExampleRecord], scratch: dict[str, ExampleRecord],
                 boot: Bootstrap, what: str) -> BudgetPoint:
    """:func:`bert_pipeline.report.budget_curve.with_intervals`, its error one line naming the budget and the records
    (``what``).

    Raises:
        PipelineError: the records are not paired or not the metrics files' runs.
    """
    try:
        return with_intervals(point, pretrained, scratch, boot)
    except ExamplesError as exc:
        raise PipelineError(f"budget {point.fraction:g}x ({what}): {exc}") from None


def check_members(params: BudgetCurveView) -> None:
    """The curve's member must fine-tune ``models/pretrained`` and its baseline be a from-scratch member.

    Raises:
        PipelineError: one line naming the ``budget_curve`` key, what was expected and the fix.
    """
    curve, models = params.budget_curve, params.finetune.models
    for key in ("member", "baseline"):
        if getattr(curve, key) not in models:
            raise PipelineError(f"params.yaml: budget_curve.{key}: {getattr(curve, key)!r} is not a key of "
                                f"finetune.models ({', '.join(sorted(models))})")
    if Path(models[curve.member].path).as_posix() != PRETRAINED:
        raise PipelineError(f"params.yaml: budget_curve.member: {curve.member!r} fine-tunes "
                            f"{models[curve.member].path!r}; expected a member of {PRETRAINED} (the pre-training "
                            "whose budget the curve varies)")
    if models[curve.baseline].init != "random":
        raise PipelineError(f"params.yaml: budget_curve.baseline: {curve.baseline!r} has init "
                            f"{models[curve.baseline].init!r}; expected a from-scratch member (init: random)")
    unknown = [t for t in curve.tasks if t not in params.finetune.tasks]
    if unknown:
        raise PipelineError(f"params.yaml: budget_curve.tasks: {unknown[0]!r} is not a key of finetune.tasks")


def main() -> None:
    require_inputs("budget_curve")
    params = load_view(BudgetCurveView)
    check_members(params)
    curve = params.budget_curve
    from stages import dvc_adapter

    baseline = [read_result(FINETUNE_METRICS / f"{curve.baseline}-{t}.json") for t in curve.tasks]
    own = [read_result(FINETUNE_METRICS / f"{curve.member}-{t}.json") for t in curve.tasks]
    base_examples = {t: read_examples(FINETUNE_EXAMPLES / f"{curve.baseline}-{t}.arrow") for t in curve.tasks}
    own_examples = {t: read_examples(FINETUNE_EXAMPLES / f"{curve.member}-{t}.arrow") for t in curve.tasks}
    boot = bootstrap(params)
    quality = json.loads(PRETRAIN_METRICS.read_text(encoding="utf-8"))
    own_timing = json.loads(PRETRAIN_TIMING.read_text(encoding="utf-8")) if PRETRAIN_TIMING.is_file() else {}
    points = [intervals_of(no_pretraining(baseline), base_examples, base_examples, boot,
                           f"{FINETUNE_EXAMPLES}/{curve.baseline}-*.arrow against itself"),
              intervals_of(BudgetPoint(1.0, int(quality["steps"]), int(quality["tokens_seen"]),
                                       float(quality["eval"]["mlm_accuracy"]), gains(own, baseline)),
                           own_examples, base_examples, boot,
                           f"{FINETUNE_EXAMPLES}/{curve.member}-*.arrow against {curve.baseline}-*.arrow")]
    timings = [{"fraction": 0.0, "pretrain_seconds": 0.0, "pretrain_cpu_seconds": 0.0},
               {"fraction": 1.0, "pretrain_seconds": own_timing.get("seconds"),
                "pretrain_cpu_seconds": own_timing.get("cpu_seconds")}]
    extra: dict[float, dict[str, ExampleRecord]] = {}
    with dvc_adapter.stage_run("budget_curve", {"budget_curve": curve.model_dump(), "seeds": params.finetune.seeds}) as run:
        for fraction in sorted(curve.fractions):
            point, timing, extra[fraction] = train_point(fraction, params, baseline)
            points.append(intervals_of(point, extra[fraction], base_examples, boot,
                                       f"{WORK}/{fraction:g}/examples against {FINETUNE_EXAMPLES}/{curve.baseline}-*.arrow"))
            timings.append(timing)
        record = curve_record(points, params.finetune.seeds, curve.member, curve.baseline, boot)
        with atomic_dir(EXAMPLES) as out:  # every extra budget's records (0 and 1x are the finetune stage's)
            for fraction, records in extra.items():
                for task, examples in records.items():
                    examples.write(out / examples_name(curve.member, fraction, task))
        write_json(METRICS, record)
        atomic_write_text(PLOT, curve_csv(record))
        # the experiment table's few numbers: the gain at the pipeline's own budget (every point is in the record)
        write_headline("budget_curve", {"gain_over_scratch": {
            column(k): g["mean"] for p in record["points"] if p["fraction"] == 1.0 for k, g in p["gain"].items()}})
        write_json(TIMING, {"points": sorted(timings, key=lambda t: t["fraction"])})
        for p in record["points"]:
            run.log_metrics({f"gain_{column(k)}": g["mean"] for k, g in p["gain"].items()}, step=p["tokens_seen"])
        for path in (METRICS, TIMING, PLOT):
            run.log_artifact(path)
        log.info("budget curve: %d points; gain at 1x: %s", len(record["points"]), ", ".join(
            f"{k} {100 * g['mean']:+.1f}" for p in record["points"] if p["fraction"] == 1.0 for k, g in p["gain"].items()))


if __name__ == "__main__":
    run_main(main)
