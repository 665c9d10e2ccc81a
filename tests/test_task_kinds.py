"""The task kinds' one home (ARCHITECTURE.md, "Add a task kind"): every kind is one module of
``bert_pipeline/tasks/`` and the rest of the code asks the kind instead of branching on its name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from bert_pipeline import tasks
from bert_pipeline.tasks.base import TaskKind
from tests.conftest import REPO

HEADS = ("sequence-classification", "token-classification", "question-answering", "sentence-pair-classification")
CODE = ("bert_pipeline", "stages", "flows", "bench")


def _names_a_kind(node: ast.AST) -> bool:
    """A name or attribute that holds a task kind or a head's kind (``kind``, ``spec.kind``, ``pred.kind``)."""
    ident = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return ident == "kind" or ident.endswith("_kind")


def _kind_branches(path: Path) -> int:
    """Comparisons (``==``, ``!=``, ``in``, ``not in``) of a kind with a task kind's or a head's name (a string or a
    constant such as ``kinds.NER``)."""
    names = set(tasks.KINDS) | set(HEADS)
    constants = {"CLASSIFICATION", "PAIR_CLASSIFICATION", "REGRESSION", "NER", "QA", "LABELLED_KINDS",
                 "SEQUENCE_KINDS", "KINDS"}

    def is_name(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        if isinstance(node, ast.Attribute):
            return node.attr in constants
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(is_name(e) for e in node.elts)

    count = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            count += any(_names_a_kind(s) for s in sides) and any(is_name(s) for s in sides)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "is_sequence_kind":
            count += 1
    return count


def test_no_branch_on_a_kind_name_outside_the_task_kinds():
    found = {}
    for top in CODE:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith("bert_pipeline/tasks/"):
                continue
            n = _kind_branches(path)
            if n:
                found[rel] = n
    assert not found, (f"branches on a task kind's name outside bert_pipeline/tasks/ (ask the kind instead: "
                       f"bert_pipeline.tasks.get(name)): {found}")


def test_the_branch_counter_sees_the_forms_it_counts(tmp_path):
    code = tmp_path / "x.py"
    code.write_text('if kind == "ner": pass\nif a.kind != "question-answering": pass\n'
                    'if task_kind in ("qa", "x"): pass\nif spec.kind in kinds.LABELLED_KINDS: pass\n'
                    'if kinds.is_sequence_kind(kind): pass\n'
                    'if kind == "deb": pass\nif task == "ner": pass\nif p not in ("tok2vec", "ner"): pass\n')
    assert _kind_branches(code) == 5


def test_the_registry_names_each_kind_once_with_its_main_metric():
    assert list(tasks.KINDS) == ["classification", "pair_classification", "regression", "ner", "qa",
                                 "multi_label_classification"]  # the order the report lists them
    for name, kind in tasks.KINDS.items():
        assert kind.name == name and kind.main_metric
    with pytest.raises(ValueError, match="kind: expected one of classification, .*, got 'nope'"):
        tasks.get("nope")


@pytest.mark.parametrize("name", list(tasks.KINDS))
def test_every_kind_implements_what_the_pipeline_asks(name):
    kind = tasks.get(name)
    for method in ("encode_train", "scorer", "metrics", "head_text", "serve", "encode_inputs", "window_predictions"):
        assert getattr(type(kind), method) is not getattr(TaskKind, method), f"{name} lacks {method}"
    if kind.distillable:
        for method in ("soft_target_loss", "hard_target_loss"):
            assert getattr(type(kind), method) is not getattr(TaskKind, method), f"{name} lacks {method}"
    assert kind.head in HEADS and kind.auto_class.startswith("AutoModelFor")
    assert kind.pipeline_tag and kind.objective_text and kind.predict_note
    card = kind.card("cls", ["a", "b"])
    assert card.pipeline_tag == kind.pipeline_tag and card.head


def test_a_folder_config_names_its_kind():
    assert tasks.of_config({"architectures": ["BertForSequenceClassification"]}).name == "classification"
    assert tasks.of_config({"architectures": ["BertForSequenceClassification"],
                            "task_kind": "pair_classification"}).name == "pair_classification"
    assert tasks.of_config({"architectures": ["RobertaForTokenClassification"]}).name == "ner"
    assert tasks.of_config({"architectures": ["ModernBertForQuestionAnswering"]}).name == "qa"
    with pytest.raises(ValueError, match="no sequence/token classification or QA head"):
        tasks.of_config({"architectures": ["BertForMaskedLM"]})
