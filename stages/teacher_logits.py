"""Stage ``teacher_logits``: ``python -m stages.teacher_logits --task T`` (one DVC stage per task).

The fine-tuned teacher ``models/finetuned/{task_distill.teacher}-{T}/`` labels the task's transfer set once
(:func:`bert_pipeline.train.task_distill.label_task`): the labelled subset it was fine-tuned on plus
``task_distill.teacher_only_examples[T]`` more training-split examples. Writes

- ``data/teacher_logits/{T}/``: ``logits.npy`` (float32, every feature's logits concatenated) and
  ``teacher_logits.json`` (rows, example ids, lengths), byte-identical on a CPU rerun, so a change of the
  student's settings (stage ``distill_task@{T}``) never reruns the teacher;
- ``metrics/teacher_logits-timing/{T}.json``: wall-clock and CPU seconds (``cache: false``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.speed import timed
from bert_pipeline.io import atomic_dir, write_json
from bert_pipeline.train.finetune_data import FinetuneError
from bert_pipeline.train.runtime import make_runtime
from bert_pipeline.train.task_distill import label_task, save_teacher_logits
from stages import require_inputs
from stages.params.base import load_view
from stages.params.task_distill import TaskDistillView, check_teacher

TASKS = Path("data/tasks")
MODELS = Path("models/finetuned")
OUT = Path("data/teacher_logits")
TIMING = Path("metrics/teacher_logits-timing")


def run(task_name: str, params: TaskDistillView) -> dict:
    """Label the transfer set of ``task_name`` with its fine-tuned teacher and write the outputs. Returns the index
    record."""
    td, ft = params.task_distill, params.finetune
    if task_name not in ft.tasks:
        raise PipelineError(f"params.yaml: finetune.tasks: no settings for task {task_name!r} "
                            f"(known: {', '.join(sorted(ft.tasks))})")
    check_teacher(params)
    teacher_dir = MODELS / f"{td.teacher}-{task_name}"
    try:
        result, wall, cpu = timed(lambda: label_task(
            TASKS / task_name, teacher_dir, ft.member_task(td.teacher, task_name),
            teacher_only_examples=td.teacher_only_examples.get(task_name, 0), data_seed=ft.data_seed,
            batch_size=td.teacher_batch_size, runtime=make_runtime(ft.precision)))
    except FinetuneError as exc:
        raise PipelineError(str(exc)) from None
    with atomic_dir(OUT / task_name) as tmp:
        save_teacher_logits(tmp, result.logits, result.record)
    write_json(TIMING / f"{task_name}.json", {"task": task_name, "features": result.record["features"],
                                              "threads": torch.get_num_threads(), "wall_seconds": round(wall, 2),
                                              "cpu_seconds": round(cpu, 2)})
    return result.record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.teacher_logits", description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a task folder under data/tasks/")
    args = parser.parse_args(argv)
    require_inputs(f"teacher_logits@{args.task}")
    params = load_view(TaskDistillView)
    if params.finetune.num_threads:
        torch.set_num_threads(params.finetune.num_threads)
    run(args.task, params)


if __name__ == "__main__":
    run_main(main)
