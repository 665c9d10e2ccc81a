"""How much the pre-training's held-out MLM loss moves with its random draws alone: the ``pretrain`` stage's own
training (the same model, data, schedule and loop) run once per seed, nothing else changed.

    dvc repro create_pretraining_data                                  # the data the pretrain stage reads
    python bench/analysis/pretrain_seeds.py --project . --seeds 42 43 44        # pretrain.seed: init, batch order, masks
    python bench/analysis/pretrain_seeds.py --project . --mask-streams 0 1 2    # dynamic data: only the masks differ
    python bench/analysis/pretrain_seeds.py --project . --seeds 42 --set pretrain.learning_rate=2.0e-3 --steps 800

``--seeds`` sets ``pretrain.seed``: the model's initialisation, the batch order and, with ``masking: dynamic``, the
masks. ``--mask-streams`` (``create_pretraining_data.masking: dynamic`` only) keeps ``pretrain.seed`` and offsets
the seed each batch's mask is drawn with (:class:`bert_pipeline.train.loop.ReseedPerBatch`), so the runs share the
initialisation and the order of the instances and differ only in which tokens are masked: the spread among them is
what the mask draws alone decide. ``--set key=value`` overrides any params key as ``dvc exp run -S`` would (for
example another rate); ``--steps`` is ``pretrain.max_steps`` (the schedule decays to 0 there).

Prints one JSON line per run (``seed``, ``mask_stream``, the ``(step, loss, accuracy)`` evaluations, the final
train loss and seconds) and a summary line: the final held-out loss's lowest, mean and highest. No checkpoint is
read or written; the losses are deterministic on CPU, the seconds are not. ``--project`` is a checkout where
``create_pretraining_data`` has run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

NEEDS_DYNAMIC = ("pretrain_seeds: --mask-streams needs create_pretraining_data.masking: dynamic (static data holds "
                 "one mask per instance); rerun create_pretraining_data with it or use --seeds")


class OffsetMasks:
    """A dynamic-masking collator whose every reseed is shifted by ``offset``: another stream of masks for the
    same batches (the loop reseeds it per batch; an offset of 0 is the stage's own stream)."""

    def __init__(self, collator: Any, offset: int):
        self.collator, self.offset = collator, offset

    def reseed(self, seed: int) -> None:
        self.collator.reseed((seed + self.offset) % 2**32)

    def __call__(self, rows: list[dict]) -> Any:
        return self.collator(rows)


def run_one(params: Any, seed: int, mask_stream: int | None, threads: int) -> dict[str, Any]:
    """Pre-train once as the ``pretrain`` stage would with ``pretrain.seed = seed``; return the run's record."""
    import torch

    from bert_pipeline.train.runtime import make_runtime
    from stages.pretraining import load_pretraining, pretrain_model

    torch.set_num_threads(threads)
    p = params.pretrain.model_copy(update={"seed": seed})
    loaded = load_pretraining(p)
    if mask_stream is not None:
        if loaded.data.info.get("masking") != "dynamic":
            sys.exit(NEEDS_DYNAMIC)  # params say dynamic, data built otherwise
        for phase in loaded.data.phases:
            phase.collate_fn = OffsetMasks(phase.collate_fn, mask_stream)
    t0 = time.perf_counter()
    outcome = pretrain_model(p, loaded, None, make_runtime(p.precision))
    evals = [(row["step"], round(row["eval_mlm_loss"], 4), round(row["eval_mlm_accuracy"], 4))
             for row in outcome.result.history if "eval_mlm_loss" in row]
    return {"seed": seed, "mask_stream": mask_stream, "masking": loaded.data.info.get("masking"),
            "family": p.model.family, "steps": p.max_steps, "learning_rate": p.learning_rate, "evals": evals,
            "final_train_loss": outcome.quality["final_train_loss"],
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=Path("."))
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="pretrain.seed of each run")
    parser.add_argument("--mask-streams", type=int, nargs="+", default=None,
                        help="dynamic masking: mask-seed offsets, pretrain.seed kept")
    parser.add_argument("--steps", type=int, default=None, help="pretrain.max_steps (default: params.yaml's)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a params override")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (>= 1)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.threads < 1:
        sys.exit(f"pretrain_seeds: --threads expects a positive number of torch threads, got {args.threads}")
    if not (args.project / "params.yaml").is_file():
        sys.exit(f"pretrain_seeds: --project {args.project}: no params.yaml there; give a checkout of this "
                 "repository where `dvc repro create_pretraining_data` has run")
    os.chdir(args.project)
    sys.path.insert(0, str(Path.cwd()))
    import yaml

    from bert_pipeline.errors import PipelineError
    from stages.params.base import ParamsError
    from stages.params.root import load_params

    if any("=" not in item for item in args.set):
        sys.exit(f"pretrain_seeds: --set expects KEY=VALUE (for example pretrain.warmup_steps=200), got {args.set}")
    overrides = {key: yaml.safe_load(value) for key, value in (item.split("=", 1) for item in args.set)}
    if args.steps is not None:
        overrides["pretrain.max_steps"] = args.steps
    try:
        params = load_params(overrides=overrides)
    except ParamsError as exc:
        hint = (" (--steps below the warmup: add --set pretrain.warmup_steps=N with N <= the steps)"
                if args.steps is not None and "warmup_steps" in str(exc) else "")
        sys.exit(f"pretrain_seeds: {exc}{hint}")
    if args.mask_streams and params.create_pretraining_data.masking != "dynamic":
        sys.exit(NEEDS_DYNAMIC)
    runs = ([(seed, None) for seed in args.seeds] if args.seeds else [])
    runs += [(params.pretrain.seed, stream) for stream in (args.mask_streams or [])]
    if not runs:
        runs = [(params.pretrain.seed, None)]
    finals = []
    for seed, stream in runs:
        try:
            record = run_one(params, seed, stream, args.threads)
        except PipelineError as exc:  # missing data, a shape that cannot work: one line
            sys.exit(f"pretrain_seeds: {exc}")
        finals.append(record["evals"][-1][1])
        print(json.dumps(record), flush=True)
    print(json.dumps({"runs": len(finals), "final_loss_lowest": min(finals),
                      "final_loss_mean": round(sum(finals) / len(finals), 4), "final_loss_highest": max(finals)}))


if __name__ == "__main__":
    main()
