"""The import floors only go down: every import in ``bert_pipeline/``, ``stages/`` and ``flows/`` (module level,
inside a function, under ``TYPE_CHECKING`` alike) goes to a module on the same floor or a lower one, and no stage
module imports another.

The floors, from the ground up (:data:`FLOORS`; a file on no floor fails, so a new package is placed on purpose):

1. ``bert_pipeline/__init__.py``, ``errors.py``, ``io.py``, ``console.py``: what every part uses;
2. ``data/``, 3. ``model/``, 4. ``tasks/`` (one module per task kind);
5. ``evaluation/``: what measures (metrics, speed, the predictor, retrieval scores), used by training;
6. ``train/``: the loops, fine-tuning, distillation, contrastive training;
7. ``report/``: what reports, above training (the report, figures, provenance, family/variants/budget tables);
8. ``mlops/``; 9. ``stages/``; 10. ``flows/``.

Inside ``stages/`` three kinds stand in order (:func:`stages_kind`): the shared modules (``__init__``, ``params/``,
``dvc_adapter``, ``dvc_log``, ``headline``, and the training glue ``members``, ``pretraining``, ``tokenizers``;
any module that ``dvc.yaml`` does not run), then the stage modules (those ``dvc.yaml``'s ``cmd`` runs as
``python -m stages.NAME``), then the console script ``stages/cli.py``. A stage module imports shared modules only, so
one stage's code is never another's DVC dependency; a shared module imports no stage module (or a stage would import
another through it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

SOURCES = ("bert_pipeline", "stages", "flows")
"""The folders whose files are checked (``bench/`` and ``tests/`` stand above them all and are not)."""
FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("bert_pipeline/__init__.py", "bert_pipeline/errors.py", "bert_pipeline/io.py",
              "bert_pipeline/console.py")),
    ("data", ("bert_pipeline/data/",)),
    ("model", ("bert_pipeline/model/",)),
    ("tasks", ("bert_pipeline/tasks/",)),
    ("evaluation", ("bert_pipeline/evaluation/",)),
    ("train", ("bert_pipeline/train/",)),
    ("report", ("bert_pipeline/report/",)),
    ("mlops", ("bert_pipeline/mlops/",)),
    ("stages", ("stages/",)),
    ("flows", ("flows/",)),
    ("bench", ("bench/",)),
    ("tests", ("tests/",)),
)
"""Floor name and the repository paths on it (a path ending in ``/`` is a folder), from the ground up."""
CONSOLE = frozenset({"stages/cli.py"})
"""The console script: above the stage modules, whose output paths it reads."""
STAGES_KINDS = ("shared", "stage", "console")


@dataclass(frozen=True)
class Import:
    """One import statement's target inside the repository: ``line`` of ``source`` imports ``name`` (file
    ``target``)."""

    source: str
    line: int
    name: str
    target: str


def floor_of(path: str) -> int | None:
    """The index in :data:`FLOORS` of a repository-relative path, or None when no floor holds it."""
    for index, (_, places) in enumerate(FLOORS):
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in places):
            return index
    return None


def _module_file(name: str, root: Path) -> str | None:
    """The repository-relative file of module ``name`` (a package's ``__init__.py``), or None outside the tree."""
    path = root.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return (path / "__init__.py").relative_to(root).as_posix()
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py").relative_to(root).as_posix()
    return None


def imports_of(path: Path, root: Path) -> list[Import]:
    """Every import in ``path`` (anywhere in the file) that names a module of the repository's top folders under
    :data:`FLOORS`, once per statement and module: ``from A import b`` is module ``A.b`` when that is a module, else
    ``A``; relative imports are resolved against the file's package."""
    rel = path.relative_to(root).as_posix()
    module = rel.removesuffix(".py").replace("/", ".")
    package = module.removesuffix(".__init__") if path.name == "__init__.py" else module.rpartition(".")[0]
    tops = {places[0].split("/")[0] for _, places in FLOORS}
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                names.append(f"{base}.{alias.name}" if _module_file(f"{base}.{alias.name}", root) else base)
        for name in names:
            if name.split(".")[0] not in tops:
                continue
            target = _module_file(name, root)
            if target is not None and Import(rel, node.lineno, name, target) not in found:
                found.append(Import(rel, node.lineno, name, target))
    return found


def stage_modules(root: Path) -> set[str]:
    """The files ``dvc.yaml``'s stages run (``cmd: python -m stages.NAME ...``), repository-relative."""
    raw = yaml.safe_load((root / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    out = set()
    for stage in raw.values():
        words = stage.get("do", stage)["cmd"].split()
        if words[:2] == ["python", "-m"] and words[2].startswith("stages."):
            out.add(words[2].replace(".", "/") + ".py")
    return out


def stages_kind(path: str, stages: set[str]) -> int:
    """The index in :data:`STAGES_KINDS` of a file under ``stages/``."""
    return 2 if path in CONSOLE else 1 if path in stages else 0


def violations(root: Path = REPO) -> list[str]:
    """One line per import that runs back up (``FILE:LINE: imports NAME (floor X) from floor Y``) or joins two stage
    modules, over every ``*.py`` of :data:`SOURCES` under ``root``; a file on no floor is named too."""
    stages = stage_modules(root)
    names = [name for name, _ in FLOORS]
    out = []
    for top in SOURCES:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            own = floor_of(rel)
            if own is None:
                out.append(f"{rel}: on no floor; add its folder to FLOORS in tests/test_floors.py")
                continue
            for imp in imports_of(path, root):
                floor = floor_of(imp.target)
                where = f"{imp.source}:{imp.line}: imports {imp.name}"
                if floor is None:
                    out.append(f"{where} ({imp.target}, on no floor)")
                elif floor > own:
                    out.append(f"{where} (floor {floor + 1}, {names[floor]}) from floor {own + 1} ({names[own]}): "
                               "an import runs back up")
                elif floor == own and names[own] == "stages" and imp.target != rel:
                    kind, other = stages_kind(rel, stages), stages_kind(imp.target, stages)
                    if other > kind or (kind == other == 1):
                        out.append(f"{where} ({STAGES_KINDS[other]} module {imp.target}) from a "
                                   f"{STAGES_KINDS[kind]} module: a stage imports no other stage; move what they "
                                   "share into the library or a shared module under stages/")
    return out


def test_imports_only_go_down_and_no_stage_imports_another():
    found = violations()
    assert not found, "imports that break the floor order (ARCHITECTURE.md):\n" + "\n".join(found)


def test_every_floor_names_existing_places_or_a_planned_one():
    """A misspelt floor would hold nothing silently; ``tasks/`` is planned (issue 54: one module per task kind)."""
    planned = {"bert_pipeline/tasks/"}
    missing = [p for _, places in FLOORS for p in places if p not in planned and not (REPO / p).exists()]
    assert not missing, f"FLOORS names places that do not exist: {missing}"


@pytest.fixture
def tree(tmp_path):
    """A small repository: a library of two floors, two stages and a shared stages module, a flow."""
    files = {
        "bert_pipeline/__init__.py": "", "bert_pipeline/errors.py": "",
        "bert_pipeline/data/__init__.py": "", "bert_pipeline/data/low.py": "from bert_pipeline import errors\n",
        "bert_pipeline/train/__init__.py": "", "bert_pipeline/train/loop.py": "from ..data import low\n",
        "stages/__init__.py": "", "stages/shared.py": "import bert_pipeline.train.loop\n",
        "stages/one.py": "from stages import shared\n", "stages/two.py": "from stages.shared import x\n",
        "stages/cli.py": "from stages import one\n", "flows/__init__.py": "", "flows/flow.py": "import stages.cli\n",
        "dvc.yaml": "stages:\n  one: {cmd: python -m stages.one}\n  two:\n    foreach: [a]\n"
                    "    do:\n      cmd: python -m stages.two --x ${item}\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path


def test_the_checker_passes_a_tree_whose_imports_go_down(tree):
    assert stage_modules(tree) == {"stages/one.py", "stages/two.py"}
    assert violations(tree) == []


def test_the_checker_names_file_line_and_import_running_back_up(tree):
    (tree / "bert_pipeline/data/low.py").write_text(
        "import os\n\n\ndef f():\n    from bert_pipeline.train import loop\n")
    (tree / "stages/shared.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from flows import flow\n")
    assert violations(tree) == [
        "bert_pipeline/data/low.py:5: imports bert_pipeline.train.loop (floor 6, train) from floor 2 (data): "
        "an import runs back up",
        "stages/shared.py:3: imports flows.flow (floor 10, flows) from floor 9 (stages): an import runs back up",
    ]


def test_the_checker_names_a_stage_importing_a_stage_and_a_shared_module_importing_one(tree):
    (tree / "stages/two.py").write_text("def main():\n    from stages.one import helper\n")
    (tree / "stages/shared.py").write_text("from . import cli\n")
    found = violations(tree)
    assert found == [
        "stages/shared.py:1: imports stages.cli (console module stages/cli.py) from a shared module: a stage "
        "imports no other stage; move what they share into the library or a shared module under stages/",
        "stages/two.py:2: imports stages.one (stage module stages/one.py) from a stage module: a stage imports no "
        "other stage; move what they share into the library or a shared module under stages/",
    ]


def test_a_file_on_no_floor_is_named(tree):
    (tree / "bert_pipeline/newpart").mkdir()
    (tree / "bert_pipeline/newpart/x.py").write_text("")
    assert violations(tree) == ["bert_pipeline/newpart/x.py: on no floor; add its folder to FLOORS in "
                                "tests/test_floors.py"]
