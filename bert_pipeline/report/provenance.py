"""The report card: the provenance of a run (Karpathy 2025, nanochat's ``report.py``: one section per stage plus
the environment). Git commit and dirty flag, the hash of the pipeline's lock file (given by the caller, which knows
where it is), data sources with versions and licences, hardware, library versions, wall seconds per stage, tokens
seen in pre-training.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

LIBRARIES = ("torch", "transformers", "tokenizers", "datasets", "accelerate", "seqeval", "mlflow", "dvc", "prefect")
"""The libraries whose versions shape the results."""


def git_state(repo: Path) -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the git work tree at ``repo``."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip() if commit else None, "dirty": None if status is None else bool(status.strip())}


def hardware() -> dict[str, Any]:
    """Platform, CPU model and count, memory (GB), torch threads and CUDA device (if any)."""
    info: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        info["cpu"] = platform.processor() or None
    try:
        import psutil

        info["memory_gb"] = round(psutil.virtual_memory().total / 1e9, 1)
    except ImportError:  # pragma: no cover
        pass
    import torch

    info["torch_threads"] = torch.get_num_threads()
    info["cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str | None]:
    """Installed versions of the libraries that shape the results (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def stage_wall_times(metrics_dir: Path) -> dict[str, float]:
    """Wall seconds per stage from the timing files under ``metrics_dir``: ``**/*-timing.json`` and
    ``*-timing/*.json`` (a matrix stage, e.g. ``finetune-timing/{model}-{task}.json``).

    A file's figure is its ``wall_seconds`` (or ``seconds``, ``total_seconds``, ``train_seconds``) at top level;
    it is named by its path without ``.json`` / ``-timing.json`` (``pretrain``, ``finetune-timing/minilm-qa``).
    """
    root = Path(metrics_dir)
    files = set(root.rglob("*-timing.json")) | {p for d in root.glob("*-timing") if d.is_dir() for p in d.rglob("*.json")}
    times: dict[str, float] = {}
    for path in sorted(files):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        for key in ("wall_seconds", "seconds", "total_seconds", "train_seconds"):
            value = raw.get(key) if isinstance(raw, Mapping) else None
            if isinstance(value, int | float):
                rel = path.relative_to(root).as_posix().removesuffix(".json").removesuffix("-timing")
                times[rel] = float(value)
                break
    return times


def data_sources(sources_json: Path) -> list[dict[str, str]]:
    """``name``, ``version``, ``licence``, ``sha256`` of each source in a ``SOURCES.json`` ([] if absent)."""
    try:
        raw = json.loads(Path(sources_json).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    return [{k: str(s.get(k, "")) for k in ("name", "version", "licence", "sha256")} for s in raw.get("sources", [])]


def report_card(repo: Path, metrics_dir: Path, sources_json: Path, tokens_seen: int | None,
                lock_sha256: str | None) -> dict[str, Any]:
    """The provenance of a run: git commit and dirty flag of ``repo``, the lock file's sha256 (``lock_sha256``, None
    when there is none; the caller hashes it as it stands while the run goes on, every upstream stage already
    recorded), data sources with versions and licences, hardware, library versions, wall seconds per stage, tokens
    seen in pre-training.
    """
    return {
        "git": git_state(repo),
        "lock_sha256": lock_sha256,
        "data_sources": data_sources(sources_json),
        "hardware": hardware(),
        "libraries": library_versions(),
        "stage_wall_seconds": stage_wall_times(metrics_dir),
        "tokens_seen": tokens_seen,
    }


def render_report_card(card: Mapping[str, Any], sources: Any) -> str:
    """The report card as Markdown bullet lists; ``sources`` (:class:`bert_pipeline.report.report.ReportSources`)
    names the files it cites (the lock file as ``sources.lock_file``)."""
    git = card.get("git", {})
    dirty = {True: "dirty (uncommitted changes)", False: "clean", None: "unknown"}[git.get("dirty")]
    lines = ["## Report card", "",
             f"- git commit: `{git.get('commit') or 'unknown'}`, work tree {dirty}",
             f"- {sources.lock_file} sha256: `{card.get('lock_sha256') or 'absent'}`"]
    if card.get("tokens_seen"):
        lines.append(f"- tokens seen in pre-training: {card['tokens_seen']:,} ({sources.pretrain})")
    lines += ["", f"Data sources ({sources.sources_json}):", ""]
    lines += [f"- {s['name']} {s['version']} — {s['licence']} (sha256 {s['sha256'][:12]}…)"
              for s in card.get("data_sources", [])] or ["- (none recorded)"]
    hw = card.get("hardware", {})
    lines += ["", "Hardware: " + ", ".join(f"{k} {v}" for k, v in sorted(hw.items()) if v is not None), ""]
    libs = card.get("libraries", {})
    lines += ["Libraries: " + ", ".join(f"{k} {v}" for k, v in libs.items() if v), ""]
    walls = card.get("stage_wall_seconds", {})
    if walls:
        lines += [f"Wall time per stage ({sources.metrics_dir}/*-timing.json):", "", "| stage | seconds |",
                  "| --- | ---: |"]
        lines += [f"| {k} | {v:.1f} |" for k, v in walls.items()]
        lines += [f"| **sum of the stages above** (not the run's wall time: a stage without a top-level wall time "
                  f"in a timing file, such as prepare_tasks or retrieval, is not in it) | {sum(walls.values()):.1f} |"]
    return "\n".join(lines) + "\n"
