"""Fine-tuning's model and training loop: the model for a task kind (:func:`build_model`) and :func:`fit`, the
loop with early stopping, on the stage's :class:`bert_pipeline.train.runtime.Runtime` (device, autocast, the fp16
loss scaler: the pre-training loop's runtime).

The loop is the standard BERT fine-tuning recipe (Devlin et al. 2019, §4 and A.3): AdamW with weight decay
(Loshchilov & Hutter 2019; no decay on biases and LayerNorm), linear warmup then linear decay, gradient
clipping, a few epochs; the validation metric is checked ``evals_per_epoch`` times an epoch and training stops
after ``patience`` checks without gain, restoring the best weights. Batches are grouped by length (shuffled
mega-batches sorted by length), which on CPU saves most of the padding. Everything random takes a seed. The
host waits for the device once per step (the step decision) and reads the training loss only at a validation
check.

The features it trains on: :mod:`bert_pipeline.train.finetune_data`; the runs over seeds and their
evaluation: :mod:`bert_pipeline.train.finetune`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoConfig, get_linear_schedule_with_warmup

from bert_pipeline import tasks
from bert_pipeline.model.configs import build_config, load_weights
from bert_pipeline.train.finetune_data import FinetuneError, length_grouped_batches
from bert_pipeline.train.optim import make_optimizer
from bert_pipeline.train.runtime import Runtime, RuntimeSettingError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainSettings:
    """Knobs of one fine-tuning run (units: learning rate per step, counts in examples/steps)."""

    learning_rate: float
    epochs: int
    batch_size: int
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    patience: int = 1
    evals_per_epoch: int = 1
    eval_batch_size: int = 64
    seed: int = 0


@dataclass
class FitResult:
    """What :func:`fit` did: the best validation metrics, when, and the loss/metric history."""

    best_validation: dict[str, float]
    best_step: int
    steps: int
    history: list[dict[str, float]] = field(default_factory=list)
    scaler_skipped_steps: int = 0  # fp16: updates the loss scaler skipped on an overflow


# ------------------------------------------------------------------------------------------------ models
def build_model(
    kind: str, path: str, init: str, size: str | None, pooling: str, label_names: Sequence[str] | None,
    vocab_size: int, seed: int,
):
    """The model for ``kind`` (:data:`bert_pipeline.tasks.KINDS`) from ``path``: the kind's head config
    (:meth:`~bert_pipeline.tasks.base.TaskKind.label_config`) and class (:meth:`~bert_pipeline.tasks.base.TaskKind.
    model_class`); regression: one output, ``problem_type="regression"`` (MSE loss), ``label_names`` None.

    ``init == "pretrained"``: its weights, new head. ``"random"``: its config (or the named ``size``, with
    ``vocab_size``) with every weight drawn afresh under ``seed`` (the no-pre-training baseline).
    """
    torch.manual_seed(seed)
    task_kind = tasks.get(kind)
    label_kw = task_kind.label_config(label_names)
    if init == "random" and size is not None:
        config = build_config(size, vocab_size, key="finetune.models")
        for key, value in label_kw.items():
            setattr(config, key, value)
    else:
        config = AutoConfig.from_pretrained(path, **label_kw)
    cls = task_kind.model_class(config, pooling)
    if init == "random":
        return cls.from_config(config) if hasattr(cls, "from_config") else cls(config)
    return load_weights(cls, path, config=config)[0]


# ------------------------------------------------------------------------------------------------ the loop
LossFn = Callable[[Any, dict[str, torch.Tensor], list[int]], torch.Tensor]
"""``(model, batch, feature_indices) -> scalar loss``: a training objective other than the model's own loss."""


def fit(
    model, features: list[dict[str, list[int]]], collate, s: TrainSettings, evaluate: Callable[[Any], dict[str, float]],
    main_metric: str, runtime: Runtime, on_eval: Callable[[int, dict[str, float]], None] | None = None,
    loss_fn: LossFn | None = None,
) -> FitResult:
    """Train ``model`` in place on ``features``; keep and restore the weights with the best validation metric.

    Early stopping counts a check without gain against ``s.patience`` only once the validation metric has risen
    above its first check: a run that has not started to learn (NER F1 still 0, sentiment still the majority class,
    as small models at low rates stay for a few epochs) is not stopped for it, but trains to ``s.epochs``.

    Args:
        features: per example ``input_ids`` etc. (lists of ints), plus the labels the model's loss needs.
        evaluate: ``model -> metrics`` on the validation set (``main_metric`` is maximised).
        runtime: device, autocast and (fp16) loss scaler; the model is moved to its device and stays there.
        on_eval: called with ``(step, {"train_loss", "validation_<metric>"...})`` after each evaluation.
        loss_fn: the objective, given the collated batch ``(batch, seq_len)`` tensors and the indices of its
            features in ``features`` (task-specific distillation reads cached teacher logits by them); default
            the model's own loss (``model(**batch).loss``).
    Returns:
        :class:`FitResult`.
    Raises:
        FinetuneError: a non-finite loss (fp32/bf16; under fp16 the loss scaler skips such a step), or an fp16 loss
            scale that collapsed.
    """
    torch.manual_seed(s.seed)
    rng = np.random.default_rng(s.seed)
    steps_per_epoch = math.ceil(len(features) / s.batch_size)
    total = steps_per_epoch * s.epochs
    opt = make_optimizer(model, "adamw", s.learning_rate, s.weight_decay, eps=1e-8, fused=True)
    sched = get_linear_schedule_with_warmup(opt, int(s.warmup_ratio * total), total)
    model, opt = runtime.prepare(model, opt)
    runtime.new_scaler()  # this run's own loss scale, whatever runs came before on this runtime
    skipped = 0
    checks = {max(1, round(steps_per_epoch * (k + 1) / s.evals_per_epoch)) for k in range(s.evals_per_epoch)}
    lengths = [len(f["input_ids"]) for f in features]
    best, best_state, best_step, bad, step = -math.inf, None, 0, 0, 0
    first, started = -math.inf, False
    best_metrics: dict[str, float] = {}
    history: list[dict[str, float]] = []
    losses: list[torch.Tensor] = []  # on the device, read at each check
    bar = tqdm(total=total, desc="fine-tune", leave=False, mininterval=5)
    stop = False
    for epoch in range(s.epochs):
        model.train()
        for i, b in enumerate(length_grouped_batches(lengths, s.batch_size, rng)):
            batch = runtime.to_device(collate([features[j] for j in b]))
            with runtime.train_forward(model):
                loss = model(**batch).loss if loss_fn is None else loss_fn(model, batch, b)
            runtime.backward(loss)
            try:
                outcome = runtime.step(model, opt, s.max_grad_norm, torch.isfinite(loss.detach()))
            except RuntimeSettingError as exc:
                raise FinetuneError(f"finetune.{exc}") from None
            if not outcome.applied and runtime.scaler is None:
                raise FinetuneError(f"non-finite training loss or gradient at step {step} (lower the learning rate)")
            if outcome.applied:
                sched.step()
            else:  # an fp16 overflow: the scaler skipped the update and lowered the scale
                skipped += 1
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
            step += 1
            bar.update(1)
            if i + 1 in checks:
                metrics = evaluate(model)
                model.train()
                entry = {"step": step, "epoch": epoch + 1,
                         "train_loss": float(np.mean([float(x) for x in torch.stack(losses).float().tolist()]))}
                entry.update({f"validation_{k}": v for k, v in metrics.items()})
                history.append(entry)
                losses = []
                if on_eval:
                    on_eval(step, entry)
                log.info("step %d epoch %d: loss %.4f, validation %s %.4f", step, epoch + 1, entry["train_loss"],
                         main_metric, metrics[main_metric])
                if not history[:-1]:
                    first = metrics[main_metric]
                elif metrics[main_metric] > first:
                    started = True
                if metrics[main_metric] > best:
                    best, best_step, bad = metrics[main_metric], step, 0
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    best_metrics = metrics
                elif started:
                    bad += 1
                    if bad >= s.patience:
                        stop = True
                        break
        if stop:
            break
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    return FitResult(best_validation=best_metrics, best_step=best_step, steps=step, history=history,
                     scaler_skipped_steps=skipped)
