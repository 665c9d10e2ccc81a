"""The ``distill`` stage end to end on a tiny synthetic teacher and synthetic instances (no data/raw needed)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch
import yaml
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    BertConfig,
    BertForPreTraining,
)

from bert_pipeline.errors import PipelineError
from tests.conftest import REPO
from tests.pretrain_fixtures import CLS, FIRST_WORD, MASK, PAD, SEP, UNK, VOCAB_SIZE, make_dataset

SMALL = {"max_steps": 6, "batch_size": 8, "warmup_steps": 0, "logging_steps": 2, "eval_steps": 3, "save_steps": 3,
         "eval_batch_size": 16, "eval_batches": 2, "final_eval_batches": 2, "throughput_runs": 1,
         "throughput_warmup": 0, "learning_rate": 1e-3, "precision": "fp32"}


def _write_teacher(folder, layers: int = 4) -> None:
    from transformers import BertTokenizerFast

    vocab = [f"[unused{i}]" for i in range(VOCAB_SIZE)]
    for i, tok in ((PAD, "[PAD]"), (UNK, "[UNK]"), (CLS, "[CLS]"), (SEP, "[SEP]"), (MASK, "[MASK]")):
        vocab[i] = tok
    for i in range(FIRST_WORD, VOCAB_SIZE):
        vocab[i] = f"w{i}"
    folder.mkdir(parents=True)
    BertTokenizerFast(vocab={tok: i for i, tok in enumerate(vocab)}).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)  # dropout 0.1: resume must restore RNG
    model = BertForPreTraining(config)
    model.config.architectures = ["BertForPreTraining"]
    model.save_pretrained(folder)


@pytest.fixture
def workspace(in_tmp, monkeypatch):
    """A temporary repository layout with params.yaml, a 4-layer teacher and synthetic instances."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{in_tmp / 'mlflow.db'}")
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["distill"].update(SMALL)
    (in_tmp / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")
    _write_teacher(in_tmp / "models/pretrained")
    data = in_tmp / "data/pretraining"
    make_dataset(96, seed=1).save_to_disk(str(data / "train"))
    make_dataset(32, seed=2).save_to_disk(str(data / "validation"))
    info = {"masking": "static", "objective": "nsp", "vocab_size": VOCAB_SIZE, "max_seq_length": 32,
            "tokenizer": "models/pretrained", "rules": {}}
    (data / "info.json").write_text(json.dumps(info), encoding="utf-8")
    return in_tmp


def _set(ws, **changes) -> None:
    params = yaml.safe_load((ws / "params.yaml").read_text(encoding="utf-8"))
    params["distill"].update(changes)
    (ws / "params.yaml").write_text(yaml.safe_dump(params), encoding="utf-8")


def test_stage_writes_student_metrics_timing_plots_and_resumes_identically(workspace):
    from stages import distill

    distill.main()
    out = workspace / "models/distilled"
    student = AutoModelForMaskedLM.from_pretrained(out)
    assert student.config.num_hidden_layers == 2
    assert (out / "tokenizer.json").exists() and (out / "model.safetensors").exists()
    assert AutoModelForSequenceClassification.from_pretrained(out, num_labels=2).config.num_hidden_layers == 2

    metrics = json.loads((workspace / "metrics/distill.json").read_text())
    assert metrics["layer_map"] == [0, 2]
    assert metrics["teacher"]["layers"] == 4 and metrics["student"]["layers"] == 2
    assert metrics["student"]["parameters"] < metrics["teacher"]["parameters"]
    assert metrics["parameter_ratio"] == pytest.approx(
        metrics["student"]["parameters"] / metrics["teacher"]["parameters"])
    for who in ("teacher", "student"):
        assert 0.0 <= metrics[who]["mlm_accuracy"] <= 1.0
    acc_t = metrics["teacher"]["mlm_accuracy"]
    assert metrics["mlm_accuracy_share"] == pytest.approx(metrics["student"]["mlm_accuracy"] / acc_t if acc_t else 0.0, rel=1e-4)

    timing = json.loads((workspace / "metrics/distill-timing.json").read_text())
    for who in ("teacher", "student"):
        assert timing[who]["batch_size"] == 32 and timing[who]["seq_len"] == 128
        assert timing[who]["sequences_per_second"] > 0
    assert timing["speedup"] == pytest.approx(
        timing["student"]["sequences_per_second"] / timing["teacher"]["sequences_per_second"])

    rows = list(csv.DictReader((workspace / "plots/distill.csv").open()))
    assert [int(r["step"]) for r in rows] == [2, 3, 4, 6]
    assert rows[-1]["eval_mlm_accuracy"] != "" and float(rows[0]["train_loss"]) > 0

    from mlflow import MlflowClient

    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id])
    assert len(runs) == 1 and runs[0].data.tags["stage"] == "distill"
    assert runs[0].data.tags["model_path"] == "models/distilled"
    assert "final_student_mlm_accuracy" in runs[0].data.metrics

    # A rerun with the same params and inputs resumes from the last checkpoint: identical student and metrics.
    first_model = (out / "model.safetensors").read_bytes()
    first_metrics = (workspace / "metrics/distill.json").read_bytes()
    assert sorted(p.name for p in (workspace / "checkpoints/distill").iterdir()) == ["step-00000003", "step-00000006"]
    shutil.rmtree(out)
    distill.main()
    assert json.loads((workspace / "metrics/distill-timing.json").read_text())["resumed_from_step"] == 6
    assert (out / "model.safetensors").read_bytes() == first_model
    assert (workspace / "metrics/distill.json").read_bytes() == first_metrics

    # As if killed between step 3 and step 6: resume from step 3 and reach the same student, byte for byte.
    shutil.rmtree(workspace / "checkpoints/distill/step-00000006")
    shutil.rmtree(out)
    distill.main()
    assert json.loads((workspace / "metrics/distill-timing.json").read_text())["resumed_from_step"] == 3
    assert (out / "model.safetensors").read_bytes() == first_model
    assert (workspace / "metrics/distill.json").read_bytes() == first_metrics


@pytest.mark.parametrize("layers", [5, 9])
def test_more_student_layers_than_the_teacher_is_a_one_line_error(workspace, layers):
    from stages import distill

    _set(workspace, student_layers=layers)
    with pytest.raises(PipelineError) as info:
        distill.main()
    assert str(info.value) == (f"params.yaml: distill.student_layers: expected an int from 1 to 4 (the teacher in "
                               f"models/pretrained has 4 layers), got {layers}")
    assert not (workspace / "models/distilled").exists() and not (workspace / "metrics").exists()


def test_missing_teacher_is_a_one_line_error(workspace):
    from stages import distill

    shutil.rmtree(workspace / "models/pretrained")
    with pytest.raises(PipelineError, match="models/pretrained: no config.json"):
        distill.main()
