"""The training loop shared by pre-training and distillation: resumable, accelerate-driven.

One code path for one CPU, one GPU, or several GPUs under ``accelerate launch`` / ``torchrun`` (DDP, or FSDP
through an accelerate config): the stage's :class:`bert_pipeline.train.runtime.Runtime` owns devices, process
groups, autocast and loss scaling; this module owns the recipe (Devlin et al. 2019, Appendix A.2):

- AdamW (Loshchilov & Hutter 2019) with weight decay on matrices only (no decay on biases and LayerNorm), or
  LAMB (You et al. 2020) for large batches (:mod:`bert_pipeline.train.optim`);
- linear warmup then linear decay to 0 over ``max_steps`` (``transformers.get_linear_schedule_with_warmup``'s
  factor); heads may have a rate of their own and learn alone for the first ``head_only_steps`` (DAPT from a
  checkpoint that ships no MLM head: :func:`bert_pipeline.train.optim.make_scheduler`);
- gradient accumulation, clipping of the global gradient norm;
- a non-finite loss or gradient skips the update and is counted, the schedule moving on; more than
  ``max_bad_steps`` is an error; under fp16 the loss scaler decides instead (an overflow skips the step and halves
  the scale: ``scaler_skipped_steps``, never an error while the scale stays usable,
  :meth:`bert_pipeline.train.runtime.Runtime.step`) and the schedule waits for the next applied step, as HF
  Trainer's does, so a run with skips ends a little above the schedule's final rate;
- phases (BERT's seq 128 then 512): each phase has its own dataset and batch size, switched at a fixed step;
- exact resume: data order is a pure function of ``(seed, phase, epoch)``, so the data position is the step
  number; a checkpoint holds model, optimizer, scheduler, RNG states (every process's) and the logged history.

Several processes (DDP) train as one process with their batches stacked: process ``r`` of ``W`` takes rows
``[r*b, (r+1)*b)`` of each global micro-batch of ``W*b`` (:class:`ResumableBatchSampler`); a model whose forward
takes ``mlm_normalizer`` divides its summed MLM cross-entropy by the global micro-batch's count of predicted
positions over ``W`` (DDP averages the processes' gradients), so the loss and its gradient are the global token
mean, not a mean of per-process means (which differ when the processes predict different numbers of positions);
the pair (NSP/SOP) loss is a mean over ``b`` sequences on every process, whose average is the global mean. The
clipped norm is the global gradient's (after the all-reduce); ``tokens_seen`` sums every process's tokens; only
the main process writes checkpoints and calls ``on_log``. A model without ``mlm_normalizer`` (distillation's)
averages per-process means.

On a GPU the host waits for the device once per optimizer step (the step decision), not per micro-batch: token
counts and FLOPs are read from the batch before it moves (pinned, copied asynchronously), the predicted positions
are computed on the host (``masked_positions``, for a model whose forward takes them), the finite-loss check and
the DDP token normaliser stay on the device.

The model is called as ``model(**batch)`` and must return an object with ``loss``, ``mlm_loss``,
``mlm_correct``, ``mlm_count`` and optionally ``pair_loss``/``pair_correct``/``pair_count``
(:class:`bert_pipeline.model.objectives.MaskedPositionPretrainer`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.train.checkpoint import CheckpointManager, rng_state, set_rng_state
from bert_pipeline.train.optim import make_optimizer, make_scheduler
from bert_pipeline.train.runtime import Runtime, RuntimeSettingError

log = logging.getLogger(__name__)


class TrainingError(RuntimeError):
    """Training cannot continue (too many non-finite steps, empty data). ``str(err)`` is one line."""


# ---------------------------------------------------------------------------------------------- data
def batch_indices(n_examples: int, global_batch: int, seed: int, stream: int, batch_index: int) -> np.ndarray:
    """The example indices of global micro-batch ``batch_index`` of a data stream, ``(global_batch,)`` int64.

    Each epoch is a permutation seeded by ``(seed, stream, epoch)`` (NumPy PCG64); the last incomplete batch of
    an epoch is dropped. A pure function, so a resumed run continues with exactly the batches it had not seen.

    Raises:
        TrainingError: fewer examples than one global batch.
    """
    per_epoch = n_examples // global_batch
    if per_epoch == 0:
        raise TrainingError(
            f"the training set has {n_examples} instances, fewer than one global batch of {global_batch}"
        )
    epoch, within = divmod(batch_index, per_epoch)
    order = np.random.default_rng([seed, stream, epoch]).permutation(n_examples)
    return order[within * global_batch : (within + 1) * global_batch]


class ResumableBatchSampler(torch.utils.data.Sampler):
    """Yields this process's share of global micro-batches ``start, start+1, ...`` (see :func:`batch_indices`).

    Process ``rank`` of ``world`` gets rows ``[rank*batch_size, (rank+1)*batch_size)`` of each global batch.
    """

    def __init__(self, n_examples: int, batch_size: int, seed: int, stream: int, start: int,
                 rank: int = 0, world: int = 1):
        self.n, self.bs, self.seed, self.stream, self.start = n_examples, batch_size, seed, stream, start
        self.rank, self.world = rank, world
        batch_indices(n_examples, batch_size * world, seed, stream, 0)  # raise early on a too-small set

    def __iter__(self) -> Iterator[list[int]]:
        b = self.start
        while True:
            rows = batch_indices(self.n, self.bs * self.world, self.seed, self.stream, b)
            yield rows[self.rank * self.bs : (self.rank + 1) * self.bs].tolist()
            b += 1

    def __len__(self) -> int:  # infinite stream; len is what one epoch holds
        return self.n // (self.bs * self.world)


@dataclass
class Phase:
    """One training phase: steps ``[start_step, end_step)`` on ``train`` with per-process ``batch_size``.

    ``train``/``validation`` are map-style datasets of unpadded instances (e.g. ``datasets.Dataset``).
    """

    name: str
    start_step: int
    end_step: int
    train: Any
    validation: Any
    batch_size: int
    max_seq_length: int
    collate_fn: Callable[[list[dict]], dict[str, torch.Tensor]] | None = None


class ReseedPerBatch:
    """Makes a dynamic-masking collator (one with ``reseed(seed)``) resumable: before global micro-batch ``k`` of a
    stream it reseeds with a seed derived from ``(seed, stream, rank, k)``, so the masks do not depend on how many
    batches this process made before (a resumed run draws the same masks), also with DataLoader workers (batch
    ``k`` goes to worker ``k mod num_workers``).
    """

    def __init__(self, collate_fn: Any, seed: int, stream: int, start: int, rank: int = 0):
        self.collate_fn, self.seed, self.stream, self.start, self.rank = collate_fn, seed, stream, start, rank
        self.calls = 0

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        index = self.start + self.calls * workers + worker
        self.calls += 1
        seed = np.random.SeedSequence([self.seed, self.stream, self.rank, index]).generate_state(1)[0]
        self.collate_fn.reseed(int(seed))
        return self.collate_fn(rows)


def phase_boundaries(max_steps: int, fractions: Sequence[float]) -> list[tuple[int, int]]:
    """Split ``max_steps`` into consecutive ``[start, end)`` ranges by ``fractions`` (rounded, summing exactly).

    >>> phase_boundaries(100, [0.9, 0.1])
    [(0, 90), (90, 100)]
    """
    total = sum(fractions)
    bounds, start, acc = [], 0, 0.0
    for i, f in enumerate(fractions):
        acc += f
        end = max_steps if i == len(fractions) - 1 else min(max_steps, round(max_steps * acc / total))
        bounds.append((start, end))
        start = end
    return bounds


# --------------------------------------------------------------------------------------------- config
@dataclass
class TrainConfig:
    """Plain training hyper-parameters (the stage maps its params section onto this)."""

    max_steps: int
    learning_rate: float
    warmup_steps: int
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_epsilon: float = 1e-6
    gradient_accumulation_steps: int = 1
    max_grad_norm: float = 1.0
    save_steps: int = 0
    eval_steps: int = 0
    logging_steps: int = 10
    max_bad_steps: int = 10
    eval_batch_size: int = 64
    max_eval_batches: int | None = None
    seed: int = 0
    num_workers: int = 0
    stage: str = "pretrain"  # the params section named in errors and on the progress bar (pretrain, distill)
    head_learning_rate: float | None = None  # peak rate of train()'s head_parameters (None: learning_rate)
    head_only_steps: int = 0  # first steps in which only head_parameters learn (the rest at rate 0)


@dataclass
class TrainResult:
    """What :func:`train` returns: the history rows, the last evaluation and counters."""

    history: list[dict[str, float]] = field(default_factory=list)
    final_eval: dict[str, float] = field(default_factory=dict)
    first_eval: dict[str, float] = field(default_factory=dict)
    bad_steps: int = 0
    scaler_skipped_steps: int = 0  # fp16: steps the loss scaler skipped on an overflow (not errors)
    resumed_from: int = 0
    tokens: int = 0  # non-padding tokens this process consumed since the start or resume
    tokens_before_resume: int = 0  # tokens_seen (all processes) recorded in the checkpoint resumed from
    padded_tokens: int = 0
    predicted_tokens: int = 0
    sequences: int = 0
    seconds: float = 0.0
    flops: float = 0.0

    def tokens_seen(self, runtime: Runtime) -> int:
        """Non-padding training tokens (inputs, ``attention_mask == 1``) of every process from step 0, resumes
        included: deterministic for fixed data and params. A collective call when several processes run."""
        local = torch.tensor(self.tokens, dtype=torch.int64, device=runtime.device)
        return self.tokens_before_resume + int(runtime.reduce_sum(local).item())


# ------------------------------------------------------------------------------------------ evaluation
@torch.no_grad()
def evaluate(model: nn.Module, dataset: Any, collate_fn: Callable, batch_size: int, runtime: Runtime,
             unigram_token_id: int | None = None, max_batches: int | None = None) -> dict[str, float]:
    """MLM loss (nats, token-weighted), accuracy, perplexity, pair (NSP/SOP) accuracy, unigram baseline accuracy.

    Batches are taken in order (``batch_size`` per process, processes interleaved), so the result is
    deterministic. ``unigram_accuracy`` is the accuracy of always predicting ``unigram_token_id`` (the most
    frequent training target) on the same positions, the scale against which ``mlm_accuracy`` is read. The sums
    stay on the device until the end (one synchronisation).
    """
    model.eval()
    n = len(dataset)
    starts = list(range(0, n, batch_size))
    if max_batches is not None:
        starts = starts[:max_batches]
    sums = torch.zeros(6, dtype=torch.float64, device=runtime.device)
    world, rank = runtime.num_processes, runtime.process_index
    positions = forward_takes(runtime.unwrap(model), "masked_positions")
    # Every process runs the same number of forward passes (DDP/FSDP forwards are collective); a process
    # without a batch of its own repeats the first one with weight 0.
    for i in range(math.ceil(len(starts) / world)):
        k = i * world + rank
        start = starts[k] if k < len(starts) else starts[0]
        host = collate_fn([dataset[j] for j in range(start, min(n, start + batch_size))])
        if positions:
            host["masked_positions"] = masked_positions(host["labels"])
        batch = runtime.to_device(host)
        with runtime.autocast():
            out = model(**batch)
        if k >= len(starts):
            continue
        count = out.mlm_count.to(sums.device, torch.float64)
        row = [out.mlm_loss.detach().to(torch.float64) * count, out.mlm_correct.to(torch.float64), count]
        if out.pair_count is not None:
            row += [out.pair_correct.to(torch.float64), out.pair_count.to(sums.device, torch.float64)]
        else:
            row += [sums.new_zeros(()), sums.new_zeros(())]
        if unigram_token_id is not None:
            row.append((batch["labels"] == unigram_token_id).sum().to(torch.float64))
        else:
            row.append(sums.new_zeros(()))
        sums += torch.stack(row)
    sums = runtime.reduce_sum(sums)
    loss_sum, correct, count, pair_correct, pair_count, unigram = sums.tolist()
    model.train()
    if count == 0:
        raise TrainingError("the validation set has no predicted (masked) tokens")
    mlm_loss = loss_sum / count
    metrics = {
        "mlm_loss": mlm_loss,
        "mlm_accuracy": correct / count,
        "perplexity": math.exp(min(mlm_loss, 700.0)),
        "predicted_tokens": int(count),
    }
    if pair_count:
        metrics["pair_accuracy"] = pair_correct / pair_count
    if unigram_token_id is not None:
        metrics["unigram_accuracy"] = unigram / count
    return metrics


def masked_positions(labels: torch.Tensor) -> torch.Tensor:
    """The flat indices into ``labels.view(-1)`` of the predicted positions (``labels != -100``), ``(n_predicted,)``
    int64, in row-major order: computed on the host, so the model's gather needs no device-to-host copy."""
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)


def forward_takes(model: nn.Module, argument: str) -> bool:
    """Whether ``model``'s forward takes ``argument`` (``masked_positions``: :func:`masked_positions`;
    ``mlm_normalizer``: the divisor of its summed MLM cross-entropy)."""
    return argument in inspect.signature(model.forward).parameters


# ---------------------------------------------------------------------------------------------- loop
def _snapshot(model, optimizer, scheduler, runtime: Runtime, extra: dict[str, Any]) -> dict[str, Any]:
    """Full (unsharded, CPU) state dicts of model and optimizer, for DDP, FSDP or a plain module, the loss scaler's
    state under fp16, and the RNG state of this process (``rng``: its own device's only) and, with several
    processes, of each (``rng_per_process``, by rank: their dropout draws differ). A collective call when several
    processes run."""
    from accelerate.utils import gather_object
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    state = {"model": msd, "optimizer": osd, "scheduler": scheduler.state_dict(), "rng": rng_state(runtime.device),
             **extra}
    if runtime.scaler is not None:
        state["scaler"] = runtime.scaler.state_dict()
    if runtime.num_processes > 1:
        state["rng_per_process"] = gather_object([state["rng"]])
    return state


def _restore(model, optimizer, scheduler, state: dict[str, Any], runtime: Runtime) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=StateDictOptions(full_state_dict=True, strict=False))
    scheduler.load_state_dict(state["scheduler"])
    if runtime.scaler is not None and state.get("scaler"):
        runtime.scaler.load_state_dict(state["scaler"])
    rank = runtime.process_index
    set_rng_state(state["rng_per_process"][rank] if "rng_per_process" in state else state["rng"], runtime.device)


def _latest_checkpoint(checkpoints: CheckpointManager, runtime: Runtime) -> tuple[Any, dict[str, Any]] | None:
    """The checkpoint to resume from: the main process moves stale and incomplete ones aside first
    (:meth:`CheckpointManager.latest`), then the others read the same folder (it must be one that every machine
    sees)."""
    found = checkpoints.latest() if runtime.is_main_process else None
    if runtime.num_processes > 1:
        runtime.accelerator.wait_for_everyone()
        if not runtime.is_main_process:
            valid = checkpoints.valid()
            found = valid[-1] if valid else None
    return found


def train(
    model: nn.Module,
    phases: list[Phase],
    collate_fn: Callable[[list[dict]], dict[str, torch.Tensor]],
    config: TrainConfig,
    runtime: Runtime,
    checkpoints: CheckpointManager | None = None,
    unigram_token_id: int | None = None,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
    flops_per_step: Callable[[dict[str, torch.Tensor]], float] | None = None,
    head_parameters: Collection[nn.Parameter] = (),
) -> TrainResult:
    """Train ``model`` for ``config.max_steps`` optimizer steps over ``phases``, resuming from ``checkpoints``.

    Args:
        model: returns a :class:`bert_pipeline.model.objectives.PretrainOutput`-like object from ``model(**batch)``.
        phases: consecutive phases covering ``[0, max_steps)``.
        collate_fn: list of instances -> batch of ``(batch, seq_len)`` tensors (and ``(batch,)`` pair labels); a
            phase's own ``collate_fn`` takes precedence. A collator with ``reseed`` (dynamic masking) is reseeded
            per batch (:class:`ReseedPerBatch`).
        runtime: the stage's :class:`~bert_pipeline.train.runtime.Runtime` (device, DDP/FSDP, precision, scaler).
        checkpoints: where to save every ``save_steps`` (and at ``max_steps``) and resume from; None disables both.
        unigram_token_id: most frequent training target, for the baseline accuracy in evaluations.
        on_log: called on the main process with ``(step, row)`` for every history row (e.g. MLflow).
        flops_per_step: model FLOPs of one micro-batch (given the host copy of the batch), for the MFU.
        head_parameters: trained at ``config.head_learning_rate`` and alone for ``config.head_only_steps``
            (:func:`bert_pipeline.train.optim.parameter_groups`); the history's ``learning_rate`` is the encoder's.

    Returns:
        :class:`TrainResult`; ``history`` has one row per ``logging_steps`` (``train_loss``, ``learning_rate``)
        and per evaluation (``eval_*``), identical whether or not the run was interrupted and resumed.

    Raises:
        TrainingError: more than ``max_bad_steps`` non-finite steps (fp32/bf16), an fp16 loss scale that collapsed,
            or a phase with too little data.
    """
    cfg = config
    if not phases or phases[0].start_step != 0 or phases[-1].end_step != cfg.max_steps:
        raise TrainingError(f"phases must cover steps 0..{cfg.max_steps}")
    accum = cfg.gradient_accumulation_steps
    optimizer = make_optimizer(model, cfg.optimizer, cfg.learning_rate, cfg.weight_decay, cfg.adam_betas,
                               cfg.adam_epsilon, head=head_parameters, head_lr=cfg.head_learning_rate)
    # The schedule is not handed to accelerate: its prepared scheduler steps num_processes times per optimizer step
    # (it assumes each process's dataloader holds 1/num_processes of the steps), which would decay the rate that
    # many times too fast; ours is stepped once per optimizer step, as accelerate's does on one process.
    raw_scheduler = make_scheduler(optimizer, cfg.warmup_steps, cfg.max_steps, cfg.head_only_steps)
    model, optimizer = runtime.prepare(model, optimizer)  # together: FSDP2 shards the optimizer's parameters
    runtime.new_scaler()  # this run's own loss scale (a resume loads the checkpoint's below)
    raw_optimizer = getattr(optimizer, "optimizer", optimizer)

    result = TrainResult()
    step = 0
    world = runtime.num_processes
    if checkpoints is not None:
        found = _latest_checkpoint(checkpoints, runtime)
        if found is not None:
            path, meta = found
            if int(meta.get("num_processes", 1)) != world:
                raise TrainingError(
                    f"{cfg.stage}.compute.num_processes: checkpoint {path} was saved by {meta.get('num_processes', 1)} "
                    f"processes, this run has {world} (another global batch: another data position); move it aside"
                )
            state = CheckpointManager.load(path)
            _restore(model, raw_optimizer, raw_scheduler, state, runtime)
            step = int(meta["step"])
            result.history = list(state["history"])
            result.bad_steps = int(state["bad_steps"])
            result.scaler_skipped_steps = int(state.get("scaler_skipped_steps", 0))
            result.first_eval = dict(state.get("first_eval") or {})
            result.final_eval = dict(state.get("final_eval") or {})
            result.tokens_before_resume = int(state.get("tokens_seen", 0))
            result.resumed_from = step
            log.info("resumed from %s at step %d", path, step)

    model.train()
    inner = runtime.unwrap(model)
    # several processes: the MLM mean over the global micro-batch's predicted positions (module docstring)
    global_mlm_mean = world > 1 and forward_takes(inner, "mlm_normalizer")
    positions = forward_takes(inner, "masked_positions")
    pending: list[torch.Tensor] = []  # per-step train losses since the last history row
    t0 = time.perf_counter()
    progress = tqdm(total=cfg.max_steps, initial=step, desc=cfg.stage, disable=not runtime.is_main_process,
                    mininterval=5.0)
    for phase_index, phase in enumerate(phases):
        if step >= phase.end_step:
            continue
        start_micro = (step - phase.start_step) * accum
        sampler = ResumableBatchSampler(len(phase.train), phase.batch_size, cfg.seed, phase_index, start_micro,
                                        runtime.process_index, world)
        collate = phase.collate_fn or collate_fn
        train_collate = (ReseedPerBatch(collate, cfg.seed, phase_index, start_micro, runtime.process_index)
                         if hasattr(collate, "reseed") else collate)
        loader = torch.utils.data.DataLoader(phase.train, batch_sampler=sampler, collate_fn=train_collate,
                                             num_workers=cfg.num_workers, persistent_workers=False,
                                             generator=torch.Generator().manual_seed(cfg.seed),  # not the global RNG
                                             **runtime.loader_options())
        batches = iter(loader)
        log.info("phase %s: steps %d-%d, seq %d, %d instances", phase.name, step, phase.end_step,
                 phase.max_seq_length, len(phase.train))
        while step < phase.end_step:
            step_loss = torch.zeros((), device=runtime.device)
            finite = torch.ones((), dtype=torch.bool, device=runtime.device)
            for micro in range(accum):
                host = next(batches)
                # counted on the host copy, before the batch moves: no device-to-host synchronisation
                result.tokens += int(host["attention_mask"].sum())
                result.padded_tokens += host["input_ids"].numel()
                result.sequences += host["input_ids"].shape[0]
                labels = host["labels"]
                predicted = masked_positions(labels) if positions else None
                npred = int(predicted.numel()) if predicted is not None else int((labels != IGNORE_INDEX).sum())
                result.predicted_tokens += npred
                if flops_per_step is not None:
                    result.flops += flops_per_step(host)
                if predicted is not None:
                    host = {**host, "masked_positions": predicted}
                batch = runtime.to_device(host)
                loss_kwargs = {}
                if global_mlm_mean:
                    total = runtime.reduce_sum(runtime.tensor([npred]))
                    loss_kwargs["mlm_normalizer"] = total[0] / world
                sync = contextlib.nullcontext() if micro == accum - 1 else runtime.no_sync(model)
                with sync:
                    with runtime.train_forward(model):
                        out = model(**batch, **loss_kwargs)
                    loss = out.loss / accum
                    finite &= torch.isfinite(loss.detach())
                    runtime.backward(loss)
                step_loss += loss.detach()
            try:
                outcome = runtime.step(model, optimizer, cfg.max_grad_norm, finite)
            except RuntimeSettingError as exc:
                raise TrainingError(f"{cfg.stage}.{exc}") from None
            if outcome.applied:
                raw_scheduler.step()
            elif runtime.scaler is not None:  # an fp16 overflow: the scaler skipped the step and lowered the scale
                result.scaler_skipped_steps += 1
                log.info("step %d: fp16 overflow, update skipped, loss scale now %g (%d so far)", step + 1,
                         runtime.scaler.get_scale(), result.scaler_skipped_steps)
            else:  # the schedule follows the step number (a skipped step spends its rate)
                raw_scheduler.step()
                result.bad_steps += 1
                log.warning("step %d: non-finite loss or gradient, update skipped (%d so far)", step + 1,
                            result.bad_steps)
                if result.bad_steps > cfg.max_bad_steps:
                    raise TrainingError(
                        f"{cfg.stage}.max_bad_steps: {result.bad_steps} steps had a non-finite loss or gradient "
                        f"(limit {cfg.max_bad_steps}); lower the learning rate or use precision fp32"
                    )
            optimizer.zero_grad(set_to_none=True)
            step += 1
            progress.update(1)
            pending.append(step_loss)
            boundary = step % cfg.logging_steps == 0 or step == cfg.max_steps
            do_eval = (cfg.eval_steps and step % cfg.eval_steps == 0) or step == cfg.max_steps
            do_save = checkpoints is not None and cfg.save_steps and (step % cfg.save_steps == 0 or step == cfg.max_steps)
            if boundary or do_eval or do_save:
                if pending:
                    losses = torch.stack(pending)
                    if world > 1:
                        losses = runtime.accelerator.reduce(losses, reduction="mean")
                    row = {"step": step, "train_loss": float(losses.float().mean()),
                           "learning_rate": float(raw_scheduler.get_last_lr()[0]), "phase": phase_index}
                    pending = []
                    result.history.append(row)
                    if on_log and runtime.is_main_process:
                        on_log(step, row)
            if do_eval:
                metrics = evaluate(model, phase.validation, collate, cfg.eval_batch_size, runtime,
                                   unigram_token_id, cfg.max_eval_batches)
                row = {"step": step, **{f"eval_{k}": v for k, v in metrics.items()}}
                result.history.append(row)
                if not result.first_eval:
                    result.first_eval = dict(row)
                result.final_eval = dict(row)
                if on_log and runtime.is_main_process:
                    on_log(step, row)
                log.info("step %d: eval mlm_loss %.4f mlm_accuracy %.4f", step, metrics["mlm_loss"],
                         metrics["mlm_accuracy"])
            if do_save:
                state = _snapshot(model, raw_optimizer, raw_scheduler, runtime, {
                    "history": result.history, "bad_steps": result.bad_steps,
                    "scaler_skipped_steps": result.scaler_skipped_steps,
                    "first_eval": result.first_eval, "final_eval": result.final_eval,
                    "tokens_seen": result.tokens_seen(runtime),
                })
                if runtime.is_main_process:
                    meta = {"phase": phase.name, "phase_index": phase_index,
                            "micro_batches_in_phase": (step - phase.start_step) * accum}
                    if world > 1:
                        meta["num_processes"] = world
                    checkpoints.save(step, state, meta)
                runtime.accelerator.wait_for_everyone()
        del batches, loader
    progress.close()
    result.seconds = time.perf_counter() - t0
    return result
