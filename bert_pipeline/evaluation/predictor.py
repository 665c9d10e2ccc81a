"""Inference with a fine-tuned model folder: sentiment label + probability, NER entities with character offsets,
extractive QA answers with character offsets.

A folder written by ``finetune`` (``save_pretrained`` + tokenizer) says which head it has in
``config.architectures``; :func:`load_predictor` picks the matching ``AutoModelFor*`` class. Token classification
goes through Hugging Face's ``token-classification`` pipeline (``aggregation_strategy="first"``: a word takes
its first sub-token's label, consecutive ``B-X I-X ...`` words merge into one entity). Transformers 5 has no
question-answering pipeline, so extractive QA uses the windows and the n-best decoder that fine-tuning scores the
test split with (:mod:`bert_pipeline.model.heads`): what is served is decoded the way it was scored.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.errors import PipelineError
from bert_pipeline.model.heads import decode_qa, load_sequence_classifier, prepare_qa_features

log = logging.getLogger(__name__)

MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

KINDS = {
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
}


def model_kind(model_dir: Path) -> str:
    """``sequence-classification``, ``token-classification`` or ``question-answering`` from ``config.json``.

    Raises:
        PipelineError: no ``config.json`` or an architecture without one of these heads.
    """
    cfg = Path(model_dir) / "config.json"
    if not Path(model_dir).is_dir() or not cfg.is_file():
        raise PipelineError(f"{cfg}: not found (expected a save_pretrained model folder)")
    try:
        raw = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PipelineError(f"{cfg}: not a readable model config ({exc})") from None
    archs = (raw.get("architectures") if isinstance(raw, dict) else None) or []
    for arch in archs:
        for suffix, kind in KINDS.items():
            if arch.endswith(suffix):
                return kind
    raise PipelineError(f"{cfg}: architectures {archs} have no sequence/token classification or QA head")


@dataclass
class Predictor:
    """A loaded model folder: ``kind``, the ``model`` (eval mode, CPU) and its ``tokenizer``."""

    kind: str
    model: Any
    tokenizer: Any
    model_dir: Path


def load_predictor(model_dir: Path) -> Predictor:
    """Load a fine-tuned folder with the ``AutoModelFor*`` class its config names, in eval mode.

    Raises:
        PipelineError: the folder is not a loadable model with a known head.
    """
    from transformers import (
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    from bert_pipeline.data.tokenizer import load_tokenizer

    kind = model_kind(model_dir)
    cls = {"sequence-classification": AutoModelForSequenceClassification,
           "token-classification": AutoModelForTokenClassification,
           "question-answering": AutoModelForQuestionAnswering}[kind]
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        if kind == "sequence-classification" and cfg.get("classifier_pooling", "cls") != "cls":
            # finetune's mean-pooling head (bert_pipeline.model.heads) restores itself from config.classifier_pooling
            model = load_sequence_classifier(str(model_dir))
        else:
            model = cls.from_pretrained(model_dir)
    except OSError as exc:
        raise PipelineError(f"{model_dir}: cannot load the model ({str(exc).splitlines()[0]})") from None
    tokenizer = load_tokenizer(model_dir)
    model.eval()
    return Predictor(kind=kind, model=model, tokenizer=tokenizer, model_dir=Path(model_dir))


def max_length(pred: Predictor, requested: int) -> int:
    """``requested`` capped at the model's ``max_position_embeddings`` (a longer input would not run)."""
    limit = getattr(pred.model.config, "max_position_embeddings", None)
    return min(requested, limit) if limit else requested


def token_counts(pred: Predictor, texts: Sequence[str], text_pairs: Sequence[str] | None = None) -> list[int]:
    """Tokens of each text (or pair, with ``text_pairs``) with the model's special tokens (what a window must hold
    to see it whole)."""
    # verbose=False: a text longer than the model is what is being measured, not a mistake to warn about
    args = (list(texts),) if text_pairs is None else (list(texts), list(text_pairs))
    return [len(ids) for ids in pred.tokenizer(*args, truncation=False, verbose=False)["input_ids"]]


def reads_pairs(pred: Predictor) -> bool:
    """True for a sentence-pair classifier: ``config.task_kind`` is ``pair_classification`` (``finetune`` writes it
    for the pair and regression kinds)."""
    return getattr(pred.model.config, "task_kind", None) == "pair_classification"


def is_regression(pred: Predictor) -> bool:
    """True for a regression head (one output, ``problem_type="regression"``: ``finetune``'s ``regression`` kind)."""
    cfg = pred.model.config
    return cfg.problem_type == "regression" or cfg.num_labels == 1


@torch.no_grad()
def sequence_outputs(pred: Predictor, texts: Sequence[str], batch_size: int = 32, max_seq_length: int = 128,
                     text_pairs: Sequence[str] | None = None) -> torch.Tensor:
    """Raw head outputs ``(len(texts), num_labels)`` float32 in the order of ``texts``: logits, or a regression
    head's predicted values (``num_labels`` 1). With ``text_pairs`` each example is the pair ``(texts[i],
    text_pairs[i])``, encoded as fine-tuning encoded it (:func:`bert_pipeline.data.kinds.encode_sequences`:
    ``token_type_ids`` 0 then 1, the longer segment truncated first). Batched by length as
    :func:`class_probabilities`."""
    lengths = [len(t) + (len(text_pairs[i]) if text_pairs is not None else 0) for i, t in enumerate(texts)]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out = torch.zeros(len(texts), pred.model.config.num_labels)
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        args = ([texts[j] for j in idx],) + (([text_pairs[j] for j in idx],) if text_pairs is not None else ())
        enc = pred.tokenizer(*args, padding=True, truncation="longest_first" if text_pairs is not None else True,
                             max_length=max_length(pred, max_seq_length), return_tensors="pt")
        out[idx] = pred.model(**enc).logits.float()
    return out


@torch.no_grad()
def class_probabilities(pred: Predictor, texts: Sequence[str], batch_size: int = 32,
                        max_seq_length: int = 128) -> torch.Tensor:
    """Softmax class probabilities, ``(len(texts), num_labels)`` float32, in the order of ``texts``.

    Each text is read up to ``max_seq_length`` tokens (capped at the model's ``max_position_embeddings``): a
    sentence classifier sees one window, as in fine-tuning. Texts are batched by length (``batch_size`` at a time,
    padded to the longest in the batch) so little compute goes to padding; the result does not depend on the
    batching.
    """
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    probs = torch.zeros(len(texts), pred.model.config.num_labels)
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        enc = pred.tokenizer([texts[j] for j in idx], padding=True, truncation=True,
                             max_length=max_length(pred, max_seq_length), return_tensors="pt")
        probs[idx] = torch.softmax(pred.model(**enc).logits.float(), dim=-1)
    return probs


def classify(pred: Predictor, texts: Sequence[str], batch_size: int = 32, max_seq_length: int = 128,
             text_pairs: Sequence[str] | None = None) -> list[dict]:
    """``[{"label", "probability", "tokens", "truncated"}]`` per text: the arg-max class, its softmax probability,
    the text's length in tokens and whether the model read only its first ``max_seq_length`` tokens (capped at the
    model's ``max_position_embeddings``): a long text is classified on its beginning, and the output says so.

    With ``text_pairs`` (a pair classifier) each input is the pair ``(texts[i], text_pairs[i])``; a regression
    head gives ``{"value", "tokens", "truncated"}`` (the predicted float) instead of a label."""
    limit = max_length(pred, max_seq_length)
    counts = token_counts(pred, texts, text_pairs)
    if text_pairs is not None or is_regression(pred):
        outputs = sequence_outputs(pred, texts, batch_size, max_seq_length, text_pairs)
        if is_regression(pred):
            return [{"value": round(float(o[0]), 4), "tokens": n, "truncated": n > limit}
                    for o, n in zip(outputs, counts, strict=True)]
        probs = torch.softmax(outputs, dim=-1)
    else:
        probs = class_probabilities(pred, texts, batch_size, max_seq_length)
    id2label = pred.model.config.id2label
    return [{"label": id2label[int(p.argmax())], "probability": round(float(p.max()), 4), "tokens": n,
             "truncated": n > limit} for p, n in zip(probs, counts, strict=True)]


def tagging_windows(pred: Predictor, max_seq_length: int = 384, doc_stride: int = 128) -> tuple[Any, int]:
    """What Hugging Face's ``token-classification`` pipeline needs to tag a long text whole: a copy of the
    tokenizer whose ``model_max_length`` (the pipeline's window) is ``max_seq_length`` capped at the model's
    ``max_position_embeddings``, and the stride capped at half the window's text (each window moves on by at least
    half). A byte-level BPE tokenizer without a prefix space (RoBERTa's) is copied with one
    (:func:`bert_pipeline.data.tokenizer.with_prefix_space`): fine-tuning gave every word the pieces it has after a
    space (:func:`bert_pipeline.model.heads.tokenize_ner`), so the text's first word gets them too.

    Raises:
        PipelineError: the window holds no text after the special tokens.
    """
    import copy

    from bert_pipeline.data.tokenizer import with_prefix_space

    window = max_length(pred, max_seq_length)
    room = window - pred.tokenizer.num_special_tokens_to_add(pair=False)
    if room < 2:
        raise PipelineError(f"--max-seq-length {window}: leaves no room for text after the special tokens")
    tokenizer = copy.copy(with_prefix_space(pred.tokenizer))
    tokenizer.model_max_length = window
    return tokenizer, min(doc_stride, room // 2)


def entities(pred: Predictor, texts: Sequence[str], max_seq_length: int = 384, doc_stride: int = 128) -> list[list[dict]]:
    """Per text, its entities ``{"type", "text", "start", "end", "score"}`` (character offsets, end exclusive).

    The whole text is tagged, however long: Hugging Face's ``token-classification`` pipeline with ``stride`` cuts
    it into windows of ``max_seq_length`` tokens (capped at the model's ``max_position_embeddings``) that overlap by
    ``doc_stride`` tokens (:func:`tagging_windows`), and merges the entities of overlapping windows (the longer,
    then the higher-scored, entity wins).

    Raises:
        PipelineError: ``max_seq_length`` holds no text after the special tokens.
    """
    from transformers import pipeline

    tokenizer, stride = tagging_windows(pred, max_seq_length, doc_stride)
    tagger = pipeline("token-classification", model=pred.model, tokenizer=tokenizer,
                      aggregation_strategy="first", stride=stride, device=-1)
    results = []
    for text in texts:
        found = tagger(text)
        results.append([{"type": e["entity_group"], "text": text[e["start"]:e["end"]], "start": int(e["start"]),
                         "end": int(e["end"]), "score": round(float(e["score"]), 4)} for e in found])
    return results


@torch.no_grad()
def answer(pred: Predictor, question: str, context: str, max_seq_length: int = 384, doc_stride: int = 128,
           n_best: int = 20, max_answer_length: int = 30) -> dict:
    """The best answer span in ``context``: ``{"answer", "start", "end", "score", "logit_sum", "windows",
    "question_truncated"}`` (character offsets; the number of windows the context took; whether the question
    was cut to ``max_seq_length // 2`` tokens, the one limit left: every context token is in some window).

    The windows and the decoding are the ones fine-tuning scores the test split with
    (:func:`bert_pipeline.model.heads.prepare_qa_features`, :func:`bert_pipeline.model.heads.decode_qa`): windows
    of ``max_seq_length`` tokens overlapping by ``doc_stride`` tokens, n-best start/end pairs of at most
    ``max_answer_length`` tokens, ranked by ``logit_sum``, the span's ``start_logit + end_logit`` (unnormalised:
    comparable between spans of one model only). ``score`` is the span's probability as Hugging Face's
    question-answering pipeline reports it (:func:`bert_pipeline.model.heads.span_probability`: softmax of the
    start and of the end logits over its window's context tokens and ``[CLS]``, multiplied), in [0, 1].

    Raises:
        PipelineError: the question leaves no room for the context in ``max_seq_length`` tokens.
    """
    tok = pred.tokenizer
    max_seq_length = max_length(pred, max_seq_length)
    try:
        feats = prepare_qa_features(tok, [question], [context], None, max_seq_length, doc_stride)
    except ValueError as exc:
        raise PipelineError(f"--max-seq-length {max_seq_length}: {exc}") from None
    windows = [{k: feats[k][i] for k in MODEL_INPUTS if k in feats} for i in range(len(feats["input_ids"]))]
    out = pred.model(**tok.pad(windows, return_tensors="pt"))
    lengths = [len(w["input_ids"]) for w in windows]
    starts = [out.start_logits[i, :n].float().numpy() for i, n in enumerate(lengths)]
    ends = [out.end_logits[i, :n].float().numpy() for i, n in enumerate(lengths)]
    (span,) = decode_qa([context], feats["example_index"], feats["offset_mapping"], starts, ends, n_best,
                        max_answer_length)
    return {"answer": span.text, "start": span.start, "end": span.end,
            "score": None if span.probability is None else round(span.probability, 4),
            "logit_sum": None if span.score is None else round(span.score, 4), "windows": len(windows),
            "question_truncated": feats["question_truncated"][0]}
