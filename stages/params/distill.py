"""Schema of ``distill`` and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import model_validator

from stages.params.base import Section, View


class DistillParams(Section):
    """``distill``: a DistilBERT-style student from the pre-trained teacher (Sanh et al. 2019).

    ``student_layers: null`` means half the teacher's layers; the upper bound (the teacher's depth) is only known
    when the stage reads ``models/pretrained/`` and is checked there. Loss weights are DistilBERT's defaults.
    """

    student_layers: Annotated[int, annotated_types.Ge(1)] | None
    temperature: Annotated[float, annotated_types.Gt(0.0)]
    alpha_ce: Annotated[float, annotated_types.Ge(0.0)]
    alpha_mlm: Annotated[float, annotated_types.Ge(0.0)]
    alpha_cos: Annotated[float, annotated_types.Ge(0.0)]
    cos_positions: Literal["tokens", "masked"]
    learning_rate: Annotated[float, annotated_types.Gt(0.0)]
    weight_decay: Annotated[float, annotated_types.Ge(0.0)]
    warmup_steps: Annotated[int, annotated_types.Ge(0)]
    max_steps: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    gradient_accumulation_steps: Annotated[int, annotated_types.Ge(1)]
    max_grad_norm: Annotated[float, annotated_types.Gt(0.0)]
    max_bad_steps: Annotated[int, annotated_types.Ge(0)]
    logging_steps: Annotated[int, annotated_types.Ge(1)]
    eval_steps: Annotated[int, annotated_types.Ge(1)]
    eval_batch_size: Annotated[int, annotated_types.Ge(1)]
    eval_batches: Annotated[int, annotated_types.Ge(1)] | None
    final_eval_batches: Annotated[int, annotated_types.Ge(1)] | None
    save_steps: Annotated[int, annotated_types.Ge(1)]
    save_total_limit: Annotated[int, annotated_types.Ge(1)]
    precision: Literal["auto", "fp32", "bf16", "fp16"]
    seed: int
    throughput_runs: Annotated[int, annotated_types.Ge(1)]
    throughput_warmup: Annotated[int, annotated_types.Ge(0)]

    @model_validator(mode="after")
    def _some_loss(self) -> DistillParams:
        if self.alpha_ce == 0 and self.alpha_mlm == 0 and self.alpha_cos == 0:
            raise ValueError("distill.alpha_ce, distill.alpha_mlm, distill.alpha_cos: expected at least one > 0, got all 0")
        return self


class DistillView(View):
    """What stage ``distill`` reads."""

    distill: DistillParams
