"""Schema of ``variants`` and the stage's view."""

from __future__ import annotations

from typing import Annotated

import annotated_types
from pydantic import Field, model_validator

from stages.params.base import Section, SpeedSeqLength, View
from stages.params.create_pretraining_data import CreatePretrainingDataParams
from stages.params.evaluate import IntervalSettings
from stages.params.finetune import FinetuneParams
from stages.params.pretrain import FamilyName, PretrainParams
from stages.params.train_tokenizer import TrainTokenizerParams


class FamilyBudget(Section):
    """``variants.budgets.FAMILY``: the family's own pre-training budget, for a screen at equal wall time rather
    than equal steps: ``max_steps`` (optimizer steps) and ``learning_rate`` (peak rate) in place of ``pretrain``'s
    (null: ``pretrain``'s own); warmup and every other ``pretrain`` setting stay the pipeline's."""

    max_steps: Annotated[int, annotated_types.Ge(1)] | None = None
    learning_rate: Annotated[float, annotated_types.Gt(0.0)] | None = None


class VariantsParams(Section):
    """``variants``: BERT, RoBERTa, ALBERT (and ModernBERT, DeBERTa on WordPiece) pre-trained at ``pretrain``'s
    size from the same corpus, each with its own vocabulary and pre-training data as its paper's recipe says, then
    fine-tuned on ``tasks`` with ``finetune.models[member]``'s settings (:mod:`stages.variants`,
    :mod:`bert_pipeline.report.variants`). ``families`` empty (the default): the stage writes an empty record
    and trains nothing; profile ``variants`` lists all five. ``scratch``: also fine-tune each family's own
    from-scratch baseline (its config and vocabulary, every weight drawn afresh) on each task, for the gain of its
    pre-training. ``budgets``: a family's own ``max_steps`` and ``learning_rate`` (:class:`FamilyBudget`; a family
    without an entry pre-trains at ``pretrain``'s), keys among ``families``.
    """

    families: list[FamilyName]
    member: str = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)
    scratch: bool
    budgets: dict[str, FamilyBudget]

    @model_validator(mode="after")
    def _distinct(self) -> VariantsParams:
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"variants.families: expected distinct families, got {self.families}")
        for family in self.budgets:
            if family not in self.families:
                listed = ", ".join(self.families) or "none"
                raise ValueError(f"variants.budgets.{family}: not a family of variants.families ({listed}); add "
                                 f"{family!r} to variants.families or remove its budget")
        return self


class SpeedLengthAndIntervals(View):
    """``evaluate.seq_length``: the input length the speed of an encoder is measured at; ``evaluate.intervals``'
    resampling settings (:class:`stages.params.evaluate.IntervalSettings`): the intervals of each score and
    difference."""

    seq_length: SpeedSeqLength
    intervals: IntervalSettings


class VariantsView(View):
    """What stage ``variants`` reads: its section, the sections whose stages it runs per family, the length speed is
    measured at and how its intervals resample."""

    variants: VariantsParams
    train_tokenizer: TrainTokenizerParams
    create_pretraining_data: CreatePretrainingDataParams
    pretrain: PretrainParams
    finetune: FinetuneParams
    evaluate: SpeedLengthAndIntervals
