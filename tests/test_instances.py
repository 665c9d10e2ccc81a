"""Sentence-pair instances (bert_pipeline.data.instances) on synthetic documents whose token ids name their origin.

Token id ``t`` (>= 1000) is unique in the corpus, so ``DOC[t]``, ``SENT[t]`` and ``POS[t]`` (position in its
document) tell where every token of an instance came from.
"""

from __future__ import annotations

import numpy as np
import pytest

from bert_pipeline.data.instances import _truncate, create_instances, cut_sentence, sentence_piece_bounds

CLS, SEP = 101, 102
BASE = 1000


def make_corpus(n_docs: int, seed: int, one_sentence_every: int = 0):
    rng = np.random.default_rng(seed)
    docs, doc_of, sent_of, pos_of = [], [], [], []
    next_id = BASE
    for d in range(n_docs):
        n_sent = 1 if one_sentence_every and d % one_sentence_every == 0 else int(rng.integers(2, 16))
        sents, pos = [], 0
        for s in range(n_sent):
            length = int(rng.integers(3, 45)) if rng.random() > 0.02 else int(rng.integers(100, 200))
            ids = np.arange(next_id, next_id + length)
            next_id += length
            sents.append(ids)
            doc_of += [d] * length
            sent_of += [s] * length
            pos_of += list(range(pos, pos + length))
            pos += length
        docs.append(sents)
    lookup = [np.concatenate((np.full(BASE, -1), np.asarray(a))) for a in (doc_of, sent_of, pos_of)]
    return docs, lookup, next_id - BASE


DOCS, (DOC, SENT, POS), _ = make_corpus(700, seed=0)


def split_rows(inst):
    for i in range(len(inst)):
        row = inst.input_ids[inst.offsets[i]:inst.offsets[i + 1]]
        yield i, row


def segments(row, objective):
    assert row[0] == CLS
    assert row[-1] == SEP
    seps = np.flatnonzero(row == SEP)
    if objective == "none":
        assert seps.size == 1
        return row[1:-1], None
    assert seps.size == 2
    return row[1:seps[0]], row[seps[0] + 1:-1]


def contiguous(tokens):
    return np.all(DOC[tokens] == DOC[tokens[0]]) and np.array_equal(POS[tokens], POS[tokens[0]] + np.arange(tokens.size))


def build(objective, max_seq_length=64, seed=1, docs=DOCS, **kw):
    return create_instances(docs, objective=objective, max_seq_length=max_seq_length, short_seq_prob=0.1,
                            cls_token_id=CLS, sep_token_id=SEP, rng=np.random.default_rng(seed), **kw)


def test_nsp_pairs():
    inst = build("nsp", with_provenance=True)
    assert len(inst) > 2000
    assert abs(inst.labels.mean() - 0.5) <= 0.01
    lengths = np.diff(inst.offsets)
    assert lengths.max() <= 64
    assert lengths.max() == 64
    covered = 0
    for i, row in split_rows(inst):
        a, b = segments(row, "nsp")
        assert a.size >= 1
        assert b.size >= 1
        assert inst.len_a[i] == a.size + 2
        assert contiguous(a)
        assert contiguous(b)
        a_doc, a_first, a_end, b_doc, b_first, b_end = inst.provenance[i]
        assert DOC[a[0]] == a_doc
        assert DOC[b[0]] == b_doc
        assert a_first <= SENT[a[0]]
        assert SENT[a[-1]] < a_end
        assert b_first <= SENT[b[0]]
        assert SENT[b[-1]] < b_end
        if inst.labels[i] == 0:  # IsNext: B continues A in the same document at a sentence boundary
            assert b_doc == a_doc
            assert b_first == a_end
            assert POS[b[0]] > POS[a[-1]]
        else:  # NotNext: B comes from another document
            assert DOC[b[0]] != DOC[a[0]]
        covered += a.size + b.size
    assert covered >= 100_000
    assert inst.counts["skipped_one_sentence_documents"] == 0


def test_sop_swapped_pairs_are_the_same_segments_reversed():
    inst = build("sop", with_provenance=True)
    assert abs(inst.labels.mean() - 0.5) <= 0.01
    for i, row in split_rows(inst):
        first, second = segments(row, "sop")
        assert contiguous(first)
        assert contiguous(second)
        assert DOC[first[0]] == DOC[second[0]]
        a_doc, a_first, a_end, b_doc, b_first, b_end = inst.provenance[i]
        assert a_doc == b_doc
        assert b_first == a_end  # always a consecutive pair of the same document
        if inst.labels[i] == 1:  # swapped: B (later sentences) first, A second
            assert SENT[first[0]] >= a_end
            assert SENT[second[-1]] < a_end
            assert POS[first[0]] > POS[second[-1]]
        else:
            assert SENT[first[-1]] < a_end <= SENT[second[0]]


def test_none_packs_whole_sentences_of_one_document():
    docs, (doc_of, sent_of, pos_of), _ = make_corpus(200, seed=5, one_sentence_every=4)
    inst = create_instances(docs, objective="none", max_seq_length=64, short_seq_prob=0.0, cls_token_id=CLS,
                            sep_token_id=SEP, rng=np.random.default_rng(0))
    assert inst.labels is None
    assert inst.counts["skipped_one_sentence_documents"] == 0
    seen = []
    for i, row in split_rows(inst):
        a, _ = segments(row, "none")
        assert row.size <= 64
        assert inst.len_a[i] == row.size
        assert np.all(doc_of[a] == doc_of[a[0]])
        assert np.all(np.diff(pos_of[a]) == 1)
        seen.append(a)
    # every token of the corpus appears exactly once, in order (nothing dropped, nothing duplicated)
    all_tokens = np.concatenate(seen)
    total = sum(len(s) for d in docs for s in d)
    assert np.array_equal(all_tokens, np.arange(BASE, BASE + total))
    # sentences are whole unless a sentence alone exceeds max_seq_length - 2
    sentence_length = {}
    for d, sents in enumerate(docs):
        for k, sent in enumerate(sents):
            sentence_length[d, k] = sent.size
    for a in seen:
        if sentence_length[doc_of[a[0]], sent_of[a[0]]] <= 62:  # not a piece of an over-long sentence
            first, last = a[0], a[-1]
            assert first == BASE or sent_of[first - 1] != sent_of[first] or doc_of[first - 1] != doc_of[first]
            assert last == BASE + total - 1 or sent_of[last + 1] != sent_of[last] or doc_of[last + 1] != doc_of[last]


def test_stream_packing_fills_every_instance_but_the_last_and_keeps_every_token_in_order():
    """packing stream: [CLS] chunk [SEP] of exactly max_seq_length tokens over the shard's stream, a [SEP] between
    documents; the concatenated chunks are the corpus, in order, with nothing dropped."""
    docs, (doc_of, _, _), _ = make_corpus(60, seed=3, one_sentence_every=5)
    docs = docs[:10] + [[]] + docs[10:]  # an empty document adds no separator
    inst = create_instances(docs, objective="none", max_seq_length=64, short_seq_prob=0.0, cls_token_id=CLS,
                            sep_token_id=SEP, rng=np.random.default_rng(0), packing="stream", with_provenance=True)
    lengths = np.diff(inst.offsets)
    assert np.all(lengths[:-1] == 64) and 3 <= lengths[-1] <= 64
    assert np.array_equal(inst.len_a, lengths)
    assert inst.labels is None
    body = np.concatenate([row[1:-1] for _, row in split_rows(inst)])
    assert all(row[0] == CLS and row[-1] == SEP for _, row in split_rows(inst))
    separators = np.flatnonzero(body == SEP)
    assert separators.size == 60 - 1  # one between each two non-empty documents
    tokens = np.delete(body, separators)
    total = sum(len(s) for d in docs for s in d)
    assert np.array_equal(tokens, np.arange(BASE, BASE + total))
    # a separator stands exactly where one document ends and the next starts
    assert np.all(doc_of[body[separators - 1]] + 1 == doc_of[body[separators + 1]])
    first = inst.provenance[:, 0]
    assert first[0] == 0 and np.all(np.diff(first) >= 0) and inst.provenance[-1, 3] == 60  # the empty doc shifts ids
    # short targets still draw a shorter chunk now and then
    short = create_instances(docs, objective="none", max_seq_length=64, short_seq_prob=0.5, cls_token_id=CLS,
                             sep_token_id=SEP, rng=np.random.default_rng(0), packing="stream")
    assert (np.diff(short.offsets)[:-1] < 64).mean() > 0.3


def test_one_sentence_documents_skipped_with_a_count_for_pairs():
    docs, _, _ = make_corpus(120, seed=6, one_sentence_every=3)
    for objective in ("nsp", "sop"):
        inst = build(objective, docs=docs, with_provenance=True)
        assert inst.counts["skipped_one_sentence_documents"] == 40
        assert not np.isin(inst.provenance[:, 0], np.arange(0, 120, 3)).any()


def test_every_instance_fits_for_small_and_large_max_seq_length():
    for max_len in (5, 9, 32, 128, 512):
        for objective in ("nsp", "sop", "none"):
            inst = build(objective, max_seq_length=max_len, docs=DOCS[:60])
            assert np.diff(inst.offsets).max() <= max_len
            assert np.diff(inst.offsets).min() >= (3 if objective == "none" else 5)


def test_deterministic_and_seed_dependent():
    a, b, c = build("nsp", seed=3), build("nsp", seed=3), build("nsp", seed=4)
    assert np.array_equal(a.input_ids, b.input_ids)
    assert np.array_equal(a.labels, b.labels)
    assert not np.array_equal(a.offsets, c.offsets) or not np.array_equal(a.input_ids, c.input_ids)


def test_single_document_shard_gives_isnext_only():
    inst = build("nsp", docs=DOCS[:1])
    assert len(inst) >= 1
    assert not inst.labels.any()


def reference_truncate(la, lb, max_tokens):
    """BERT's truncate_seq_pair loop, counting removals per side."""
    cut_a = cut_b = 0
    while la + lb > max_tokens:
        if la > lb:
            la, cut_a = la - 1, cut_a + 1
        else:
            lb, cut_b = lb - 1, cut_b + 1
    return cut_a, cut_b


def test_truncation_matches_bert_reference_counts():
    rng = np.random.default_rng(0)
    for la in range(1, 40, 3):
        for lb in range(1, 40, 4):
            for max_tokens in (2, 5, 17, 40, 80):
                fa, ba, fb, bb = _truncate(la, lb, max_tokens, rng)
                assert (fa + ba, fb + bb) == reference_truncate(la, lb, max_tokens)
    fronts = [_truncate(100, 10, 60, rng)[0] for _ in range(2000)]
    assert abs(np.mean(fronts) / 50 - 0.5) < 0.02  # front or back with probability 0.5


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(objective="mlm"), "objective: expected one of nsp, sop, none"),
        (dict(objective="nsp", max_seq_length=4), "max_seq_length: expected >= 5 to hold [CLS] A [SEP] B [SEP]"),
        (dict(objective="none", max_seq_length=2), "max_seq_length: expected >= 3"),
        (dict(objective="nsp", short_seq_prob=1.5), "short_seq_prob: expected a probability in [0, 1]"),
        (dict(objective="none", packing="tokens"), "packing: expected one of sentences, stream"),
        (dict(objective="sop", packing="stream"), "packing: stream cuts sentences, so it needs objective none"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    args = dict(objective="nsp", max_seq_length=64, short_seq_prob=0.1)
    args.update(kwargs)
    with pytest.raises(ValueError) as err:
        create_instances(DOCS[:5], cls_token_id=CLS, sep_token_id=SEP, rng=np.random.default_rng(0), **args)
    assert message in str(err.value)


def _sentence(words: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """A sentence of words of the given piece counts: id 1 starts a word, id 2 continues it (``##``)."""
    ids = np.concatenate([[1] + [2] * (n - 1) for n in words]).astype(np.int64)
    return ids, np.array([False, False, True])


def test_a_long_sentence_is_cut_at_word_starts_into_pieces_two_of_which_fill_a_pair():
    min_piece, max_piece = sentence_piece_bounds("nsp", 128)
    assert (min_piece, max_piece) == (63, 125)
    rng = np.random.default_rng(0)
    ids, cont = _sentence(list(rng.integers(1, 4, size=400)))
    pieces = cut_sentence(ids, cont, min_piece, max_piece)
    assert np.array_equal(np.concatenate(pieces), ids)
    assert all(p[0] == 1 for p in pieces)  # every piece starts a word
    assert all(min_piece <= len(p) <= min_piece + 2 for p in pieces[:-1])  # words of at most 3 pieces overshoot by 2
    assert 0 < len(pieces[-1]) <= max_piece
    assert all(len(a) + len(b) >= max_piece for a, b in zip(pieces[:-2], pieces[1:-1], strict=True))


def test_cut_sentence_keeps_short_sentences_and_cuts_a_huge_word_hard():
    ids, cont = _sentence([5, 3])
    assert [p.tolist() for p in cut_sentence(ids, cont, 4, 8)] == [ids.tolist()]
    ids, cont = _sentence([3, 20, 2])  # no word start 4..8 tokens in: the one at 3, then hard cuts, then the rest
    assert [len(p) for p in cut_sentence(ids, cont, 4, 8)] == [3, 8, 8, 6]
    assert sentence_piece_bounds("none", 128) == (126, 126)  # none packs whole segments: pieces as long as allowed
    ids, cont = _sentence([2] * 99)
    assert [len(p) for p in cut_sentence(ids, cont, 50, 50)] == [50, 50, 50, 48]
    with pytest.raises(ValueError, match="expected 1 <= min_piece <= max_piece"):
        cut_sentence(ids, cont, 9, 8)
