"""Throwaway DVC repositories for the flow tests: tiny shell/python stages, no project code, seconds to run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

GIT = ["git", "-c", "user.name=flow-test", "-c", "user.email=flow-test@localhost"]


def sh(cmd: list[str], cwd: Path) -> str:
    """Run ``cmd`` (with this interpreter's bin on PATH), assert success, return stdout."""
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def make_repo(path: Path, stages: dict[str, Any], params: dict[str, Any] | None = None,
              remote: Path | None = None) -> Path:
    """A git + DVC repository at ``path`` with ``stages`` as its ``dvc.yaml``, committed.

    ``remote``: a local directory configured (and committed) as the default DVC remote.
    """
    path.mkdir(parents=True, exist_ok=True)
    sh(["git", "init", "-q", "-b", "main"], path)
    sh([sys.executable, "-m", "dvc", "init", "-q"], path)
    sh([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], path)
    if remote is not None:
        remote.mkdir(parents=True, exist_ok=True)
        sh([sys.executable, "-m", "dvc", "remote", "add", "-d", "store", str(remote)], path)
    (path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False), encoding="utf-8")
    (path / "params.yaml").write_text(yaml.safe_dump(params or {}, sort_keys=False), encoding="utf-8")
    (path / ".gitignore").write_text("/attempts*\n", encoding="utf-8")
    commit(path, "pipeline")
    return path


def commit(path: Path, message: str) -> None:
    sh(["git", "add", "-A"], path)
    sh([*GIT, "commit", "-q", "-m", message], path)


def py(code: str) -> str:
    """A stage command running ``code`` with the test's interpreter."""
    return f'{sys.executable} -c "{code}"'
