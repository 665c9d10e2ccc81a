"""Stage ``distill_task``: ``python -m stages.distill_task --task T`` (one DVC stage per task).

Task-specific distillation (Sanh et al. 2019, §4.2; :func:`bert_pipeline.train.task_distill.distill_task`): the
fine-tuned teacher ``models/finetuned/{task_distill.teacher}-{T}/`` with its lowest layers is the student, trained
once per seed in ``task_distill.seeds`` on the cached teacher logits ``data/teacher_logits/{T}/`` and the gold
labels. The student is a family member like the fine-tuned ones, named ``task_distill.student``:

- ``models/finetuned/{student}-{T}/``: the best-validation seed's student (``save_pretrained``, tokenizer; its model card is stage ``model_cards``'s);
- ``metrics/finetune/{student}-{T}.json``: fine-tuning's record plus ``"teacher"`` (the teacher's member name) and
  ``"distillation"`` (layers, layer map, loss weights, transfer-set sizes, parameters);
- ``metrics/headline/finetune/{student}-{T}.json`` and ``metrics/finetune-timing/{student}-{T}.json``.

The MLflow run is tagged ``role=student``, ``teacher`` and ``teacher_run_id`` (the teacher's fine-tuning run, found
by the DVC hash of the folder it saved), so the UI can set each pair side by side.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.mlops import tracking
from bert_pipeline.train.finetune_data import FinetuneError
from bert_pipeline.train.runtime import make_runtime
from bert_pipeline.train.task_distill import StudentSpec, distill_task
from stages import dvc_adapter, require_inputs, settings_from
from stages.members import LOOP_KEYS, MODELS_OUT, TASKS, save_member, training_facts
from stages.params.base import load_view
from stages.params.task_distill import TaskDistillView, check_teacher

LOGITS = Path("data/teacher_logits")
SHARED_KEYS = {"teacher", "student", "student_layers", "layer_selection", "temperature", "alpha_ce", "alpha_task",
               "learning_rate", "seeds"}


def run(task_name: str, params: TaskDistillView, tracker: Any = None) -> dict[str, Any]:
    """Distil the teacher of ``task_name`` into its student and write the outputs. Returns the metrics dict."""
    td, ft = params.task_distill, params.finetune
    if task_name not in ft.tasks:
        raise PipelineError(f"params.yaml: finetune.tasks: no settings for task {task_name!r} "
                            f"(known: {', '.join(sorted(ft.tasks))})")
    check_teacher(params)
    teacher_dir = MODELS_OUT / f"{td.teacher}-{task_name}"
    spec = StudentSpec(student_layers=td.student_layers, layer_selection=td.layer_selection,
                       temperature=td.temperature, alpha_ce=td.alpha_ce,
                       alpha_task=td.alpha_task, learning_rate=td.learning_rate, epochs=td.epochs.get(task_name))
    on_eval = None
    if tracker is not None:
        def on_eval(prefix: str, step: int, entry: dict[str, float]) -> None:
            tracker.log_metrics({f"{prefix}{k}": v for k, v in entry.items() if k != "step"}, step=step)
    loop = ft.model_dump(include=LOOP_KEYS - {"seeds", "precision"})
    try:
        with settings_from("task_distill"):  # spec.student_layers is task_distill.student_layers
            outcome = distill_task(TASKS / task_name, teacher_dir, LOGITS / task_name, spec,
                                   ft.member_task(td.teacher, task_name), seeds=td.seeds, on_eval=on_eval,
                                   teacher_only_examples=td.teacher_only_examples.get(task_name, 0),
                                   runtime=make_runtime(ft.precision), **loop)
    except FinetuneError as exc:
        raise PipelineError(str(exc)) from None
    metrics = {"model": td.student, "task": task_name, "teacher": td.teacher, **outcome.metrics,
               **training_facts(ft, outcome)}
    if tracker is not None:
        tracker.set_tags({"teacher": td.teacher, "teacher_run_id": tracking.run_of_folder(tracker, teacher_dir) or ""})
    save_member(td.student, task_name, metrics, outcome, tracker, "student", f"distill_task@{task_name}")
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.distill_task", description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a task folder under data/tasks/")
    args = parser.parse_args(argv)
    require_inputs(f"distill_task@{args.task}")
    params = load_view(TaskDistillView)
    if params.finetune.num_threads:
        torch.set_num_threads(params.finetune.num_threads)
    td = params.task_distill
    # the settings this task's run uses (dvc.yaml's params of distill_task@{task}), not the other tasks' entries
    section = {**td.model_dump(include=SHARED_KEYS), "epochs": td.epochs.get(args.task),
               "teacher_only_examples": td.teacher_only_examples.get(args.task, 0),
               "loop": params.finetune.model_dump(include=LOOP_KEYS - {"seeds"}),
               "task": (params.finetune.member_task(td.teacher, args.task)
                        if args.task in params.finetune.tasks and td.teacher in params.finetune.models else None)}
    with dvc_adapter.stage_run(f"distill_task@{args.task}", section,
                            tags={"model": params.task_distill.student, "task": args.task,
                                  "teacher": params.task_distill.teacher}) as tracker:
        run(args.task, params, tracker)


if __name__ == "__main__":
    run_main(main)
