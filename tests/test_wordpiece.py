"""bert_pipeline.data.wordpiece: BERT's pipeline against transformers' reference BertTokenizer, training, saving, metrics."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from transformers import AutoTokenizer
from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

from bert_pipeline.data.sources import MINILM
from bert_pipeline.data.wordpiece import (
    CLS,
    MASK,
    PAD,
    SEP,
    UNK,
    EmptyTrainingDataError,
    VocabTooSmallError,
    build_bert_tokenizer,
    fertility,
    histogram_csv,
    read_vocab_txt,
    rust_parallelism,
    save_tokenizer,
    special_tokens,
    train_wordpiece,
    vocab_txt,
)
from tests.conftest import synthetic_texts

# Strings where a tokenizer can go wrong. Each is checked alone and paired with its neighbour.
TRICKY = [
    "unaffable", "playing", "Hello, World!", "UNAFFABLE PLAYING",
    # accents: composed, decomposed, stacked, in caps
    "Héllo Wörld café naïve", "e\u0301le\u0300ve", "combining a\u0308\u0304 o\u0338", "Ångström Øresund Łódź",
    "grüße STRASSE", "\u0130i\u0131I Dž dž ǅ", "¿Qué? ¡Sí! résumé", "ﬁ ﬀ ligatures Ⅻ ① ² ½",
    # CJK and other scripts
    "中文字符测试", "日本語のテキスト", "日本\u3000語", "한국어 텍스트", "Ελληνικά Русский текст", "العربية עברית",
    "हिन्दी ไทย", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ", "mixed中文and English", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝",
    # punctuation runs
    "Hello,,,world!!!???...", "a--b—c–d", "«quoted» „German“ 'single'", "…ellipsis…", "C++ C# F# .NET",
    "a/b\\c|d~e`f^g", "(parens) [brackets] {braces} <angles>", "don't can't won't", "U.S.A. e.g. i.e.",
    # control, zero-width and odd whitespace
    "tab\tnew\nline\rcr", "zero\u200bwidth\u200djoiner\ufeffbom", "ctrl\x00\x01\x07\x1fchars", "\ufffdreplacement",
    "nbsp\u00a0here\u2003em\u3000ideo", "line\u2028sep\u2029para\x85nel", "\x0bvt\x0cff", "soft\u00adhyphen",
    "tokens\u200e\u200frtl marks", "  leading and trailing  ", "", "   ",
    # emoji
    "emoji 😀👍🏽 🇬🇧 ❤️", "😀😀😀abc", "family 👨\u200d👩\u200d👧",
    # URLs, addresses, numbers with separators
    "https://example.com/path?q=1&x=y#frag", "user@example.com", "www.bbc.co.uk/news",
    "1,234,567.89 and 1.234.567,89", "3.14e-10 $5 €10 ¥20 50%", "1st 2nd 3rd 4th 10:45 2017-03-01",
    "#hashtag @mention", "self-supervised pre-training",
    # word length limit (100 characters)
    "x" * 150, "y" * 100, "z" * 101, "supercalifragilisticexpialidocious " * 3,
    # special tokens in the text
    "[CLS] [SEP] [MASK] [PAD] [UNK]", "a [MASK] b",
]
OPTIONS = [  # (lowercase, strip_accents)
    (True, None), (True, False), (True, True), (False, None), (False, True),
]


@pytest.fixture(scope="session")
def minilm_vocab(raw_data):
    return raw_data / MINILM / "vocab.txt"


def _pairs(strings):
    return list(zip(strings, strings[1:] + strings[:1], strict=True))


def _assert_same_as_reference(ours, ref, strings):
    for s in strings:
        assert ours.encode(s).ids == ref(s)["input_ids"], s
    for a, b in _pairs(strings):
        want = ref(a, b, return_token_type_ids=True)
        got = ours.encode(a, b)
        assert got.ids == want["input_ids"], (a, b)
        assert got.type_ids == want["token_type_ids"], (a, b)


@pytest.mark.parametrize("lowercase,strip_accents", OPTIONS)
def test_minilm_vocab_same_ids_as_reference_bert_tokenizer(minilm_vocab, lowercase, strip_accents):
    ours = build_bert_tokenizer(minilm_vocab, lowercase=lowercase, strip_accents=strip_accents)
    ref = BertTokenizerLegacy(str(minilm_vocab), do_lower_case=lowercase, strip_accents=strip_accents)
    _assert_same_as_reference(ours, ref, TRICKY)


def test_greedy_longest_match_first(tmp_path):
    """The WordPiece example of Devlin et al.'s tokenization.py, on a toy vocabulary, as the reference splits it."""
    pieces = ["un", "##aff", "##able", "play", "##ing", "##s", "u"]
    vocab = {t: i for i, t in enumerate(special_tokens(False) + pieces)}
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    tok = build_bert_tokenizer(vocab)
    ref = BertTokenizerLegacy(str(tmp_path / "vocab.txt"))
    for text, want in [("unaffable", ["un", "##aff", "##able"]), ("Playing", ["play", "##ing"]),
                       ("unaffables", ["un", "##aff", "##able", "##s"]), ("unaff", ["un", "##aff"]), ("plays", ["play", "##s"]), ("player", [UNK]), ("unx", [UNK])]:
        assert tok.encode(text, add_special_tokens=False).tokens == want == ref.tokenize(text)


def test_minilm_known_pieces(minilm_vocab):
    tok = build_bert_tokenizer(minilm_vocab)
    ref = BertTokenizerLegacy(str(minilm_vocab))
    # BERT-Base's real vocabulary holds "una" and "playing", so there: una ##ffa ##ble, playing
    for word in ("unaffable", "playing", "tokenizers", "Unbelievably"):
        assert tok.encode(word, add_special_tokens=False).tokens == ref.tokenize(word)
    assert tok.encode("x" * 150, add_special_tokens=False).tokens == [UNK]
    assert tok.encode("Café", add_special_tokens=False).tokens == ["cafe"]  # accents stripped when lowercasing
    assert [tok.token_to_id(t) for t in (PAD, UNK, CLS, SEP, MASK)] == [0, 100, 101, 102, 103]
    enc = tok.encode("The playing", "tokenizers work")
    assert enc.tokens == [CLS, "the", "playing", SEP, "token", "##izer", "##s", "work", SEP]
    assert enc.type_ids == [0, 0, 0, 0, 1, 1, 1, 1, 1]
    assert tok.decode(enc.ids) == "the playing tokenizers work"


def test_known_divergences_from_python_bert_tokenizer(minilm_vocab, tmp_path):
    """Two documented differences of every `tokenizers`-based BERT (also transformers' own fast BertTokenizer)."""
    ours = build_bert_tokenizer(minilm_vocab)
    ref = BertTokenizerLegacy(str(minilm_vocab))
    # 1. Python's str.lower() writes a word-final capital sigma as final sigma; Rust lowercases it to plain sigma.
    text = "ΟΔΟΣ"
    assert ours.encode(text).ids != ref(text)["input_ids"]
    assert ours.encode(text).ids == ref(text.replace("Σ", "σ"))["input_ids"]
    # 2. Python composes (NFC) before the vocabulary lookup; BertNormalizer does not (seen with a cased vocab).
    vocab = {t: i for i, t in enumerate(special_tokens(False) + ["caf", "##e", "##é", "\u0301", "##\u0301", "café"])}
    (tmp_path / "vocab.txt").write_text("".join(t + "\n" for t in vocab), encoding="utf-8")
    ours = build_bert_tokenizer(vocab, lowercase=False)
    ref = BertTokenizerLegacy(str(tmp_path / "vocab.txt"), do_lower_case=False)
    composed, decomposed = "café", "cafe\u0301"
    assert ref(decomposed)["input_ids"] == ref(composed)["input_ids"] == ours.encode(composed).ids
    assert ours.encode(decomposed).ids != ours.encode(composed).ids


# ------------------------------------------------------------------------------------------ training
def _train(texts, **kw):
    kw.setdefault("vocab_size", 300)
    return train_wordpiece(lambda: iter([texts[i:i + 7] for i in range(0, len(texts), 7)]), **kw)


@pytest.mark.parametrize("limit_alphabet", [None, 1000, 20])
def test_training_is_deterministic(limit_alphabet):
    """tokenizers' own trainer gives a different vocabulary on most runs for this corpus (tokenizers#1794)."""
    texts = synthetic_texts()
    runs = [_train(texts, limit_alphabet=limit_alphabet) for _ in range(3)]
    with rust_parallelism(True):
        runs.append(_train(texts, limit_alphabet=limit_alphabet))
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"  # restored (the package default)
    assert len({t.to_str() for t in runs}) == 1
    assert len({vocab_txt(t) for t in runs}) == 1
    alphabet = {t for t in runs[0].get_vocab() if len(t) == 1}
    counts = Counter(runs[0].normalizer.normalize_str("".join(texts)).replace(" ", ""))
    if limit_alphabet == 20:  # the 20 most frequent characters, ties broken by code point
        assert alphabet == set(sorted(counts, key=lambda c: (-counts[c], c))[:20])
    else:
        assert alphabet == set(counts)


def test_trained_vocab_layout_and_pieces():
    tok = _train(synthetic_texts(), vocab_size=300)
    vocab = tok.get_vocab()
    assert len(vocab) == 300
    specials = special_tokens(True)
    assert [vocab[t] for t in specials] == list(range(104))
    assert (vocab[PAD], vocab["[unused0]"], vocab["[unused98]"], vocab[UNK], vocab[CLS], vocab[SEP], vocab[MASK]) == (
        0, 1, 99, 100, 101, 102, 103)
    # characters right after the special tokens, then their ## forms, then merges
    assert vocab["a"] < vocab["##a"] < vocab["##ing"]
    assert tok.encode("unplayable", add_special_tokens=False).tokens[0] in ("un", "unplay")
    # lowercasing + accent stripping happened before training
    assert "Ö" not in vocab
    assert "ö" not in vocab
    assert "o" in vocab
    words = tok.encode("overplaying", add_special_tokens=False)
    assert "".join(t.removeprefix("##") for t in words.tokens) == "overplaying"
    small = _train(synthetic_texts(), vocab_size=300, bert_id_layout=False)
    assert [small.token_to_id(t) for t in (PAD, UNK, CLS, SEP, MASK)] == [0, 1, 2, 3, 4]


def test_trained_pipeline_matches_reference_on_its_own_vocab(tmp_path):
    """Cased training: the reference BertTokenizer reading our vocab.txt gives our ids (NFC-sensitive strings aside)."""
    nfc_sensitive = {"e\u0301le\u0300ve", "combining a\u0308\u0304 o\u0338"}
    strings = [s for s in TRICKY if s not in nfc_sensitive]
    tok = _train(synthetic_texts() + strings * 2, vocab_size=600, lowercase=False, min_frequency=1)
    (tmp_path / "vocab.txt").write_text(vocab_txt(tok), encoding="utf-8")
    ref = BertTokenizerLegacy(str(tmp_path / "vocab.txt"), do_lower_case=False)
    _assert_same_as_reference(tok, ref, strings)
    assert read_vocab_txt(tmp_path / "vocab.txt") == tok.get_vocab()


def test_vocab_too_small_and_empty_input():
    with pytest.raises(VocabTooSmallError) as err:
        _train(synthetic_texts(), vocab_size=110)
    assert err.value.requested == 110
    assert err.value.needed > 110
    assert "\n" not in str(err.value)
    with pytest.raises(EmptyTrainingDataError):
        _train(["", "   ", "\u200b\x00"], vocab_size=300)
    with pytest.raises(EmptyTrainingDataError):
        _train([], vocab_size=300)


def test_build_rejects_vocab_without_special_tokens():
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        build_bert_tokenizer({"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "a": 4})


# ------------------------------------------------------------------------------------------ saving
@pytest.mark.parametrize("max_chars,cls_name", [(100, "BertTokenizer"), (8, "TokenizersBackend")])
def test_saved_folder_loads_with_autotokenizer_to_same_ids(tmp_path, max_chars, cls_name):
    tok = _train(synthetic_texts(), max_input_chars_per_word=max_chars)
    save_tokenizer(tok, tmp_path, model_max_length=128)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    hf = AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(hf).__name__ == cls_name
    assert hf.model_max_length == 128
    assert (hf.pad_token_id, hf.unk_token_id, hf.cls_token_id, hf.sep_token_id, hf.mask_token_id) == (
        0, 100, 101, 102, 103)
    texts = synthetic_texts(5, seed=1) + TRICKY + ["overplayingly" * 2]
    for text in texts:
        assert hf(text)["input_ids"] == tok.encode(text).ids, text
    for a, b in _pairs([t for t in texts if t]):  # transformers' __call__ takes text_pair="" as no pair at all
        got, want = hf(a, b), tok.encode(a, b)
        assert got["input_ids"] == want.ids
        assert got["token_type_ids"] == want.type_ids
        assert set(got["token_type_ids"]) <= {0, 1}
        assert got["token_type_ids"][-1] == 1
    batch = hf(texts[:3], texts[3:6], padding=True)
    assert [row[: len(tok.encode(a, b).ids)] for row, a, b in zip(batch["input_ids"], texts[:3], texts[3:6],
                                                                  strict=True)] == [
        tok.encode(a, b).ids for a, b in zip(texts[:3], texts[3:6], strict=True)]
    assert read_vocab_txt(tmp_path / "vocab.txt") == tok.get_vocab()
    assert json.loads((tmp_path / "special_tokens_map.json").read_text())["mask_token"] == MASK


def test_save_is_byte_identical(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        save_tokenizer(_train(synthetic_texts()), tmp_path / name)
    for f in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


# ------------------------------------------------------------------------------------------ metrics
def test_fertility_on_known_vocab():
    vocab = {t: i for i, t in enumerate(special_tokens(False) + ["hello", "world", "un", "##aff", "##able", ","])}
    tok = build_bert_tokenizer(vocab)
    metrics, hist = fertility(tok, [["Hello unaffable, world xyz"], [""]])
    # words: hello | un ##aff ##able | , | world | [UNK]
    assert hist == {1: 4, 3: 1}
    assert metrics == {
        "vocab_size": 11, "documents": 2, "words": 5, "tokens": 7,
        "fertility": round(7 / 5, 6), "unk_rate": round(1 / 7, 6), "continuation_share": round(2 / 7, 6),
        "whole_word_share": round(3 / 5, 6),
    }
    assert histogram_csv(hist) == "tokens_per_word,count\n1,4\n3,1\n"
