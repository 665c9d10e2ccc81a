"""Run ``dvc`` (and stage) commands as subprocesses, streaming every output line into a logger."""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


class CommandFailed(RuntimeError):
    """A command exited non-zero. ``str(err)`` names the command and ends with its last output lines."""

    def __init__(self, what: str, returncode: int, tail: list[str]):
        self.what, self.returncode, self.tail = what, returncode, tail
        super().__init__(f"{what} failed with exit code {returncode}; last lines:\n" + "\n".join(tail))


def tool_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for ``dvc`` and the stage commands: this interpreter's ``bin`` first on ``PATH``
    (so ``python -m stages.X`` inside ``dvc.yaml`` runs in the same virtual environment), plus ``extra``."""
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra or {})
    return env


def run_logged(
    args: list[str],
    cwd: str | Path,
    logger: logging.Logger | logging.LoggerAdapter,
    env: Mapping[str, str] | None = None,
    tail_lines: int = 20,
    what: str | None = None,
) -> list[str]:
    """Run ``args`` in ``cwd``; log each stdout/stderr line at INFO as it arrives.

    Returns:
        the last ``tail_lines`` output lines.

    Raises:
        CommandFailed: non-zero exit; carries the last ``tail_lines`` lines.
    """
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    proc = subprocess.Popen(
        args, cwd=str(cwd), env=dict(env) if env is not None else tool_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, bufsize=1, errors="replace",
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        if line.strip():
            tail.append(line)
            logger.info(line)
    returncode = proc.wait()
    if returncode != 0:
        raise CommandFailed(what or " ".join(args), returncode, list(tail))
    return list(tail)


def dvc(*args: str) -> list[str]:
    """``python -m dvc ARGS`` with this interpreter (no reliance on a ``dvc`` executable on ``PATH``)."""
    return [sys.executable, "-m", "dvc", *args]


def repro_status(lines: list[str]) -> str:
    """What ``dvc repro --single-item`` did, from its output: ``unchanged`` (DVC found nothing changed),
    ``restored`` (outputs checked out from the run cache) or ``ran``."""
    text = "\n".join(lines)
    if "didn't change, skipping" in text:
        return "unchanged"
    if "is cached - skipping run" in text:
        return "restored"
    return "ran"
