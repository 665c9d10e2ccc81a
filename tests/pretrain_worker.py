"""A training run in its own process, for the kill-and-resume tests (``python -m tests.pretrain_worker OUT``).

Trains a tiny model on synthetic instances with :func:`bert_pipeline.train.loop.train`, checkpoints under ``OUT/ck``,
and writes ``OUT/final.safetensors`` and ``OUT/history.json``. ``--pause-after STEP`` writes ``OUT/paused``
after that step's bookkeeping and then sleeps, so the test can SIGKILL it at a known point. ``--record-batches``
appends a digest of every collated batch to ``OUT/batches.txt`` (which batches a run trained on, in order).

Under ``torchrun --nproc_per_node N -m tests.pretrain_worker OUT`` (DDP, ``gloo`` on CPU) ``--batch-size`` is per
process, only the main process writes ``OUT/`` (and pauses; the others wait in the next collective), and each
process records its batches in ``OUT/batches-{rank}.txt``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--save-steps", type=int, default=4)
    parser.add_argument("--phases", default="1.0", help="comma-separated step fractions; seq 24, 48, ...")
    parser.add_argument("--pause-after", type=int, default=0)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4, help="per process")
    parser.add_argument("--record-batches", action="store_true",
                        help="append the sha256 of every collated batch's input_ids to OUT/batches.txt")
    args = parser.parse_args()
    torch.set_num_threads(1)

    from safetensors.torch import save_file

    from bert_pipeline.model.configs import new_pretraining_model
    from bert_pipeline.model.objectives import MaskedPositionPretrainer
    from bert_pipeline.train.checkpoint import CheckpointManager
    from bert_pipeline.train.loop import Phase, TrainConfig, phase_boundaries, train
    from bert_pipeline.train.runtime import make_runtime
    from tests.pretrain_fixtures import make_dataset, pad_collate, tiny_config

    fractions = [float(f) for f in args.phases.split(",")]
    phases = []
    for i, (start, end) in enumerate(phase_boundaries(args.steps, fractions)):
        seq = 24 * (i + 1)
        phases.append(Phase(f"seq{seq}", start, end, make_dataset(40, seed=10 + i, max_seq_length=seq),
                            make_dataset(12, seed=100 + i, max_seq_length=seq), batch_size=args.batch_size,
                            max_seq_length=seq))
    cfg = TrainConfig(max_steps=args.steps, learning_rate=3e-3, warmup_steps=2, gradient_accumulation_steps=args.accum,
                      save_steps=args.save_steps, eval_steps=4, logging_steps=1, seed=7, eval_batch_size=6)
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=7))
    runtime = make_runtime("fp32", cpu=True)
    manager = CheckpointManager(args.out / "ck", "fingerprint", keep=2)

    def on_log(step: int, row: dict) -> None:
        seen = args.out / "seen.jsonl"
        with open(seen, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        if args.pause_after and step == args.pause_after and "train_loss" in row:
            (args.out / "paused").write_text(str(step))
            while True:
                time.sleep(1)

    collate = pad_collate
    if args.record_batches:
        import hashlib

        record = args.out / ("batches.txt" if runtime.num_processes == 1 else
                             f"batches-{runtime.process_index}.txt")

        def collate(rows: list[dict]) -> dict[str, torch.Tensor]:
            batch = pad_collate(rows)
            with open(record, "a", encoding="utf-8") as fh:
                fh.write(hashlib.sha256(batch["input_ids"].numpy().tobytes()).hexdigest() + "\n")
            return batch

    result = train(model, phases, collate, cfg, runtime, manager, unigram_token_id=104, on_log=on_log)
    tokens_seen = result.tokens_seen(runtime)  # a collective call
    if not runtime.is_main_process:
        return
    state = {k: v.clone().contiguous() for k, v in model.model.state_dict().items()
             if k != "cls.predictions.decoder.weight"}
    save_file(state, str(args.out / "final.safetensors"))
    (args.out / "history.json").write_text(json.dumps({"history": result.history, "resumed_from": result.resumed_from,
                                                           "tokens_seen": tokens_seen,
                                                           "tokens_since_start": result.tokens,
                                                           "num_processes": runtime.num_processes}))


if __name__ == "__main__":
    main()
