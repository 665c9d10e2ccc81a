"""Benchmark: one fine-tuning training step of a checkpoint, torch's own dropout and SDPA attention against the
runtime's CPU training forward (``Runtime.train_forward``: ``cpu_dropout``, eager attention), side by side.

    python bench/finetune_step.py                                   # MiniLM (data/raw/minilm), QA head, 32 x 128
    python bench/finetune_step.py --model-path models/pretrained --batch-size 16
    python bench/finetune_step.py --profile                         # + the top ops of each way (torch.profiler)

Each way runs ``--steps`` steps (forward, backward, gradient clipping, fused AdamW) per round, alternating for
``--rounds`` rounds after two warm-up steps each, on random token ids of ``--length`` tokens (every position real,
as most of QA's 128-token windows are); the best round of each is reported with its CPU seconds, the load average,
the model FLOPs rate (6 x non-embedding parameters x tokens, plus attention's 12 x layers x tokens x length x hidden;
Kaplan et al. 2020, §2.1) and its share of the machine's matmul rate in the same precision (MFU). Run it alone:
anything beside it on 2 cores inflates both ways.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bert_pipeline.train.runtime import machine_key, make_runtime, matmul_seconds  # noqa: E402


def step_flops(model, batch_size: int, length: int) -> float:
    """Training FLOPs of one step: 6 per non-embedding parameter per token, plus the attention scores and their
    weighted sum (2 matmuls of 2 x length x hidden per token and layer, x3 for forward and backward)."""
    config = model.config
    dense = sum(p.numel() for name, p in model.named_parameters() if "embeddings" not in name)
    tokens = batch_size * length
    attention = 12 * config.num_hidden_layers * tokens * length * config.hidden_size
    return 6 * dense * tokens + attention


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-path", default=str(REPO / "data/raw/minilm"))
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)

    from transformers import AutoModelForQuestionAnswering

    runtime = make_runtime(args.precision, cpu=True)
    torch.manual_seed(0)
    model = AutoModelForQuestionAnswering.from_pretrained(args.model_path, attn_implementation="sdpa").train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(1000, min(8000, model.config.vocab_size), (args.batch_size, args.length))
    positions = torch.randint(0, args.length, (args.batch_size,))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "start_positions": positions,
             "end_positions": positions}
    ways = {"torch dropout, SDPA": runtime.autocast, "train_forward": lambda: runtime.train_forward(model)}

    def step(context) -> None:
        with context():
            loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    best: dict[str, tuple[float, float]] = {}
    for context in ways.values():
        step(context)
        step(context)
    for _ in range(args.rounds):
        for name, context in ways.items():
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                step(context)
            result = ((time.perf_counter() - wall) / args.steps, (time.process_time() - cpu) / args.steps)
            best[name] = min(best.get(name, result), result)
    dtype = runtime.compute_dtype
    peak = 2 * 1024**3 / matmul_seconds(dtype)
    flops = step_flops(model, args.batch_size, args.length)
    print(f"machine: {machine_key()}; {torch.get_num_threads()} threads; precision {runtime.precision}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{args.model_path}: batch {args.batch_size} x {args.length} tokens, {flops / 1e9:.0f} GFLOP a step; "
          f"matmul peak {peak / 1e9:.0f} GFLOP/s ({dtype})")
    for name, (wall, cpu) in best.items():
        print(f"  {name:<20} {wall:6.3f} s/step  {cpu:6.2f} CPU s/step  {flops / wall / 1e9:5.0f} GFLOP/s  "
              f"MFU {flops / wall / peak:5.1%}")
    base, new = best["torch dropout, SDPA"][0], best["train_forward"][0]
    print(f"  speedup {base / new:.2f}x")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for name, context in ways.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                step(context)
            print(f"\n{name}: one step's top operators by self CPU time")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))


if __name__ == "__main__":
    main()
