"""Stage ``prepare_tasks``: the labelled task sets ``data/tasks/{sentiment,ner,qa}/`` (+ user tasks).

- sentiment: Rotten Tomatoes snippets from ``data/raw/`` (fresh = positive), split by film.
- ner: *silver* BIO labels from the fetched spaCy model over news sentences of ``data/corpus/``.
- qa: cloze questions (Hermann et al. 2015) from news headlines in ``data/raw/`` and bodies in ``data/corpus/``.

Built by :func:`bert_pipeline.data.tasks.build_all`. NER and QA validation/test come only from articles in the
corpus's validation split. Each task folder holds a ``DatasetDict`` (train/validation/test) and ``task.json``
(kind, label names, main metric, silver flag), which ``finetune`` reads. ``metrics/tasks.json`` records sizes,
label counts and average lengths.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bert_pipeline import tasks
from bert_pipeline.console import run_main
from bert_pipeline.data.tasks import build_all
from bert_pipeline.io import atomic_dir, write_json
from stages import require_inputs
from stages.params.base import load_view
from stages.params.prepare_tasks import PrepareTasksView

log = logging.getLogger(__name__)

RAW = Path("data/raw")
CORPUS = Path("data/corpus")
OUT = Path("data/tasks")
METRICS = Path("metrics/tasks.json")


def main() -> None:
    require_inputs("prepare_tasks")
    built = build_all(load_view(PrepareTasksView).prepare_tasks, RAW, CORPUS,
                      lambda spec: tasks.get(spec.kind).load_user_task(spec))
    report: dict[str, Any] = {}
    with atomic_dir(OUT) as tmp:
        for name, (dd, info) in built.items():
            kind = tasks.get(info["kind"])
            dd.save_to_disk(str(tmp / name))
            write_json(tmp / name / "task.json", {**info, "main_metric": kind.main_metric})
            report[name] = {"kind": info["kind"], "silver": info["silver"], "splits": kind.describe(dd)}
    write_json(METRICS, report)
    log.info("wrote %s: %s", OUT, ", ".join(built))


if __name__ == "__main__":
    run_main(main)
