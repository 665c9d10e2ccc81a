"""A temporary clone at ``HEAD`` for runs with a profile or params overrides; saved as a DVC experiment.

The user's workspace is never edited: the clone lives in ``<repo>/.dvc/tmp/flows/`` (where ``dvc exp run --temp``
keeps its own), shares the repository's DVC cache (so unchanged stages cost nothing and outputs land in the
user's cache), gets the overrides applied to its ``params.yaml`` the way ``dvc exp run --set-param`` applies
them, and at the end is saved with ``dvc exp save`` and pushed back as an experiment ref, so ``dvc exp show``
in the user's repository lists it and ``dvc exp apply NAME`` brings its results in.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
from pathlib import Path

from flows.dvc_cli import dvc, run_logged, tool_env
from flows.worker import apply_set_params, git_rev

log = logging.getLogger(__name__)


def cache_dir(root: str | Path) -> Path:
    """The DVC cache directory of the repository at ``root`` (honours ``cache.dir``)."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        return Path(repo.cache.local.path).parents[1]  # <cache>/files/md5


def make_clone(root: str | Path, set_params: list[str], logger: logging.Logger | logging.LoggerAdapter) -> Path:
    """Clone ``root`` at ``HEAD`` into ``root/.dvc/tmp/flows/``, share its DVC cache, check out the cached
    outputs, apply ``set_params`` (``key=value``). Returns the clone's path."""
    root = Path(root).resolve()
    base = root / ".dvc" / "tmp" / "flows"
    base.mkdir(parents=True, exist_ok=True)
    clone = Path(tempfile.mkdtemp(prefix="run-", dir=base))
    env = tool_env()
    run_logged(["git", "clone", "-q", "--no-checkout", str(root), str(clone)], root, logger, env)
    run_logged(["git", "checkout", "-q", "--detach", git_rev(root)], clone, logger, env)
    run_logged(dvc("config", "--local", "cache.dir", str(cache_dir(root))), clone, logger, env)
    for key in ("user.name", "user.email"):  # dvc exp save commits; keep the user's identity when there is one
        if subprocess.run(["git", "config", key], cwd=clone, capture_output=True).returncode != 0:
            subprocess.run(["git", "config", key, "bert-pipeline" if key == "user.name" else "flow@localhost"],
                           cwd=clone, check=True)
    try:
        run_logged(dvc("checkout", "-q", "--allow-missing"), clone, logger, env, what="dvc checkout")
    except RuntimeError as exc:  # missing outputs only mean the stages rerun
        logger.warning("dvc checkout in the clone: %s", str(exc).splitlines()[0])
    apply_set_params(clone, set_params)
    return clone


def save_experiment(clone: Path, name: str, logger: logging.Logger | logging.LoggerAdapter) -> str:
    """``dvc exp save -n NAME`` in the clone and push the experiment ref back to the user's repository."""
    env = tool_env()
    run_logged(dvc("exp", "save", "-f", "-n", name), clone, logger, env)
    run_logged(dvc("exp", "push", "--no-cache", "-f", "origin", name), clone, logger, env)
    return name


def remove_clone(clone: Path) -> None:
    """Delete the temporary clone (its outputs are in the shared cache and the experiment)."""
    shutil.rmtree(clone, ignore_errors=True)
