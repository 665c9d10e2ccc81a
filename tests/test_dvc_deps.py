"""dvc.yaml's code deps follow the imports: every project file a stage imports (at any depth, module-level or inside
a function) is a dep of that stage, so a code change reruns exactly the stages it touches.

The params schema (``stages/params/``: its base module and the modules of the sections a stage reads) is in every
closure: besides validating, it supplies the defaults of the entries a user may leave short (a ``finetune.models``
entry's ``init``, a source's ``text_field``), which shape outputs. ``EXEMPT`` names files that are neither listed nor followed; it is empty.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

PACKAGES = ("stages", "bert_pipeline")
EXEMPT: frozenset[str] = frozenset()


def _module_file(name: str, root: Path) -> Path | None:
    path = root.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported_names(path: Path, module: str) -> set[str]:
    """Every module name an ``import`` or ``from ... import`` anywhere in ``path`` may refer to."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_closure(module: str, root: Path = REPO, exempt: frozenset[str] = frozenset()) -> set[str]:
    """Repository-relative paths of the project files ``module`` imports, itself and parent packages included;
    ``exempt`` files are neither included nor followed."""
    seen: dict[str, Path] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name.split(".")[0] not in PACKAGES:
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            path = _module_file(prefix, root)
            if path is None or prefix in seen or path.relative_to(root).as_posix() in exempt:
                continue
            seen[prefix] = path
            todo.extend(_imported_names(path, prefix))
    return {p.relative_to(root).as_posix() for p in seen.values()}


def _stages() -> dict[str, tuple[str, list[str]]]:
    """``{stage: (module, deps)}`` of dvc.yaml (a ``foreach`` stage once, with its ``do`` template)."""
    raw = yaml.safe_load((REPO / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    out = {}
    for name, stage in raw.items():
        body = stage.get("do", stage)
        cmd = body["cmd"]
        assert cmd.startswith("python -m stages."), f"{name}: expected `python -m stages.X`, got {cmd!r}"
        out[name] = (cmd.split()[2], [str(d) for d in body.get("deps", [])])
    return out


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_deps_list_the_import_closure(stage):
    module, deps = _stages()[stage]
    closure = import_closure(module, exempt=EXEMPT)
    assert f"{module.replace('.', '/')}.py" in closure
    missing = sorted(f for f in closure if not _covered(f, deps))
    assert missing == [], f"dvc.yaml stage {stage}: deps lack {missing}"


@pytest.mark.parametrize("stage", sorted(_stages()))
def test_code_deps_are_imported(stage):
    """No stale code dep: a listed project file the stage no longer imports would rerun it for nothing."""
    module, deps = _stages()[stage]
    closure = import_closure(module, exempt=EXEMPT)
    code = [d for d in deps if d.split("/")[0] in PACKAGES]
    stale = [d for d in code if not any(f == d or f.startswith(d.rstrip("/") + "/") for f in closure)]
    assert stale == [], f"dvc.yaml stage {stage}: deps list files it does not import: {stale}"


def test_closure_follows_imports_inside_functions_and_skips_the_exempt(tmp_path):
    for folder in ("stages", "bert_pipeline/part"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("stages/__init__.py", "bert_pipeline/__init__.py", "bert_pipeline/part/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "bert_pipeline/part/lazy.py").write_text("import os\n")
    (tmp_path / "bert_pipeline/part/hidden.py").write_text("")
    (tmp_path / "bert_pipeline/part/eager.py").write_text("from . import hidden\n")
    (tmp_path / "stages/one.py").write_text(
        "from bert_pipeline.part import eager\n\ndef main():\n    from bert_pipeline.part.lazy import os\n")
    base = {"stages/__init__.py", "stages/one.py", "bert_pipeline/__init__.py", "bert_pipeline/part/__init__.py",
            "bert_pipeline/part/lazy.py"}
    assert import_closure("stages.one", tmp_path) == base | {"bert_pipeline/part/eager.py",
                                                             "bert_pipeline/part/hidden.py"}
    assert import_closure("stages.one", tmp_path, frozenset({"bert_pipeline/part/eager.py"})) == base


def rewrite_code_deps(text: str, root: Path = REPO) -> str:
    """``dvc.yaml``'s text with each stage's code deps (the lines naming files under :data:`PACKAGES`) replaced by
    its import closure, the stage's own module first, the rest sorted; every other line (data deps, comments) kept
    in place. The maintenance step after an import changes: ``python -m tests.test_dvc_deps --write``."""
    stages = _stages()
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    stage: str | None = None
    in_deps = False
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if indent == 2 and stripped.endswith(":") and not stripped.startswith("#"):
            stage, in_deps = stripped[:-1], False
        elif stripped == "deps:":
            in_deps = True
            out.append(line)
            if stage in stages:
                module = stages[stage][0]
                closure = import_closure(module, root, EXEMPT)
                own = f"{module.replace('.', '/')}.py"
                pad = " " * (indent + 2)
                out.extend(f"{pad}- {path}\n" for path in [own, *sorted(closure - {own})])
            continue
        elif in_deps and not stripped.startswith("- "):
            in_deps = False
        if in_deps and stripped.startswith("- ") and stripped[2:].split("/")[0] in PACKAGES:
            continue
        out.append(line)
    return "".join(out)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_dvc_deps --write   (rewrites dvc.yaml's code deps from the imports)")
    dvc_yaml = REPO / "dvc.yaml"
    dvc_yaml.write_text(rewrite_code_deps(dvc_yaml.read_text(encoding="utf-8")), encoding="utf-8")
