"""Stage ``finetune``: ``python -m stages.finetune --model M --task T`` (one DVC stage per model x task).

Fine-tunes model ``M`` (a key of ``finetune.models``, a local ``save_pretrained`` folder or a hub name) on
``data/tasks/T/`` once per seed in ``finetune.seeds`` (:func:`bert_pipeline.train.finetune.finetune_task`), and,
for tasks in ``finetune.low_resource_tasks``, again on ``low_resource_train_examples`` labelled examples. Writes

- ``models/finetuned/{M}-{T}/``: the model of the seed with the best validation main metric (``saved`` in the
  metrics record: its seed and own scores) (``save_pretrained``, tokenizer beside; its model card is
  stage ``model_cards``'s);
- ``metrics/finetune/{M}-{T}.json``: ``{"model", "task", "main_metric", "test": {METRIC: {"mean", "seeds"}},
  "validation": {...}, "low_resource": {"train_examples", "test": {...}}, "parameters", "precision", ...}``
  (byte-identical on CPU);
- ``metrics/headline/finetune/{M}-{T}.json``: ``{M: {T: test mean of the main metric}}``, the DVC metric
  (:mod:`stages.headline`);
- ``metrics/finetune-timing/{M}-{T}.json``: wall-clock and CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, write_json
from bert_pipeline.train.finetune import Grid, MemberSpec, finetune_task
from bert_pipeline.train.finetune_data import FinetuneError
from bert_pipeline.train.runtime import make_runtime
from stages import dvc_adapter, require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.finetune import FinetuneModel, FinetuneParams, FinetuneView

TASKS = Path("data/tasks")
MODELS_OUT = Path("models/finetuned")
METRICS = Path("metrics/finetune")
TIMING = Path("metrics/finetune-timing")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# The MLflow tag ``role`` of a family member, by where its weights come from (evaluate.teacher/student/scratch name
# the same members for the report; a run's tag is set here so a finetune run needs no evaluate params).
ROLE_BY_PATH = {"models/pretrained": "teacher", "models/distilled": "student"}
LOOP_KEYS = {"seeds", "data_seed", "precision", "warmup_ratio", "weight_decay", "max_grad_norm",
             "early_stopping_patience", "evals_per_epoch", "eval_batch_size"}


def resolve_model(name: str, p: FinetuneParams) -> FinetuneModel:
    """The settings for ``--model name``: a key of ``finetune.models``, else a local folder with
    ``config.json`` or a hub name ``owner/name`` with ``finetune.user_model``'s settings.

    Raises:
        PipelineError: none of these (one line naming the key and what was expected).
    """
    if name in p.models:
        return p.models[name]
    path = Path(name)
    if (path / "config.json").exists() or (not path.exists() and _HUB_NAME.match(name)):
        return p.user_model.model_copy(update={"path": name})
    raise PipelineError(
        f"--model {name!r}: unknown model; expected a key of finetune.models in params.yaml "
        f"({', '.join(sorted(p.models))}), a folder with config.json, or a hub name owner/name"
    )


def training_facts(p: FinetuneParams, outcome: Any) -> dict[str, Any]:
    """What only the run knows and the model card cites (stage ``model_cards``): the trained model's ``parameters``
    (counted once per tied tensor, the head included) and the ``precision`` it trained in (``finetune.precision``
    resolved on the device it ran on)."""
    from bert_pipeline.model.configs import count_parameters
    from bert_pipeline.train.runtime import resolve_precision

    device = torch.device(outcome.timing["device"]).type
    return {"parameters": count_parameters(outcome.model), "precision": resolve_precision(p.precision, device)}


def run(model_name: str, task_name: str, p: FinetuneParams, tracker: Any = None) -> dict[str, Any]:
    """Fine-tune, evaluate and write every output of one combination. Returns the metrics dict.

    ``tracker`` (a :class:`bert_pipeline.mlops.tracking.StageRun` or None) receives the training loss and
    validation metrics at each check (as ``seed{S}/...``), the test metrics and a pointer to the saved model.

    Raises:
        PipelineError: a ``init: random`` member whose folder has no ``config.json`` and no ``size`` (one line
            naming its key).
    """
    spec = resolve_model(model_name, p)
    if spec.init == "random" and spec.size is None and not (Path(spec.path) / "config.json").exists():
        raise PipelineError(f"{spec.path}: no config.json for a random-init model; set finetune.models.{model_name}.size "
                            f"to a named shape (tiny, mini, small, medium, base, large)")
    on_eval = None
    if tracker is not None:
        def on_eval(prefix: str, step: int, entry: dict[str, float]) -> None:
            tracker.log_metrics({f"{prefix}{k}": v for k, v in entry.items() if k != "step"}, step=step)
    outcome = train_member(model_name, spec, task_name, p, on_eval)
    metrics = {"model": model_name, "task": task_name, **outcome.metrics, **training_facts(p, outcome),
               "settings": settings_record(model_name, spec, task_name, p)}
    save_member(model_name, task_name, metrics, outcome, tracker, member_role(spec))
    return metrics


def member_key(model_name: str, p: FinetuneParams) -> str:
    """The params key of ``--model model_name``'s settings: ``finetune.models.{name}`` or ``finetune.user_model``."""
    return f"finetune.models.{model_name}" if model_name in p.models else "finetune.user_model"


def settings_record(model_name: str, spec: FinetuneModel, task_name: str, p: FinetuneParams) -> dict[str, Any]:
    """The metrics record's ``settings``: the learning rate and epochs cap (``grid`` for both: the record's
    ``learning_rate`` and ``epochs`` are the grid's choice), batch size and training examples this member trained
    ``task_name`` with, and the params key each came from (``from``), so a reader sees which were chosen for this
    member and which are shared."""
    member, task, source = p.settings_for(spec, task_name, member_key(model_name, p))
    epochs = "grid" if member.learning_rate == "grid" else member.epochs or task["epochs"]
    return {"learning_rate": member.learning_rate, "epochs": epochs,
            "batch_size": task["batch_size"], "max_train_examples": task["max_train_examples"], "from": source}


def train_member(model_name: str, spec: FinetuneModel, task_name: str, p: FinetuneParams,
                 on_eval: Any = None) -> Any:
    """Fine-tune the member ``spec`` (named ``model_name`` in messages) on ``data/tasks/{task_name}/`` at every seed
    of ``p`` (and its low-resource run when the task is one), writing nothing: the
    :class:`bert_pipeline.train.finetune.FinetuneOutcome` of :func:`finetune_task`. Shared with ``budget_curve``.

    Raises:
        PipelineError: no settings for the task, the model folder missing (offline), or fine-tuning failed.
    """
    if task_name not in p.tasks:
        raise PipelineError(f"params.yaml: finetune.tasks: no settings for task {task_name!r} "
                            f"(known: {', '.join(sorted(p.tasks))})")
    offline = os.environ.get("HF_HUB_OFFLINE", "1") != "0"  # bert_pipeline's default: no hub at run time
    if not Path(spec.path).exists() and (offline or not _HUB_NAME.match(spec.path)):
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
    one atomic step), ``metrics/finetune/{model}-{task}.json``, its headline and timing files; with a
    ``tracker``, the MLflow tags (``role``), per-seed child runs, metrics and the model pointer
    (:func:`log_seed_runs`; ``stage`` names the child runs, default ``finetune@{model}-{task}``)."""
    name = f"{model_name.replace('/', '--')}-{task_name}"
    with atomic_dir(MODELS_OUT / name) as tmp:
        outcome.model.save_pretrained(tmp)
        outcome.tokenizer.save_pretrained(tmp)
    write_json(METRICS / f"{name}.json", metrics)
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


def member_role(spec: FinetuneModel) -> str:
    """``teacher``, ``student``, ``baseline`` (random weights) or ``reference`` (any other pre-trained model)."""
    if spec.init == "random":
        return "baseline"
    return ROLE_BY_PATH.get(Path(spec.path).as_posix(), "reference")


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.finetune", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a key of finetune.models, a folder or a hub name")
    parser.add_argument("--task", required=True, help="a task folder under data/tasks/")
    args = parser.parse_args(argv)
    require_inputs(f"finetune@{args.model}-{args.task}")
    params = load_view(FinetuneView)
    p = params.finetune
    if p.num_threads:
        torch.set_num_threads(p.num_threads)
    section = p.model_dump(exclude={"models", "tasks", "user_model"})
    section["model"] = resolve_model(args.model, p).model_dump()
    section["task"] = p.settings_for(resolve_model(args.model, p), args.task)[1] if args.task in p.tasks else None
    with dvc_adapter.stage_run(f"finetune@{args.model}-{args.task}", section,
                            tags={"model": args.model, "task": args.task, "seeds": p.seeds}) as tracker:
        run(args.model, args.task, p, tracker)


if __name__ == "__main__":
    run_main(main)
