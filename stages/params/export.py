"""Schema of ``export`` and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import Field, model_validator

from stages.params.base import Section, View
from stages.params.finetune import FinetuneParams


class ExportParams(Section):
    """``export``: ONNX export of fine-tuned folders (:mod:`bert_pipeline.mlops.onnx_export`), checked against
    PyTorch on the first ``max_test_examples`` test examples of each folder's task (null: the whole split),
    encoded with ``finetune.tasks.{task}``'s windows, ``batch_size`` windows per batch.

    ``models``: family members whose ``models/finetuned/{model}-{task}/`` folders are exported (``all``: every
    fine-tuned folder). ``exporter``: ``torchscript`` (opset <= 20) or ``dynamo`` (torch.export, opset >= 18).
    ``tolerance``: the largest absolute logit difference accepted (a larger one fails the stage). Latency: ms per
    window at batch 1 over the first ``latency_examples`` windows, the median of ``timed_runs`` runs after
    ``warmup_runs``, PyTorch and ONNX Runtime on CPU with ``num_threads`` threads (parity runs with them too).
    """

    models: Literal["all"] | Annotated[list[str], Field(min_length=1)]
    max_test_examples: Annotated[int, annotated_types.Ge(1)] | None
    batch_size: Annotated[int, annotated_types.Ge(1)]
    opset: Annotated[int, annotated_types.Ge(14), annotated_types.Le(23)]
    exporter: Literal["torchscript", "dynamo"]
    tolerance: Annotated[float, annotated_types.Gt(0.0)]
    latency_examples: Annotated[int, annotated_types.Ge(1)]
    warmup_runs: Annotated[int, annotated_types.Ge(0)]
    timed_runs: Annotated[int, annotated_types.Ge(1)]
    num_threads: Annotated[int, annotated_types.Ge(1)]

    @model_validator(mode="after")
    def _opset_for_exporter(self) -> ExportParams:
        if self.exporter == "torchscript" and self.opset > 20:
            raise ValueError(f"export.opset: expected <= 20 for exporter torchscript, got {self.opset}")
        if self.exporter == "dynamo" and self.opset < 18:
            raise ValueError(f"export.opset: expected >= 18 for exporter dynamo, got {self.opset}")
        return self


class ExportView(View):
    """What stage ``export`` reads: its section and ``finetune.tasks`` (the windows and QA decoding the parity inputs are encoded with)."""

    export: ExportParams
    finetune: FinetuneParams
