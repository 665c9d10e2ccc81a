"""Sentence embeddings and headline-to-article retrieval.

A sentence's embedding is the mean of the encoder's last hidden states over its real tokens, L2-normalised: the
pooling Sentence-BERT found best (Reimers & Gurevych 2019, §3 and Table 6) and the one the packaged MiniLM
(all-MiniLM-L6-v2) was trained with. Retrieval ranks every document by cosine similarity to a query; a query's
relevant document is the one at its own index. Scores: recall@1, recall@10 (the share of queries whose document
ranks first, in the first ten) and the mean reciprocal rank.

Each score is the mean of a per-query statistic of the rank of the query's own document (``rank <= k``,
``1 / rank``), so one column, the gold ranks (:func:`gold_ranks`), is a retrieval run's whole per-example result:
:func:`retrieval_record` stores it as a per-example record of kind ``retrieval``
(:mod:`bert_pipeline.evaluation.examples`) and :data:`STATISTICS` gives it a task kind's three per-example methods,
so the paired bootstrap (:class:`bert_pipeline.evaluation.intervals.Bootstrap`) puts intervals on the scores and on
one member's difference from another (:func:`interval_scores`) exactly as on a task's.

Fine-tuning for retrieval (in-batch negatives) is training: :mod:`bert_pipeline.train.contrastive`; the report's
table of these scores is :mod:`bert_pipeline.report.retrieval`.

Everything here takes models, tokenizers, texts and the stage's runtime (a
:class:`bert_pipeline.train.runtime.Runtime`: the device and autocast the encoder runs in); the ``retrieval`` stage
reads the pairs and writes the records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch.nn import functional

from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash
from bert_pipeline.evaluation.intervals import Bootstrap

log = logging.getLogger(__name__)

METRICS = ("recall_at_1", "recall_at_10", "mrr")
"""The scores, in the order the report prints them; each a fraction of the queries (MRR: a mean of 1 / rank)."""
KIND = "retrieval"
"""The per-example record's kind (:attr:`ExampleRecord.kind`) of a retrieval run: not a task kind."""


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


def gold_ranks(queries: np.ndarray, documents: np.ndarray) -> np.ndarray:
    """Each query's rank ``(n,)`` int64 (1 = first) of its relevant document when ``documents`` ``(n, hidden)`` are
    ranked by cosine similarity (rows are unit vectors) to each of ``queries`` ``(n, hidden)``, query ``i``'s
    relevant document being row ``i``. A document tied with the relevant one ranks before it only at a lower index.

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
    return (ahead.sum(1) + 1).astype(np.int64)


def rank_metrics(ranks: Sequence[int] | np.ndarray) -> dict[str, float]:
    """Recall@1, recall@10 and MRR of gold ranks (:func:`gold_ranks`), each rounded to 6 digits: the summed
    per-query statistics of :data:`STATISTICS` over all queries, the same sums a bootstrap draw takes.

    Raises:
        ValueError: no ranks.
    """
    columns = STATISTICS.example_columns(None, ranks)
    if not len(columns["rank"]):
        raise ValueError("retrieval_metrics: expected at least one query")
    sums = {k: np.asarray(v.sum()) for k, v in STATISTICS.example_sums(columns).items()}
    scores = STATISTICS.metrics_from_sums(sums, np.asarray(float(len(columns["rank"]))))
    return {m: round(float(scores[m]), 6) for m in METRICS}


def retrieval_metrics(queries: np.ndarray, documents: np.ndarray) -> dict[str, float]:
    """Recall@1, recall@10 and MRR (:func:`rank_metrics`) of ranking ``documents`` ``(n, hidden)`` by cosine
    similarity to each of ``queries`` ``(n, hidden)``, query ``i``'s relevant document being row ``i``
    (:func:`gold_ranks`).

    Raises:
        ValueError: different numbers of queries and documents, or none.
    """
    return rank_metrics(gold_ranks(queries, documents))


class RetrievalStatistics:
    """The per-example statistics of a retrieval record (kind :data:`KIND`), with the three methods of a task kind
    that the paired bootstrap calls (:meth:`bert_pipeline.tasks.base.TaskKind.example_columns`,
    :meth:`~bert_pipeline.tasks.base.TaskKind.example_sums`,
    :meth:`~bert_pipeline.tasks.base.TaskKind.metrics_from_sums`): a query is an example, its one column the rank
    of its relevant document; every score is a sum over queries divided by their number. ``interval_metrics``:
    :data:`METRICS` (recall@1, the main metric, first)."""

    name = KIND
    main_metric = METRICS[0]
    interval_metrics = METRICS
    cutoffs = (1, 10)
    """The k of each recall@k, in :data:`METRICS`' order."""

    def __repr__(self) -> str:
        return f"RetrievalStatistics({self.name!r})"

    def example_columns(self, references: Sequence[Any] | None, predictions: Sequence[int] | np.ndarray,
                        label_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """``rank`` (int64): ``predictions``, each query's rank of its relevant document (:func:`gold_ranks`,
        1 = first). ``references`` and ``label_names`` are not read: a query's relevant document is fixed (its own
        row), so the rank says all.

        Raises:
            ValueError: a rank below 1.
        """
        rank = np.asarray(predictions, dtype=np.int64).reshape(-1)
        if rank.size and rank.min() < 1:
            raise ValueError(f"rank: expected ranks >= 1 (1 = first), got {int(rank.min())}")
        return {"rank": rank}

    def example_sums(self, columns: Mapping[str, np.ndarray], label_names: Sequence[str] | None = None
                     ) -> dict[str, np.ndarray]:
        """Per query ``hit_at_{k}`` (1.0 when its document ranks in the first k) and ``reciprocal_rank``, float64."""
        rank = np.asarray(columns["rank"], dtype=np.float64)
        out = {f"hit_at_{k}": (rank <= k).astype(np.float64) for k in self.cutoffs}
        out["reciprocal_rank"] = 1.0 / rank
        return out

    def metrics_from_sums(self, sums: Mapping[str, np.ndarray], n: np.ndarray,
                          label_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """``recall_at_{k}`` = summed hits / ``n``, ``mrr`` = summed reciprocal ranks / ``n`` (any equal shapes,
        e.g. ``(resamples,)``)."""
        out = {f"recall_at_{k}": sums[f"hit_at_{k}"] / n for k in self.cutoffs}
        out["mrr"] = sums["reciprocal_rank"] / n
        return out


STATISTICS = RetrievalStatistics()
"""The one instance (stateless, as a task kind's): what :func:`bert_pipeline.evaluation.intervals.statistics_of`
returns for a record of kind :data:`KIND`."""


def retrieval_record(ids: Sequence[str], clusters: Sequence[str], references: Sequence[Any],
                     runs: Mapping[str, Sequence[int] | np.ndarray], seed: int, split: str = "test") -> ExampleRecord:
    """One member's per-example record of its retrieval runs on ``split``: kind :data:`KIND`, main metric
    recall@1, one run per entry of ``runs`` (e.g. ``zero_shot``, ``fine_tuned``: each query's gold rank, in the
    queries' order) under ``seed``; ``ids`` (each query's stable id), ``clusters`` (the unit its query was drawn
    with: its source article) and ``references`` (what makes a query and its relevant document, e.g. the
    ``[query, document]`` texts) give the split's :class:`SplitInfo` and hash, so every member scored on the same
    pairs is paired with every other.

    Raises:
        bert_pipeline.evaluation.examples.ExamplesError: a run whose length is not the number of queries.
        ValueError: unequal ``ids``, ``clusters`` and ``references``, or a rank below 1.
    """
    if not len(ids) == len(clusters) == len(references):
        raise ValueError(f"retrieval_record: expected one id, cluster and reference per query, got {len(ids)}, "
                         f"{len(clusters)} and {len(references)}")
    record = ExampleRecord(KIND, STATISTICS.main_metric, None)
    record.splits[split] = SplitInfo([str(x) for x in ids], [str(x) for x in clusters], split_hash(ids, references))
    for run, ranks in runs.items():
        record.add(split, run, seed, STATISTICS.example_columns(None, ranks))
    return record


def interval_scores(bootstrap: Bootstrap, record: ExampleRecord, run: str, *, against: ExampleRecord | None = None,
                    split: str = "test") -> dict[str, float]:
    """``{METRIC, METRIC_ci_low, METRIC_ci_high}`` for each of :data:`METRICS` (fractions rounded to 6 digits) of
    ``record``'s ``run`` on ``split``: its score with the bootstrap's interval or, with ``against`` (another
    member's record of the same pairs), the paired difference ``record - against`` with its interval
    (:meth:`Bootstrap.score`, :meth:`Bootstrap.difference`).

    Raises:
        bert_pipeline.evaluation.examples.ExamplesError: no such run, or ``against`` scored other pairs.
    """
    mine = bootstrap.estimates(record, split, run)
    theirs = bootstrap.estimates(against, split, run) if against is not None else None
    out: dict[str, float] = {}
    for metric in METRICS:
        if theirs is None:
            interval = bootstrap.score(mine[metric]).rounded(6)
        else:
            interval = bootstrap.difference(mine[metric], theirs[metric]).rounded(6)
        out.update({metric: interval.point, f"{metric}_ci_low": interval.low, f"{metric}_ci_high": interval.high})
    return out
