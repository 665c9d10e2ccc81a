"""bench/analysis/ner_errors.py: the error classes of a NER prediction against silver spans, and the silver labels'
self-agreement."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("ner_errors", Path(__file__).resolve().parents[1] / "bench" / "analysis" / "ner_errors.py")
ner_errors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ner_errors)


def test_each_silver_span_gets_one_error_class_and_spurious_spans_are_counted():
    gold = [("PERSON", 0, 1), ("ORG", 3, 3), ("GPE", 5, 5), ("DATE", 7, 8), ("ORG", 10, 11), ("LOC", 13, 13)]
    pred = [("PERSON", 0, 1),      # exact
            ("PERSON", 3, 3),      # same words, other type
            ("GPE", 4, 5),         # same type, other words
            ("ORG", 8, 8),         # overlaps DATE 7..8 with another type and other words
            ("ORG", 15, 15)]       # nothing silver there; ORG 10..11 and LOC 13 are missed
    classes, spurious = ner_errors.classify(gold, pred)
    assert classes == ["exact", "wrong_type", "boundary", "other_overlap", "missed", "missed"]
    assert spurious == [("ORG", 15, 15)]


def test_silver_consistency_counts_each_occurrence_once_and_skips_longer_names():
    sentences = [
        ("Anna Smith met Paris".split(), ["B-PERSON", "I-PERSON", "O", "B-PERSON"]),   # Paris as PERSON once
        ("Paris is big".split(), ["B-GPE", "O", "O"]),
        ("Paris again".split(), ["B-GPE", "O"]),
        ("Smith left".split(), ["O", "O"]),                                           # Smith untagged
        ("Anna Smith left".split(), ["B-PERSON", "I-PERSON", "O"]),
    ]
    out = ner_errors.silver_consistency(sentences)
    # PERSON strings: "Anna Smith" (2 occurrences, both PERSON), "Paris" (3: PERSON once, GPE twice)
    assert out["PERSON"]["occurrences"] == 5
    assert out["PERSON"]["same"] == 0.6 and out["PERSON"]["other_type"] == 0.4
    # GPE "Paris": 3 occurrences, 2 as GPE, 1 tagged PERSON
    assert out["GPE"] == {"same": 0.6667, "other_type": 0.3333, "other_span": 0.0, "untagged": 0.0, "occurrences": 3}
