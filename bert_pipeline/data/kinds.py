"""Task kinds: their names and the facts the pipeline needs per kind, in one place.

- ``classification``: one text (``text``), a class label (``label``, ClassLabel); ``[CLS]`` (or mean) -> Linear,
  cross-entropy (Devlin et al. 2019, §4.1).
- ``pair_classification``: two texts (``text``, ``text_pair``) encoded as one pair ``[CLS] a [SEP] b [SEP]``,
  so ``token_type_ids`` are 0 over the first segment and 1 over the second where the tokenizer has token types
  (BERT's sentence-pair tasks such as MNLI, Devlin et al. 2019, §4.1 and Fig. 4a); ``[CLS]`` -> Linear.
- ``regression``: one text (and optionally ``text_pair``) with a float ``label``; ``[CLS]`` -> Linear with one
  output, mean squared error (Hugging Face ``problem_type="regression"``), scored by Pearson (main) and Spearman
  correlation and MSE (as GLUE scores STS-B, Wang et al. 2019).
- ``ner``: word-level BIO tags; ``qa``: SQuAD v1.1 extractive spans.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

CLASSIFICATION = "classification"
PAIR_CLASSIFICATION = "pair_classification"
REGRESSION = "regression"
NER = "ner"
QA = "qa"

KINDS = (CLASSIFICATION, PAIR_CLASSIFICATION, REGRESSION, NER, QA)
"""Every task kind, in the order the report lists them."""

SEQUENCE_KINDS = (CLASSIFICATION, PAIR_CLASSIFICATION, REGRESSION)
"""Kinds whose model is a sequence classifier (``AutoModelForSequenceClassification``): one output row per example."""

LABELLED_KINDS = (CLASSIFICATION, PAIR_CLASSIFICATION)
"""Sequence kinds with class labels (ClassLabel ``label``); regression's ``label`` is a float."""

MAIN_METRIC = {CLASSIFICATION: "accuracy", PAIR_CLASSIFICATION: "accuracy", REGRESSION: "pearson", NER: "f1",
               QA: "f1"}
"""The metric early stopping, the report and the registry rank by, per task kind."""

PROBLEM_TYPE = {CLASSIFICATION: "single_label_classification", PAIR_CLASSIFICATION: "single_label_classification",
                REGRESSION: "regression"}
"""Hugging Face ``config.problem_type`` per sequence kind (regression: MSE loss over one output)."""


def is_sequence_kind(kind: str) -> bool:
    """True for the kinds a sequence classifier serves (:data:`SEQUENCE_KINDS`)."""
    return kind in SEQUENCE_KINDS


def has_pair(kind: str, columns: Sequence[str] = ()) -> bool:
    """True when examples of ``kind`` are text pairs: ``pair_classification`` always, ``regression`` when its
    data has a ``text_pair`` column."""
    return kind == PAIR_CLASSIFICATION or (kind == REGRESSION and "text_pair" in columns)


def encode_sequences(tokenizer, texts: Sequence[str], text_pairs: Sequence[str] | None, max_length: int) -> Any:
    """Tokenize single texts or pairs for a sequence head, truncated to ``max_length`` tokens.

    Pairs go through the tokenizer's own pair template (``[CLS] a [SEP] b [SEP]`` for BERT, ``<s> a </s></s> b
    </s>`` for RoBERTa), so ``token_type_ids`` (where the tokenizer returns them) are 0 over ``[CLS] a [SEP]`` and
    1 over ``b [SEP]``; ``truncation="longest_first"`` trims the longer segment first.

    Returns:
        the tokenizer's ``BatchEncoding`` (lists of ints per example).
    """
    if text_pairs is None:
        return tokenizer(list(texts), truncation=True, max_length=max_length)
    return tokenizer(list(texts), list(text_pairs), truncation="longest_first", max_length=max_length)
