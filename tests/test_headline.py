"""The experiment table stays readable: only headline numbers are DVC metrics, timing is never one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from stages import headline

ROOT = Path(__file__).resolve().parents[1]


def _entries(block) -> list[tuple[str, dict]]:
    out = []
    for item in block or []:
        if isinstance(item, str):
            out.append((item, {}))
        else:
            out += [(path, opts or {}) for path, opts in item.items()]
    return out


def _stages() -> dict:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return {name: (spec["do"] if "foreach" in spec else spec) for name, spec in stages.items()}


def test_dvc_metrics_are_the_headline_files_only():
    declared = []
    for name, spec in _stages().items():
        for path, opts in _entries(spec.get("metrics")):
            declared.append(path)
            assert path.startswith("metrics/headline/"), f"{name}: {path} is a DVC metric but not a headline file"
            assert opts.get("cache", True), f"{name}: {path}: a headline metric must be cached (dvc exp apply)"
            assert "timing" not in path
    assert len(declared) >= 7  # every stage with figures has its headline


def test_every_out_is_cached_and_no_stage_depends_on_a_timing_file():
    """Every declared out can be restored from DVC's cache (a fresh clone with `dvc pull` and a `dvc exp run --temp`
    find finished stages up to date); wall-clock timing files are cached outs no stage lists as a dep (so their bytes,
    new on every run, rerun nothing); resume checkpoints are no out at all."""
    timing = []
    for name, spec in _stages().items():
        outs = dict(_entries(spec.get("outs")))
        for path, opts in outs.items():
            assert opts.get("cache", True) and not opts.get("persist"), f"{name}: {path}: every out is cached"
            assert not path.startswith("checkpoints/"), f"{name}: {path}: checkpoints are no DVC out"
            timing += [path] if path.endswith("-timing.json") or "-timing/" in path else []
        deps = [d for d in spec.get("deps", []) if isinstance(d, str)]
        assert not [d for d in deps if "-timing" in d], f"{name} depends on a timing file"
    assert len(timing) >= 10


def test_write_headline_nests_under_one_name_and_refuses_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = headline.write_headline("finetune/pretrained-ner", {"pretrained": {"ner": 0.5}})
    assert path == Path("metrics/headline/finetune/pretrained-ner.json")
    assert json.loads(path.read_text()) == {"pretrained": {"ner": 0.5}}
    with pytest.raises(ValueError, match="pretrain.size = 'tiny' is not a number"):
        headline.write_headline("pretrain", {"pretrain": {"size": "tiny"}})
    assert not Path("metrics/headline/pretrain.json").exists()
