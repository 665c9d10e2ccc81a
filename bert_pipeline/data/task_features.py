"""What every task set shares: the splits, :class:`TaskDataError`, the ``datasets`` features of each layout
(sentence classification, sentence pairs, BIO NER, SQuAD v1.1 QA), NER datasets from tag strings, label counts, and
the seeded group splits (no film or article in two splits).

Bad input raises :class:`TaskDataError`, whose message is one line naming the file and the row (or line).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from datasets import ClassLabel, Dataset, Features, Value
from datasets import Sequence as HFSequence

SPLITS = ("train", "validation", "test")


class TaskDataError(ValueError):
    """Bad task input. ``str(err)`` is one line naming the file and row, e.g. ``a.csv: row 7: ...``."""


# --------------------------------------------------------------------------------------------- features
def classification_features(label_names: Sequence[str]) -> Features:
    """Features of a sentence-classification set: ``text`` (str), ``label`` (ClassLabel)."""
    return Features({"text": Value("string"), "label": ClassLabel(names=list(label_names))})


def pair_features(label_names: Sequence[str]) -> Features:
    """Features of a sentence-pair set: ``text``, ``text_pair`` (str), ``label`` (ClassLabel)."""
    return Features({"text": Value("string"), "text_pair": Value("string"),
                     "label": ClassLabel(names=list(label_names))})


def ner_label_names(entity_types: Sequence[str]) -> list[str]:
    """BIO label names in a fixed order: ``O``, then ``B-T``, ``I-T`` for each type in ``entity_types``."""
    names = ["O"]
    for t in entity_types:
        names += [f"B-{t}", f"I-{t}"]
    return names


def ner_features(label_names: Sequence[str]) -> Features:
    """Features of an NER set: ``id``, ``tokens`` (list[str]), ``ner_tags`` (list of ClassLabel, BIO)."""
    return Features({
        "id": Value("string"),
        "tokens": HFSequence(Value("string")),
        "ner_tags": HFSequence(ClassLabel(names=list(label_names))),
    })


QA_FEATURES = Features({
    "id": Value("string"),
    "title": Value("string"),
    "context": Value("string"),
    "question": Value("string"),
    "answers": {"text": HFSequence(Value("string")), "answer_start": HFSequence(Value("int32"))},
})


def ner_dataset(tokens: list[list[str]], tags: list[list[str]], label_names: Sequence[str], prefix: str) -> Dataset:
    """Build an NER Dataset from token and tag-string lists (tags must be in ``label_names``)."""
    return Dataset.from_dict(
        {"id": [f"{prefix}#{i}" for i in range(len(tokens))], "tokens": tokens, "ner_tags": tags},
        features=ner_features(label_names),
    )


def label_counts(ds: Dataset, column: str) -> dict[str, int]:
    """Counts of a ClassLabel column (or, for a Sequence of ClassLabel, of ``B-`` tags) by label name."""
    feat = ds.features[column]
    if isinstance(feat, ClassLabel):
        c = Counter(ds[column])
        return {feat.names[k]: c[k] for k in sorted(c)}
    names = feat.feature.names
    c = Counter(t for seq in ds[column] for t in seq)
    return {names[k]: c[k] for k in sorted(c)}


# -------------------------------------------------------------------------------------------- splitting
def split_groups(groups: Sequence[str], validation_fraction: float, test_fraction: float, seed: int) -> dict[str, str]:
    """Assign each distinct group (film, article) to one split, so no group is in two splits.

    Groups are sorted, permuted with ``numpy.random.default_rng(seed)``, and filled into ``test`` then
    ``validation`` until each holds at least its fraction of the *examples* (``groups`` has one entry per
    example); the rest go to ``train``.

    Returns:
        ``{group: split_name}``.
    Raises:
        ValueError: fractions outside ``[0, 1)`` or summing to ``>= 1``.
    """
    if not (0 <= validation_fraction < 1 and 0 <= test_fraction < 1 and validation_fraction + test_fraction < 1):
        raise ValueError(f"split fractions must be in [0, 1) and sum below 1, got {validation_fraction}, {test_fraction}")
    sizes = Counter(groups)
    order = sorted(sizes)
    perm = np.random.default_rng(seed).permutation(len(order))
    total = len(groups)
    quota = {"test": test_fraction * total, "validation": validation_fraction * total}
    filled = {"test": 0, "validation": 0}
    out: dict[str, str] = {}
    for i in perm:
        g = order[i]
        for split in ("test", "validation"):
            if filled[split] < quota[split]:
                out[g] = split
                filled[split] += sizes[g]
                break
        else:
            out[g] = "train"
    return out


def halve_groups(groups: Iterable[str], first_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """Split distinct groups into two disjoint sets (``first_fraction`` of them first), seeded.

    Used for the NER/QA held-out articles: the corpus's validation documents become validation and test.
    """
    order = sorted(set(groups))
    perm = np.random.default_rng(seed).permutation(len(order))
    n_first = int(round(first_fraction * len(order)))
    first = {order[i] for i in perm[:n_first]}
    return first, set(order) - first


def split_rng(seed: int, split: str) -> np.random.Generator:
    """The random generator that draws ``split``'s examples: its own stream, ``default_rng([seed, index])``.

    One stream per split keeps the validation and test draws the same whatever size the train split asks for
    (``prepare_tasks.ner.sentences.train`` = 6000 instead of 3000 must not change what is scored).

    Raises:
        ValueError: ``split`` is not one of :data:`SPLITS`.
    """
    return np.random.default_rng([seed, SPLITS.index(split)])
