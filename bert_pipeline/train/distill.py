"""Distillation end to end over the shared loop: a DistilBERT-style student (Sanh et al. 2019, §3) trained with the
triple loss of :mod:`bert_pipeline.model.distillation`, compared with its teacher on held-out MLM accuracy and
timed against it on CPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bert_pipeline.model.distillation import DistillationModel, build_student

log = logging.getLogger(__name__)

HISTORY_COLUMNS = ["step", "train_loss", "learning_rate", "eval_mlm_loss", "eval_mlm_accuracy"]
"""Columns of the distillation curve (a DVC plot)."""


def _eval_fields(metrics: dict[str, float]) -> dict[str, float]:
    keep = ("mlm_accuracy", "mlm_loss", "perplexity", "pair_accuracy")
    return {k: round(metrics[k], 6) for k in keep if k in metrics}


@dataclass
class DistillationOutcome:
    """What :func:`run_distillation` returns: the student (fp32, eval mode, on the runtime's device), the loop's
    history, the quality
    record (deterministic on CPU) and the timing record (wall-clock, with the device it timed)."""

    student: nn.Module
    history: list[dict[str, float]]
    metrics: dict[str, Any]
    timing: dict[str, Any]


def run_distillation(teacher: nn.Module, layers: int, train_set: Any, validation_set: Any, collate: Any, *,
                     config: Any, runtime: Any, checkpoints: Any, batch_size: int, max_seq_length: int,
                     loss: dict[str, Any], final_eval_batches: int | None, throughput_runs: int,
                     throughput_warmup: int, on_log: Any = None) -> DistillationOutcome:
    """Build the student (:func:`build_student`), train it with DistilBERT's triple loss through the shared loop
    (:func:`bert_pipeline.train.loop.train`, resumable from ``checkpoints``), compare teacher and student on
    held-out MLM accuracy, and time both encoders on the runtime's device.

    Args:
        config: a :class:`bert_pipeline.train.loop.TrainConfig`.
        runtime: the stage's :class:`bert_pipeline.train.runtime.Runtime`.
        loss: ``temperature``, ``alpha_ce``, ``alpha_mlm``, ``alpha_cos``, ``cos_positions`` (:class:`DistillationModel`).
        final_eval_batches: held-out batches of the final comparison (``None``: all).
        throughput_runs, throughput_warmup: timed and untimed rounds of the speed measurement (batch 32, seq 128).

    Raises:
        bert_pipeline.train.loop.TrainingError: too many non-finite steps.
    """
    from bert_pipeline.evaluation.speed import measure_throughput
    from bert_pipeline.model.configs import count_parameters
    from bert_pipeline.model.objectives import MaskedPositionPretrainer
    from bert_pipeline.train.loop import Phase, evaluate, train

    torch.manual_seed(config.seed)
    student, mapping = build_student(teacher, layers)
    model = DistillationModel(student, teacher, **loss)
    phases = [Phase("distill", 0, config.max_steps, train_set, validation_set, batch_size, max_seq_length)]
    result = train(model, phases, collate, config, runtime, checkpoints, on_log=on_log)
    # model.student is the trained module (prepare wraps model, not its children); the teacher moved with it
    student = model.student
    held_out = {}
    for name, net in (("teacher", teacher), ("student", student)):
        held_out[name] = evaluate(MaskedPositionPretrainer(net), validation_set, collate, config.eval_batch_size,
                                  runtime, max_batches=final_eval_batches)
        log.info("%s: held-out MLM accuracy %.4f", name, held_out[name]["mlm_accuracy"])
    params_t, params_s = count_parameters(teacher), count_parameters(student)
    acc_t, acc_s = held_out["teacher"]["mlm_accuracy"], held_out["student"]["mlm_accuracy"]
    metrics = {
        "teacher": {"layers": teacher.config.num_hidden_layers, "parameters": params_t,
                    **_eval_fields(held_out["teacher"])},
        "student": {"layers": layers, "parameters": params_s, **_eval_fields(held_out["student"])},
        "layer_map": mapping,
        "parameter_ratio": round(params_s / params_t, 6),
        "parameter_reduction": round(1.0 - params_s / params_t, 6),
        "mlm_accuracy_share": round(acc_s / acc_t, 6) if acc_t else 0.0,
        "eval_predicted_tokens": held_out["student"]["predicted_tokens"],
        "steps": config.max_steps,
        "tokens_seen": result.tokens_seen(runtime),
        "bad_steps": result.bad_steps,
        "scaler_skipped_steps": result.scaler_skipped_steps,
    }
    torch.manual_seed(config.seed)
    speed = measure_throughput({"teacher": teacher.base_model, "student": student.base_model}, runtime,
                               batch_size=32, seq_len=128, warmup=throughput_warmup, runs=throughput_runs,
                               seed=config.seed)
    student = student.float().eval()
    timing = {
        "teacher": speed["teacher"],
        "student": speed["student"],
        "speedup": speed["student"]["sequences_per_second"] / speed["teacher"]["sequences_per_second"],
        "torch_threads": torch.get_num_threads(),
        "train_seconds": result.seconds,
        "resumed_from_step": result.resumed_from,
        "precision": runtime.precision,
        "device": str(runtime.device),
    }
    log.info("student %d layers, %d params (%.1f%% of the teacher), MLM accuracy %.4f vs %.4f (%.1f%%), %.2fx faster",
             layers, params_s, 100 * metrics["parameter_ratio"], acc_s, acc_t, 100 * metrics["mlm_accuracy_share"],
             timing["speedup"])
    return DistillationOutcome(student, result.history, metrics, timing)
