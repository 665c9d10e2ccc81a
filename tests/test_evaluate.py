"""Stage ``evaluate`` on tiny fine-tuned models and fixed metrics files: outputs, values, byte-identical rerun."""

from __future__ import annotations

import csv
import json

from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from bert_pipeline.io import write_json
from stages.evaluate import main
from tests.conftest import write_params
from tests.tiny_models import save_classifier, save_tagger

FAMILY = {"pretrained": 0.70, "distilled": 0.66, "scratch": 0.60}


def _setup(root):
    write_params(root, evaluate={"latency_examples": 2, "throughput_batch_size": 2, "warmup_runs": 0, "timed_runs": 1})
    feats = Features({"text": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    texts = ["a good film", "a bad plot", "great actors", "boring story", "awful movie"]
    split = Dataset.from_dict({"text": texts, "label": [1, 0, 1, 0, 0]}, features=feats)
    DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(str(root / "data/tasks/sentiment"))
    for i, (m, score) in enumerate(FAMILY.items()):
        save_classifier(root / f"models/finetuned/{m}-sentiment", favour=1, seed=i)  # always "positive"
        save_tagger(root / f"models/finetuned/{m}-ner", seed=i)
        write_json(root / f"metrics/finetune/{m}-sentiment.json", {
            "model": m, "task": "sentiment", "main_metric": "accuracy",
            "test": {"accuracy": {"mean": score, "seeds": [score]}, "macro_f1": {"mean": score - 0.1, "seeds": []}},
            "low_resource": {"train_examples": 100, "test": {"accuracy": {"mean": score / 2, "seeds": []}}}})
        write_json(root / f"metrics/finetune/{m}-ner.json", {
            "model": m, "task": "ner", "main_metric": "f1",
            "test": {"f1": {"mean": score - 0.2, "seeds": []}, "f1_PER": {"mean": 0.5, "seeds": []},
                     "f1_LOC": {"mean": 0.25, "seeds": []}}})
    write_json(root / "metrics/pretrain.json", {"init": "scratch", "size": "tiny", "objective": "nsp", "steps": 4,
                                                "tokens_seen": 123456})  # tokens_seen at top level, as pretrain writes
    write_json(root / "metrics/corpus.json", {"documents": 10})
    (root / "plots").mkdir()
    (root / "plots/pretrain.csv").write_text(  # as pretrain writes it (history_csv, PLOT_COLUMNS)
        "step,train_loss,learning_rate,eval_mlm_loss,eval_mlm_accuracy,eval_pair_accuracy,eval_unigram_accuracy\n"
        "1,5.1,0.001,,,,\n2,4.8,0.0005,4.9,0.06,0.5,0.04\n")
    # no plots/distill.csv or plots/tokenizer_fertility.csv: those figures are left out


def test_evaluate_stage_outputs(in_tmp, mlflow_in_tmp):
    from mlflow import MlflowClient

    uri = mlflow_in_tmp
    _setup(in_tmp)
    main()
    (run,) = MlflowClient(tracking_uri=uri).search_runs(
        [MlflowClient(tracking_uri=uri).get_experiment_by_name("bert-pipeline").experiment_id])
    assert run.data.tags["stage"] == "evaluate"
    assert run.info.status == "FINISHED"
    assert run.data.metrics["pretrained.sentiment.accuracy"] == 0.7
    assert run.data.params["teacher"] == "pretrained"
    flat = json.loads((in_tmp / "metrics/evaluate.json").read_text())
    assert flat["pretrained.sentiment.accuracy"] == 0.7
    assert flat["distilled.ner.f1_PER"] == 0.5
    assert flat["scratch.sentiment.low_resource_accuracy"] == 0.3
    assert round(flat["gain_over_scratch.sentiment"], 6) == 0.1
    assert flat["student_share.sentiment"] == round(0.66 / 0.70, 6)
    assert flat["pretrained.average"] == round((0.70 + 0.50) / 2, 6)
    assert flat["pretrained.parameters"] == flat["scratch.parameters"] > 0
    assert flat["scratch.sentiment.confusion_examples"] == 5
    assert flat["scratch.sentiment.confusion_accuracy"] == 0.4  # always "positive", 2 of 5 are
    timing = json.loads((in_tmp / "metrics/evaluate-timing.json").read_text())
    assert timing["pretrained.relative_speed"] == 1.0
    assert timing["distilled.latency_ms_b1"] > 0
    summary = (in_tmp / "reports/summary.md").read_text()
    assert "| pretrained | teacher |" in summary
    assert "| 70.0 | 50.0 | 60.0 |" in summary
    assert "sentiment +10.0 points accuracy" in summary
    assert "123,456 tokens seen" in summary
    assert "silver" in summary
    assert "Corpus (metrics/corpus.json): documents: 10." in summary
    with open(in_tmp / "plots/evaluate/sentiment_confusion/scratch.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["actual"] for r in rows] == ["positive", "negative", "positive", "negative", "negative"]
    assert {r["predicted"] for r in rows} == {"positive"}
    with open(in_tmp / "plots/evaluate/ner_f1_per_type.csv") as fh:
        ner = [(r["model"], r["type"], r["f1"]) for r in csv.DictReader(fh)]
    assert ner[:2] == [("pretrained", "LOC", "25.0"), ("pretrained", "PER", "50.0")]
    assert len(ner) == 6

    figures = sorted(p.name for p in (in_tmp / "reports/figures").iterdir())
    assert figures == ["ner_f1_per_type.png", "pretrain_curves.png", "score_vs_speed.png", "sentiment_confusion.png"]
    for name in figures:  # every figure is linked from the page, relative to it, and is a PNG
        assert f"](figures/{name})" in summary
        assert (in_tmp / "reports/figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "(`plots/pretrain.csv`)" in summary

    before = {p: (in_tmp / p).read_bytes() for p in ("metrics/evaluate.json", "plots/evaluate/ner_f1_per_type.csv",
                                                      "plots/evaluate/sentiment_confusion/pretrained.csv",
                                                      # figures of quality data only (score vs speed is wall clock)
                                                      "reports/figures/pretrain_curves.png",
                                                      "reports/figures/sentiment_confusion.png",
                                                      "reports/figures/ner_f1_per_type.png")}
    main()
    assert {p: (in_tmp / p).read_bytes() for p in before} == before


def _sentiment_record(correct: list[bool], seeds=(42, 43)):
    """A per-example record of 200 sentiment test examples in 40 films whose ``correct`` flags (per seed the
    same) give the member's accuracy."""
    import numpy as np

    from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash

    gold = np.arange(200) % 2
    ids = [f"test:{i}" for i in range(200)]
    rec = ExampleRecord("classification", "accuracy", ["negative", "positive"])
    rec.splits["test"] = SplitInfo(ids, [f"film{i // 5}" for i in range(200)], split_hash(ids, gold.tolist()))
    pred = np.where(correct, gold, 1 - gold)
    for seed in seeds:
        rec.add("test", "full", seed, {"gold": gold, "pred": pred})
    return rec


def test_evaluate_publishes_intervals_beside_every_score_gain_and_share(in_tmp, mlflow_in_tmp):
    """With per-example records, evaluate.json carries KEY_ci_low/high beside each score, gain and share (the
    report shows them bracketed), a gain whose interval excludes 0 reads so in "How sure", and the members
    without a record (ner here) keep their point estimates."""
    import numpy as np

    from bert_pipeline.evaluation.intervals import Bootstrap

    _setup(in_tmp)
    rng = np.random.default_rng(0)
    recs = {}
    for m, score in FAMILY.items():
        correct = np.zeros(200, dtype=bool)
        correct[rng.permutation(200)[: round(200 * score)]] = True
        recs[m] = _sentiment_record(correct.tolist())
        recs[m].write(in_tmp / f"metrics/examples/{m}-sentiment.arrow")
    main()
    flat = json.loads((in_tmp / "metrics/evaluate.json").read_text())
    boot = Bootstrap(10_000, 0.95, 0, "percentile")
    a = boot.estimates(recs["pretrained"], "test")["accuracy"]
    b = boot.estimates(recs["scratch"], "test")["accuracy"]
    # gain_over_scratch and student_share are primary: Bonferroni over the two, each at 97.5%
    gain = boot.difference(a, b, 0.975).rounded()
    assert (flat["gain_over_scratch.sentiment_ci_low"], flat["gain_over_scratch.sentiment_ci_high"]) == (gain.low,
                                                                                                         gain.high)
    assert flat["gain_over_scratch.sentiment_ci_low"] < 0.1 < flat["gain_over_scratch.sentiment_ci_high"]
    assert flat["pretrained.sentiment.accuracy_ci_low"] < 0.7 < flat["pretrained.sentiment.accuracy_ci_high"]
    assert flat["student_share.sentiment_ci_low"] < round(0.66 / 0.70, 6) < flat["student_share.sentiment_ci_high"]
    assert "pretrained.ner.f1_ci_low" not in flat  # no record: no interval, never an invented one
    summary = (in_tmp / "reports/summary.md").read_text()
    assert f"sentiment +10.0 points [{100 * gain.low:+.1f}, {100 * gain.high:+.1f}] accuracy" in summary
    assert "## How sure" in summary and "| sentiment | 200 | 40 |" in summary
    assert "primary" in summary and "exploratory" in summary
    with open(in_tmp / "plots/evaluate/score_vs_speed.csv") as fh:
        assert all(r["average_ci_low"] == "" for r in csv.DictReader(fh))  # ner has no record: no average interval
    before = (in_tmp / "metrics/evaluate.json").read_bytes()
    main()
    assert (in_tmp / "metrics/evaluate.json").read_bytes() == before


def test_headline_carries_the_intervals_of_the_average_and_the_share():
    from stages.evaluate import headline

    flat = {"m.average": 0.5, "m.average_ci_low": 0.4, "m.average_ci_high": 0.6, "m.sentiment.accuracy_ci_low": 0.1,
            "distillation.s.average_share": 0.9, "distillation.s.average_share_ci_low": 0.8,
            "distillation.s.average_share_ci_high": 1.01}
    assert headline(flat) == {"m": {"average": 0.5, "average_ci_low": 0.4, "average_ci_high": 0.6},
                              "s": {"teacher_share": 0.9, "teacher_share_ci_low": 0.8, "teacher_share_ci_high": 1.01}}
