"""The three vocabulary models of ``train_tokenizer.model`` (wordpiece, bpe, unigram): byte-level BPE round-trips
any UTF-8 text byte for byte (no prefix space, no clean-up; special tokens spelt out are the documented
exception), every folder reloads with ``AutoTokenizer`` to the same ids, Unigram trains deterministically,
continuation rules per model, with a BPE tokenizer: NER alignment (pre-split words with the prefix space, first
word included; the predictor alike), QA offsets, pre-training sentences as their document's running text and
instances built with one (and bench/analysis/mlm_context.py's counts alike), and the params' one-line errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import datasets
import numpy as np
import pytest
from tokenizers import Tokenizer

from bert_pipeline.data.masking import IGNORE_INDEX, VocabInfo
from bert_pipeline.data.tokenizer import load_tokenizer
from bert_pipeline.tasks.ner import tokenize_ner
from bert_pipeline.tasks.qa import decode_qa, prepare_qa_features
from stages.params.base import ParamsError
from stages.params.root import load_params
from stages.params.train_tokenizer import TrainTokenizerParams
from stages.tokenizers import train_tokenizer
from tests import test_create_pretraining_data as cpd
from tests.conftest import family_params, synthetic_texts, write_params

# words the NER/QA checks need whole ("Hello", "world", "cat"; BPE: at a text's start and after a space) next to
# synthetic text that splits rarer words
COMMON = ["Hello world, the cat sat on the mat.", "The cat and the world said Hello.", "Hello, the cat is here.",
          "The world said Hello to the cat."]
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


ROUND_TRIP_CASES = [
    "", " ", "   ", "a", "Hello world", " leading", "trailing ", "  two  inner  and edges  ", "a , b ; c .", " ,",
    "don 't", "naïve café résumé", "e\u0301 combining, n\u0303 and a\u0308\u0301 stacked",
    "emoji 😀🎉 ok", "ZWJ family 👩\u200d👩\u200d👧\u200d👦 and 🏳\ufe0f\u200d🌈", "skin tones 👍🏽 👋🏿 🧑🏻\u200d💻",
    "東京タワー 北京 서울", "中文，标点。", "\x00", "\x07", "\t", "\r\n", "tab\tnew\nline\r\n \x00\x01\x1f\x7f end",
    "\u00a0nbsp\u3000ideographic space\u2028line sep", "\u200bzero\ufeffwidth", "Ünïcödé ‘quotes’ — dash",
    "x" * 300, "\U0010fffd\U0001f600\ue000",
]
"""Fixed cases for the byte-exact round trip: the empty string, spaces at either end and in runs, space before
punctuation (what ``clean_up_tokenization_spaces`` would remove), combining marks, emoji with ZWJ and skin-tone
modifiers, CJK, control characters, Unicode spaces, a private-use and a last-plane code point."""

# code point ranges the random strings mix: ASCII with its controls, Latin-1 + combining marks, Unicode spaces and
# joiners, CJK, emoji (skin tones, ZWJ, variation selectors), and anywhere in the planes (surrogates excluded)
RANGES = [(0x00, 0x80), (0x80, 0x370), (0x2000, 0x2030), (0x3000, 0x3040), (0x4E00, 0xA000), (0xAC00, 0xD7A4),
          (0x1F300, 0x1FB00), (0x1F3FB, 0x1F400), (0xFE00, 0xFE10), (0x200D, 0x200E), (0xE000, 0x110000)]


def random_texts(n: int, seed: int) -> list[str]:
    """``n`` seeded random strings of 0..60 code points from :data:`RANGES` (no surrogates), spaces in between."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        cps = []
        for _ in range(rng.randint(0, 60)):
            lo, hi = rng.choice(RANGES)
            cps.append(rng.randrange(lo, hi) if rng.random() < 0.85 else 0x20)
        texts.append("".join(map(chr, cps)))
    return texts


def test_bpe_round_trips_arbitrary_utf8_byte_for_byte(folders):
    """decode(encode(s)) == s for the saved folder loaded with AutoTokenizer, with and without special tokens, and
    for the raw tokenizers pipeline; no unknown token anywhere."""
    from transformers import AutoTokenizer

    texts = ROUND_TRIP_CASES + random_texts(200, seed=16)
    assert any(any(ord(c) < 0x20 for c in t) for t in texts[-200:])  # the generator reaches the controls too
    raw = Tokenizer.from_file(str(folders["bpe"] / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(str(folders["bpe"]))
    unk = raw.token_to_id("<unk>")
    for text in texts:
        ids = hf(text, add_special_tokens=False)["input_ids"]
        assert unk not in ids, repr(text)
        assert hf.decode(ids).encode("utf-8") == text.encode("utf-8"), repr(text)
        full = hf(text)["input_ids"]
        assert full == [0, *ids, 2], repr(text)
        assert hf.decode(full, skip_special_tokens=True).encode("utf-8") == text.encode("utf-8"), repr(text)
        assert raw.encode(text, add_special_tokens=False).ids == ids, repr(text)
        assert raw.decode(ids).encode("utf-8") == text.encode("utf-8"), repr(text)
    # no space comes or goes: a text's first word has no Ġ, a word after a space has one
    assert hf.convert_ids_to_tokens(hf("Hello world", add_special_tokens=False)["input_ids"]) == ["Hello", "Ġworld"]
    assert hf.convert_ids_to_tokens(hf(" world", add_special_tokens=False)["input_ids"]) == ["Ġworld"]


def test_bpe_special_tokens_spelt_out_are_the_round_trips_one_exception(folders):
    """A literal ``<mask>`` in text is the mask token, as in RoBERTa (fill-mask queries), and takes any whitespace
    before it (lstrip); the other four spelt out are their ids too, decoded back as written and dropped only when
    special tokens are skipped."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folders["bpe"]))
    ids = hf("Paris is the <mask> of France.", add_special_tokens=False)["input_ids"]
    assert ids.count(hf.mask_token_id) == 1
    assert hf.decode(ids) == "Paris is the<mask> of France."
    assert hf.decode(hf("a\t<mask> b", add_special_tokens=False)["input_ids"]) == "a<mask> b"
    for special in ("<s>", "</s>", "<pad>", "<unk>"):
        ids = hf(f"a {special} b", add_special_tokens=False)["input_ids"]
        assert ids.count(hf.convert_tokens_to_ids(special)) == 1
        assert hf.decode(ids) == f"a {special} b"
        assert special not in hf.decode(ids, skip_special_tokens=True)


def test_bpe_folder_is_saved_without_prefix_space_or_clean_up(folders):
    from transformers import AutoTokenizer

    config = json.loads((folders["bpe"] / "tokenizer_config.json").read_text())
    assert (config["add_prefix_space"], config["trim_offsets"], config["clean_up_tokenization_spaces"]) == (
        False, True, False)
    pipeline = json.loads((folders["bpe"] / "tokenizer.json").read_text())
    assert pipeline["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                         "use_regex": True}
    assert (pipeline["post_processor"]["type"], pipeline["post_processor"]["add_prefix_space"],
            pipeline["post_processor"]["trim_offsets"]) == ("RobertaProcessing", False, True)
    hf = AutoTokenizer.from_pretrained(str(folders["bpe"]))  # transformers rebuilds both parts from the config
    loaded = json.loads(hf.backend_tokenizer.to_str())
    assert loaded["pre_tokenizer"]["add_prefix_space"] is False and loaded["post_processor"]["add_prefix_space"] is False
    assert hf.clean_up_tokenization_spaces is False and hf.add_prefix_space is False
    assert hf.decode(hf("a , b .")["input_ids"], skip_special_tokens=True) == "a , b ."


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
        assert config["tokenizer_class"] == "RobertaTokenizerFast" and config["add_prefix_space"] is False
        assert (hf.cls_token_id, hf.sep_token_id, hf.pad_token_id, hf.mask_token_id) == (0, 2, 1, 4)
        assert hf("Hello cat", "b")["input_ids"][:4] == [0, raw.token_to_id("Hello"), raw.token_to_id("Ġcat"), 2]
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
    assert tok.tokenize("Hello") == ["Hello"]  # a text's first word: no Ġ (the NER words must not get this)
    words = [["Hello", long_word, "world"]]
    windows = tokenize_ner(tok, words, [[1, 2, 0]], max_length=64, doc_stride=8)
    feature = windows.features[0]
    assert "token_type_ids" not in feature
    assert tok.convert_ids_to_tokens(feature["input_ids"]) == ["<s>", "ĠHello", *pieces, "Ġworld", "</s>"]
    assert feature["labels"] == [IGNORE_INDEX, 1, 2] + [IGNORE_INDEX] * (len(pieces) - 1) + [0, IGNORE_INDEX]
    assert windows.word_at[0] == [None, 0, 1] + [None] * (len(pieces) - 1) + [2, None]
    # the prefix space was given to that call only: the tokenizer itself still reads text without one
    assert tok.add_prefix_space is False and tok.tokenize("Hello") == ["Hello"]


def test_ner_words_get_their_running_text_ids_first_word_included(folders):
    """Each word, the first of a sentence included, gets the ids it has after a space in running text, so a word
    and its label align the same wherever it stands."""
    tok = load_tokenizer(folders["bpe"])
    sentences = [["Hello", "world", ",", "the", "cat"], ["the", "cat", "said", "Hello"], ["naïve", "東京", "😀", "x"]]
    windows = tokenize_ner(tok, sentences, [[1] * len(w) for w in sentences], max_length=64, doc_stride=8)
    for words, feature, word_at in zip(sentences, windows.features, windows.word_at, strict=True):
        running = tok(" " + " ".join(words), add_special_tokens=False)["input_ids"]
        assert feature["input_ids"] == [0, *running, 2]
        starts = [i for i, w in enumerate(word_at) if w is not None]
        assert [w for w in word_at if w is not None] == list(range(len(words)))
        for i in starts:  # every word starts with Ġ
            assert tok.convert_ids_to_tokens(feature["input_ids"][i]).startswith("Ġ")
    first = windows.features[0]["input_ids"][1]
    last = windows.features[1]["input_ids"][windows.word_at[1].index(3)]
    assert first == last == tok.convert_tokens_to_ids("ĠHello")


def test_with_prefix_space_copies_byte_level_only(folders):
    from tokenizers import pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from bert_pipeline.data.tokenizer import needs_prefix_space, with_prefix_space

    for model in ("wordpiece", "unigram"):  # WordPiece and Unigram come back as they are
        tok = load_tokenizer(folders[model])
        assert not needs_prefix_space(tok.backend_tokenizer) and with_prefix_space(tok) is tok
    tok = load_tokenizer(folders["bpe"])
    spaced = with_prefix_space(tok)
    assert spaced is not tok and spaced.add_prefix_space is True and tok.add_prefix_space is False
    before = json.loads(tok.backend_tokenizer.to_str())
    after = json.loads(spaced.backend_tokenizer.to_str())
    assert (before["pre_tokenizer"]["add_prefix_space"], before["post_processor"]["add_prefix_space"]) == (False, False)
    assert (after["pre_tokenizer"]["add_prefix_space"], after["post_processor"]["add_prefix_space"]) == (True, True)
    assert with_prefix_space(spaced) is spaced  # already spaced
    enc = spaced("Hello world", return_offsets_mapping=True)  # offsets keep the first word's first character
    assert spaced.convert_ids_to_tokens(enc["input_ids"]) == ["<s>", "ĠHello", "Ġworld", "</s>"]
    assert enc["offset_mapping"][1:3] == [(0, 5), (6, 11)]
    # a ByteLevel inside a Sequence is found and switched too
    raw = Tokenizer.from_file(str(folders["bpe"] / "tokenizer.json"))
    raw.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    wrapped = PreTrainedTokenizerFast(tokenizer_object=raw)
    assert needs_prefix_space(wrapped.backend_tokenizer)
    seq = json.loads(with_prefix_space(wrapped).backend_tokenizer.to_str())["pre_tokenizer"]["pretokenizers"]
    assert seq[1]["add_prefix_space"] is True
    assert json.loads(wrapped.backend_tokenizer.to_str())["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] is False


def test_ner_served_on_text_gets_the_prefix_space_it_was_trained_with(folders, tmp_path):
    """The predictor tags text with the tokenizer NER fine-tuning used (every word after a space, the first
    included), character offsets right; the loaded tokenizer itself stays without a prefix space."""
    import torch
    from transformers import RobertaConfig, RobertaForTokenClassification

    from bert_pipeline.evaluation.predictor import load_predictor
    from bert_pipeline.tasks.ner import entities, tagging_windows

    tok = load_tokenizer(folders["bpe"])
    labels = ["O", "B-PER", "I-PER"]
    cfg = RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=66, pad_token_id=1, type_vocab_size=1,
                        id2label=dict(enumerate(labels)), label2id={v: i for i, v in enumerate(labels)})
    torch.manual_seed(0)
    model = RobertaForTokenClassification(cfg)
    with torch.no_grad():  # every token B-PER, so every word is an entity of its own
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 5.0, 0.0]))
    model.save_pretrained(tmp_path / "tagger")
    tok.save_pretrained(tmp_path / "tagger")
    pred = load_predictor(tmp_path / "tagger")
    window_tok, _ = tagging_windows(pred, max_seq_length=64)
    assert window_tok.tokenize("Hello world") == ["ĠHello", "Ġworld"] and pred.tokenizer.tokenize("Hello") == ["Hello"]
    text = "Hello world the cat"
    (found,) = entities(pred, [text], max_seq_length=64)
    assert [(e["type"], e["text"], e["start"], e["end"]) for e in found] == [
        ("PER", "Hello", 0, 5), ("PER", "world", 6, 11), ("PER", "the", 12, 15), ("PER", "cat", 16, 19)]


def test_pretraining_sentences_are_tokenized_as_their_documents_running_text(folders):
    """A document's first sentence as a text's start, the later ones after a space: the ids of the whole text, so a
    sentence's first word is ``ĠThe`` (a word start), not ``The``; WordPiece and Unigram ids do not change."""
    from bert_pipeline.data.shard_builder import tokenize_documents, tokenize_sentences
    from bert_pipeline.data.tokenizer import raw_backend

    docs = [["Hello world, the cat sat.", "The cat said Hello.", "東京 😀 naïve."], ["Hello, the cat is here."]]
    backend = raw_backend(load_tokenizer(folders["bpe"]))
    out = tokenize_documents(backend, docs, np.dtype(np.int64))
    for doc, sents in zip(docs, out, strict=True):
        assert np.concatenate(sents).tolist() == backend.encode(" ".join(doc), add_special_tokens=False).ids
    assert backend.id_to_token(int(out[0][0][0])) == "Hello" == backend.id_to_token(int(out[1][0][0]))  # no Ġ
    for k in (1, 2):  # a later sentence starts with a word start, other ids than the sentence alone would get
        assert backend.id_to_token(int(out[0][k][0])).startswith("Ġ")
        assert out[0][k].tolist() != backend.encode(docs[0][k], add_special_tokens=False).ids
    for model in ("wordpiece", "unigram"):
        other = raw_backend(load_tokenizer(folders[model]))
        flat = [s for doc in docs for s in doc]
        alone = tokenize_sentences(other, flat, np.dtype(np.int64))
        as_text = tokenize_sentences(other, flat, np.dtype(np.int64), [True, False, False, True])
        assert [a.tolist() for a in alone] == [b.tolist() for b in as_text]


def test_mlm_context_bench_counts_the_ids_pretraining_sees(folders):
    """``bench/analysis/mlm_context.py`` counts each sentence with the ids the shards hold: with a BPE tokenizer a
    document's later sentence starts with ``ĠHello``, not a text's first ``Hello``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlm_context", Path(__file__).parents[1] / "bench/analysis/mlm_context.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tokenizer = load_tokenizer(folders["bpe"])
    docs = [["The cat sat.", "Hello, the cat is here."], ["Hello world."], ["The end.", "The cat."]]
    out = bench._sentences(datasets.Dataset.from_dict({"sentences": docs}), tokenizer, limit=2)
    assert [tokenizer.convert_ids_to_tokens(ids)[0] for ids in out] == ["The", "ĠHello", "Hello"]  # limit: 2 docs
    for k, text in enumerate(("The cat sat.", " Hello, the cat is here.", "Hello world.")):
        assert out[k] == tokenizer(text, add_special_tokens=False)["input_ids"]


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


@pytest.mark.parametrize("batch_bytes", [1, 1 << 20])
def test_shard_builder_tokenizes_each_document_as_its_text_over_batches(folders, tmp_path, monkeypatch, batch_bytes):
    """With one sentence per tokenizer batch (a document goes on over batches) as with all in one, a document's
    units are the ids of its whole text: its first sentence at the text's start, the others after a space."""
    from bert_pipeline.data import shard_builder as sb
    from bert_pipeline.data.masking import MaskingRules

    cpd.make_corpus(tmp_path / "corpus", n_train=12, n_val=2)
    job = sb.ShardJob(corpus_dir=str(tmp_path / "corpus"), split="train", tokenizer_path=str(folders["bpe"]),
                      out_dir=str(tmp_path), n_shards=1, n_documents=12, objective="none", max_seq_length=512,
                      short_seq_prob=0.0, rules=MaskingRules(), store_masks=False, dupe_factor=1, seed=0,
                      max_document_tokens=10**6, group_documents=12)
    builder = sb.ShardBuilder(job)
    monkeypatch.setattr(sb, "TOKENIZE_BATCH_BYTES", batch_bytes)
    units = list(builder.units(0, 12, dict.fromkeys(sb.CUT_COUNTS, 0)))
    texts = datasets.load_from_disk(str(tmp_path / "corpus"))["train"]["sentences"]
    assert len(units) == len(texts) == 12 and sum(len(t) > 1 for t in texts) >= 6
    for unit, sentences in zip(units, texts, strict=True):
        assert len(unit) == len(sentences)
        assert np.concatenate(unit).tolist() == builder.backend.encode(" ".join(sentences),
                                                                       add_special_tokens=False).ids


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
