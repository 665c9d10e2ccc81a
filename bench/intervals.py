"""What the intervals add to stage ``evaluate``: :func:`bert_pipeline.report.intervals.family_intervals` over
synthetic per-example records of the default run's shape (members x tasks x 2 seeds, held-out sizes and clusters as
the default's test splits), timed alone.

    python bench/intervals.py [--members 7] [--resamples 10000] [--repeats 3]
    python bench/intervals.py --run DIR   # a finished run's own records (DIR/metrics/examples), read and resampled

Prints the wall and CPU seconds of each repeat (the median is the figure) and the load average beside them. The
synthetic records are random (each member right on a fixed share of the examples), so only the time means
anything; with ``--run`` the timed work is exactly what ``evaluate`` adds: reading the records and
:func:`family_intervals` with the run's ``evaluate`` params.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from bert_pipeline import tasks
from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.report.intervals import family_intervals, load_records

ENTITY_TYPES = ("PERSON", "ORG", "GPE", "LOC", "DATE")
NER_LABELS = ["O", *(f"{p}-{t}" for t in ENTITY_TYPES for p in "BI")]


def labels_of(gold_rng: np.random.Generator, rng: np.random.Generator, n: int, skill: float, classes: int = 2):
    gold = gold_rng.integers(0, classes, n).tolist()
    return gold, [g if rng.random() < skill else int(rng.integers(0, classes)) for g in gold], ["a", "b"]


def tags_of(gold_rng: np.random.Generator, rng: np.random.Generator, n: int, skill: float):
    gold = [[NER_LABELS[int(i)] for i in gold_rng.integers(0, len(NER_LABELS), 12)] for _ in range(n)]
    pred = [[t if rng.random() < skill else "O" for t in s] for s in gold]
    return gold, pred, NER_LABELS


def answers_of(gold_rng: np.random.Generator, rng: np.random.Generator, n: int, skill: float):
    gold = [[f"answer {i} words"] for i in range(n)]
    pred = [g[0] if rng.random() < skill else f"answer {i}" for i, g in enumerate(gold)]
    return gold, pred, None


SHAPES = {  # task: (kind, main metric, test examples, clusters, example maker), the default's test splits
    "sentiment": ("classification", "accuracy", 1281, 300, labels_of),
    "ner": ("ner", "f1", 1000, 277, tags_of),
    "qa": ("qa", "f1", 800, 277, answers_of),
    "headline_match": ("pair_classification", "accuracy", 500, 250, labels_of),
}


def record(task: str, rng: np.random.Generator, skill: float) -> ExampleRecord:
    kind, main, n, k, make = SHAPES[task]
    ids = [f"{task}:{i}" for i in range(n)]
    clusters = [f"doc{i * k // n}" for i in range(n)]
    rec = None
    for seed in (42, 43):
        refs, preds, labels = make(np.random.default_rng(n), rng, n, skill)  # the same gold for every member
        if rec is None:
            rec = ExampleRecord(kind, main, labels)
            rec.splits["test"] = SplitInfo(ids, clusters, split_hash(ids, refs))
        rec.add("test", "full", seed, tasks.get(kind).example_columns(refs, preds, labels))
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=7)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run", type=Path, help="a finished run's folder: time its own records instead")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    members = ["pretrained", "distilled", "scratch", *(f"m{i}" for i in range(args.members - 3))]
    tasks_ = list(SHAPES)
    roles = ("pretrained", "distilled", "scratch")
    primary = ["gain_over_scratch", "student_share"]
    pairs = [("pretrained", "distilled")]
    if args.run:
        from stages.params.base import load_view
        from stages.params.evaluate import EvaluateView

        p = load_view(EvaluateView, args.run / "params.yaml").evaluate
        names = sorted(f.stem for f in (args.run / "metrics/examples").glob("*.arrow"))
        found = {tuple(n.split("-", 1)) for n in names}
        members = sorted({m for m, _ in found})
        tasks_ = sorted({t for _, t in found})
        roles, primary, args.resamples = (p.teacher, p.student, p.scratch), p.intervals.primary, p.intervals.resamples
        students = {(r["teacher"], r["model"]) for f in (args.run / "metrics/finetune").glob("*.json")
                    if (r := json.loads(f.read_text())).get("teacher")}
        pairs = [(p.teacher, p.student), *sorted(students)]
    walls, cpus = [], []
    for _ in range(args.repeats):
        load = os.getloadavg()[0]
        start, cpu = time.perf_counter(), time.process_time()
        if args.run:
            records = load_records(args.run / "metrics/examples", sorted(found))
        else:
            records = {(m, t): record(t, rng, 0.5 + 0.05 * i) for i, m in enumerate(members) for t in tasks_}
            start, cpu = time.perf_counter(), time.process_time()  # synthetic records: time the resampling alone
        out = family_intervals(records, members, tasks_, *roles, pairs, Bootstrap(args.resamples), primary)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        print(f"{len(out.intervals)} intervals: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} CPU s, load average {load:.2f}")
    print(f"median: {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} CPU s "
          f"({len(members)} members x {len(tasks_)} tasks, {args.resamples:,} resamples"
          f"{', ' + str(args.run) + ' records' if args.run else ', synthetic records, 2 seeds'})")


if __name__ == "__main__":
    main()
