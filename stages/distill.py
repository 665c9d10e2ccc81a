"""Stage ``distill``: a DistilBERT-style student from the pre-trained teacher (Sanh et al. 2019).

    python -m stages.distill

Reads ``models/pretrained/`` (the teacher, with its tokenizer) and ``data/pretraining/{train,validation}`` (the
pre-training instances and their collator), builds the student (:func:`bert_pipeline.model.distillation.build_student`: half
the teacher's layers by default, student layer i <- teacher layer 2i), trains it with DistilBERT's triple loss
through the shared loop (:func:`bert_pipeline.train.loop.train`: AdamW, warmup + linear decay, bf16 autocast where the
device supports it, accumulation, clipping, non-finite steps skipped, checkpoints under ``checkpoints/distill/``
and exact resume), and writes:

- ``models/distilled/``: the student (``save_pretrained``, safetensors) with the teacher's tokenizer beside it;
- ``metrics/distill.json``: parameter counts of both and their ratio, held-out MLM accuracy of both and the
  student's share of the teacher's;
- ``metrics/distill-timing.json`` (``cache: false``): CPU inference throughput of both encoders (sequences/s at
  batch 32, seq 128, median of several runs after warm-up) and the speed-up;
- ``plots/distill.csv``: train loss, learning rate and held-out student MLM loss/accuracy per step.

One MLflow run (``bert_pipeline.mlops.tracking``) records params, the curves, the metrics and pointers (path + DVC hash) to the
teacher and to the student, not copies.
"""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.model.distillation import (
    DistillationModel,
    build_student,
    default_student_layers,
    measure_throughput,
)
from stages.params import load_params

log = logging.getLogger(__name__)

TEACHER_DIR = Path("models/pretrained")
DATA_DIR = Path("data/pretraining")
OUT_DIR = Path("models/distilled")
CHECKPOINT_DIR = Path("checkpoints/distill")
METRICS = Path("metrics/distill.json")
TIMING = Path("metrics/distill-timing.json")
PLOTS = Path("plots/distill.csv")
PLOT_COLUMNS = ["step", "train_loss", "learning_rate", "eval_mlm_loss", "eval_mlm_accuracy"]
# Keys that change how often we save or what we measure afterwards, not what is trained: not fingerprinted.
NOT_FINGERPRINTED = ("save_steps", "save_total_limit", "final_eval_batches", "throughput_runs", "throughput_warmup")


def load_teacher(folder: Path):
    """The teacher as the stock class its config names (``BertForPreTraining`` or ``BertForMaskedLM``), in eval mode.

    Raises:
        PipelineError: no model in ``folder`` or not a BERT pre-training model.
    """
    from transformers import AutoConfig, BertForMaskedLM, BertForPreTraining

    if not (folder / "config.json").is_file():
        raise PipelineError(f"{folder}: no config.json: expected the pretrain stage's model (run `dvc repro pretrain`)")
    config = AutoConfig.from_pretrained(str(folder))
    classes = {"BertForPreTraining": BertForPreTraining, "BertForMaskedLM": BertForMaskedLM}
    arch = (config.architectures or ["BertForPreTraining"])[0]
    if config.model_type != "bert" or arch not in classes:
        raise PipelineError(f"{folder}: expected a BertForPreTraining or BertForMaskedLM teacher, got {arch}")
    teacher = classes[arch].from_pretrained(str(folder), attn_implementation="sdpa")
    return teacher.eval()


def resolve_student_layers(student_layers: int | None, teacher_layers: int) -> int:
    """``student_layers`` from params (None = half the teacher's), checked against the teacher's depth.

    Raises:
        PipelineError: more layers than the teacher has (names ``distill.student_layers``).
    """
    layers = default_student_layers(teacher_layers) if student_layers is None else student_layers
    if not 1 <= layers <= teacher_layers:
        raise PipelineError(
            f"params.yaml: distill.student_layers: expected an int from 1 to {teacher_layers} (the teacher in "
            f"{TEACHER_DIR} has {teacher_layers} layers), got {layers}"
        )
    return layers


def plot_rows(history: list[dict[str, float]]) -> str:
    """CSV text of :data:`PLOT_COLUMNS`, one row per logged step (train and eval rows of a step merged)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in history:
        merged = by_step.setdefault(int(row["step"]), {"step": int(row["step"])})
        merged.update({k: v for k, v in row.items() if k in PLOT_COLUMNS})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=PLOT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for step in sorted(by_step):
        writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in by_step[step].items()})
    return out.getvalue()


def main() -> None:
    import datasets
    from transformers import AutoTokenizer

    from bert_pipeline.data.masking import collator_from_info, load_info
    from bert_pipeline.mlops.tracking import lock_pointer, stage_run
    from bert_pipeline.model.configs import MaskedPositionPretrainer, count_parameters, save_model
    from bert_pipeline.train.checkpoint import CheckpointManager, fingerprint
    from bert_pipeline.train.loop import Phase, TrainConfig, TrainingError, evaluate, make_accelerator, train

    p = load_params().distill
    teacher = load_teacher(TEACHER_DIR)
    teacher_layers = teacher.config.num_hidden_layers
    layers = resolve_student_layers(p.student_layers, teacher_layers)
    tokenizer = AutoTokenizer.from_pretrained(str(TEACHER_DIR))
    for split in ("train", "validation"):
        if not (DATA_DIR / split).is_dir():
            raise PipelineError(f"{DATA_DIR / split}: missing: expected create_pretraining_data's instances")
    try:
        info = load_info(DATA_DIR)
        train_set = datasets.load_from_disk(str(DATA_DIR / "train"))
        validation_set = datasets.load_from_disk(str(DATA_DIR / "validation"))
        collate = collator_from_info(DATA_DIR, seed=p.seed, tokenizer=tokenizer)
    except (FileNotFoundError, ValueError, IndexError) as exc:
        raise PipelineError(f"{DATA_DIR}: cannot use the pre-training instances with the teacher's tokenizer ({exc})") from None
    if len(train_set) < p.batch_size or len(validation_set) == 0:
        raise PipelineError(f"{DATA_DIR}: {len(train_set)} train / {len(validation_set)} validation instances, expected at "
                         f"least distill.batch_size={p.batch_size} / 1")

    torch.manual_seed(p.seed)
    student, mapping = build_student(teacher, layers)
    model = DistillationModel(student, teacher, temperature=p.temperature, alpha_ce=p.alpha_ce,
                              alpha_mlm=p.alpha_mlm, alpha_cos=p.alpha_cos, cos_positions=p.cos_positions)
    accelerator = make_accelerator(p.precision)
    config = TrainConfig(
        max_steps=p.max_steps, learning_rate=p.learning_rate, warmup_steps=p.warmup_steps, optimizer="adamw",
        weight_decay=p.weight_decay, gradient_accumulation_steps=p.gradient_accumulation_steps,
        max_grad_norm=p.max_grad_norm, max_bad_steps=p.max_bad_steps, save_steps=p.save_steps,
        eval_steps=p.eval_steps, logging_steps=p.logging_steps, eval_batch_size=p.eval_batch_size,
        max_eval_batches=p.eval_batches, seed=p.seed, stage="distill",
    )
    phases = [Phase("distill", 0, p.max_steps, train_set, validation_set, p.batch_size,
                    int(info.get("max_seq_length", 0)))]
    section = p.model_dump(mode="json")
    fp = fingerprint({k: v for k, v in section.items() if k not in NOT_FINGERPRINTED}, [TEACHER_DIR, DATA_DIR])
    checkpoints = CheckpointManager(CHECKPOINT_DIR, fp, keep=p.save_total_limit)
    teacher_pointer = lock_pointer(TEACHER_DIR.as_posix())
    tags = {"teacher_path": TEACHER_DIR.as_posix(), "student_layers": layers, "layer_map": mapping}
    if teacher_pointer:
        tags["teacher_dvc_md5"] = teacher_pointer["md5"]

    with stage_run("distill", params=section, tags=tags) as run:
        try:
            result = train(model, phases, collate, config, accelerator, checkpoints,
                           on_log=lambda step, row: run.log_metrics({k: v for k, v in row.items() if k != "step"},
                                                                    step=step))
        except TrainingError as exc:
            raise PipelineError(str(exc)) from None
        student = accelerator.unwrap_model(model).student
        held_out = {}
        for name, net in (("teacher", teacher), ("student", student)):
            held_out[name] = evaluate(MaskedPositionPretrainer(net), validation_set, collate, p.eval_batch_size,
                                      accelerator, max_batches=p.final_eval_batches)
            log.info("%s: held-out MLM accuracy %.4f", name, held_out[name]["mlm_accuracy"])
        student = student.to("cpu", dtype=torch.float32).eval()
        teacher = teacher.to("cpu", dtype=torch.float32).eval()

        with atomic_dir(OUT_DIR) as tmp:
            save_model(student, tmp, tokenizer)
        pointer = run.log_model_pointer(OUT_DIR)

        params_t, params_s = count_parameters(teacher), count_parameters(student)
        acc_t, acc_s = held_out["teacher"]["mlm_accuracy"], held_out["student"]["mlm_accuracy"]
        metrics = {
            "teacher": {"layers": teacher_layers, "parameters": params_t, **_eval_fields(held_out["teacher"])},
            "student": {"layers": layers, "parameters": params_s, **_eval_fields(held_out["student"])},
            "layer_map": mapping,
            "parameter_ratio": round(params_s / params_t, 6),
            "parameter_reduction": round(1.0 - params_s / params_t, 6),
            "mlm_accuracy_share": round(acc_s / acc_t, 6) if acc_t else 0.0,
            "eval_predicted_tokens": held_out["student"]["predicted_tokens"],
            "steps": p.max_steps,
            "bad_steps": result.bad_steps,
        }
        torch.manual_seed(p.seed)
        speed = measure_throughput({"teacher": teacher.base_model, "student": student.base_model}, batch_size=32,
                                   seq_len=128, warmup=p.throughput_warmup, runs=p.throughput_runs, seed=p.seed)
        timing = {
            "teacher": speed["teacher"],
            "student": speed["student"],
            "speedup": speed["student"]["sequences_per_second"] / speed["teacher"]["sequences_per_second"],
            "torch_threads": torch.get_num_threads(),
            "train_seconds": result.seconds,
            "resumed_from_step": result.resumed_from,
            "precision": accelerator.mixed_precision,
        }
        write_json(METRICS, metrics)
        write_json(TIMING, timing)
        atomic_write_text(PLOTS, plot_rows(result.history))
        run.log_metrics({
            "final_teacher_mlm_accuracy": acc_t, "final_student_mlm_accuracy": acc_s,
            "mlm_accuracy_share": metrics["mlm_accuracy_share"], "parameter_ratio": metrics["parameter_ratio"],
            "speedup": timing["speedup"],
            "student_sequences_per_second": speed["student"]["sequences_per_second"],
            "teacher_sequences_per_second": speed["teacher"]["sequences_per_second"],
        }, step=p.max_steps)
        for path in (METRICS, TIMING, PLOTS):
            run.log_artifact(path)
    log.info("student %d layers, %d params (%.1f%% of the teacher), MLM accuracy %.4f vs %.4f (%.1f%%), "
             "%.2fx faster; model %s (%s)", layers, params_s, 100 * metrics["parameter_ratio"], acc_s, acc_t,
             100 * metrics["mlm_accuracy_share"], timing["speedup"], OUT_DIR, pointer["md5"])


def _eval_fields(metrics: dict[str, float]) -> dict[str, float]:
    keep = ("mlm_accuracy", "mlm_loss", "perplexity", "pair_accuracy")
    return {k: round(metrics[k], 6) for k in keep if k in metrics}


if __name__ == "__main__":
    run_main(main)
