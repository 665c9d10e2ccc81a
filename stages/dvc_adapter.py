"""The DVC adapter: everything the pipeline's code knows of DVC's files, folders and environment, in one module.

The library (:mod:`bert_pipeline`) names no DVC file or folder; it takes the values read here as arguments. This
module gives them:

- :func:`lock_pointer`: an output's entry in ``dvc.lock`` (path, md5, the stage that wrote it), for a stage that
  records which upstream model it consumed (``distill``: the teacher's pointer);
- :func:`lock_sha256`: the sha256 of ``dvc.lock`` as it stands while a stage runs, for the report card's
  provenance (``evaluate``);
- :func:`copy_origin` and :func:`repo_root`: DVC's temporary folder ``<repo>/.dvc/tmp/`` holds the copies
  ``dvc exp run --temp`` runs in (``exps/...``) and the flow's clones (``flows/...``), deleted after their run; a
  path inside one belongs to the original repository ``<repo>``, where the MLflow store and its artifacts stay;
- :func:`experiment_tags`: the DVC experiment a stage runs in. ``dvc exp run`` hands it to the stage's process as
  ``DVC_EXP_NAME`` (the experiment's name) and ``DVC_EXP_BASELINE_REV`` (the commit it is based on; names from
  ``dvc.env``, set by ``dvc.repo.experiments.queue.base``); the MLflow runs carry them as tags
  ``dvc_experiment`` and ``dvc_baseline_rev``. A plain ``dvc repro`` sets neither: no tags;
- :func:`tracking_uri`, :func:`experiment_id` and :func:`stage_run`: :mod:`bert_pipeline.mlops.tracking`'s, with
  the repository root, the temporary copies and the experiment's tags filled in. Every stage opens its MLflow run
  through :func:`stage_run`; ``flows/`` and ``bert-pipeline promote`` get their store and experiment here too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

LOCK_FILE = Path("dvc.lock")
"""DVC's lock file, relative to the repository root (the working directory DVC gives a stage)."""
TEMP_PARTS = (".dvc", "tmp")
"""Everything under ``<repo>/.dvc/tmp/`` is temporary: ``dvc exp run --temp`` copies (``exps/``), the flow's clones
(``flows/``)."""
EXPERIMENT_NAME_ENV = "DVC_EXP_NAME"
BASELINE_REV_ENV = "DVC_EXP_BASELINE_REV"
EXPERIMENT_TAGS = {EXPERIMENT_NAME_ENV: "dvc_experiment", BASELINE_REV_ENV: "dvc_baseline_rev"}
"""DVC's environment variable -> the MLflow run tag that carries its value."""


def lock_pointer(out_path: str, lock_file: str | Path = LOCK_FILE) -> dict[str, str] | None:
    """The ``{"path", "md5", "stage"}`` of output ``out_path`` recorded in ``dvc.lock``, or None if absent.

    For stages that consume an upstream model (distill reads the teacher's pointer this way).
    """
    import yaml

    try:
        lock = yaml.safe_load(Path(lock_file).read_text(encoding="utf-8")) or {}
    except OSError:
        return None
    for stage, entry in (lock.get("stages") or {}).items():
        for out in entry.get("outs") or []:
            if out.get("path") == out_path:
                return {"path": out_path, "md5": str(out.get("md5")), "stage": stage}
    return None


def lock_sha256(root: str | Path = ".") -> str | None:
    """Hex sha256 of ``root/dvc.lock``, or None when there is none (a run outside DVC)."""
    from bert_pipeline.io import sha256_file

    path = Path(root) / LOCK_FILE
    return sha256_file(path) if path.is_file() else None


def copy_origin(path: Path) -> Path | None:
    """The original repository of a path inside DVC's temporary folder (``<repo>/.dvc/tmp/...`` -> ``<repo>``: the
    first ``.dvc/tmp`` of its parts), or None for any other path (:data:`bert_pipeline.mlops.tracking.CopyOrigin`)."""
    parts = Path(path).parts
    width = len(TEMP_PARTS)
    for i in range(len(parts) - width + 1):
        if parts[i : i + width] == TEMP_PARTS:
            return Path(*parts[:i])
    return None


def repo_root(start: str | Path | None = None) -> Path:
    """The repository root: the original one when ``start`` is inside a DVC temporary copy.

    Walks up from ``start`` (default: the working directory) to the first folder holding ``dvc.yaml`` or
    ``.git``; a path under ``<repo>/.dvc/tmp/`` (a ``dvc exp run --temp`` copy, a flow's clone) maps to ``<repo>``.
    """
    here = Path(start or Path.cwd()).resolve()
    origin = copy_origin(here)
    if origin is not None:
        return origin
    for folder in (here, *here.parents):
        if (folder / "dvc.yaml").exists() or (folder / ".git").exists():
            return folder
    return here


def experiment_tags(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{"dvc_experiment": NAME, "dvc_baseline_rev": SHA}`` of the ``dvc exp run`` this process runs under (each
    tag only when DVC set its variable; ``{}`` under ``dvc repro`` or outside DVC). ``environ``: default
    ``os.environ``."""
    environ = os.environ if environ is None else environ
    return {tag: environ[env] for env, tag in EXPERIMENT_TAGS.items() if environ.get(env)}


def tracking_uri(start: str | Path | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<absolute repository root>/mlflow.db`` (:func:`repo_root`:
    inside a temporary copy, the original repository's store)."""
    from bert_pipeline.mlops import tracking

    return tracking.tracking_uri(repo_root(start))


def experiment_id(client: Any, uri: str, name: str | None = None) -> str:
    """:func:`bert_pipeline.mlops.tracking.experiment_id` with DVC's temporary copies (:func:`copy_origin`)."""
    from bert_pipeline.mlops import tracking

    return tracking.experiment_id(client, uri, name, copy_origin)


@contextlib.contextmanager
def stage_run(stage: str, params: dict[str, Any], uri: str | None = None, tags: dict[str, Any] | None = None,
              **options: Any) -> Iterator[Any]:
    """The stage's MLflow run (:func:`bert_pipeline.mlops.tracking.stage_run`) in the repository's store
    (:func:`tracking_uri` unless ``uri``), its experiment checked against DVC's temporary copies, tagged with the
    DVC experiment it runs in (:func:`experiment_tags`) besides ``tags``; ``options``: ``parent_run_id``,
    ``experiment``. Yields the :class:`bert_pipeline.mlops.tracking.StageRun`."""
    from bert_pipeline.mlops import tracking

    with tracking.stage_run(stage, params, uri or tracking_uri(), tags={**experiment_tags(), **(tags or {})},
                            copy_origin=copy_origin, **options) as run:
        yield run
