"""The budget curve's arithmetic, record, CSV and report section (bert_pipeline.evaluation.budget_curve); the
stage itself runs in the smoke profile (tests/test_e2e_smoke.py)."""

from __future__ import annotations

import csv
import io

import pytest

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.budget_curve import (
    BudgetPoint,
    budget_curve_section,
    column,
    curve_csv,
    curve_record,
    gains,
    no_pretraining,
)
from bert_pipeline.evaluation.figures import budget_curve_png
from bert_pipeline.evaluation.report import parse_finetune_metrics


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
    assert "6.10M" in full and "10.0" in full and "13.50%" in full and "+4.0 [+3.0, +5.0]" in full
    quarter = next(line for line in lines if line.startswith("| 0.25x"))
    assert "2.0" in quarter and "-1.0 [-1.0, -1.0]" in quarter
    assert "From scratch: ner 32.0, sentiment 61.0, sentiment @500 51.0." in text
    assert budget_curve_section({"points": _curve()["points"][:1]}, None, "a", "b") == ""
    assert budget_curve_section(None, None, "a", "b") == ""


def test_the_figure_is_a_png():
    assert budget_curve_png(_curve())[:8] == b"\x89PNG\r\n\x1a\n"


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
    from tests.conftest import REPO

    check_members(load_params(REPO / "params.yaml"))  # the default's members are fine
    with pytest.raises(PipelineError, match="^params.yaml: " + message.replace("(", r"\(").replace(")", r"\)")):
        check_members(load_params(REPO / "params.yaml", overrides))


@pytest.mark.parametrize(("fractions", "message"), [
    ([0.5, 1.0], "1 is the pipeline's own pre-training"), ([0.5, 0.5], "expected distinct values"),
    ([0.0], "budget_curve.fractions"), ([32.0], "budget_curve.fractions")])
def test_fractions_are_checked_in_the_schema(fractions, message):
    from stages.params.base import ParamsError
    from stages.params.root import load_params
    from tests.conftest import REPO

    with pytest.raises(ParamsError, match=message):
        load_params(REPO / "params.yaml", {"budget_curve.fractions": fractions})
