"""MLflow tracking shared by every training stage: one run per stage execution, always ended.

    with stage_run("pretrain", params=section_dict) as run:
        run.log_metrics({"train_loss": 2.3}, step=10)
        run.log_model_pointer(model_dir)

- Experiment ``bert-pipeline`` (ARCHITECTURE.md; ``MLFLOW_EXPERIMENT_NAME`` overrides); tags ``stage``, ``git_revision``, ``git_dirty``, ``params_hash`` and,
  under Prefect, ``prefect_flow_run_id`` (from ``BERT_PIPELINE_FLOW_RUN_ID``, else ``PREFECT__FLOW_RUN_ID``).
- Nested under a parent run only when the orchestrator passes its id explicitly in
  ``BERT_PIPELINE_PARENT_RUN_ID`` (never ``MLFLOW_RUN_ID``, which would resume the parent run instead).
- Params flattened to dotted keys; values longer than 250 characters shortened (MLflow rejects longer ones).
- Tracking URI from ``MLFLOW_TRACKING_URI``, default ``sqlite:///<absolute repository root>/mlflow.db``; inside a
  ``dvc exp run --temp`` copy (``<repo>/.dvc/tmp/exps/...``) the root is the original repository, so temporary
  experiments land in the user's store.
- Models are recorded as a pointer (path + content hash, DVC's directory md5), not a second copy.

Uses ``MlflowClient`` with explicit run ids: no fluent global active run, so nothing leaks between runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bert_pipeline.io import flatten

log = logging.getLogger(__name__)

EXPERIMENT = "bert-pipeline"
PARENT_RUN_ENV = "BERT_PIPELINE_PARENT_RUN_ID"
FLOW_RUN_ENV = "BERT_PIPELINE_FLOW_RUN_ID"
FLOW_RUN_ENVS = (FLOW_RUN_ENV, "PREFECT__FLOW_RUN_ID")
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
MAX_PARAM_CHARS = 250


def repo_root(start: str | Path | None = None) -> Path:
    """The repository root: the original one when ``start`` is inside a DVC temporary experiment copy.

    Walks up from ``start`` (default: the working directory) to the first folder holding ``dvc.yaml`` or
    ``.git``; a path under ``<repo>/.dvc/tmp/exps/`` maps to ``<repo>``.
    """
    here = Path(start or Path.cwd()).resolve()
    parts = here.parts
    for i in range(len(parts) - 3):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    for folder in (here, *here.parents):
        if (folder / "dvc.yaml").exists() or (folder / ".git").exists():
            return folder
    return here


def tracking_uri(start: str | Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<absolute repo root>/mlflow.db``."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(repo_root(start) / 'mlflow.db').as_posix()}"


def flatten_params(params: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted keys -> string values, each at most 250 characters (longer ones end in ``...``)."""
    flat: dict[str, str] = {}
    for dotted, value in flatten(params, prefix).items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        if len(text) > MAX_PARAM_CHARS:
            text = text[: MAX_PARAM_CHARS - 3] + "..."
        flat[dotted[:MAX_PARAM_CHARS]] = text
    return flat


def params_hash(params: Any) -> str:
    """First 16 hex digits of the sha256 of the canonical JSON of ``params``."""
    text = json.dumps(params, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def git_revision(cwd: str | Path | None = None) -> tuple[str, bool]:
    """``(commit sha, dirty)`` of the repository at ``cwd``; ``("unknown", False)`` outside git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True
        )
        return rev.stdout.strip(), bool(status.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


def dvc_dir_md5(folder: str | Path) -> str:
    """DVC's hash of a folder output: md5 of the JSON list of ``{"md5", "relpath"}`` entries, plus ``.dir``.

    The same value ``dvc.lock`` records for the output once DVC commits it, computed before the stage ends.
    """
    root = Path(folder)
    entries = []
    for path in sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.relative_to(root).as_posix()):
        digest = hashlib.md5()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        entries.append({"md5": digest.hexdigest(), "relpath": path.relative_to(root).as_posix()})
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode("utf-8")).hexdigest() + ".dir"


def lock_pointer(out_path: str, lock_file: str | Path = "dvc.lock") -> dict[str, str] | None:
    """The ``{"path", "md5", "stage"}`` of output ``out_path`` recorded in ``dvc.lock``, or None if absent.

    For stages that consume an upstream model (distill reads the teacher's pointer this way).
    """
    try:
        lock = yaml.safe_load(Path(lock_file).read_text(encoding="utf-8")) or {}
    except OSError:
        return None
    for stage, entry in (lock.get("stages") or {}).items():
        for out in entry.get("outs") or []:
            if out.get("path") == out_path:
                return {"path": out_path, "md5": str(out.get("md5")), "stage": stage}
    return None


class StageRun:
    """An open MLflow run of one stage execution (use :func:`stage_run`)."""

    def __init__(self, client: Any, run_id: str):
        self.client = client
        self.run_id = run_id

    def log_params(self, params: dict[str, Any], prefix: str = "") -> None:
        """Log nested params flattened to dotted keys (values shortened to 250 characters)."""
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in flatten_params(params, prefix).items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Log numeric metrics at ``step`` (non-numbers are skipped)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [
            Metric(k, float(v), now, step or 0)
            for k, v in sorted(metrics.items())
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        for i in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Set run tags (values as strings)."""
        for k, v in tags.items():
            self.client.set_tag(self.run_id, k, str(v))

    def log_model_pointer(self, folder: str | Path, name: str = "model") -> dict[str, str]:
        """Record where a model lives (its DVC path and directory hash) as tags, not a second copy."""
        pointer = {"path": Path(folder).as_posix(), "md5": dvc_dir_md5(folder)}
        self.set_tags({f"{name}_path": pointer["path"], f"{name}_dvc_md5": pointer["md5"]})
        return pointer

    def log_artifact(self, path: str | Path) -> None:
        """Attach a small file (a metrics JSON, a plot CSV) to the run."""
        self.client.log_artifact(self.run_id, str(path))


@contextlib.contextmanager
def stage_run(
    stage: str,
    params: dict[str, Any],
    uri: str | None = None,
    parent_run_id: str | None = None,
    tags: dict[str, Any] | None = None,
    experiment: str | None = None,
) -> Iterator[StageRun]:
    """Open one MLflow run for a stage execution; end it FINISHED, or FAILED on any exception (re-raised).

    Args:
        stage: stage name (tag ``stage``, run name).
        params: the params the stage read (logged flattened; hashed into tag ``params_hash``).
        uri: tracking URI; default :func:`tracking_uri`.
        parent_run_id: the parent run; default ``$BERT_PIPELINE_PARENT_RUN_ID`` (never ``MLFLOW_RUN_ID``).
        tags: extra tags.
        experiment: experiment name; default ``$MLFLOW_EXPERIMENT_NAME``, else ``bert-pipeline``.
    """
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri or tracking_uri())
    experiment = experiment or os.environ.get(EXPERIMENT_ENV) or EXPERIMENT
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    revision, dirty = git_revision()
    run_tags = {
        "stage": stage,
        "git_revision": revision,
        "git_dirty": str(dirty).lower(),
        "params_hash": params_hash(params),
        "mlflow.runName": stage,
        "mlflow.source.git.commit": revision,
    }
    parent = parent_run_id or os.environ.get(PARENT_RUN_ENV)
    if parent:
        run_tags["mlflow.parentRunId"] = parent
    for env in FLOW_RUN_ENVS:
        if os.environ.get(env):
            run_tags["prefect_flow_run_id"] = os.environ[env]
            break
    run_tags.update({k: str(v) for k, v in (tags or {}).items()})
    run = client.create_run(experiment_id, tags=run_tags, run_name=stage)
    handle = StageRun(client, run.info.run_id)
    status = "FAILED"
    try:
        handle.log_params(params)
        yield handle
        status = "FINISHED"
    finally:
        try:
            client.set_terminated(run.info.run_id, status=status)
        except Exception:  # noqa: BLE001  (ending the run must not hide the original error)
            log.exception("could not end MLflow run %s", run.info.run_id)
