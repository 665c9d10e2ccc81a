"""Run one DVC stage on another machine's worker, sharing data through a DVC remote.

The worker keeps its own clone of the repository. For each stage it is handed, it

1. checks out the coordinator's git revision (``git fetch`` + ``git checkout --force REV``),
2. applies the run's params overrides, if any (``key=value`` as ``dvc exp run --set-param`` takes them),
3. writes the ``dvc.lock`` entries of the stage's upstream stages (returned by their tasks, passed along by the
   flow) into its clone, so DVC knows exactly which data versions the stage must read,
4. ``dvc pull``s those upstream stages' outputs (the stage's dependencies) from the DVC remote,
5. runs the stage (``dvc repro --single-item STAGE``: DVC still decides whether anything changed),
6. ``dvc push``es the stage's outputs and returns its own ``dvc.lock`` entry.

The coordinator merges the returned entries into its ``dvc.lock``, so its workspace ends with the complete lock
(``dvc pull`` there then brings every output). Serve the task on a machine with

    python -m flows.worker              # a Prefect task worker for `stage_on_worker`; clone in $BERT_WORKER_DIR
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task

from flows.dag import lock_entry, merge_lock
from flows.dvc_cli import dvc, repro_status, run_logged, tool_env

log = logging.getLogger(__name__)

DEFAULT_WORKER_DIR = Path.home() / ".cache" / "bert-pipeline" / "worker"


def checkout(workdir: Path, git_url: str, rev: str, logger: logging.Logger | logging.LoggerAdapter) -> None:
    """Make ``workdir`` a clean clone of ``git_url`` at ``rev`` (cloned once, fetched afterwards).

    Tracked files are reset to ``rev``; untracked DVC outputs and the worker's DVC cache stay.
    """
    env = tool_env()
    if not (workdir / ".git").exists():
        workdir.parent.mkdir(parents=True, exist_ok=True)
        run_logged(["git", "clone", "-q", "--no-checkout", git_url, str(workdir)], workdir.parent, logger, env)
    known = subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=workdir, capture_output=True)
    if known.returncode != 0:
        run_logged(["git", "fetch", "-q", git_url, "+refs/heads/*:refs/remotes/origin/*"], workdir, logger, env,
                   what="git fetch")
        known = subprocess.run(["git", "cat-file", "-e", f"{rev}^{{commit}}"], cwd=workdir, capture_output=True)
    if known.returncode != 0:  # a commit on no branch (detached HEAD): ask for it by id
        run_logged(["git", "fetch", "-q", git_url, rev], workdir, logger, env, what="git fetch")
    run_logged(["git", "checkout", "-q", "--force", "--detach", rev], workdir, logger, env)


def apply_set_params(root: Path, set_params: list[str]) -> None:
    """Apply ``key=value`` overrides to ``root/params.yaml`` exactly as ``dvc exp run --set-param`` does."""
    if not set_params:
        return
    from dvc.utils.hydra import apply_overrides

    apply_overrides(root / "params.yaml", list(set_params))


def run_on_worker(
    stage: str,
    git_url: str,
    rev: str,
    upstream_locks: dict[str, Any],
    workdir: str | Path,
    remote: str | None = None,
    set_params: list[str] | None = None,
    env: dict[str, str] | None = None,
    tail_lines: int = 20,
    logger: logging.Logger | logging.LoggerAdapter | None = None,
) -> dict[str, Any]:
    """Steps 1-6 of the module docstring for one stage in clone ``workdir``.

    Args:
        stage: stage address (``train``, ``finetune@bert-ner``).
        git_url: where the coordinator's commits are (a path or URL every worker can fetch).
        rev: the full git commit the coordinator runs.
        upstream_locks: upstream stage -> its ``dvc.lock`` entry, as returned by the upstream tasks.
        workdir: this worker's clone (created on first use).
        remote: DVC remote name (``None``: the repository's default remote).
        set_params: ``key=value`` params overrides of this run.
        env: extra environment for the stage (``CUDA_VISIBLE_DEVICES``, MLflow parent run id).

    Returns:
        ``{"stage", "status": "ran" | "unchanged", "seconds", "lock": <dvc.lock entry>, "worker": workdir}``.

    Raises:
        flows.dvc_cli.CommandFailed: any git or dvc step failed (its last output lines in the message).
    """
    logger = logger or log
    workdir = Path(workdir).resolve()
    started = time.monotonic()
    checkout(workdir, git_url, rev, logger)
    apply_set_params(workdir, set_params or [])
    run_env = tool_env(env)
    remote_args = ["-r", remote] if remote else []
    if upstream_locks:
        merge_lock(workdir, upstream_locks)
        run_logged(dvc("pull", "-q", *remote_args, *sorted(upstream_locks)), workdir, logger, run_env,
                   tail_lines, what=f"dvc pull of {stage}'s dependencies")
    tail = run_logged(dvc("repro", "--single-item", stage), workdir, logger, run_env, tail_lines,
                      what=f"stage {stage}")
    run_logged(dvc("push", "-q", *remote_args, stage), workdir, logger, run_env, tail_lines,
               what=f"dvc push of {stage}'s outputs")
    entry = lock_entry(workdir, stage)
    if entry is None:
        raise RuntimeError(f"{workdir}/dvc.lock: no entry for stage {stage} after it ran")
    return {
        "stage": stage,
        "status": repro_status(tail),
        "seconds": round(time.monotonic() - started, 3),
        "lock": entry,
        "worker": str(workdir),
    }


@task(name="stage-on-worker", task_run_name="{stage}")
def stage_on_worker(
    stage: str,
    git_url: str,
    rev: str,
    upstream_locks: dict[str, Any],
    workdir: str | None = None,
    remote: str | None = None,
    set_params: list[str] | None = None,
    env: dict[str, str] | None = None,
    tail_lines: int = 20,
) -> dict[str, Any]:
    """Prefect task around :func:`run_on_worker`; ``workdir`` defaults to ``$BERT_WORKER_DIR`` on the machine
    that runs it (a task worker started with ``python -m flows.worker``), else ``~/.cache/bert-pipeline/worker``."""
    workdir = workdir or os.environ.get("BERT_WORKER_DIR") or str(DEFAULT_WORKER_DIR)
    return run_on_worker(stage, git_url, rev, upstream_locks, workdir, remote, set_params, env, tail_lines,
                         get_run_logger())


def git_rev(root: str | Path) -> str:
    """The full commit of ``HEAD`` in ``root``."""
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="this worker's clone (default $BERT_WORKER_DIR or ~/.cache/...)")
    args = parser.parse_args()
    if args.workdir:
        os.environ["BERT_WORKER_DIR"] = args.workdir
    from prefect.task_worker import serve

    serve(stage_on_worker)


if __name__ == "__main__":
    main()
