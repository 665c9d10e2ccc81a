"""Schema of ``finetune`` (the family members, the tasks' settings, the grid) and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import Field, model_validator

from stages.params.base import Section, SizeName, View


class FinetuneModel(Section):
    """One model of the fine-tuning family. ``path``: a ``save_pretrained`` folder (tokenizer beside) or a hub
    name. ``init: pretrained`` loads its weights; ``init: random`` keeps only its architecture and tokenizer
    (the no-pre-training baseline), or, with ``size``, a named shape (tiny..large) with its tokenizer (a
    tokenizer-only folder needs ``size``). ``epochs`` and
    ``low_resource_epochs`` override the task's ``epochs`` and ``finetune.low_resource_epochs`` for this model
    (tiny models need more passes than real BERTs; null = no override). ``learning_rate: grid``: the learning
    rate and epochs caps are chosen on the validation split from ``finetune.grid`` (then ``epochs`` and
    ``low_resource_epochs`` must be null)."""

    path: str = Field(min_length=1)
    init: Literal["pretrained", "random"] = "pretrained"
    size: SizeName | None = None
    learning_rate: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)] | Literal["grid"]
    pooling: Literal["cls", "mean"] = "cls"
    epochs: Annotated[int, annotated_types.Ge(1)] | None = None
    low_resource_epochs: Annotated[int, annotated_types.Ge(1)] | None = None


class FinetuneTask(Section):
    """Per-task fine-tuning knobs. ``doc_stride`` (overlap in tokens of the windows a long input is cut into) is
    required for QA and NER tasks, ``n_best`` and ``max_answer_length`` for QA (checked when its ``task.json``
    says which kind it is).
    ``max_*_examples`` draw a seeded subset (``finetune.data_seed``); null = the whole split (``max_test_examples``
    is for the smoke profile: the default scores the whole test split)."""

    max_train_examples: Annotated[int, annotated_types.Ge(1)] | None = None
    max_validation_examples: Annotated[int, annotated_types.Ge(1)] | None = None
    max_test_examples: Annotated[int, annotated_types.Ge(1)] | None = None
    max_length: Annotated[int, annotated_types.Ge(16)]
    epochs: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    doc_stride: Annotated[int, annotated_types.Ge(0)] | None = None
    n_best: Annotated[int, annotated_types.Ge(1)] | None = None
    max_answer_length: Annotated[int, annotated_types.Ge(1)] | None = None


class FinetuneGrid(Section):
    """``finetune.grid``: one grid for every member whose ``learning_rate`` is ``grid`` (the fair comparison of
    pre-trained and random weights, which can suit different rates): each learning rate with each epochs cap,
    ``epochs`` for the full runs and ``low_resource_epochs`` for the low-resource runs, chosen on validation
    (:class:`bert_pipeline.train.finetune.Grid`)."""

    learning_rates: list[Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]] = Field(min_length=1)
    epochs: list[Annotated[int, annotated_types.Ge(1)]] = Field(min_length=1)
    low_resource_epochs: list[Annotated[int, annotated_types.Ge(1)]] = Field(min_length=1)


class FinetuneParams(Section):
    """``finetune``: AdamW with linear warmup/decay, early stopping on the validation metric, seeds, and the grid
    that members with ``learning_rate: grid`` are tuned on."""

    seeds: list[int] = Field(min_length=1)
    data_seed: int
    precision: Literal["auto", "fp32", "bf16", "fp16"]
    warmup_ratio: Annotated[float, annotated_types.Ge(0.0), annotated_types.Lt(1.0)]
    weight_decay: Annotated[float, annotated_types.Ge(0.0)]
    max_grad_norm: Annotated[float, annotated_types.Gt(0.0)]
    early_stopping_patience: Annotated[int, annotated_types.Ge(1)]
    evals_per_epoch: Annotated[int, annotated_types.Ge(1)]
    eval_batch_size: Annotated[int, annotated_types.Ge(1)]
    num_threads: Annotated[int, annotated_types.Ge(1)] | None
    low_resource_train_examples: Annotated[int, annotated_types.Ge(1)]
    low_resource_epochs: Annotated[int, annotated_types.Ge(1)] | None
    low_resource_tasks: list[str]
    grid: FinetuneGrid
    user_model: FinetuneModel
    models: dict[str, FinetuneModel] = Field(min_length=1)
    tasks: dict[str, FinetuneTask] = Field(min_length=1)

    @model_validator(mode="after")
    def _grid_members(self) -> FinetuneParams:
        entries = {f"models.{name}": member for name, member in self.models.items()}
        for where, member in {**entries, "user_model": self.user_model}.items():
            if member.learning_rate == "grid":
                for key in ("epochs", "low_resource_epochs"):
                    if getattr(member, key) is not None:
                        raise ValueError(f"finetune.{where}.{key}: expected null with learning_rate grid (the "
                                         f"caps come from finetune.grid.{key}), got {getattr(member, key)}")
        unknown = [t for t in self.low_resource_tasks if t not in self.tasks]
        if unknown:
            raise ValueError(f"finetune.low_resource_tasks: {unknown[0]!r} is not a key of finetune.tasks")
        return self


class FinetuneView(View):
    """What stage ``finetune@{model}-{task}`` reads."""

    finetune: FinetuneParams
