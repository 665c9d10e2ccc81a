"""Stage ``distill``: a DistilBERT-style student from the pre-trained teacher (Sanh et al. 2019).

    python -m stages.distill

Reads ``models/pretrained/`` (the teacher, with its tokenizer) and ``data/pretraining/{train,validation}`` (the
pre-training instances and their collator) and runs :func:`bert_pipeline.train.distill.run_distillation`: half
the teacher's layers by default (student layer i <- teacher layer 2i), DistilBERT's triple loss through the shared
loop (checkpoints under ``checkpoints/distill/``, exact resume). Writes:

- ``models/distilled/``: the student (``save_pretrained``, safetensors) with the teacher's tokenizer beside it
  (its model card is stage ``model_cards``'s);
- ``metrics/distill.json``: parameter counts of both and their ratio, held-out MLM accuracy of both and the
  student's share of the teacher's, the training tokens the student saw, the resolved ``precision``;
- ``metrics/distill-timing.json``: CPU inference throughput of both encoders and the speed-up;
- ``plots/distill.csv``: train loss, learning rate and held-out student MLM loss/accuracy per step;
- one MLflow run with params, the curves, the metrics and pointers (path + DVC hash) to teacher and student.
"""

from __future__ import annotations

from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from stages import require_inputs, settings_from
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.distill import DistillView

TEACHER_DIR = Path("models/pretrained")
DATA_DIR = Path("data/pretraining")
OUT_DIR = Path("models/distilled")
CHECKPOINT_DIR = Path("checkpoints/distill")
METRICS = Path("metrics/distill.json")
TIMING = Path("metrics/distill-timing.json")
PLOTS = Path("plots/distill.csv")
# Keys that change how often we save or what we measure afterwards, not what is trained: not fingerprinted.
NOT_FINGERPRINTED = ("save_steps", "save_total_limit", "final_eval_batches", "throughput_runs", "throughput_warmup")
LOSS_KEYS = {"temperature", "alpha_ce", "alpha_mlm", "alpha_cos", "cos_positions"}


def main() -> None:
    require_inputs("distill")  # before the slow imports below
    from bert_pipeline.data.masking import collator_from_info, load_info
    from bert_pipeline.data.tokenizer import load_tokenizer
    from bert_pipeline.model.configs import save_model
    from bert_pipeline.model.distillation import load_teacher, resolve_student_layers
    from bert_pipeline.train.checkpoint import CheckpointManager, fingerprint
    from bert_pipeline.train.distill import HISTORY_COLUMNS, run_distillation
    from bert_pipeline.train.loop import TrainConfig, TrainingError
    from bert_pipeline.train.pretrain import history_csv, open_instances
    from bert_pipeline.train.runtime import RuntimeSettingError, make_runtime
    from stages.dvc_adapter import lock_pointer, stage_run

    p = load_view(DistillView).distill
    teacher = load_teacher(TEACHER_DIR)
    with settings_from("distill"):
        layers = resolve_student_layers(p.student_layers, teacher.config.num_hidden_layers, TEACHER_DIR)
    tokenizer = load_tokenizer(TEACHER_DIR)
    if not (DATA_DIR / "info.json").is_file():
        raise PipelineError(f"{DATA_DIR}/info.json: not found (run create_pretraining_data first)")
    info = load_info(DATA_DIR)
    train_set, validation_set = open_instances(DATA_DIR, "train"), open_instances(DATA_DIR, "validation")
    try:
        collate = collator_from_info(DATA_DIR, seed=p.seed, tokenizer=tokenizer)
    except ValueError as exc:
        raise PipelineError(f"{DATA_DIR}: cannot use the pre-training instances with the teacher's tokenizer ({exc})") from None
    if len(train_set) < p.batch_size:
        raise PipelineError(f"{DATA_DIR}/train: {len(train_set)} instances, fewer than distill.batch_size={p.batch_size}")
    config = TrainConfig(**p.model_dump(include=set(TrainConfig.__dataclass_fields__)), optimizer="adamw",
                         max_eval_batches=p.eval_batches, stage="distill")
    section = p.model_dump(mode="json")
    fp = fingerprint({k: v for k, v in section.items() if k not in NOT_FINGERPRINTED}, [TEACHER_DIR, DATA_DIR])
    tags = {"teacher_path": TEACHER_DIR.as_posix(), "student_layers": layers}
    if (teacher_pointer := lock_pointer(TEACHER_DIR.as_posix())):
        tags["teacher_dvc_md5"] = teacher_pointer["md5"]
    try:
        runtime = make_runtime(p.precision)
    except RuntimeSettingError as exc:
        raise PipelineError(f"distill.{exc}") from None
    with stage_run("distill", params=section, tags=tags) as run:
        try:
            outcome = run_distillation(
                teacher, layers, train_set, validation_set, collate, config=config,
                runtime=runtime, checkpoints=CheckpointManager(CHECKPOINT_DIR, fp, keep=p.save_total_limit),
                batch_size=p.batch_size, max_seq_length=int(info["max_seq_length"]),
                loss=p.model_dump(include=LOSS_KEYS), final_eval_batches=p.final_eval_batches,
                throughput_runs=p.throughput_runs, throughput_warmup=p.throughput_warmup,
                on_log=lambda step, row: run.log_metrics({k: v for k, v in row.items() if k != "step"}, step=step))
        except TrainingError as exc:
            raise PipelineError(str(exc)) from None
        with atomic_dir(OUT_DIR) as tmp:
            save_model(outcome.student, tmp, tokenizer)
        run.set_tags({"layer_map": outcome.metrics["layer_map"]})
        run.log_model_pointer(OUT_DIR)
        # the resolved precision, recorded for the model card (stage model_cards)
        write_json(METRICS, {**outcome.metrics, "precision": runtime.precision})
        write_headline("distill", {"distill": {"mlm_accuracy": outcome.metrics["student"]["mlm_accuracy"],
                                              "mlm_accuracy_share": outcome.metrics["mlm_accuracy_share"]}})
        write_json(TIMING, outcome.timing)
        atomic_write_text(PLOTS, history_csv(outcome.history, HISTORY_COLUMNS))
        summary = {"mlm_accuracy_share": outcome.metrics["mlm_accuracy_share"], "speedup": outcome.timing["speedup"],
                   "parameter_ratio": outcome.metrics["parameter_ratio"]}
        for who in ("teacher", "student"):
            summary[f"final_{who}_mlm_accuracy"] = outcome.metrics[who]["mlm_accuracy"]
            summary[f"{who}_sequences_per_second"] = outcome.timing[who]["sequences_per_second"]
        run.log_metrics(summary, step=p.max_steps)
        for path in (METRICS, TIMING, PLOTS):
            run.log_artifact(path)


if __name__ == "__main__":
    run_main(main)
