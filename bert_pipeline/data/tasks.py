"""Building the labelled task sets: sentiment (real labels), silver NER, cloze QA, headline match (sentence pairs),
and the user tasks (each loaded by its kind, which the caller passes in).

Every builder returns a ``datasets.DatasetDict`` with ``train``/``validation``/``test`` in the layouts of
ARCHITECTURE.md: sentiment ``text``, ``label`` (ClassLabel); NER ``tokens``, ``ner_tags`` (Sequence of ClassLabel,
BIO); QA SQuAD v1.1 layout ``id``, ``context``, ``question``, ``answers{text, answer_start}``; pairs ``text``,
``text_pair``, ``label`` (ClassLabel); regression ``text`` (, ``text_pair``), ``label`` (float32).

Splits are made by *group* (film for sentiment, article for NER and QA) so no group is in two splits. NER and
QA take validation and test examples only from documents that the corpus put in its validation split, so
pre-training never saw the text they are tested on.

:func:`build_all` builds every task: the default sets by :mod:`bert_pipeline.data.task_builders`, user tasks by
the loader given (their kind's, :meth:`bert_pipeline.tasks.base.TaskKind.load_user_task`, which reads files with
:mod:`bert_pipeline.data.task_loaders`), on the features and helpers of :mod:`bert_pipeline.data.task_features`. Bad
input raises :class:`bert_pipeline.data.task_features.TaskDataError`, whose message is one line naming the file and
the row (or line).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import DatasetDict

from bert_pipeline.data.corpus_clean import fix_news_mojibake
from bert_pipeline.data.sources import NEWS_ARTICLES, ROTTEN_TOMATOES, SPACY_MODEL
from bert_pipeline.data.task_builders import (
    HEADLINE_MATCH,
    SENTIMENT_LABELS,
    Document,
    build_cloze_qa,
    build_headline_match,
    build_sentiment,
    build_silver_ner,
    read_rotten_tomatoes,
    spacy_entity_finder,
    spacy_tagger,
)
from bert_pipeline.data.task_features import SPLITS, TaskDataError
from bert_pipeline.errors import PipelineError

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- the task sets
DEFAULT_TASKS = ("sentiment", "ner", "qa", HEADLINE_MATCH)
"""The task sets :func:`build_all` builds from the fetched data and the corpus, whatever the params."""
NEWS_SOURCE = "news_articles"
"""The corpus source NER and QA are built from."""


def read_corpus_documents(path: Path, source: str) -> list[Document]:
    """The corpus documents of one ``source`` as :class:`bert_pipeline.data.task_builders.Document` (train and
    validation).

    Raises:
        PipelineError: the corpus folder is missing or malformed (:func:`bert_pipeline.data.corpus.open_corpus`), or
            holds no document of ``source`` in its validation split.
    """
    from bert_pipeline.data.corpus import open_corpus

    dd = open_corpus(path)
    docs = []
    for split in ("train", "validation"):
        ds = dd[split]
        # in memory: a cache file beside the Arrow data would modify the corpus, prepare_corpus's DVC output; only
        # the source column is read to filter, so the other sources' texts are never loaded
        ds = ds.filter(lambda names: [s == source for s in names], batched=True, input_columns=["source"],
                       keep_in_memory=True)
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



def build_all(p: Any, raw: Path, corpus: Path,
              load_user_task: Callable[[Any], tuple[DatasetDict, dict[str, Any]]],
              ) -> dict[str, tuple[DatasetDict, dict[str, Any]]]:
    """Build every task: ``{name: (DatasetDict, task_info)}`` where task_info becomes ``task.json`` (the stage adds
    the kind's main metric).

    Args:
        p: the ``prepare_tasks`` params section (seed, held-out fraction, ``sentiment``/``ner``/``qa`` settings,
            ``user_tasks``), typed by the stage's schema.
        raw: the fetched raw-data folder; corpus: the corpus folder.
        load_user_task: one ``user_tasks`` entry -> its ``DatasetDict`` and ``task.json`` facts (the entry's kind
            loads it).

    Raises:
        PipelineError: bad input (one line naming the file or key), or a task with an empty split.
    """
    for rel in (ROTTEN_TOMATOES, NEWS_ARTICLES, f"{SPACY_MODEL}/config.cfg"):  # fail before the slow part
        if not (raw / rel).is_file():
            raise PipelineError(f"{raw / rel}: not found (run `dvc repro fetch_data` first)")
    docs = read_corpus_documents(corpus, NEWS_SOURCE)  # the corpus is checked before any task is built
    built: dict[str, tuple[DatasetDict, dict[str, Any]]] = {}
    user: dict[str, tuple[DatasetDict, dict[str, Any]]] = {}
    try:
        for spec in p.user_tasks:  # a user's files are read before the slow default sets: a bad row fails at once
            if spec.name in DEFAULT_TASKS:
                raise PipelineError(f"prepare_tasks.user_tasks: name {spec.name!r} is taken by a default task")
            if spec.name in user:
                raise PipelineError(f"prepare_tasks.user_tasks: name {spec.name!r} is given twice")
            dd, info = load_user_task(spec)
            user[spec.name] = (dd, {"kind": spec.kind, "silver": False, "source": spec.hf_dataset or spec.train,
                                    **info})
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
        built[HEADLINE_MATCH] = (pairs, {"kind": "pair_classification", "silver": False,
                                         "source": f"{NEWS_ARTICLES} titles + {corpus} bodies", **info})
        log.info("headline_match (pairs): %s", {k: len(v) for k, v in pairs.items()})

        built.update(user)
    except TaskDataError as exc:
        raise PipelineError(str(exc)) from None
    for name, (dd, _) in built.items():
        missing = [s for s in SPLITS if s not in dd or len(dd[s]) == 0]
        if missing:
            raise PipelineError(f"{name}: split {missing[0]!r} is empty (check prepare_tasks params and the corpus)")
    return built
