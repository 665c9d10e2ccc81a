"""Run ``dvc`` (and stage) commands as subprocesses, streaming every output line into a logger; hold DVC's
workspace lock for a flow run (:class:`WorkspaceLock`). The console script's relay of ``dvc exp run``'s stderr is
:mod:`stages.dvc_log`, below ``stages/cli.py``, so ``stages/`` imports nothing of ``flows/``."""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from bert_pipeline.errors import PipelineError


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
    drop: Callable[[str], bool] | None = None,
) -> list[str]:
    """Run ``args`` in ``cwd``; log each stdout/stderr line at INFO as it arrives, except those ``drop`` matches
    (e.g. :func:`is_git_advice`).

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
        if line.strip() and not (drop is not None and drop(line)):
            tail.append(line)
            logger.info(line)
    returncode = proc.wait()
    if returncode != 0:
        raise CommandFailed(what or " ".join(args), returncode, list(tail))
    return list(tail)


GIT_ADVICE = ("To track the changes with git, run:", "To enable auto staging, run:", "git add ",
              "dvc config core.autostage true")
GIT_ADVICE_ONCE = "dvc.lock changed: run `git add dvc.lock` (and commit) to keep this state"


def is_git_advice(line: str) -> bool:
    """Whether ``line`` belongs to the advice ``dvc repro`` prints after every stage that changed ``dvc.lock``
    ("To track the changes with git, run: git add dvc.lock ..."). A flow runs one ``dvc repro`` per stage, so it
    came 20 times per flow run; the flow says it once at its end instead (:data:`GIT_ADVICE_ONCE`)."""
    text = line.strip()
    return any(text.startswith(prefix) for prefix in GIT_ADVICE)


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


# ------------------------------------------------------------------------------------------ workspace lock
_HELD: dict[str, WorkspaceLock] = {}


class WorkspaceLock:
    """A flow run's hold on its workspace, from start to end: its own flow lock (``.dvc/tmp/flow.lock``) and DVC's
    repository lock (``.dvc/tmp/lock``, the one every ``dvc`` command takes), the latter handed to the flow's own
    DVC commands one at a time (:func:`handed_over`).

    A flow's stages are separate ``dvc repro --single-item`` processes; without this the workspace would be free
    between two stages, and a user's ``dvc repro`` (or a second flow) started then would run in it. While a stage's
    command runs, DVC releases its repository lock and guards the stage's dependencies and outputs (its
    ``rwlock``), so a ``dvc repro`` that needs them fails on DVC's lock, and one of unrelated stages may run beside
    it (as beside any ``dvc repro``). A flow that starts while another DVC process works in the workspace fails at
    once, in one line. The locks are DVC's (``dvc.lock.make_lock``, honouring ``core.hardlink_lock``); they go
    with the process that holds them, even on SIGKILL. One gap remains: a DVC command started in the second
    between the flow handing the lock to a stage and that stage taking it may run first; the stage then waits for
    it (``--wait-for-lock``).
    """

    def __init__(self, root: str | Path):
        from dvc.exceptions import NotDvcRepoError
        from dvc.lock import make_lock
        from dvc.repo import Repo

        self.root = Path(root).resolve()
        try:
            repo = Repo(str(self.root))
        except NotDvcRepoError:
            raise PipelineError(f"{self.root}: not a DVC repository (pass --repo the repository root)") from None
        with repo:
            hardlink = bool(repo.config["core"].get("hardlink_lock", False))
            self.tmp_dir = Path(repo.tmp_dir)
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        repo_lock = str(self.tmp_dir / "lock")
        self._flow = make_lock(str(self.tmp_dir / "flow.lock"), tmp_dir=str(self.tmp_dir), hardlink_lock=hardlink)
        self._try = make_lock(repo_lock, tmp_dir=str(self.tmp_dir), hardlink_lock=hardlink)
        self._wait = make_lock(repo_lock, tmp_dir=str(self.tmp_dir), hardlink_lock=hardlink, wait=True)
        self._held = None

    def _busy(self, who: str) -> PipelineError:
        return PipelineError(f"{self.root}: the workspace is in use by {who}; wait for it to finish, or run the flow "
                             "with --profile/--set-param (a temporary clone)")

    def _stage_holders(self) -> list[str]:
        """``pid: command`` of live processes that hold DVC's per-output locks (``.dvc/tmp/rwlock``)."""
        try:
            table = json.loads((self.tmp_dir / "rwlock").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        infos = list((table.get("write") or {}).values())
        infos += [info for readers in (table.get("read") or {}).values() for info in readers]
        holders = []
        for info in infos:
            with contextlib.suppress(ProcessLookupError, PermissionError, TypeError, ValueError):
                os.kill(int(info["pid"]), 0)
                holders.append(f"PID {info['pid']}: {info['cmd']}")
        return sorted(set(holders))

    def acquire(self) -> None:
        """Take both locks (DVC retries each for a few seconds).

        Raises:
            PipelineError: another flow run, or another DVC process, works in the workspace (one line).
        """
        from dvc.lock import LockError

        try:
            self._flow.lock()
        except LockError:
            raise self._busy("another flow run") from None
        try:
            self._try.lock()
        except LockError:
            self._flow.unlock()
            raise self._busy("another DVC process (a dvc repro, dvc exp run, dvc push ...)") from None
        holders = self._stage_holders()
        if holders:
            self._try.unlock()
            self._flow.unlock()
            raise self._busy(f"a DVC stage running ({'; '.join(holders)})")
        self._held = self._try
        _HELD[str(self.root)] = self

    def release(self) -> None:
        """Let go of both locks (at the end of the flow run)."""
        self.hand_over()
        _HELD.pop(str(self.root), None)
        if self._flow.is_locked:
            self._flow.unlock()

    def hand_over(self) -> None:
        """Release DVC's repository lock for one of the flow's own DVC commands (the flow lock stays)."""
        if self._held is not None:
            self._held.unlock()
            self._held = None

    def take_back(self) -> None:
        """Take DVC's lock back after the flow's own command, waiting for any DVC process that came in between."""
        self._wait.lock()
        self._held = self._wait

    def __enter__(self) -> WorkspaceLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def handed_over(root: str | Path) -> Iterator[list[str]]:
    """Around one of the flow's own DVC commands in ``root``: release the flow's :class:`WorkspaceLock` (if it holds
    one) and take it back afterwards. Yields the ``dvc`` global options that command needs: ``--wait-for-lock``
    when the lock was handed over (a command started in the moment between two stages waits instead of failing)."""
    held = _HELD.get(str(Path(root).resolve()))
    if held is None:
        yield []
        return
    held.hand_over()
    try:
        yield ["--wait-for-lock"]
    finally:
        held.take_back()
