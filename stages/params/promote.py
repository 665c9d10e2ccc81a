"""Schema of ``promote``, the section of ``bert-pipeline promote`` (no stage reads it)."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import Field

from stages.params.base import Section, View


class PromoteParams(Section):
    """``promote``: when ``bert-pipeline promote`` moves a task's ``champion`` alias to the challenger (the
    candidate: the best version on validation), judged on the paired bootstrap of the two versions' per-example
    validation records (:class:`bert_pipeline.mlops.promotion.PromotionRule`; resamples, confidence, seed and method
    are ``evaluate.intervals``').

    No stage reads it, so changing it never invalidates a stage; like ``orchestration`` it has defaults, and they are
    its single source. ``rule``: ``superiority`` (challenger minus champion has its lower bound above ``margin``),
    ``non_inferiority`` (a challenger with fewer parameters keeps at least ``1 - margin`` of the champion's score at
    its lower bound; one not smaller must be superior) or ``point`` (any higher validation score, no interval).
    ``margin``: a fraction in [0, 1) (a difference of the main metric, or a share of the champion's score).
    """

    rule: Literal["superiority", "non_inferiority", "point"] = "superiority"
    margin: Annotated[float, annotated_types.Ge(0.0), annotated_types.Lt(1.0)] = 0.0


class PromoteView(View):
    """What ``bert-pipeline promote`` reads of its own: ``promote``, all defaults when the section is absent."""

    promote: PromoteParams = Field(default_factory=PromoteParams)
