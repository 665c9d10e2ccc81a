"""Loading a fine-tuned model folder for inference: which task kind it serves and its model and tokenizer
(:func:`load_predictor`).

A folder written by ``finetune`` (``save_pretrained`` + tokenizer) says which head it has in
``config.architectures`` and, for the pair and regression kinds, ``config.task_kind``
(:func:`bert_pipeline.tasks.of_config`); :func:`load_predictor` loads it with its kind's ``AutoModelFor*`` class.
What is served from it is the kind's (:meth:`bert_pipeline.tasks.base.TaskKind.serve`: labels and probabilities,
NER entities with character offsets, QA answers decoded the way the test split was scored).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_pipeline import tasks
from bert_pipeline.errors import PipelineError
from bert_pipeline.model.heads import load_sequence_classifier

log = logging.getLogger(__name__)

def read_config(model_dir: Path) -> dict[str, Any]:
    """A model folder's ``config.json`` as a dict.

    Raises:
        PipelineError: no folder or ``config.json``, or a file that is not a JSON object.
    """
    cfg = Path(model_dir) / "config.json"
    if not Path(model_dir).is_dir() or not cfg.is_file():
        raise PipelineError(f"{cfg}: not found (expected a save_pretrained model folder)")
    try:
        raw = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PipelineError(f"{cfg}: not a readable model config ({exc})") from None
    if not isinstance(raw, dict):
        raise PipelineError(f"{cfg}: not a readable model config (a JSON object expected)")
    return raw


def task_of(model_dir: Path) -> tasks.TaskKind:
    """The task kind a fine-tuned folder serves (:func:`bert_pipeline.tasks.of_config`).

    Raises:
        PipelineError: no ``config.json`` or an architecture without a head of a known kind.
    """
    try:
        return tasks.of_config(read_config(model_dir))
    except ValueError as exc:
        raise PipelineError(f"{Path(model_dir) / 'config.json'}: {exc}") from None


def model_kind(model_dir: Path) -> str:
    """``sequence-classification``, ``token-classification`` or ``question-answering`` from ``config.json``
    (the head of :func:`task_of`'s kind).

    Raises:
        PipelineError: no ``config.json`` or an architecture without one of these heads.
    """
    return task_of(model_dir).head


@dataclass
class Predictor:
    """A loaded model folder: its head ``kind`` (``sequence-classification`` ...), the task kind it serves
    (``task``), the ``model`` (eval mode, CPU) and its ``tokenizer``."""

    kind: str
    model: Any
    tokenizer: Any
    model_dir: Path
    task: tasks.TaskKind


def load_predictor(model_dir: Path) -> Predictor:
    """Load a fine-tuned folder with the ``AutoModelFor*`` class its kind names, in eval mode.

    Raises:
        PipelineError: the folder is not a loadable model with a known head.
    """
    import transformers

    from bert_pipeline.data.tokenizer import load_tokenizer

    task = task_of(model_dir)
    try:
        cfg = read_config(model_dir)
        if task.pooled and cfg.get("classifier_pooling", "cls") != "cls":
            # finetune's mean-pooling head (bert_pipeline.model.heads) restores itself from config.classifier_pooling
            model = load_sequence_classifier(str(model_dir))
        else:
            model = getattr(transformers, task.auto_class).from_pretrained(model_dir)
    except OSError as exc:
        raise PipelineError(f"{model_dir}: cannot load the model ({str(exc).splitlines()[0]})") from None
    tokenizer = load_tokenizer(model_dir)
    model.eval()
    return Predictor(kind=task.head, model=model, tokenizer=tokenizer, model_dir=Path(model_dir), task=task)
