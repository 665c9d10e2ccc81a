"""The pretrain params section and stage: one-line errors for bad params and inputs."""

from __future__ import annotations

import copy

import pytest
import yaml

from stages.params import ParamsError, validate_params
from tests.conftest import REPO


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("size", "huge", 'pretrain.model.size: expected one of "tiny", "mini", "small", "medium", "base", "large", '
                         'got "huge"'),
        ("phases", [{"max_seq_length": 128, "fraction": 0.9}, {"max_seq_length": 512, "fraction": 0.2}],
         "pretrain.phases: expected fractions summing to 1, got 1.1"),
        ("optimizer", "sgd", 'pretrain.optimizer: expected one of "adamw", "lamb", got "sgd"'),
    ],
)
def test_bad_pretrain_params_are_one_line(raw, key, value, message):
    bad = copy.deepcopy(raw)
    if key == "size":
        bad["pretrain"]["model"]["size"] = value
    else:
        bad["pretrain"][key] = value
    with pytest.raises(ParamsError) as err:
        validate_params(bad)
    assert str(err.value) == f"params.yaml: {message}"
