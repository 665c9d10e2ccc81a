"""The seeds' other heads: sentence-pair classification (token types 0/1, the built-in headline_match task) and
regression (a user CSV with a float label, MSE, Pearson/Spearman) through prepare_tasks' loaders and finetune."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertModel

from bert_pipeline import tasks
from bert_pipeline.data import task_builders, task_features, task_loaders
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.predictor import load_predictor
from bert_pipeline.tasks.regression import regression_metrics
from bert_pipeline.tasks.sequence import encode_sequences
from stages import finetune
from stages.cli import main
from stages.params.root import validate_params
from tests.conftest import committed_params, finetuned_card_text
from tests.pretrain_fixtures import tiny_config
from tests.tiny_models import bert_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["the", "film", "was", "very", "good", "bad", "council", "voted", "rain", "fell", "city", "storm", "vote"]


def _tokenizer():
    return bert_tokenizer(WORDS)


def test_pair_encoding_gives_token_types_zero_then_one():
    tok = _tokenizer()
    enc = encode_sequences(tok, ["council voted"], ["rain fell in the city"], max_length=32)
    ids, types = enc["input_ids"][0], enc["token_type_ids"][0]
    sep = ids.index(tok.sep_token_id)
    assert ids[0] == tok.cls_token_id
    assert types[:sep + 1] == [0] * (sep + 1)  # [CLS] council voted [SEP]
    assert sep == 3
    assert types[sep + 1:] == [1] * (len(ids) - sep - 1)  # rain fell ... [SEP]
    assert ids[-1] == tok.sep_token_id
    single = encode_sequences(tok, ["council voted"], None, max_length=32)
    assert set(single["token_type_ids"][0]) == {0}


def _docs(n_train: int, n_val: int) -> tuple[list[task_builders.Document], dict[str, list[str]]]:
    docs, heads = [], {}
    for i in range(n_train + n_val):
        split = "train" if i < n_train else "validation"
        sents = tuple(f"Article {i} sentence {k} has some words in it." for k in range(12))
        doc_id = f"news:{i}"
        docs.append(task_builders.Document(doc_id=doc_id, split=split, text=" ".join(sents), sentences=sents))
        heads[doc_id] = [f"Headline number {i}", "sub"]
    return docs, heads


def test_headline_match_is_balanced_held_out_and_deterministic():
    docs, heads = _docs(40, 20)
    sizes = {"train": 30, "validation": 10, "test": 10}
    dd, info = task_builders.build_headline_match(docs, heads, 20, sizes, 0.5, seed=3)
    assert info["label_names"] == ["other_article", "same_article"]
    train_ids = {d.doc_id for d in docs if d.split == "train"}
    seen: dict[str, set[str]] = {}
    for split, ds in dd.items():
        assert len(ds) == sizes[split]
        assert sum(ds["label"]) == len(ds) // 2  # balanced
        for row in ds:
            assert (row["doc_id"] == row["pair_doc_id"]) == (row["label"] == 1)
            assert row["text"] == heads[row["doc_id"]][0]
            assert row["text_pair"].startswith(f"Article {row['pair_doc_id'].split(':')[1]} sentence 0")
            assert len(row["text_pair"].split()) <= 20
        seen[split] = set(ds["doc_id"]) | set(ds["pair_doc_id"])
        if split == "train":
            assert seen[split] <= train_ids
        else:
            assert not seen[split] & train_ids  # validation/test only from corpus-validation articles
    assert not seen["validation"] & seen["test"]
    again, _ = task_builders.build_headline_match(docs, heads, 20, sizes, 0.5, seed=3)
    assert all(again[s].to_dict() == dd[s].to_dict() for s in task_features.SPLITS)
    other, _ = task_builders.build_headline_match(docs, heads, 20, sizes, 0.5, seed=4)
    assert other["train"].to_dict() != dd["train"].to_dict()


def test_headline_match_needs_two_articles_per_split():
    docs, heads = _docs(1, 20)
    with pytest.raises(task_features.TaskDataError, match="headline_match: split 'train' has 1"):
        task_builders.build_headline_match(docs, heads, 20, {"train": 4, "validation": 4, "test": 4}, 0.5, seed=0)


def test_regression_metrics_values():
    got = regression_metrics([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 5.0])
    assert got["pearson"] == pytest.approx(0.9827076, abs=1e-6)
    assert got["spearman"] == pytest.approx(1.0)
    assert got["mse"] == pytest.approx(0.25)
    assert regression_metrics([1.0, 2.0], [0.5, 0.5])["pearson"] == 0.0  # constant prediction: no correlation


def _write_csv(path: Path, rows: list[dict[str, str]]) -> str:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def _user_spec(**kw):
    raw = committed_params()
    raw["prepare_tasks"]["user_tasks"] = [kw]
    return validate_params(raw).prepare_tasks.user_tasks[0]


def _length_rows(n: int, seed: int) -> list[dict[str, str]]:
    """Texts of 1..12 words; target = words / 10 (computable from the text)."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        k = int(rng.integers(1, 13))
        words = rng.choice(WORDS, size=k).tolist()
        rows.append({"sentence": " ".join(words), "score": f"{k / 10:.1f}"})
    return rows


def test_user_regression_and_pair_files_load_and_bad_targets_are_one_line(tmp_path):
    path = _write_csv(tmp_path / "r.csv", _length_rows(5, 0))
    dd, info = tasks.get("regression").load_user_task(_user_spec(name="len", kind="regression", train=path, validation=path,
                                                test=path, text_column="sentence", label_column="score"))
    assert dd["train"].features["label"].dtype == "float32"
    assert info == {}
    bad = _write_csv(tmp_path / "bad.csv", [{"sentence": "the film", "score": "0.2"},
                                            {"sentence": "good", "score": "high"}])
    with pytest.raises(task_features.TaskDataError, match=r"bad.csv: row 3: 'score' is 'high'; expected a number"):
        task_loaders.load_classification_file(bad, "sentence", "score", regression=True)
    pairs = _write_csv(tmp_path / "p.csv", [{"a": "council voted", "b": "the city", "y": "yes"},
                                            {"a": "rain fell", "b": "the film", "y": "no"}])
    dd, info = tasks.get("pair_classification").load_user_task(_user_spec(name="p", kind="pair_classification", train=pairs,
                                                validation=pairs, test=pairs, text_column="a",
                                                text_pair_column="b", label_column="y"))
    assert dd["train"]["text_pair"] == ["the city", "the film"] and info == {"label_names": ["no", "yes"]}
    with pytest.raises(Exception, match="text_pair_column: required for a pair_classification"):
        _user_spec(name="p", kind="pair_classification", train=pairs, validation=pairs, test=pairs)


def _predict(capsys, argv):
    main(["predict", *argv])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def _save_task(root: Path, name: str, dd, info: dict) -> None:
    dd.save_to_disk(str(root / name))
    info = {**info, "silver": False, "main_metric": tasks.get(info["kind"]).main_metric}
    (root / name / "task.json").write_text(json.dumps(info))


@pytest.fixture
def workdir(in_tmp):
    tok = _tokenizer()
    torch.manual_seed(0)
    BertModel(tiny_config(vocab_size=len(tok), num_hidden_layers=1)).save_pretrained(in_tmp / "tinymodel")
    tok.save_pretrained(in_tmp / "tinymodel")
    return in_tmp


def _ft_params(tasks_over: dict):
    raw = committed_params()
    ft = raw["finetune"]
    ft.update({"seeds": [1], "low_resource_tasks": [], "eval_batch_size": 32, "precision": "fp32",
               "early_stopping_patience": 3})
    ft["models"] = {"tiny": {"path": "tinymodel", "learning_rate": 3e-3, "pooling": "mean"}}
    ft["tasks"] = {**ft["tasks"], **tasks_over}
    for name in tasks_over:  # every finetune task has a task_distill entry
        raw["task_distill"]["epochs"][name] = None
        raw["task_distill"]["teacher_only_examples"][name] = 0
    return validate_params(raw).finetune


def test_regression_learns_a_target_computable_from_the_text(workdir, capsys):
    splits = {}
    for s, (n, seed) in {"train": (256, 0), "validation": (48, 1), "test": (64, 2)}.items():
        splits[s] = _write_csv(workdir / f"{s}.csv", _length_rows(n, seed))
    dd, info = tasks.get("regression").load_user_task(_user_spec(name="length", kind="regression", text_column="sentence",
                                                label_column="score", **splits))
    _save_task(workdir / "data/tasks", "length", dd, {"kind": "regression", **info})
    p = _ft_params({"length": {"max_length": 16, "epochs": 6, "batch_size": 16}})
    m = finetune.run("tiny", "length", p)
    assert m["main_metric"] == "pearson"
    assert set(m["test"]) == {"pearson", "spearman", "mse"}
    assert m["test"]["pearson"]["mean"] > 0.8, m["test"]
    assert m["test"]["spearman"]["mean"] > 0.7
    cfg = json.loads((workdir / "models/finetuned/tiny-length/config.json").read_text())
    assert (cfg["num_labels"] if "num_labels" in cfg else len(cfg["id2label"])) == 1
    assert cfg["problem_type"] == "regression"
    card = finetuned_card_text("tiny-length", p)
    assert "Pearson" in card and "mean squared error" in card
    out = _predict(capsys, [str(workdir / "models/finetuned/tiny-length"), "good", "the film was very good the film was very good bad"])
    assert set(out[0]) == {"text", "value", "tokens", "truncated"}
    assert out[0]["value"] < out[1]["value"]  # 1 word vs 11 words: target 0.1 vs 1.1


def test_pair_task_learns_when_the_pair_decides(workdir, capsys):
    """Label 1 when both texts are about the same topic (council/vote or rain/storm): only the pair decides."""
    rng = np.random.default_rng(0)
    topics = [["council", "voted", "vote"], ["rain", "fell", "storm"]]

    def rows(n):
        out = []
        for _ in range(n):
            a, b = int(rng.integers(2)), int(rng.integers(2))
            out.append({"text": " ".join(rng.choice(topics[a], 2)), "text_pair": "the city " + " ".join(
                rng.choice(topics[b], 2)), "label": int(a == b)})
        return out

    from datasets import Dataset, DatasetDict
    feats = task_features.pair_features(["other", "same"])
    dd = DatasetDict({s: Dataset.from_list(rows(n), features=feats) for s, n in
                      (("train", 512), ("validation", 64), ("test", 64))})
    _save_task(workdir / "data/tasks", "pairs", dd, {"kind": "pair_classification", "label_names": ["other", "same"]})
    p = _ft_params({"pairs": {"max_length": 16, "epochs": 15, "batch_size": 16}})
    m = finetune.run("tiny", "pairs", p)
    assert m["main_metric"] == "accuracy"
    assert m["test"]["accuracy"]["mean"] >= 0.9, m["test"]
    card = finetuned_card_text("tiny-pairs", p)
    assert "text pair" in card
    folder = str(workdir / "models/finetuned/tiny-pairs")
    same = _predict(capsys, [folder, "council voted", "rain fell", "--text-pair", "the city vote council"])
    assert [r["label"] for r in same] == ["same", "other"]
    assert same[0]["text_pair"] == "the city vote council"
    with pytest.raises(PipelineError, match="--text-pair is empty"):
        _predict(capsys, [folder, "council voted", "--text-pair", " "])
    with pytest.raises(PipelineError, match="needs --text-pair"):
        _predict(capsys, [folder, "council voted"])
    from bert_pipeline.mlops import onnx_export as ox
    from bert_pipeline.mlops.registry import serving_flavour
    assert serving_flavour(Path(folder)) == "pyfunc"  # pairs in: the transformers flavour reads one text
    rows = list(dd["test"].select(range(6)))
    report = ox.export_folder(Path(folder), workdir / "onnx", rows, max_seq_length=16, runs=1, warmup=0,
                              latency_examples=2)
    assert "token_type_ids" in report.inputs
    assert report.parity.agreement == 1.0 and max(report.parity.max_abs_diff.values()) < 1e-4
    enc = ox.encode_examples(load_predictor(Path(folder)), rows[:1], 16)
    types = enc.features[0]["token_type_ids"]
    assert types[0] == 0 and types[-1] == 1  # the pair reached the graph as a pair


def test_report_shows_pair_accuracy_f1_and_regression_correlations():
    from bert_pipeline.report.report import pair_regression_section, parse_finetune_metrics

    def rec(model, task, kind, main, test):
        return parse_finetune_metrics({"model": model, "task": task, "kind": kind, "main_metric": main,
                                       "test": {k: {"mean": v, "seeds": [v]} for k, v in test.items()}}, f"{model}-{task}")

    results = [rec("pretrained", "headline_match", "pair_classification", "accuracy",
                   {"accuracy": 0.815, "macro_f1": 0.8}),
               rec("minilm", "headline_match", "pair_classification", "accuracy", {"accuracy": 0.97, "macro_f1": 0.969}),
               rec("pretrained", "length", "regression", "pearson", {"pearson": 0.912, "spearman": 0.88, "mse": 0.0123}),
               rec("pretrained", "sentiment", "classification", "accuracy", {"accuracy": 0.7, "macro_f1": 0.7})]
    text = pair_regression_section(results, ["pretrained", "minilm"])
    assert "| pretrained | 81.5 | 80.0 |" in text and "| minilm | 97.0 | 96.9 |" in text
    assert "| pretrained | 91.2 | 88.0 | 0.0123 |" in text
    assert "sentiment" not in text
    assert text.index("headline_match") < text.index("length")
    assert pair_regression_section(results[3:], ["pretrained"]) == ""
