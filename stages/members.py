"""The fine-tuning glue that several stages share (not a stage): a ``finetune.models`` member and the ``finetune``
section in, :func:`bert_pipeline.train.finetune.finetune_task` called, the member's outputs written where the
pipeline keeps them.

Stages ``finetune`` (:func:`train_member`, :func:`save_member`), ``distill_task`` (:func:`save_member`, the student is
a family member), ``budget_curve`` and ``variants`` (:func:`train_member` on their own pre-trained models) use it, so
no stage imports another. It reads typed params sections and names the DVC layout, which is why it lives here and not
in :mod:`bert_pipeline`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, write_json
from bert_pipeline.train.finetune import Grid, MemberSpec, finetune_task
from bert_pipeline.train.finetune_data import FinetuneError
from bert_pipeline.train.runtime import make_runtime
from stages.headline import write_headline
from stages.params.finetune import FinetuneModel, FinetuneParams

TASKS = Path("data/tasks")
MODELS_OUT = Path("models/finetuned")
METRICS = Path("metrics/finetune")
EXAMPLES = Path("metrics/examples")
TIMING = Path("metrics/finetune-timing")
HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
LOOP_KEYS = {"seeds", "data_seed", "precision", "warmup_ratio", "weight_decay", "max_grad_norm",
             "early_stopping_patience", "evals_per_epoch", "eval_batch_size"}


def training_facts(p: FinetuneParams, outcome: Any) -> dict[str, Any]:
    """What only the run knows and the model card cites (stage ``model_cards``): the trained model's ``parameters``
    (counted once per tied tensor, the head included) and the ``precision`` it trained in (``finetune.precision``
    resolved on the device it ran on)."""
    from bert_pipeline.model.configs import count_parameters
    from bert_pipeline.train.runtime import resolve_precision

    device = torch.device(outcome.timing["device"]).type
    return {"parameters": count_parameters(outcome.model), "precision": resolve_precision(p.precision, device)}


def train_member(model_name: str, spec: FinetuneModel, task_name: str, p: FinetuneParams,
                 on_eval: Any = None) -> Any:
    """Fine-tune the member ``spec`` (named ``model_name`` in messages) on ``data/tasks/{task_name}/`` at every seed
    of ``p`` (and its low-resource run when the task is one), writing nothing: the
    :class:`bert_pipeline.train.finetune.FinetuneOutcome` of :func:`finetune_task`. Shared by stages ``finetune``,
    ``budget_curve`` and ``variants``.

    Raises:
        PipelineError: no settings for the task, the model folder missing (offline), or fine-tuning failed.
    """
    if task_name not in p.tasks:
        raise PipelineError(f"params.yaml: finetune.tasks: no settings for task {task_name!r} "
                            f"(known: {', '.join(sorted(p.tasks))})")
    offline = os.environ.get("HF_HUB_OFFLINE", "1") != "0"  # bert_pipeline's default: no hub at run time
    if not Path(spec.path).exists() and (offline or not HUB_NAME.match(spec.path)):
        hint = "; run the stage that writes it, or set HF_HUB_OFFLINE=0 for a hub name" if offline else ""
        raise PipelineError(f"{spec.path}: model folder not found (finetune.models.{model_name}.path{hint})")
    low_resource = task_name in p.low_resource_tasks
    spec, task, _ = p.settings_for(spec, task_name)
    try:
        return finetune_task(
            TASKS / task_name, member_spec(spec), task,
            low_resource_train_examples=p.low_resource_train_examples if low_resource else None,
            low_resource_epochs=p.low_resource_epochs, on_eval=on_eval, grid=grid(spec), runtime=make_runtime(p.precision),
            **p.model_dump(include=LOOP_KEYS - {"precision"}))
    except FinetuneError as exc:
        raise PipelineError(str(exc)) from None


def member_spec(spec: FinetuneModel) -> MemberSpec:
    """The library's :class:`MemberSpec` of a ``finetune.models`` entry (``learning_rate: grid`` -> ``None``; its
    grid is :func:`grid`'s)."""
    fields = spec.model_dump(exclude={"tasks", "grid"})
    if fields["learning_rate"] == "grid":
        fields["learning_rate"] = None
    return MemberSpec(**fields)


def grid(spec: FinetuneModel) -> Grid | None:
    """A member's ``grid`` (``finetune.models.{model}.grid``) as the library's :class:`Grid`; None for a member
    with a learning rate of its own (it has no grid, and reading none keeps the grid out of its stage's params)."""
    if spec.learning_rate != "grid" or spec.grid is None:
        return None
    return Grid(tuple(spec.grid.learning_rates), tuple(spec.grid.epochs), tuple(spec.grid.low_resource_epochs))


def save_member(model_name: str, task_name: str, metrics: dict[str, Any], outcome: Any,
                tracker: Any, role: str, stage: str | None = None) -> None:
    """Write a family member's fine-tuned outputs: ``models/finetuned/{model}-{task}/`` (weights and tokenizer, in
    one atomic step), ``metrics/finetune/{model}-{task}.json``, its per-example record
    ``metrics/examples/{model}-{task}.arrow``, its headline and timing files; with a
    ``tracker``, the MLflow tags (``role``), per-seed child runs, metrics and the model pointer
    (:func:`log_seed_runs`; ``stage`` names the child runs, default ``finetune@{model}-{task}``)."""
    name = f"{model_name.replace('/', '--')}-{task_name}"
    with atomic_dir(MODELS_OUT / name) as tmp:
        outcome.model.save_pretrained(tmp)
        outcome.tokenizer.save_pretrained(tmp)
    write_json(METRICS / f"{name}.json", metrics)
    outcome.examples.write(EXAMPLES / f"{name}.arrow")
    write_headline(f"finetune/{name}", {model_name: {task_name: metrics["test"][metrics["main_metric"]]["mean"]}})
    if tracker is not None:
        log_seed_runs(tracker, model_name, task_name, role, metrics, stage or f"finetune@{model_name}-{task_name}")
        tracker.log_metrics({f"{split}_{k}": v["mean"] for split in ("test", "validation")
                             for k, v in metrics[split].items()})
        if metrics["low_resource"]:
            tracker.log_metrics({f"low_resource_test_{k}": v["mean"] for k, v in metrics["low_resource"]["test"].items()})
        tracker.log_metrics({"train_seconds": sum(outcome.timing["train_seconds"])})
        tracker.log_model_pointer(MODELS_OUT / name)
        tracker.log_artifact(METRICS / f"{name}.json")
    write_json(TIMING / f"{name}.json", {"model": model_name, "task": task_name, **outcome.timing})


def log_seed_runs(tracker: Any, model_name: str, task_name: str, role: str, metrics: dict[str, Any],
                  stage: str) -> None:
    """Tag the stage's run for grouping (``model``, ``task``, ``role``, ``main_metric``), log its headline
    ``test_main_metric`` (the mean over seeds of the task's main metric), and open one child run per seed with the
    same tags plus ``seed`` and that seed's test and validation scores, so MLflow's compare view sets the family
    side by side."""
    main = metrics["main_metric"]
    tags = {"model": model_name, "task": task_name, "role": role, "main_metric": main}
    tracker.set_tags(tags)
    tracker.log_metrics({"test_main_metric": metrics["test"][main]["mean"]})
    for i, seed in enumerate(metrics["seeds"]):
        with tracker.nested(f"{stage} seed {seed}", {**tags, "seed": seed}) as child:
            scores = {f"{split}_{k}": v["seeds"][i] for split in ("test", "validation")
                      for k, v in metrics[split].items()}
            child.log_metrics({**scores, "test_main_metric": metrics["test"][main]["seeds"][i]})
