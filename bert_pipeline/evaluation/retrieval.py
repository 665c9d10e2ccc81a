"""Sentence embeddings and headline-to-article retrieval.

A sentence's embedding is the mean of the encoder's last hidden states over its real tokens, L2-normalised: the
pooling Sentence-BERT found best (Reimers & Gurevych 2019, §3 and Table 6) and the one the packaged MiniLM
(all-MiniLM-L6-v2) was trained with. Retrieval ranks every document by cosine similarity to a query; a query's
relevant document is the one at its own index. Scores: recall@1, recall@10 (the share of queries whose document
ranks first, in the first ten) and the mean reciprocal rank.

Fine-tuning for retrieval (:func:`contrastive_finetune`) uses in-batch negatives: each query's own document is the
positive and the batch's other documents the negatives, a cross-entropy over ``scale`` x cosine similarities
(Henderson et al. 2017, "Efficient Natural Language Response Suggestion", §4.4; DPR, Karpukhin et al. 2020, §3.2).

Everything here takes models, tokenizers, texts and the stage's :class:`bert_pipeline.train.runtime.Runtime` (the
device and autocast the encoder runs in, the fp16 loss scaler); the ``retrieval`` stage reads the pairs and writes
the record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from bert_pipeline.evaluation.report import markdown_table
from bert_pipeline.train.runtime import Runtime

log = logging.getLogger(__name__)

METRICS = ("recall_at_1", "recall_at_10", "mrr")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of ``hidden`` ``(batch, seq_len, hidden)`` over the positions where ``attention_mask``
    ``(batch, seq_len)`` is 1: ``(batch, hidden)`` in ``hidden``'s dtype (an all-padding row gives zeros)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def _encode(model: Any, tokenizer: Any, texts: Sequence[str], max_length: int, runtime: Runtime) -> torch.Tensor:
    """Mean-pooled, L2-normalised embeddings ``(len(texts), hidden)`` float32 of one batch, with gradients, on the
    runtime's device."""
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    inputs = {k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    if getattr(model.config, "type_vocab_size", 0) < 2:  # RoBERTa: one token type; ModernBERT, DeBERTa-v3: none
        inputs.pop("token_type_ids", None)
    inputs = runtime.to_device(inputs)
    with runtime.train_forward(model):
        hidden = model(**inputs).last_hidden_state
    return functional.normalize(mean_pool(hidden.float(), inputs["attention_mask"]), dim=-1)


@torch.inference_mode()
def embed(model: Any, tokenizer: Any, texts: Sequence[str], runtime: Runtime, *, batch_size: int = 64,
          max_length: int = 128) -> np.ndarray:
    """Sentence embeddings of ``texts``: ``(len(texts), hidden)`` float32, L2-normalised rows (mean pooling over
    real tokens, each text cut at ``max_length`` tokens). ``model`` is a bare encoder (``AutoModel``) of any
    family; it is put in eval mode on the runtime's device."""
    runtime.place(model)
    rows = [_encode(model, tokenizer, texts[i:i + batch_size], max_length, runtime)
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


def contrastive_finetune(model: Any, tokenizer: Any, queries: Sequence[str], documents: Sequence[str],
                         runtime: Runtime, *, epochs: int, batch_size: int, learning_rate: float, scale: float,
                         max_length: int, seed: int, max_grad_norm: float = 1.0) -> list[float]:
    """Fine-tune the encoder ``model`` in place so each query embeds near its own document: per batch of
    ``batch_size`` pairs, cross-entropy over ``scale`` x the cosine similarities of every query to every document
    of the batch (in-batch negatives; module docstring), AdamW at ``learning_rate`` with a linear decay to 0, the
    gradient norm clipped to ``max_grad_norm``, on the runtime's device and precision
    (:meth:`bert_pipeline.train.runtime.Runtime.step`). Batches are drawn in an order seeded by ``seed`` (the torch
    RNG, for dropout, too).

    Returns:
        The training loss of each step (nats).

    Raises:
        ValueError: different numbers of queries and documents, fewer than two pairs, or a non-finite loss
            (fp32/bf16; under fp16 the loss scaler skips such a step).
    """
    if len(queries) != len(documents) or len(queries) < 2:
        raise ValueError(f"contrastive_finetune: expected >= 2 (query, document) pairs, got {len(queries)} and "
                         f"{len(documents)}")
    torch.manual_seed(seed)
    order_rng = np.random.default_rng(seed)
    steps_per_epoch = -(-len(queries) // batch_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / (epochs * steps_per_epoch)))
    model, optimizer = runtime.prepare(model, optimizer)
    runtime.new_scaler()
    model.train()
    losses = []
    for _ in range(epochs):
        order = order_rng.permutation(len(queries))
        for start in range(0, len(order), batch_size):
            chosen = order[start:start + batch_size]
            if len(chosen) < 2:  # one pair has no negative
                continue
            q = _encode(model, tokenizer, [queries[i] for i in chosen], max_length, runtime)
            d = _encode(model, tokenizer, [documents[i] for i in chosen], max_length, runtime)
            loss = functional.cross_entropy(scale * q @ d.T, torch.arange(len(chosen), device=q.device))
            optimizer.zero_grad()
            runtime.backward(loss)
            outcome = runtime.step(model, optimizer, max_grad_norm, torch.isfinite(loss.detach()))
            if not outcome.applied and runtime.scaler is None:
                raise ValueError(f"contrastive_finetune: non-finite loss or gradient at step {len(losses)}")
            if outcome.applied:
                schedule.step()
            losses.append(loss.detach())
    model.eval()
    return [round(float(x), 6) for x in torch.stack(losses).tolist()] if losses else []


def retrieval_section(record: Mapping[str, Any] | None, source: str, reference: str = "minilm",
                      order: Sequence[str] = ()) -> str:
    """The report's "Sentence embeddings: retrieval" section: per member the zero-shot and fine-tuned recall@1,
    recall@10 and MRR in points (``record``: ``{"test_articles", "train_pairs", "members": {name: {"zero_shot":
    {...}, "fine_tuned": {...}}}}``), ``reference`` labelled as the reference; rows in ``order`` (the family
    table's), then the rest alphabetically. Empty without a record."""
    if not record or not record.get("members"):
        return ""
    header = ["model", *(f"zero-shot {m}" for m in ("R@1", "R@10", "MRR")), *(f"fine-tuned {m}" for m in
                                                                               ("R@1", "R@10", "MRR"))]
    rows = []
    members = record["members"]
    for name in [*(m for m in order if m in members), *sorted(set(members) - set(order))]:
        scores = members[name]
        label = f"{name} (reference)" if name == reference else name
        rows.append([label, *(f"{100 * scores[when][k]:.1f}" for when in ("zero_shot", "fine_tuned") for k in METRICS)])
    return "\n".join([
        "## Sentence embeddings: retrieval", "",
        f"Headline-to-article retrieval over {record['test_articles']} test articles (the headline_match task's "
        "test split, from the corpus's validation articles): each headline's mean-pooled embedding ranks every "
        "article's passage by cosine similarity; R@k: share of headlines whose own article ranks in the first k, "
        f"in points. Fine-tuned: in-batch negatives on {record['train_pairs']} training pairs. "
        f"`{reference}` (a sentence-embedding model trained with mean pooling) is the reference.", "",
        markdown_table(header, rows),
        f"Source: `{source}`.", "",
    ])
