"""The report's figures: each kind renders a valid PNG of the fixed size from small in-memory data, byte-identical
twice, without matplotlib's Software metadata; the family set reads the plot CSVs and names its sources."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from bert_pipeline.errors import PipelineError
from bert_pipeline.report import figures as F

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CITES = {"cite_pretrain_history": "plots/pretrain.csv", "cite_distill_history": "plots/distill.csv",
         "cite_fertility": "plots/tokenizer_fertility.csv", "cite_evaluate_plots": "plots/evaluate",
         "cite_budget_curve": "metrics/budget_curve.json"}  # the names the evaluate stage gives (stages.evaluate)
HISTORY = [{"step": str(s), "train_loss": f"{10 / s:.4g}", "learning_rate": "0.001",
            "eval_mlm_loss": f"{8 / s:.4g}" if s % 2 == 0 else "",
            "eval_mlm_accuracy": f"{0.05 * s:.4g}" if s % 2 == 0 else "",
            "eval_unigram_accuracy": "0.04" if s % 2 == 0 else ""} for s in range(1, 7)]
SCORE_SPEED = [["pretrained", 55.1, 1.0, 10.0, 100.0], ["distilled", 50.0, 1.9, 5.2, 190.0],
               ["scratch", 40.2, 1.0, 10.1, 99.0], ["minilm", "", 0.5, 20.0, 50.0]]  # minilm: a task missing
CONFUSION = {"pretrained": [["positive", "positive"], ["negative", "positive"], ["negative", "negative"]],
             "distilled": [["positive", "negative"], ["negative", "negative"]]}
NER = [["pretrained", "LOC", 25.0, "LOC pretrained"], ["pretrained", "PER", 50.0, "PER pretrained"],
       ["distilled", "LOC", 20.0, "LOC distilled"], ["distilled", "PER", 40.0, "PER distilled"]]
FERTILITY = [{"tokens_per_word": "1", "count": "900"}, {"tokens_per_word": "2", "count": "80"},
             {"tokens_per_word": "3", "count": "20"}]

RENDERS = {
    "curves": (lambda: F.training_curves_png(HISTORY, "Pre-training (teacher)"), 3.2),
    "score_vs_speed": (lambda: F.score_vs_speed_png(SCORE_SPEED, "pretrained"), 4.5),
    "confusion": (lambda: F.confusion_png(CONFUSION), 2.8),
    "ner": (lambda: F.ner_per_type_png(NER), 3.0),
    "fertility": (lambda: F.fertility_png(FERTILITY), 3.0),
}


@pytest.mark.parametrize("kind", sorted(RENDERS))
def test_each_figure_is_a_deterministic_png_of_fixed_size(kind):
    render, height_in = RENDERS[kind]
    first, second = render(), render()
    assert first[:8] == PNG_SIGNATURE
    assert first == second  # byte-identical: no Software/creation metadata, fixed size and style
    image = Image.open(io.BytesIO(first))
    image.load()
    assert image.format == "PNG"
    assert image.size == (round(F.WIDTH_IN * F.DPI), round(height_in * F.DPI))
    assert "Software" not in image.info
    # something was drawn: more than a blank canvas
    assert sum(1 for n in image.convert("L").histogram() if n) > 10


def test_different_data_give_different_bytes():
    assert F.confusion_png(CONFUSION) != F.confusion_png({"pretrained": CONFUSION["pretrained"]})
    other = [dict(r, train_loss="1") for r in HISTORY]
    assert F.training_curves_png(HISTORY, "t") != F.training_curves_png(other, "t")


def test_confusion_counts_rows_actual_columns_predicted():
    assert F.confusion_counts(CONFUSION["pretrained"], ["negative", "positive"]) == [[1, 1], [0, 1]]


def test_confusion_grid_wraps_after_four_models():
    many = {f"m{i}": CONFUSION["pretrained"] for i in range(5)}
    image = Image.open(io.BytesIO(F.confusion_png(many)))
    assert image.size == (900, round((2 * 2.4 + 0.4) * F.DPI))


def test_family_figures_read_the_csvs_and_cite_them(tmp_path):
    (tmp_path / "pretrain.csv").write_text(
        "step,train_loss,learning_rate,eval_mlm_loss,eval_mlm_accuracy\n1,9.5,0.001,,\n2,9.0,0.001,8.8,0.05\n")
    (tmp_path / "fertility.csv").write_text("tokens_per_word,count\n1,10\n2,3\n")
    sources = F.FigureSources(pretrain_history=tmp_path / "pretrain.csv", distill_history=tmp_path / "absent.csv",
                              fertility=tmp_path / "fertility.csv", **CITES)
    figs = F.family_figures(sources, score_vs_speed=SCORE_SPEED, confusion=CONFUSION, ner_per_type=NER,
                            reference="pretrained")
    # the distillation history is absent: no figure for it, the others in page order
    assert [f.name for f in figs] == ["pretrain_curves.png", "score_vs_speed.png", "sentiment_confusion.png",
                                      "ner_f1_per_type.png", "tokenizer_fertility.png"]
    assert [f.source for f in figs] == ["plots/pretrain.csv", "plots/evaluate/score_vs_speed.csv",
                                        "plots/evaluate/sentiment_confusion/", "plots/evaluate/ner_f1_per_type.csv",
                                        "plots/tokenizer_fertility.csv"]
    assert all(f.png.startswith(PNG_SIGNATURE) and f.caption for f in figs)
    assert F.family_figures(F.FigureSources(**CITES), score_vs_speed=[], confusion={}, ner_per_type=[]) == []


def test_history_without_its_columns_is_a_one_line_error(tmp_path):
    (tmp_path / "pretrain.csv").write_text("step,loss\n1,2.0\n")
    with pytest.raises(PipelineError, match=r"pretrain\.csv: missing column\(s\) train_loss, eval_mlm_loss") as err:
        F.family_figures(F.FigureSources(pretrain_history=tmp_path / "pretrain.csv", **CITES), score_vs_speed=[],
                         confusion={}, ner_per_type=[])
    assert "\n" not in str(err.value)
