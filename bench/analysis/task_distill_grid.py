"""A small grid of task-specific distillation settings for one task, scored on validation, from a finished run.

    nice python bench/analysis/task_distill_grid.py --task qa --seeds 42 43 \
        --variant alpha_ce=0.8,alpha_task=0.2 --variant learning_rate=2e-4 --variant layer_selection=uniform

Run in a repository whose ``dvc repro`` has finished (it reads ``models/finetuned/{teacher}-{task}/``,
``data/tasks/{task}/`` and the cached ``data/teacher_logits/{task}/``). Each variant overrides fields of the
``task_distill`` section (:class:`bert_pipeline.train.task_distill.StudentSpec`: ``student_layers``,
``layer_selection``, ``temperature``, ``alpha_ce``, ``alpha_task``, ``learning_rate``, ``epochs``) and trains one
student per seed exactly as ``distill_task@{task}`` does, writing nothing. The baseline (``params.yaml`` as it is) comes first.
Prints one JSON line per variant with the validation and test main metric per seed, their means, the teacher's, the
student's share of each, the wall and CPU seconds and the load average; choose on the validation means, and read
test only for the variant chosen.
``--no-baseline`` trains the variants only.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bert_pipeline.model.distillation import LAYER_SELECTIONS  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402
from bert_pipeline.train.task_distill import StudentSpec, distill_task  # noqa: E402
from stages.members import LOOP_KEYS, MODELS_OUT, TASKS  # noqa: E402
from stages.params.root import load_params  # noqa: E402

# field -> (type, smallest allowed value, whether the bound itself is allowed): task_distill's own ranges
SPEC_FIELDS = {"temperature": (float, 0.0, False), "alpha_ce": (float, 0.0, True), "alpha_task": (float, 0.0, True),
               "learning_rate": (float, 0.0, False), "epochs": (int, 1, True), "student_layers": (int, 1, True)}
CHOICE_FIELDS = {"layer_selection": LAYER_SELECTIONS}


def parse_variant(text: str) -> dict[str, float | int | str]:
    """``"alpha_ce=0.8,alpha_task=0.2"`` -> ``{"alpha_ce": 0.8, "alpha_task": 0.2}``; ``"layer_selection=uniform"``
    -> ``{"layer_selection": "uniform"}``.

    Raises:
        SystemExit: a field that :class:`StudentSpec` does not tune, a value that is not a number in its range, or
            a choice that is not one of the field's.
    """
    out: dict[str, float | int | str] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if key in CHOICE_FIELDS:
            if value not in CHOICE_FIELDS[key]:
                raise SystemExit(f"--variant {text!r}: expected {key} one of {', '.join(CHOICE_FIELDS[key])}, "
                                 f"got {value!r}")
            out[key] = value
            continue
        if key not in SPEC_FIELDS:
            raise SystemExit(f"--variant {text!r}: {key!r} is not one of {', '.join([*CHOICE_FIELDS, *SPEC_FIELDS])}")
        kind, low, inclusive = SPEC_FIELDS[key]
        try:
            number = kind(value)
        except ValueError:
            raise SystemExit(f"--variant {text!r}: {key}={value!r} is not {'an int' if kind is int else 'a number'}"
                             ) from None
        if number < low or (number == low and not inclusive):
            raise SystemExit(f"--variant {text!r}: expected {key} {'>=' if inclusive else '>'} {low}, got {number}")
        out[key] = number
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="a key of finetune.tasks whose teacher and logits are built")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43], help="student seeds (default: 42 43)")
    parser.add_argument("--variant", action="append", default=[],
                        help=f"field=value[,field=value...] with fields {', '.join([*CHOICE_FIELDS, *SPEC_FIELDS])}; "
                             "repeatable")
    parser.add_argument("--no-baseline", action="store_true",
                        help="train only the variants (the baseline's figures are the run's own)")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant]  # before minutes of training
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    td, ft = params.task_distill, params.finetune
    teacher_metrics = Path("metrics/finetune") / f"{td.teacher}-{args.task}.json"
    logits = Path("data/teacher_logits") / args.task
    if args.task not in ft.tasks or not teacher_metrics.is_file() or not (logits / "teacher_logits.json").is_file():
        raise SystemExit(f"--task {args.task}: needs a finished run here ({teacher_metrics} and {logits}/); run "
                         f"`dvc repro teacher_logits@{args.task}` first (tasks: {', '.join(ft.tasks)})")
    base = StudentSpec(student_layers=td.student_layers, layer_selection=td.layer_selection,
                       temperature=td.temperature, alpha_ce=td.alpha_ce,
                       alpha_task=td.alpha_task, learning_rate=td.learning_rate,
                       epochs=td.epochs.get(args.task))
    teacher_dir = MODELS_OUT / f"{td.teacher}-{args.task}"
    teacher = json.loads(teacher_metrics.read_text())
    loop = ft.model_dump(include=LOOP_KEYS - {"seeds", "precision"})
    for overrides in variants if args.no_baseline else [{}, *variants]:
        spec = replace(base, **overrides)
        load, wall, cpu = os.getloadavg()[0], time.perf_counter(), time.process_time()
        outcome = distill_task(TASKS / args.task, teacher_dir, logits, spec,
                               ft.member_task(td.teacher, args.task), seeds=args.seeds,
                               teacher_only_examples=td.teacher_only_examples.get(args.task, 0),
                               runtime=make_runtime(ft.precision), **loop)
        metric = outcome.metrics["main_metric"]
        row: dict[str, object] = {"task": args.task, "variant": overrides or "params.yaml", "metric": metric}
        for split in ("validation", "test"):
            student = outcome.metrics[split][metric]
            row[split] = student["seeds"]
            row[f"{split}_mean"] = student["mean"]
            row[f"{split}_teacher"] = teacher[split][metric]["mean"]
            row[f"{split}_share"] = round(student["mean"] / teacher[split][metric]["mean"], 4)
        row.update(wall_s=round(time.perf_counter() - wall, 1), cpu_s=round(time.process_time() - cpu, 1),
                   load_before=load, load_after=os.getloadavg()[0])
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
