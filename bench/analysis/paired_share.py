"""How sure is a student's share of its teacher? The paired bootstrap of each held-out split, from a run's records.

    python bench/analysis/paired_share.py [--run .] [--tasks qa ner] [--teacher minilm --student minilm_student]
                                          [--pair task_distill|evaluate] [--resamples 10000] [--goal 0.97]

Reads the per-example records every fine-tuning and task-distillation run writes,
``{run}/metrics/examples/{teacher}-{task}.arrow`` and ``{student}-{task}.arrow`` (what each validation and test
example contributed to each seed's score: :mod:`bert_pipeline.evaluation.examples`), and prints one JSON line per
task and split: both main-metric scores (mean over seeds), the student's share of the teacher's, its interval
(:meth:`bert_pipeline.evaluation.intervals.Bootstrap.ratio`: whole articles or films drawn, the same draws for both
models, seeds resampled where a model has several) and the fraction of draws at or above ``--goal``
(:meth:`~bert_pipeline.evaluation.intervals.Bootstrap.share_at_least`), with the split's examples and clusters.
Loads no model and predicts nothing: seconds for every task.

The pair: ``--teacher`` / ``--student``, else ``{run}/params.yaml``'s ``task_distill.teacher`` / ``student``
(``--pair evaluate``: ``evaluate.teacher`` / ``student``, the general-distillation pair). The bootstrap's settings
default to that file's ``evaluate.intervals`` (resamples, confidence, seed, method). Tasks: ``--tasks``, else every
task both models have a record of. Writes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, check_paired  # noqa: E402
from bert_pipeline.evaluation.intervals import Bootstrap  # noqa: E402
from stages.params.base import read_yaml  # noqa: E402

EXAMPLES = Path("metrics/examples")
PARAMS = Path("params.yaml")
SPLITS = ("validation", "test")
DEFAULTS = {"resamples": 10_000, "confidence": 0.95, "seed": 0, "method": "percentile"}
"""The bootstrap's settings where neither an option nor the run's params.yaml gives them (Bootstrap's defaults)."""


def run_params(run: Path) -> dict[str, Any]:
    """The run's params.yaml as a plain mapping ({} without one; not validated: only a few names are read)."""
    path = run / PARAMS
    return read_yaml(path) if path.is_file() else {}


def record_tasks(folder: Path, teacher: str, student: str, order: Sequence[str] = ()) -> list[str]:
    """The tasks both ``teacher`` and ``student`` have a record of in ``folder``, in ``order`` first, then sorted."""
    prefix = f"{teacher}-"
    found = {p.stem[len(prefix):] for p in folder.glob(f"{prefix}*.arrow")}
    both = {t for t in found if (folder / f"{student}-{t}.arrow").is_file()}
    return [*(t for t in order if t in both), *sorted(both - set(order))]


def share_rows(teacher: ExampleRecord, student: ExampleRecord, bootstrap: Bootstrap, goal: float, task: str,
               names: tuple[str, str], splits: Sequence[str] = SPLITS) -> list[dict[str, Any]]:
    """One row per split of both records: the main metric of each (the teacher's record names it), the share with
    its interval and the fraction of draws at or above ``goal``.

    Raises:
        ExamplesError: the records did not score the same examples of a split (not paired).
    """
    metric = teacher.main_metric
    rows = []
    for split in splits:
        if split not in teacher.splits and split not in student.splits:
            continue
        check_paired(teacher, student, split, *names)
        a = bootstrap.estimates(student, split)[metric]
        b = bootstrap.estimates(teacher, split)[metric]
        share = bootstrap.ratio(a, b)
        info = teacher.splits[split]
        rows.append({
            "task": task, "split": split, "metric": metric, "examples": len(info.ids),
            "clusters": len(set(info.clusters)), "teacher_seeds": len(b.seed_values), "student_seeds": len(a.seed_values),
            "teacher": round(b.point, 4), "student": round(a.point, 4), "share": round(share.point, 4),
            "low": round(share.low, 4), "high": round(share.high, 4), "confidence": bootstrap.confidence,
            "method": bootstrap.method, "at_least_goal": round(bootstrap.share_at_least(a, b, goal), 4), "goal": goal,
            "resamples": bootstrap.resamples, "sources": share.sources})
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=Path("."), help="the run folder (default: .)")
    parser.add_argument("--tasks", nargs="+", default=None, help="tasks (default: every one both models have)")
    parser.add_argument("--pair", choices=("task_distill", "evaluate"), default="task_distill",
                        help="the params.yaml section naming teacher and student (default task_distill)")
    parser.add_argument("--teacher", default=None, help="the teacher's member name (default: from --pair)")
    parser.add_argument("--student", default=None, help="the student's member name (default: from --pair)")
    parser.add_argument("--resamples", type=int, default=None, help="draws per split (default: evaluate.intervals)")
    parser.add_argument("--confidence", type=float, default=None, help="the interval's level (default: evaluate.intervals)")
    parser.add_argument("--seed", type=int, default=None, help="the draws' seed (default: evaluate.intervals)")
    parser.add_argument("--method", choices=("percentile", "basic"), default=None,
                        help="the interval's bounds (default: evaluate.intervals)")
    parser.add_argument("--goal", type=float, default=0.97, help="the share goal counted in `at_least_goal` (default 0.97)")
    args = parser.parse_args(argv)
    try:
        params = run_params(args.run)
    except Exception as exc:  # noqa: BLE001  (a malformed params.yaml: only defaults come from it)
        parser.error(str(exc))
    section = params.get(args.pair) or {}
    teacher = args.teacher or section.get("teacher")
    student = args.student or section.get("student")
    if not teacher or not student:
        parser.error(f"no {args.run / PARAMS} naming {args.pair}.teacher and .student: give --teacher and --student")
    teacher, student = str(teacher).replace("/", "--"), str(student).replace("/", "--")  # as the stages name files
    given = {k: getattr(args, k) for k in DEFAULTS}
    saved = (params.get("evaluate") or {}).get("intervals") or {}
    settings = {k: given[k] if given[k] is not None else saved.get(k, DEFAULTS[k]) for k in DEFAULTS}
    try:
        bootstrap = Bootstrap(**settings)
    except ValueError as exc:
        parser.error(str(exc))
    folder = args.run / EXAMPLES
    order = list((params.get("finetune") or {}).get("tasks") or ())
    tasks = args.tasks or record_tasks(folder, teacher, student, order)
    if not tasks:
        raise SystemExit(f"{folder}: no per-example records of both {teacher} and {student} (files "
                         f"{teacher}-TASK.arrow, {student}-TASK.arrow); run `dvc repro distill_task` first")
    for task in tasks:
        paths = {role: folder / f"{name}-{task}.arrow" for role, name in (("teacher", teacher), ("student", student))}
        missing = [str(p) for p in paths.values() if not p.is_file()]
        if missing:
            raise SystemExit(f"--tasks {task}: no per-example record {', '.join(missing)}; run the stage that "
                             "trains that member on that task first")
        try:
            records = {role: ExampleRecord.read(path) for role, path in paths.items()}
            rows = share_rows(records["teacher"], records["student"], bootstrap, args.goal, task,
                              (str(paths["teacher"]), str(paths["student"])))
        except ExamplesError as exc:
            raise SystemExit(f"error: {exc}") from None
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
