"""bert_pipeline.train.checkpoint: atomic save, newest valid matching, pruning, stale moved aside, RNG round trip."""

from __future__ import annotations

import logging
import random

import numpy as np
import torch

from bert_pipeline.train.checkpoint import CheckpointManager, fingerprint, rng_state, set_rng_state


def _state(value: float) -> dict:
    return {"model": {"w": torch.full((3,), value)}, "history": [{"step": 1, "loss": value}], "name": "x"}


def test_save_prune_and_latest(tmp_path):
    mgr = CheckpointManager(tmp_path / "ck", "fp1", keep=2)
    for step in (2, 4, 6):
        mgr.save(step, _state(float(step)), {"phase": "p1"})
    names = sorted(p.name for p in (tmp_path / "ck").iterdir())
    assert names == ["step-00000004", "step-00000006"]
    path, meta = mgr.latest()
    assert meta["step"] == 6
    assert meta["phase"] == "p1"
    assert meta["fingerprint"] == "fp1"
    state = CheckpointManager.load(path)
    assert torch.equal(state["model"]["w"], torch.full((3,), 6.0))
    assert state["history"][0]["loss"] == 6.0


def test_incomplete_and_stale_checkpoints(tmp_path, caplog):
    folder = tmp_path / "ck"
    CheckpointManager(folder, "old", keep=3).save(2, _state(2.0))
    mgr = CheckpointManager(folder, "new", keep=3)
    mgr.save(4, _state(4.0))
    # a later checkpoint whose state file is truncated (killed mid-write outside the atomic rename)
    mgr.save(6, _state(6.0))
    state_file = folder / "step-00000006" / "state.pt"
    state_file.write_bytes(state_file.read_bytes()[:10])
    (folder / ".tmp-step-00000008-123").mkdir()
    with caplog.at_level(logging.WARNING, logger="bert_pipeline.train.checkpoint"):
        path, meta = mgr.latest()
    assert meta["step"] == 4
    assert path.name == "step-00000004"
    assert (folder / "stale" / "step-00000002-old").is_dir()  # moved aside, not deleted
    assert not (folder / "step-00000006").exists()
    assert not (folder / ".tmp-step-00000008-123").exists()
    assert "moved to" in caplog.text
    assert "incomplete" in caplog.text


def test_no_checkpoint(tmp_path):
    assert CheckpointManager(tmp_path / "none", "x", keep=1).latest() is None


def test_fingerprint_depends_on_params_and_input_bytes(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(b"abc")
    base = fingerprint({"lr": 1e-3}, [tmp_path / "d"])
    assert base == fingerprint({"lr": 1e-3}, [tmp_path / "d"])
    assert base != fingerprint({"lr": 2e-3}, [tmp_path / "d"])
    (tmp_path / "d" / "a.bin").write_bytes(b"abd")
    assert base != fingerprint({"lr": 1e-3}, [tmp_path / "d"])


def test_rng_state_round_trip_through_weights_only_load(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    mgr = CheckpointManager(tmp_path, "f", keep=1)
    path = mgr.save(1, {"rng": rng_state()})
    expected = (random.random(), np.random.rand(), torch.rand(2))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    set_rng_state(CheckpointManager.load(path)["rng"])
    got = (random.random(), np.random.rand(), torch.rand(2))
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    assert torch.equal(got[2], expected[2])
