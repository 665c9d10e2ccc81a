"""Sentence embeddings and headline-to-article retrieval.

A sentence's embedding is the mean of the encoder's last hidden states over its real tokens, L2-normalised: the
pooling Sentence-BERT found best (Reimers & Gurevych 2019, §3 and Table 6) and the one the packaged MiniLM
(all-MiniLM-L6-v2) was trained with. Retrieval ranks every document by cosine similarity to a query; a query's
relevant document is the one at its own index. Scores: recall@1, recall@10 (the share of queries whose document
ranks first, in the first ten) and the mean reciprocal rank.

Fine-tuning for retrieval (in-batch negatives) is training: :mod:`bert_pipeline.train.contrastive`; the report's
table of these scores is :mod:`bert_pipeline.report.retrieval`.

Everything here takes models, tokenizers, texts and the stage's runtime (a
:class:`bert_pipeline.train.runtime.Runtime`: the device and autocast the encoder runs in); the ``retrieval`` stage
reads the pairs and writes the record.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.nn import functional

log = logging.getLogger(__name__)

METRICS = ("recall_at_1", "recall_at_10", "mrr")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``hidden`` ``(batch, seq_len, hidden)`` over the positions where ``attention_mask``
    ``(batch, seq_len)`` is 1: ``(batch, hidden)`` in ``hidden``'s dtype (an all-padding row gives zeros)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def encode_batch(model: Any, tokenizer: Any, texts: Sequence[str], max_length: int, runtime: Any) -> torch.Tensor:
    """Mean-pooled, L2-normalised embeddings ``(len(texts), hidden)`` float32 of one batch, with gradients, on the
    runtime's device (shared with contrastive fine-tuning, :mod:`bert_pipeline.train.contrastive`)."""
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    inputs = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    if getattr(model.config, "type_vocab_size", 0) < 2:  # RoBERTa: one token type; ModernBERT, DeBERTa-v3: none
        inputs.pop("token_type_ids", None)
    inputs = runtime.to_device(inputs)
    with runtime.train_forward(model):
        hidden = model(**inputs).last_hidden_state
    return functional.normalize(mean_pool(hidden.float(), inputs["attention_mask"]), dim=-1)


@torch.inference_mode()
def embed(model: Any, tokenizer: Any, texts: Sequence[str], runtime: Any, *, batch_size: int = 64,
          max_length: int = 128) -> np.ndarray:
    """Sentence embeddings of ``texts``: ``(len(texts), hidden)`` float32, L2-normalised rows (mean pooling over
    real tokens, each text cut at ``max_length`` tokens). ``model`` is a bare encoder (``AutoModel``) of any
    family; it is put in eval mode on the runtime's device."""
    runtime.place(model)
    rows = [encode_batch(model, tokenizer, texts[i:i + batch_size], max_length, runtime)
            for i in range(0, len(texts), batch_size)]
    return torch.cat(rows).cpu().numpy() if rows else np.zeros((0, model.config.hidden_size), dtype=np.float32)


def retrieval_metrics(queries: np.ndarray, documents: np.ndarray) -> dict[str, float]:
    """Recall@1, recall@10 and MRR of ranking ``documents`` ``(n, hidden)`` by cosine similarity (rows are unit
    vectors) to each of ``queries`` ``(n, hidden)``, query ``i``'s relevant document being row ``i``. A document
    tied with the relevant one ranks before it only at a lower index.

    Raises:
        ValueError: different numbers of queries and documents, or none.
    """
    if len(queries) != len(documents) or not len(queries):
        raise ValueError(f"retrieval_metrics: expected as many queries as documents (> 0), got {len(queries)} and "
                         f"{len(documents)}")
    scores = queries.astype(np.float64) @ documents.astype(np.float64).T  # (n, n)
    own = np.diag(scores)[:, None]
    index = np.arange(len(scores))
    ahead = (scores > own) | ((scores == own) & (index[None, :] < index[:, None]))
    rank = ahead.sum(1) + 1  # 1 = first
    return {"recall_at_1": round(float(np.mean(rank <= 1)), 6), "recall_at_10": round(float(np.mean(rank <= 10)), 6),
            "mrr": round(float(np.mean(1.0 / rank)), 6)}
