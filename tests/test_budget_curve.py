"""The budget curve's arithmetic, intervals, record, CSV and report section (bert_pipeline.report.budget_curve), and
the stage itself on a tiny workspace: one extra budget pre-trained and fine-tuned for real, in process (the smoke
profile of tests/test_e2e_smoke.py trains none), its per-example records and intervals checked against its
metrics."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from bert_pipeline import tasks
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, SplitInfo, split_hash
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.report.budget_curve import (
    BudgetPoint,
    budget_curve_section,
    column,
    curve_csv,
    curve_record,
    gains,
    no_pretraining,
    with_intervals,
)
from bert_pipeline.report.figures import budget_curve_png
from bert_pipeline.report.report import parse_finetune_metrics
from tests.conftest import REPO, run_stage, save_tiny_tasks, tiny_finetune


def _result(model, task, seeds, low=None, metric="f1"):
    raw = {"model": model, "task": task, "main_metric": metric,
           "test": {metric: {"mean": sum(seeds) / len(seeds), "seeds": seeds}, "other": {"mean": 0.5, "seeds": [0.5] * len(seeds)}}}
    if low is not None:
        raw["low_resource"] = {"train_examples": 500, "test": {metric: {"mean": sum(low) / len(low), "seeds": low}}}
    return parse_finetune_metrics(raw, f"metrics/finetune/{model}-{task}.json")


def test_gains_pair_seeds_and_cover_low_resource_runs():
    pretrained = [_result("pretrained", "ner", [0.40, 0.44]),
                  _result("pretrained", "sentiment", [0.70, 0.72], low=[0.60, 0.58], metric="accuracy")]
    scratch = [_result("scratch", "sentiment", [0.71, 0.69], low=[0.55, 0.57], metric="accuracy"),
               _result("scratch", "ner", [0.38, 0.45])]
    out = gains(pretrained, scratch)
    assert list(out) == ["ner", "sentiment", "sentiment@500"]
    assert out["ner"].seeds == pytest.approx((0.02, -0.01))
    assert out["ner"].mean == pytest.approx(0.005)
    assert out["sentiment"].seeds == pytest.approx((-0.01, 0.03))
    assert out["sentiment@500"].seeds == pytest.approx((0.05, 0.01))
    record = out["ner"].record()
    assert (record["min"], record["max"]) == (pytest.approx(-0.01), pytest.approx(0.02))
    assert record["pretrained"] == [0.40, 0.44] and record["scratch"] == [0.38, 0.45]


def test_gains_refuse_other_seed_counts_and_missing_tasks():
    with pytest.raises(PipelineError, match=r"ner has 2 seed\(s\) against 1; fine-tune both at the same finetune.seeds"):
        gains([_result("pretrained", "ner", [0.4, 0.5])], [_result("scratch", "ner", [0.4])])
    with pytest.raises(PipelineError, match="no from-scratch result for task 'qa'"):
        gains([_result("pretrained", "qa", [0.4])], [_result("scratch", "ner", [0.4])])
    with pytest.raises(PipelineError, match=r"scores \['ner'\] vs \['ner', 'ner@500'\]; fine-tune both with the same "
                                            "finetune.low_resource_tasks"):
        gains([_result("pretrained", "ner", [0.4])], [_result("scratch", "ner", [0.4], low=[0.3])])
    with pytest.raises(PipelineError, match="main metric 'f1' vs 'accuracy'"):
        gains([_result("pretrained", "ner", [0.4])], [_result("scratch", "ner", [0.4], metric="accuracy")])


def _curve():
    scratch = [_result("scratch", "ner", [0.30, 0.34]), _result("scratch", "sentiment", [0.6, 0.62], low=[0.5, 0.52])]
    quarter = [_result("pretrained", "ner", [0.29, 0.33]), _result("pretrained", "sentiment", [0.6, 0.6], low=[0.5, 0.5])]
    full = [_result("pretrained", "ner", [0.35, 0.37]), _result("pretrained", "sentiment", [0.64, 0.6], low=[0.6, 0.5])]
    points = [BudgetPoint(1.0, 1600, 6_100_000, 0.135, gains(full, scratch)),
              no_pretraining(scratch), BudgetPoint(0.25, 400, 1_525_000, 0.09, gains(quarter, scratch))]
    return curve_record(points, [42, 43], "pretrained", "scratch")


def test_the_record_is_sorted_by_budget_and_budget_zero_gains_nothing():
    record = _curve()
    assert [p["fraction"] for p in record["points"]] == [0.0, 0.25, 1.0]
    zero = record["points"][0]
    assert zero["tokens_seen"] == 0 and zero["mlm_accuracy"] is None
    assert all(g["seeds"] == [0.0, 0.0] for g in zero["gain"].values())
    assert zero["gain"]["ner"]["scratch"] == [0.30, 0.34]
    assert record["points"][2]["gain"]["ner"]["seeds"] == [0.05, 0.03]


def test_the_csv_has_stable_columns_in_points():
    rows = list(csv.DictReader(io.StringIO(curve_csv(_curve()))))
    assert list(rows[0]) == ["fraction", "tokens_seen", "mlm_accuracy", "ner", "sentiment", "sentiment_low_resource"]
    assert column("sentiment@16") == "sentiment_low_resource"
    assert [r["tokens_seen"] for r in rows] == ["0", "1525000", "6100000"]
    assert float(rows[2]["ner"]) == pytest.approx(4.0)  # mean of +5 and +3 points
    assert float(rows[2]["sentiment_low_resource"]) == pytest.approx(4.0)  # +10 and -2
    assert float(rows[1]["ner"]) == pytest.approx(-1.0)


def test_the_section_gives_every_budget_with_tokens_cpu_minutes_and_the_range():
    timing = {"points": [{"fraction": 0.25, "pretrain_cpu_seconds": 120.0}, {"fraction": 1.0, "pretrain_cpu_seconds": 600.0}]}
    text = budget_curve_section(_curve(), timing, "metrics/budget_curve.json", "metrics/budget_curve-timing.json")
    assert text.startswith("## Pre-training budget curve")
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    assert lines[0].split("|")[1:-1] == [" budget ", " steps ", " tokens seen ", " pre-training CPU min ",
                                         " held-out MLM acc ", " ner ", " sentiment ", " sentiment @500 "]
    full = next(line for line in lines if line.startswith("| 1x"))
    # a record from before the intervals: the mean and, apart, the seeds' range
    assert "6.10M" in full and "10.0" in full and "13.50%" in full and "| +4.0; seeds +3.0 to +5.0 |" in full
    quarter = next(line for line in lines if line.startswith("| 0.25x"))
    assert "2.0" in quarter and "-1.0; seeds -1.0 to -1.0" in quarter
    assert "[low, high]" not in text
    assert "From scratch: ner 32.0, sentiment 61.0, sentiment @500 51.0." in text
    assert budget_curve_section({"points": _curve()["points"][:1]}, None, "a", "b") == ""
    assert budget_curve_section(None, None, "a", "b") == ""


def test_the_figure_is_a_png():
    assert budget_curve_png(_curve())[:8] == b"\x89PNG\r\n\x1a\n"
    with_bars = budget_curve_png(_curve_with_intervals()[0])
    assert with_bars[:8] == b"\x89PNG\r\n\x1a\n" and with_bars != budget_curve_png(_curve())


GOLD = np.random.default_rng(0).integers(0, 2, 120)


def _predictions(accuracy: float, seed: int) -> np.ndarray:
    """Predictions of GOLD right on about ``accuracy`` of the examples."""
    wrong = np.random.default_rng(seed).random(len(GOLD)) > accuracy
    return np.where(wrong, 1 - GOLD, GOLD)


def _examples(accuracies: dict[int, float], low: dict[int, float] | None = None, n: int = len(GOLD),
              offset: int = 0) -> tuple[ExampleRecord, list[float], list[float]]:
    """A sentiment member's per-example record (test examples in articles of 3, seeds 42 and 43, a full and a
    low-resource run) and each run's per-seed accuracy, as its metrics file gives them."""
    kind, names = tasks.get("classification"), ["negative", "positive"]
    gold = GOLD[:n]
    ids = [f"test:{i}" for i in range(n)]
    rec = ExampleRecord("classification", "accuracy", names)
    rec.splits["test"] = SplitInfo(ids, [f"doc{i // 3}" for i in range(n)], split_hash(ids, gold.tolist()))
    scores: dict[str, list[float]] = {"full": [], "low_resource": []}
    for run, per_seed in (("full", accuracies), ("low_resource", low or {})):
        for seed, acc in per_seed.items():
            pred = _predictions(acc, seed + offset)[:n]
            rec.add("test", run, seed, kind.example_columns(gold, pred, names))
            scores[run].append(round(float(np.mean(pred == gold)), 6))
    return rec, scores["full"], scores["low_resource"]


def _curve_with_intervals():
    """Budgets 0 and 1 of a sentiment curve, seeds 42 and 43, with their records' intervals."""
    scratch, s_full, s_low = _examples({42: 0.6, 43: 0.62}, {42: 0.5, 43: 0.55}, offset=100)
    pretrained, p_full, p_low = _examples({42: 0.8, 43: 0.75}, {42: 0.6, 43: 0.7})
    base = [_result("scratch", "sentiment", s_full, low=s_low, metric="accuracy")]
    own = [_result("pretrained", "sentiment", p_full, low=p_low, metric="accuracy")]
    boot = Bootstrap(resamples=2000, seed=3)
    points = [with_intervals(no_pretraining(base), {"sentiment": scratch}, {"sentiment": scratch}, boot),
              with_intervals(BudgetPoint(1.0, 100, 1_000_000, 0.2, gains(own, base)), {"sentiment": pretrained},
                             {"sentiment": scratch}, boot)]
    return curve_record(points, [42, 43], "pretrained", "scratch", boot), pretrained, scratch, own, base


def test_a_gains_interval_is_paired_and_holds_its_point():
    """The gain's interval: identical records (budget 0, the baseline against itself) give exactly [0, 0]; another
    member's gain lies inside its interval, which resamples examples and seeds; the low-resource key reads the
    records' low-resource run; the seeds' range stays apart."""
    record, pretrained, scratch, own, base = _curve_with_intervals()
    assert record["intervals"] == {"resamples": 2000, "confidence": 0.95, "seed": 3, "method": "percentile"}
    zero, full = record["points"]
    for gain in zero["gain"].values():
        assert (gain["mean"], gain["ci_low"], gain["ci_high"]) == (0.0, 0.0, 0.0)
    for key in ("sentiment", "sentiment@500"):
        gain = full["gain"][key]
        assert gain["sources"] == "examples+seeds"
        assert gain["ci_low"] - 1e-6 <= gain["mean"] <= gain["ci_high"] + 1e-6 and gain["ci_low"] < gain["ci_high"]
        assert (gain["min"], gain["max"]) == (min(gain["seeds"]), max(gain["seeds"]))
    assert full["gain"]["sentiment"]["mean"] > 0.1 and full["gain"]["sentiment"]["ci_low"] > 0
    # the same records' gain through the contrasts helper directly: the same interval
    from bert_pipeline.report.contrasts import difference

    direct = difference(pretrained, scratch, Bootstrap(resamples=2000, seed=3)).rounded()
    assert (direct.low, direct.high) == (full["gain"]["sentiment"]["ci_low"], full["gain"]["sentiment"]["ci_high"])


def test_intervals_refuse_records_of_other_runs_or_other_examples():
    _, pretrained, scratch, own, base = _curve_with_intervals()
    boot = Bootstrap(resamples=200)
    point = BudgetPoint(1.0, 100, 1_000_000, 0.2, gains(own, base))
    with pytest.raises(ExamplesError, match=r"sentiment, pre-trained: the per-example record gives per-seed scores"):
        with_intervals(point, {"sentiment": scratch}, {"sentiment": scratch}, boot)  # not the metrics' runs
    other, *_ = _examples({42: 0.8, 43: 0.75}, {42: 0.6, 43: 0.7}, n=90)
    with pytest.raises(ExamplesError, match="scored different test examples"):
        with_intervals(point, {"sentiment": other}, {"sentiment": scratch}, boot)
    one_seed, *_ = _examples({42: 0.8}, {42: 0.6})
    with pytest.raises(ExamplesError, match=r"seeds \[42\] on test, .* \[42, 43\]: not paired on seeds"):
        with_intervals(point, {"sentiment": one_seed}, {"sentiment": scratch}, boot)
    with pytest.raises(ExamplesError, match="no from-scratch per-example record of task 'sentiment'"):
        with_intervals(point, {"sentiment": pretrained}, {}, boot)


def test_the_section_shows_each_gains_interval_and_the_seeds_range_apart():
    record = _curve_with_intervals()[0]
    text = budget_curve_section(record, None, "metrics/budget_curve.json", "metrics/budget_curve-timing.json")
    full = next(line for line in text.splitlines() if line.startswith("| 1x"))
    gain = record["points"][1]["gain"]["sentiment"]
    expected = (f"{100 * gain['mean']:+.1f} [{100 * gain['ci_low']:.1f}, {100 * gain['ci_high']:.1f}]; "
                f"seeds {100 * gain['min']:+.1f} to {100 * gain['max']:+.1f}")
    assert f"| {expected} |" in full
    assert "[low, high]: the 95% paired bootstrap interval (percentile, 2,000 draws, seed 3), resampling the test " \
           "examples, whole source articles or films at a time, and the fine-tuning seeds (sources " \
           "`examples+seeds`)." in text
    assert "the seeds' own spread (not an interval)" in text
    zero = next(line for line in text.splitlines() if line.startswith("| 0x"))
    assert "| +0.0 | +0.0 |" in zero
    # intervals of different sources in one table: each cell names its own
    record["points"][1]["gain"]["sentiment@500"]["sources"] = "examples"
    text = budget_curve_section(record, None, "metrics/budget_curve.json", "metrics/budget_curve-timing.json")
    full = next(line for line in text.splitlines() if line.startswith("| 1x"))
    assert f"{100 * gain['ci_high']:.1f}] examples+seeds; seeds" in full and "] examples; seeds" in full
    assert "(sources `examples`); the test examples" in text


@pytest.mark.parametrize(("overrides", "message"), [
    ({"budget_curve.member": "teacher"}, "budget_curve.member: 'teacher' is not a key of finetune.models"),
    ({"budget_curve.member": "minilm"}, "budget_curve.member: 'minilm' fine-tunes 'data/raw/minilm'; expected a member "
                                        "of models/pretrained"),
    ({"budget_curve.baseline": "distilled"}, "budget_curve.baseline: 'distilled' has init 'pretrained'; expected a "
                                             "from-scratch member"),
    ({"budget_curve.tasks": ["ner", "nli"]}, "budget_curve.tasks: 'nli' is not a key of finetune.tasks"),
])
def test_the_stage_refuses_members_whose_curve_means_nothing(overrides, message):
    from stages.budget_curve import check_members
    from stages.params.root import load_params

    check_members(load_params(REPO / "params.yaml"))  # the default's members are fine
    with pytest.raises(PipelineError, match="^params.yaml: " + message.replace("(", r"\(").replace(")", r"\)")):
        check_members(load_params(REPO / "params.yaml", overrides))


@pytest.mark.parametrize(("fractions", "message"), [
    ([0.5, 1.0], "1 is the pipeline's own pre-training"), ([0.5, 0.5], "expected distinct values"),
    ([0.0], "budget_curve.fractions"), ([32.0], "budget_curve.fractions")])
def test_fractions_are_checked_in_the_schema(fractions, message):
    from stages.params.base import ParamsError
    from stages.params.root import load_params

    with pytest.raises(ParamsError, match=message):
        load_params(REPO / "params.yaml", {"budget_curve.fractions": fractions})


def _json(path: str) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def test_stage_trains_an_extra_budget_reads_what_dvc_yaml_declares_and_reuses_it(in_tmp, mlflow_in_tmp, raw,
                                                                                 monkeypatch, capsys, one_thread):
    """A tiny workspace (tests.pretrain_fixtures.pretrain_workspace: 4 pre-training steps; the tiny tasks, whose
    words the synthetic vocabulary reads as [UNK]): the pipeline's own stages make the 0 and 1x points
    (``pretrain.main``, ``finetune.run`` of the member and its baseline on sentiment), then the stage pre-trains
    and fine-tunes budget 0.5 (2 steps) for real. Its record pairs the seeds' scores, its CSV and headline follow,
    the params it read are the ones dvc.yaml declares, and a rerun reuses the finished point byte for byte."""
    from stages import budget_curve, finetune, pretrain
    from stages.params.base import load_view
    from stages.params.finetune import FinetuneView
    from tests.params_declared import declared_params, mismatches, recorded_reads
    from tests.pretrain_fixtures import pretrain_workspace

    raw["budget_curve"].update(fractions=[0.5], tasks=["sentiment"])
    pretrain_workspace(in_tmp, tiny_finetune(raw))
    save_tiny_tasks(in_tmp / "data/tasks")
    pretrain.main()
    p = load_view(FinetuneView).finetune
    for member in ("pretrained", "scratch"):
        finetune.run(member, "sentiment", p)
    with recorded_reads(monkeypatch) as reads:
        code, err = run_stage(budget_curve.main, capsys)
    assert code == 0, err
    assert "budget 0.5x: pre-training 2 steps (pretrain.max_steps 4)" in err

    curve, quality = _json("metrics/budget_curve.json"), _json("metrics/pretrain.json")
    assert (curve["member"], curve["baseline"], curve["seeds"]) == ("pretrained", "scratch", [42])
    points = curve["points"]
    assert [(p["fraction"], p["steps"]) for p in points] == [(0.0, 0), (0.5, 2), (1.0, 4)]
    assert 0 == points[0]["tokens_seen"] < points[1]["tokens_seen"] < points[2]["tokens_seen"] == quality["tokens_seen"]
    assert points[0]["mlm_accuracy"] is None and 0.0 <= points[1]["mlm_accuracy"] <= 1.0
    assert points[2]["mlm_accuracy"] == quality["eval"]["mlm_accuracy"]
    scores = {}  # (member, score key): the test main metric per seed, from the fine-tuning records
    for member in ("pretrained", "scratch"):
        record = _json(f"metrics/finetune/{member}-sentiment.json")
        scores[member, "sentiment"] = record["test"]["accuracy"]["seeds"]
        scores[member, "sentiment@8"] = record["low_resource"]["test"]["accuracy"]["seeds"]
    for point in points:
        assert sorted(point["gain"]) == ["sentiment", "sentiment@8"]
        for key, gain in point["gain"].items():
            assert gain["scratch"] == scores["scratch", key]
            expected = {0.0: scores["scratch", key], 1.0: scores["pretrained", key]}.get(point["fraction"])
            if expected is not None:  # 0 and 1x are read from the files; 0.5x was fine-tuned by the stage
                assert gain["pretrained"] == expected
            assert len(gain["pretrained"]) == 1 and all(0.0 <= v <= 1.0 for v in gain["pretrained"])
            assert gain["seeds"] == [round(a - b, 6) for a, b in zip(gain["pretrained"], gain["scratch"], strict=True)]
    assert all(g["seeds"] == [0.0] for g in points[0]["gain"].values())
    with open("plots/budget_curve.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["tokens_seen"]) for r in rows] == [p["tokens_seen"] for p in points]
    for row, point in zip(rows, points, strict=True):
        assert float(row["sentiment"]) == pytest.approx(100 * point["gain"]["sentiment"]["mean"], abs=1e-3)
        assert float(row["sentiment_low_resource"]) == pytest.approx(100 * point["gain"]["sentiment@8"]["mean"], abs=1e-3)
    headline = _json("metrics/headline/budget_curve.json")["gain_over_scratch"]
    assert headline == {"sentiment": points[2]["gain"]["sentiment"]["mean"],
                        "sentiment_low_resource": points[2]["gain"]["sentiment@8"]["mean"]}
    timing = _json("metrics/budget_curve-timing.json")["points"]
    assert [t["fraction"] for t in timing] == [0.0, 0.5, 1.0] and timing[1]["finetune_seconds"] >= 0

    declared = declared_params(REPO)["python -m stages.budget_curve"][1]
    assert mismatches(declared, reads) == ([], [])

    # the extra budget's per-example record: its summed statistics give each seed's score in the metrics file
    examples = sorted(Path("metrics/examples-budget_curve").iterdir())
    assert [p.name for p in examples] == ["pretrained@0.5-sentiment.arrow"]
    rec = ExampleRecord.read(examples[0])
    kind = tasks.get(rec.kind)
    for key, run in (("sentiment", "full"), ("sentiment@8", "low_resource")):
        per_seed = []
        for seed in rec.seeds("test", run):
            sums = kind.example_sums(rec.runs[("test", run, seed)], rec.label_names)
            n = np.asarray(float(len(rec.splits["test"].ids)))
            per_seed.append(float(kind.metrics_from_sums({k: np.asarray(v.sum()) for k, v in sums.items()}, n,
                                                         rec.label_names)[rec.main_metric]))
        assert per_seed == pytest.approx(points[1]["gain"][key]["pretrained"], abs=1e-6)
    # every gain with its interval (one seed: examples only), paired: budget 0 exactly [0, 0]
    intervals = raw["evaluate"]["intervals"]
    assert curve["intervals"] == {k: intervals[k] for k in ("resamples", "confidence", "seed", "method")}
    for point in points:
        for gain in point["gain"].values():
            assert gain["sources"] == "examples"
            assert gain["ci_low"] - 1e-6 <= gain["mean"] <= gain["ci_high"] + 1e-6
            if point["fraction"] == 0.0:
                assert (gain["ci_low"], gain["ci_high"]) == (0.0, 0.0)

    before = Path("metrics/budget_curve.json").read_bytes()
    before_examples = examples[0].read_bytes()
    code, err = run_stage(budget_curve.main, capsys)
    assert code == 0, err
    assert "budget 0.5x: reusing checkpoints/budget_curve/0.5/point.json" in err and "pre-training" not in err
    assert Path("metrics/budget_curve.json").read_bytes() == before
    assert Path("metrics/examples-budget_curve/pretrained@0.5-sentiment.arrow").read_bytes() == before_examples
    text = budget_curve_section(curve, None, "metrics/budget_curve.json", "metrics/budget_curve-timing.json")
    gain = points[2]["gain"]["sentiment"]
    assert f"{100 * gain['mean']:+.1f} [{100 * gain['ci_low']:.1f}, {100 * gain['ci_high']:.1f}]" in text
    assert "(sources `examples`)" in text
