"""The pipeline's per-example records as of a git revision or a DVC experiment, read without running anything (not
a stage): what ``bert-pipeline compare`` compares.

A revision's records are the ``metrics/examples/*.arrow`` files its commit holds, through git and DVC's cache
(``dvc.api.DVCFileSystem``: the files ``dvc.lock`` at that revision points to; DVC resolves an experiment's name as
it resolves a branch). :data:`WORKSPACE` means the files on disk now. Kept apart from ``stages/dvc_adapter.py``, which
every stage imports: no stage's code depends on this module, so editing it reruns nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from bert_pipeline.errors import PipelineError

if TYPE_CHECKING:
    from bert_pipeline.evaluation.examples import ExampleRecord

log = logging.getLogger(__name__)

EXAMPLES = Path("metrics/examples")
"""Where fine-tuning and task distillation write the records: ``stages.members.EXAMPLES``, named again here because
importing that module imports torch (tests/test_compare.py checks the two agree)."""

WORKSPACE = "workspace"
"""The revision name of the files on disk now (as ``dvc exp show`` names them)."""


def _fix(rev: str) -> str:
    """How to get records at ``rev``: the command that makes them, or the one that brings them from a remote."""
    if rev == WORKSPACE:
        return "run `dvc repro` (or `dvc exp apply NAME`), or `dvc pull` if the run was pushed"
    return ("run `dvc repro` and commit dvc.lock, or `dvc exp run` (an experiment), with this code; or `dvc pull` "
            f"(`dvc exp pull REMOTE {rev}` for an experiment) if the run was pushed")


def read_revision(rev: str, repo: Path = Path("."), folder: Path = EXAMPLES) -> dict[str, ExampleRecord]:
    """Every per-example record of ``rev`` by name (``{member}-{task}``, the file's stem).

    Args:
        rev: a git revision (``HEAD``, a branch, a tag, a commit), a DVC experiment's name, or :data:`WORKSPACE`.
        repo: the repository's root; ``folder``: where the records lie, relative to it.
    Raises:
        PipelineError: ``rev`` is neither a revision nor an experiment of ``repo``, it holds no record, a record is
            missing from DVC's cache (pushed, not pulled), or a file is not a record (one line naming the revision
            and the fix).
    """
    from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError

    raw: dict[str, tuple[str, bytes]] = {}
    if rev == WORKSPACE:
        for path in sorted((repo / folder).glob("*.arrow")):
            raw[path.stem] = (f"{WORKSPACE}:{folder.as_posix()}/{path.name}", path.read_bytes())
    else:
        raw = _read_at(rev, repo, folder)
    if not raw:
        raise PipelineError(f"{rev}: no per-example records ({folder.as_posix()}/*.arrow): {_fix(rev)}")
    records = {}
    for name, (source, data) in raw.items():
        try:
            records[name] = ExampleRecord.from_bytes(data, source)
        except ExamplesError as exc:
            raise PipelineError(str(exc)) from None
    log.info("%s: %d per-example records (%s)", rev, len(records), ", ".join(records))
    return records


def _read_at(rev: str, repo: Path, folder: Path) -> dict[str, tuple[str, bytes]]:
    """``{name: (source, bytes)}`` of the records ``rev`` holds, from git and DVC's cache."""
    from dvc.api import DVCFileSystem
    from dvc.exceptions import DvcException

    try:
        fs = DVCFileSystem(repo=str(repo), rev=rev)
        paths = sorted(fs.glob(f"{folder.as_posix()}/*.arrow"))
    except DvcException as exc:
        raise PipelineError(f"{rev}: not a git revision or DVC experiment of {Path(repo).resolve()} "
                            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                            "`git log` and `dvc exp list` list them") from None
    out = {}
    try:
        unrun = [path for path in paths if not _recorded(fs.info(path))]
        if unrun:
            log.info("%s: %d records declared in dvc.yaml but not in its dvc.lock (not run there), skipped: %s", rev,
                     len(unrun), ", ".join(Path(p).stem for p in unrun))
        for path in (p for p in paths if p not in unrun):
            source = f"{rev}:{path}"
            try:
                out[Path(path).stem] = (source, fs.read_bytes(path))
            except (FileNotFoundError, DvcException) as exc:
                raise PipelineError(f"{source}: not in DVC's cache here ({exc.args[-1] if exc.args else exc}): "
                                    f"`dvc pull` it (`dvc exp pull REMOTE {rev}` for an experiment), or rerun the "
                                    "run that made it") from None
    finally:
        fs.close()
    return out


def _recorded(info: dict) -> bool:
    """Whether a path of ``DVCFileSystem.info`` has content at its revision: a file git holds, or a DVC output with a
    hash (dvc.lock records it). A stage's output that dvc.yaml declares and dvc.lock does not record (never run at
    that revision) is listed too, without a hash."""
    dvc = info.get("dvc_info")
    if dvc is None:
        return True
    return getattr(dvc.get("entry"), "hash_info", None) is not None or "md5" in dvc
