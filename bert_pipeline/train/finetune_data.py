"""Fine-tuning's task data: the task folder (:func:`load_task`), the seeded subsets (:func:`subsample`),
length-grouped batches (the features and the collator are the task kind's: :mod:`bert_pipeline.tasks`);
:class:`FinetuneError`, the one-line failure every fine-tuning module raises.

The loop that trains on these features: :mod:`bert_pipeline.train.finetune_loop`; the runs over seeds and their
evaluation: :mod:`bert_pipeline.train.finetune`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict, load_from_disk


class FinetuneError(RuntimeError):
    """An expected fine-tuning failure; ``str(err)`` is one line naming the file or key."""


# --------------------------------------------------------------------------------------------- task data
def load_task(path: str | Path) -> tuple[DatasetDict, dict[str, Any]]:
    """Load a task folder written by :func:`bert_pipeline.data.tasks.build_all` (a DatasetDict and ``task.json``).

    Raises:
        FinetuneError: the folder, a split or ``task.json`` is missing.
    """
    import json

    path = Path(path)
    if not (path / "task.json").exists():
        raise FinetuneError(f"{path}: task not found (expected a prepare_tasks folder with task.json)")
    info = json.loads((path / "task.json").read_text(encoding="utf-8"))
    dd = load_from_disk(str(path))
    for split in ("train", "validation", "test"):
        if split not in dd:
            raise FinetuneError(f"{path}: split {split!r} missing")
    return dd, info


def subsample_indices(size: int, n: int | None, seed: int) -> list[int]:
    """The rows :func:`subsample` keeps: at most ``n`` of ``range(size)`` drawn without replacement with ``seed``,
    sorted."""
    if n is None or n >= size:
        return list(range(size))
    return np.sort(np.random.default_rng(seed).choice(size, size=n, replace=False)).tolist()


def subsample(ds: Dataset, n: int | None, seed: int) -> Dataset:
    """At most ``n`` examples drawn without replacement with ``seed``, kept in their original order."""
    if n is None or n >= len(ds):
        return ds
    return ds.select(subsample_indices(len(ds), n, seed))


# ----------------------------------------------------------------------------------------------- batches
def length_grouped_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                           mega: int = 50) -> list[list[int]]:
    """Shuffled batches of similar length: permute, cut into mega-batches of ``mega * batch_size``, sort each
    by length (longest first), cut into batches, shuffle the batch order."""
    perm = rng.permutation(len(lengths))
    batches = []
    for i in range(0, len(perm), mega * batch_size):
        chunk = sorted(perm[i:i + mega * batch_size].tolist(), key=lambda j: -lengths[j])
        batches += [chunk[k:k + batch_size] for k in range(0, len(chunk), batch_size)]
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


# ------------------------------------------------------------------------------------------------ windows
@contextlib.contextmanager
def task_windows(task_dir: Path) -> Iterator[None]:
    """Turn the ``ValueError`` of windows that ``max_length`` / ``doc_stride`` cannot build into a
    :class:`FinetuneError` naming ``finetune.tasks.{task}``."""
    try:
        yield
    except ValueError as exc:
        raise FinetuneError(f"finetune.tasks.{task_dir.name}: {exc}") from None
