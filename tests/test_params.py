"""The params schema: the committed params.yaml and profiles validate; errors are one line naming the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import flatten
from stages.cli import available_profiles, load_profile, profile_command
from stages.params import Params, ParamsError, apply_overrides, load_params, validate_params
from tests.conftest import REPO, params_error


def _stated(value, like):
    """``value`` cut down to the keys and list items that ``like`` has."""
    if isinstance(like, dict) and isinstance(value, dict):
        return {k: _stated(value.get(k), v) for k, v in like.items()}
    if isinstance(like, list) and isinstance(value, list) and len(like) == len(value):
        return [_stated(x, y) for x, y in zip(value, like, strict=True)]
    return value


def test_committed_params_validate_in_pipeline_order_and_unchanged(raw):
    params = load_params(REPO / "params.yaml")
    # the sections come in the schema's (pipeline) order, which the schema itself does not check
    assert list(raw) == list(Params.model_fields)
    # every value params.yaml states reaches the stages as written (defaults only fill in what it leaves out)
    assert _stated(params.model_dump(mode="json"), raw) == raw


@pytest.mark.parametrize("name", available_profiles(REPO / "profiles"))
def test_every_profile_validates(name, monkeypatch):
    monkeypatch.chdir(REPO)
    cmd = profile_command(name)
    assert cmd[:4] == ["dvc", "exp", "run", "--temp"]
    overrides = load_profile(name)
    assert cmd.count("--set-param") == len(overrides)


def test_wrong_type_names_key_and_expectation(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_words"] = "ten"
    assert params_error(bad) == 'params.yaml: prepare_corpus.min_words: expected int >= 0, got "ten"'


def test_out_of_range(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_words"] = -3
    assert params_error(bad) == "params.yaml: prepare_corpus.min_words: expected int >= 0, got -3"


def test_unknown_key(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_wrods"] = 3
    assert params_error(bad) == "params.yaml: prepare_corpus.min_wrods: unknown key"


def test_missing_key(raw):
    bad = copy.deepcopy(raw)
    del bad["prepare_corpus"]["min_words"]
    assert params_error(bad).startswith("params.yaml: prepare_corpus.min_words: missing key")


def test_unknown_section(raw):
    bad = copy.deepcopy(raw)
    bad["pretrian"] = {}
    assert params_error(bad) == "params.yaml: pretrian: unknown key"


def test_bad_literal(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["sentence_splitter"] = "regex"
    assert "prepare_corpus.sentence_splitter: expected one of" in params_error(bad)


def test_invalid_yaml_is_one_line(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert str(info.value).startswith(f"{path}:")
    assert "\n" not in str(info.value)


def test_overrides_are_dotted_and_do_not_mutate(raw):
    before = copy.deepcopy(raw)
    out = apply_overrides(raw, {"prepare_corpus.min_words": 5, "prepare_corpus": {"split_seed": 7}})
    assert out["prepare_corpus"]["min_words"] == 5
    assert out["prepare_corpus"]["split_seed"] == 7
    assert raw == before
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}


def test_pretrain_init_decides_the_tokenizer(raw):
    assert validate_params(raw).pretrain.tokenizer_path == Path("models/tokenizer")
    raw["pretrain"]["init"] = "data/raw/minilm"
    assert validate_params(raw).pretrain.tokenizer_path == Path("data/raw/minilm")


def test_a_profile_is_a_name_from_the_profiles_folder():
    with pytest.raises(PipelineError, match=r"^unknown profile '../params': expected one of dapt-minilm, "):
        load_profile("../params", REPO / "profiles")
