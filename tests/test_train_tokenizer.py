"""Stage train_tokenizer on a synthetic corpus: outputs, byte-identical reruns, one-line errors, no partial folder."""

from __future__ import annotations

import csv
import json
import shutil

import datasets
import pytest
from transformers import AutoTokenizer

from bert_pipeline.errors import PipelineError
from stages import train_tokenizer
from tests.conftest import family_params, synthetic_texts, write_params


def _corpus(path, train_texts, validation_texts):
    def split(texts, name):
        return datasets.Dataset.from_dict({
            "doc_id": [f"{name}-{i}" for i in range(len(texts))],
            "source": ["synthetic"] * len(texts),
            "text": texts,
            "sentences": [[t] for t in texts],
        }, features=datasets.Features({
            "doc_id": datasets.Value("string"), "source": datasets.Value("string"), "text": datasets.Value("string"),
            "sentences": datasets.Sequence(datasets.Value("string")),
        }))
    datasets.DatasetDict({"train": split(train_texts, "train"), "validation": split(validation_texts, "val")}) \
        .save_to_disk(str(path))


def _params(tmp, **section):
    family = {"bpe": "roberta", "unigram": "albert"}.get(section.get("model", "wordpiece"), "bert")
    write_params(tmp, family_params(family), train_tokenizer={"vocab_size": 300, "batch_size": 7, **section})


@pytest.fixture
def stage_dir(in_tmp, monkeypatch, module_mlflow_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", module_mlflow_uri)
    _corpus(in_tmp / "data/corpus", synthetic_texts(60), synthetic_texts(8, seed=7))
    _params(in_tmp)
    return in_tmp


def test_stage_outputs(stage_dir, module_mlflow_uri):
    train_tokenizer.main()
    folder = stage_dir / "models/tokenizer"
    assert sorted(p.name for p in folder.iterdir()) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    hf = AutoTokenizer.from_pretrained(str(folder))
    enc = hf("Overplaying markets", "unvoted")
    assert enc["input_ids"][0] == 101
    assert enc["input_ids"].count(102) == 2
    assert enc["token_type_ids"][-1] == 1
    assert enc["token_type_ids"][0] == 0
    metrics = json.loads((stage_dir / "metrics/tokenizer.json").read_text())
    assert metrics["vocab_size"] == 300 == len(hf)
    assert metrics["documents"] == 8
    assert metrics["words"] > 0
    assert 1.0 <= metrics["fertility"] < 3.0
    assert 0.0 <= metrics["unk_rate"] < 0.05
    assert 0.0 < metrics["continuation_share"] < 1.0
    assert 0.0 < metrics["whole_word_share"] <= 1.0
    with open(stage_dir / "plots/tokenizer_fertility.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["count"]) for r in rows) == metrics["words"]
    assert sum(int(r["tokens_per_word"]) * int(r["count"]) for r in rows) == metrics["tokens"]
    timing = json.loads((stage_dir / "metrics/tokenizer-timing.json").read_text())
    assert timing["train_seconds"] > 0
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=module_mlflow_uri)
    runs = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id],
                              filter_string="tags.stage = 'train_tokenizer' and attributes.status = 'FINISHED'")
    assert runs
    assert runs[0].data.metrics["fertility"] == metrics["fertility"]
    assert runs[0].data.params["vocab_size"] == "300"
    assert runs[0].data.tags["tokenizer_path"] == "models/tokenizer"


@pytest.mark.parametrize(("model", "files", "cls_id"), [
    ("bpe", ["merges.txt", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.json"], 0),
    ("unigram", ["special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"], 2),
])
def test_stage_trains_the_model_params_name(stage_dir, model, files, cls_id):
    _params(stage_dir, model=model, lowercase=model != "bpe", bert_id_layout=False)
    train_tokenizer.main()
    folder = stage_dir / "models/tokenizer"
    assert sorted(p.name for p in folder.iterdir()) == files
    hf = AutoTokenizer.from_pretrained(str(folder))
    assert hf("Overplaying markets")["input_ids"][0] == cls_id == hf.cls_token_id
    metrics = json.loads((stage_dir / "metrics/tokenizer.json").read_text())
    assert metrics["unk_rate"] == 0.0 if model == "bpe" else metrics["unk_rate"] < 0.05
    assert 0.0 < metrics["continuation_share"] < 1.0


def test_stage_rerun_is_byte_identical(stage_dir):
    train_tokenizer.main()
    first = {p.name: p.read_bytes() for p in (stage_dir / "models/tokenizer").iterdir()}
    first_metrics = (stage_dir / "metrics/tokenizer.json").read_bytes()
    shutil.rmtree(stage_dir / "models")
    train_tokenizer.main()
    second = {p.name: p.read_bytes() for p in (stage_dir / "models/tokenizer").iterdir()}
    assert first == second
    assert (stage_dir / "metrics/tokenizer.json").read_bytes() == first_metrics


def _expect_error(tmp, pattern):
    with pytest.raises(PipelineError, match=pattern) as err:
        train_tokenizer.main()
    assert "\n" not in str(err.value)
    assert not (tmp / "models/tokenizer").exists()
    assert not (tmp / "models").exists() or not any((tmp / "models").iterdir())
    assert not (tmp / "metrics/tokenizer.json").exists()


def test_vocab_smaller_than_alphabet(stage_dir):
    _params(stage_dir, vocab_size=110)
    _expect_error(stage_dir, r"params.yaml: train_tokenizer.vocab_size: expected >= \d+ .*got 110")


def test_empty_train_split(stage_dir):
    shutil.rmtree(stage_dir / "data/corpus")
    _corpus(stage_dir / "data/corpus", [], synthetic_texts(3))
    _expect_error(stage_dir, r"data/corpus: the train split is empty")


def test_train_split_without_words(stage_dir):
    shutil.rmtree(stage_dir / "data/corpus")
    _corpus(stage_dir / "data/corpus", ["   ", "\u200b"], synthetic_texts(3))
    _expect_error(stage_dir, r"data/corpus: train split: the training texts contain no word")


def test_missing_corpus(stage_dir):
    shutil.rmtree(stage_dir / "data/corpus")
    _expect_error(stage_dir, r"data/corpus: corpus not found")


def test_not_a_dataset_dict(stage_dir):
    shutil.rmtree(stage_dir / "data/corpus")
    (stage_dir / "data/corpus").mkdir()
    (stage_dir / "data/corpus/readme.txt").write_text("not arrow")
    _expect_error(stage_dir, r"data/corpus: not a saved datasets DatasetDict")
