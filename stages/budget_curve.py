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

Writes

- ``metrics/budget_curve.json``: per budget the steps, tokens seen, held-out MLM accuracy and each score's gain
  per seed (quality only, byte-identical on CPU);
- ``metrics/headline/budget_curve.json``: the mean gain of each score at budget 1 (the DVC metric; every budget is in
  the record);
- ``plots/budget_curve.csv``: the mean gains in points by tokens seen (the table ``evaluate`` draws as
  ``reports/figures/budget_curve.png``, the DVC image plot);
- ``metrics/budget_curve-timing.json``: wall and CPU seconds of each point's pre-training and fine-tuning
  (``cache: false``).

A finished point is kept in ``checkpoints/budget_curve/{fraction}/`` (its pre-trained model and ``point.json``,
fingerprinted by its params, inputs and this package's code), so a stopped run resumes at the next point; its
pre-training resumes from its own checkpoints.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.report.budget_curve import (
    BudgetPoint,
    Gain,
    column,
    curve_csv,
    curve_record,
    gains,
    no_pretraining,
)
from bert_pipeline.report.report import FinetuneResult, parse_finetune_metrics, read_finetune_metrics
from stages import require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.budget_curve import BudgetCurveView

log = logging.getLogger(__name__)

FINETUNE_METRICS = Path("metrics/finetune")
PRETRAIN_METRICS = Path("metrics/pretrain.json")
PRETRAIN_TIMING = Path("metrics/pretrain-timing.json")
METRICS = Path("metrics/budget_curve.json")
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


def _point_from(raw: dict[str, Any]) -> BudgetPoint:
    return BudgetPoint(raw["fraction"], raw["steps"], raw["tokens_seen"], raw["mlm_accuracy"],
                       {k: Gain(tuple(g["pretrained"]), tuple(g["scratch"])) for k, g in raw["gain"].items()})


def train_point(fraction: float, params: BudgetCurveView, baseline: list[FinetuneResult]) -> tuple[BudgetPoint, dict[str, Any]]:
    """Pre-train and fine-tune budget ``fraction`` (or reuse its finished ``point.json``); returns the point and
    its timing row.

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
    if done.is_file():
        saved = json.loads(done.read_text(encoding="utf-8"))
        if saved.get("fingerprint") == key:
            log.info("budget %gx: reusing %s (same params, inputs and code)", fraction, done)
            return _point_from(saved["point"]), saved["timing"]
    log.info("budget %gx: pre-training %d steps (pretrain.max_steps %d)", fraction, steps, pre.max_steps)
    loaded = load_pretraining(settings)
    start, cpu_start = time.perf_counter(), time.process_time()
    outcome = pretrain_model(settings, loaded, folder / "checkpoints", make_runtime(settings.precision))
    timing = {"fraction": fraction, "pretrain_seconds": round(time.perf_counter() - start, 1),
              "pretrain_cpu_seconds": round(time.process_time() - cpu_start, 1)}
    with atomic_dir(folder / "model") as out:
        save_model(outcome.model, out, loaded.tokenizer)
    spec = member.model_copy(update={"path": (folder / "model").as_posix()})
    results = []
    start, cpu_start = time.perf_counter(), time.process_time()
    for task in curve.tasks:
        log.info("budget %gx: fine-tuning %s", fraction, task)
        record = train_member(curve.member, spec, task, fine).metrics
        results.append(parse_finetune_metrics({"model": curve.member, "task": task, **record},
                                              f"{folder}/{curve.member}-{task}"))
    timing.update(finetune_seconds=round(time.perf_counter() - start, 1),
                  finetune_cpu_seconds=round(time.process_time() - cpu_start, 1))
    point = BudgetPoint(fraction, steps, int(outcome.quality["tokens_seen"]),
                        float(outcome.quality["eval"]["mlm_accuracy"]), gains(results, baseline))
    raw = curve_record([point], fine.seeds, curve.member, curve.baseline)["points"][0]
    atomic_write_text(done, json.dumps({"fingerprint": key, "point": raw, "timing": timing}, indent=1) + "\n")
    return point, timing


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
    quality = json.loads(PRETRAIN_METRICS.read_text(encoding="utf-8"))
    own_timing = json.loads(PRETRAIN_TIMING.read_text(encoding="utf-8")) if PRETRAIN_TIMING.is_file() else {}
    points = [no_pretraining(baseline),
              BudgetPoint(1.0, int(quality["steps"]), int(quality["tokens_seen"]),
                          float(quality["eval"]["mlm_accuracy"]), gains(own, baseline))]
    timings = [{"fraction": 0.0, "pretrain_seconds": 0.0, "pretrain_cpu_seconds": 0.0},
               {"fraction": 1.0, "pretrain_seconds": own_timing.get("seconds"),
                "pretrain_cpu_seconds": own_timing.get("cpu_seconds")}]
    with dvc_adapter.stage_run("budget_curve", {"budget_curve": curve.model_dump(), "seeds": params.finetune.seeds}) as run:
        for fraction in sorted(curve.fractions):
            point, timing = train_point(fraction, params, baseline)
            points.append(point)
            timings.append(timing)
        record = curve_record(points, params.finetune.seeds, curve.member, curve.baseline)
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
