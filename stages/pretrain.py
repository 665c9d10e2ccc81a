"""Stage ``pretrain``: BERT pre-training (MLM + NSP/SOP, or MLM only) on ``data/pretraining/``.

    python -m stages.pretrain          (dvc repro pretrain; under accelerate launch when compute.num_processes > 1)

Reads ``params.pretrain`` (start point, size, optimizer, schedule, phases) and the data built by
``create_pretraining_data`` (its ``info.json`` says the objective, tokenizer and ``max_seq_length``), trains with
:func:`bert_pipeline.train.loop.train`, resuming from ``checkpoints/pretrain/`` when a checkpoint of the same params and
inputs exists, and writes:

- ``models/pretrained/``: ``save_pretrained`` (safetensors) ``BertForPreTraining`` (``BertForMaskedLM`` for
  objective ``none``) with the tokenizer beside it;
- ``metrics/pretrain.json``: tokens seen, held-out MLM loss/accuracy, perplexity, pair accuracy, unigram baseline, first vs last
  evaluation (quality only: byte-identical across reruns on CPU);
- ``metrics/pretrain-timing.json``: seconds, tokens/s, model FLOPs utilisation against the measured matmul peak;
- ``plots/pretrain.csv``: step, train loss, learning rate, eval MLM loss/accuracy, pair accuracy;
- an MLflow run (:mod:`bert_pipeline.mlops.tracking`) with a pointer to the model, not a copy.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from stages.params import load_params

log = logging.getLogger(__name__)

DATA_DIR = Path("data/pretraining")
MODEL_DIR = Path("models/pretrained")
CHECKPOINT_DIR = Path("checkpoints/pretrain")
METRICS = Path("metrics/pretrain.json")
TIMING = Path("metrics/pretrain-timing.json")
PLOT = Path("plots/pretrain.csv")
PLOT_COLUMNS = ["step", "train_loss", "learning_rate", "eval_mlm_loss", "eval_mlm_accuracy", "eval_pair_accuracy",
                "eval_unigram_accuracy"]
# Keys that change how often we save, not what is trained: not part of the checkpoint fingerprint.
NOT_FINGERPRINTED = ("save_steps", "save_total_limit", "compute")


def phase_data_dirs(data_dir: Path, info: dict[str, Any], phases: list[Any]) -> list[tuple[int, Path]]:
    """``(max_seq_length, folder)`` of each phase's data: ``data_dir/seq{L}/`` if present, else ``data_dir`` when
    its ``info.json`` was built for ``L``. No phases: one phase on ``data_dir`` at its own ``max_seq_length``.

    Raises:
        PipelineError: a phase whose sequence length has no dataset.
    """
    if not phases:
        return [(int(info["max_seq_length"]), data_dir)]
    out = []
    for i, phase in enumerate(phases):
        length = phase.max_seq_length
        if (data_dir / f"seq{length}" / "info.json").exists():
            out.append((length, data_dir / f"seq{length}"))
        elif int(info["max_seq_length"]) == length:
            out.append((length, data_dir))
        else:
            raise PipelineError(
                f"pretrain.phases[{i}].max_seq_length: no data for {length} tokens (expected {data_dir}/seq{length}/ "
                f"or {data_dir}/info.json with max_seq_length {length}, got {info['max_seq_length']})"
            )
    return out


def unigram_token_id(train: Any, special_ids: set[int]) -> int:
    """The most frequent MLM target of the training set (``masked_lm_ids``; non-special ``input_ids`` when masking
    is dynamic): the "always predict the most frequent token" baseline."""
    import numpy as np
    import pyarrow.compute as pc

    column = "masked_lm_ids" if "masked_lm_ids" in train.column_names else "input_ids"
    values = pc.list_flatten(train.data.table.column(column)).to_numpy(zero_copy_only=False).astype(np.int64)
    counts = np.bincount(values)
    for sid in special_ids:
        if sid < counts.size:
            counts[sid] = 0
    return int(counts.argmax())


def plot_rows(history: list[dict[str, Any]]) -> str:
    """CSV text of ``history`` merged by step (train rows and evaluation rows)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in history:
        by_step.setdefault(int(row["step"]), {}).update(row)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=PLOT_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for step in sorted(by_step):
        row = {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in by_step[step].items()}
        writer.writerow({k: row.get(k, "") for k in PLOT_COLUMNS})
    return buf.getvalue()


def _relaunch_distributed(num_processes: int, config_file: str | None) -> None:
    """Run this stage under ``accelerate launch`` with ``num_processes`` processes (DDP/FSDP), then return."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(num_processes)]
    if config_file:
        cmd += ["--config_file", config_file]
    cmd += ["-m", "stages.pretrain"]
    log.info("launching: %s", " ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        raise PipelineError(f"pretrain.compute.num_processes: accelerate launch with {num_processes} processes failed")


def _round(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}


def main() -> None:
    params = load_params()
    p = params.pretrain
    if p.compute.num_processes > 1 and "LOCAL_RANK" not in os.environ:
        _relaunch_distributed(p.compute.num_processes, p.compute.accelerate_config)
        return

    import datasets
    import torch
    from transformers import AutoTokenizer

    from bert_pipeline.data.masking import PAIR_LABELS, collator_from_info, load_info, tokenizer_path_for
    from bert_pipeline.mlops import tracking
    from bert_pipeline.model import configs as modeling
    from bert_pipeline.train.checkpoint import CheckpointManager, fingerprint
    from bert_pipeline.train.loop import (
        Phase,
        TrainConfig,
        TrainingError,
        make_accelerator,
        measure_matmul_flops,
        phase_boundaries,
        train,
    )

    # ---- inputs: tokenizer (decided by pretrain.init), data, objective from the data
    tok_path = tokenizer_path_for(p.init)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tok_path))
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{tok_path}: cannot load the tokenizer that pretrain.init={p.init!r} decides ({exc})") from None
    try:
        info = load_info(DATA_DIR)
    except FileNotFoundError:
        raise PipelineError(f"{DATA_DIR}/info.json: not found (run create_pretraining_data first)") from None
    if str(info.get("pretrain_init", p.init)) != p.init:
        raise PipelineError(f"{DATA_DIR}/info.json: built for pretrain.init={info['pretrain_init']!r}, but pretrain.init "
                         f"is {p.init!r} (rerun create_pretraining_data)")
    vocab_size = len(tokenizer)
    if int(info["vocab_size"]) != vocab_size:
        raise PipelineError(f"{DATA_DIR}/info.json: vocab_size {info['vocab_size']} does not match the tokenizer "
                         f"{tok_path} ({vocab_size} tokens)")
    objective = info["objective"]
    pair_key = PAIR_LABELS[objective]
    dirs = phase_data_dirs(DATA_DIR, info, list(p.phases))
    fractions = [ph.fraction for ph in p.phases] or [1.0]
    bounds = phase_boundaries(p.max_steps, fractions)
    max_len = max(length for length, _ in dirs)

    # ---- model
    try:
        if p.init == "scratch":
            config = modeling.build_config(p.model.size, vocab_size, dict(p.model.config), max_seq_length=max_len,
                                           pad_token_id=tokenizer.pad_token_id)
            model = modeling.new_pretraining_model(config, with_pair_head=pair_key is not None, seed=p.seed)
        else:
            if p.model.config:
                log.warning("pretrain.model.config is ignored when pretrain.init is a checkpoint (%s)", p.init)
            model = modeling.load_pretraining_model(p.init, with_pair_head=pair_key is not None, seed=p.seed)
            modeling.check_vocab(model.config, vocab_size, f"pretrain.init {p.init}")
            modeling.check_max_seq_length(model.config, max_len, "create_pretraining_data")
    except modeling.ModelConfigError as exc:
        raise PipelineError(str(exc)) from None

    phases, collators = [], []
    specials = {int(v) for v in info.get("special_ids", {}).values()} | set(tokenizer.all_special_ids)
    for i, ((length, folder), (start, end)) in enumerate(zip(dirs, bounds, strict=True)):
        splits = {}
        for split in ("train", "validation"):
            try:
                splits[split] = datasets.load_from_disk(str(folder / split))
            except (FileNotFoundError, ValueError) as exc:
                raise PipelineError(f"{folder / split}: cannot open the {split} instances ({exc})") from None
            except IndexError:  # datasets cannot open a dataset saved with zero shards
                raise PipelineError(f"{folder / split}: empty {split} set (no instances)") from None
            if len(splits[split]) == 0:
                raise PipelineError(f"{folder / split}: empty {split} set (no instances)")
        batch_size = (p.phases[i].batch_size if p.phases and p.phases[i].batch_size else p.batch_size)
        if len(splits["train"]) < batch_size * p.compute.num_processes:
            raise PipelineError(f"{folder / 'train'}: {len(splits['train'])} instances, fewer than one global batch of "
                             f"{batch_size * p.compute.num_processes} (pretrain.batch_size x compute.num_processes)")
        collators.append(collator_from_info(folder, seed=p.seed, tokenizer=tokenizer))
        phases.append(Phase(f"seq{length}", start, end, splits["train"], splits["validation"], batch_size, length,
                            collators[-1]))
    unigram = unigram_token_id(phases[0].train, specials)

    section = params.model_dump(mode="json")["pretrain"]
    fp = fingerprint({"pretrain": {k: v for k, v in section.items() if k not in NOT_FINGERPRINTED},
                      "objective": objective}, [tok_path, *(folder for _, folder in dirs)])
    cfg = TrainConfig(
        max_steps=p.max_steps, learning_rate=p.learning_rate, warmup_steps=p.warmup_steps, optimizer=p.optimizer,
        weight_decay=p.weight_decay, adam_epsilon=p.adam_epsilon, gradient_accumulation_steps=p.gradient_accumulation_steps,
        max_grad_norm=p.max_grad_norm, save_steps=p.save_steps, eval_steps=p.eval_steps, logging_steps=p.logging_steps,
        max_bad_steps=p.max_bad_steps, eval_batch_size=p.eval_batch_size, max_eval_batches=p.max_eval_batches,
        seed=p.seed, num_workers=p.compute.num_workers,
    )
    accelerator = make_accelerator(p.precision)
    precision = accelerator.mixed_precision
    peak = measure_matmul_flops(accelerator.device, torch.bfloat16 if precision == "bf16" else
                                torch.float16 if precision == "fp16" else torch.float32)
    wrapper = modeling.MaskedPositionPretrainer(model)
    manager = CheckpointManager(CHECKPOINT_DIR, fp, keep=p.save_total_limit)

    def flops(batch: dict[str, torch.Tensor]) -> float:
        n, length = batch["input_ids"].shape
        return modeling.training_flops_per_step(model.config, n, length, int((batch["labels"] != -100).sum()),
                                                full_decoder=False)

    tracked = {"pretrain": section, "create_pretraining_data.objective": objective}
    main_process = accelerator.is_main_process
    run_ctx = tracking.stage_run("pretrain", tracked) if main_process else contextlib.nullcontext()
    with run_ctx as run:
        def on_log(step: int, row: dict[str, Any]) -> None:
            if run is not None:
                run.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step)

        try:
            result = train(wrapper, phases, collators[0], cfg, accelerator, manager, unigram_token_id=unigram,
                           on_log=on_log, flops_per_step=flops)
        except TrainingError as exc:
            raise PipelineError(str(exc)) from None
        tokens_seen = result.tokens_seen(accelerator)
        if not main_process:
            return
        final, first = result.final_eval, result.first_eval
        quality = {
            "objective": objective,
            "init": p.init,
            "size": p.model.size if p.init == "scratch" else "checkpoint",
            "parameters": modeling.count_parameters(model),
            "steps": p.max_steps,
            "tokens_seen": tokens_seen,
            "eval": _round({k.removeprefix("eval_"): v for k, v in final.items() if k != "step"}),
            "first_eval": _round({k.removeprefix("eval_"): v for k, v in first.items() if k != "step"}),
            "mlm_accuracy_over_unigram": round(final["eval_mlm_accuracy"] / max(final["eval_unigram_accuracy"], 1e-12), 4),
            "eval_loss_decreased": bool(final["eval_mlm_loss"] < first["eval_mlm_loss"]) if first.get("step") != final.get("step") else None,
            "final_train_loss": round([r for r in result.history if "train_loss" in r][-1]["train_loss"], 6),
            "bad_steps": result.bad_steps,
            "unigram_token_id": unigram,
        }
        with atomic_dir(MODEL_DIR) as out:
            unwrapped = accelerator.unwrap_model(wrapper)
            modeling.save_model(unwrapped.model, out, tokenizer)
        write_json(METRICS, quality)
        atomic_write_text(PLOT, plot_rows(result.history))
        seconds = max(result.seconds, 1e-9)
        world = accelerator.num_processes
        timing = {
            "seconds": round(result.seconds, 3),
            "resumed_from_step": result.resumed_from,
            "tokens_per_second": round(result.tokens * world / seconds, 1),
            "padded_tokens_per_second": round(result.padded_tokens * world / seconds, 1),
            "sequences_per_second": round(result.sequences * world / seconds, 2),
            "model_tflops_per_second": round(result.flops * world / seconds / 1e12, 4),
            "matmul_peak_tflops": round(peak * world / 1e12, 4),
            "mfu": round(result.flops / seconds / peak, 4),
            "precision": precision,
            "device": str(accelerator.device),
            "num_processes": world,
            "torch_threads": torch.get_num_threads(),
        }
        write_json(TIMING, timing)
        if run is not None:
            run.log_metrics({f"final_{k}": v for k, v in quality["eval"].items()}, step=p.max_steps)
            run.log_metrics({k: v for k, v in timing.items() if isinstance(v, (int, float))}, step=p.max_steps)
            run.log_model_pointer(MODEL_DIR)
            for path in (METRICS, TIMING, PLOT):
                run.log_artifact(path)
        log.info("pretrain: eval MLM accuracy %.4f (unigram %.4f, %.2fx), loss %.4f -> %.4f, %.0f tokens/s, MFU %.3f",
                 final["eval_mlm_accuracy"], final["eval_unigram_accuracy"], quality["mlm_accuracy_over_unigram"],
                 first["eval_mlm_loss"], final["eval_mlm_loss"], timing["tokens_per_second"], timing["mfu"])


if __name__ == "__main__":
    run_main(main)
