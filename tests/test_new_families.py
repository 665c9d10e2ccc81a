"""ModernBERT and DeBERTa (issue 38) through the pipeline's own code: the config builder's shapes and parameter
counts, no token types anywhere (the saved tokenizer, the fine-tuning features), one fine-tuning step per task kind
through ``bert_pipeline.train.finetune_loop``, same-family distillation, ONNX export parity, and the params schema.
The shared checks (the masked-position loss equals the stock class's, the Auto classes) are in
tests/test_families.py, parametrized over every family."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DebertaV2ForMaskedLM,
    ModernBertForMaskedLM,
    ModernBertForSequenceClassification,
)

from bert_pipeline import tasks
from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.model import configs
from bert_pipeline.model.distillation import build_student, layer_map, load_teacher
from bert_pipeline.model.families import FAMILIES, encoder_of, family_of
from bert_pipeline.model.heads import MEAN_POOLING_CLASSES, load_sequence_classifier
from bert_pipeline.model.objectives import masked_lm_forward
from bert_pipeline.train import finetune_loop
from bert_pipeline.train.pretrain import build_pretraining_model
from bert_pipeline.train.runtime import make_runtime
from tests.conftest import params_error
from tests.tiny_models import WORDS, bert_tokenizer

NEW = ["modernbert", "deberta"]
TASK = {"max_length": 32, "doc_stride": 8}


def pretrained(family, folder, size="tiny"):
    """A freshly initialised pre-training model of ``family`` saved as the pretrain stage saves it, with a WordPiece
    ``BertTokenizerFast`` that returns token types (as the pipeline's own WordPiece tokenizer does)."""
    tok = bert_tokenizer(WORDS)
    assert "token_type_ids" in tok.model_input_names
    model = build_pretraining_model("scratch", size=size, config={}, tokenizer=tok, max_seq_length=32,
                                    with_pair_head=False, seed=0, family=family)
    configs.save_model(model, folder, tok)
    return model, tok


def masked_batch(tok, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, len(tok), (3, 12), generator=gen)
    ids[:, 0] = tok.cls_token_id
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 2], labels[:, 7] = ids[:, 2], ids[:, 7]
    ids[:, 2] = tok.mask_token_id
    mask = torch.ones_like(ids)
    mask[0, 10:] = 0
    return ids, mask, labels


# ------------------------------------------------------------------------------------------------ configs
def test_modernbert_config_keeps_the_size_and_bert_ffn_parameters():
    cfg = configs.build_config("tiny", 8192, {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.2},
                               family="modernbert", pad_token_id=0, cls_token_id=2, sep_token_id=3)
    assert family_of(cfg) is FAMILIES["modernbert"] and cfg.model_type == "modernbert"
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size) == (2, 128, 2, 320)
    assert cfg.layer_types == ["full_attention", "full_attention"]
    assert (cfg.cls_token_id, cfg.sep_token_id, cfg.bos_token_id, cfg.eos_token_id, cfg.pad_token_id) == (2, 3, 2, 3, 0)
    assert (cfg.mlp_dropout, cfg.embedding_dropout, cfg.attention_dropout) == (0.1, 0.1, 0.2)
    assert not hasattr(cfg, "hidden_dropout_prob") and cfg.sparse_prediction is False
    assert cfg.max_position_embeddings == 512
    assert configs.build_config("base", 8192, family="modernbert").intermediate_size == 2048
    # parameters, counted by hand: no biases except the decoder's; layer 0 has no attention LayerNorm
    model = configs.new_pretraining_model(cfg, with_pair_head=False, seed=0)
    assert model.config._attn_implementation == "sdpa"
    v, h, i = 8192, 128, 320
    layer = 3 * h * h + h * h + h * 2 * i + i * h + h  # Wqkv, Wo, Wi (H -> 2I), Wo (I -> H), mlp_norm
    encoder = v * h + h + layer + (layer + h) + h      # embeddings + norm, layers, final norm
    assert configs.count_parameters(model.base_model) == encoder == 1_426_048
    assert configs.count_parameters(model) == encoder + h * h + h + v == 1_450_752  # head dense + norm, decoder bias
    bert_ffn, glu_ffn = 2 * h * 4 * h, 3 * h * i
    assert abs(glu_ffn - bert_ffn) / bert_ffn < 0.07
    # model FLOPs count the GeGLU's three matrices (6 H I per token), not BERT's two (4 H I)
    assert configs.training_flops_per_step(cfg, 1, 8, 0, full_decoder=False) == 3.0 * (
        2 * 8 * (8 * h * h + 6 * h * i + 4 * 8 * h) + 2 * h * h)
    with pytest.raises(configs.ModelConfigError, match="max_seq_length 513 exceeds the model's max_position_emb"):
        configs.check_max_seq_length(cfg, 513)


def test_deberta_config_is_v3s_relative_attention_without_token_types():
    cfg = configs.build_config("tiny", 300, family="deberta")
    assert cfg.model_type == "deberta-v2" and family_of(cfg) is FAMILIES["deberta"]
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size) == (2, 128, 2, 512)
    assert (cfg.relative_attention, cfg.position_biased_input, cfg.pos_att_type, cfg.position_buckets,
            cfg.norm_rel_ebd, cfg.share_att_key, cfg.type_vocab_size, cfg.legacy) == (
        True, False, ["p2c", "c2p"], 256, "layer_norm", True, 0, True)
    model = configs.new_pretraining_model(cfg, with_pair_head=False, seed=0)
    assert model.config._attn_implementation == "eager"  # no SDPA path for disentangled attention
    emb = model.deberta.embeddings
    assert emb.position_embeddings is None and emb.token_type_embeddings is None
    assert model.deberta.encoder.rel_embeddings.weight.shape == (2 * 256, 128)
    with pytest.raises(configs.ModelConfigError, match="max_seq_length 600 exceeds"):
        configs.check_max_seq_length(cfg, 600)
    with pytest.raises(configs.ModelConfigError, match="has no sentence-pair head"):
        configs.new_pretraining_model(cfg, with_pair_head=True, seed=0)


def test_deberta_mlm_head_of_a_non_legacy_checkpoint():
    """A checkpoint with ``legacy`` False (``lm_predictions``, which reads the word embeddings) gives the stock
    class's logits through the family's MLM head too (the pipeline builds ``legacy`` True: ``cls``)."""
    tok = bert_tokenizer(WORDS)
    cfg = configs.build_config("tiny", len(tok), {"legacy": False}, family="deberta")
    model = configs.new_pretraining_model(cfg, with_pair_head=False, seed=0).eval()
    assert not hasattr(model, "cls") and hasattr(model, "lm_predictions")
    ids, mask, labels = masked_batch(tok)
    with torch.no_grad():
        logits, _, _ = masked_lm_forward(model, ids, labels, mask)
        ref = model(input_ids=ids, attention_mask=mask).logits.reshape(-1, len(tok))[labels.reshape(-1) != -100]
    torch.testing.assert_close(logits, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", NEW)
def test_pretrain_dropout_reaches_every_dropout(family):
    """``pretrain.dropout`` (configs.set_dropout): 0 makes training-mode forwards deterministic, and a rate above
    0 reaches ModernBERT's attention too, whose probability dropout is a float attribute and whose output dropout is
    an Identity when the config's rate is 0 (its default); the config keeps its own rates."""
    from bert_pipeline.model.configs import set_dropout

    tok = bert_tokenizer(WORDS)
    ids, mask, _ = masked_batch(tok)
    given = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    model = configs.new_pretraining_model(configs.build_config("tiny", len(tok), given, family=family),
                                          with_pair_head=False, seed=0).train()
    def logits(m):
        return m(input_ids=ids, attention_mask=mask).logits

    assert not torch.equal(logits(model), logits(model))
    set_dropout(model, 0.0)
    assert torch.equal(logits(model), logits(model))
    if family == "modernbert":
        bare = configs.new_pretraining_model(configs.build_config("tiny", len(tok), family=family),
                                             with_pair_head=False, seed=0).train()
        assert bare.config.attention_dropout == 0.0
        assert isinstance(bare.model.layers[0].attn.out_drop, torch.nn.Identity)
        set_dropout(bare, 0.3)
        attn = [layer.attn for layer in bare.model.layers]
        assert all(a.attention_dropout == 0.3 and a.out_drop.p == 0.3 for a in attn)
        assert bare.config.attention_dropout == 0.0  # the saved config keeps the model's own rates


# ------------------------------------------------------------------------------------------------ token types
@pytest.mark.parametrize("family", NEW)
def test_no_token_types_reach_the_model(family, tmp_path):
    model, tok = pretrained(family, tmp_path / family)
    saved = AutoTokenizer.from_pretrained(str(tmp_path / family))
    assert "token_type_ids" not in saved.model_input_names
    assert "token_type_ids" not in saved("alice met bob", "in paris")
    assert "token_type_ids" in tok("alice met bob", "in paris")  # the caller's tokenizer is unchanged
    # transformers maps model_type modernbert to its generic TokenizersBackend whatever tokenizer_class says (the
    # hub's ModernBERT configs name a wrong class), DeBERTa keeps BertTokenizer: either way the ids are ours
    assert type(saved).__name__ == ("TokenizersBackend" if family == "modernbert" else "BertTokenizer")
    for texts in (("alice met bob", "in paris"), ("The UNBELIEVABLE film!",), ("a" * 150,)):
        assert saved(*texts)["input_ids"] == tok(*texts)["input_ids"]
    assert [saved.pad_token_id, saved.cls_token_id, saved.sep_token_id, saved.mask_token_id, saved.unk_token_id] == [
        tok.pad_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id, tok.unk_token_id]
    # a stray token_type_ids is ignored without a word by both encoders (ModernBERT swallows it in **kwargs,
    # DeBERTa-v3 has no type embedding): the pipeline must not rely on them, and does not pass them
    ids, mask, labels = masked_batch(tok)
    types = torch.zeros_like(ids)
    types[:, 6:] = 1
    model.eval()
    with torch.no_grad():
        plain = encoder_of(model)(input_ids=ids, attention_mask=mask).last_hidden_state
        typed = encoder_of(model)(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        logits, _, _ = masked_lm_forward(model, ids, labels, mask, types)
        ref = model(input_ids=ids, attention_mask=mask).logits.reshape(-1, len(tok))[labels.reshape(-1) != -100]
    assert torch.equal(plain, typed)
    torch.testing.assert_close(logits, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------ fine-tuning
def _task_data(kind):
    if kind == "ner":
        return Dataset.from_dict({"tokens": [["alice", "met", "bob"], ["bob", "visited", "paris", "."]] * 2,
                                  "ner_tags": [[1, 0, 1], [1, 0, 2, 0]] * 2}), ["O", "B-PER", "B-LOC"]
    if kind == "qa":
        return Dataset.from_dict({
            "question": ["who met bob ?", "where did bob go ?"] * 2,
            "context": ["alice met bob in paris", "bob went to london"] * 2,
            "answers": [{"text": ["alice"], "answer_start": [0]}, {"text": ["london"], "answer_start": [12]}] * 2,
        }), None
    data = {"text": ["the film was good", "the plot was awful", "great actors", "a boring story"],
            "label": [1, 0, 1, 0]}
    if kind == "pair_classification":
        data["text_pair"] = ["alice loved it", "bob hated it", "paris", "london"]
    return Dataset.from_dict(data), ["negative", "positive"]


@pytest.mark.parametrize("family", NEW)
@pytest.mark.parametrize("kind,pooling", [("classification", "cls"), ("classification", "mean"),
                                          ("pair_classification", "cls"), ("ner", "cls"), ("qa", "cls")])
def test_one_fine_tuning_step_through_the_pipeline(family, kind, pooling, tmp_path):
    folder = tmp_path / family
    pretrained(family, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    ds, labels = _task_data(kind)
    features = tasks.get(kind).encode_train(tok, ds, TASK)
    assert features and all("token_type_ids" not in f for f in features)
    if kind == "pair_classification":  # the pair is one input: [CLS] a [SEP] b [SEP]
        assert features[0]["input_ids"].count(tok.sep_token_id) == 2
    model = finetune_loop.build_model(kind, str(folder), "pretrained", None, pooling, labels, len(tok), seed=0)
    assert family_of(model.config).name == family
    if tasks.get(kind).pooled and pooling == "mean":
        expected = ModernBertForSequenceClassification if family == "modernbert" else \
            MEAN_POOLING_CLASSES["deberta"]
        assert type(model) is expected and model.config.classifier_pooling == "mean"
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    settings = finetune_loop.TrainSettings(learning_rate=1e-2, epochs=1, batch_size=len(features), warmup_ratio=0.0)
    result = finetune_loop.fit(model, features, tasks.get(kind).collator(tok), settings,
                               lambda _m: {"score": 0.5}, "score", make_runtime("fp32", cpu=True))
    assert result.steps == 1
    assert all(torch.isfinite(torch.tensor(h["train_loss"])) for h in result.history)
    changed = [n for n, p in model.named_parameters() if not torch.equal(before[n], p.detach())]
    assert any(n.startswith(FAMILIES[family].encoder + ".") for n in changed)  # the encoder learned, not only the head
    if tasks.get(kind).pooled:
        model.save_pretrained(tmp_path / "ft")
        reloaded = load_sequence_classifier(str(tmp_path / "ft"))
        assert type(reloaded) is type(model) and reloaded.config.classifier_pooling == pooling


# ------------------------------------------------------------------------------------------------ distillation
@pytest.mark.parametrize("family", NEW)
def test_same_family_student(family, tmp_path):
    teacher, tok = pretrained(family, tmp_path / "teacher", size="mini")
    loaded = load_teacher(tmp_path / "teacher")
    assert type(loaded) is type(teacher) and type(teacher) is FAMILIES[family].masked_lm_class
    student, mapping = build_student(loaded, 2)
    assert mapping == layer_map(4, 2) == [0, 2] and student.config.num_hidden_layers == 2
    layers = (lambda m: m.model.layers) if family == "modernbert" else (lambda m: m.deberta.encoder.layer)
    for i, t in enumerate(mapping):
        t_state, s_state = layers(loaded)[t].state_dict(), layers(student)[i].state_dict()
        assert t_state.keys() == s_state.keys()
        assert all(torch.equal(t_state[k], s_state[k]) for k in t_state)
    matrices = [k for k, v in t_state.items() if v.dim() == 2]
    assert matrices and not any(torch.equal(layers(student)[1].state_dict()[k], layers(loaded)[1].state_dict()[k])
                                for k in matrices)  # student layer 1 is teacher layer 2, not 1
    if family == "modernbert":
        assert student.config.layer_types == ["full_attention", "full_attention"]
    else:  # the encoder's shared relative-position embeddings and their LayerNorm
        assert torch.equal(student.deberta.encoder.rel_embeddings.weight, loaded.deberta.encoder.rel_embeddings.weight)
        assert torch.equal(student.deberta.encoder.LayerNorm.weight, loaded.deberta.encoder.LayerNorm.weight)
    # every layer kept: the student computes the teacher's MLM logits
    whole, _ = build_student(loaded, 4)
    ids, mask, labels = masked_batch(tok)
    whole.eval()
    with torch.no_grad():
        t_logits, _, _ = masked_lm_forward(loaded, ids, labels, mask)
        s_logits, _, _ = masked_lm_forward(whole, ids, labels, mask)
        half, _, _ = masked_lm_forward(student.eval(), ids, labels, mask)
    assert torch.equal(s_logits, t_logits)
    assert not torch.allclose(half, t_logits)


@pytest.mark.parametrize("family", NEW)
def test_task_distillation_students_of_the_fine_tuned_heads(family, tmp_path):
    """Task distillation builds its student from a fine-tuned model (bert_pipeline.train.task_distill): every head
    of both families (mean pooling included) gives a student of its class that, with every layer, computes the
    teacher's logits, and with half of them has half the layers."""
    folder = tmp_path / family
    _, tok = pretrained(family, folder, size="mini")
    enc = AutoTokenizer.from_pretrained(str(folder))(["alice met bob in paris", "a film"], padding=True,
                                                       return_tensors="pt")
    for kind, pooling in (("classification", "mean"), ("ner", "cls"), ("qa", "cls")):
        labels = None if kind == "qa" else ["O", "B-PER", "B-LOC"]
        teacher = finetune_loop.build_model(kind, str(folder), "pretrained", None, pooling, labels, len(tok), seed=0)
        whole, _ = build_student(teacher.eval(), 4)
        half, _ = build_student(teacher, 2)
        assert type(whole) is type(teacher) is type(half) and half.config.num_hidden_layers == 2
        key = "start_logits" if kind == "qa" else "logits"
        with torch.no_grad():
            assert torch.equal(whole.eval()(**enc)[key], teacher(**enc)[key]), (kind, pooling)


def test_modernbert_student_keeps_each_layers_attention_kind(tmp_path):
    """With the paper's alternating pattern instead of every layer global (a params choice), student layer i
    attends as its teacher layer does (local: 64 tokens each side, another RoPE base), so a student of every layer
    still computes the teacher's logits on instances longer than the window."""
    tok = bert_tokenizer(WORDS)
    kinds_ = ["full_attention", "full_attention", "sliding_attention", "full_attention"]  # [0, 2]: not the first two
    model = build_pretraining_model("scratch", size="mini", config={"layer_types": kinds_}, tokenizer=tok,
                                    max_seq_length=256, with_pair_head=False, seed=0, family="modernbert")
    configs.save_model(model, tmp_path / "teacher", tok)
    teacher = load_teacher(tmp_path / "teacher")
    assert teacher.config.layer_types == kinds_
    student, mapping = build_student(teacher, 2)
    assert mapping == [0, 2] and student.config.layer_types == ["full_attention", "sliding_attention"]
    whole, _ = build_student(teacher, 4)
    ids = torch.randint(5, len(tok), (2, 200), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, 150] = ids[:, 150]
    with torch.no_grad():
        t_logits, _, _ = masked_lm_forward(teacher, ids, labels, torch.ones_like(ids))
        s_logits, _, _ = masked_lm_forward(whole.eval(), ids, labels, torch.ones_like(ids))
    assert torch.equal(s_logits, t_logits)


# ------------------------------------------------------------------------------------------------ ONNX
@pytest.mark.parametrize("family", NEW)
def test_onnx_export_parity_of_a_new_family_classifier(family, tmp_path):
    from bert_pipeline.mlops import onnx_export as ox

    folder = tmp_path / "pretrained"
    pretrained(family, folder)
    tok = AutoTokenizer.from_pretrained(str(folder))
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=3)
    for p in model.parameters():  # wider weights: logits that differ between inputs by far more than the tolerance
        if p.dim() > 1:  # (std 0.5 as tests/test_onnx_export.py's BERTs: DeBERTa's logits reach ~20 and differ
            torch.nn.init.normal_(p, std=0.1)  # by 2e-4 between the backends, 1e-5 relative)
    model.eval()
    with torch.no_grad():
        logits = model(**tok(["a good film", "bob hated the plot"], padding=True, return_tensors="pt")).logits
    assert float((logits[0] - logits[1]).abs().max()) > 0.1
    model.save_pretrained(tmp_path / "cls")
    tok.save_pretrained(tmp_path / "cls")
    texts = ["a good film", "bob hated the plot and the actors were awful", "bad",
             "alice met bob in paris and the film was good . " * 5]
    report = ox.export_folder(tmp_path / "cls", tmp_path / "onnx", [{"text": t} for t in texts], max_seq_length=32,
                              doc_stride=8, runs=2, warmup=1)
    assert report.inputs == ["input_ids", "attention_mask"]
    assert report.parity.agreement == 1.0 and report.parity.compared >= len(texts)
    assert max(report.parity.max_abs_diff.values()) < 1e-4


# ------------------------------------------------------------------------------------------------ params
@pytest.mark.parametrize("family", NEW)
def test_params_take_the_families_with_objective_none_only(family, raw):
    from stages.params.root import validate_params

    raw["pretrain"]["model"]["family"] = family
    raw["train_tokenizer"]["model"] = "wordpiece"
    raw["create_pretraining_data"]["objective"] = "none"
    assert validate_params(raw).pretrain.model.family == family
    raw["create_pretraining_data"].update(objective="nsp", packing="sentences")
    assert params_error(raw) == (f"params.yaml: create_pretraining_data.objective: 'nsp' does not fit "
                                 f"pretrain.model.family '{family}' (expected one of none); set one of those as the "
                                 "objective, or pretrain.model.family to one that takes nsp: bert")
    raw["create_pretraining_data"]["objective"] = "none"
    raw["train_tokenizer"]["model"] = "unigram"
    assert f"train_tokenizer.model: 'unigram' does not fit pretrain.model.family '{family}'" in params_error(raw)
    raw["train_tokenizer"]["model"] = "wordpiece"
    raw["pretrain"]["model"]["share_layers"] = True
    assert "pretrain.model.share_layers: ALBERT's (family albert)" in params_error(raw)


def test_stock_classes_named_in_the_table():
    assert FAMILIES["modernbert"].masked_lm_class is ModernBertForMaskedLM
    assert FAMILIES["deberta"].masked_lm_class is DebertaV2ForMaskedLM
    assert FAMILIES["deberta"].model_type == "deberta-v2" and family_of("deberta-v2").name == "deberta"
    assert not any(FAMILIES[f].token_types or FAMILIES[f].pair_head for f in NEW)


# ------------------------------------------------------------------------------------------------ variants
def test_variants_report_has_a_row_per_family_and_keeps_published_figures_apart():
    from bert_pipeline.report.variants import PUBLISHED, RECIPES, variants_record, variants_section

    assert {f: (RECIPES[f].tokenizer, RECIPES[f].objective, RECIPES[f].masking) for f in NEW} == {
        f: ("wordpiece", "none", "dynamic") for f in NEW}
    families = ["bert", "roberta", "albert", *NEW]
    rows = [{"family": f, "parameters": 1_000_000 * (i + 1), "mlm_accuracy": 0.1 + i / 100, "steps": 4,
             "tokens_seen": 10_000, "scores": {"sentiment": {"mean": 0.5 + i / 100}}} for i, f in enumerate(families)]
    record = variants_record(rows, member="pretrained", tasks=["sentiment"], seeds=[42])
    text = variants_section(record, None, "metrics/variants.json", "metrics/variants-timing.json")
    table = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    ours = [r for r in table[2:] if r[0].endswith("(ours)")]
    assert [r[0] for r in ours] == [f"{f} (ours)" for f in families]
    modernbert, deberta = ours[3], ours[4]
    assert modernbert[-4:] == ["ModernBERT-base", "88.4", "149M", ""]
    assert deberta[-4:] == ["DeBERTa-v3-base", "", "184M", ""]  # no GLUE figure we could check: left out
    assert [modernbert[i] for i in (1, 6, 7)] == ["4.00M", "13.00%", "53.0"] and "88.4" not in modernbert[:-4]
    assert f"Published ModernBERT-base: {PUBLISHED['modernbert'].source}." in text
    assert "Published DeBERTa-v3-base: He et al. 2023" in text
