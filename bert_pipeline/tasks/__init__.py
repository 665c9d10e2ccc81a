"""Task kinds, one module each (ARCHITECTURE.md, "Add a task kind"): :mod:`.classification`,
:mod:`.pair_classification`, :mod:`.regression`, :mod:`.ner`, :mod:`.qa`, :mod:`.multi_label`, registered in
:data:`KINDS`.

Everything that differs between kinds is a method or attribute of the kind's :class:`~.base.TaskKind`; the rest of
the pipeline asks the kind (:func:`get`) and never branches on its name.
"""

from __future__ import annotations

from bert_pipeline.tasks import classification, multi_label, ner, pair_classification, qa, regression
from bert_pipeline.tasks.base import HeldoutScorer, ServeRequest, TaskKind

KINDS: dict[str, TaskKind] = {kind.name: kind for kind in (classification.KIND, pair_classification.KIND,
                                                            regression.KIND, ner.KIND, qa.KIND, multi_label.KIND)}
"""Every task kind by name, in the order the report lists them."""



def get(name: str) -> TaskKind:
    """The registered kind called ``name`` (``task.json``'s ``kind``).

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    try:
        return KINDS[name]
    except KeyError:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {name!r}") from None


def of_config(config: dict) -> TaskKind:
    """The kind a fine-tuned folder's ``config.json`` (as a dict) serves: its ``task_kind`` where fine-tuning wrote
    one (the pair and regression kinds), else the first registered kind whose head class
    (:attr:`~.base.TaskKind.auto_class`) one of its ``architectures`` is.

    Raises:
        ValueError: no architecture with a head of a registered kind.
    """
    named = config.get("task_kind")
    if named in KINDS:
        return KINDS[named]
    archs = config.get("architectures") or []
    for kind in KINDS.values():
        suffix = kind.auto_class.removeprefix("AutoModel")
        if any(str(arch).endswith(suffix) for arch in archs):
            return kind
    raise ValueError(f"architectures {archs} have no sequence/token classification or QA head")


__all__ = ["KINDS", "HeldoutScorer", "ServeRequest", "TaskKind", "get", "of_config"]
