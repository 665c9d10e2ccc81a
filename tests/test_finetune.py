"""finetune: tiny models on tiny synthetic tasks (all three kinds), outputs' layout, byte-identical reruns,
learning on a learnable task, the one-line error for an unknown model name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from transformers import BertModel, BertTokenizerFast

from bert_pipeline import tasks
from bert_pipeline.errors import PipelineError
from bert_pipeline.train import finetune as finetune_lib
from bert_pipeline.train import finetune_data, finetune_loop
from bert_pipeline.train.runtime import make_runtime
from stages import finetune
from stages.params.root import validate_params
from tests.conftest import (
    card_header,
    card_metrics,
    committed_params,
    finetuned_card_text,
    save_tiny_tasks,
    tree_digests,
    write_params,
)
from tests.pretrain_fixtures import tiny_config
from tests.tiny_models import bert_tokenizer

WORDS = ["good", "bad", "film", "the", "was", "very", "anna", "smith", "met", "in", "paris", "who", "@placeholder",
         "."]

pytestmark = pytest.mark.usefixtures("one_thread")


def _tokenizer() -> BertTokenizerFast:
    return bert_tokenizer(WORDS + list("abcdefghijklmnopqrstuvwxyz@"))


def _make_model(folder: Path) -> None:
    tok = _tokenizer()
    cfg = tiny_config(vocab_size=len(tok), num_hidden_layers=1)
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


def _params(**over):
    raw = committed_params()
    ft = raw["finetune"]
    ft.update({"seeds": [1, 2], "low_resource_train_examples": 8, "low_resource_tasks": ["sentiment"],
               "eval_batch_size": 8, "precision": "fp32", "early_stopping_patience": 3})
    ft["models"] = {"tiny": {"path": "tinymodel", "learning_rate": 5e-3, "pooling": "mean"},
                    "tinyscratch": {"path": "tinymodel", "init": "random", "learning_rate": 5e-3, "pooling": "cls"}}
    ft["tasks"] = {
        "sentiment": {"max_train_examples": 48, "max_length": 16, "epochs": 4, "batch_size": 8},
        "ner": {"max_length": 16, "doc_stride": 4, "epochs": 1, "batch_size": 4},
        "qa": {"max_length": 24, "doc_stride": 8, "epochs": 1, "batch_size": 4, "n_best": 20, "max_answer_length": 5},
        "headline_match": {"max_length": 24, "epochs": 1, "batch_size": 4},  # task_distill names every task
    }
    ft.update(over)
    return validate_params(raw).finetune


@pytest.fixture
def workdir(in_tmp):
    _make_model(in_tmp / "tinymodel")
    save_tiny_tasks(in_tmp / "data/tasks")
    return in_tmp


def test_sentiment_layout_learning_and_byte_identical(workdir):
    p = _params()
    m = finetune.run("tiny", "sentiment", p)
    got = json.loads((workdir / "metrics/finetune/tiny-sentiment.json").read_text())
    assert got == json.loads(json.dumps(m))
    assert got["main_metric"] == "accuracy"
    assert got["model"] == "tiny"
    assert got["task"] == "sentiment"
    for split in ("test", "validation"):
        assert set(got[split]) == {"accuracy", "macro_f1"}
        seeds = got[split]["accuracy"]["seeds"]
        assert len(seeds) == 2
        assert got[split]["accuracy"]["mean"] == pytest.approx(sum(seeds) / 2, abs=1e-6)
    assert min(got["test"]["accuracy"]["seeds"]) >= 0.9  # "good"/"bad" decides the label: learnable
    # the saved weights are the best-validation seed's, with their own scores beside the means
    best = max(range(2), key=lambda i: (got["validation"]["accuracy"]["seeds"][i], -i))
    assert got["saved"]["seed"] == p.seeds[best]
    assert got["saved"]["validation"]["accuracy"] == got["validation"]["accuracy"]["seeds"][best]
    assert got["saved"]["test"]["accuracy"] == got["test"]["accuracy"]["seeds"][best]
    assert got["low_resource"]["train_examples"] == 8
    assert len(got["low_resource"]["test"]["accuracy"]["seeds"]) == 2
    hist = got["runs"][0]["history"]
    assert hist[-1]["train_loss"] < hist[0]["train_loss"]
    assert "train_seconds" not in got
    timing = json.loads((workdir / "metrics/finetune-timing/tiny-sentiment.json").read_text())
    assert len(timing["train_seconds"]) == 2
    assert len(timing["low_resource_train_seconds"]) == 2
    out = workdir / "models/finetuned/tiny-sentiment"
    first = tree_digests(out)
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(first)
    assert "README.md" not in first  # the model card is stage model_cards's, in the release copy
    text = finetuned_card_text("tiny-sentiment", p)
    card = card_header(text)  # the model card: the Hub's metadata, the test means the metrics file holds
    assert (card["pipeline_tag"], card["base_model"], card["license"]) == ("text-classification", "tinymodel",
                                                                           "apache-2.0")
    assert card_metrics(card) == {"accuracy": got["test"]["accuracy"]["mean"],
                                  "macro F1": got["test"]["macro_f1"]["mean"]}
    assert "silver" not in text.partition("\n---\n")[2].lower()
    assert card["bert_pipeline"]["parameters"] == got["parameters"] > 0 and got["precision"] == "fp32"
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["classifier_pooling"] == "mean"
    assert cfg["id2label"] == {"0": "negative", "1": "positive"}
    # the saved model predicts as it was evaluated
    from bert_pipeline.model.heads import load_sequence_classifier
    model = load_sequence_classifier(str(out)).eval()
    enc = _tokenizer()(["the film was very good", "bad film"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert model(**enc).logits.argmax(-1).tolist() == [1, 0]
    metrics_bytes = (workdir / "metrics/finetune/tiny-sentiment.json").read_bytes()
    examples = workdir / "metrics/examples/tiny-sentiment.arrow"
    assert_examples_match_metrics(examples, got)
    examples_bytes = examples.read_bytes()
    # the card shows each test score's interval from the record, beside the mean
    from stages import model_cards
    from stages.params.evaluate import IntervalSettings

    settings = IntervalSettings(resamples=500, confidence=0.9, seed=0, method="percentile")
    with_iv = model_cards.finetuned_card(got, p, [], intervals=settings)
    ivs, _ = model_cards.score_intervals(examples, settings)
    row = next(line for line in with_iv.splitlines() if line.startswith("| **accuracy** |"))
    assert row == (f"| **accuracy** | {got['test']['accuracy']['mean']:.4f} | [{ivs['accuracy'].low:.4f}, "
                   f"{ivs['accuracy'].high:.4f}] | " + ", ".join(f"{v:.4f}" for v in got["test"]["accuracy"]["seeds"])
                   + " |")
    assert ivs["accuracy"].low <= got["test"]["accuracy"]["mean"] <= ivs["accuracy"].high
    assert "Intervals: 90% paired bootstrap (500 draws, percentile)" in with_iv
    finetune.run("tiny", "sentiment", p)
    assert tree_digests(out) == first
    assert (workdir / "metrics/finetune/tiny-sentiment.json").read_bytes() == metrics_bytes
    assert examples.read_bytes() == examples_bytes


def assert_examples_match_metrics(path, got):
    """The per-example record holds every seed's validation and test run (and the low-resource test runs), and
    its summed statistics give each seed's score in the metrics file."""
    from bert_pipeline.evaluation.examples import ExampleRecord
    from bert_pipeline.evaluation.intervals import Bootstrap

    rec = ExampleRecord.read(path)
    boot = Bootstrap(resamples=20)
    main = got["main_metric"]
    for split in ("validation", "test"):
        assert len(rec.splits[split].ids) == got[f"{split}_examples"]
        assert rec.seeds(split) == got["seeds"]
        est = boot.estimates(rec, split)[main]
        assert list(est.seed_values) == pytest.approx(got[split][main]["seeds"], abs=1e-6)
    if got["low_resource"]:
        est = boot.estimates(rec, "test", "low_resource")[main]
        assert list(est.seed_values) == pytest.approx(got["low_resource"]["test"][main]["seeds"], abs=1e-6)


@pytest.mark.parametrize("task", ["ner", "qa"])
def test_ner_and_qa_run_with_scratch_model(workdir, task):
    p = _params(seeds=[3])
    m = finetune.run("tinyscratch", task, p)
    assert_examples_match_metrics(workdir / f"metrics/examples/tinyscratch-{task}.arrow", m)
    assert m["main_metric"] == "f1"
    assert len(m["test"]["f1"]["seeds"]) == 1
    assert m["low_resource"] is None
    assert 0.0 <= m["test"]["f1"]["mean"] <= 1.0
    if task == "ner":
        assert {"precision", "recall", "f1_PERSON", "f1_GPE"} <= set(m["test"])
    else:
        assert set(m["test"]) == {"exact_match", "f1"}
    out = workdir / f"models/finetuned/tinyscratch-{task}"
    assert (out / "config.json").exists()
    text = finetuned_card_text(f"tinyscratch-{task}", p)
    card = card_header(text)
    assert card["pipeline_tag"] == {"ner": "token-classification", "qa": "question-answering"}[task]
    assert "base_model" not in card  # the scratch baseline starts from no weights
    assert card_metrics(card)["F1"] == m["test"]["f1"]["mean"]
    assert ("agreement with spaCy" in text) == (task == "ner")  # the silver caveat


@pytest.mark.parametrize(("task", "key"), [("qa", "n_best"), ("ner", "doc_stride")])
def test_task_without_its_window_or_decoding_knobs_is_one_line(workdir, task, key):
    p = _params(seeds=[3])
    without = dict(p.tasks) | {task: p.tasks[task].model_copy(update={key: None})}
    with pytest.raises(PipelineError, match=rf"^finetune.tasks.{task}.{key}: required for a {task.upper()} task, got null$"):
        finetune.run("tinyscratch", task, p.model_copy(update={"tasks": without}))
    assert not (workdir / f"models/finetuned/tinyscratch-{task}").exists()


def test_ner_stride_that_leaves_no_step_is_one_line(workdir):
    p = _params(seeds=[3])
    tasks = dict(p.tasks) | {"ner": p.tasks["ner"].model_copy(update={"doc_stride": 14})}
    with pytest.raises(PipelineError, match=r"^finetune.tasks.ner: doc_stride 14 must be below max_length 16 minus "
                                            r"2 special tokens$"):
        finetune.run("tinyscratch", "ner", p.model_copy(update={"tasks": tasks}))


def test_scratch_from_tokenizer_folder_needs_a_size(workdir):
    _tokenizer().save_pretrained(workdir / "tok")
    p = _params(seeds=[1])
    member = p.models["tinyscratch"].model_copy(update={"path": "tok"})
    with pytest.raises(PipelineError, match=r"^tok: no config.json for a random-init model; set "
                                            r"finetune.models.tokscratch.size"):
        finetune.run("tokscratch", "ner", p.model_copy(update={"models": dict(p.models) | {"tokscratch": member}}))
    sized = {"tokscratch": member.model_copy(update={"size": "tiny"})}
    finetune.run("tokscratch", "ner", p.model_copy(update={"models": dict(p.models) | sized}))
    cfg = json.loads((workdir / "models/finetuned/tokscratch-ner/config.json").read_text())
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (2, 128, len(_tokenizer()))


def test_scratch_weights_are_random_not_loaded(workdir):
    a = finetune_loop.build_model("ner", "tinymodel", "random", None, "cls", ["O", "B-X", "I-X"], 41, seed=5)
    b = finetune_loop.build_model("ner", "tinymodel", "pretrained", None, "cls", ["O", "B-X", "I-X"], 41, seed=5)
    loaded = BertModel.from_pretrained("tinymodel").embeddings.word_embeddings.weight
    assert torch.equal(b.bert.embeddings.word_embeddings.weight, loaded)
    assert not torch.equal(a.bert.embeddings.word_embeddings.weight, loaded)
    c = finetune_loop.build_model("ner", "tinymodel", "random", "tiny", "cls", ["O", "B-X", "I-X"], 41, seed=5)
    assert c.config.num_hidden_layers == 2
    assert c.config.hidden_size == 128
    assert c.config.vocab_size == 41


def test_unknown_model_name_is_one_line(workdir):
    p = _params()
    with pytest.raises(PipelineError) as err:
        finetune.run("bert-nonexistent", "sentiment", p)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("--model 'bert-nonexistent': unknown model; expected a key of finetune.models in params.yaml")
    assert "tiny, tinyscratch" in msg
    # a folder with config.json is a user model, with finetune.user_model's settings
    assert finetune.resolve_model("tinymodel", p).path == "tinymodel"


def test_the_saved_seed_is_the_best_on_validation_never_the_best_on_test():
    """Seed 2 is better on validation, seed 1 on test: seed 2's model is saved, with its own scores; a tie on
    validation keeps the first seed."""
    runs = finetune_lib.SeedRuns(validation=[{"accuracy": 0.6, "macro_f1": 0.5}, {"accuracy": 0.8, "macro_f1": 0.7}],
                                 test=[{"accuracy": 0.9, "macro_f1": 0.9}, {"accuracy": 0.7, "macro_f1": 0.6}],
                                 models=["model of seed 1", "model of seed 2"])
    model, own = runs.saved([1, 2], "accuracy")
    assert model == "model of seed 2"
    assert own == {"seed": 2, "validation": {"accuracy": 0.8, "macro_f1": 0.7},
                   "test": {"accuracy": 0.7, "macro_f1": 0.6}}
    tie = finetune_lib.SeedRuns(validation=[{"accuracy": 0.8}, {"accuracy": 0.8}], test=[{"accuracy": 0.1}] * 2,
                                models=["first", "second"])
    assert tie.saved([5, 6], "accuracy")[0] == "first"


def test_length_grouped_batches_cover_every_example_once():
    import numpy as np

    lengths = [5, 1, 9, 3, 7, 2, 8, 4, 6, 10]
    batches = finetune_data.length_grouped_batches(lengths, 3, np.random.default_rng(0), mega=2)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(10))
    assert max(len(b) for b in batches) == 3
    for b in batches:  # within a mega-batch, sorted longest first
        assert [lengths[i] for i in b] == sorted((lengths[i] for i in b), reverse=True)


def test_main_tracks_one_mlflow_run_with_a_child_per_seed(workdir, mlflow_in_tmp):
    from mlflow import MlflowClient

    raw = committed_params()
    raw["finetune"] = _params(seeds=[4, 5]).model_dump()
    write_params(workdir, raw)
    uri = mlflow_in_tmp
    finetune.main(["--model", "tiny", "--task", "ner"])
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("bert-pipeline")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on the runs
    runs = {r.info.run_name: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["finetune@tiny-ner", "finetune@tiny-ner seed 4", "finetune@tiny-ner seed 5"]
    parent = runs["finetune@tiny-ner"]
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    data = parent.data
    assert (data.tags["model"], data.tags["task"], data.tags["role"], data.tags["main_metric"]) == \
        ("tiny", "ner", "reference", "f1")
    saved = json.loads((workdir / "metrics/finetune/tiny-ner.json").read_text())
    assert data.metrics["test_f1"] == pytest.approx(saved["test"]["f1"]["mean"])
    assert data.metrics["test_main_metric"] == pytest.approx(saved["test"]["f1"]["mean"])
    assert "seed4/train_loss" in data.metrics
    assert data.params["model.path"] == "tinymodel"
    for i, seed in enumerate((4, 5)):
        child = runs[f"finetune@tiny-ner seed {seed}"].data
        assert child.tags["mlflow.parentRunId"] == parent.info.run_id
        assert (child.tags["seed"], child.tags["role"], child.tags["task"]) == (str(seed), "reference", "ner")
        assert child.metrics["test_main_metric"] == pytest.approx(saved["test"]["f1"]["seeds"][i])
        assert child.metrics["validation_f1"] == pytest.approx(saved["validation"]["f1"]["seeds"][i])


def test_member_roles_follow_where_the_weights_come_from():
    p = _params()
    assert finetune.member_role(p.models["tiny"].model_copy(update={"path": "models/pretrained"})) == "teacher"
    assert finetune.member_role(p.models["tiny"].model_copy(update={"path": "models/distilled/"})) == "student"
    assert finetune.member_role(p.models["tiny"].model_copy(update={"init": "random"})) == "baseline"
    assert finetune.member_role(p.models["tiny"]) == "reference"


def test_ner_evaluation_scores_every_gold_word_of_a_long_sentence():
    """The issue's case: an 80-word sentence and a tagger that is right on every word. Truncated to max_length, the
    words past it were scored as O (recall 0.5 here); windowed, every gold entity is found."""
    from types import SimpleNamespace

    from datasets import Dataset

    tok = bert_tokenizer(["alice", "the"])
    alice = tok.convert_tokens_to_ids("alice")
    names = ["O", "B-PER", "I-PER"]
    words = ["alice" if i % 4 == 0 else "the" for i in range(80)]
    ds = Dataset.from_dict({"tokens": [words], "ner_tags": [[1 if w == "alice" else 0 for w in words]]})

    class Oracle(torch.nn.Module):  # B-PER on "alice", O elsewhere
        def forward(self, input_ids, **_):
            logits = torch.zeros(*input_ids.shape, len(names))
            logits[..., 0] = 1.0
            logits[..., 1] = (input_ids == alice).float() * 2.0
            return SimpleNamespace(logits=logits)

    task = {"max_length": 40, "doc_stride": 8}
    run = finetune_lib.make_evaluator("ner", tok, ds, task, names, 4, make_runtime("fp32", cpu=True))
    got = run(Oracle())
    assert got["recall"] == 1.0
    assert got["f1"] == 1.0
    # the scorer's parts: the gold tags per sentence, the oracle's word tags equal to them, the same metrics
    assert run.references == [["B-PER" if w == "alice" else "O" for w in words]]
    assert run.predict(Oracle()) == run.references
    assert run.score(run.references, [["O"] * 80])["recall"] == 0.0


def test_grid_member_is_tuned_on_validation_and_test_is_scored_once(workdir, monkeypatch):
    """learning_rate: grid tries every grid setting per seed; the best mean validation wins, and only the chosen
    setting's models are scored on test (for the full and the low-resource runs apart)."""
    grid = {"learning_rates": [1e-7, 5e-3], "epochs": [4], "low_resource_epochs": [2, 3]}
    p = _params(models={"tiny": {"path": "tinymodel", "learning_rate": "grid", "pooling": "mean", "grid": grid}})
    scored = []
    original = finetune_lib.heldout_evaluators

    def counting(*args, **kwargs):
        heldout, evaluators = original(*args, **kwargs)
        test = evaluators["test"]
        evaluators["test"] = dataclasses.replace(test, predict=lambda model: scored.append(1) or test.predict(model))
        return heldout, evaluators

    monkeypatch.setattr(finetune_lib, "heldout_evaluators", counting)
    m = finetune.run("tiny", "sentiment", p)
    assert [(t["learning_rate"], t["epochs"]) for t in m["grid"]] == [(1e-7, 4), (5e-3, 4)]
    assert m["learning_rate"] == 5e-3
    assert m["settings"]["from"]["learning_rate"] == m["settings"]["from"]["epochs"] == "finetune.models.tiny.grid"
    assert m["grid"][1]["validation"] > m["grid"][0]["validation"]  # 1e-7 cannot learn "good"/"bad"
    assert m["grid"][1]["validation"] == m["validation"]["accuracy"]["mean"]
    assert min(m["test"]["accuracy"]["seeds"]) >= 0.9
    low = m["low_resource"]
    assert [(t["learning_rate"], t["epochs"]) for t in low["grid"]] == [(1e-7, 2), (1e-7, 3), (5e-3, 2), (5e-3, 3)]
    best = max(low["grid"], key=lambda t: t["validation"])
    assert (low["learning_rate"], low["epochs"]) == (best["learning_rate"], best["epochs"])
    assert len(scored) == 2 + 2  # two seeds, full and low-resource: only the chosen settings saw test
    timing = json.loads((workdir / "metrics/finetune-timing/tiny-sentiment.json").read_text())
    assert timing["grid_train_seconds"] > sum(timing["train_seconds"])
    assert timing["total_seconds"] == pytest.approx(timing["grid_train_seconds"]
                                                    + timing["low_resource_grid_train_seconds"], abs=0.02)
    card = finetuned_card_text("tiny-sentiment", p)
    assert "learning rate 0.005 (chosen on validation from 1e-07, 0.005)" in card


def test_grid_member_with_its_own_epochs_cap_is_one_line():
    from stages.params.base import ParamsError

    grid = {"learning_rates": [1e-3], "epochs": [2], "low_resource_epochs": [2]}
    with pytest.raises(ParamsError, match="finetune.models.tiny.epochs: expected null with learning_rate grid"):
        _params(models={"tiny": {"path": "tinymodel", "learning_rate": "grid", "epochs": 3, "grid": grid}})
    with pytest.raises(ParamsError, match="finetune.user_model.low_resource_epochs: expected null with learning_rate"):
        _params(user_model={"path": "user", "learning_rate": "grid", "low_resource_epochs": 2, "grid": grid})


def test_a_grid_lives_in_the_member_tuned_on_it():
    """A member with learning_rate grid names its grid; a member with a rate of its own has none; the shared
    finetune.grid of the old layout says where the grid went. Each error is one line naming the key."""
    from stages.params.base import ParamsError

    grid = {"learning_rates": [1e-3], "epochs": [2], "low_resource_epochs": [2]}
    with pytest.raises(ParamsError) as err:
        _params(models={"tiny": {"path": "tinymodel", "learning_rate": "grid"}})
    assert str(err.value) == ("params.yaml: finetune.models.tiny.grid: missing with learning_rate grid (expected a "
                              "mapping with keys learning_rates, epochs, low_resource_epochs)")
    with pytest.raises(ParamsError) as err:
        _params(models={"tiny": {"path": "tinymodel", "learning_rate": 5e-3, "grid": grid}})
    assert str(err.value) == ("params.yaml: finetune.models.tiny.grid: expected no grid with learning_rate 0.005 "
                              "(set learning_rate: grid to tune on it)")
    with pytest.raises(ParamsError) as err:
        _params(grid=grid)
    assert str(err.value) == ("params.yaml: finetune.grid: unknown key; a grid belongs to the member tuned on it: "
                              "finetune.models.NAME.grid beside its learning_rate: grid")
    with pytest.raises(ParamsError, match=r"^params.yaml: finetune.models.tiny.grid.epochs.0: expected int >= 1, got 0$"):
        _params(models={"tiny": {"path": "tinymodel", "learning_rate": "grid", "grid": {**grid, "epochs": [0]}}})


def test_early_stopping_waits_for_a_run_to_start_learning(workdir):
    """Checks that stay at the first check's value do not count against patience; once the metric has risen,
    they do."""
    tok = _tokenizer()
    model = finetune_loop.build_model("classification", "tinymodel", "pretrained", None, "mean",
                                     ["negative", "positive"], len(tok), 0)
    features = [{"input_ids": tok(f"the film was {w}")["input_ids"], "label": i % 2}
                for i, w in enumerate(["good", "bad"] * 8)]
    scripted = iter([0.5, 0.5, 0.5, 0.5, 0.7, 0.6, 0.6, 0.9, 0.9])
    settings = finetune_loop.TrainSettings(learning_rate=1e-3, epochs=9, batch_size=16, patience=2)
    result = finetune_loop.fit(model, features, tasks.get("classification").collator(tok), settings,
                              lambda _model: {"accuracy": next(scripted)}, "accuracy", make_runtime("fp32", cpu=True))
    # four flat checks (not started), the rise to 0.7 at check 5, then two checks without gain stop the run
    assert [round(h["validation_accuracy"], 2) for h in result.history] == [0.5, 0.5, 0.5, 0.5, 0.7, 0.6, 0.6]
    assert result.best_validation == {"accuracy": 0.7}
