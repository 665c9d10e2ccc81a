"""The whole ``params.yaml``: every section, and the checks across sections no single stage can make (the vocabulary
the family needs, the distillation entries per task). Stages never import it; ``bert-pipeline profile``, the
Prefect flow and the tests validate the whole file with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import model_validator

from bert_pipeline.model.families import FAMILIES
from stages.params.base import DEFAULT_PARAMS, ParamsError, Section, read_params, validate_as
from stages.params.budget_curve import BudgetCurveParams
from stages.params.create_pretraining_data import CreatePretrainingDataParams
from stages.params.distill import DistillParams
from stages.params.evaluate import EvaluateParams
from stages.params.export import ExportParams
from stages.params.fetch_data import FetchDataParams
from stages.params.finetune import FinetuneParams
from stages.params.orchestration import OrchestrationParams
from stages.params.prepare_corpus import PrepareCorpusParams
from stages.params.prepare_tasks import PrepareTasksParams
from stages.params.pretrain import PretrainParams, check_objective
from stages.params.promote import PromoteParams
from stages.params.retrieval import RetrievalParams
from stages.params.task_distill import TaskDistillParams
from stages.params.train_tokenizer import TrainTokenizerParams
from stages.params.variants import VariantsParams

__all__ = ["Params", "ParamsError", "load_params", "validate_params"]


class Params(Section):
    """The whole ``params.yaml``."""

    fetch_data: FetchDataParams
    prepare_corpus: PrepareCorpusParams
    train_tokenizer: TrainTokenizerParams
    create_pretraining_data: CreatePretrainingDataParams
    pretrain: PretrainParams
    distill: DistillParams
    prepare_tasks: PrepareTasksParams
    finetune: FinetuneParams
    task_distill: TaskDistillParams
    export: ExportParams
    budget_curve: BudgetCurveParams
    variants: VariantsParams
    retrieval: RetrievalParams
    evaluate: EvaluateParams
    promote: PromoteParams
    orchestration: OrchestrationParams

    @model_validator(mode="after")
    def _cross_checks(self) -> Params:
        check_objective(self.pretrain, self.create_pretraining_data.objective)
        family = self.pretrain.model.family
        vocabulary = FAMILIES[family].vocabulary
        if self.pretrain.init == "scratch" and self.train_tokenizer.model != vocabulary:
            raise ValueError(f"train_tokenizer.model: {self.train_tokenizer.model!r} does not fit pretrain.model.family "
                             f"{family!r} (expected {vocabulary!r}, the family's vocabulary: "
                             "bert_pipeline.model.families.FAMILIES)")
        if self.task_distill.student in self.finetune.models:
            raise ValueError(f"task_distill.student: {self.task_distill.student!r} is already a key of "
                             "finetune.models; give the student a name of its own")
        for key, entry in (("teacher_only_examples", "a count, 0 for none"),
                           ("epochs", "a number of epochs, or null for the task's own")):
            per_task = getattr(self.task_distill, key)
            unknown = [t for t in per_task if t not in self.finetune.tasks]
            if unknown:
                raise ValueError(f"task_distill.{key}: {unknown[0]!r} is not a key of finetune.tasks")
            missing = [t for t in self.finetune.tasks if t not in per_task]
            if missing:  # dvc.yaml's distill stages read task_distill.{key}.{task} for each task
                raise ValueError(f"task_distill.{key}: no entry for task {missing[0]!r}; give every key of "
                                 f"finetune.tasks one ({entry})")
        return self


def validate_params(raw: Any, source: str = "params.yaml", origins: dict[str, str] | None = None) -> Params:
    """Validate a parsed params mapping, the whole file (:func:`stages.params.base.validate_as` with :class:`Params`).

    Raises:
        ParamsError: one line naming the file (or override) and the dotted key.
    """
    return validate_as(Params, raw, source, origins)


def load_params(path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None,
                origins: dict[str, str] | None = None) -> Params:
    """Load and validate the whole ``params.yaml`` (plus optional dotted overrides, with their origins:
    :func:`stages.params.base.read_params`): what ``bert-pipeline profile`` and the flow check before they start.
    A stage loads only its own view (:func:`stages.params.base.load_view`).

    Raises:
        ParamsError: one line naming the file (or the override) and the dotted key.
    """
    return validate_as(Params, *read_params(path, overrides, origins))
