"""Contrastive fine-tuning of a sentence encoder for retrieval, with in-batch negatives: each query's own document is
the positive and the batch's other documents the negatives, a cross-entropy over ``scale`` x cosine similarities
(Henderson et al. 2017, "Efficient Natural Language Response Suggestion", §4.4; DPR, Karpukhin et al. 2020, §3.2).

Embeddings are :mod:`bert_pipeline.evaluation.retrieval`'s (mean pooling, L2-normalised), so the encoder is trained
on the vectors it is scored with. Everything here takes models, tokenizers, texts and the stage's
:class:`bert_pipeline.train.runtime.Runtime` (the device and autocast the encoder runs in, the fp16 loss scaler).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from bert_pipeline.evaluation.retrieval import encode_batch
from bert_pipeline.train.runtime import Runtime


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
            q = encode_batch(model, tokenizer, [queries[i] for i in chosen], max_length, runtime)
            d = encode_batch(model, tokenizer, [documents[i] for i in chosen], max_length, runtime)
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
