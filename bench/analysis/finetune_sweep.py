"""Learning rates x epochs caps for one (member, task), chosen on validation exactly as the stage's grid does.

    python bench/analysis/finetune_sweep.py --model minilm --task ner --learning-rates 1e-4 2e-4 --epochs 8 \
        --set max_train_examples=null batch_size=32 --precision fp32

Run where ``prepare_tasks`` has run (``data/tasks/``) and the member's folder exists. Each setting trains once per
``--seeds`` with ``finetune``'s loop settings from ``params.yaml``, the task's ``finetune.tasks`` entry updated by
``--set`` (``null`` for None), and the library's grid (:class:`bert_pipeline.train.finetune.Grid`): the setting
with the best mean validation main metric wins and only its models are scored on test. Writes nothing; prints one
JSON line: the grid (validation mean per setting), the chosen setting, its learning curve (validation main metric
at each check, with the epoch), its test and validation scores, wall and CPU seconds and the load average, so the
choice written into ``finetune.models`` can cite it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bert_pipeline.train.finetune import Grid, finetune_task  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402
from stages.finetune import resolve_model  # noqa: E402
from stages.members import LOOP_KEYS, TASKS, member_spec  # noqa: E402
from stages.params.root import load_params  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a key of finetune.models")
    parser.add_argument("--task", required=True)
    parser.add_argument("--learning-rates", type=float, nargs="+", required=True)
    parser.add_argument("--epochs", type=int, nargs="+", required=True, help="epochs caps (early stopping inside)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: finetune.seeds")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="finetune.tasks.TASK fields")
    parser.add_argument("--evals-per-epoch", type=int, default=None, help="default: finetune.evals_per_epoch")
    parser.add_argument("--precision", default=None, help="default: finetune.precision")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    p = load_params().finetune
    task = p.tasks[args.task].model_dump()
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in task:
            raise SystemExit(f"--set {item!r}: {key!r} is not a field of finetune.tasks.{args.task}")
        task[key] = yaml.safe_load(value)
    loop = p.model_dump(include=LOOP_KEYS - {"precision"})
    if args.seeds:
        loop["seeds"] = args.seeds
    if args.evals_per_epoch:
        loop["evals_per_epoch"] = args.evals_per_epoch
    member = member_spec(resolve_model(args.model, p).model_copy(update={"learning_rate": "grid", "epochs": None,
                                                                          "low_resource_epochs": None}))
    grid = Grid(tuple(args.learning_rates), tuple(args.epochs), tuple(args.epochs))
    load, wall, cpu = os.getloadavg()[0], time.perf_counter(), time.process_time()
    outcome = finetune_task(TASKS / args.task, member, task, runtime=make_runtime(args.precision or p.precision),
                            low_resource_train_examples=None, low_resource_epochs=None, grid=grid, **loop)
    m = outcome.metrics
    main_metric = m["main_metric"]
    curve = [[(h["epoch"], round(h[f"validation_{main_metric}"], 4)) for h in run["history"]] for run in m["runs"]]
    print(json.dumps({
        "model": args.model, "task": args.task, "task_settings": task, "grid": m["grid"],
        "chosen": {"learning_rate": m["learning_rate"], "epochs": m["epochs"]}, "train_examples": m["train_examples"],
        "validation": m["validation"][main_metric], "test": m["test"][main_metric],
        "best_step": [run["best_step"] for run in m["runs"]], "steps": [run["steps"] for run in m["runs"]],
        "curve": curve, "extra_test": {k: v["mean"] for k, v in m["test"].items() if k != main_metric},
        "wall_s": round(time.perf_counter() - wall, 1), "cpu_s": round(time.process_time() - cpu, 1),
        "load_at_start": round(load, 2), "precision": args.precision or p.precision,
    }))


if __name__ == "__main__":
    main()
