"""``bert-pipeline promote`` end to end on files laid out as the finetune stage writes them: one version per
family member, candidate = the best, champion moved, the decision printed as one line per task."""

from __future__ import annotations

import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import write_json
from stages.cli import main
from tests.conftest import REPO
from tests.tiny_models import save_classifier

SCORES = {"pretrained": 0.70, "distilled": 0.75, "scratch": 0.60}


def _workspace(root) -> None:
    (root / "params.yaml").write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    feats = Features({"text": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    split = Dataset.from_dict({"text": ["good", "bad", "fine"], "label": [1, 0, 1]}, features=feats)
    DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(str(root / "data/tasks/sentiment"))
    for i, (member, score) in enumerate(SCORES.items()):
        save_classifier(root / f"models/finetuned/{member}-sentiment", favour=1, seed=i)
        write_json(root / f"metrics/finetune/{member}-sentiment.json", {
            "model": member, "task": "sentiment", "kind": "classification", "main_metric": "accuracy",
            "seeds": [7 + i, 99], "test_examples": 3, "low_resource": None,
            "test": {"accuracy": {"mean": score, "seeds": [score, score]}},
            "validation": {"accuracy": {"mean": score, "seeds": [score, score]}}})


def test_promote_registers_the_family_and_moves_champion_to_the_best(in_tmp, monkeypatch, capsys):
    from mlflow import MlflowClient

    _workspace(in_tmp)
    uri = f"sqlite:///{in_tmp / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    main(["promote"])
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("sentiment: candidate v2 distilled (0.7500) vs champion none: PROMOTED")
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = client.get_registered_model("sentiment")
    assert {alias: str(version) for alias, version in model.aliases.items()} == {"candidate": "2", "champion": "2"}
    versions = {v.tags["family_member"]: v for v in client.search_model_versions("name='sentiment'")}
    assert sorted(versions) == ["distilled", "pretrained", "scratch"]
    assert versions["distilled"].tags["seed"] == "8"  # the first seed's weights are the saved ones
    assert versions["pretrained"].tags["seed"] == "7"
    assert float(versions["scratch"].tags["score"]) == 0.60

    main(["promote"])  # the same folders again: no new version, champion stays
    (again,) = capsys.readouterr().out.splitlines()
    assert "candidate is already the champion" in again
    assert len(client.search_model_versions("name='sentiment'")) == 3


def test_unknown_task_is_one_line(in_tmp):
    _workspace(in_tmp)
    with pytest.raises(PipelineError, match=r"^--tasks: no metrics/finetune/\*-qa.json \(tasks with results: sentiment\)$"):
        main(["promote", "--tasks", "qa"])
