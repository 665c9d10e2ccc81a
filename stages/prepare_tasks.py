"""Stage ``prepare_tasks``: the labelled task sets ``data/tasks/{sentiment,ner,qa}/`` (+ user tasks).

- sentiment: Rotten Tomatoes snippets from ``data/raw/`` (fresh = positive), split by film.
- ner: *silver* BIO labels from the fetched spaCy model over news sentences of ``data/corpus/``.
- qa: cloze questions (Hermann et al. 2015) from news headlines in ``data/raw/`` and bodies in ``data/corpus/``.

NER and QA validation/test come only from articles in the corpus's validation split. Each task folder holds a
``DatasetDict`` (train/validation/test) and ``task.json`` (kind, label names, main metric, silver flag), which
``stages.finetune`` reads. ``metrics/tasks.json`` records sizes, label counts and average lengths.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from datasets import DatasetDict, load_from_disk

from bert_pipeline.console import run_main
from bert_pipeline.data import tasks as T
from bert_pipeline.data.corpus import fix_news_mojibake
from bert_pipeline.data.sources import NEWS_ARTICLES, ROTTEN_TOMATOES, SPACY_MODEL
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, write_json
from stages.params import PrepareTasksParams, UserTask, load_params

log = logging.getLogger(__name__)

RAW = Path("data/raw")
CORPUS = Path("data/corpus")
OUT = Path("data/tasks")
METRICS = Path("metrics/tasks.json")
NEWS_SOURCE = "news_articles"
MAIN_METRIC = {"classification": "accuracy", "ner": "f1", "qa": "f1"}


def read_corpus_documents(path: Path, source: str) -> list[T.Document]:
    """The corpus documents of one ``source`` as :class:`bert_pipeline.data.tasks.Document` (train and validation).

    Raises:
        PipelineError: the corpus folder is missing or lacks a split/column.
    """
    if not path.exists():
        raise PipelineError(f"{path}: corpus not found (run the prepare_corpus stage first)")
    dd = load_from_disk(str(path))
    docs = []
    for split in ("train", "validation"):
        if split not in dd:
            raise PipelineError(f"{path}: split {split!r} missing (found {', '.join(dd)})")
        ds = dd[split]
        for col in ("doc_id", "source", "text", "sentences"):
            if col not in ds.column_names:
                raise PipelineError(f"{path}/{split}: column {col!r} missing")
        # in memory: a cache file beside the Arrow data would modify data/corpus, prepare_corpus's output
        ds = ds.filter(lambda b: [s == source for s in b["source"]], batched=True, keep_in_memory=True)
        for doc_id, text, sents in zip(ds["doc_id"], ds["text"], ds["sentences"], strict=True):
            docs.append(T.Document(doc_id=doc_id, split=split, text=text, sentences=tuple(sents)))
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


def build_user_task(spec: UserTask) -> tuple[DatasetDict, dict[str, Any]]:
    """Load one user task (files per split or a Hugging Face dataset).

    Raises:
        PipelineError: a missing split file, or bad rows (one line naming file and row).
    """
    if spec.hf_dataset:
        dd = T.load_hf_task(spec.hf_dataset, spec.hf_config)
        info: dict[str, Any] = {}
        if spec.kind == "ner":
            info["label_names"] = dd["train"].features["ner_tags"].feature.names
        elif spec.kind == "classification":
            info["label_names"] = dd["train"].features[spec.label_column].names
        return dd, info
    paths = {s: getattr(spec, s) for s in T.SPLITS}
    for split, p in paths.items():
        if not p or not Path(p).exists():
            raise PipelineError(f"prepare_tasks.user_tasks[{spec.name}].{split}: file {p!r} not found")
    if spec.kind == "classification":
        parts = {s: T.load_classification_file(p, spec.text_column, spec.label_column) for s, p in paths.items()}
        names = sorted({n for d in parts.values() for n in d.features["label"].names})
        for s, d in parts.items():
            if d.features["label"].names != names:
                raise PipelineError(f"{paths[s]}: labels {d.features['label'].names} differ from the other splits' {names}")
        return DatasetDict(parts), {"label_names": names}
    if spec.kind == "ner":
        read = {s: T.load_conll(p) for s, p in paths.items()}
        names = T.conll_label_names(*[tags for _, tags in read.values()])
        return DatasetDict({s: T.ner_dataset(tok, tags, names, s) for s, (tok, tags) in read.items()}), {"label_names": names}
    return DatasetDict({s: T.load_squad(p) for s, p in paths.items()}), {}


def describe(dd: DatasetDict, kind: str) -> dict[str, Any]:
    """Sizes, label counts and average lengths (words) per split."""
    out: dict[str, Any] = {}
    for split, ds in dd.items():
        entry: dict[str, Any] = {"examples": len(ds)}
        if kind == "classification":
            entry["label_counts"] = T.label_counts(ds, "label")
            lens = [len(t.split()) for t in ds["text"]]
        elif kind == "ner":
            entry["label_counts"] = T.label_counts(ds, "ner_tags")
            lens = [len(t) for t in ds["tokens"]]
        else:
            lens = [len(c.split()) for c in ds["context"]]
            entry["avg_question_words"] = round(sum(len(q.split()) for q in ds["question"]) / max(len(ds), 1), 2)
        entry["avg_words"] = round(sum(lens) / max(len(lens), 1), 2)
        out[split] = entry
    return out


def build_all(p: PrepareTasksParams, raw: Path, corpus: Path) -> dict[str, tuple[DatasetDict, dict[str, Any]]]:
    """Build every task: ``{name: (DatasetDict, task_info)}`` where task_info becomes ``task.json``."""
    built: dict[str, tuple[DatasetDict, dict[str, Any]]] = {}
    try:
        rows = T.read_rotten_tomatoes(raw / ROTTEN_TOMATOES)
        sent, info = T.build_sentiment(rows, p.sentiment.validation_fraction, p.sentiment.test_fraction, p.seed)
        built["sentiment"] = (sent, {"kind": "classification", "label_names": list(T.SENTIMENT_LABELS),
                                     "silver": False, "source": ROTTEN_TOMATOES, **info})
        log.info("sentiment: %s", {k: len(v) for k, v in sent.items()})

        docs = read_corpus_documents(corpus, NEWS_SOURCE)
        tagger = T.spacy_tagger(raw / SPACY_MODEL, p.spacy_batch_size)
        sizes = p.ner.sentences.model_dump()
        ner, info = T.build_silver_ner(docs, tagger, p.ner.entity_types, p.ner.other_types, sizes, p.ner.min_words,
                                       p.ner.max_words, p.heldout_validation_fraction, p.seed)
        built["ner"] = (ner, {"kind": "ner", "silver": True, "source": f"{corpus} ({NEWS_SOURCE}), spaCy {SPACY_MODEL}",
                              **info})
        log.info("ner (silver): %s", {k: len(v) for k, v in ner.items()})

        heads = news_headlines(raw / NEWS_ARTICLES, [d.doc_id for d in docs])
        finder = T.spacy_entity_finder(raw / SPACY_MODEL, p.spacy_batch_size)
        qa, info = T.build_cloze_qa(docs, heads, finder, p.qa.answer_types, p.qa.passage_words,
                                    p.qa.max_questions_per_article, p.qa.questions.model_dump(), p.qa.placeholder,
                                    p.heldout_validation_fraction, p.seed)
        built["qa"] = (qa, {"kind": "qa", "silver": False, "cloze": True, "source": f"{NEWS_ARTICLES} + {corpus}",
                            **info})
        log.info("qa (cloze): %s", {k: len(v) for k, v in qa.items()})

        for spec in p.user_tasks:
            if spec.name in built:
                raise PipelineError(f"prepare_tasks.user_tasks: name {spec.name!r} is taken by a default task")
            dd, info = build_user_task(spec)
            built[spec.name] = (dd, {"kind": spec.kind, "silver": False, "source": spec.hf_dataset or spec.train, **info})
    except T.TaskDataError as exc:
        raise PipelineError(str(exc)) from None
    for name, (dd, info) in built.items():
        missing = [s for s in T.SPLITS if s not in dd or len(dd[s]) == 0]
        if missing:
            raise PipelineError(f"data/tasks/{name}: split {missing[0]!r} is empty (check prepare_tasks params and the corpus)")
        info["main_metric"] = MAIN_METRIC[info["kind"]]
    return built


def main() -> None:
    params = load_params().prepare_tasks
    built = build_all(params, RAW, CORPUS)
    report: dict[str, Any] = {}
    with atomic_dir(OUT) as tmp:
        for name, (dd, info) in built.items():
            dd.save_to_disk(str(tmp / name))
            write_json(tmp / name / "task.json", info)
            report[name] = {"kind": info["kind"], "silver": info["silver"], "splits": describe(dd, info["kind"])}
    write_json(METRICS, report)
    log.info("wrote %s: %s", OUT, ", ".join(built))


if __name__ == "__main__":
    run_main(main)
