"""bench/ holds benchmarks, bench/analysis/ and bench/device/ the rest: each folder's README.md lists every script in
it, and no script imports test code or a private name of the project (a benchmark measures what users call)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
FOLDERS = [BENCH, BENCH / "analysis", BENCH / "device"]
PROJECT = ("bert_pipeline", "stages", "flows")


def scripts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in (".py", ".sh"))


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_each_script_is_listed_in_its_folders_readme(folder):
    readme = (folder / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in scripts(folder) if f"`{p.name}`" not in readme]
    assert scripts(folder) and not missing, f"{folder}/README.md does not list {missing}"


def imported(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each ``from module import name`` and ``(module, "")`` for each ``import module``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(alias.name, "") for alias in node.names]
    return out


@pytest.mark.parametrize("path", [p for f in FOLDERS for p in scripts(f) if p.suffix == ".py"],
                         ids=lambda p: str(p.relative_to(BENCH)))
def test_no_test_code_and_no_private_names(path):
    bad = []
    for module, name in imported(path):
        root = module.split(".")[0]
        if root == "tests":
            bad.append(module)
        elif root in PROJECT and (any(part.startswith("_") and part != "__init__" for part in module.split("."))
                                  or (name.startswith("_") and not name.startswith("__"))):
            bad.append(f"{module}.{name}")
    assert not bad, f"{path.relative_to(BENCH.parent)} imports {bad}"


def test_the_old_gpu_check_path_runs_the_device_script():
    wrapper = (BENCH / "gpu_check.sh").read_text(encoding="utf-8")
    assert 'exec bash "$(dirname "$0")/device/gpu_check.sh" "$@"' in wrapper
    assert (BENCH / "device" / "gpu_check.sh").is_file()
