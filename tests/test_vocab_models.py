"""The three vocabulary models of ``train_tokenizer.model`` (wordpiece, bpe, unigram): byte-level BPE round-trips
any UTF-8 text, every folder reloads with ``AutoTokenizer`` to the same ids, Unigram trains deterministically,
continuation rules per model, NER alignment and QA offsets with a BPE tokenizer, pre-training instances built with
one, and the params' one-line errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import numpy as np
import pytest
from tokenizers import Tokenizer

from bert_pipeline.data.masking import VocabInfo
from bert_pipeline.data.tokenizer import load_tokenizer
from bert_pipeline.model.heads import IGNORE_INDEX, decode_qa, prepare_qa_features, tokenize_ner
from stages.params.base import ParamsError
from stages.params.root import load_params
from stages.params.train_tokenizer import TrainTokenizerParams
from stages.train_tokenizer import train_tokenizer
from tests import test_create_pretraining_data as cpd
from tests.conftest import family_params, synthetic_texts, write_params

# words the NER/QA checks need whole ("Hello", "world", "cat") next to synthetic text that splits rarer words
COMMON = ["Hello world, the cat sat on the mat.", "The cat and the world said hello.", "Hello, the cat is here."]
SECTION = dict(vocab_size=400, min_frequency=2, limit_alphabet=1000, strip_accents=None, handle_chinese_chars=True,
               max_input_chars_per_word=100, bert_id_layout=False, model_max_length=512, batch_size=16)


def _corpus() -> datasets.DatasetDict:
    def split(texts: list[str]) -> datasets.Dataset:
        return datasets.Dataset.from_dict({"text": texts})

    return datasets.DatasetDict(train=split(synthetic_texts(40) + COMMON * 30),
                                validation=split(synthetic_texts(6, seed=7) + COMMON))


def _section(model: str, **changes) -> TrainTokenizerParams:
    return TrainTokenizerParams(model=model, lowercase=model != "bpe", **{**SECTION, **changes})


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vocab_models")
    corpus = _corpus()
    out = {}
    for model in ("wordpiece", "bpe", "unigram"):
        out[model] = root / model
        train_tokenizer(_section(model), corpus, out[model])
    return out


def test_bpe_round_trips_arbitrary_utf8(folders):
    rng = random.Random(16)
    texts = ["naïve café résumé", "emoji 😀🎉👩‍👩‍👧 ok", "東京タワー 北京 서울", "tab\tnew\nline\r\n \x00\x01\x1f\x7f",
             "  two leading spaces", "Ünïcödé ‘quotes’ — dash", "\u200bzero\ufeffwidth", "x" * 300]
    for _ in range(30):  # seeded random code points across all planes, surrogates excluded
        cps = [rng.choice([rng.randrange(0x20, 0x80), rng.randrange(0x80, 0xD800), rng.randrange(0xE000, 0x110000)])
               for _ in range(rng.randint(1, 40))]
        texts.append("".join(map(chr, cps)))
    raw = Tokenizer.from_file(str(folders["bpe"] / "tokenizer.json"))
    hf = load_tokenizer(folders["bpe"])
    unk = raw.token_to_id("<unk>")
    for text in texts:
        ids = raw.encode(text, add_special_tokens=False).ids
        assert unk not in ids
        # ByteLevel(add_prefix_space) prepends one space unless the text starts with one; decoding returns it
        want = text if text.startswith(" ") else " " + text
        assert raw.decode(ids).encode("utf-8") == want.encode("utf-8")
        hf_ids = hf(text)["input_ids"]
        assert hf_ids[0] == 0 and hf_ids[-1] == 2 and hf_ids[1:-1] == ids
        assert hf.decode(hf_ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == want


@pytest.mark.parametrize(("model", "specials", "files", "type_ids"), [
    ("wordpiece", ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], ["vocab.txt"], True),
    ("bpe", ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], ["vocab.json", "merges.txt"], False),
    ("unigram", ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"], [], True),
])
def test_each_folder_reloads_with_autotokenizer_to_the_same_ids(folders, model, specials, files, type_ids):
    from transformers import AutoTokenizer

    folder = folders[model]
    for name in ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", *files]:
        assert (folder / name).is_file(), name
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert hf.is_fast
    assert hf.convert_tokens_to_ids(specials) == [0, 1, 2, 3, 4]
    texts = ["Hello world, the cat sat.", "naïve Café 東京 😀", synthetic_texts(1, seed=3)[0]]
    for a, b in [(t, None) for t in texts] + list(zip(texts, texts[1:], strict=False)):
        want = raw.encode(a, b) if b else raw.encode(a)
        got = hf(a, b) if b else hf(a)
        assert got["input_ids"] == want.ids
        assert ("token_type_ids" in got) == type_ids
    if model == "bpe":
        from transformers import RobertaTokenizerFast

        assert isinstance(hf, RobertaTokenizerFast)
        config = json.loads((folder / "tokenizer_config.json").read_text())
        assert config["tokenizer_class"] == "RobertaTokenizerFast" and config["add_prefix_space"] is True
        assert (hf.cls_token_id, hf.sep_token_id, hf.pad_token_id, hf.mask_token_id) == (0, 2, 1, 4)
        assert hf("cat", "b")["input_ids"][:3] == [0, raw.token_to_id("Ġcat"), 2]
        assert hf("a", "b")["input_ids"].count(2) == 3  # <s> A </s></s> B </s>
    if model == "unigram":
        assert (hf.cls_token_id, hf.sep_token_id, hf.pad_token_id, hf.mask_token_id) == (2, 3, 0, 4)
        enc = hf("hello", "world")
        assert enc["input_ids"][0] == 2 and enc["input_ids"][-1] == 3
        assert enc["token_type_ids"] == [0] * (enc["input_ids"].index(3) + 1) + [1] * (
            len(enc["input_ids"]) - enc["input_ids"].index(3) - 1)


def test_unigram_and_bpe_train_deterministically(folders, tmp_path):
    corpus = _corpus()
    for model in ("unigram", "bpe"):
        train_tokenizer(_section(model), corpus, tmp_path / model)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            assert (tmp_path / model / name).read_bytes() == (folders[model] / name).read_bytes(), (model, name)


def test_continuation_rule_per_model(folders):
    expect = {"wordpiece": lambda t: t.startswith("##"), "bpe": lambda t: not t.startswith("Ġ"),
              "unigram": lambda t: not t.startswith("▁")}
    for model, rule in expect.items():
        tok = load_tokenizer(folders[model])
        info = VocabInfo.from_tokenizer(tok)
        special = set(tok.all_special_ids)
        vocab = tok.get_vocab()
        want = np.zeros(info.vocab_size, dtype=bool)
        for token, i in vocab.items():
            want[i] = rule(token) and i not in special and (model != "wordpiece" or len(token) > 2)
        assert np.array_equal(info.is_continuation, want), model
        assert 0 < want.sum() < len(vocab) - len(special)
        assert (info.cls_token_id, info.sep_token_id, info.mask_token_id) == tuple(
            tok.convert_tokens_to_ids([tok.cls_token, tok.sep_token, tok.mask_token]))


def test_ner_alignment_with_bpe_labels_first_pieces_only(folders):
    tok = load_tokenizer(folders["bpe"])
    long_word = "Zyxwvutsrq"
    pieces = tok.tokenize(" " + long_word)
    assert len(pieces) > 1 and tok.tokenize(" Hello") == ["ĠHello"] and tok.tokenize(" world") == ["Ġworld"]
    words = [["Hello", long_word, "world"]]
    windows = tokenize_ner(tok, words, [[1, 2, 0]], max_length=64, doc_stride=8)
    feature = windows.features[0]
    assert "token_type_ids" not in feature
    assert tok.convert_ids_to_tokens(feature["input_ids"]) == ["<s>", "ĠHello", *pieces, "Ġworld", "</s>"]
    assert feature["labels"] == [IGNORE_INDEX, 1, 2] + [IGNORE_INDEX] * (len(pieces) - 1) + [0, IGNORE_INDEX]
    assert windows.word_at[0] == [None, 0, 1] + [None] * (len(pieces) - 1) + [2, None]


@pytest.mark.parametrize("model", ["bpe", "unigram"])
def test_qa_offsets_cover_the_word_not_its_space(folders, model):
    tok = load_tokenizer(folders[model])
    context = "Hello world, the cat sat on Zyxwvutsrq mats."
    answers = [("cat", context.index("cat")), ("Zyxwvutsrq", context.index("Zyxwvutsrq")),
               ("Hello", 0), ("world", context.index("world"))]
    for text, start in answers:
        feats = prepare_qa_features(tok, ["Who sat there?"], [context], [{"text": [text], "answer_start": [start]}],
                                    max_length=64, doc_stride=16)
        offsets = feats["offset_mapping"][0]
        s, e = feats["start_positions"][0], feats["end_positions"][0]
        assert 0 < s <= e
        assert (offsets[s][0], offsets[e][1]) == (start, start + len(text))
        for span in offsets:  # no span starts on the space its Ġ or ▁ stands for
            if span is not None and span[1] > span[0]:
                assert not context[span[0]].isspace()
        if text == "Zyxwvutsrq":
            assert e > s  # a word of several pieces
        n = len(feats["input_ids"][0])
        start_logits, end_logits = np.full(n, -10.0), np.full(n, -10.0)
        start_logits[s], end_logits[e] = 10.0, 10.0
        (span,) = decode_qa([context], feats["example_index"], feats["offset_mapping"], [start_logits],
                            [end_logits], n_best=5, max_answer_length=10)
        assert span.text == text


def test_pretraining_data_with_a_bpe_tokenizer(folders, tmp_path, monkeypatch):
    import shutil

    shutil.copytree(folders["bpe"], tmp_path / "models/tokenizer")
    cpd.make_corpus(tmp_path / "data/corpus")
    cpd.run(tmp_path, monkeypatch, objective="none", whole_word_masking=True, dupe_factor=1)
    tok = load_tokenizer(tmp_path / "models/tokenizer")
    is_word_start = np.array([t.startswith("Ġ") for t in tok.convert_ids_to_tokens(list(range(len(tok))))])
    rows = datasets.load_from_disk(str(tmp_path / "data/pretraining/train"))
    assert len(rows) > 10
    masks = cont_pieces = 0
    for row in rows:
        ids = np.array(row["input_ids"], dtype=np.int64)
        assert ids[0] == tok.cls_token_id == 0 and ids[-1] == tok.sep_token_id == 2
        assert tok.pad_token_id not in ids.tolist() and 101 not in ids[:1]
        positions = np.array(row["masked_lm_positions"], dtype=np.int64)
        original = ids.copy()
        original[positions] = row["masked_lm_ids"]
        assert not np.isin(original[positions], tok.all_special_ids).any()
        masks += int((ids == tok.mask_token_id).sum())
        # whole words by the Ġ rule: a continuation piece is chosen exactly when the piece before it is
        chosen = np.zeros(ids.size, dtype=bool)
        chosen[positions] = True
        cont = ~is_word_start[original] & ~np.isin(original, tok.all_special_ids)
        cont[1:] &= ~np.isin(original[:-1], tok.all_special_ids)
        cont[0] = False
        assert np.array_equal(chosen[1:][cont[1:]], chosen[:-1][cont[1:]])
        cont_pieces += int(cont.sum())
    assert masks > 0 and cont_pieces > 20
    info = json.loads((tmp_path / "data/pretraining/info.json").read_text())
    assert info["special_ids"] == {"pad": 1, "cls": 0, "sep": 2, "mask": 4}


@pytest.mark.parametrize(("changes", "message"), [
    (dict(model="bpe", lowercase=True),
     "train_tokenizer.lowercase: expected false with model bpe (byte-level BPE is cased, as RoBERTa's), got true"),
    (dict(model="bpe", lowercase=False, vocab_size=200), "train_tokenizer.vocab_size: expected int >= 261 with model bpe"),
    (dict(model="sentencepiece"), "train_tokenizer.model: expected one of"),
    (dict(model="wordpiece", bert_id_layout=True, vocab_size=50), "train_tokenizer.vocab_size: expected int > 104"),
])
def test_bad_tokenizer_params_are_one_line(tmp_path, changes, message):
    write_params(tmp_path, train_tokenizer=changes)
    with pytest.raises(ParamsError) as err:
        load_params(tmp_path / "params.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_default_model_is_wordpiece_and_bert_id_layout_binds_wordpiece_only(tmp_path):
    assert load_params().train_tokenizer.model == "wordpiece"
    write_params(tmp_path, family_params("albert"), train_tokenizer=dict(model="unigram", bert_id_layout=True,
                                                                         vocab_size=50))
    assert load_params(tmp_path / "params.yaml").train_tokenizer.vocab_size == 50  # 5 special tokens, not 104
