"""Schema of ``budget_curve`` and the stage's view."""

from __future__ import annotations

from typing import Annotated

import annotated_types
from pydantic import Field, model_validator

from stages.params.base import Section, View
from stages.params.evaluate import BootstrapView
from stages.params.finetune import FinetuneParams
from stages.params.pretrain import PretrainParams


class BudgetCurveParams(Section):
    """``budget_curve``: the downstream gain of pre-training (``member`` minus ``baseline``, each task's test main
    metric) against the pre-training budget, as fractions of ``pretrain.max_steps``.

    Budget 0 is the baseline itself and budget 1 the pipeline's own ``models/pretrained`` (their fine-tuning
    metrics are read); each of ``fractions`` is pre-trained by the stage with ``pretrain``'s every other setting and
    fine-tuned on ``tasks`` with ``member``'s settings (:mod:`stages.budget_curve`).
    """

    member: str = Field(min_length=1)
    baseline: str = Field(min_length=1)
    fractions: list[Annotated[float, annotated_types.Gt(0.0), annotated_types.Le(16.0)]]
    tasks: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> BudgetCurveParams:
        if any(f == 1.0 for f in self.fractions):
            raise ValueError("budget_curve.fractions: 1 is the pipeline's own pre-training (always a point); "
                             "list only the other budgets")
        if len(set(self.fractions)) != len(self.fractions):
            raise ValueError(f"budget_curve.fractions: expected distinct values, got {self.fractions}")
        return self


class BudgetCurveView(View):
    """What stage ``budget_curve`` reads: its section, ``pretrain`` and ``finetune``, whose code it runs at each
    budget, and ``evaluate.intervals``' resampling settings (the gains' intervals)."""

    budget_curve: BudgetCurveParams
    pretrain: PretrainParams
    finetune: FinetuneParams
    evaluate: BootstrapView
