"""Task-specific distillation: the loss against a hand computation, the transfer set's rows and ids (never a
validation or test example), byte-identical cached teacher logits, the student's layer mapping, and the two stages
end to end on a learnable task (outputs, the teacher's name, a stale cache refused in one line)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset, DatasetDict, Features, Value
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertForQuestionAnswering,
    BertForTokenClassification,
)

from bert_pipeline import tasks
from bert_pipeline.data import task_builders, task_features
from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.errors import PipelineError
from bert_pipeline.model import distillation
from bert_pipeline.model.heads import MEAN_POOLING_CLASSES
from bert_pipeline.train import task_distill
from bert_pipeline.train.finetune_data import subsample_indices
from bert_pipeline.train.runtime import make_runtime
from stages import distill_task as distill_stage
from stages import finetune as finetune_stage
from stages import teacher_logits as logits_stage
from stages.params.root import validate_params
from tests.conftest import committed_params, tree_digests
from tests.pretrain_fixtures import tiny_config
from tests.tiny_models import bert_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ["good", "bad", "film", "the", "was", "very", "anna", "smith", "met", "in", "paris", "@placeholder", "."]
SPLIT_SIZES = {"train": 40, "validation": 12, "test": 12}


# ------------------------------------------------------------------------------------------------ losses
def _kl_by_hand(student: list[float], teacher: list[float], temperature: float) -> float:
    p = np.exp(np.array(teacher) / temperature)
    p /= p.sum()
    q = np.exp(np.array(student) / temperature)
    q /= q.sum()
    return float((p * (np.log(p) - np.log(q))).sum())


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_soft_target_loss_is_kl_times_t_squared_by_hand(temperature):
    student = [[1.0, 0.0, -1.0], [0.3, 0.2, 0.1]]
    teacher = [[0.0, 2.0, 0.5], [-1.0, 1.0, 3.0]]
    got = tasks.get("classification").soft_target_loss(torch.tensor(student), torch.tensor(teacher), None,
                                        temperature)
    want = temperature**2 * np.mean([_kl_by_hand(s, t, temperature) for s, t in zip(student, teacher, strict=True)])
    assert got.item() == pytest.approx(want, rel=1e-5)
    assert got.item() > 0


def test_soft_target_loss_is_zero_for_identical_models_of_every_kind():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 4)
    mask = torch.tensor([[1, 0, 1, 1, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)
    start, end = torch.randn(2, 5), torch.randn(2, 5)
    assert tasks.get("classification").soft_target_loss(logits[:, 0], logits[:, 0].clone(), None, 2.0).item() == \
        pytest.approx(0.0, abs=1e-7)
    assert tasks.get("ner").soft_target_loss(logits, logits.clone(), mask, 2.0).item() == pytest.approx(0, abs=1e-7)
    assert tasks.get("qa").soft_target_loss((start, end), (start.clone(), end.clone()), mask, 2.0).item() == \
        pytest.approx(0.0, abs=1e-7)


def test_ner_and_qa_soft_targets_read_only_their_positions():
    torch.manual_seed(1)
    student, teacher = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0]], dtype=torch.bool)
    base = tasks.get("ner").soft_target_loss(student, teacher, mask, 2.0)
    moved = teacher.clone()
    moved[~mask] += 10.0  # unscored positions (later sub-tokens, special tokens, padding) do not count
    assert tasks.get("ner").soft_target_loss(student, moved, mask, 2.0).item() == pytest.approx(base.item())
    rows = [(0, 0), (0, 1), (1, 1), (1, 2)]
    want = 4.0 * np.mean([_kl_by_hand(student[i, j].tolist(), teacher[i, j].tolist(), 2.0) for i, j in rows])
    assert base.item() == pytest.approx(want, rel=1e-5)
    # QA: a distribution over each window's real positions, start and end averaged
    s_start, s_end, t_start, t_end = (torch.randn(1, 4) for _ in range(4))
    qa_mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    got = tasks.get("qa").soft_target_loss((s_start, s_end), (t_start, t_end), qa_mask, 2.0)
    want = 4.0 * (_kl_by_hand(s_start[0, :3].tolist(), t_start[0, :3].tolist(), 2.0)
                  + _kl_by_hand(s_end[0, :3].tolist(), t_end[0, :3].tolist(), 2.0)) / 2
    assert got.item() == pytest.approx(want, rel=1e-4)


def test_task_loss_skips_teacher_only_examples_and_weights_add_up():
    logits = torch.tensor([[2.0, -1.0], [0.0, 1.0]], requires_grad=True)
    none = torch.tensor([IGNORE_INDEX, IGNORE_INDEX])
    zero = tasks.get("classification").hard_target_loss(logits, none)
    assert zero.item() == 0.0
    zero.backward()  # a batch of teacher-only examples still back-propagates (the soft term)
    labels = torch.tensor([0, IGNORE_INDEX])
    hard = tasks.get("classification").hard_target_loss(logits, labels).item()
    assert hard == pytest.approx(-math.log(math.exp(2) / (math.exp(2) + math.exp(-1))), rel=1e-5)
    teacher = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    out = task_distill.task_distillation_loss(tasks.get("classification"), logits, teacher, labels, None, temperature=2.0,
                                              alpha_ce=0.3, alpha_task=0.7)
    assert out.total.item() == pytest.approx(0.3 * out.soft.item() + 0.7 * hard, rel=1e-6)
    with pytest.raises(ValueError, match="alpha_ce, alpha_task"):
        task_distill.task_distillation_loss(tasks.get("classification"), logits, teacher, labels, None, temperature=2.0,
                                            alpha_ce=0.0, alpha_task=0.0)


# ------------------------------------------------------------------------------------------ transfer set
def test_transfer_set_is_finetunings_subset_plus_disjoint_training_rows():
    rows = task_distill.transfer_set(100, 30, 50, data_seed=7)
    assert rows.labelled == subsample_indices(100, 30, 7)  # exactly the rows the teacher was fine-tuned on
    assert len(rows.teacher_only) == 50 and rows.teacher_only == sorted(rows.teacher_only)
    assert not set(rows.labelled) & set(rows.teacher_only)
    assert set(rows.rows) <= set(range(100))
    assert task_distill.transfer_set(100, 30, 50, data_seed=7) == rows
    assert len(task_distill.transfer_set(100, 30, 500, data_seed=7).teacher_only) == 70  # no more than remain
    assert task_distill.transfer_set(100, None, 10, data_seed=7).teacher_only == []


# ---------------------------------------------------------------------------------------------- fixtures
def _tokenizer():
    return bert_tokenizer(WORDS + list("abcdefghijklmnopqrstuvwxyz@"))


def _make_tasks(root: Path) -> None:
    """Three tiny tasks whose every example carries an ``id`` and a ``doc_id`` naming its split."""
    feats = task_features.classification_features(task_builders.SENTIMENT_LABELS)
    feats["id"], feats["doc_id"] = Value("string"), Value("string")

    def sent(split, i):
        word = "good" if i % 2 else "bad"
        return {"text": f"the film was very {word}" if i % 3 else f"{word} film", "label": i % 2,
                "id": f"{split}-{i}", "doc_id": f"{split}-doc{i // 4}"}

    DatasetDict({s: Dataset.from_list([sent(s, i) for i in range(n)], features=feats)
                 for s, n in SPLIT_SIZES.items()}).save_to_disk(str(root / "sentiment"))
    (root / "sentiment/task.json").write_text(json.dumps({"kind": "classification", "main_metric": "accuracy",
                                                          "label_names": ["negative", "positive"]}))
    names = task_features.ner_label_names(["PERSON", "GPE"])
    ner_feats = Features({**task_features.ner_features(names), "doc_id": Value("string")})
    toks = ["anna", "smith", "met", "the", "film", "in", "paris", "."]
    tags = [1, 2, 0, 0, 0, 0, 3, 0]
    DatasetDict({s: Dataset.from_list([{"id": f"{s}-{i}", "tokens": toks * (1 + i % 3), "ner_tags": tags * (1 + i % 3),
                                        "doc_id": f"{s}-doc{i // 4}"} for i in range(n)], features=ner_feats)
                 for s, n in SPLIT_SIZES.items()}).save_to_disk(str(root / "ner"))
    (root / "ner/task.json").write_text(json.dumps({"kind": "ner", "label_names": names, "main_metric": "f1"}))
    qa_feats = Features({**task_features.QA_FEATURES, "doc_id": Value("string")})
    ctx = "anna smith met the film in paris . "
    DatasetDict({s: Dataset.from_list([{"id": f"{s}-{i}", "title": "", "context": ctx * (1 + i % 4),
                                        "question": "@placeholder met the film in paris",
                                        "answers": {"text": ["anna smith"], "answer_start": [0]},
                                        "doc_id": f"{s}-doc{i // 4}"} for i in range(n)], features=qa_feats)
                 for s, n in SPLIT_SIZES.items()}).save_to_disk(str(root / "qa"))
    (root / "qa/task.json").write_text(json.dumps({"kind": "qa", "main_metric": "f1"}))


def _save_teacher(folder: Path, kind: str, layers: int = 2, seed: int = 0) -> None:
    """A ``layers``-deep fine-tuned-looking teacher of ``kind`` (random weights: the tests need its shapes)."""
    tok = _tokenizer()
    torch.manual_seed(seed)
    if kind == "classification":
        cfg = tiny_config(vocab_size=len(tok), num_hidden_layers=layers, num_labels=2, classifier_pooling="mean")
        model = MEAN_POOLING_CLASSES["bert"](cfg)
    elif kind == "ner":
        model = BertForTokenClassification(tiny_config(vocab_size=len(tok), num_hidden_layers=layers, num_labels=5))
    else:
        model = BertForQuestionAnswering(tiny_config(vocab_size=len(tok), num_hidden_layers=layers))
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


KIND = {"sentiment": "classification", "ner": "ner", "qa": "qa"}
TASK_SETTINGS = {
    "sentiment": {"max_train_examples": 16, "max_validation_examples": None, "max_test_examples": None,
                  "max_length": 16, "epochs": 4, "batch_size": 8},
    "ner": {"max_train_examples": 16, "max_validation_examples": None, "max_test_examples": None, "max_length": 12,
            "doc_stride": 4, "epochs": 1, "batch_size": 4},
    "qa": {"max_train_examples": 16, "max_validation_examples": None, "max_test_examples": None, "max_length": 24,
           "doc_stride": 8, "epochs": 1, "batch_size": 4, "n_best": 20, "max_answer_length": 5},
}


@pytest.mark.parametrize("task", ["sentiment", "ner", "qa"])
def test_teacher_logits_cover_training_rows_only_and_are_byte_identical(tmp_path, task):
    _make_tasks(tmp_path / "tasks")
    _save_teacher(tmp_path / "teacher", KIND[task])
    kwargs = {"teacher_only_examples": 10, "data_seed": 3, "batch_size": 4, "runtime": make_runtime("fp32", cpu=True)}
    first = task_distill.label_task(tmp_path / "tasks" / task, tmp_path / "teacher", TASK_SETTINGS[task], **kwargs)
    record = first.record
    assert len(record["labelled_rows"]) == 16 and len(record["teacher_only_rows"]) == 10
    # no validation or test example (or document) reaches the student's training set
    assert all(i.startswith("train-") for i in record["ids"])
    assert len(set(record["ids"])) == 26
    held = {f"{s}-doc{i // 4}" for s in ("validation", "test") for i in range(SPLIT_SIZES[s])}
    assert not set(record["doc_ids"]) & held
    assert record["features"] == len(first.logits) >= 26  # NER and QA windows: at least one per example
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        result = task_distill.label_task(tmp_path / "tasks" / task, tmp_path / "teacher", TASK_SETTINGS[task], **kwargs)
        task_distill.save_teacher_logits(tmp_path / folder, result.logits, result.record)
    assert tree_digests(tmp_path / "a") == tree_digests(tmp_path / "b")
    cached = task_distill.load_teacher_logits(tmp_path / "a")
    assert len(cached.logits) == len(first.logits)
    for got, want in zip(cached.logits, first.logits, strict=True):
        np.testing.assert_array_equal(got, want)
    width = {"sentiment": 2, "ner": 5, "qa": 2}[task]
    assert all(x.shape[-1] == width for x in cached.logits)


@pytest.mark.parametrize("kind", ["classification", "ner", "qa"])
def test_student_takes_every_other_teacher_layer_and_the_task_head(tmp_path, kind):
    _save_teacher(tmp_path / "teacher", kind, layers=4, seed=5)
    cls = {"classification": AutoModelForSequenceClassification, "ner": AutoModelForTokenClassification,
           "qa": AutoModelForQuestionAnswering}[kind]
    teacher = MEAN_POOLING_CLASSES["bert"].from_pretrained(tmp_path / "teacher") \
        if kind == "classification" else cls.from_pretrained(tmp_path / "teacher")
    student, mapping = distillation.build_student(teacher, 2)
    assert mapping == [0, 2]
    assert type(student) is type(teacher) and student.config.num_hidden_layers == 2
    t_state, s_state = teacher.state_dict(), student.state_dict()
    for key, value in s_state.items():
        if ".encoder.layer." in key:
            i = int(key.split(".encoder.layer.")[1].split(".")[0])
            source = key.replace(f".encoder.layer.{i}.", f".encoder.layer.{mapping[i]}.")
        else:
            source = key  # embeddings and the task head
        assert torch.equal(value, t_state[source]), key
    head = {"classification": "classifier.weight", "ner": "classifier.weight", "qa": "qa_outputs.weight"}[kind]
    assert torch.equal(s_state[head], t_state[head])
    assert not torch.equal(s_state["bert.encoder.layer.1.attention.self.query.weight"],
                           t_state["bert.encoder.layer.1.attention.self.query.weight"])


# ------------------------------------------------------------------------------------------------ stages
def _params(**task_distill):
    raw = committed_params()
    ft = raw["finetune"]
    ft.update({"seeds": [1], "low_resource_tasks": [], "eval_batch_size": 8, "precision": "fp32",
               "early_stopping_patience": 4})
    ft["models"] = {"tiny": {"path": "tinymodel", "learning_rate": 5e-3, "pooling": "mean"}}
    ft["tasks"] = {"sentiment": {"max_train_examples": 32, "max_length": 16, "epochs": 8, "batch_size": 8}}
    raw["task_distill"].update({"teacher": "tiny", "student": "tiny_student", "seeds": [1, 2], "learning_rate": 5e-3,
                                "teacher_only_examples": {"sentiment": 8}, "teacher_batch_size": 8,
                                "epochs": {"sentiment": None}, **task_distill})
    return validate_params(raw)


@pytest.fixture
def workdir(in_tmp):
    tok = _tokenizer()
    torch.manual_seed(0)
    from transformers import BertModel
    BertModel(tiny_config(vocab_size=len(tok), num_hidden_layers=2)).save_pretrained(in_tmp / "tinymodel")
    tok.save_pretrained(in_tmp / "tinymodel")
    _make_tasks(in_tmp / "data/tasks")
    return in_tmp


def test_stages_distil_a_fine_tuned_teacher_into_a_named_student(workdir):
    params = _params()
    teacher = finetune_stage.run("tiny", "sentiment", params.finetune)
    assert min(teacher["test"]["accuracy"]["seeds"]) >= 0.9
    record = logits_stage.run("sentiment", params)
    cache = workdir / "data/teacher_logits/sentiment"
    digest = tree_digests(cache)
    assert record["teacher_path"] == "models/finetuned/tiny-sentiment"
    assert len(record["ids"]) == 32 + 8 and all(i.startswith("train-") for i in record["ids"])
    metrics = distill_stage.run("sentiment", params)
    saved = json.loads((workdir / "metrics/finetune/tiny_student-sentiment.json").read_text())
    assert saved == json.loads(json.dumps(metrics))
    assert (saved["model"], saved["task"], saved["teacher"]) == ("tiny_student", "sentiment", "tiny")
    info = saved["distillation"]
    assert (info["teacher_layers"], info["student_layers"], info["layer_map"]) == (2, 1, [0])
    assert info["layer_selection"] == params.task_distill.layer_selection
    assert (info["labelled_examples"], info["teacher_only_examples"]) == (32, 8)
    assert info["student_parameters"]["encoder"] < info["teacher_parameters"]["encoder"]
    assert saved["validation_examples"] == teacher["validation_examples"] == SPLIT_SIZES["validation"]
    assert len(saved["test"]["accuracy"]["seeds"]) == 2
    assert min(saved["test"]["accuracy"]["seeds"]) >= 0.9  # "good"/"bad" decides the label: learnable
    # the student's per-example record pairs with its teacher's: the same held-out examples, every seed
    from bert_pipeline.evaluation.examples import ExampleRecord, check_paired
    from tests.test_finetune import assert_examples_match_metrics

    assert_examples_match_metrics(workdir / "metrics/examples/tiny_student-sentiment.arrow", saved)
    check_paired(ExampleRecord.read(workdir / "metrics/examples/tiny_student-sentiment.arrow"),
                 ExampleRecord.read(workdir / "metrics/examples/tiny-sentiment.arrow"), "test", "student", "teacher")
    folder = workdir / "models/finetuned/tiny_student-sentiment"
    student = AutoModelForSequenceClassification.from_pretrained(folder)
    assert student.config.num_hidden_layers == 1
    from stages import model_cards

    # the model card (stage model_cards) says what it is and whom it learned from
    card = model_cards.finetuned_card(saved, params.finetune, [], task_distill=params.task_distill)
    assert "distilled from the fine-tuned teacher `tiny` (`models/finetuned/tiny-sentiment`)" in card
    assert "stage `distill_task@sentiment`" in card and "the teacher's layers [0] of 2" in card
    assert "plus 8 more training-split examples labelled by the teacher alone" in card
    assert json.loads((workdir / "metrics/headline/finetune/tiny_student-sentiment.json").read_text()) == {
        "tiny_student": {"sentiment": saved["test"]["accuracy"]["mean"]}}
    # a rerun of the teacher gives the same bytes; a student change does not touch the cache
    logits_stage.run("sentiment", params)
    assert tree_digests(cache) == digest
    first = (workdir / "metrics/finetune/tiny_student-sentiment.json").read_bytes()
    distill_stage.run("sentiment", params)
    assert (workdir / "metrics/finetune/tiny_student-sentiment.json").read_bytes() == first
    # a transfer set changed without relabelling is refused in one line that names the fix
    with pytest.raises(PipelineError) as err:
        distill_stage.run("sentiment", _params(teacher_only_examples={"sentiment": 4}, seeds=[1]))
    assert "\n" not in str(err.value)
    assert "teacher_logits@sentiment" in str(err.value)
    # a student deeper than its teacher, and a teacher that is no family member, are one line before any training
    with pytest.raises(PipelineError, match=r"^params.yaml: task_distill.student_layers: expected an int from 1 to 2 .*got 3$"):
        distill_stage.run("sentiment", _params(student_layers=3))
    for stage in (distill_stage, logits_stage):
        with pytest.raises(PipelineError, match=r"task_distill.teacher: 'tiny_typo' is not a key of finetune.models "
                                                r"\(known: tiny\)"):
            stage.run("sentiment", _params(teacher="tiny_typo"))


def test_student_name_and_loss_weights_are_checked_in_params():
    raw = committed_params()
    raw["task_distill"]["alpha_ce"] = raw["task_distill"]["alpha_task"] = 0.0
    with pytest.raises(ValueError, match="task_distill.alpha_ce"):
        validate_params(raw)
    raw = committed_params()
    raw["task_distill"]["student"] = "minilm"
    with pytest.raises(ValueError, match="task_distill.student"):
        validate_params(raw)


def test_distill_task_names_an_unknown_layer_selection_before_reading_anything(tmp_path):
    spec = task_distill.StudentSpec(student_layers=None, layer_selection="top", temperature=2.0, alpha_ce=0.5,
                                    alpha_task=0.5, learning_rate=1e-4, epochs=None)
    with pytest.raises(PipelineError) as err:  # the folders do not exist: the setting is checked first
        task_distill.distill_task(tmp_path / "no-task", tmp_path / "no-teacher", tmp_path / "no-logits", spec, {},
                                  teacher_only_examples=0, seeds=[1], data_seed=0, runtime=make_runtime("fp32"),
                                  warmup_ratio=0.1, weight_decay=0.0, max_grad_norm=1.0, early_stopping_patience=1,
                                  evals_per_epoch=1, eval_batch_size=8)
    assert (err.value.setting, str(err.value)) == (
        "layer_selection", "layer_selection: expected one of uniform, bottom, got 'top'")
