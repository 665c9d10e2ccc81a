"""Long texts in bounded pieces (bert_pipeline.data.bounded) and the readers and trainers that use them: nothing is
lost, every piece is within its limit, and the tokenizer trainers learn the same vocabulary from pieces."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from bert_pipeline.data import corpus_files, corpus_readers
from bert_pipeline.data.bounded import DOCUMENT_BOUNDARIES, HARD, WORD_BOUNDARIES, cut_point, iter_pieces

_WORDS = ["word", "it's", "3.14", "東京", "naïve", ",", "!!", "x-y", "'s", "Ġ", "▁a", "Über", "e\u0301", "end."]
_GAPS = [" ", " ", " ", "", "  ", "\n", "\n ", "\t", "\u3000", "\xa0", "\n\n"]


def _random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_WORDS) + rng.choice(_GAPS) for _ in range(n))


def test_cut_point_prefers_paragraph_then_line_then_sentence_then_space():
    head = "x" * 40
    assert cut_point(head + "\n\n  next" + "y" * 40, 60, DOCUMENT_BOUNDARIES) == (44, "paragraph")
    assert cut_point(head + "\nnext. more words" + "y" * 40, 60, DOCUMENT_BOUNDARIES) == (41, "line")
    assert cut_point(head + " ab. cd ef" + "y" * 40, 60, DOCUMENT_BOUNDARIES) == (45, "sentence")
    assert cut_point(head + " ab cd" + "y" * 40, 60, DOCUMENT_BOUNDARIES) == (44, "space")
    assert cut_point("z" * 100, 60, DOCUMENT_BOUNDARIES) == (60, HARD)
    # a boundary in the first half of the window is not taken: every piece but the last is over half the limit
    assert cut_point("a b" + "z" * 100, 60, DOCUMENT_BOUNDARIES) == (60, HARD)
    # a whitespace run that crosses the limit is not a cut inside the limit; the earlier one is
    assert cut_point("x" * 40 + " " + "y" * 10 + " " * 20, 60, DOCUMENT_BOUNDARIES) == (41, "space")
    with pytest.raises(ValueError, match="nothing to cut"):
        cut_point("short", 60, DOCUMENT_BOUNDARIES)


@pytest.mark.parametrize("boundaries", [DOCUMENT_BOUNDARIES, WORD_BOUNDARIES])
def test_pieces_concatenate_to_the_text_within_the_limit(boundaries):
    rng = random.Random(0)
    for _ in range(300):
        text = _random_text(rng, rng.randint(0, 120))
        limit = rng.randint(2, 80)
        step = rng.randint(1, 50)
        pieces = list(iter_pieces((text[i:i + step] for i in range(0, len(text), step)), limit, boundaries))
        assert "".join(p for p, _ in pieces) == text
        assert all(len(p) <= limit for p, _ in pieces)
        assert all(len(p) > limit // 2 for p, _ in pieces[:-1])
        assert [c is None for _, c in pieces] == [False] * (len(pieces) - 1) + [True]


def _pipelines():
    from bert_pipeline.data import bpe, unigram, wordpiece

    bert = wordpiece.bare_tokenizer(None, lowercase=True, strip_accents=None, handle_chinese_chars=True,
                                    max_input_chars_per_word=100)
    roberta = bpe.train_bpe(lambda: iter(["a b"]), vocab_size=300)
    albert = unigram._pipeline(unigram.Unigram(), lowercase=True)
    return {"wordpiece": bert, "bpe": roberta, "unigram": albert}


def _pre_tokens(tokenizer, text: str) -> list[str]:
    if tokenizer.normalizer is not None:
        text = tokenizer.normalizer.normalize_str(text)
    return [t for t, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text)]


def test_word_pieces_give_every_pre_tokenizer_the_same_pre_tokens():
    """The claim the trainers rest on: cut before a space that precedes a non-space, each pipeline (normaliser and
    pre-tokenizer) sees the pre-tokens it sees in the whole text."""
    rng = random.Random(1)
    pipelines = _pipelines()
    checked = 0
    for _ in range(1500):
        text = _random_text(rng, rng.randint(5, 80))
        pieces = list(iter_pieces([text], rng.randint(8, 60), WORD_BOUNDARIES))
        if any(c == HARD for _, c in pieces):
            continue  # no safe boundary in the window: a hard cut may split a word (counted by callers)
        checked += len(pieces) > 1
        for name, tokenizer in pipelines.items():
            whole = _pre_tokens(tokenizer, text)
            assert [t for p, _ in pieces for t in _pre_tokens(tokenizer, p)] == whole, (name, text)
    assert checked > 300


@pytest.mark.parametrize("model", ["wordpiece", "bpe", "unigram"])
def test_vocabulary_learnt_from_pieces_is_byte_identical(tmp_path, monkeypatch, model):
    """Each trainer through iter_text_batches, with long texts cut into 200-character pieces (both the Arrow-file
    path and the in-memory one), learns the vocabulary it learns from the whole texts."""
    import datasets

    from bert_pipeline.data import bpe, unigram, wordpiece

    rng = random.Random(2)
    texts = [_random_text(rng, rng.randint(20, 400)) for _ in range(40)]
    in_memory = datasets.Dataset.from_dict({"text": texts})
    in_memory.save_to_disk(str(tmp_path / "ds"))
    on_disk = datasets.load_from_disk(str(tmp_path / "ds"))
    train = {
        "wordpiece": lambda t: wordpiece.train_wordpiece(t, vocab_size=400, limit_alphabet=40),
        "bpe": lambda t: bpe.train_bpe(t, vocab_size=400),
        "unigram": lambda t: unigram.train_unigram(t, vocab_size=200, lowercase=True),
    }[model]
    whole = train(lambda: iter_whole(texts))
    monkeypatch.setattr(wordpiece, "TEXT_BATCH_BYTES", 1000)
    batches = list(wordpiece.iter_text_batches(on_disk, batch_size=7, piece_chars=200))
    assert max(len(p) for b in batches for p in b) <= 200
    assert len(batches) > len(texts) // 7 and sum(len(b) for b in batches) > 2 * len(texts)
    assert "".join(p for b in batches for p in b) == "".join(texts)
    for dataset in (on_disk, in_memory):
        pieces = train(lambda d=dataset: wordpiece.iter_text_batches(d, batch_size=7, piece_chars=200))
        assert pieces.to_str() == whole.to_str()


def iter_whole(texts: list[str]):
    yield from ([t] for t in texts)


def _reference_blocks(text: str) -> list[str]:
    """Blank-line-separated blocks, lines joined by \\n: what iter_blocks reads a file into."""
    blocks, lines = [], []
    for line in text.split("\n"):
        if line.strip():
            lines.append(line)
        elif lines:
            blocks.append("\n".join(lines))
            lines = []
    if lines:
        blocks.append("\n".join(lines))
    return blocks


def test_blocks_equal_the_blank_line_split_at_any_read_size(tmp_path):
    rng = random.Random(3)
    path = tmp_path / "t.txt"
    for _ in range(60):
        text = _random_text(rng, rng.randint(0, 60)).replace("\u3000", "  \n  ")
        path.write_text(text, encoding="utf-8")
        got = ["".join(pieces) for _, pieces in corpus_files.iter_blocks(path, corpus_files.ReadCounter(),
                                                                          block_bytes=rng.randint(1, 30))]
        assert got == _reference_blocks(text)


def test_a_huge_line_is_read_in_parts_with_memory_bounded_by_the_limit(tmp_path):
    """A 12 MB file that is one line without a newline, as one block and as one file: parts of at most 1 MB, in
    order, that concatenate to the line; memory never holds the line."""
    sentence = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    line = sentence * (12_000_000 // len(sentence))
    (tmp_path / "huge.txt").write_text(line + "\n\nA second block.\n", encoding="utf-8")
    for unit, first_id in (("block", "u:huge.txt:block=0:part=0"), ("file", "u:huge.txt:part=0")):
        tracemalloc.start()
        docs = []
        text_parts = []
        for doc in corpus_readers.read_files("u", "huge.txt", "txt", tmp_path, corpus_files.ReadCounter(),
                                             unit=unit, max_document_chars=1_000_000):
            docs.append((doc.doc_id, doc.part, doc.cut, doc.document_id))
            if doc.document_id == first_id.removesuffix(":part=0"):
                text_parts.append(len(doc.text))
                assert len(doc.text) <= 1_000_000
                assert doc.text.startswith("Lorem") or doc.part == 0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert docs[0][:3] == (first_id, 0, "sentence")
        assert peak < 8_000_000  # parts of 1M characters and a 1 MB read block, never the 12 MB line
        assert sum(text_parts) >= len(line)
        assert len(text_parts) == 13  # 12 parts cut at the last sentence end before 1M, and the rest
        assert min(text_parts[:-1]) > 999_000
        if unit == "block":
            assert docs[-1] == ("u:huge.txt:block=1", None, None, "u:huge.txt:block=1")
            assert sum(text_parts) == len(line)
