"""The params schema: the committed params.yaml and profiles validate; errors are one line naming the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from bert_pipeline.io import flatten
from stages.cli import available_profiles, load_profile, profile_command
from stages.params import ParamsError, apply_overrides, load_params, validate_params
from tests.conftest import REPO


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def test_committed_params_validate():
    params = load_params(REPO / "params.yaml")
    assert params.prepare_corpus.min_words >= 0


@pytest.mark.parametrize("name", available_profiles(REPO / "profiles"))
def test_every_profile_validates(name, monkeypatch):
    monkeypatch.chdir(REPO)
    cmd = profile_command(name)
    assert cmd[:4] == ["dvc", "exp", "run", "--temp"]
    overrides = load_profile(name)
    assert cmd.count("--set-param") == len(overrides)


def _error(raw: dict) -> str:
    with pytest.raises(ParamsError) as info:
        validate_params(raw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_wrong_type_names_key_and_expectation(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_words"] = "ten"
    assert _error(bad) == 'params.yaml: prepare_corpus.min_words: expected int >= 0, got "ten"'


def test_out_of_range(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_words"] = -3
    assert _error(bad) == "params.yaml: prepare_corpus.min_words: expected int >= 0, got -3"


def test_unknown_key(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_wrods"] = 3
    assert _error(bad) == "params.yaml: prepare_corpus.min_wrods: unknown key"


def test_missing_key(raw):
    bad = copy.deepcopy(raw)
    del bad["prepare_corpus"]["min_words"]
    assert _error(bad).startswith("params.yaml: prepare_corpus.min_words: missing key")


def test_unknown_section(raw):
    bad = copy.deepcopy(raw)
    bad["pretrian"] = {}
    assert _error(bad) == "params.yaml: pretrian: unknown key"


def test_bad_literal(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["sentence_splitter"] = "regex"
    assert "prepare_corpus.sentence_splitter: expected one of" in _error(bad)


def test_invalid_yaml_is_one_line(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert str(info.value).startswith(f"{path}:") and "\n" not in str(info.value)


def test_overrides_are_dotted_and_do_not_mutate(raw):
    out = apply_overrides(raw, {"prepare_corpus.min_words": 5, "prepare_corpus": {"split_seed": 7}})
    assert out["prepare_corpus"]["min_words"] == 5 and out["prepare_corpus"]["split_seed"] == 7
    assert raw["prepare_corpus"]["min_words"] != 5 or raw["prepare_corpus"]["split_seed"] != 7
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}


def test_pretrain_init_decides_the_tokenizer(raw):
    assert validate_params(raw).pretrain.tokenizer_path == Path("models/tokenizer")
    raw["pretrain"]["init"] = "data/raw/minilm"
    assert validate_params(raw).pretrain.tokenizer_path == Path("data/raw/minilm")
