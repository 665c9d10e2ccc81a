"""Resumable training checkpoints: atomic, fingerprinted, pruned, loaded with ``weights_only=True``.

Layout under a stage's checkpoint folder (a DVC output declared ``persist: true, cache: false``)::

    step-00000500/state.pt     torch.save of plain containers and tensors (model, optimizer, scheduler, RNG, ...)
    step-00000500/meta.json    {"step", "fingerprint", "state_bytes", ...}, written last
    stale/step-00000200-<fingerprint>/   checkpoints of other params/inputs, moved aside (never deleted)

A checkpoint is written into a temporary sibling folder and renamed into place, so a process killed while
saving leaves no half checkpoint under a valid name. ``fingerprint`` is the hash of the stage's params and
inputs (:func:`fingerprint`): a rerun resumes only from a checkpoint with the same fingerprint. Reused by
``pretrain``, ``distill`` and ``finetune``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bert_pipeline.io import dumps_json, sha256_file

log = logging.getLogger(__name__)

STATE_FILE = "state.pt"
META_FILE = "meta.json"
PREFIX = "step-"


def fingerprint(params: Any, inputs: list[str | Path] = ()) -> str:
    """Hex sha256 of canonical JSON ``params`` and the contents of ``inputs`` (files or folders, recursively).

    Folder entries are hashed with their relative paths, in sorted order, so the result does not depend on the
    file system's listing order. Missing inputs hash as ``"<missing>"``.
    """
    digest = hashlib.sha256(dumps_json(params).encode("utf-8"))
    for item in inputs:
        root = Path(item)
        digest.update(f"\0input:{root.as_posix()}\0".encode())
        if root.is_file():
            digest.update(sha256_file(root).encode())
        elif root.is_dir():
            for path in sorted(p for p in root.rglob("*") if p.is_file()):
                digest.update(f"{path.relative_to(root).as_posix()}:{sha256_file(path)}\n".encode())
        else:
            digest.update(b"<missing>")
    return digest.hexdigest()


def rng_state(device: torch.device | str | None = None) -> dict[str, Any]:
    """The global RNG states of ``random``, NumPy and torch's CPU generator, and of the CUDA ``device``'s generator
    when ``device`` is a CUDA device (this process's own: a rank never opens a context on another GPU), as
    weights_only-loadable values."""
    py = random.getstate()
    np_state = np.random.get_state()
    state: dict[str, Any] = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]],
        "torch": torch.random.get_rng_state(),
    }
    if device is not None and torch.device(device).type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(torch.device(device))
    return state


def set_rng_state(state: dict[str, Any], device: torch.device | str | None = None) -> None:
    """Restore what :func:`rng_state` returned; its CUDA state goes to ``device`` when that is a CUDA device."""
    version, values, gauss = state["python"]
    random.setstate((version, tuple(values), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and device is not None and torch.device(device).type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], torch.device(device))


class CheckpointManager:
    """Save, find and prune the checkpoints of one stage.

    Args:
        folder: the stage's checkpoint folder (created if absent).
        fingerprint: hash of the run's params and inputs (:func:`fingerprint`).
        keep: how many of the newest matching checkpoints to keep (``save_total_limit``), >= 1.
    """

    def __init__(self, folder: str | Path, fingerprint: str, keep: int):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.keep = keep

    # ------------------------------------------------------------------ reading
    def _candidates(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if p.is_dir() and p.name.startswith(PREFIX))

    @staticmethod
    def read_meta(path: Path) -> dict[str, Any] | None:
        """The checkpoint's metadata, or None when the folder is not a complete checkpoint."""
        try:
            meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
            if (path / STATE_FILE).stat().st_size != meta["state_bytes"]:
                return None
            return meta
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def valid(self) -> list[tuple[Path, dict[str, Any]]]:
        """Complete checkpoints with this run's fingerprint, oldest first (no side effects)."""
        out = []
        for path in self._candidates():
            meta = self.read_meta(path)
            if meta is not None and meta.get("fingerprint") == self.fingerprint:
                out.append((path, meta))
        return sorted(out, key=lambda item: item[1]["step"])

    def latest(self) -> tuple[Path, dict[str, Any]] | None:
        """The newest valid checkpoint of this run, after moving the others aside.

        Checkpoints with another fingerprint (other params or inputs) are moved to ``stale/`` with a warning;
        incomplete folders (a process killed while saving) are removed with a warning.
        """
        for path in self._candidates():
            meta = self.read_meta(path)
            if meta is None:
                log.warning("removing incomplete checkpoint %s", path)
                shutil.rmtree(path, ignore_errors=True)
            elif meta.get("fingerprint") != self.fingerprint:
                dest = self.folder / "stale" / f"{path.name}-{str(meta.get('fingerprint'))[:12]}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                if dest.exists():
                    shutil.rmtree(dest)
                os.replace(path, dest)
                log.warning(
                    "checkpoint %s was made with other params or inputs (fingerprint %s, expected %s): moved to %s",
                    path, str(meta.get("fingerprint"))[:12], self.fingerprint[:12], dest,
                )
        for tmp in self.folder.glob(".tmp-*") if self.folder.is_dir() else ():
            log.warning("removing unfinished checkpoint write %s", tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        found = self.valid()
        return found[-1] if found else None

    @staticmethod
    def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
        """The state saved at ``path`` (``torch.load(weights_only=True)``: tensors and plain containers only)."""
        return torch.load(Path(path) / STATE_FILE, map_location=map_location, weights_only=True)

    # ------------------------------------------------------------------ writing
    def save(self, step: int, state: dict[str, Any], meta: dict[str, Any] | None = None) -> Path:
        """Atomically write ``state`` as the checkpoint of ``step``; then keep only the newest ``keep``.

        Args:
            step: the optimizer step the state is after.
            state: tensors and plain containers (dict/list/tuple/int/float/str/bool/None).
            meta: extra JSON-able metadata (e.g. data position, phase).
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"{PREFIX}{step:08d}"
        tmp = self.folder / f".tmp-{PREFIX}{step:08d}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        with open(tmp / STATE_FILE, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        record = {**(meta or {}), "step": step, "fingerprint": self.fingerprint,
                  "state_bytes": (tmp / STATE_FILE).stat().st_size}
        with open(tmp / META_FILE, "w", encoding="utf-8") as fh:
            fh.write(dumps_json(record))
            fh.flush()
            os.fsync(fh.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync_dir(self.folder)
        log.info("saved checkpoint %s", final)
        self._prune()
        return final

    def _prune(self) -> None:
        found = self.valid()
        for path, _ in found[: max(0, len(found) - self.keep)]:
            shutil.rmtree(path, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
