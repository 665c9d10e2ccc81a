"""Schema of ``task_distill`` and the views of its two stages, ``teacher_logits`` and ``distill_task``."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import Field, field_validator, model_validator

from bert_pipeline.errors import PipelineError
from stages.params.base import Section, View
from stages.params.finetune import FinetuneParams


class TaskDistillParams(Section):
    """``task_distill``: task-specific distillation (Sanh et al. 2019, §4.2; Hinton et al. 2015) of the fine-tuned
    ``teacher`` member into a student with ``student_layers`` of its layers (``layer_selection``: its lowest,
    "bottom", or spread evenly, "uniform"), named ``student`` in the family.

    Stage ``teacher_logits@{task}`` caches the teacher's logits on the transfer set: the labelled subset the teacher
    was fine-tuned on (``finetune.tasks.{task}.max_train_examples``, ``finetune.data_seed``) plus
    ``teacher_only_examples[task]`` more training-split examples only the teacher labels. Stage
    ``distill_task@{task}`` trains the student on ``alpha_ce * KL * T^2 + alpha_task * task loss`` in the
    fine-tuning loop (``finetune``'s warmup, decay, clipping, early stopping and held-out subsets), once per seed,
    for ``epochs[task]`` passes over the transfer set (null: ``finetune.tasks.{task}.epochs``).
    """

    teacher: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.]+$")
    student: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.]+$")
    student_layers: Annotated[int, annotated_types.Ge(1)] | None
    layer_selection: Literal["bottom", "uniform"]
    temperature: Annotated[float, annotated_types.Gt(0.0)]
    alpha_ce: Annotated[float, annotated_types.Ge(0.0)]
    alpha_task: Annotated[float, annotated_types.Ge(0.0)]
    learning_rate: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]
    epochs: dict[str, Annotated[int, annotated_types.Ge(1)] | None]
    seeds: list[int] = Field(min_length=1)
    teacher_only_examples: dict[str, Annotated[int, annotated_types.Ge(0)]]
    teacher_batch_size: Annotated[int, annotated_types.Ge(1)]

    @field_validator("epochs", mode="before")
    @classmethod
    def _epochs_per_task(cls, value: Any) -> Any:
        if not isinstance(value, dict):  # the format before epochs were per task: one number for all
            raise ValueError(f"task_distill.epochs: expected one entry per task, e.g. {{sentiment: 1, ner: 1, qa: 1}} "
                             f"(a task's null: its finetune.tasks epochs), got {json.dumps(value)}")
        return value

    @model_validator(mode="after")
    def _weights(self) -> TaskDistillParams:
        if self.alpha_ce == 0 and self.alpha_task == 0:
            raise ValueError("task_distill.alpha_ce, task_distill.alpha_task: expected at least one > 0, got both 0")
        return self


class TaskDistillView(View):
    """What stages ``teacher_logits@{task}`` and ``distill_task@{task}`` read: the distillation settings and the fine-tuning settings the teacher was trained with."""

    task_distill: TaskDistillParams
    finetune: FinetuneParams


def check_teacher(params: TaskDistillView) -> None:
    """Raise a one-line :class:`PipelineError` when ``task_distill.teacher`` is not a ``finetune.models`` key (the
    stage ``finetune@{teacher}-{task}`` that makes its folder, and whose settings the student's card cites). Checked
    by both stages of the view, ``teacher_logits`` and ``distill_task``, when they run."""
    if params.task_distill.teacher not in params.finetune.models:
        raise PipelineError(f"params.yaml: task_distill.teacher: {params.task_distill.teacher!r} is not a key of "
                            f"finetune.models (known: {', '.join(sorted(params.finetune.models))}); name the "
                            "fine-tuned member to distil")
