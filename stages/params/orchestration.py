"""Schema of ``orchestration``, the Prefect flow's section (no stage reads it)."""

from __future__ import annotations

from typing import Annotated

import annotated_types
from pydantic import Field

from stages.params.base import Section, View


class OrchestrationParams(Section):
    """``orchestration``: how the Prefect flow (``flows/pipeline.py``) runs the DVC stages.

    No stage reads it, so changing it never invalidates a stage. The one section with defaults, and they are its
    single source (``params.yaml`` lists only what it changes): the flow runs over any DVC repository, which may
    have no such section. ``retries``: extra attempts of a failed stage before its dependents are marked failed;
    ``log_tail_lines``: last output lines of a failed stage in the flow's result; ``gpu_stages``: glob patterns over
    stage addresses (``finetune@*``), tagged ``gpu`` (a Prefect concurrency limit equal to the pool's GPU count),
    each with devices of its own in ``CUDA_VISIBLE_DEVICES``: one, or ``compute.num_processes`` for a multi-process
    stage; ``mlflow``: open a parent MLflow run that stage runs nest under.
    """

    retries: Annotated[int, annotated_types.Ge(0)] = 2
    retry_delay_seconds: Annotated[int, annotated_types.Ge(0)] = 30
    log_tail_lines: Annotated[int, annotated_types.Ge(1)] = 20
    gpu_stages: list[str] = Field(default_factory=list)
    mlflow: bool = True


class OrchestrationView(View):
    """What the flow reads: ``orchestration``, all defaults when the section is absent."""

    orchestration: OrchestrationParams = Field(default_factory=OrchestrationParams)
