"""Task kinds' processing (NER label alignment, QA windows and decoding, SQuAD/seqeval metrics), mean pooling."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertTokenizerFast

from bert_pipeline.model import heads
from bert_pipeline.tasks import classification, ner, qa
from tests.tiny_models import bert_tokenizer

WORDS = ["the", "cat", "sat", "on", "mat", "in", "zoe", "koln", "rhine", "river", "near", "big", "dog", "##s",
         "answer", "is", "here", "paris", "a", ".", ",", "é"]
CHARS = list("abcdefghijklmnopqrstuvwxyz")


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizerFast:
    return bert_tokenizer(WORDS + CHARS + ["##" + c for c in CHARS])


# ------------------------------------------------------------------------------------------------- NER
def test_label_alignment_words_of_one_two_and_five_pieces(tokenizer):
    words = ["cat", "dogs", "xqzvw"]  # 1 piece, 2 pieces (dog ##s), 5 pieces (x ##q ##z ##v ##w)
    labels = [3, 1, 2]
    enc = tokenizer([words], is_split_into_words=True)
    pieces = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert pieces == ["[CLS]", "cat", "dog", "##s", "x", "##q", "##z", "##v", "##w", "[SEP]"]
    aligned = [-100, 3, 1, -100, 2, -100, -100, -100, -100, -100]  # the label on each word's first sub-token
    windows = ner.tokenize_ner(tokenizer, [words], [labels], max_length=32, doc_stride=4)
    assert [f["labels"] for f in windows.features] == [aligned]
    # back to words: the first sub-token's prediction per word
    assert ner.word_predictions(windows, [[9, 3, 1, 8, 2, 8, 8, 8, 8, 9]]) == [[3, 1, 2]]


def test_long_sentence_windows_keep_every_word_and_read_each_from_its_most_centred_window(tokenizer):
    """80 words in 16-token windows (14 content tokens, overlap 4): the issue's case, where truncation scored the
    words past max_length as O. Every word gets its own label back, each first sub-token in some window."""
    words = [("dogs" if i % 3 else "cat") for i in range(80)]  # dogs = 2 pieces, so windows start mid-word
    labels = [i % 5 for i in range(80)]
    windows = ner.tokenize_ner(tokenizer, [words], [labels], max_length=16, doc_stride=4)
    assert len(windows.features) > 1
    assert all(len(f["input_ids"]) <= 16 for f in windows.features)
    pieces = [tokenizer.convert_ids_to_tokens(f["input_ids"]) for f in windows.features]
    assert all(p[0] == "[CLS]" and p[-1] == "[SEP]" for p in pieces)
    for f, word_at in zip(windows.features, windows.word_at, strict=True):  # labels sit on first sub-tokens only
        assert [lab for lab, w in zip(f["labels"], word_at, strict=True) if w is not None] == \
            [labels[w] for w in word_at if w is not None]
        assert all(lab == -100 for lab, w in zip(f["labels"], word_at, strict=True) if w is None)
    # a model that predicts each position's gold label recovers all 80 words
    assert ner.word_predictions(windows, [f["labels"] for f in windows.features]) == [labels]
    # a word seen in two windows is read from the one where it is more centred
    seen: dict[int, list[tuple[int, int]]] = {}
    for w, (word_at, context) in enumerate(zip(windows.word_at, windows.context, strict=True)):
        for word, ctx in zip(word_at, context, strict=True):
            if word is not None:
                seen.setdefault(word, []).append((ctx, w))
    twice = [word for word, where in seen.items() if len(where) == 2]
    assert twice
    word = twice[0]
    (ctx_a, win_a), (ctx_b, win_b) = seen[word]
    preds = [[7] * len(f["input_ids"]) for f in windows.features]
    preds[win_a if ctx_a >= ctx_b else win_b] = [1] * len(windows.features[win_a if ctx_a >= ctx_b else win_b]["input_ids"])
    assert ner.word_predictions(windows, preds)[0][word] == 1


def test_ner_takes_a_wordpiece_tokenizer_as_it_is(tokenizer):
    """The prefix space for pre-split words is byte-level BPE's alone (tests/test_vocab_models.py): a WordPiece
    tokenizer is used itself, its windows the ids it gives pre-split words."""
    from bert_pipeline.data.tokenizer import needs_prefix_space, with_prefix_space

    assert not needs_prefix_space(tokenizer.backend_tokenizer) and with_prefix_space(tokenizer) is tokenizer
    words = ["the", "cat", "sat", "on", "mat"]
    windows = ner.tokenize_ner(tokenizer, [words], None, max_length=32, doc_stride=4)
    assert windows.features[0]["input_ids"] == tokenizer([words], is_split_into_words=True)["input_ids"][0]


def test_ner_windows_refuse_a_stride_that_leaves_no_step(tokenizer):
    with pytest.raises(ValueError, match="doc_stride 14 must be below max_length 16 minus 2 special tokens"):
        ner.tokenize_ner(tokenizer, [["cat"]], None, max_length=16, doc_stride=14)


# -------------------------------------------------------------------------------------------------- QA
def _qa_example(prefix: str, repeats: int):
    filler = " ".join(["the big cat sat on the mat ."] * repeats)
    context = f"{prefix}{filler} the answer is paris"
    start = context.index("paris")
    return context, {"text": ["paris"], "answer_start": [start]}


@pytest.mark.parametrize(("prefix", "repeats"), [("", 3), ("Zoë in Köln, é é. ", 2)])
def test_qa_answer_only_in_second_window_found_and_mapped_to_characters(tokenizer, prefix, repeats):
    # question = 8 tokens, so a 32-token window holds 21 context tokens; stride 8 -> windows start at 0 and 13.
    # The context has 28 (27) tokens with "paris" last: it lies only in the second window.
    context, answer = _qa_example(prefix, repeats)
    feats = qa.prepare_qa_features(tokenizer, ["where is the answer"], [context], [answer], max_length=32, doc_stride=8)
    n_windows = len(feats["input_ids"])
    assert n_windows == 2
    assert feats["example_index"] == [0, 0]
    # the answer is not in the first window: it points to [CLS]
    assert (feats["start_positions"][0], feats["end_positions"][0]) == (0, 0)
    inside = [w for w in range(n_windows) if feats["start_positions"][w] > 0]
    assert inside
    assert inside[0] == 1
    w = inside[0]
    s, e = feats["start_positions"][w], feats["end_positions"][w]
    offs = feats["offset_mapping"][w]
    assert context[offs[s][0]:offs[e][1]] == "paris"
    # decode: logits peaked at the answer's tokens in window 1, noise elsewhere
    rng = np.random.default_rng(0)
    starts = [rng.normal(0, 0.1, len(ids)) for ids in feats["input_ids"]]
    ends = [rng.normal(0, 0.1, len(ids)) for ids in feats["input_ids"]]
    starts[w][s] += 5.0
    ends[w][e] += 5.0
    starts[0][0] += 50.0  # a huge [CLS] score must not win: SQuAD v1.1 always has an answer
    ends[0][0] += 50.0
    (text, a, b, *_), = qa.decode_qa([context], feats["example_index"], feats["offset_mapping"], starts, ends, 20, 30)
    assert (text, a, b) == ("paris", answer["answer_start"][0], answer["answer_start"][0] + 5)


def test_qa_decoding_respects_max_answer_length_and_order(tokenizer):
    context = "the cat sat on the mat near the rhine river"
    feats = qa.prepare_qa_features(tokenizer, ["where"], [context], None, max_length=64, doc_stride=16)
    n = len(feats["input_ids"][0])
    ctx = [k for k, o in enumerate(feats["offset_mapping"][0]) if o is not None]
    s_log, e_log = np.zeros(n), np.zeros(n)
    s_log[ctx[1]], e_log[ctx[-1]] = 10.0, 10.0  # "cat" .. "river": 9 tokens
    e_log[ctx[0]] = 9.0  # end before start: invalid
    e_log[ctx[3]] = 5.0  # "cat sat on": 3 tokens
    (text, *_), = qa.decode_qa([context], [0], feats["offset_mapping"], [s_log], [e_log], 20, 30)
    assert text == "cat sat on the mat near the rhine river"
    (text, *_), = qa.decode_qa([context], [0], feats["offset_mapping"], [s_log], [e_log], 20, 3)
    assert text == "cat sat on"


# --------------------------------------------------------------------------------------------- pooling
def test_mean_pooling_ignores_padding_and_cls_head_differs(tokenizer):
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, num_labels=2)
    torch.manual_seed(0)
    model = heads.MEAN_POOLING_CLASSES["bert"](cfg).eval()
    short = tokenizer(["the cat"], return_tensors="pt")
    padded = tokenizer(["the cat"], padding="max_length", max_length=12, return_tensors="pt")
    with torch.no_grad():
        a = model(**short).logits
        b = model(**padded).logits
        out = model(**short, labels=torch.tensor([1]))
    assert torch.allclose(a, b, atol=1e-5)
    assert out.loss.item() == pytest.approx(torch.nn.functional.cross_entropy(a, torch.tensor([1])).item(), rel=1e-5)
    with pytest.raises(ValueError, match="mean"):
        heads.sequence_classifier_class("mean", "distilbert")


def test_regression_loss_keeps_float32_targets_under_bf16_autocast(tokenizer):
    """A bf16 target has 8 bits of mantissa: the MSE is computed from the float32 targets (issue 57, item 8)."""
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, num_labels=1, problem_type="regression")
    torch.manual_seed(0)
    model = heads.MEAN_POOLING_CLASSES["bert"](cfg).eval()
    batch = tokenizer(["the cat", "the dog sat"], padding=True, return_tensors="pt")
    targets = torch.tensor([0.123457, 1.987654])  # neither is a bf16 number
    assert not torch.equal(targets.to(torch.bfloat16).float(), targets)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch, labels=targets)
    assert out.logits.dtype == torch.bfloat16 and out.loss.dtype == torch.float32
    exact = ((out.logits.float().view(-1) - targets) ** 2).mean()
    assert out.loss.item() == pytest.approx(exact.item(), rel=1e-6)


# --------------------------------------------------------------------------------------------- metrics
def test_squad_normalisation_em_f1_hand_worked():
    assert qa.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert qa.normalize_answer("a cat, an owl and THE dog") == "cat owl and dog"
    assert qa.exact_match("the Rhine.", "Rhine") == 1.0
    # pred "river rhine bank" vs gold "the rhine river": overlap 2, P = 2/3, R = 2/2 -> F1 = 0.8
    assert qa.token_f1("river rhine bank", "the rhine river") == pytest.approx(0.8)
    assert qa.token_f1("paris", "london") == 0.0
    # question 1: EM 1 (second gold matches), question 2: EM 0, F1 = max(0.8, 0) -> means 0.5 and 0.9
    got = qa.squad_metrics(["Rhine", "river rhine bank"], [["Danube", "the Rhine"], ["the rhine river", "x"]])
    assert got == {"exact_match": 0.5, "f1": pytest.approx(0.9)}


def test_classification_and_ner_metrics_hand_worked():
    # gold 0 0 1 1, pred 0 1 1 1: acc 3/4; F1(0) = 2/3, F1(1) = 0.8 -> macro 0.7333
    got = classification.classification_metrics([0, 0, 1, 1], [0, 1, 1, 1], 2)
    assert got["accuracy"] == 0.75
    assert got["macro_f1"] == pytest.approx((2 / 3 + 0.8) / 2)
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "O"]]
    got = ner.ner_metrics(gold, pred)  # 2 of 3 predicted entities right, 2 of 3 gold found
    assert got["precision"] == pytest.approx(2 / 3)
    assert got["recall"] == pytest.approx(2 / 3)
    assert got["f1_PER"] == 1.0
    assert got["f1_LOC"] == 0.0
    assert got["f1_ORG"] == pytest.approx(2 / 3)


def test_long_question_is_cut_and_stride_capped(tokenizer):
    question = " ".join(["the big cat sat on the mat ."] * 6)  # 48 tokens
    context, answer = _qa_example("", 3)
    feats = qa.prepare_qa_features(tokenizer, [question], [context], [answer], max_length=32, doc_stride=16)
    assert all(len(ids) <= 32 for ids in feats["input_ids"])
    q_len = feats["input_ids"][0].index(tokenizer.sep_token_id) - 1
    assert q_len == 16  # max_length // 2
    hits = [w for w in range(len(feats["input_ids"])) if feats["start_positions"][w] > 0]
    w = hits[0]
    s, e = feats["start_positions"][w], feats["end_positions"][w]
    assert context[feats["offset_mapping"][w][s][0]:feats["offset_mapping"][w][e][1]] == "paris"
