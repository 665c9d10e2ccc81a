"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import stages  # noqa: F401  (sets the offline/telemetry defaults before anything else imports HF libraries)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_root() -> Path:
    """The repository root (where params.yaml and dvc.yaml live)."""
    return REPO


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run the test with a temporary directory as the working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
