"""`bench/analysis/paired_share.py` reads two saved per-example records and prints the student's share of its teacher
with the paired bootstrap's interval (bert_pipeline.evaluation.intervals): no model, no prediction."""

from __future__ import annotations

import importlib.util
import json

import pytest
import yaml

from bert_pipeline import tasks
from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash
from tests.conftest import REPO

LABELS = ["negative", "positive"]


def bench():
    spec = importlib.util.spec_from_file_location("paired_share", REPO / "bench/analysis/paired_share.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record(predictions: dict[str, list[int]], gold: dict[str, list[int]], clusters: dict[str, list[str]]):
    """A classification record with one seed (42) per split: ``predictions[split]`` against ``gold[split]``."""
    kind = tasks.get("classification")
    rec = ExampleRecord("classification", "accuracy", LABELS)
    for split, refs in gold.items():
        ids = [f"{split}:{i}" for i in range(len(refs))]
        rec.splits[split] = SplitInfo(ids, clusters[split], split_hash(ids, refs))
        rec.add(split, "full", 42, kind.example_columns(refs, predictions[split], LABELS))
    return rec


def test_the_bench_prints_the_share_of_two_saved_records(tmp_path, capsys):
    """Test: the teacher is right on all 10 examples (10 films), the student on 9: share 0.9; a draw reaches 0.97
    only when it misses the wrong example's film, probability 0.9 ** 10 = 0.349. Validation: both right on 4 of 6,
    wrong on different examples (3 films of 2): share 1.0."""
    gold = {"validation": [0, 1, 0, 1, 0, 1], "test": [0, 1] * 5}
    clusters = {"validation": ["f1", "f1", "f2", "f2", "f3", "f3"], "test": [f"film{i}" for i in range(10)]}
    teacher = record({"validation": [0, 1, 1, 0, 0, 1], "test": list(gold["test"])}, gold, clusters)
    student = record({"validation": [1, 0, 0, 1, 0, 1], "test": [*gold["test"][:9], 0]}, gold, clusters)
    folder = tmp_path / "metrics" / "examples"
    folder.mkdir(parents=True)
    teacher.write(folder / "minilm-sentiment.arrow")
    student.write(folder / "minilm_student-sentiment.arrow")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "task_distill": {"teacher": "minilm", "student": "minilm_student"},
        "evaluate": {"teacher": "pretrained", "student": "distilled",
                     "intervals": {"resamples": 4000, "confidence": 0.95, "seed": 3, "method": "percentile"}}}))
    bench().main(["--run", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["task"], r["split"]) for r in rows] == [("sentiment", "validation"), ("sentiment", "test")]
    val, test = rows
    assert (val["examples"], val["clusters"], test["examples"], test["clusters"]) == (6, 3, 10, 10)
    assert (test["teacher"], test["student"], test["share"]) == (1.0, 0.9, 0.9)
    assert test["at_least_goal"] == pytest.approx(0.9 ** 10, abs=0.03)
    assert test["high"] == 1.0 and test["low"] <= 0.7  # 3+ copies of the wrong example: a 2.5% tail draw
    assert (test["resamples"], test["confidence"], test["method"], test["goal"]) == (4000, 0.95, "percentile", 0.97)
    assert (val["teacher"], val["student"], val["share"]) == (pytest.approx(0.6667, abs=1e-4),) * 2 + (1.0,)
    assert val["low"] < 1.0 < val["high"]
    # the same records, named by argument, with other settings: the same point, the settings used
    bench().main(["--run", str(tmp_path), "--teacher", "minilm", "--student", "minilm_student", "--tasks", "sentiment",
                  "--resamples", "500", "--method", "basic", "--goal", "0.9"])
    again = [json.loads(line) for line in capsys.readouterr().out.splitlines()][1]
    assert (again["share"], again["resamples"], again["method"]) == (0.9, 500, "basic")
    # a draw keeps 0.9 when it holds the wrong example at most once: 0.9 ** 10 + 10 * 0.1 * 0.9 ** 9 = 0.736
    assert again["at_least_goal"] == pytest.approx(0.9 ** 10 + 0.9 ** 9, abs=0.06)
    # the other pair (evaluate.teacher / student) has no records here: one line naming the folder
    with pytest.raises(SystemExit, match="no per-example records of both pretrained and distilled"):
        bench().main(["--run", str(tmp_path), "--pair", "evaluate"])


def test_records_of_different_examples_are_refused(tmp_path):
    gold = {"test": [0, 1, 0, 1]}
    clusters = {"test": ["a", "b", "c", "d"]}
    folder = tmp_path / "metrics" / "examples"
    folder.mkdir(parents=True)
    record({"test": [0, 1, 0, 1]}, gold, clusters).write(folder / "t-sentiment.arrow")
    record({"test": [0, 1, 0, 1]}, {"test": [0, 1, 1, 1]}, clusters).write(folder / "s-sentiment.arrow")
    with pytest.raises(SystemExit, match="scored different test examples"):
        bench().main(["--run", str(tmp_path), "--teacher", "t", "--student", "s"])
