"""bert_pipeline.model.configs: sizes, config errors, masked-position head == stock loss, standard save/load."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    BertForMaskedLM,
    BertForPreTraining,
    BertForSequenceClassification,
    BertModel,
)

from bert_pipeline.model.configs import (
    ModelConfigError,
    build_config,
    load_pretraining_model,
    load_weights,
    new_pretraining_model,
    save_model,
    set_dropout,
    training_flops_per_step,
)
from bert_pipeline.model.objectives import MaskedPositionPretrainer
from bert_pipeline.model.sizes import SIZES
from tests.pretrain_fixtures import VOCAB_SIZE, make_instances, pad_collate, tiny_config


def test_sizes_have_published_shapes():
    shapes = {k: (v["num_hidden_layers"], v["hidden_size"]) for k, v in SIZES.items()}
    assert shapes == {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512), "medium": (8, 512),
                      "base": (12, 768), "large": (24, 1024)}
    with torch.device("meta"):
        base = BertForPreTraining(build_config("base", 30522))
    n = sum(p.numel() for p in base.bert.parameters())
    assert 108e6 < n < 111e6  # BERT-Base: 110M
    assert SIZES["large"]["num_attention_heads"] == 16


def test_build_config_overrides_and_vocab():
    cfg = build_config("mini", 8000, {"hidden_dropout_prob": 0.0}, max_seq_length=128)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size, cfg.hidden_dropout_prob) == (4, 256, 8000, 0.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("huge", 100, None, None), "pretrain.model.size: unknown size 'huge', expected one of tiny, mini"),
        (("tiny", 100, {"vocab_size": 99}, None), "pretrain.model.config.vocab_size: 99 does not match"),
        (("tiny", 100, {"max_position_embeddings": 64}, 128), "max_seq_length 128 exceeds the model's "
                                                              "max_position_embeddings 64"),
        (("tiny", 100, {"hidden_sise": 3}, None), "pretrain.model.config.hidden_sise: not a BertConfig field"),
        (("tiny", 100, {"num_attention_heads": 3}, None), "hidden_size 128 is not a multiple"),
    ],
)
def test_build_config_errors_are_one_line(args, message):
    with pytest.raises(ModelConfigError) as err:
        build_config(*args)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("pair_key", ["next_sentence_label", None])
def test_masked_position_head_matches_stock_loss_and_grads(pair_key):
    batch = pad_collate(make_instances(6, seed=1, pair_key=pair_key))
    model = new_pretraining_model(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                                  with_pair_head=pair_key is not None, seed=0)
    stock = model(**batch)
    stock.loss.backward()
    stock_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    ours = MaskedPositionPretrainer(model)(**batch)
    ours.loss.backward()
    torch.testing.assert_close(ours.loss, stock.loss, rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        if name in stock_grads:
            torch.testing.assert_close(p.grad, stock_grads[name], rtol=1e-4, atol=1e-6)
    assert int(ours.mlm_count) == int((batch["labels"] != -100).sum())
    # accuracy counts agree with the stock logits
    logits = stock.logits if pair_key is None else stock.prediction_logits
    mask = batch["labels"] != -100
    assert int(ours.mlm_correct) == int((logits.argmax(-1)[mask] == batch["labels"][mask]).sum())


def test_sdpa_and_saved_folder_loads_with_auto_classes(tmp_path):
    batch = pad_collate(make_instances(3, seed=2))
    model = new_pretraining_model(tiny_config(), with_pair_head=True, seed=0)
    assert model.config._attn_implementation == "sdpa"
    save_model(model, tmp_path / "pt")
    assert (tmp_path / "pt" / "model.safetensors").exists()
    model.eval()
    loaded = AutoModelForPreTraining.from_pretrained(tmp_path / "pt").eval()
    assert isinstance(loaded, BertForPreTraining)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).prediction_logits, model(**batch).prediction_logits)
    mlm = AutoModelForMaskedLM.from_pretrained(tmp_path / "pt")
    assert isinstance(mlm, BertForMaskedLM)
    torch.testing.assert_close(mlm.cls.predictions.transform.dense.weight,
                               model.cls.predictions.transform.dense.weight)


def test_checkpoint_without_mlm_head_gets_fresh_head_logged(tmp_path, caplog):
    encoder = BertModel(tiny_config())
    encoder.save_pretrained(tmp_path / "enc")
    with caplog.at_level(logging.WARNING, logger="bert_pipeline.model.configs"):
        model = load_pretraining_model(tmp_path / "enc", with_pair_head=False, seed=3)
    assert "freshly initialised" in caplog.text
    assert "cls.predictions" in caplog.text
    torch.testing.assert_close(model.bert.encoder.layer[0].attention.self.query.weight,
                               encoder.encoder.layer[0].attention.self.query.weight)
    assert model.get_input_embeddings().weight.shape[0] == VOCAB_SIZE


def test_load_weights_says_in_one_line_what_is_new_and_unused(tmp_path, capfd, caplog):
    save_model(new_pretraining_model(tiny_config(), with_pair_head=True, seed=0), tmp_path / "pt")
    with caplog.at_level(logging.INFO):
        model, info = load_weights(BertForSequenceClassification, tmp_path / "pt", num_labels=3)
    assert model.classifier.out_features == 3
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    assert any(k.startswith("cls.predictions") for k in info["unexpected_keys"])
    lines = [r.getMessage() for r in caplog.records if "new weights" in r.getMessage()]
    assert lines == [f"BertForSequenceClassification from {tmp_path / 'pt'}: new weights classifier (2 tensors); "
                     "checkpoint weights not used: cls.predictions (5 tensors), cls.seq_relationship (2 tensors)"]
    # transformers' own per-tensor table (written by its handler to stderr) is gone; other levels are restored
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "LOAD REPORT" not in caplog.text
    assert "were not sharded" not in err + caplog.text  # transformers' check when that logger's level >= WARNING
    assert logging.getLogger("transformers.modeling_utils").level == logging.NOTSET
    assert not logging.getLogger("transformers.modeling_utils").filters


def test_flops_masked_head_smaller_than_full():
    cfg = build_config("mini", 8000)
    full = training_flops_per_step(cfg, 32, 128, 600, full_decoder=True)
    ours = training_flops_per_step(cfg, 32, 128, 600, full_decoder=False)
    encoder_only = 3 * 4 * 32 * 128 * (8 * 256**2 + 4 * 256 * 1024 + 4 * 128 * 256)
    assert ours < full
    assert full - ours == pytest.approx(3 * (32 * 128 - 600) * (2 * 256**2 + 2 * 256 * 8000))
    assert ours > encoder_only


def test_set_dropout_turns_every_dropout_off_and_leaves_the_config(tmp_path):
    """Pre-training without dropout: training-mode forwards become deterministic, the saved config keeps 0.1."""
    model = new_pretraining_model(tiny_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1), True, seed=0)
    model.train()
    ids = torch.randint(5, VOCAB_SIZE, (2, 12))
    assert not torch.equal(model(input_ids=ids).prediction_logits, model(input_ids=ids).prediction_logits)
    assert set_dropout(model, 0.0) >= 2 * model.config.num_hidden_layers + 1  # attention + hidden per layer, embeddings
    assert torch.equal(model(input_ids=ids).prediction_logits, model(input_ids=ids).prediction_logits)
    save_model(model, tmp_path)
    saved = BertForPreTraining.from_pretrained(tmp_path)
    assert saved.config.hidden_dropout_prob == saved.config.attention_probs_dropout_prob == 0.1
    with pytest.raises(ValueError, match="dropout: expected a probability in \\[0, 1\\), got 1.0"):
        set_dropout(model, 1.0)
