"""Multi-label classification, the kind added as one module (bert_pipeline/tasks/multi_label.py) plus params: its
metrics against scikit-learn, a user CSV through prepare_tasks' loader, fine-tuning, the card, predict and ONNX."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from bert_pipeline import tasks
from bert_pipeline.data.task_features import TaskDataError
from bert_pipeline.tasks.multi_label import multi_hot, multi_label_metrics, parse_labels
from stages import finetune
from tests.conftest import finetuned_card_text
from tests.test_pair_regression import _ft_params, _predict, _save_task, _user_spec, _write_csv, workdir  # noqa: F401

KIND = "multi_label_classification"
TOPICS = {"politics": ["council", "voted", "vote"], "weather": ["rain", "fell", "storm"]}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_equal_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    gold = [sorted(rng.choice(5, size=rng.integers(0, 4), replace=False).tolist()) for _ in range(40)]
    pred = [sorted(rng.choice(5, size=rng.integers(0, 4), replace=False).tolist()) for _ in range(40)]
    y, p = multi_hot(gold, 5), multi_hot(pred, 5)
    got = multi_label_metrics(gold, pred, 5)
    assert got["micro_f1"] == pytest.approx(f1_score(y, p, average="micro", zero_division=0))
    assert got["macro_f1"] == pytest.approx(f1_score(y, p, average="macro", zero_division=0))
    assert got["subset_accuracy"] == pytest.approx(accuracy_score(y, p))
    perfect = multi_label_metrics(gold, gold, 5)
    assert perfect["micro_f1"] == 1.0 and perfect["subset_accuracy"] == 1.0
    with pytest.raises(ValueError, match="label id 5 outside 0..4"):
        multi_label_metrics([[5]], [[0]], 5)


def test_labels_parse_from_a_separated_string_or_a_list():
    assert parse_labels("weather| politics |weather", "|") == ["weather", "politics"]
    assert parse_labels("", "|") == [] and parse_labels(None, "|") == []
    assert parse_labels(["a", " b "], ";") == ["a", "b"]


def _rows(n: int, seed: int) -> list[dict[str, str]]:
    """Texts of words from zero, one or both topics; the labels are the topics present (computable from the text)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        present = [t for t in TOPICS if rng.random() < 0.5]
        words = ["the", "city"] + [w for t in present for w in rng.choice(TOPICS[t], 2).tolist()]
        rng.shuffle(words)
        out.append({"sentence": " ".join(words), "topics": "|".join(present)})
    return out


def test_a_user_csv_loads_with_empty_label_sets_and_bad_rows_are_one_line(tmp_path):
    path = _write_csv(tmp_path / "t.csv", _rows(30, 0))
    spec = _user_spec(name="topics", kind=KIND, train=path, validation=path, test=path, text_column="sentence",
                      label_column="topics")
    assert spec.label_separator == "|"
    dd, info = tasks.get(KIND).load_user_task(spec)
    assert info == {"label_names": ["politics", "weather"]}
    assert dd["train"].features["label"].feature.names == ["politics", "weather"]
    rows = _rows(30, 0)
    assert [sorted(["politics", "weather"].index(t) for t in r["topics"].split("|") if t) for r in rows] == \
        dd["train"]["label"]
    stats = tasks.get(KIND).describe(dd)["train"]
    assert stats["examples"] == 30 and stats["no_label"] == sum(not r["topics"] for r in rows)
    assert stats["label_counts"]["weather"] == sum("weather" in r["topics"] for r in rows)
    one = _write_csv(tmp_path / "one.csv", [{"sentence": "rain", "topics": "weather"}])
    with pytest.raises(TaskDataError, match=r"one.csv: column 'topics' holds 1 distinct label\(s\)"):
        tasks.get(KIND).load_user_task(_user_spec(name="t", kind=KIND, train=one, validation=one, test=one,
                                                  text_column="sentence", label_column="topics"))
    blank = _write_csv(tmp_path / "blank.csv", [{"sentence": "rain", "topics": "weather"},
                                                {"sentence": " ", "topics": "politics"}])
    with pytest.raises(TaskDataError, match=r"blank.csv: row 3: empty or non-text 'sentence'"):
        tasks.get(KIND).load_user_task(_user_spec(name="t", kind=KIND, train=blank, validation=path, test=path,
                                                  text_column="sentence", label_column="topics"))


def test_multi_label_learns_fine_tunes_serves_and_exports(workdir, capsys):  # noqa: F811
    splits = {s: _write_csv(workdir / f"{s}.csv", _rows(n, seed))
              for s, (n, seed) in {"train": (384, 0), "validation": (64, 1), "test": (64, 2)}.items()}
    spec = _user_spec(name="topics", kind=KIND, text_column="sentence", label_column="topics", **splits)
    dd, info = tasks.get(KIND).load_user_task(spec)
    _save_task(workdir / "data/tasks", "topics", dd, {"kind": KIND, **info})
    p = _ft_params({"topics": {"max_length": 16, "epochs": 15, "batch_size": 16}})
    m = finetune.run("tiny", "topics", p)
    assert m["main_metric"] == "micro_f1"
    assert set(m["test"]) == {"micro_f1", "macro_f1", "subset_accuracy"}
    assert m["test"]["micro_f1"]["mean"] >= 0.9, m["test"]
    folder = workdir / "models/finetuned/tiny-topics"
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["problem_type"] == "multi_label_classification" and cfg["task_kind"] == KIND
    card = finetuned_card_text("tiny-topics", p)
    assert "a sigmoid each (multi-label)" in card and "micro F1" in card
    out = _predict(capsys, [str(folder), "council voted rain fell", "the city", "storm rain"])
    assert [[x["label"] for x in r["labels"]] for r in out] in (
        [["politics", "weather"], [], ["weather"]], [["weather", "politics"], [], ["weather"]])
    assert set(out[0]) == {"text", "labels", "tokens", "truncated"}
    assert all(0.5 < x["probability"] <= 1 for r in out for x in r["labels"])
    from bert_pipeline.mlops import onnx_export as ox
    from bert_pipeline.mlops.registry import serving_flavour
    assert serving_flavour(Path(folder)) == "pyfunc"  # the transformers flavour would take a softmax
    report = ox.export_folder(Path(folder), workdir / "onnx", list(dd["test"].select(range(6))), max_seq_length=16,
                              runs=1, warmup=0, latency_examples=2)
    assert report.parity.agreement == 1.0 and max(report.parity.max_abs_diff.values()) < 1e-4


def test_wrong_label_values_hub_columns_and_distillation_are_one_line(tmp_path, caplog):
    rows = tmp_path / "t.jsonl"
    rows.write_text('{"text": "rain fell", "labels": ["weather"]}\n{"text": "council", "labels": [1, 2]}\n')
    spec = _user_spec(name="t", kind=KIND, train=str(rows), validation=str(rows), test=str(rows),
                      label_column="labels")
    with pytest.raises(TaskDataError, match=r"t.jsonl: line 2: 'labels': expected a list of label strings, got \[1, 2\]"):
        tasks.get(KIND).load_user_task(spec)
    rows.write_text('{"text": "rain fell", "labels": {"a": 1}}\n')
    with pytest.raises(TaskDataError, match=r"line 1: 'labels': expected labels separated by '\|' or a list"):
        tasks.get(KIND).load_user_task(spec)
    comma = _write_csv(tmp_path / "c.csv", [{"text": "rain", "topics": "politics,weather"},
                                            {"text": "vote", "topics": "politics"}])
    with caplog.at_level("WARNING"):
        tasks.get(KIND).load_user_task(_user_spec(name="c", kind=KIND, train=comma, validation=comma, test=comma,
                                                  label_column="topics"))
    assert "label 'politics,weather' holds ','" in caplog.text

    from datasets import ClassLabel, Dataset, DatasetDict, Value
    from datasets import Sequence as HFSequence

    from bert_pipeline.errors import PipelineError
    flat = DatasetDict({"train": Dataset.from_dict({"text": ["a"], "labels": ["x|y"]}).cast_column(
        "labels", Value("string"))})
    with pytest.raises(PipelineError, match=r"user_tasks\[h\].hf_dataset: a multi_label_classification dataset "
                                            r"needs a 'label' column of lists of class labels"):
        tasks.get(KIND).hub_info(flat, _user_spec(name="h", kind=KIND, hf_dataset="x", label_column="labels"))
    good = DatasetDict({"train": Dataset.from_dict({"text": ["a"], "label": [[0]]}).cast_column(
        "label", HFSequence(ClassLabel(names=["x", "y"])))})
    assert tasks.get(KIND).hub_info(good, _user_spec(name="h", kind=KIND, hf_dataset="x")) == {"label_names": ["x", "y"]}

    from bert_pipeline.train.finetune_data import FinetuneError
    from bert_pipeline.train.task_distill import check_distillable
    with pytest.raises(FinetuneError, match=r"^topics: a multi_label_classification task has no distribution"):
        check_distillable(Path("data/tasks/topics"), KIND)
    check_distillable(Path("data/tasks/sentiment"), "classification")  # a distillable kind passes


@pytest.mark.parametrize(("kind", "option", "readers"), [
    ("classification", {"label_separator": ";"}, "multi_label_classification"),
    (KIND, {"text_pair_column": "b"}, "pair_classification, regression"),
    ("ner", {"text_pair_column": "b"}, "pair_classification, regression")])
def test_a_setting_the_kind_does_not_read_is_refused_not_ignored(kind, option, readers):
    key = next(iter(option))
    with pytest.raises(Exception, match=rf"user_tasks\[t\]\.{key}: a {kind} task does not read it \(only {readers}\)"):
        _user_spec(name="t", kind=kind, train="a.csv", validation="a.csv", test="a.csv", **option)
    _user_spec(name="t", kind=KIND, train="a.csv", validation="a.csv", test="a.csv", label_separator=";")
