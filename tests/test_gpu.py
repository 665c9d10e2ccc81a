"""The GPU path (marker ``gpu``: skipped without CUDA; ``bench/device/gpu_check.sh`` runs these on the GPU machine): a few
pre-training steps in bf16 and in fp16 through forced overflows, a distillation resumed at its final step, one
fine-tuning run per task kind, ``variants.train_family`` and its throughput, export parity against a CUDA
reference. Each builds its runtime with ``make_runtime`` as the stages do, and checks that the work ran on CUDA."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from bert_pipeline.model.configs import new_pretraining_model
from bert_pipeline.model.objectives import MaskedPositionPretrainer
from bert_pipeline.train.loop import TrainConfig, train
from bert_pipeline.train.runtime import cuda_has_native_bf16, make_runtime
from tests.pretrain_fixtures import pad_collate, tiny_config
from tests.test_runtime import distill_three_steps
from tests.test_runtime import phases as _phases

pytestmark = pytest.mark.gpu


def _cuda_runtime(precision: str):
    runtime = make_runtime(precision)
    assert runtime.device.type == "cuda", runtime.device
    return runtime


def test_auto_is_native_bf16_on_this_gpu_or_fp16_with_a_scaler():
    runtime = _cuda_runtime("auto")
    if cuda_has_native_bf16():
        assert runtime.precision == "bf16" and runtime.scaler is None
    else:
        assert runtime.precision == "fp16" and runtime.scaler is not None
    assert runtime.loader_options() == {"pin_memory": True}


def test_pretraining_steps_in_bf16_on_cuda():
    if not cuda_has_native_bf16():
        pytest.skip("this GPU has no native bf16")
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0))
    runtime = _cuda_runtime("bf16")
    cfg = TrainConfig(max_steps=6, learning_rate=1e-3, warmup_steps=1, eval_steps=3, logging_steps=1)
    result = train(model, _phases(6), pad_collate, cfg, runtime)
    assert {p.device.type for p in model.parameters()} == {"cuda"}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert result.bad_steps == 0 and result.final_eval["step"] == 6
    assert all(math.isfinite(r["train_loss"]) for r in result.history if "train_loss" in r)
    assert result.tokens_seen(runtime) == result.tokens > 0


def test_pretraining_in_fp16_goes_on_after_forced_overflows_on_cuda():
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    runtime = _cuda_runtime("fp16")
    runtime.loss_scale_init = 2.0**40
    cfg = TrainConfig(max_steps=40, learning_rate=1e-3, warmup_steps=0, eval_steps=0, logging_steps=10,
                      max_bad_steps=0)
    result = train(model, _phases(40), pad_collate, cfg, runtime)
    assert 1 <= result.scaler_skipped_steps < 40
    assert runtime.scaler.get_scale() < 2.0**40
    assert any(not torch.equal(before[k].cuda(), v) for k, v in model.state_dict().items() if v.is_floating_point())


def test_a_distill_resume_at_the_final_step_keeps_the_teacher_on_the_students_device(tmp_path):
    first, _ = distill_three_steps(tmp_path / "ck", _cuda_runtime("auto"))
    # resumes at step 3 = max_steps: no training step, then the held-out comparison
    again, teacher = distill_three_steps(tmp_path / "ck", _cuda_runtime("auto"))
    assert again.timing["resumed_from_step"] == 3
    assert next(teacher.parameters()).device == next(again.student.parameters()).device
    assert again.timing["teacher"]["device"].startswith("cuda")
    assert again.metrics["student"]["mlm_accuracy"] == pytest.approx(first.metrics["student"]["mlm_accuracy"])


@pytest.mark.parametrize("task", ["sentiment", "ner", "qa"])
def test_one_fine_tuning_run_per_task_kind_on_cuda(tmp_path, task):
    from transformers import BertModel

    from bert_pipeline.train.finetune import MemberSpec, finetune_task
    from tests.conftest import save_tiny_tasks
    from tests.tiny_models import bert_tokenizer

    save_tiny_tasks(tmp_path / "tasks")
    words = ["good", "bad", "film", "the", "was", "very", "anna", "smith", "met", "in", "paris", "@placeholder", "."]
    tok = bert_tokenizer(words + list("abcdefghijklmnopqrstuvwxyz@"))
    torch.manual_seed(0)
    BertModel(tiny_config(vocab_size=len(tok), num_hidden_layers=1)).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    settings = {"sentiment": {"max_length": 16, "epochs": 1, "batch_size": 8},
                "ner": {"max_length": 16, "doc_stride": 4, "epochs": 1, "batch_size": 4},
                "qa": {"max_length": 24, "doc_stride": 8, "epochs": 1, "batch_size": 4, "n_best": 20,
                       "max_answer_length": 5}}[task]
    settings = {"max_train_examples": None, "max_validation_examples": None, "max_test_examples": None, **settings}
    runtime = _cuda_runtime("auto")
    outcome = finetune_task(tmp_path / "tasks" / task, MemberSpec(str(tmp_path / "model"), "pretrained", None, 5e-3,
                                                                 "mean", None, None), settings,
                            seeds=[0], data_seed=0, runtime=runtime, warmup_ratio=0.1, weight_decay=0.01,
                            max_grad_norm=1.0, early_stopping_patience=1, evals_per_epoch=1, eval_batch_size=8,
                            low_resource_train_examples=None, low_resource_epochs=None)
    main = outcome.metrics["main_metric"]
    assert 0.0 <= outcome.metrics["test"][main]["mean"] <= 1.0
    assert outcome.timing["device"].startswith("cuda")
    assert next(outcome.model.parameters()).device.type == "cuda"


def test_variants_train_family_on_cuda_and_its_throughput(in_tmp, raw, monkeypatch):
    """Bug 4's path: a family trained on the GPU, then timed (the encoder stays on the GPU; the inputs go there)."""
    from bert_pipeline.evaluation.speed import measure_throughput
    from stages import variants
    from stages.params.base import load_view
    from stages.params.variants import VariantsView
    from tests.conftest import save_tiny_tasks, tiny_finetune, write_params
    from tests.pretrain_fixtures import TINY_PRETRAIN
    from tests.test_variants import _save_corpus

    _save_corpus(in_tmp / "data/corpus")
    save_tiny_tasks(in_tmp / "data/tasks")
    pretrain = {**TINY_PRETRAIN, "precision": "auto"}
    write_params(in_tmp, tiny_finetune(raw, low_resource_tasks=[], precision="auto"),
                 variants={"families": ["roberta"], "tasks": ["sentiment"]},
                 train_tokenizer={"vocab_size": 320, "batch_size": 100},
                 create_pretraining_data={"max_seq_length": 32, "dupe_factor": 1, "shard_size": 16, "num_proc": 1},
                 pretrain=pretrain, evaluate={"seq_length": 32})
    row, timing, model = variants.train_family("roberta", load_view(VariantsView))
    assert row["steps"] == TINY_PRETRAIN["max_steps"] and row["tokens_seen"] > 0
    speed = measure_throughput({"roberta": model.base_model}, _cuda_runtime("fp32"), batch_size=4, seq_len=32,
                               warmup=1, runs=2)["roberta"]
    assert speed["device"].startswith("cuda") and speed["sequences_per_second"] > 0


def test_export_parity_against_a_cuda_reference(tmp_path):
    pytest.importorskip("onnxruntime")
    from bert_pipeline.mlops import onnx_export as ox
    from tests.tiny_models import save_classifier

    src = save_classifier(tmp_path / "classifier", favour=None)
    examples = [{"text": t} for t in ("the film was good", "a bad film", "anna met bob in paris", "good")]
    report = ox.export_folder(src, tmp_path / "onnx", examples, max_seq_length=16, runs=1, warmup=0,
                              runtime=make_runtime("fp32", tf32=False))
    assert report.parity.agreement == 1.0
    assert max(report.parity.max_abs_diff.values()) < 1e-4


def test_the_loop_records_the_cuda_device_in_pretraining_timing(tmp_path):
    from bert_pipeline.train.pretrain import PretrainingData, run_pretraining

    phases = [dataclasses.replace(phase, collate_fn=pad_collate) for phase in _phases(4)]
    data = PretrainingData(phases, {}, "nsp", "next_sentence_label", [Path(tmp_path)], unigram_token_id=104,
                           special_ids=frozenset({0, 101, 102, 103}), vocab_size=tiny_config().vocab_size)
    cfg = TrainConfig(max_steps=4, learning_rate=1e-3, warmup_steps=1, eval_steps=2, logging_steps=1)
    outcome = run_pretraining(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0), data, cfg,
                              _cuda_runtime("auto"), None, describe={"init": "scratch", "size": "tiny"})
    assert outcome.timing["device"].startswith("cuda") and outcome.timing["mfu"] > 0
    if outcome.timing["precision"] == "bf16":  # no scaler, no skipped step
        assert outcome.quality["scaler_skipped_steps"] == 0
