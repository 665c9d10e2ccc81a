"""User task readers, one per file layout: sequence tasks (classification, sentence pairs, regression) from CSV or
JSONL, NER from CoNLL-2003 files, QA from SQuAD v1.1 JSON, or a Hugging Face dataset by name. Which reader a user
task takes is its kind's (:meth:`bert_pipeline.tasks.base.TaskKind.load_user_task`).

Bad input raises :class:`bert_pipeline.data.task_features.TaskDataError` (one line naming the file and the row or
line) or, for a missing file, :class:`bert_pipeline.errors.PipelineError`.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict, Features, Value

from bert_pipeline.data.task_features import (
    QA_FEATURES,
    TaskDataError,
    classification_features,
    ner_label_names,
    pair_features,
)


# ------------------------------------------------------------------------------------------ user tasks
def read_rows(path: Path, columns: Sequence[str]) -> tuple[list[tuple[int, list[Any]]], str]:
    """The ``columns`` of every row of a CSV (header row) or JSONL (one object a line, by the suffix ``.jsonl`` /
    ``.json``) file, each with its row or line number, and the unit a message names (``row`` or ``line``).

    Raises:
        TaskDataError: invalid JSON, a line that is not an object with the columns, or a column missing from the
            CSV header.
    """
    rows: list[tuple[int, list[Any]]] = []
    if path.suffix.lower() in (".jsonl", ".json"):
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TaskDataError(f"{path}: line {i}: invalid JSON ({exc.msg})") from None
                if not isinstance(obj, dict) or any(c not in obj for c in columns):
                    raise TaskDataError(f"{path}: line {i}: expected an object with {' and '.join(map(repr, columns))}")
                rows.append((i, [obj[c] for c in columns]))
    else:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            for col in columns:
                if col not in (reader.fieldnames or []):
                    raise TaskDataError(f"{path}: column {col!r} missing (header: {', '.join(reader.fieldnames or [])})")
            for i, rec in enumerate(reader, start=2):
                rows.append((i, [rec[c] for c in columns]))
    return rows, "line" if path.suffix.lower() in (".jsonl", ".json") else "row"


def load_classification_file(path: str | Path, text_column: str = "text", label_column: str = "label",
                             text_pair_column: str | None = None, regression: bool = False) -> Dataset:
    """Load a user sequence-task file: CSV (header row) or JSONL (one object a line).

    Columns ``text`` (from ``text_column``), ``text_pair`` (from ``text_pair_column``, for pair tasks) and
    ``label``: a ClassLabel with the sorted distinct values as names, or with ``regression`` a float32 target.

    Raises:
        TaskDataError: unreadable row, missing column, empty text, a label that is not a number (regression), or
            fewer than two classes (classification).
    """
    path = Path(path)
    columns = [text_column] + ([text_pair_column] if text_pair_column else []) + [label_column]
    rows, unit = read_rows(path, columns)
    for i, values in rows:
        for col, text in zip(columns[:-1], values[:-1], strict=True):
            if not isinstance(text, str) or not text.strip():
                raise TaskDataError(f"{path}: {unit} {i}: empty or non-text {col!r}")
        label = values[-1]
        if label is None or str(label).strip() == "":
            raise TaskDataError(f"{path}: {unit} {i}: empty {label_column!r}")
        if regression:
            try:
                target = float(label)
            except (TypeError, ValueError):
                raise TaskDataError(f"{path}: {unit} {i}: {label_column!r} is {label!r}; expected a number "
                                    f"(a regression target)") from None
            if not np.isfinite(target):
                raise TaskDataError(f"{path}: {unit} {i}: {label_column!r} is {label!r}; expected a finite number")
    data: dict[str, list[Any]] = {"text": [v[0] for _, v in rows]}
    if text_pair_column:
        data["text_pair"] = [v[1] for _, v in rows]
    if regression:
        data["label"] = [float(v[-1]) for _, v in rows]
        feats = {"text": Value("string"), **({"text_pair": Value("string")} if text_pair_column else {}),
                 "label": Value("float32")}
        return Dataset.from_dict(data, features=Features(feats))
    classes = sorted({str(v[-1]) for _, v in rows})
    if len(classes) < 2:
        first = rows[0][0] if rows else 0
        last = rows[-1][0] if rows else 0
        only = repr(classes[0]) if classes else "none"
        raise TaskDataError(
            f"{path}: {unit}s {first}-{last}: column {label_column!r} holds one class ({only}); expected at least 2"
        )
    data["label"] = [classes.index(str(v[-1])) for _, v in rows]
    feats = pair_features(classes) if text_pair_column else classification_features(classes)
    return Dataset.from_dict(data, features=feats)


_BIO = re.compile(r"^(O|[BI]-\S+)$")


def load_conll(path: str | Path, tag_column: int = -1) -> tuple[list[list[str]], list[list[str]]]:
    """Read a CoNLL-2003 file: one token a line (token first, NER tag in ``tag_column``), blank line between
    sentences, ``-DOCSTART-`` lines skipped.

    Tags must be BIO (``O``, ``B-TYPE``, ``I-TYPE``); IOB1 input (``I-`` opening an entity, as in the
    original CoNLL-2003 files) is converted to BIO (IOB2: ``B-`` at every entity start).

    Returns:
        (sentences of tokens, sentences of BIO tag strings).
    Raises:
        TaskDataError: ``file: line N: ...`` for a tag not in BIO form or a line without a tag.
    """
    sents, tags, cur_t, cur_g = [], [], [], []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            parts = line.split()
            if not parts or parts[0] == "-DOCSTART-":
                if cur_t:
                    sents.append(cur_t)
                    tags.append(cur_g)
                    cur_t, cur_g = [], []
                continue
            if len(parts) < 2:
                raise TaskDataError(f"{path}: line {n}: expected a token and a tag, got {line.strip()!r}")
            tag = parts[tag_column]
            if not _BIO.match(tag):
                raise TaskDataError(f"{path}: line {n}: tag {tag!r} is not BIO (expected O, B-TYPE or I-TYPE)")
            if tag.startswith("I-"):
                prev = cur_g[-1] if cur_g else "O"
                if prev == "O" or prev[2:] != tag[2:]:
                    tag = "B-" + tag[2:]
            cur_t.append(parts[0])
            cur_g.append(tag)
    if cur_t:
        sents.append(cur_t)
        tags.append(cur_g)
    return sents, tags



def conll_label_names(*tag_lists: list[list[str]]) -> list[str]:
    """BIO label names covering every type seen, types sorted."""
    types = sorted({t[2:] for tags in tag_lists for sent in tags for t in sent if t != "O"})
    return ner_label_names(types)


def load_squad(path: str | Path) -> Dataset:
    """Read a SQuAD v1.1 JSON file into the SQuAD layout, checking every answer span.

    Raises:
        TaskDataError: ``file: data[i].paragraphs[j].qas[k] (id ...): ...`` when the structure is wrong or
            an answer's text is not at its ``answer_start`` in the context.
    """
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskDataError(f"{path}: line {exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("data"), list):
        raise TaskDataError(f"{path}: expected a SQuAD v1.1 object with a 'data' list")
    rows = []
    for i, art in enumerate(obj["data"]):
        for j, para in enumerate(art.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str):
                raise TaskDataError(f"{path}: data[{i}].paragraphs[{j}]: 'context' missing")
            for k, qa in enumerate(para.get("qas", [])):
                where = f"{path}: data[{i}].paragraphs[{j}].qas[{k}] (id {qa.get('id')!r})"
                answers = qa.get("answers") or []
                if not answers or "question" not in qa or "id" not in qa:
                    raise TaskDataError(f"{where}: expected 'id', 'question' and at least one answer")
                texts, starts = [], []
                for a in answers:
                    text, start = a.get("text"), a.get("answer_start")
                    if not isinstance(text, str) or not isinstance(start, int):
                        raise TaskDataError(f"{where}: answer needs 'text' (str) and 'answer_start' (int)")
                    got = context[start:start + len(text)]
                    if got != text:
                        raise TaskDataError(f"{where}: answer text {text!r} is not at answer_start {start} (found {got!r})")
                    texts.append(text)
                    starts.append(start)
                rows.append({"id": str(qa["id"]), "title": str(art.get("title", "")), "context": context,
                             "question": qa["question"], "answers": {"text": texts, "answer_start": starts}})
    return Dataset.from_list(rows, features=QA_FEATURES)


def load_hf_task(name: str, config: str | None = None) -> DatasetDict:
    """Load a Hugging Face dataset by name (needs the network unless cached; never used by defaults/tests)."""
    from datasets import load_dataset

    return load_dataset(name, config)
