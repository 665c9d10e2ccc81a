"""Schema of ``pretrain`` and the stage's view."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import model_validator

from bert_pipeline.model.families import BASE_FAMILY, FAMILIES
from stages.params.base import Section, SizeName, View
from stages.params.create_pretraining_data import (
    CreatePretrainingDataParams,
    PretrainInit,
    PretrainPhase,
    tokenizer_path,
)

# The params' family names: the keys of the family table, never a second list (a new entry is a new allowed value).
FamilyName = Literal[tuple(FAMILIES)]  # type: ignore[valid-type]


class PretrainModelParams(Section):
    """``pretrain.model``: ``size`` by name (:data:`bert_pipeline.model.sizes.SIZES`: tiny, mini, small, medium as in Turc et al.
    2019; base, large as in Devlin et al. 2019) and any ``BertConfig`` field in ``config`` (``vocab_size`` comes from
    the tokenizer). Ignored except for ``config`` dropout fields when ``pretrain.init`` is a checkpoint.

    ``family`` (:mod:`bert_pipeline.model.families`): ``bert``, ``roberta`` (``RobertaForMaskedLM``: objective
    ``none``, one token type; Liu et al. 2019) or ``albert`` (``AlbertForPreTraining``: SOP or none; Lan et al.
    2020), ``modernbert`` (``ModernBertForMaskedLM``: objective ``none``, no token types; Warner et al. 2024) or
    ``deberta`` (``DebertaV2ForMaskedLM``, DeBERTa-v3 settings: objective ``none``, no token types; He et al. 2021,
    2023), each at the size's layers, width, heads and FFN (ModernBERT's GeGLU at the same FFN parameter count).
    ALBERT's own: ``embedding_size`` (the factorised
    embedding E; null: the hidden size) and ``share_layers`` (one set of layer weights for every layer).
    """

    size: SizeName
    config: dict[str, Any]
    family: FamilyName = BASE_FAMILY
    embedding_size: Annotated[int, annotated_types.Ge(1)] | None = None
    share_layers: bool = False

    @model_validator(mode="after")
    def _factorised_fields(self) -> PretrainModelParams:
        if not FAMILIES[self.family].factorised and (self.embedding_size is not None or self.share_layers):
            key = "embedding_size" if self.embedding_size is not None else "share_layers"
            owners = "; ".join(f"{f.card_name}'s (family {f.name})" for f in FAMILIES.values() if f.factorised)
            raise ValueError(f"pretrain.model.{key}: {owners}; family {self.family!r} takes "
                             f"{'null' if key == 'embedding_size' else 'false'}")
        return self


class ComputeParams(Section):
    """``pretrain.compute``: ``num_processes`` > 1 runs the stage under ``accelerate launch`` (DDP, or FSDP with
    ``accelerate_config``, a YAML file of ``accelerate config``); a stage already started by a launcher (``torchrun``
    or ``accelerate launch`` on each of several machines) is not relaunched, and ``num_processes`` must be the
    launcher's total over every machine; ``num_workers`` data-loading processes."""

    num_processes: Annotated[int, annotated_types.Ge(1)]
    accelerate_config: str | None
    num_workers: Annotated[int, annotated_types.Ge(0)]


class PretrainParams(Section):
    """``pretrain``: BERT pre-training (MLM + NSP/SOP, or MLM only: the objective is create_pretraining_data's).

    ``init``: ``scratch`` (a new model of ``model.size``, tokenizer ``models/tokenizer/``) or the folder (or hub name)
    of a BERT checkpoint to continue pre-training (Gururangan et al. 2020); this one key also decides the tokenizer
    the instances are built with (:attr:`tokenizer_path`). ``batch_size`` is per process and micro-batch: the
    optimizer sees ``batch_size * gradient_accumulation_steps * compute.num_processes`` sequences per step.
    ``phases: []`` means one phase on ``data/pretraining/``. ``precision``: see
    :mod:`bert_pipeline.train.runtime` (``auto``: bf16 where the device runs it natively, fp16 on older GPUs,
    else fp32). ``head_learning_rate`` (null: ``learning_rate``) and ``head_only_steps`` are for a checkpoint
    whose MLM head is fresh: the head's own peak rate, and the first steps in which it learns alone.
    ``dropout`` (null: the config's) is the rate of every dropout layer while pre-training; the saved config keeps
    the config's rates, which fine-tuning uses.
    """

    init: PretrainInit
    model: PretrainModelParams
    dropout: Annotated[float, annotated_types.Ge(0.0), annotated_types.Lt(1.0)] | None
    optimizer: Literal["adamw", "lamb"]
    learning_rate: Annotated[float, annotated_types.Gt(0.0)]
    head_learning_rate: Annotated[float, annotated_types.Gt(0.0)] | None
    head_only_steps: Annotated[int, annotated_types.Ge(0)]
    weight_decay: Annotated[float, annotated_types.Ge(0.0)]
    adam_epsilon: Annotated[float, annotated_types.Gt(0.0)]
    warmup_steps: Annotated[int, annotated_types.Ge(0)]
    max_steps: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    gradient_accumulation_steps: Annotated[int, annotated_types.Ge(1)]
    max_grad_norm: Annotated[float, annotated_types.Gt(0.0)]
    precision: Literal["auto", "fp32", "bf16", "fp16"]
    phases: list[PretrainPhase]
    save_steps: Annotated[int, annotated_types.Ge(1)]
    save_total_limit: Annotated[int, annotated_types.Ge(1)]
    eval_steps: Annotated[int, annotated_types.Ge(1)]
    eval_batch_size: Annotated[int, annotated_types.Ge(1)]
    max_eval_batches: Annotated[int, annotated_types.Ge(1)] | None
    logging_steps: Annotated[int, annotated_types.Ge(1)]
    max_bad_steps: Annotated[int, annotated_types.Ge(0)]
    seed: int
    compute: ComputeParams

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer that builds the instances and that pre-training uses, decided by ``init`` alone
        (ARCHITECTURE.md, "data contracts"): ``models/tokenizer`` (train_tokenizer's output) for ``scratch``, else
        the checkpoint folder (or hub name) itself."""
        return tokenizer_path(self.init)

    @model_validator(mode="after")
    def _phases_and_steps(self) -> PretrainParams:
        if self.phases and abs(sum(p.fraction for p in self.phases) - 1.0) > 1e-6:
            total = sum(p.fraction for p in self.phases)
            raise ValueError(f"pretrain.phases: expected fractions summing to 1, got {total:g}")
        if self.warmup_steps > self.max_steps:
            raise ValueError(f"pretrain.warmup_steps: expected <= max_steps ({self.max_steps}), got {self.warmup_steps}")
        if self.head_only_steps + self.warmup_steps > self.max_steps:
            raise ValueError(f"pretrain.head_only_steps: expected head_only_steps + warmup_steps <= max_steps "
                             f"({self.max_steps}), got {self.head_only_steps} + {self.warmup_steps}")
        return self


def check_objective(pretrain: PretrainParams, objective: str) -> None:
    """Raise ``ValueError`` (the schema's one line) when ``create_pretraining_data.objective`` does not fit
    ``pretrain.model.family`` of a model pre-trained from scratch."""
    family = pretrain.model.family
    if pretrain.init == "scratch" and objective not in FAMILIES[family].objectives:
        allowed = FAMILIES[family].objectives
        paired = [name for name, entry in FAMILIES.items() if objective in entry.objectives]
        raise ValueError(f"create_pretraining_data.objective: {objective!r} does not fit pretrain.model.family "
                         f"{family!r} (expected one of {', '.join(allowed)}); set one of those as the objective"
                         + (f", or pretrain.model.family to one that takes {objective}: {', '.join(paired)}"
                            if paired else ""))


class PretrainView(View):
    """What stage ``pretrain`` reads: its section and ``create_pretraining_data.objective`` (the heads it trains)."""

    pretrain: PretrainParams
    create_pretraining_data: CreatePretrainingDataParams

    @model_validator(mode="after")
    def _objective_fits(self) -> PretrainView:
        check_objective(self.pretrain, self.create_pretraining_data.objective)
        return self
