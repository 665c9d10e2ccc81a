"""Schema of ``evaluate`` and the stage's view."""

from __future__ import annotations

from typing import Annotated

import annotated_types
from pydantic import Field

from stages.params.base import Section, SpeedSeqLength, View


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


class EvaluateView(View):
    """What stage ``evaluate`` reads."""

    evaluate: EvaluateParams
