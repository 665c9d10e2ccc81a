"""BERT pre-training end to end over the shared loop: open the instances of each phase, build or load the model,
train (:func:`bert_pipeline.train.loop.train`), and report quality and speed.

Devlin et al. 2019, §3.1 and Appendix A.2: MLM + NSP (or SOP, Lan et al. 2020; or MLM only, Liu et al. 2019),
phases of increasing sequence length; domain-adaptive pre-training continues an existing checkpoint (Gururangan
et al. 2020). Quality figures (held-out MLM loss/accuracy, pair accuracy, the unigram baseline, ``tokens_seen``)
are deterministic on CPU; speed figures (tokens/s, MFU against the measured matmul peak) are wall-clock.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.data.masking import IGNORE_INDEX, PAIR_LABELS, collator_from_info, load_info
from bert_pipeline.errors import PipelineError
from bert_pipeline.model import configs
from bert_pipeline.model.families import BASE_FAMILY
from bert_pipeline.model.objectives import MaskedPositionPretrainer
from bert_pipeline.train.checkpoint import CheckpointManager
from bert_pipeline.train.loop import Phase, TrainConfig, TrainingError, TrainResult, phase_boundaries, train
from bert_pipeline.train.optim import pretraining_head_parameters
from bert_pipeline.train.runtime import Runtime

log = logging.getLogger(__name__)

PLOT_COLUMNS = ["step", "train_loss", "learning_rate", "eval_mlm_loss", "eval_mlm_accuracy", "eval_pair_accuracy",
                "eval_unigram_accuracy"]


@dataclass(frozen=True)
class PhaseSpec:
    """One phase of BERT's two-phase schedule: ``max_seq_length`` of its instances, ``fraction`` of the steps, and a
    per-process ``batch_size`` (``None``: the run's)."""

    max_seq_length: int
    fraction: float
    batch_size: int | None = None


@dataclass
class PretrainingData:
    """The opened instances: the phases to train on, the data's ``info.json``, its objective and pair-label key,
    the folders read (for the checkpoint fingerprint), the unigram baseline's token id, the special token ids and
    the vocabulary size."""

    phases: list[Phase]
    info: dict[str, Any]
    objective: str
    pair_key: str | None
    folders: list[Path]
    unigram_token_id: int
    special_ids: frozenset[int] = frozenset()
    vocab_size: int = 0

    def unigram_baseline_loss(self, config: TrainConfig) -> float:
        """:func:`unigram_loss` on the instances the final evaluation reads (the last phase's validation split,
        ``config.max_eval_batches`` batches of ``config.eval_batch_size``), from the first phase's targets."""
        limit = (config.max_eval_batches * config.eval_batch_size if config.max_eval_batches is not None else None)
        return unigram_loss(self.phases[0].train, self.phases[-1].validation, set(self.special_ids),
                            self.vocab_size, limit)

    @property
    def max_seq_length(self) -> int:
        """The longest instance of any phase (tokens)."""
        return max(phase.max_seq_length for phase in self.phases)


def phase_data_dirs(data_dir: Path, info: dict[str, Any], lengths: Sequence[int]) -> list[tuple[int, Path]]:
    """``(max_seq_length, folder)`` of each phase's data: ``data_dir/seq{L}/`` if present, else ``data_dir`` when
    its ``info.json`` was built for ``L``. No phases: one phase on ``data_dir`` at its own ``max_seq_length``.

    Raises:
        PipelineError: a phase whose sequence length has no dataset.
    """
    if not lengths:
        return [(int(info["max_seq_length"]), data_dir)]
    out = []
    for i, length in enumerate(lengths):
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


def target_counts(dataset: Any, special_ids: set[int], limit: int | None = None) -> Any:
    """How often each token id is an MLM target in ``dataset`` (``masked_lm_ids``; non-special ``input_ids`` when
    masking is dynamic, each of which is a target with the same probability), over its first ``limit`` instances
    (None: all). Returns an int64 ``numpy`` array indexed by token id, specials set to 0."""
    import numpy as np
    import pyarrow.compute as pc

    column = "masked_lm_ids" if "masked_lm_ids" in dataset.column_names else "input_ids"
    table = dataset.data.table if limit is None else dataset.data.table.slice(0, limit)
    values = pc.list_flatten(table.column(column)).to_numpy(zero_copy_only=False).astype(np.int64)
    counts = np.bincount(values)
    for sid in special_ids:
        if sid < counts.size:
            counts[sid] = 0
    return counts


def unigram_token_id(train: Any, special_ids: set[int]) -> int:
    """The most frequent MLM target of the training set (:func:`target_counts`): the "always predict the most
    frequent token" baseline."""
    return int(target_counts(train, special_ids).argmax())


def unigram_loss(train: Any, validation: Any, special_ids: set[int], vocab_size: int,
                 limit: int | None = None) -> float:
    """Cross-entropy in nats per target of the held-out MLM targets (the first ``limit`` validation instances, the
    ones the evaluation reads) under the training targets' unigram distribution, add-0.5 smoothed over the
    ``vocab_size - len(special_ids)`` non-special tokens. It is the loss of a masked LM that ignores the context:
    ``eval.mlm_loss`` below it by 0 nats means the model predicts from token frequency alone.

    Raises:
        ValueError: the validation instances hold no target.
    """
    import numpy as np

    train_counts = target_counts(train, special_ids).astype(np.float64)
    held_out = target_counts(validation, special_ids, limit)
    size = max(vocab_size, train_counts.size, held_out.size)
    train_counts = np.pad(train_counts, (0, size - train_counts.size))
    held_out = np.pad(held_out, (0, size - held_out.size))
    smoothed = train_counts + 0.5
    specials = [sid for sid in special_ids if sid < size]
    smoothed[specials] = 0.0
    if held_out.sum() == 0:
        raise ValueError("the validation instances hold no MLM target")
    log_probs = np.log(np.where(smoothed > 0, smoothed, 1.0) / smoothed.sum())
    return float(-(held_out * log_probs).sum() / held_out.sum())


def history_csv(history: list[dict[str, Any]], columns: Sequence[str]) -> str:
    """CSV text of a training history (train rows and evaluation rows merged by step), one row per step, floats
    with 6 significant digits, empty cells where a step has no value."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in history:
        by_step.setdefault(int(row["step"]), {}).update(row)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for step in sorted(by_step):
        row = {k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in by_step[step].items()}
        writer.writerow({k: row.get(k, "") for k in columns})
    return buf.getvalue()


def open_instances(folder: Path, split: str) -> Any:
    """The ``split`` instances of a pre-training dataset folder, memory-mapped.

    Raises:
        PipelineError: missing, unreadable or empty (one line naming the folder).
    """
    import datasets

    try:
        dataset = datasets.load_from_disk(str(folder / split))
    except (FileNotFoundError, ValueError) as exc:
        raise PipelineError(f"{folder / split}: cannot open the {split} instances ({exc})") from None
    except IndexError:  # datasets cannot open a dataset saved with zero shards
        raise PipelineError(f"{folder / split}: empty {split} set (no instances)") from None
    if len(dataset) == 0:
        raise PipelineError(f"{folder / split}: empty {split} set (no instances)")
    return dataset


def open_pretraining_data(data_dir: Path, tokenizer: Any, *, init: str, phases: Sequence[PhaseSpec], max_steps: int,
                          batch_size: int, num_processes: int, seed: int) -> PretrainingData:
    """Open ``data_dir`` (built by :func:`bert_pipeline.data.shards.build_pretraining_data`) for pre-training.

    Args:
        tokenizer: the tokenizer the instances must have been built with (vocabulary size checked).
        init: the start point; must be the one the data was built for (it decided the tokenizer).
        phases: BERT's phases (``[]``: one phase at the data's own length); ``batch_size`` is per process.

    Raises:
        PipelineError: missing or empty data, data built for another start point or vocabulary, or a phase with
            fewer instances than one global batch.
    """
    try:
        info = load_info(data_dir)
    except FileNotFoundError:
        raise PipelineError(f"{data_dir}/info.json: not found (run create_pretraining_data first)") from None
    if str(info.get("pretrain_init", init)) != init:
        raise PipelineError(f"{data_dir}/info.json: built for pretrain.init={info['pretrain_init']!r}, but "
                            f"pretrain.init is {init!r} (rerun create_pretraining_data)")
    if int(info["vocab_size"]) != len(tokenizer):
        raise PipelineError(f"{data_dir}/info.json: vocab_size {info['vocab_size']} does not match the tokenizer "
                            f"{tokenizer.name_or_path} ({len(tokenizer)} tokens)")
    dirs = phase_data_dirs(data_dir, info, [phase.max_seq_length for phase in phases])
    bounds = phase_boundaries(max_steps, [phase.fraction for phase in phases] or [1.0])
    out = []
    for i, ((length, folder), (start, end)) in enumerate(zip(dirs, bounds, strict=True)):
        train_set, validation_set = open_instances(folder, "train"), open_instances(folder, "validation")
        phase_batch = phases[i].batch_size if phases and phases[i].batch_size else batch_size
        if len(train_set) < phase_batch * num_processes:
            raise PipelineError(f"{folder / 'train'}: {len(train_set)} instances, fewer than one global batch of "
                                f"{phase_batch * num_processes} (pretrain.batch_size x compute.num_processes)")
        collate = collator_from_info(folder, seed=seed, tokenizer=tokenizer)
        out.append(Phase(f"seq{length}", start, end, train_set, validation_set, phase_batch, length, collate))
    specials = {int(v) for v in info.get("special_ids", {}).values()} | set(tokenizer.all_special_ids)
    return PretrainingData(out, info, info["objective"], PAIR_LABELS[info["objective"]], [f for _, f in dirs],
                           unigram_token_id(out[0].train, specials), frozenset(specials), len(tokenizer))


def build_pretraining_model(init: str, *, size: str, config: dict[str, Any], tokenizer: Any, max_seq_length: int,
                            with_pair_head: bool, seed: int, family: str = BASE_FAMILY, embedding_size: int | None = None,
                            share_layers: bool = False) -> Any:
    """A new model of ``size`` (``init == "scratch"``, ``config`` fields overridden) or the checkpoint ``init``, as
    the family's pre-training class (:mod:`bert_pipeline.model.families`): ``BertForPreTraining`` /
    ``AlbertForPreTraining`` (``with_pair_head``) or ``BertForMaskedLM`` / ``RobertaForMaskedLM`` /
    ``AlbertForMaskedLM`` / ``ModernBertForMaskedLM`` / ``DebertaV2ForMaskedLM``. ``family``, ``embedding_size``,
    ``share_layers`` shape a new model (a checkpoint keeps its own).

    Raises:
        PipelineError: a shape that cannot work, or a checkpoint that does not fit the tokenizer or the data.
    """
    try:
        if init == "scratch":
            bert_config = configs.build_config(size, len(tokenizer), dict(config), max_seq_length=max_seq_length,
                                               pad_token_id=tokenizer.pad_token_id, family=family,
                                               cls_token_id=tokenizer.cls_token_id,
                                               sep_token_id=tokenizer.sep_token_id,
                                               embedding_size=embedding_size, share_layers=share_layers)
            return configs.new_pretraining_model(bert_config, with_pair_head=with_pair_head, seed=seed)
        if config:
            log.warning("pretrain.model.config is ignored when pretrain.init is a checkpoint (%s)", init)
        model = configs.load_pretraining_model(init, with_pair_head=with_pair_head, seed=seed)
        configs.check_vocab(model.config, len(tokenizer), f"pretrain.init {init}")
        configs.check_max_seq_length(model.config, max_seq_length, "create_pretraining_data")
        return model
    except configs.ModelConfigError as exc:
        raise PipelineError(str(exc)) from None


def _round(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}


@dataclass
class PretrainingOutcome:
    """What :func:`run_pretraining` returns: the trained model (unwrapped), the loop's result, and the quality
    (deterministic) and timing (wall-clock) records."""

    model: Any
    result: TrainResult
    quality: dict[str, Any]
    timing: dict[str, Any]


def run_pretraining(model: Any, data: PretrainingData, config: TrainConfig, runtime: Runtime,
                    checkpoints: CheckpointManager | None, *, describe: dict[str, Any],
                    on_log: Callable[[int, dict[str, Any]], None] | None = None) -> PretrainingOutcome:
    """Train ``model`` on ``data`` with the masked-position objective, resuming from ``checkpoints`` (``None``: no
    checkpoint is saved or resumed from, as in ``bench/device/gpu_quick.py``'s single timed run).

    With ``config.head_learning_rate`` or ``config.head_only_steps``, the MLM and pair heads
    (:func:`bert_pipeline.train.optim.pretraining_head_parameters`) get their own rate or learn alone first: a
    checkpoint that ships no MLM head (DAPT of a sentence-embedding BERT) starts with a random head whose early
    gradients would otherwise move the encoder.

    Args:
        describe: fields copied into the quality record first (``init``, ``size``).
        on_log: called on the main process with each history row.

    Returns:
        The outcome; ``quality`` and ``timing`` are complete on the main process only (``tokens_seen`` is a
        collective over every process).

    Raises:
        PipelineError: the loop failed (too many non-finite steps, too little data).
    """
    from bert_pipeline.evaluation.speed import OtherProcesses, measure_matmul_peak

    measured = measure_matmul_peak(runtime.device, runtime.compute_dtype)
    peak = measured.flops
    if measured.warning:
        log.warning("pretrain: %s", measured.warning)
    wrapper = MaskedPositionPretrainer(model)

    def flops(batch: dict[str, torch.Tensor]) -> float:
        n, length = batch["input_ids"].shape
        return configs.training_flops_per_step(model.config, n, length, int((batch["labels"] != IGNORE_INDEX).sum()),
                                               full_decoder=False)

    heads = (pretraining_head_parameters(model)
             if config.head_learning_rate is not None or config.head_only_steps else ())
    if heads:
        log.info("pretrain: %d head tensors (%d parameters, the tied decoder apart) at peak rate %g, alone for the "
                 "first %d steps; the encoder at %g after them", len(heads), sum(p.numel() for p in heads),
                 config.head_learning_rate or config.learning_rate, config.head_only_steps, config.learning_rate)
    cpu_start = time.process_time()
    try:
        with OtherProcesses() as others:
            result = train(wrapper, data.phases, data.phases[0].collate_fn, config, runtime, checkpoints,
                           unigram_token_id=data.unigram_token_id, on_log=on_log, flops_per_step=flops,
                           head_parameters=heads)
    except TrainingError as exc:
        raise PipelineError(str(exc)) from None
    cpu_seconds = time.process_time() - cpu_start
    tokens_seen = result.tokens_seen(runtime)
    final, first = result.final_eval, result.first_eval
    baseline_loss = data.unigram_baseline_loss(config)
    quality = {
        **describe,
        "objective": data.objective,
        "parameters": configs.count_parameters(model),
        "steps": config.max_steps,
        "tokens_seen": tokens_seen,
        "eval": _round({k.removeprefix("eval_"): v for k, v in final.items() if k != "step"}),
        "first_eval": _round({k.removeprefix("eval_"): v for k, v in first.items() if k != "step"}),
        "mlm_accuracy_over_unigram": round(final["eval_mlm_accuracy"] / max(final["eval_unigram_accuracy"], 1e-12), 4),
        "eval_loss_decreased": (bool(final["eval_mlm_loss"] < first["eval_mlm_loss"])
                                if first.get("step") != final.get("step") else None),
        "final_train_loss": round([r for r in result.history if "train_loss" in r][-1]["train_loss"], 6),
        "bad_steps": result.bad_steps,
        "scaler_skipped_steps": result.scaler_skipped_steps,
        "unigram_token_id": data.unigram_token_id,
        "unigram_loss": round(baseline_loss, 6),
        "mlm_loss_below_unigram": round(baseline_loss - final["eval_mlm_loss"], 6),
    }
    seconds = max(result.seconds, 1e-9)
    world = runtime.num_processes
    timing = {
        "seconds": round(result.seconds, 3),
        "resumed_from_step": result.resumed_from,
        "tokens_per_second": round(result.tokens * world / seconds, 1),
        "padded_tokens_per_second": round(result.padded_tokens * world / seconds, 1),
        "sequences_per_second": round(result.sequences * world / seconds, 2),
        "model_tflops_per_second": round(result.flops * world / seconds / 1e12, 4),
        "matmul_peak_tflops": round(peak * world / 1e12, 4),
        "mfu": round(result.flops / seconds / peak, 4),
        # the share of the machine's CPU time other processes used (0: the cores were ours alone): a busy machine
        # lowers the measured peak and the tokens/s alike
        "matmul_peak_other_cpu_share": measured.other_share,
        "peak_warning": measured.warning,
        "cpu_seconds": round(cpu_seconds, 1),
        "other_cpu_share": others.share if runtime.device.type == "cpu" else None,
        "precision": runtime.precision,
        "device": str(runtime.device),
        "num_processes": world,
        "torch_threads": torch.get_num_threads(),
    }
    log.info("pretrain: eval MLM accuracy %.4f (unigram %.4f, %.2fx), loss %.4f -> %.4f (unigram %.4f), %.0f "
             "tokens/s, MFU %.3f", final["eval_mlm_accuracy"], final["eval_unigram_accuracy"],
             quality["mlm_accuracy_over_unigram"], first["eval_mlm_loss"], final["eval_mlm_loss"], baseline_loss,
             timing["tokens_per_second"], timing["mfu"])
    return PretrainingOutcome(wrapper.model, result, quality, timing)
