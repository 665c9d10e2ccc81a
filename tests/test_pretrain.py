"""The pretrain params section and stage: one-line errors for bad params and inputs."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.conftest import card_header, encoder_card_text, params_error, run_stage
from tests.pretrain_fixtures import pretrain_workspace


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("size", "huge", 'pretrain.model.size: expected one of "tiny", "mini", "small", "medium", "base", "large", '
                         'got "huge"'),
        ("phases", [{"max_seq_length": 128, "fraction": 0.9}, {"max_seq_length": 512, "fraction": 0.2}],
         "pretrain.phases: expected fractions summing to 1, got 1.1"),
        ("optimizer", "sgd", 'pretrain.optimizer: expected one of "adamw", "lamb", got "sgd"'),
        ("head_only_steps", 2200, "pretrain.head_only_steps: expected head_only_steps + warmup_steps <= max_steps "
                                  "(2200), got 2200 + 200"),
        ("head_learning_rate", 0, "pretrain.head_learning_rate: expected float > 0 or null, got 0"),
    ],
)
def test_bad_pretrain_params_are_one_line(raw, key, value, message):
    bad = copy.deepcopy(raw)
    if key == "size":
        bad["pretrain"]["model"]["size"] = value
    else:
        bad["pretrain"][key] = value
    assert params_error(bad) == f"params.yaml: {message}"


# ------------------------------------------------------------------------------------------------ the stage
def _stage_error(capsys) -> str:
    from stages import pretrain

    code, err = run_stage(pretrain.main, capsys)
    assert code == 1
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"model": {"size": "tiny", "config": {"vocab_size": 100}}},
         "error: pretrain.model.config.vocab_size: 100 does not match the tokenizer's vocabulary of 144 tokens"),
        ({"model": {"size": "tiny", "config": {"max_position_embeddings": 16}}},
         "error: pretrain.model: max_seq_length 32 exceeds the model's max_position_embeddings 16"),
        ({"model": {"size": "gigantic"}},
         'error: params.yaml: pretrain.model.size: expected one of "tiny", "mini", "small", "medium", "base", '
         '"large", got "gigantic"'),
        ({"n_train": 0}, "error: data/pretraining/train: empty train set (no instances)"),
        ({"batch_size": 80}, "error: data/pretraining/train: 64 instances, fewer than one global batch of 80"),
    ],
)
def test_bad_inputs_one_line_and_no_model(in_tmp, mlflow_in_tmp, raw, capsys, change, expected):
    n_train = change.pop("n_train", 64)
    pretrain_workspace(in_tmp, raw, n_train=n_train, **change)
    assert _stage_error(capsys).startswith(expected)
    assert not (in_tmp / "models" / "pretrained").exists()
    assert not list((in_tmp / "models").glob(".pretrained*"))
    assert not (in_tmp / "mlflow.db").exists()  # rejected before any run or checkpoint is started
    assert not (in_tmp / "checkpoints").exists()


def test_data_built_for_another_objective_is_one_line(in_tmp, mlflow_in_tmp, raw, capsys):
    """params.yaml's objective (sop) against data/pretraining built for NSP: the stage names both and the fix."""
    pretrain_workspace(in_tmp, raw)
    params = yaml.safe_load((in_tmp / "params.yaml").read_text())
    params["create_pretraining_data"]["objective"] = "sop"
    params["pretrain"]["model"]["family"] = "albert"
    params["train_tokenizer"]["model"] = "unigram"
    (in_tmp / "params.yaml").write_text(yaml.safe_dump(params))
    assert _stage_error(capsys) == ("error: data/pretraining/info.json: built for create_pretraining_data.objective "
                                    "'nsp', params.yaml says 'sop'; run `dvc repro create_pretraining_data` first")
    assert not (in_tmp / "models" / "pretrained").exists()


def test_stage_outputs_and_byte_identical_rerun(in_tmp, mlflow_in_tmp, raw, one_thread):
    import json
    import shutil

    from mlflow import MlflowClient
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

    from stages import pretrain

    pretrain_workspace(in_tmp, raw)
    pretrain.main()
    metrics = (in_tmp / "metrics" / "pretrain.json").read_bytes()
    weights = (in_tmp / "models" / "pretrained" / "model.safetensors").read_bytes()
    quality = json.loads(metrics)
    assert quality["objective"] == "nsp"
    assert quality["steps"] == 4
    assert set(quality["eval"]) >= {"mlm_loss", "mlm_accuracy", "perplexity", "pair_accuracy", "unigram_accuracy"}
    # 4 steps from random weights: the MLM loss is still near log(vocab), far above the unigram floor
    assert 0 < quality["unigram_loss"] < quality["eval"]["mlm_loss"]
    assert quality["mlm_loss_below_unigram"] == pytest.approx(quality["unigram_loss"] - quality["eval"]["mlm_loss"],
                                                              abs=2e-6)
    timing = json.loads((in_tmp / "metrics" / "pretrain-timing.json").read_text())
    assert timing["tokens_per_second"] > 0
    assert 0 < timing["mfu"] < 1.5
    assert 0 <= timing["matmul_peak_other_cpu_share"] <= 1 and 0 <= timing["other_cpu_share"] <= 1
    assert timing["cpu_seconds"] > 0
    assert (timing["peak_warning"] is None) == (timing["matmul_peak_other_cpu_share"] <= 0.25)
    plot = (in_tmp / "plots" / "pretrain.csv").read_text().splitlines()
    assert plot[0].startswith("step,train_loss,learning_rate,eval_mlm_loss")
    assert [line.split(",")[0] for line in plot[1:]] == ["1", "2", "3", "4"]
    readme = encoder_card_text("pretrained_card")  # the model card of the release copy (stage model_cards)
    card = card_header(readme)
    assert not (in_tmp / "models" / "pretrained" / "README.md").exists()
    assert quality["precision"] in ("fp32", "bf16") and quality["num_processes"] == 1
    assert (card["pipeline_tag"], card["license"], card["library_name"]) == ("fill-mask", "apache-2.0", "transformers")
    assert "base_model" not in card  # from scratch
    assert card["bert_pipeline"]["tokens_seen"] == quality["tokens_seen"] > 0
    assert card["bert_pipeline"]["parameters"] == quality["parameters"]
    model = AutoModelForPreTraining.from_pretrained(in_tmp / "models" / "pretrained")
    assert model.config.num_hidden_layers == 2
    assert model.config.vocab_size == 144
    AutoModelForMaskedLM.from_pretrained(in_tmp / "models" / "pretrained")
    assert len(AutoTokenizer.from_pretrained(in_tmp / "models" / "pretrained")) == 144
    assert sorted(p.name for p in (in_tmp / "checkpoints" / "pretrain").iterdir()) == ["step-00000002",
                                                                                      "step-00000004"]
    # a fresh run (no checkpoints) gives byte-identical weights and quality metrics
    shutil.rmtree(in_tmp / "checkpoints")
    pretrain.main()
    assert (in_tmp / "metrics" / "pretrain.json").read_bytes() == metrics
    assert (in_tmp / "models" / "pretrained" / "model.safetensors").read_bytes() == weights
    assert encoder_card_text("pretrained_card") == readme
    # changed params: the old checkpoints are moved aside, not used
    params = yaml.safe_load((in_tmp / "params.yaml").read_text())
    params["pretrain"]["learning_rate"] = 5e-4
    (in_tmp / "params.yaml").write_text(yaml.safe_dump(params))
    pretrain.main()
    assert len(list((in_tmp / "checkpoints" / "pretrain" / "stale").iterdir())) == 2
    assert (in_tmp / "models" / "pretrained" / "model.safetensors").read_bytes() != weights
    client = MlflowClient(mlflow_in_tmp)
    runs = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id])
    assert len(runs) == 3
    assert all(r.info.status == "FINISHED" for r in runs)
    assert all(r.data.tags["stage"] == "pretrain" and r.data.tags["model_dvc_md5"].endswith(".dir") for r in runs)
    assert "eval_mlm_loss" in runs[0].data.metrics


def test_two_phase_stage_switches_data_at_the_right_step(in_tmp, mlflow_in_tmp, raw, one_thread):
    """The GPU profiles' mechanics on a tiny stand-in: phase 1 on seq 32 (data/pretraining), phase 2 on seq 48
    (data/pretraining/seq48/), switched after 75% of the steps; the checkpoints record the phase."""
    import json

    import torch

    from stages import pretrain
    from tests.pretrain_fixtures import save_pretraining_data

    pretrain_workspace(in_tmp, raw, max_steps=4, save_steps=3, eval_steps=3, save_total_limit=3,
               phases=[{"max_seq_length": 32, "fraction": 0.75}, {"max_seq_length": 48, "fraction": 0.25}])
    save_pretraining_data(in_tmp / "data" / "pretraining" / "seq48", 40, 16, max_seq_length=48)
    pretrain.main()
    metas = {p.name: json.loads((p / "meta.json").read_text())
             for p in (in_tmp / "checkpoints" / "pretrain").iterdir()}
    assert {k: v["phase"] for k, v in metas.items()} == {"step-00000003": "seq32", "step-00000004": "seq48"}
    state = torch.load(in_tmp / "checkpoints" / "pretrain" / "step-00000004" / "state.pt", weights_only=True)
    phases = {r["step"]: r["phase"] for r in state["history"] if "train_loss" in r}
    assert phases == {1: 0, 2: 0, 3: 0, 4: 1}


def test_a_peak_measured_on_shared_cores_says_so_and_by_how_much():
    """The MFU's denominator is measured at start; on a busy machine it was 0.021 against 0.15 TFLOP/s idle, so the
    timing file says when other processes held the cores (their share of the CPUs) instead of a meaningless MFU."""
    import os
    import subprocess
    import sys
    import time

    from bert_pipeline.evaluation.speed import BUSY_SHARE, MatmulPeak, OtherProcesses, measure_matmul_peak

    assert MatmulPeak(1.5e11, 0.05).warning is None
    text = MatmulPeak(2.1e10, 0.75).warning
    assert "other processes used 75% of the" in text and "(0.0210 TFLOP/s)" in text and "about 4.0x" in text
    assert MatmulPeak(9e14, None).warning is None  # an accelerator's peak is not lowered by host processes
    cores = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * cores)]
    try:
        time.sleep(0.5)
        busy = measure_matmul_peak(size=256, seconds=1.0)
        with OtherProcesses() as sleeping:  # this process idle: the hogs are the whole machine's work
            time.sleep(1.0)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert busy.flops > 0
    assert busy.other_share > BUSY_SHARE, busy
    assert busy.warning and f"used {100 * busy.other_share:.0f}% of the {cores} CPUs" in busy.warning
    assert sleeping.share > 0.8


def test_unigram_loss_is_the_held_out_cross_entropy_of_smoothed_training_frequencies():
    import math

    import datasets

    from bert_pipeline.train.pretrain import target_counts, unigram_loss, unigram_token_id

    # token ids 0-1 special, 2-5 words; targets: train 2,2,2,3 (+ a special that must not count), held out 2,3,4
    train = datasets.Dataset.from_list([{"masked_lm_ids": [2, 2, 1]}, {"masked_lm_ids": [2, 3]}])
    validation = datasets.Dataset.from_list([{"masked_lm_ids": [2, 3]}, {"masked_lm_ids": [4]},
                                             {"masked_lm_ids": [5, 5, 5]}])
    specials = {0, 1}
    assert target_counts(train, specials).tolist() == [0, 0, 3, 1]
    assert unigram_token_id(train, specials) == 2
    # add-0.5 over the 4 words of a 6-token vocabulary: 3.5, 1.5, 0.5, 0.5 of 6
    expected = -(math.log(3.5 / 6) + math.log(1.5 / 6) + math.log(0.5 / 6)) / 3
    assert unigram_loss(train, validation, specials, vocab_size=6, limit=2) == pytest.approx(expected, rel=1e-12)
    # all three held-out instances: three more targets of the rarest kind
    everything = -(math.log(3.5 / 6) + math.log(1.5 / 6) + 4 * math.log(0.5 / 6)) / 6
    assert unigram_loss(train, validation, specials, vocab_size=6) == pytest.approx(everything, rel=1e-12)
    with pytest.raises(ValueError, match="no MLM target"):
        unigram_loss(train, datasets.Dataset.from_list([{"masked_lm_ids": [1]}]), specials, vocab_size=6)
