"""Sentence splitting: tricky English sentences split exactly as expected, bounded chunks, order of outputs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bert_pipeline.data.sentences import (
    RuleSplitter,
    chunk_text,
    doc_sentences,
    load_splitter,
    rule_sentences,
    split_batch,
)
from bert_pipeline.data.sources import SPACY_MODEL

# (text, exact expected sentences): abbreviations, titles, decimals, money, quotes, ellipses, initials, times,
# company suffixes, street names, numbered lists, sentence-final abbreviations. A data file, so that
# bench/sentences.py scores the splitters on the same cases without importing test code.
TRICKY = [(text, expected) for text, expected in
          json.loads((Path(__file__).parent / "tricky_sentences.json").read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def nlp(raw_data):
    return load_splitter(raw_data / SPACY_MODEL, "spacy_senter")


@pytest.mark.parametrize(("text", "expected"), TRICKY, ids=[t[:40] for t, _ in TRICKY])
def test_tricky_sentences(nlp, text, expected):
    assert doc_sentences(nlp(text)) == expected


@pytest.mark.parametrize(("text", "expected"), TRICKY, ids=[t[:40] for t, _ in TRICKY])
def test_tricky_sentences_blingfire(text, expected):
    assert rule_sentences(text) == expected


def test_blingfire_keeps_every_character_in_order_and_ends_sentences_at_blank_lines():
    rng = random.Random(7)
    words = ["Mr.", "U.S.", "p.m.", "said.", '"yes."', "(No.", "3.5", "e.g.", "The", "He", "it", "?", "!", "1.",
             "caf\u00e9", "\u2014", "\u201cquote\u201d", "\U0001f600", "\u4e2d\u6587", "Dr.", "etc.", "\n", "\n\n"]
    for _ in range(200):
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 60)))
        sentences = rule_sentences(text)
        assert "".join(sentences).replace(" ", "") == "".join(text.split())
        assert all(s and s == " ".join(s.split()) for s in sentences)
    assert rule_sentences("A heading without a stop\n\nThe next paragraph. It goes on\nover lines.") == [
        "A heading without a stop", "The next paragraph.", "It goes on over lines."]
    assert load_splitter("no/model/needed", "blingfire").max_length > 10**12
    with pytest.raises(ValueError, match="expected one of"):
        load_splitter("x", "regex")


def test_blingfire_repairs_what_the_breaker_misses():
    assert rule_sentences('It lasted until 2 p.m. local time. "severe storms are here," he said. "we wait."') == [
        "It lasted until 2 p.m. local time.", '"severe storms are here," he said.', '"we wait."']
    assert rule_sentences("He spoke last week. Dr. William Schaffner agreed, etc. \"quoted\" here.") == [
        "He spoke last week.", 'Dr. William Schaffner agreed, etc. "quoted" here.']


@pytest.mark.parametrize("method", ["spacy_senter", "blingfire"])
def test_split_batch_keeps_order_and_groups_chunks(raw_data, method):
    nlp = load_splitter(raw_data / SPACY_MODEL, method)
    texts = [c[0] for c in TRICKY[:6]]
    long_text = " ".join(c[0] for c in TRICKY)  # cut into several chunks of <= 300 characters
    assert len(chunk_text(long_text, 300)) > 3
    out = split_batch(nlp, [*texts, long_text], chunk_chars=300, batch_size=4)
    assert out[:6] == [c[1] for c in TRICKY[:6]]
    assert len(out) == 7
    assert " ".join(out[6]) == long_text
    assert isinstance(nlp, RuleSplitter) == (method == "blingfire")


def test_spacy_never_sees_more_than_chunk_chars(raw_data):
    nlp = load_splitter(raw_data / SPACY_MODEL, "spacy_senter")
    nlp.max_length = 2_000  # spaCy raises E088 on any longer text
    text = ("word " * 3_000).strip() + " x" * 10 + "y" * 5_000  # one line, no sentence end, a 5k-char token
    (sentences,) = split_batch(nlp, [text], chunk_chars=2_000, batch_size=64)
    assert "".join(sentences).replace(" ", "") == text.replace(" ", "")


def test_chunk_text_cuts_at_newline_then_space_then_hard():
    text = "aaaa bbbb\ncccc dddd eeee"
    assert chunk_text(text, 12) == ["aaaa bbbb\n", "cccc dddd ", "eeee"]
    assert chunk_text("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]
    assert chunk_text("short", 10) == ["short"]
    for size in (7, 50, 1000):
        pieces = chunk_text(text * 40, size)
        assert "".join(pieces) == text * 40
        assert max(map(len, pieces)) <= size


def test_parser_splitter_option(raw_data):
    parser = load_splitter(raw_data / SPACY_MODEL, "spacy_parser")
    assert "parser" in parser.pipe_names
    assert "senter" not in parser.pipe_names
    for text, expected in TRICKY[:8]:
        assert doc_sentences(parser(text)) == expected
