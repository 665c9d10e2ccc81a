"""Schema of ``finetune`` (the family members, each with its own grid where it is tuned on one, the tasks'
settings) and the stage's view."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import annotated_types
from pydantic import Field, model_validator

from stages.params.base import Section, SizeName, View


class MemberTaskSettings(Section):
    """``finetune.models.M.tasks.T``: member M's own settings on task T, where they differ from ``finetune.tasks.T``
    and M's entry (null: no override). A real checkpoint converges at its own learning rate and number of passes
    per task (chosen on validation: ``bench/analysis/finetune_sweep.py``), and may train on more examples than the shared
    subset. ``max_train_examples: all`` is the whole training split."""

    learning_rate: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)] | None = None
    epochs: Annotated[int, annotated_types.Ge(1)] | None = None
    batch_size: Annotated[int, annotated_types.Ge(1)] | None = None
    max_train_examples: Annotated[int, annotated_types.Ge(1)] | Literal["all"] | None = None


class FinetuneGrid(Section):
    """``finetune.models.M.grid`` (or ``finetune.user_model.grid``): what member M, whose ``learning_rate`` is
    ``grid``, is tuned on (the fair comparison of pre-trained and random weights, which can suit different rates):
    each learning rate with each epochs cap, ``epochs`` for the full runs and ``low_resource_epochs`` for the
    low-resource runs, chosen on validation (:class:`bert_pipeline.train.finetune.Grid`)."""

    learning_rates: list[Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]] = Field(min_length=1)
    epochs: list[Annotated[int, annotated_types.Ge(1)]] = Field(min_length=1)
    low_resource_epochs: list[Annotated[int, annotated_types.Ge(1)]] = Field(min_length=1)


class FinetuneModel(Section):
    """One model of the fine-tuning family. ``path``: a ``save_pretrained`` folder (tokenizer beside) or a hub
    name. ``init: pretrained`` loads its weights; ``init: random`` keeps only its architecture and tokenizer
    (the no-pre-training baseline), or, with ``size``, a named shape (tiny..large) with its tokenizer (a
    tokenizer-only folder needs ``size``). ``tasks``: the member's own settings per task
    (:class:`MemberTaskSettings`; :meth:`FinetuneParams.settings_for` merges them). ``epochs`` and
    ``low_resource_epochs`` override the task's ``epochs`` and ``finetune.low_resource_epochs`` for this model
    (tiny models need more passes than real BERTs; null = no override). ``learning_rate: grid``: the learning
    rate and epochs caps are chosen on the validation split from the member's own ``grid`` (:class:`FinetuneGrid`;
    then ``epochs`` and ``low_resource_epochs`` must be null). The grid lives in the member that is tuned on it, so
    the DVC stages that declare a member's entry (``finetune@{member}-{task}``) are the only ones a grid edit
    reruns; a member with a numeric ``learning_rate`` has no ``grid``."""

    path: str = Field(min_length=1)
    init: Literal["pretrained", "random"] = "pretrained"
    size: SizeName | None = None
    learning_rate: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)] | Literal["grid"]
    pooling: Literal["cls", "mean"] = "cls"
    epochs: Annotated[int, annotated_types.Ge(1)] | None = None
    low_resource_epochs: Annotated[int, annotated_types.Ge(1)] | None = None
    tasks: dict[str, MemberTaskSettings] = {}
    grid: FinetuneGrid | None = None


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


# The ``finetune`` keys every member's fine-tuning reads (stages.members.train_member), beside its own entry and
# its tasks' settings; ``num_threads`` is the finetune stage's process setting, not the training's.
SHARED_KEYS = frozenset({"seeds", "data_seed", "precision", "warmup_ratio", "weight_decay", "max_grad_norm",
                         "early_stopping_patience", "evals_per_epoch", "eval_batch_size",
                         "low_resource_train_examples", "low_resource_epochs", "low_resource_tasks"})


class FinetuneParams(Section):
    """``finetune``: AdamW with linear warmup/decay, early stopping on the validation metric, seeds, the family
    members (a member with ``learning_rate: grid`` carries its own grid) and the tasks' settings."""

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
    user_model: FinetuneModel
    models: dict[str, FinetuneModel] = Field(min_length=1)
    tasks: dict[str, FinetuneTask] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _no_shared_grid(cls, data: Any) -> Any:
        if isinstance(data, dict) and "grid" in data:  # the layout before the grid moved into its member
            raise ValueError("finetune.grid: unknown key; a grid belongs to the member tuned on it: "
                             "finetune.models.NAME.grid beside its learning_rate: grid")
        return data

    @model_validator(mode="after")
    def _grid_members(self) -> FinetuneParams:
        entries = {f"models.{name}": member for name, member in self.models.items()}
        for where, member in {**entries, "user_model": self.user_model}.items():
            if member.learning_rate == "grid":
                if member.grid is None:
                    raise ValueError(f"finetune.{where}.grid: missing with learning_rate grid (expected a mapping "
                                     f"with keys learning_rates, epochs, low_resource_epochs)")
                for key in ("epochs", "low_resource_epochs"):
                    if getattr(member, key) is not None:
                        raise ValueError(f"finetune.{where}.{key}: expected null with learning_rate grid (the "
                                         f"caps come from finetune.{where}.grid.{key}), got {getattr(member, key)}")
            elif member.grid is not None:
                raise ValueError(f"finetune.{where}.grid: expected no grid with learning_rate "
                                 f"{member.learning_rate:g} (set learning_rate: grid to tune on it)")
            for task, own in member.tasks.items():
                if task not in self.tasks:
                    raise ValueError(f"finetune.{where}.tasks.{task}: not a key of finetune.tasks "
                                     f"({', '.join(sorted(self.tasks))})")
                if member.learning_rate == "grid" and (own.learning_rate, own.epochs) != (None, None):
                    raise ValueError(f"finetune.{where}.tasks.{task}: expected no learning_rate or epochs with "
                                     f"learning_rate grid (the grid chooses them)")
        unknown = [t for t in self.low_resource_tasks if t not in self.tasks]
        if unknown:
            raise ValueError(f"finetune.low_resource_tasks: {unknown[0]!r} is not a key of finetune.tasks")
        return self

    def settings_for(self, member: FinetuneModel, task: str, where: str = "finetune.user_model"
                     ) -> tuple[FinetuneModel, dict[str, Any], dict[str, str]]:
        """Member ``member`` (the entry at params key ``where``, e.g. ``finetune.models.minilm``) on ``task``:
        ``(the member with its task's learning_rate and epochs, the task's settings with its batch_size and
        max_train_examples, where each of those four came from: {key: params key})``. The task must be a key of
        ``tasks``."""
        own = member.tasks.get(task, MemberTaskSettings())
        source = {"learning_rate": f"{where}.grid" if member.learning_rate == "grid" else where,
                  "epochs": where if member.epochs is not None else f"finetune.tasks.{task}",
                  "batch_size": f"finetune.tasks.{task}", "max_train_examples": f"finetune.tasks.{task}"}
        if member.learning_rate == "grid":
            source["epochs"] = f"{where}.grid"
        updates: dict[str, Any] = {}
        settings = self.tasks[task].model_dump()
        for key, value in own.model_dump().items():
            if value is None:
                continue
            source[key] = f"{where}.tasks.{task}"
            if key in ("learning_rate", "epochs"):
                updates[key] = value
            else:
                settings[key] = None if value == "all" else value
        return member.model_copy(update=updates), settings, source

    def member_training(self, member_key: str, tasks: list[str]) -> dict[str, Any]:
        """Everything member ``finetune.models.{member_key}``'s fine-tuning on ``tasks`` reads, as plain JSON
        values: the loop's shared keys (:data:`SHARED_KEYS`), the member's entry (its grid included) and each
        task's settings. What a stage that fine-tunes one member itself (``budget_curve``, ``variants``)
        fingerprints its resumable work by and declares in ``dvc.yaml``: another member's entry or grid is not in
        it."""
        return {**self.model_dump(mode="json", include=SHARED_KEYS),
                "models": {member_key: self.models[member_key].model_dump(mode="json")},
                "tasks": {task: self.tasks[task].model_dump(mode="json") for task in tasks}}

    def member_task(self, member_key: str, task: str) -> dict[str, Any]:
        """``finetune.tasks.{task}`` as member ``finetune.models.{member_key}`` trains it (its own batch size and
        training examples merged): what a teacher's logits, task distillation and model cards read too."""
        return self.settings_for(self.models[member_key], task)[1]


class FinetuneView(View):
    """What stage ``finetune@{model}-{task}`` reads."""

    finetune: FinetuneParams
