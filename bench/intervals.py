"""What the intervals add to stage ``evaluate``: :func:`bert_pipeline.report.intervals.family_intervals` over
synthetic per-example records of the default run's shape (members x tasks x 2 seeds, held-out sizes and clusters as
the default's test splits), timed alone.

    python bench/intervals.py [--members 7] [--resamples 10000] [--repeats 3]

Prints the wall and CPU seconds of each repeat (the median is the figure) and the load average beside them. The
records are random (each member right on a fixed share of the examples), so only the time means anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.report.intervals import family_intervals

ENTITY_TYPES = ("PERSON", "ORG", "GPE", "LOC", "DATE")
SHAPES = {  # task: (kind, test examples, clusters), the default's test splits at validation_fraction 0.15
    "sentiment": ("classification", 1281, 300),
    "ner": ("ner", 1000, 277),
    "qa": ("qa", 800, 277),
    "headline_match": ("pair_classification", 500, 250),
}


def record(task: str, rng: np.random.Generator, skill: float) -> ExampleRecord:
    kind, n, k = SHAPES[task]
    ids = [f"{task}:{i}" for i in range(n)]
    clusters = [f"doc{i * k // n}" for i in range(n)]
    labels = None
    if kind in ("classification", "pair_classification"):
        labels = ["a", "b"]
    elif kind == "ner":
        labels = ["O", *(f"{p}-{t}" for t in ENTITY_TYPES for p in "BI")]
    rec = ExampleRecord(kind, {"ner": "f1", "qa": "f1"}.get(kind, "accuracy"), labels)
    rec.splits["test"] = SplitInfo(ids, clusters, split_hash(ids, []))
    for seed in (42, 43):
        if kind == "ner":
            tp = rng.binomial(3, skill, n)
            cols = {"tp": tp, "fp": rng.binomial(1, 1 - skill, n), "fn": 3 - tp}
            for t in ENTITY_TYPES:
                cols.update({f"tp_{t}": tp // 2, f"fp_{t}": cols["fp"] // 2, f"fn_{t}": cols["fn"] // 2})
        elif kind == "qa":
            f1 = np.clip(rng.normal(skill, 0.3, n), 0, 1)
            cols = {"f1": f1, "exact_match": (f1 > 0.9).astype(np.float64)}
        else:
            gold = rng.integers(0, 2, n)
            cols = {"gold": gold, "pred": np.where(rng.random(n) < skill, gold, 1 - gold)}
        rec.add("test", "full", seed, cols)
    return rec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=7)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    members = ["pretrained", "distilled", "scratch", *(f"m{i}" for i in range(args.members - 3))]
    records = {(m, t): record(t, rng, 0.5 + 0.05 * i) for i, m in enumerate(members) for t in SHAPES}
    walls, cpus = [], []
    for _ in range(args.repeats):
        load = os.getloadavg()[0]
        start, cpu = time.perf_counter(), time.process_time()
        out = family_intervals(records, members, list(SHAPES), "pretrained", "distilled", "scratch",
                               [("pretrained", "distilled")], Bootstrap(args.resamples),
                               ["gain_over_scratch", "student_share"])
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        print(f"{len(out.intervals)} intervals: {walls[-1]:.2f} s wall, {cpus[-1]:.2f} CPU s, load average {load:.2f}")
    print(f"median: {statistics.median(walls):.2f} s wall, {statistics.median(cpus):.2f} CPU s "
          f"({len(members)} members x {len(SHAPES)} tasks x 2 seeds, {args.resamples:,} resamples)")


if __name__ == "__main__":
    main()
