"""Schema of ``variants`` and the stage's view."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from stages.params.base import Section, SpeedSeqLength, View
from stages.params.create_pretraining_data import CreatePretrainingDataParams
from stages.params.finetune import FinetuneParams
from stages.params.pretrain import PretrainParams
from stages.params.train_tokenizer import TrainTokenizerParams


class VariantsParams(Section):
    """``variants``: BERT, RoBERTa, ALBERT (and ModernBERT, DeBERTa on WordPiece) pre-trained at ``pretrain``'s size and step budget from the same corpus,
    each with its own vocabulary and pre-training data as its paper's recipe says, then fine-tuned on ``tasks`` with
    ``finetune.models[member]``'s settings (:mod:`stages.variants`, :mod:`bert_pipeline.evaluation.variants`).
    ``families`` empty (the default): the stage writes an empty record and trains nothing; profile ``variants``
    lists BERT, RoBERTa and ALBERT.
    """

    families: list[Literal["bert", "roberta", "albert", "modernbert", "deberta"]]
    member: str = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> VariantsParams:
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"variants.families: expected distinct families, got {self.families}")
        return self


class SpeedLength(View):
    """``evaluate.seq_length``: the input length the speed of an encoder is measured at."""

    seq_length: SpeedSeqLength


class VariantsView(View):
    """What stage ``variants`` reads: its section, the sections whose stages it runs per family, and the length speed is measured at."""

    variants: VariantsParams
    train_tokenizer: TrainTokenizerParams
    create_pretraining_data: CreatePretrainingDataParams
    pretrain: PretrainParams
    finetune: FinetuneParams
    evaluate: SpeedLength
