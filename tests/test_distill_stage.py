"""The ``distill`` stage end to end on a tiny synthetic teacher and synthetic instances (no data/raw needed)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    BertForPreTraining,
)

from bert_pipeline.errors import PipelineError
from tests.conftest import card_header, encoder_card_text, write_params
from tests.pretrain_fixtures import save_pretraining_data, save_tokenizer, tiny_config

SMALL = {"max_steps": 6, "batch_size": 8, "warmup_steps": 0, "logging_steps": 2, "eval_steps": 3, "save_steps": 3,
         "eval_batch_size": 16, "eval_batches": 2, "final_eval_batches": 2, "throughput_runs": 1,
         "throughput_warmup": 0, "learning_rate": 1e-3, "precision": "fp32"}


def _write_teacher(folder, layers: int = 4) -> None:
    save_tokenizer(folder)
    torch.manual_seed(0)
    # dropout 0.1: resume must restore RNG
    model = BertForPreTraining(tiny_config(num_hidden_layers=layers, max_position_embeddings=128))
    model.config.architectures = ["BertForPreTraining"]
    model.save_pretrained(folder)


@pytest.fixture
def workspace(in_tmp, mlflow_in_tmp):
    """A temporary repository layout with params.yaml, a 4-layer teacher and synthetic instances."""
    write_params(in_tmp, distill=SMALL)
    _write_teacher(in_tmp / "models/pretrained")
    save_pretraining_data(in_tmp / "data/pretraining", 96, 32, tokenizer="models/pretrained")
    return in_tmp


def _set(ws, **changes) -> None:
    write_params(ws, distill={**SMALL, **changes})


def test_stage_writes_student_metrics_timing_plots_and_resumes_identically(workspace):
    from stages import distill

    distill.main()
    out = workspace / "models/distilled"
    student = AutoModelForMaskedLM.from_pretrained(out)
    assert student.config.num_hidden_layers == 2
    assert (out / "tokenizer.json").exists()
    assert (out / "model.safetensors").exists()
    assert AutoModelForSequenceClassification.from_pretrained(out, num_labels=2).config.num_hidden_layers == 2

    metrics = json.loads((workspace / "metrics/distill.json").read_text())
    assert metrics["layer_map"] == [0, 2]
    assert metrics["teacher"]["layers"] == 4
    assert metrics["student"]["layers"] == 2
    assert metrics["student"]["parameters"] < metrics["teacher"]["parameters"]
    assert metrics["parameter_ratio"] == pytest.approx(
        metrics["student"]["parameters"] / metrics["teacher"]["parameters"])
    for who in ("teacher", "student"):
        assert 0.0 <= metrics[who]["mlm_accuracy"] <= 1.0
    acc_t = metrics["teacher"]["mlm_accuracy"]
    assert metrics["mlm_accuracy_share"] == pytest.approx(metrics["student"]["mlm_accuracy"] / acc_t if acc_t else 0.0, rel=1e-4)

    timing = json.loads((workspace / "metrics/distill-timing.json").read_text())
    for who in ("teacher", "student"):
        assert timing[who]["batch_size"] == 32
        assert timing[who]["seq_len"] == 128
        assert timing[who]["sequences_per_second"] > 0
    assert timing["speedup"] == pytest.approx(
        timing["student"]["sequences_per_second"] / timing["teacher"]["sequences_per_second"])

    rows = list(csv.DictReader((workspace / "plots/distill.csv").open()))
    assert [int(r["step"]) for r in rows] == [2, 3, 4, 6]
    assert rows[-1]["eval_mlm_accuracy"] != ""
    assert float(rows[0]["train_loss"]) > 0

    from mlflow import MlflowClient

    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id])
    assert len(runs) == 1
    assert runs[0].data.tags["stage"] == "distill"
    assert runs[0].data.tags["model_path"] == "models/distilled"
    assert "final_student_mlm_accuracy" in runs[0].data.metrics

    first_card = encoder_card_text("distilled_card")  # the model card of the release copy (stage model_cards)
    card = card_header(first_card)
    assert not (out / "README.md").exists()
    assert (card["pipeline_tag"], card["base_model"]) == ("fill-mask", "models/release/pretrained")
    assert card["bert_pipeline"]["tokens_seen"] == metrics["tokens_seen"] > 0
    assert card["bert_pipeline"]["parameters"] == metrics["student"]["parameters"]

    # A rerun with the same params and inputs resumes from the last checkpoint: identical student and metrics.
    first_model = (out / "model.safetensors").read_bytes()
    first_metrics = (workspace / "metrics/distill.json").read_bytes()
    assert sorted(p.name for p in (workspace / "checkpoints/distill").iterdir()) == ["step-00000003", "step-00000006"]
    shutil.rmtree(out)
    distill.main()
    assert json.loads((workspace / "metrics/distill-timing.json").read_text())["resumed_from_step"] == 6
    assert (out / "model.safetensors").read_bytes() == first_model
    assert (workspace / "metrics/distill.json").read_bytes() == first_metrics
    assert encoder_card_text("distilled_card") == first_card

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
    assert not (workspace / "models/distilled").exists()
    assert not (workspace / "metrics").exists()


def test_missing_teacher_is_a_one_line_error(workspace):
    from stages import distill

    shutil.rmtree(workspace / "models/pretrained")
    with pytest.raises(PipelineError, match="models/pretrained: no config.json"):
        distill.main()
