"""BERT, RoBERTa, ALBERT (and, for the shared checks, ModernBERT and DeBERTa: tests/test_new_families.py has their
own) through the model code (bert_pipeline.model.families): configs of the same size, ALBERT's
parameter count with sharing, our objective's loss equal to the stock model's, every folder loading with the Auto
classes and fine-tuning a step, same-family distillation, and the params checks."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    RobertaTokenizerFast,
)

from bert_pipeline.data.bpe import save_bpe_tokenizer, train_bpe
from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.data.tokenizer import load_tokenizer
from bert_pipeline.errors import PipelineError
from bert_pipeline.model import configs
from bert_pipeline.model.distillation import DistillationModel, build_student, layer_map, load_teacher
from bert_pipeline.model.families import FAMILIES, family_of
from bert_pipeline.model.heads import MEAN_POOLING_CLASSES, sequence_classifier_class
from bert_pipeline.model.objectives import MaskedPositionPretrainer
from bert_pipeline.train.pretrain import build_pretraining_model
from tests.conftest import params_error, synthetic_texts
from tests.tiny_models import tiny_tokenizer


def roberta_tokenizer(tmp_path):
    """A small byte-level BPE tokenizer trained and saved as the pipeline's (RoBERTa's special tokens at ids 0..4, no
    prefix space), loaded as RobertaTokenizerFast."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    save_bpe_tokenizer(train_bpe(lambda: synthetic_texts(40), vocab_size=400, min_frequency=1), tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    assert isinstance(tokenizer, RobertaTokenizerFast) and tokenizer.add_prefix_space is False
    return tokenizer


def tokenizer_for(family, tmp_path):
    return roberta_tokenizer(tmp_path) if family == "roberta" else tiny_tokenizer()


def new_model(family, tokenizer, *, pair, **kw):
    return build_pretraining_model("scratch", size="tiny", config={}, tokenizer=tokenizer, max_seq_length=32,
                                   with_pair_head=pair, seed=0, family=family, **kw)


def batch(tokenizer, family, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, len(tokenizer), (3, 12), generator=gen)
    ids[:, 0] = tokenizer.cls_token_id
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 2], labels[:, 5] = ids[:, 2], ids[:, 5]
    ids[:, 2] = tokenizer.mask_token_id
    types = torch.zeros_like(ids)
    types[:, 6:] = 1 if FAMILIES[family].token_types else 0
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": types, "labels": labels}


def test_sizes_keep_their_meaning_across_families(tmp_path):
    shapes = {}
    for family in FAMILIES:
        cfg = configs.build_config("mini", 300, {}, family=family, pad_token_id=1 if family == "roberta" else 0)
        assert family_of(cfg).name == family
        shapes[family] = (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size)
    ffn = shapes.pop("modernbert")  # its GeGLU keeps BERT's FFN parameters: 3 * 256 * 704 ~ 8 * 256^2
    assert ffn == (4, 256, 4, 704)
    assert set(shapes.values()) == {(4, 256, 4, 1024)}
    roberta = configs.build_config("tiny", 300, {}, family="roberta", pad_token_id=1, max_seq_length=512)
    assert roberta.type_vocab_size == 1 and roberta.max_position_embeddings == 512 + 2
    with pytest.raises(configs.ModelConfigError, match="max_seq_length 513 exceeds the model's 512 positions"):
        configs.check_max_seq_length(roberta, 513)


def test_albert_with_sharing_counts_one_layer_plus_embeddings():
    cfg = configs.build_config("tiny", 1000, {}, family="albert", embedding_size=32, share_layers=True)
    model = configs.new_pretraining_model(cfg, with_pair_head=True, seed=0)
    vocab, emb, hidden, ffn, positions = 1000, 32, 128, 512, cfg.max_position_embeddings
    embeddings = (vocab + positions + 2) * emb + 2 * emb                  # word, position, type tables; LayerNorm
    mapping = emb * hidden + hidden                                         # E -> H projection
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden + (hidden * ffn + ffn) + (ffn * hidden + hidden) + 2 * hidden
    pooler = hidden * hidden + hidden
    assert configs.count_parameters(model.base_model) == embeddings + mapping + layer + pooler == 267_520
    unshared = configs.new_pretraining_model(
        configs.build_config("tiny", 1000, {}, family="albert", embedding_size=32), with_pair_head=True, seed=0)
    assert configs.count_parameters(unshared.base_model) - configs.count_parameters(model.base_model) == layer


@pytest.mark.parametrize("family,pair", [("bert", True), ("bert", False), ("roberta", False), ("albert", True),
                                         ("albert", False), ("modernbert", False), ("deberta", False)])
def test_our_objective_equals_the_stock_models_loss(family, pair, tmp_path):
    tokenizer = tokenizer_for(family, tmp_path)
    model = new_model(family, tokenizer, pair=pair).eval()
    inputs = batch(tokenizer, family)
    pair_key = {"bert": "next_sentence_label", "albert": "sentence_order_label"}.get(family)
    extra = {pair_key: torch.tensor([0, 1, 0])} if pair else {}
    ours = MaskedPositionPretrainer(model)(**inputs, **extra)
    stock_inputs = {k: v for k, v in inputs.items() if k != "token_type_ids" or FAMILIES[family].token_types}
    stock = model(**stock_inputs, **extra).loss
    assert torch.isfinite(ours.loss)
    assert float(ours.loss) == pytest.approx(float(stock), rel=1e-5)
    assert (ours.pair_loss is not None) == pair


def test_roberta_has_no_pair_head_and_counts_positions_after_padding(tmp_path):
    tokenizer = roberta_tokenizer(tmp_path)
    assert (tokenizer.pad_token_id, tokenizer.mask_token_id) == (1, 4)
    with pytest.raises(PipelineError, match="roberta has no sentence-pair head"):
        new_model("roberta", tokenizer, pair=True)
    model = new_model("roberta", tokenizer, pair=False)
    ids = torch.tensor([[0, 7, 8, 2, 1, 1]])
    positions = model.roberta.embeddings.create_position_ids_from_input_ids(ids, padding_idx=1)
    assert positions.tolist() == [[2, 3, 4, 5, 1, 1]]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_family_loads_with_the_auto_classes_and_fine_tunes_a_step(family, tmp_path):
    tokenizer = tokenizer_for(family, tmp_path / "bpe")
    folder = tmp_path / family
    configs.save_model(new_model(family, tokenizer, pair=FAMILIES[family].pair_head is not None), folder, tokenizer)
    assert type(AutoModelForMaskedLM.from_pretrained(folder)).__name__ == FAMILIES[family].masked_lm_class.__name__
    enc = tokenizer(["the film was good", "alice met bob in paris"], padding=True, return_tensors="pt")
    labels = {
        AutoModelForSequenceClassification: torch.tensor([0, 1]),
        AutoModelForTokenClassification: torch.zeros_like(enc["input_ids"]),
    }
    for auto, target in [*labels.items(), (AutoModelForQuestionAnswering, None),
                         (sequence_classifier_class("mean", family), torch.tensor([1, 0]))]:
        torch.manual_seed(0)
        model = auto.from_pretrained(folder, num_labels=2) if auto is not AutoModelForQuestionAnswering \
            else auto.from_pretrained(folder)
        kw = {"labels": target} if target is not None else {
            "start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([2, 3])}
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss = model(**enc, **kw).loss
        assert torch.isfinite(loss)
        loss.backward()
        optimizer.step()
        assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True)), auto
    assert sequence_classifier_class("mean", family) is MEAN_POOLING_CLASSES.get(family, AutoModelForSequenceClassification)


@pytest.mark.parametrize("family,share", [("roberta", False), ("albert", True), ("albert", False),
                                          ("modernbert", False), ("deberta", False)])
def test_distillation_makes_a_student_of_the_teachers_family(family, share, tmp_path):
    tokenizer = tokenizer_for(family, tmp_path / "bpe")
    kw = {"share_layers": share} if family == "albert" else {}
    teacher = build_pretraining_model("scratch", size="mini", config={}, tokenizer=tokenizer, max_seq_length=32,
                                      with_pair_head=False, seed=0, family=family, **kw)
    configs.save_model(teacher, tmp_path / "teacher", tokenizer)
    loaded = load_teacher(tmp_path / "teacher")
    student, mapping = build_student(loaded, 2)
    assert type(student) is type(teacher) and student.config.num_hidden_layers == 2
    assert mapping == ([0, 0] if share else layer_map(4, 2))
    inputs = batch(tokenizer, family)
    out = DistillationModel(student, loaded, temperature=2.0, alpha_ce=1.0, alpha_mlm=1.0, alpha_cos=1.0)(**inputs)
    assert torch.isfinite(out.loss)
    # the student's first layer is a copy of the teacher layer the map names
    if family == "roberta":
        t_layer, s_layer = loaded.roberta.encoder.layer[mapping[0]], student.roberta.encoder.layer[0]
        assert all(torch.equal(a, b) for a, b in zip(t_layer.parameters(), s_layer.parameters(), strict=True))


def test_params_refuse_what_a_family_cannot_do(raw):
    raw["pretrain"]["model"]["family"] = "roberta"
    raw["create_pretraining_data"].update(objective="nsp", packing="sentences")
    assert params_error(raw) == ("params.yaml: create_pretraining_data.objective: 'nsp' does not fit "
                                 "pretrain.model.family 'roberta' (expected one of none); set one of those as the objective, "
                                 "or pretrain.model.family to one that takes nsp: bert")
    raw["create_pretraining_data"]["objective"] = "sop"
    assert "does not fit pretrain.model.family 'roberta'" in params_error(raw)
    raw["pretrain"]["model"]["family"] = "bert"
    raw["pretrain"]["model"]["share_layers"] = True
    assert "pretrain.model.share_layers: ALBERT's (family albert)" in params_error(raw)
    raw["pretrain"]["model"]["family"] = "albert"
    raw["create_pretraining_data"]["objective"] = "nsp"
    assert "'nsp' does not fit pretrain.model.family 'albert' (expected one of sop, none)" in params_error(raw)
