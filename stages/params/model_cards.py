"""The view of stage ``model_cards``: the params of the stages whose models it writes cards for (it has no section
of its own)."""

from __future__ import annotations

from stages.params.base import View
from stages.params.distill import DistillParams
from stages.params.evaluate import BootstrapView
from stages.params.finetune import FinetuneParams
from stages.params.pretrain import PretrainParams
from stages.params.task_distill import TaskDistillParams


class ModelCardsView(View):
    """What stage ``model_cards`` reads: ``pretrain`` and ``distill`` (the encoders' training settings),
    ``finetune``'s members, tasks and loop settings, ``task_distill``'s student settings, and
    ``evaluate.intervals`` (the scores' intervals)."""

    pretrain: PretrainParams
    distill: DistillParams
    finetune: FinetuneParams
    task_distill: TaskDistillParams
    evaluate: BootstrapView
