"""Schema of ``evaluate`` and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import Field

from stages.params.base import Section, SpeedSeqLength, View

CONTRASTS = ("gain_over_scratch", "student_share", "low_resource_gain", "distillation_share")
"""The report's contrast families (each: one per task): the pre-trained teacher minus the scratch baseline, the
general-distillation student's share of the teacher, the same gain in the low-resource runs, each task-specific
student's share of its teacher."""


Resamples = Annotated[int, annotated_types.Ge(100)]
Confidence = Annotated[float, annotated_types.Gt(0.5), annotated_types.Lt(1.0)]
IntervalMethod = Literal["percentile", "basic"]


class IntervalParams(Section):
    """``evaluate.intervals``: the paired bootstrap every published comparison carries
    (:class:`bert_pipeline.evaluation.intervals.Bootstrap`): ``resamples`` draws of each held-out split (whole
    clusters: articles, films), at ``confidence``, seeded with ``seed``, bounds by ``method`` (``percentile`` or
    ``basic``). ``primary``: the contrast families declared before looking (:data:`CONTRASTS`); their intervals are
    Bonferroni-adjusted over every primary contrast of the report, and the rest are labelled exploratory."""

    resamples: Resamples
    confidence: Confidence
    seed: int
    method: IntervalMethod
    primary: list[Literal[CONTRASTS]]


class IntervalSettings(View):
    """The part of ``evaluate.intervals`` a stage reads that publishes intervals beside its own figures
    (``budget_curve``, ``variants``, ``retrieval``, ``model_cards``, ``bert-pipeline compare``): how to resample
    (``resamples``, ``confidence``, ``seed``, ``method``), not which of the report's contrasts are primary (those
    intervals are not Bonferroni-adjusted)."""

    resamples: Resamples
    confidence: Confidence
    seed: int
    method: IntervalMethod


class BootstrapView(View):
    """``evaluate.intervals``' resampling settings (:class:`IntervalSettings`), as part of another stage's view."""

    intervals: IntervalSettings


class EvaluateParams(Section):
    """``evaluate``: the family's roles, how CPU inference speed is measured, how many test examples the plots use.

    Speed (Dehghani et al. 2022, "The Efficiency Misnomer": report latency and throughput, batch and length):
    each member's fine-tuned ``speed_task`` model on CPU with ``num_threads`` threads, inputs padded to
    ``seq_length`` tokens; latency = ms per example at batch 1 over ``latency_examples`` examples, throughput =
    examples/s at batch ``throughput_batch_size``; each the median of ``timed_runs`` runs after ``warmup_runs``.
    """

    teacher: str = Field(min_length=1)
    student: str = Field(min_length=1)
    scratch: str = Field(min_length=1)
    speed_task: str = Field(min_length=1)
    seq_length: SpeedSeqLength
    latency_examples: Annotated[int, annotated_types.Ge(1)]
    throughput_batch_size: Annotated[int, annotated_types.Ge(1)]
    warmup_runs: Annotated[int, annotated_types.Ge(0)]
    timed_runs: Annotated[int, annotated_types.Ge(1)]
    num_threads: Annotated[int, annotated_types.Ge(1)]
    confusion_max_examples: Annotated[int, annotated_types.Ge(1)] | None
    intervals: IntervalParams


class EvaluateView(View):
    """What stage ``evaluate`` reads."""

    evaluate: EvaluateParams
