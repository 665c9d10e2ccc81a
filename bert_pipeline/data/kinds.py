"""Task kinds' names and main metrics: what the data stages and the params schema need, torch-free. Everything else
a kind does (encoding, head, metric, decoding, distillation, card) is its module's in :mod:`bert_pipeline.tasks`.

- ``classification``: one text (``text``), a class label (``label``, ClassLabel); ``[CLS]`` (or mean) -> Linear,
  cross-entropy (Devlin et al. 2019, §4.1).
- ``pair_classification``: two texts (``text``, ``text_pair``) encoded as one pair ``[CLS] a [SEP] b [SEP]``,
  so ``token_type_ids`` are 0 over the first segment and 1 over the second where the tokenizer has token types
  (BERT's sentence-pair tasks such as MNLI, Devlin et al. 2019, §4.1 and Fig. 4a); ``[CLS]`` -> Linear.
- ``regression``: one text (and optionally ``text_pair``) with a float ``label``; ``[CLS]`` -> Linear with one
  output, mean squared error (Hugging Face ``problem_type="regression"``), scored by Pearson (main) and Spearman
  correlation and MSE (as GLUE scores STS-B, Wang et al. 2019).
- ``ner``: word-level BIO tags; ``qa``: SQuAD v1.1 extractive spans.
- ``multi_label_classification``: one text, any number of labels (a sigmoid per label), micro-F1 (main).
"""

from __future__ import annotations

CLASSIFICATION = "classification"
PAIR_CLASSIFICATION = "pair_classification"
REGRESSION = "regression"
NER = "ner"
QA = "qa"
MULTI_LABEL = "multi_label_classification"

KINDS = (CLASSIFICATION, PAIR_CLASSIFICATION, REGRESSION, NER, QA, MULTI_LABEL)
"""Every task kind, in the order the report lists them."""

SEQUENCE_KINDS = (CLASSIFICATION, PAIR_CLASSIFICATION, REGRESSION)
"""Kinds whose model is a sequence classifier (``AutoModelForSequenceClassification``): one output row per example."""

LABELLED_KINDS = (CLASSIFICATION, PAIR_CLASSIFICATION)
"""Sequence kinds with class labels (ClassLabel ``label``); regression's ``label`` is a float."""

MAIN_METRIC = {CLASSIFICATION: "accuracy", PAIR_CLASSIFICATION: "accuracy", REGRESSION: "pearson", NER: "f1",
               QA: "f1", MULTI_LABEL: "micro_f1"}
"""The metric early stopping, the report and the registry rank by, per task kind."""


def is_sequence_kind(kind: str) -> bool:
    """True for the kinds a sequence classifier serves (:data:`SEQUENCE_KINDS`)."""
    return kind in SEQUENCE_KINDS
