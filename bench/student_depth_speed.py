"""Latency (batch 1) and throughput (batch 32) of MiniLM's fine-tuned sentiment model against students built from
its lowest 3 and 4 layers, timed as stage ``evaluate`` times them (64 tokens, 1 thread, fp32), 3 rounds of 10 timed
runs each, the ratios per round: can a deeper student keep the issue's 1.6x?

    python bench/student_depth_speed.py      # in a repository whose default run has finished

The students are untrained copies (speed does not depend on the weights). One JSON line per round.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from datasets import load_from_disk  # noqa: E402

from bert_pipeline.evaluation.predictor import load_predictor  # noqa: E402
from bert_pipeline.evaluation.speed import measure_speed  # noqa: E402
from bert_pipeline.model.distillation import build_student  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402


def main() -> None:
    """Print one JSON line per round: each model's (latency ms, throughput/s) and the ratios to MiniLM."""
    runtime = make_runtime("fp32")
    teacher = load_predictor("models/finetuned/minilm-sentiment")
    test = load_from_disk("data/tasks/sentiment")["test"]
    texts = [test[i]["text"] for i in range(64)]
    models = {"minilm": teacher.model.eval()}
    for depth in (3, 4):
        models[f"bottom{depth}"] = build_student(teacher.model, depth, "bottom")[0].eval()
    for rnd in range(3):
        row = {}
        for name, model in models.items():
            s = measure_speed(model, teacher.tokenizer, texts, runtime, seq_length=64, latency_examples=8, batch_size=32,
                              warmup=2, runs=10, threads=1)
            row[name] = (round(s.latency_ms, 2), round(s.throughput, 1))
        print(json.dumps({"round": rnd, **row,
                          "latency_ratio": {k: round(row["minilm"][0] / v[0], 2) for k, v in row.items()},
                          "throughput_ratio": {k: round(v[1] / row["minilm"][1], 2) for k, v in row.items()}}))


if __name__ == "__main__":
    main()
