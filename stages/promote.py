"""Register the current fine-tuned models and promote a champion per task (an explicit step, not a DVC stage).

    python -m stages.promote                 # every task with results
    python -m stages.promote --tasks sentiment --force

For each task (registered model ``sentiment``, ``ner``, ``qa``): every ``models/finetuned/{model}-{task}/`` with
its ``metrics/finetune/{model}-{task}.json`` becomes a version (tags: family member, seed, main metric, score,
test split hash), alias ``candidate`` goes to the best of them, and alias ``champion`` moves to the candidate only
when it is strictly better than the current champion on the same test split (``data/tasks/{task}/test`` content
hash). Each decision is logged and printed as one line. Run it after ``dvc repro`` on results you mean to keep;
never from a throwaway ``dvc exp run``. Tracking store: ``MLFLOW_TRACKING_URI`` or ``<repo>/mlflow.db``
(``bert_pipeline.mlops.tracking``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.report import by_model_task, family_order, load_finetune_results, task_order
from bert_pipeline.mlops.registry import Entry, promote_task, split_sha256
from bert_pipeline.mlops.tracking import tracking_uri
from stages.params import load_params

FINETUNE_METRICS = Path("metrics/finetune")
FINETUNED = Path("models/finetuned")
TASKS = Path("data/tasks")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stages.promote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", help="only these tasks (default: every task with results)")
    parser.add_argument("--force", action="store_true",
                        help="promote the candidate even when the test split changed since the champion was scored")
    return parser.parse_args(argv)


def saved_seed(source: str) -> int | None:
    """The seed whose weights the fine-tuned folder holds: ``saved_seed`` (or ``seed``) in the metrics file,
    else the first of its ``seeds`` (finetune saves the first seed's model)."""
    raw = json.loads(Path(source).read_text(encoding="utf-8"))
    value = raw.get("saved_seed", raw.get("seed"))
    if value is None and isinstance(raw.get("seeds"), list) and raw["seeds"]:
        value = raw["seeds"][0]
    return int(value) if isinstance(value, int) else None


def entries_by_task(teacher: str, student: str, scratch: str, only: list[str] | None,
                    data_seed: int = 0) -> dict[str, list[Entry]]:
    """Per task, the registrable entries in family order.

    Raises:
        PipelineError: a requested task has no results, or a metrics file's model folder is missing.
    """
    index = by_model_task(load_finetune_results(FINETUNE_METRICS))
    tasks = task_order({t for _, t in index})
    for t in only or []:
        if t not in tasks:
            raise PipelineError(f"--tasks: no metrics/finetune/*-{t}.json (tasks with results: {', '.join(tasks)})")
    out: dict[str, list[Entry]] = {}
    for t in only or tasks:
        entries = []
        for m in family_order({m for m, tt in index if tt == t}, teacher, student, scratch):
            r = index[m, t]
            scored = json.loads(Path(r.source).read_text(encoding="utf-8")).get("test_examples")
            split = split_sha256(TASKS / t / "test", scored if isinstance(scored, int) else None, data_seed)
            folder = FINETUNED / f"{m}-{t}"
            if not (folder / "config.json").exists():
                raise PipelineError(f"{folder}: missing (named by {r.source})")
            entries.append(Entry(m, t, folder, saved_seed(r.source), r.main_metric, r.score, split, r.source))
        out[t] = entries
    return out


def main(argv: list[str] | None = None) -> None:
    from mlflow import MlflowClient

    args = parse_args(argv)
    params = load_params()
    p = params.evaluate
    uri = tracking_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    for entries in entries_by_task(p.teacher, p.student, p.scratch, args.tasks, params.finetune.data_seed).values():
        decision = promote_task(client, entries, uri, force=args.force)
        print(decision.line())


if __name__ == "__main__":
    run_main(main)
