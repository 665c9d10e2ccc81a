"""The library knows no DVC layout (ARCHITECTURE.md, "The two sides"): no file of ``bert_pipeline/`` names a DVC
output path, DVC's lock file, DVC's own folder or the params file, in code, strings, docstrings or comments. Paths come
in as arguments from ``stages/`` (each stage's module constants), and what knows DVC's files and environment is
``stages/dvc_adapter.py``. A docstring may speak of DVC in general ("DVC's directory md5"), never of these tokens.

Forbidden (:data:`FORBIDDEN`):

- an output folder of the pipeline (``data/``, ``models/``, ``metrics/``, ``plots/``, ``reports/``,
  ``checkpoints/``) at the start of a path: after a quote, a backtick, an f-string's quote, a space or a bracket,
  not after a letter, digit, ``.``, ``/``, ``\\`` or ``-`` (so ``"metrics/budget_curve.json"``,
  ``f"models/finetuned/{x}"`` and a docstring's ````metrics/corpus.json```` are hits; ``PACKAGE/data/Rdata.rdb``,
  ``/tmp/data/x`` and ``metrics_dir / "corpus.json"`` are not);
- ``dvc.lock``, ``.dvc`` as a path component (``.dvc/tmp``, ``(".dvc", "tmp")``), ``params.yaml``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

LIBRARY = REPO / "bert_pipeline"
FORBIDDEN = re.compile(r"""
      (?<![\w./\\-])(?:data|models|metrics|plots|reports|checkpoints)/   # an output folder starting a path
    | (?<![\w.])\.dvc\b                                                  # DVC's own folder
    | dvc\.lock                                                          # DVC's lock file
    | params\.yaml                                                       # the params file
""", re.VERBOSE)

def hits(text: str, name: str) -> list[str]:
    """``name:line: text`` of every line of ``text`` holding a :data:`FORBIDDEN` token."""
    return [f"{name}:{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
            if FORBIDDEN.search(line)]


def library_hits(root: Path = LIBRARY, base: Path = REPO) -> list[str]:
    """The hits of every ``*.py`` under ``root`` (named relative to ``base``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        found += hits(path.read_text(encoding="utf-8"), path.relative_to(base).as_posix())
    return found


def test_the_library_names_no_dvc_path_lock_folder_or_params_file():
    found = library_hits()
    assert not found, ("the library names DVC paths or the params file; take them as arguments from the stage "
                       "(stages/*.py constants, stages/dvc_adapter.py) and reword docstrings to speak of the "
                       "argument:\n" + "\n".join(found))


def test_the_checker_finds_what_it_must_and_nothing_else():
    forbidden = [
        'BUDGET = "metrics/budget_curve.json"',
        "DEFAULT = 'models/pretrained'",
        'folder = f"models/finetuned/{name}-{task}"',
        '"""The statistics cited by ``metrics/corpus.json``."""',
        "    reads data/raw/SOURCES.json and writes reports/summary.md",
        'paths = ["plots/evaluate", Path("checkpoints/pretrain")]',
        'lock = root / "dvc.lock"',
        'TEMP = Path(".dvc/tmp")',
        'PARTS = (".dvc", "tmp")',
        "# the user's line reads params.yaml: SECTION.KEY",
    ]
    allowed = [
        'corpus = read_json(metrics_dir / "corpus.json")',
        "An installed R package keeps its data sets so (``PACKAGE/data/Rdata.rdb``)",
        'tmp = Path("/tmp/data/x")',
        'ratio = self.data/2',
        "DVC's hash of a folder output (DVC's lock file records it)",
        'suffix = "file.dvc"',
        "the params file of the pipeline; the metrics record; models and data",
    ]
    text = "\n".join(forbidden + allowed)
    assert hits(text, "synthetic.py") == [f"synthetic.py:{i}: {line.strip()}" for i, line in enumerate(forbidden, 1)]


def test_the_checker_walks_a_package_and_names_file_and_line(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "sub" / "bad.py").write_text('X = 1\n"""Cites ``metrics/corpus.json``."""\n', encoding="utf-8")
    (tmp_path / "pkg" / "good.py").write_text("X = 1\n", encoding="utf-8")
    assert library_hits(tmp_path / "pkg", tmp_path) == ['pkg/sub/bad.py:2: """Cites ``metrics/corpus.json``."""']
