"""Teacher vs student CPU speed, side by side: the distillation pair's latency at batch 1 and throughput at batch 32.

    nice python bench/distill_pair.py                                   # minilm vs minilm_student, every task
    nice python bench/distill_pair.py --teacher pretrained --student distilled --tasks sentiment --rounds 9

Reads the fine-tuned folders ``models/finetuned/{member}-{task}/`` of a finished run and the task's test texts
(``data/tasks/{task}``: sentiment texts, NER sentences joined, QA questions with their contexts), and times both
models with the evaluate stage's own measure (:func:`bert_pipeline.evaluation.speed.measure_speed`: inputs padded to
``--seq-length`` tokens, ``--threads`` intra-op threads, the median of ``--runs`` timed runs after ``--warmup``) in
``--rounds`` alternating rounds, teacher then student, so drift in the machine's load hits both alike. Prints the
medians over rounds, the paired ratios (their median and range), the process CPU seconds and the load average
before and after; take the figures with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_pipeline.evaluation.predictor import load_predictor  # noqa: E402
from bert_pipeline.evaluation.speed import measure_speed  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402

SEQ_LENGTH = {"sentiment": 64, "ner": 64, "qa": 128}  # = finetune.tasks' max_length


def task_texts(task_dir: Path, n: int) -> list[str | tuple[str, str]]:
    """The first ``n`` test inputs of a task as the model reads them (QA: ``(question, context)`` pairs)."""
    from datasets import load_from_disk

    test = load_from_disk(str(task_dir))["test"].select(range(n))
    if "text" in test.column_names:
        return list(test["text"])
    if "tokens" in test.column_names:
        return [" ".join(tokens) for tokens in test["tokens"]]
    return [f"{q} [SEP] {c}" for q, c in zip(test["question"], test["context"], strict=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="minilm")
    parser.add_argument("--student", default="minilm_student")
    parser.add_argument("--tasks", nargs="+", default=["sentiment", "ner", "qa"])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository of a finished run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--latency-examples", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    load_before = os.getloadavg()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = {}
    cpu = make_runtime("fp32", cpu=True)  # the evaluate stage's measure: CPU serving
    for task in args.tasks:
        models = {who: load_predictor(args.root / "models/finetuned" / f"{name}-{task}")
                  for who, name in (("teacher", args.teacher), ("student", args.student))}
        texts = task_texts(args.root / "data/tasks" / task, max(args.latency_examples, args.batch_size))
        figures = {who: {"latency_ms": [], "throughput": []} for who in models}
        for _ in range(args.rounds):
            for who, pred in models.items():
                speed = measure_speed(pred.model, pred.tokenizer, texts, cpu, SEQ_LENGTH.get(task, 128),
                                      args.latency_examples, args.batch_size, args.warmup, args.runs, args.threads)
                figures[who]["latency_ms"].append(speed.latency_ms)
                figures[who]["throughput"].append(speed.throughput)
        lat = [t / s for t, s in zip(figures["teacher"]["latency_ms"], figures["student"]["latency_ms"], strict=True)]
        thr = [s / t for t, s in zip(figures["teacher"]["throughput"], figures["student"]["throughput"], strict=True)]
        report[task] = {
            **{f"{who}_{key}": round(statistics.median(values), 3) for who, block in figures.items()
               for key, values in block.items()},
            "latency_speedup": round(statistics.median(lat), 3), "latency_speedup_range": [round(min(lat), 3),
                                                                                           round(max(lat), 3)],
            "throughput_speedup": round(statistics.median(thr), 3), "throughput_speedup_range": [round(min(thr), 3),
                                                                                                 round(max(thr), 3)],
        }
    report["_run"] = {"teacher": args.teacher, "student": args.student, "threads": args.threads,
                      "rounds": args.rounds, "wall_seconds": round(time.perf_counter() - wall0, 1),
                      "cpu_seconds": round(time.process_time() - cpu0, 1),
                      "load_average_before": [round(x, 2) for x in load_before],
                      "load_average_after": [round(x, 2) for x in os.getloadavg()]}
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
