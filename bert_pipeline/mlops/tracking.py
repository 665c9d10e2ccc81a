"""MLflow tracking shared by every training stage: one run per stage execution, always ended.

    with stage_run("pretrain", params=section_dict, uri=tracking_uri(root)) as run:
        run.log_metrics({"train_loss": 2.3}, step=10)
        run.log_model_pointer(model_dir)

(The stages open their runs through ``stages.dvc_adapter.stage_run``, which supplies what only the side that knows
DVC knows: the repository root, its temporary copies, the experiment's tags.)

- Experiment ``bert-pipeline`` (ARCHITECTURE.md; ``MLFLOW_EXPERIMENT_NAME`` overrides); tags ``stage``, ``git_revision``, ``git_dirty``, ``params_hash`` and,
  under Prefect, ``prefect_flow_run_id`` (from ``BERT_PIPELINE_FLOW_RUN_ID``, else ``PREFECT__FLOW_RUN_ID``).
- A stage run by ``dvc exp run`` also carries the DVC experiment: tag ``dvc_experiment`` (its name) and tag
  ``dvc_baseline_rev`` (the commit it is based on). DVC hands both to the stage's process in its environment; the
  stage side reads them (``stages.dvc_adapter.experiment_tags``) and passes them in ``tags``. Seed runs
  (:meth:`StageRun.nested`) inherit them with the other tags.
- Nested under a parent run only when the orchestrator passes its id explicitly in
  ``BERT_PIPELINE_PARENT_RUN_ID`` (never ``MLFLOW_RUN_ID``, which would resume the parent run instead).
- Params flattened to dotted keys; a value longer than the backend's limit (``MAX_PARAM_VAL_LENGTH`` of the installed
  MLflow: 6,000 characters in 3.x) is shortened, and the run then keeps every full value in artifact ``params.json``
  and names the shortened keys in tag ``params_shortened``.
- The experiment is tagged ``mlflow.experimentKind=custom_model_development`` (MLflow's own kind for model
  training). MLflow 3.17's UI still opens every experiment on its GenAI overview until the browser has chosen
  "Model training" once (a remembered switch) or the link says ``?workflowType=machine_learning``:
  :func:`experiment_url` gives that link (checked once in headless Chromium by ``bench/mlflow_ui.py``, removed
  after it answered; last in commit 4c155b2).
- The experiment is created with its artifact location beside the store (:func:`artifact_location`): for the local
  SQLite store ``<store folder>/mlruns/<experiment>``, never under the working directory, which may be a temporary
  copy of the repository that is deleted after the run (DVC's ``exp run --temp``). The caller says which paths lie
  in such a copy and where its original repository is (``copy_origin``); a store inside a copy keeps its artifacts
  in the original repository, and an existing experiment whose artifacts point into a copy is refused in one line
  (:func:`experiment_id`).
- Tracking URI from ``MLFLOW_TRACKING_URI``, default ``sqlite:///<repository root>/mlflow.db`` (:func:`tracking_uri`;
  the caller gives the root: the original repository, so temporary experiments land in the user's store).
- Models are recorded as a pointer (path + content hash, DVC's directory md5), not a second copy.

Uses ``MlflowClient`` with explicit run ids: no fluent global active run, so nothing leaks between runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import flatten

log = logging.getLogger(__name__)

EXPERIMENT = "bert-pipeline"
PARENT_RUN_ENV = "BERT_PIPELINE_PARENT_RUN_ID"
FLOW_RUN_ENV = "BERT_PIPELINE_FLOW_RUN_ID"
FLOW_RUN_ENVS = (FLOW_RUN_ENV, "PREFECT__FLOW_RUN_ID")
EXPERIMENT_ENV = "MLFLOW_EXPERIMENT_NAME"
# MLflow 3's kind of experiment (the UI's own values: genai_development, custom_model_development, finetuning, ...).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
PARAMS_ARTIFACT = "params.json"


def param_limits() -> tuple[int, int]:
    """``(key, value)`` length limits in characters of the installed MLflow's params (250 and 6,000 in 3.x)."""
    try:
        from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, MAX_PARAM_VAL_LENGTH
    except ImportError:  # pragma: no cover  (older MLflow)
        return 250, 500
    return int(MAX_ENTITY_KEY_LENGTH), int(MAX_PARAM_VAL_LENGTH)


CopyOrigin = Callable[[Path], Path | None]
"""For a path inside a temporary copy of the repository (a folder deleted after its run), the original repository's
root; None for any other path. The caller knows where such copies live (``stages.dvc_adapter.copy_origin``)."""


def no_copies(path: Path) -> Path | None:
    """The :data:`CopyOrigin` of a repository without temporary copies: no path lies in one."""
    return None


def tracking_uri(root: str | Path) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<absolute root>/mlflow.db`` (``root``: the repository whose
    store the runs go to, the original one when the caller runs in a temporary copy)."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(Path(root).resolve() / 'mlflow.db').as_posix()}"


def _local_path(location: str) -> Path | None:
    """The folder of a ``file:`` URI or a plain path; None for a remote location (``s3://``, ``mlflow-artifacts:``)."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    if parsed.scheme == "" or len(parsed.scheme) == 1:  # a plain path (or a Windows drive letter)
        return Path(location)
    return None


def artifact_location(uri: str, experiment: str, copy_origin: CopyOrigin = no_copies) -> str | None:
    """Where a new experiment keeps its artifacts: ``<store folder>/mlruns/<experiment>`` for a local SQLite store,
    the original repository's ``mlruns/<experiment>`` when the store lies in a temporary copy (``copy_origin``).

    MLflow's own default for a store without a server is ``./mlruns`` of the working directory, which for a stage run
    in a temporary copy (DVC's ``exp run --temp``) is deleted afterwards (and with it every model ``promote``
    registered there). Other stores (a tracking server, a file store) are left to choose (None).
    """
    if not uri.startswith("sqlite:///"):
        return None
    database = Path(uri[len("sqlite:///"):]).resolve()
    root = copy_origin(database.parent) or database.parent
    folder = re.sub(r"[^A-Za-z0-9._-]+", "_", experiment).strip("._") or "experiment"
    return (root / "mlruns" / folder).as_uri()


def experiment_url(server: str, experiment: str) -> str:
    """The MLflow UI's page of ``experiment`` (an id) on its training runs,
    ``SERVER/#/experiments/ID?workflowType=machine_learning``; without that query a browser's first visit opens the
    GenAI overview (traces)."""
    return f"{server.rstrip('/')}/#/experiments/{experiment}?workflowType=machine_learning"


def experiment_id(client: Any, uri: str, name: str | None = None, copy_origin: CopyOrigin = no_copies) -> str:
    """The id of experiment ``name`` (default ``$MLFLOW_EXPERIMENT_NAME``, else ``bert-pipeline``), created at
    :func:`artifact_location` when missing. Every run of the pipeline (stages, the flow's parent run, ``promote``)
    gets its experiment here; ``copy_origin`` says which paths lie in a temporary copy of the repository.

    Raises:
        PipelineError: the experiment exists but keeps its artifacts in a temporary copy (deleted after the run
            that created it: what MLflow's ``./mlruns`` default gave a stage run there).
    """
    name = name or os.environ.get(EXPERIMENT_ENV) or EXPERIMENT
    found = client.get_experiment_by_name(name)
    if found is None:
        return client.create_experiment(name, artifact_location=artifact_location(uri, name, copy_origin),
                                        tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
    if found.tags.get(EXPERIMENT_KIND_TAG) is None:  # an experiment from before the tag: open it on its runs too
        client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    folder = _local_path(found.artifact_location or "")
    if folder is not None and copy_origin(folder) is not None:
        state = "which no longer exists" if not folder.exists() else "which DVC deletes after its run"
        raise PipelineError(
            f"MLflow experiment {name!r} (id {found.experiment_id}) of {uri} keeps its artifacts in a DVC temporary "
            f"copy, {state} ({folder}); rename it (mlflow experiments rename --experiment-id {found.experiment_id} "
            f"--new-name {name}-lost) or set {EXPERIMENT_ENV} to a new name, and rerun")
    return found.experiment_id


def flatten_params(params: dict[str, Any], prefix: str = "") -> tuple[dict[str, str], dict[str, str]]:
    """Dotted keys -> string values within MLflow's limits (:func:`param_limits`).

    Returns:
        ``(flat, full)``: ``flat`` with values longer than the limit shortened to end in ``...``; ``full`` the
        original text of exactly those values, by their dotted key.
    """
    key_limit, value_limit = param_limits()
    flat: dict[str, str] = {}
    full: dict[str, str] = {}
    for dotted, value in flatten(params, prefix).items():
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        key = dotted[:key_limit]
        if len(text) > value_limit:
            full[key] = text
            text = text[: value_limit - 3] + "..."
        flat[key] = text
    return flat, full


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

    The same value DVC's lock file records for the output once DVC commits it, computed before the stage ends.
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


class StageRun:
    """An open MLflow run of one stage execution (use :func:`stage_run`)."""

    def __init__(self, client: Any, run_id: str):
        self.client = client
        self.run_id = run_id

    def log_params(self, params: dict[str, Any], prefix: str = "") -> None:
        """Log nested params flattened to dotted keys; values over MLflow's limit are shortened, and then the
        full values go to artifact ``params.json`` and their keys to tag ``params_shortened``."""
        from mlflow.entities import Param

        flat, full = flatten_params(params, prefix)
        items = [Param(k, v) for k, v in flat.items()]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])
        if full:
            self.client.log_dict(self.run_id, {**flat, **full}, PARAMS_ARTIFACT)
            self.set_tags({"params_shortened": ",".join(sorted(full))})

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

    @contextlib.contextmanager
    def nested(self, name: str, tags: dict[str, Any] | None = None) -> Iterator[StageRun]:
        """A child run of this one (tag ``mlflow.parentRunId``), e.g. one per fine-tuning seed, so the MLflow UI
        groups it under the stage's run and its compare view can set seeds side by side. Ended FINISHED, or FAILED
        on an exception (re-raised)."""
        parent = self.client.get_run(self.run_id)
        run_tags = {**parent.data.tags, "mlflow.parentRunId": self.run_id, "mlflow.runName": name}
        run_tags.update({k: str(v) for k, v in (tags or {}).items()})
        run_tags.pop("params_shortened", None)
        child = self.client.create_run(parent.info.experiment_id, tags=run_tags, run_name=name)
        status = "FAILED"
        try:
            yield StageRun(self.client, child.info.run_id)
            status = "FINISHED"
        finally:
            self.client.set_terminated(child.info.run_id, status=status)

    def log_model_pointer(self, folder: str | Path, name: str = "model") -> dict[str, str]:
        """Record where a model lives (its DVC path and directory hash) as tags, not a second copy."""
        pointer = {"path": Path(folder).as_posix(), "md5": dvc_dir_md5(folder)}
        self.set_tags({f"{name}_path": pointer["path"], f"{name}_dvc_md5": pointer["md5"]})
        return pointer

    def log_artifact(self, path: str | Path) -> None:
        """Attach a small file (a metrics JSON, a plot CSV) to the run."""
        self.client.log_artifact(self.run_id, str(path))


def run_of_folder(run: StageRun, folder: str | Path) -> str | None:
    """The id of the newest finished run in ``run``'s experiment that saved ``folder`` with its current contents
    (tags ``model_path`` and ``model_dvc_md5``, :meth:`StageRun.log_model_pointer`): e.g. a distilled student's
    teacher. None when no such run is on record (the folder came from a DVC cache another machine filled)."""
    pointer = {"path": Path(folder).as_posix(), "md5": dvc_dir_md5(folder)}
    experiment = run.client.get_run(run.run_id).info.experiment_id
    found = run.client.search_runs(
        [experiment], filter_string=f"tags.model_path = '{pointer['path']}' and tags.model_dvc_md5 = "
                                    f"'{pointer['md5']}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"], max_results=1)
    return found[0].info.run_id if found else None


@contextlib.contextmanager
def stage_run(
    stage: str,
    params: dict[str, Any],
    uri: str,
    parent_run_id: str | None = None,
    tags: dict[str, Any] | None = None,
    experiment: str | None = None,
    copy_origin: CopyOrigin = no_copies,
) -> Iterator[StageRun]:
    """Open one MLflow run for a stage execution; end it FINISHED, or FAILED on any exception (re-raised).

    Args:
        stage: stage name (tag ``stage``, run name).
        params: the params the stage read (logged flattened; hashed into tag ``params_hash``).
        uri: tracking URI (:func:`tracking_uri`).
        parent_run_id: the parent run; default ``$BERT_PIPELINE_PARENT_RUN_ID`` (never ``MLFLOW_RUN_ID``).
        tags: extra tags (a stage's DVC experiment: ``dvc_experiment``, ``dvc_baseline_rev``).
        experiment: experiment name; default ``$MLFLOW_EXPERIMENT_NAME``, else ``bert-pipeline``.
        copy_origin: which paths lie in a temporary copy of the repository (:func:`experiment_id`).
    """
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp_id = experiment_id(client, uri, experiment, copy_origin)
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
    run = client.create_run(exp_id, tags=run_tags, run_name=stage)
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
