"""Concerns that had two implementations now have one, and the places that use it agree: QA decoding (test-split
scoring vs serving), the AdamW no-decay rule (pre-training vs fine-tuning)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
)

from bert_pipeline import tasks
from bert_pipeline.evaluation.predictor import load_predictor
from bert_pipeline.tasks import qa
from bert_pipeline.tasks.qa import answer
from bert_pipeline.train import finetune
from bert_pipeline.train.optim import parameter_groups
from bert_pipeline.train.runtime import make_runtime
from tests.tiny_models import save_reader

CONTEXTS = [
    "alice met bob in paris and bob visited london before alice went home to berlin",
    "the film was good and the cast was very good",
    "bob visited london",
]
QUESTIONS = ["who met bob ?", "what was good ?", "where did bob go ?"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_served_answers_are_the_scored_answers(tmp_path, seed):
    """On the same windows (max_length 16, doc_stride 4: several windows per long context), the decoder that
    scores the test split in fine-tuning and the one `predict`/`mlflow models serve` use give the same spans."""
    pred = load_predictor(save_reader(tmp_path / "qa", seed=seed))
    task = {"max_length": 16, "doc_stride": 4, "n_best": 5, "max_answer_length": 4}
    feats = qa.prepare_qa_features(pred.tokenizer, QUESTIONS, CONTEXTS, None, task["max_length"], task["doc_stride"])
    assert len(feats["input_ids"]) > len(CONTEXTS)  # the long contexts really are windowed
    windows = [{k: feats[k][i] for k in ("input_ids", "attention_mask", "token_type_ids") if k in feats}
               for i in range(len(feats["input_ids"]))]
    collate = tasks.get("qa").collator(pred.tokenizer)
    logits = finetune.forward_all(pred.model, windows, collate, 2, make_runtime("fp32", cpu=True))
    scored = qa.decode_qa(CONTEXTS, feats["example_index"], feats["offset_mapping"], [s for s, _ in logits],
                             [e for _, e in logits], task["n_best"], task["max_answer_length"])
    served = [answer(pred, q, c, task["max_length"], task["doc_stride"], task["n_best"], task["max_answer_length"])
              for q, c in zip(QUESTIONS, CONTEXTS, strict=True)]
    assert [(s.text, s.start, s.end) for s in scored] == [(a["answer"], a["start"], a["end"]) for a in served]
    assert sum(bool(a["answer"]) for a in served) >= 2  # not a comparison of empty answers
    for span, served_answer in zip(scored, served, strict=True):
        if span.score is None:
            assert served_answer["score"] is None and served_answer["logit_sum"] is None
        else:
            assert served_answer["logit_sum"] == pytest.approx(span.score, abs=1e-3)
            assert served_answer["score"] == pytest.approx(span.probability, abs=1e-3)


def test_decoder_prefers_the_best_valid_span_across_windows():
    """Two windows of one example: the higher start+end sum wins, spans longer than max_answer_length or ending
    before they start are never chosen, and question tokens (offset None) are never part of an answer."""
    context = "aaa bbb ccc ddd"
    offsets = [[None, (0, 3), (4, 7), None], [None, (8, 11), (12, 15), None]]
    start = [np.array([9.0, 1.0, 0.0, 0.0]), np.array([0.0, 2.0, 0.0, 0.0])]
    end = [np.array([9.0, 0.0, 1.5, 0.0]), np.array([0.0, 0.0, 2.5, 0.0])]
    (span,) = qa.decode_qa([context], [0, 0], offsets, start, end, n_best=4, max_answer_length=2)
    assert (span.text, span.start, span.end) == ("ccc ddd", 8, 15)
    assert span.score == pytest.approx(4.5)
    (short,) = qa.decode_qa([context], [0, 0], offsets, start, end, n_best=4, max_answer_length=1)
    assert (short.text, short.score) == ("ddd", pytest.approx(2.5))
    # the winner's probability in its window (context tokens and [CLS], position 0): softmax(start) * softmax(end)
    allowed = [0, 1, 2]  # [CLS] and the two context tokens of window 1
    p_start = np.exp(2.0) / np.exp(start[1][allowed]).sum()
    p_end = np.exp(2.5) / np.exp(end[1][allowed]).sum()
    assert span.probability == pytest.approx(p_start * p_end)
    (none,) = qa.decode_qa([context], [0], [[None, None]], [np.zeros(2)], [np.zeros(2)], 4, 2)
    assert none == qa.QaSpan("", 0, 0, None)


def _tiny_config(**extra) -> BertConfig:
    return BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32, **extra)


@pytest.mark.parametrize("cls", [BertForPreTraining, BertForSequenceClassification, BertForQuestionAnswering])
def test_no_decay_group_is_bert_references_biases_and_layer_norms(cls):
    """The one rule (rank < 2) picks exactly google-research/bert's exclude_from_weight_decay names on every head
    the pipeline trains, tied weights once."""
    torch.manual_seed(0)
    model = cls(_tiny_config())
    decay, no_decay = parameter_groups(model, 0.01)
    by_id = {id(p): name for name, p in model.named_parameters()}
    no_decay_names = {by_id[id(p)] for p in no_decay["params"]}
    expected = {name for name, _ in model.named_parameters() if name.endswith("bias") or "LayerNorm" in name}
    assert no_decay_names == expected
    assert no_decay["weight_decay"] == 0.0
    assert decay["weight_decay"] == 0.01
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
