"""The few numbers per stage that ``dvc exp show`` and ``dvc metrics diff`` compare: ``metrics/headline/``.

Each stage writes its full figures to its own file (``metrics/{stage}.json``, ``metrics/finetune/{model}-{task}.json``:
cached DVC outputs that the report, the registry and users read) and a handful of them here, declared as the stage's
DVC ``metrics``. Keys are nested under one name per stage or family member (``pretrain.mlm_accuracy``,
``pretrained.sentiment``, ``pretrained.average``) so they are unique across files: DVC then shows a column by its key
alone instead of ``path:key``, and a table of two experiments stays narrow. Wall-clock figures are never headline
(they differ on every run and live in the ``cache: false`` timing files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bert_pipeline.io import write_json

HEADLINE_DIR = Path("metrics/headline")


def headline_path(name: str) -> Path:
    """``metrics/headline/{name}.json`` (``name`` may hold a folder: ``finetune/pretrained-ner``)."""
    return HEADLINE_DIR / f"{name}.json"


def write_headline(name: str, values: dict[str, dict[str, Any]]) -> Path:
    """Write the headline file ``name`` atomically; ``values`` is ``{group: {metric: number}}``.

    Raises:
        ValueError: a value that is not a number (DVC would show it as text and could not diff it).
    """
    for group, block in values.items():
        for key, value in block.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"headline {name}: {group}.{key} = {value!r} is not a number")
    path = headline_path(name)
    write_json(path, values)
    return path
