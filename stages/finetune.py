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

Training and writing a member are :mod:`stages.members`' (:func:`stages.members.train_member`,
:func:`stages.members.save_member`), shared with the stages that fine-tune members of their own.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from stages import dvc_adapter, require_inputs
from stages.members import HUB_NAME, save_member, train_member, training_facts
from stages.params.base import load_view
from stages.params.finetune import FinetuneModel, FinetuneParams, FinetuneView

# The MLflow tag ``role`` of a family member, by where its weights come from (evaluate.teacher/student/scratch name
# the same members for the report; a run's tag is set here so a finetune run needs no evaluate params).
ROLE_BY_PATH = {"models/pretrained": "teacher", "models/distilled": "student"}


def resolve_model(name: str, p: FinetuneParams) -> FinetuneModel:
    """The settings for ``--model name``: a key of ``finetune.models``, else a local folder with
    ``config.json`` or a hub name ``owner/name`` with ``finetune.user_model``'s settings.

    Raises:
        PipelineError: none of these (one line naming the key and what was expected).
    """
    if name in p.models:
        return p.models[name]
    path = Path(name)
    if (path / "config.json").exists() or (not path.exists() and HUB_NAME.match(name)):
        return p.user_model.model_copy(update={"path": name})
    raise PipelineError(
        f"--model {name!r}: unknown model; expected a key of finetune.models in params.yaml "
        f"({', '.join(sorted(p.models))}), a folder with config.json, or a hub name owner/name"
    )


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


def member_role(spec: FinetuneModel) -> str:
    """``teacher``, ``student``, ``baseline`` (random weights) or ``reference`` (any other pre-trained model)."""
    if spec.init == "random":
        return "baseline"
    return ROLE_BY_PATH.get(Path(spec.path).as_posix(), "reference")


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
