"""The budget curve's arithmetic, record, CSV and report section (bert_pipeline.report.budget_curve), and the
stage itself on a tiny workspace: one extra budget pre-trained and fine-tuned for real, in process (the smoke
profile of tests/test_e2e_smoke.py trains none)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from bert_pipeline.errors import PipelineError
from bert_pipeline.report.budget_curve import (
    BudgetPoint,
    budget_curve_section,
    column,
    curve_csv,
    curve_record,
    gains,
    no_pretraining,
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

    before = Path("metrics/budget_curve.json").read_bytes()
    code, err = run_stage(budget_curve.main, capsys)
    assert code == 0, err
    assert "budget 0.5x: reusing checkpoints/budget_curve/0.5/point.json" in err and "pre-training" not in err
    assert Path("metrics/budget_curve.json").read_bytes() == before
