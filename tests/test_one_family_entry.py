"""A model family is one entry of bert_pipeline.model.families.FAMILIES: no library, stage or flow module names a
family (as a string literal in code, or by one of its transformers classes), every table that serves the families
derives from the entries, and the params' allowed families are the table's keys."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bert_pipeline.model.families import FAMILIES
from tests.conftest import REPO, params_error

TABLE = "bert_pipeline/model/families.py"  # the one module that names the families
SCANNED = ("bert_pipeline", "stages", "flows")
# Tokenizer components (tokenizers' BertPreTokenizer, RobertaProcessing, transformers' BertTokenizerFast) serve a
# vocabulary kind (WordPiece, byte-level BPE), not a family: only model and config classes name a family.
_PREFIXES = "|".join(sorted((re.escape(f.class_prefix) for f in FAMILIES.values()), key=len, reverse=True))
_CLASS = re.compile(rf"^(?:MeanPooling)?({_PREFIXES})(?:Config|Model|PreTrainedModel|For[A-Z]\w*)$")
_NAMES = {name.lower() for family in FAMILIES.values() for name in (family.name, family.model_type)}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of a module, its classes and functions (prose may name a family)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def family_names_in(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each place ``source`` names a family in code: a string literal (not a docstring) that is
    a family's name or ``model_type`` (any case), or an identifier, attribute or import of one of its
    ``transformers`` model or config classes (``RobertaForMaskedLM``, ``DebertaV2Config``), or a class defined
    after one (``MeanPoolingBertForSequenceClassification``)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and node.value.lower() in _NAMES):
            found.append((node.lineno, f"the string {node.value!r}"))
        name = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                else node.name if isinstance(node, ast.alias | ast.ClassDef) else None)
        if name and _CLASS.match(name.rpartition(".")[2]):
            found.append((getattr(node, "lineno", 0), f"the class {name}"))
    return sorted(found)


def test_the_scan_finds_what_it_is_for():
    code = ('"""A docstring may say roberta."""\nfrom transformers import AlbertConfig, BertTokenizerFast\n'
            'x = "deberta-v2" if kind == "ModernBERT" else "bertology"\ny = transformers.RobertaForMaskedLM\n'
            'class MeanPoolingBertForSequenceClassification: ...\n')
    assert family_names_in(code) == [(2, "the class AlbertConfig"), (3, "the string 'ModernBERT'"),
                                     (3, "the string 'deberta-v2'"), (4, "the class RobertaForMaskedLM"),
                                     (5, "the class MeanPoolingBertForSequenceClassification")]


def test_no_module_but_the_table_names_a_family():
    """Adding a family is one entry: a family named anywhere else (a `kind == "albert"` branch, a Literal list, a
    class table keyed by family) is a second place to add it."""
    named = []
    for root in SCANNED:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel != TABLE:
                named += [f"{rel}:{line}: {what}" for line, what in family_names_in(path.read_text(encoding="utf-8"))]
    assert named == []


def test_every_table_that_serves_the_families_derives_from_the_entries():
    from bert_pipeline.model.card_encoders import CLASS_PREFIXES, FAMILY_NAMES
    from bert_pipeline.model.heads import MEAN_POOLING_CLASSES, NATIVE_POOLING
    from bert_pipeline.report.variants import PUBLISHED, RECIPES

    assert list(RECIPES) == list(FAMILIES) and set(PUBLISHED) == {*FAMILIES, "distilled"}
    assert set(MEAN_POOLING_CLASSES) | NATIVE_POOLING == set(FAMILIES)
    assert not set(MEAN_POOLING_CLASSES) & NATIVE_POOLING
    assert set(FAMILY_NAMES) == set(CLASS_PREFIXES) == {f.model_type for f in FAMILIES.values()}
    for name, family in FAMILIES.items():
        assert family.recipe.model["family"] == name and family.recipe.objective in family.objectives
        assert family.recipe.tokenizer == family.vocabulary  # the variants recipe trains the family's vocabulary
        assert family.config_class().model_type == family.model_type
        assert family.masked_lm_class.__name__ == f"{family.class_prefix}ForMaskedLM"
        assert (family.pretraining_class is None) == (family.pair_head is None)
        if name in MEAN_POOLING_CLASSES:
            assert issubclass(MEAN_POOLING_CLASSES[name], family.sequence_class)


def test_the_params_allowed_families_are_the_tables_keys(raw):
    from stages.params.pretrain import PretrainModelParams
    from stages.params.variants import VariantsParams

    assert PretrainModelParams.model_fields["family"].annotation.__args__ == tuple(FAMILIES)
    assert VariantsParams.model_fields["families"].annotation.__args__[0].__args__ == tuple(FAMILIES)
    allowed = ", ".join(f'"{name}"' for name in FAMILIES)
    raw["pretrain"]["model"]["family"] = "xlnet"
    assert params_error(raw) == f'params.yaml: pretrain.model.family: expected one of {allowed}, got "xlnet"'
    raw["pretrain"]["model"]["family"] = "bert"
    raw["variants"]["families"] = ["bert", "xlnet"]
    assert params_error(raw) == f'params.yaml: variants.families.1: expected one of {allowed}, got "xlnet"'


@pytest.mark.parametrize("module", ["stages.params.root", "bert_pipeline.model.families"])
def test_the_table_loads_without_torch(module):
    """The params schema reads the table: importing it must not load torch or transformers (the classes are
    resolved by name when first used)."""
    import subprocess
    import sys

    code = f"import sys, {module}\nassert not {{'torch', 'transformers'}} & set(sys.modules), sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=Path(REPO), check=True)
