"""Schema of ``retrieval`` and the stage's view."""

from __future__ import annotations

from typing import Annotated

import annotated_types
from pydantic import Field

from stages.params.base import Section, View
from stages.params.evaluate import BootstrapView
from stages.params.finetune import FinetuneParams


class RetrievalParams(Section):
    """``retrieval``: sentence embeddings (mean pooling) of each of ``members`` (keys of ``finetune.models``) scored
    on headline-to-article retrieval over at most ``test_articles`` of the headline_match test split, zero-shot and
    after ``epochs`` of in-batch-negatives fine-tuning on at most ``train_pairs`` training pairs at
    ``learning_rate`` (``learning_rates``: per member), similarities times ``scale``, texts cut at ``max_length``
    tokens (:mod:`stages.retrieval`, :mod:`bert_pipeline.evaluation.retrieval`, :mod:`bert_pipeline.train.contrastive`).
    The first of ``members`` is the reference: every other member's scores are also given as its paired difference
    from the first's.
    """

    members: list[str] = Field(min_length=1)
    test_articles: Annotated[int, annotated_types.Ge(2)] | None
    train_pairs: Annotated[int, annotated_types.Ge(2)] | None
    epochs: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(2)]
    learning_rate: Annotated[float, annotated_types.Gt(0.0)]
    learning_rates: dict[str, Annotated[float, annotated_types.Gt(0.0)]]
    scale: Annotated[float, annotated_types.Gt(0.0)]
    max_length: Annotated[int, annotated_types.Ge(8)]
    seed: int


class RetrievalView(View):
    """What stage ``retrieval`` reads: its section, the members it embeds (``finetune.models``,
    ``finetune.num_threads``), the precision it fine-tunes them in (``finetune.precision``) and the bootstrap its
    intervals are drawn with (``evaluate.intervals``' ``resamples``, ``confidence``, ``seed``, ``method``)."""

    retrieval: RetrievalParams
    finetune: FinetuneParams
    evaluate: BootstrapView
