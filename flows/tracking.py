"""The flow's side of MLflow: one parent run per flow run; stage runs nest under it.

The parent run id reaches the stage processes through an environment variable (never ``MLFLOW_RUN_ID``, which
would make a stage resume the parent run instead of opening its own nested run). The variable names and the default
experiment are :mod:`bert_pipeline.mlops.tracking`'s, the tracking URI rule and the experiment lookup (with DVC's
temporary copies) :mod:`stages.dvc_adapter`'s, so the flow and the stages cannot disagree.
"""

from __future__ import annotations

import logging
from typing import Any

from bert_pipeline.mlops.tracking import (
    EXPERIMENT,
    EXPERIMENT_ENV,
    FLOW_RUN_ENV,
    PARENT_RUN_ENV,
    experiment_url,
)
from stages.dvc_adapter import experiment_id, tracking_uri

log = logging.getLogger(__name__)

__all__ = ["EXPERIMENT", "EXPERIMENT_ENV", "FLOW_RUN_ENV", "PARENT_RUN_ENV", "child_runs", "close_parent_run",
           "experiment_link", "open_parent_run", "run_link", "tracking_uri"]


def open_parent_run(uri: str, experiment: str, name: str, tags: dict[str, str]) -> tuple[str, str]:
    """Create the parent run; return ``(run_id, experiment_id)``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp_id = experiment_id(client, uri, experiment)
    run = client.create_run(exp_id, run_name=name, tags=tags)
    return run.info.run_id, exp_id


def close_parent_run(uri: str, run_id: str, ok: bool, metrics: dict[str, float] | None = None) -> None:
    """Log the flow's summary metrics and end the parent run (FINISHED or FAILED)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    for key, value in (metrics or {}).items():
        client.log_metric(run_id, key, value)
    client.set_terminated(run_id, "FINISHED" if ok else "FAILED")


def child_runs(uri: str, parent_run_id: str) -> list[dict[str, Any]]:
    """The runs nested under ``parent_run_id`` (any experiment): id, name, experiment id, status."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp_ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exp_ids, filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
    return [
        {"run_id": r.info.run_id, "name": r.info.run_name, "experiment_id": r.info.experiment_id,
         "status": r.info.status, "stage": r.data.tags.get("stage", "")}
        for r in runs
    ]


def experiment_link(uri: str, experiment_id: str) -> str:
    """The experiment's training runs in the MLflow UI when the store is a server, else how to open them."""
    if uri.startswith(("http://", "https://")):
        return experiment_url(uri, experiment_id)
    return f"`mlflow ui --backend-store-uri {uri}`, then {experiment_url('http://127.0.0.1:5000', experiment_id)}"


def run_link(uri: str, experiment_id: str, run_id: str) -> str:
    """A link to a run in the MLflow UI when the store is a server, else the run id for ``mlflow ui``."""
    if uri.startswith(("http://", "https://")):
        return f"{uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"run {run_id} (`mlflow ui --backend-store-uri {uri}`)"
