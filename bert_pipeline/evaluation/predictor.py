"""Inference with a fine-tuned model folder: sentiment label + probability, NER entities with character offsets,
extractive QA answers with character offsets.

A folder written by ``finetune`` (``save_pretrained`` + tokenizer) says which head it has in
``config.architectures``; :func:`load_predictor` picks the matching ``AutoModelFor*`` class. Token classification
goes through Hugging Face's ``token-classification`` pipeline (``aggregation_strategy="first"``: a word takes
its first sub-token's label, consecutive ``B-X I-X ...`` words merge into one entity). Transformers 5 has no
question-answering pipeline, so the extractive-QA post-processing is ours: the standard span search of
Devlin et al. 2019, §4.2 (best ``start_logit + end_logit`` with ``start <= end``, answer at most
``max_answer_tokens`` long, inside the context), over windows of ``max_seq_length`` tokens that overlap by
``doc_stride`` tokens when the context is long.
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

log = logging.getLogger(__name__)

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
    try:
        archs = json.loads(cfg.read_text(encoding="utf-8")).get("architectures") or []
    except FileNotFoundError:
        raise PipelineError(f"{cfg}: not found (expected a save_pretrained model folder)") from None
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
        AutoTokenizer,
    )

    kind = model_kind(model_dir)
    cls = {"sequence-classification": AutoModelForSequenceClassification,
           "token-classification": AutoModelForTokenClassification,
           "question-answering": AutoModelForQuestionAnswering}[kind]
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
        if kind == "sequence-classification" and cfg.get("classifier_pooling", "cls") != "cls":
            # finetune's mean-pooling head (bert_pipeline.model.heads) restores itself from config.classifier_pooling
            from bert_pipeline.model.heads import load_sequence_classifier

            model = load_sequence_classifier(str(model_dir))
        else:
            model = cls.from_pretrained(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except OSError as exc:
        raise PipelineError(f"{model_dir}: cannot load model or tokenizer ({str(exc).splitlines()[0]})") from None
    model.eval()
    return Predictor(kind=kind, model=model, tokenizer=tokenizer, model_dir=Path(model_dir))


def max_length(pred: Predictor, requested: int) -> int:
    """``requested`` capped at the model's ``max_position_embeddings`` (a longer input would not run)."""
    limit = getattr(pred.model.config, "max_position_embeddings", None)
    return min(requested, limit) if limit else requested


@torch.no_grad()
def class_probabilities(pred: Predictor, texts: Sequence[str], batch_size: int = 32,
                        max_seq_length: int = 128) -> torch.Tensor:
    """Softmax class probabilities, ``(len(texts), num_labels)`` float32, in the order of ``texts``.

    Texts are batched by length (``batch_size`` at a time, padded to the longest in the batch) so little
    compute goes to padding; the result does not depend on the batching.
    """
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    probs = torch.zeros(len(texts), pred.model.config.num_labels)
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        enc = pred.tokenizer([texts[j] for j in idx], padding=True, truncation=True,
                             max_length=max_length(pred, max_seq_length), return_tensors="pt")
        probs[idx] = torch.softmax(pred.model(**enc).logits.float(), dim=-1)
    return probs


def classify(pred: Predictor, texts: Sequence[str], batch_size: int = 32, max_seq_length: int = 128) -> list[dict]:
    """``[{"label": name, "probability": p}]`` per text: the arg-max class and its softmax probability."""
    probs = class_probabilities(pred, texts, batch_size, max_seq_length)
    id2label = pred.model.config.id2label
    return [{"label": id2label[int(p.argmax())], "probability": round(float(p.max()), 4)} for p in probs]


def entities(pred: Predictor, texts: Sequence[str]) -> list[list[dict]]:
    """Per text, its entities ``{"type", "text", "start", "end", "score"}`` (character offsets, end exclusive)."""
    from transformers import pipeline

    tagger = pipeline("token-classification", model=pred.model, tokenizer=pred.tokenizer,
                      aggregation_strategy="first", device=-1)
    results = []
    for text in texts:
        found = tagger(text)
        results.append([{"type": e["entity_group"], "text": text[e["start"]:e["end"]], "start": int(e["start"]),
                         "end": int(e["end"]), "score": round(float(e["score"]), 4)} for e in found])
    return results


@torch.no_grad()
def answer(pred: Predictor, question: str, context: str, max_seq_length: int = 384, doc_stride: int = 128,
           max_answer_tokens: int = 30) -> dict:
    """The best answer span in ``context``: ``{"answer", "start", "end", "score"}`` (character offsets).

    ``score`` is ``start_logit + end_logit`` of the span (Devlin et al. 2019, §4.2). Long contexts are split into
    windows of ``max_seq_length`` tokens overlapping by ``doc_stride`` tokens; the best span over all windows wins.
    """
    tok = pred.tokenizer
    max_seq_length = max_length(pred, max_seq_length)
    room = max_seq_length - len(tok(question, add_special_tokens=False)["input_ids"]) - 3  # [CLS] q [SEP] c [SEP]
    if room < 2:
        raise PipelineError(f"question of {max_seq_length - room - 3} tokens leaves no room for the context "
                         f"in {max_seq_length} tokens")
    doc_stride = min(doc_stride, room - 1)  # the tokenizer needs stride < context tokens per window
    enc = tok(question, context, truncation="only_second", max_length=max_seq_length, stride=doc_stride,
              return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")
    enc.pop("overflow_to_sample_mapping", None)
    out = pred.model(**{k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
    best = {"answer": "", "start": 0, "end": 0, "score": float("-inf")}
    for w in range(offsets.shape[0]):
        seq_ids = enc.sequence_ids(w)
        ctx = torch.tensor([s == 1 for s in seq_ids])
        start, end = out.start_logits[w].float(), out.end_logits[w].float()
        # span score matrix (seq, seq): start i, end j; keep i <= j < i + max_answer_tokens inside the context
        scores = start[:, None] + end[None, :]
        n = scores.shape[0]
        idx = torch.arange(n)
        valid = (idx[None, :] >= idx[:, None]) & (idx[None, :] - idx[:, None] < max_answer_tokens)
        valid &= ctx[:, None] & ctx[None, :]
        if not valid.any():
            continue
        scores = scores.masked_fill(~valid, float("-inf"))
        flat = int(scores.argmax())
        i, j = divmod(flat, n)
        if float(scores[i, j]) > best["score"]:
            s, e = int(offsets[w, i, 0]), int(offsets[w, j, 1])
            best = {"answer": context[s:e], "start": s, "end": e, "score": float(scores[i, j])}
    best["score"] = round(best["score"], 4) if best["score"] != float("-inf") else None
    return best
