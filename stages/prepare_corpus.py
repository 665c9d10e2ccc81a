"""Stage ``prepare_corpus``: documents -> clean, de-duplicated, sentence-split corpus (Arrow ``DatasetDict``).

Reads the sources of ``params.yaml`` ``prepare_corpus.sources`` (packaged ones from ``data/raw/`` by name, user
files by glob, Hugging Face datasets by name), cleans and de-duplicates them (``bert_pipeline.data.corpus``), splits sentences
(``bert_pipeline.data.sentences``), assigns each document to ``train`` or ``validation`` by a seeded hash of its id, and writes

- ``data/corpus/``: ``DatasetDict`` (``save_to_disk``) with splits ``train``/``validation`` and columns ``doc_id``,
  ``source``, ``text``, ``sentences`` (``list[str]``);
- ``metrics/corpus.json``: documents, sentences, words, bytes, duplicates dropped, replaced (invalid UTF-8)
  bytes, short documents dropped, repaired mojibake, in total, per source and per split.

Same inputs and params give byte-identical files (the Arrow fingerprint is a hash of the content).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.data import corpus as C
from bert_pipeline.data.sentences import load_splitter, split_documents
from bert_pipeline.data.sources import SPACY_MODEL
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, write_json
from stages.params import FileSource, HubSource, PrepareCorpusParams, load_params

log = logging.getLogger(__name__)

RAW_DIR = Path("data/raw")
CORPUS_DIR = Path("data/corpus")
METRICS = Path("metrics/corpus.json")
SPLITS = ("train", "validation")


def source_readers(
    params: PrepareCorpusParams, raw_dir: Path, root: Path
) -> list[tuple[str, Callable[[C.ReadCounter], Iterator[C.RawDocument]]]]:
    """``(name, reader)`` pairs for :func:`bert_pipeline.data.corpus.clean_documents`, in params order."""
    readers = []
    for src in params.sources:
        if isinstance(src, str):
            readers.append((src, lambda counter, n=src: C.read_packaged(n, raw_dir, counter)))
        elif isinstance(src, FileSource):
            readers.append((src.name, lambda counter, s=src: C.read_files(
                s.name, s.path, s.format, root, counter, text_field=s.text_field, unit=s.unit)))
        elif isinstance(src, HubSource):
            readers.append((src.name, lambda counter, s=src: C.read_hub(
                s.name, s.hf_dataset, s.hf_config, s.split, s.text_field)))
    return readers


def build_corpus(
    params: PrepareCorpusParams, raw_dir: Path, root: Path, out_dir: Path, progress: bool = True
) -> dict:
    """Run the whole stage into ``out_dir`` (a fresh directory); return the metrics record.

    Raises:
        PipelineError: a missing source or file, bad content, or no document left after filtering.
    """
    for src in params.sources:  # fail fast on a packaged source that is missing, before the slow part
        if isinstance(src, str) and src in C.PACKAGED and not (raw_dir / C.PACKAGED[src].path).is_file():
            raise PipelineError(f"{raw_dir / C.PACKAGED[src].path}: packaged source {src!r} not found "
                             "(run `dvc repro fetch_data` first)")
    cleaned = C.clean_documents(source_readers(params, raw_dir, root), params.min_words,
                                params.max_documents_per_source)
    docs = cleaned.documents
    if not docs:
        read = sum(s.read for s in cleaned.stats.values())
        raise PipelineError(
            f"params.yaml: prepare_corpus: no document left after filtering ({read} read, "
            f"{sum(s.dropped_short for s in cleaned.stats.values())} under min_words={params.min_words}, "
            f"{sum(s.duplicates_dropped for s in cleaned.stats.values())} duplicates)"
        )
    nlp = load_splitter(raw_dir / SPACY_MODEL, params.sentence_splitter)
    log.info("splitting %d documents into sentences (%s, %d processes)", len(docs), params.sentence_splitter,
             params.num_proc)
    columns: dict[str, dict[str, list]] = {s: {"doc_id": [], "source": [], "text": [], "sentences": []}
                                           for s in SPLITS}
    per_split = {s: C.SourceStats() for s in SPLITS}
    sentence_lists = split_documents(nlp, (d.text for d in docs), params.chunk_chars, params.batch_size,
                                     params.num_proc, progress=progress, total=len(docs))
    for doc, sentences in zip(docs, sentence_lists, strict=True):
        split = C.split_of(doc.doc_id, params.split_seed, params.validation_fraction)
        col = columns[split]
        col["doc_id"].append(doc.doc_id)
        col["source"].append(doc.source)
        col["text"].append(doc.text)
        col["sentences"].append(sentences)
        cleaned.stats[doc.source].sentences += len(sentences)
        ps = per_split[split]
        ps.documents += 1
        ps.sentences += len(sentences)
        ps.words += C.count_words(doc.text)
        ps.bytes += len(doc.text.encode("utf-8"))

    import datasets  # after the worker pool is gone: no Arrow threads exist when the workers fork
    import pyarrow as pa

    features = datasets.Features({
        "doc_id": datasets.Value("string"), "source": datasets.Value("string"), "text": datasets.Value("string"),
        "sentences": datasets.List(datasets.Value("string")),
    })
    splits = {}
    for name in SPLITS:
        table = pa.Table.from_pydict(columns[name], schema=features.arrow_schema)
        digest = hashlib.sha256()  # content hash as the datasets fingerprint: no random state in state.json
        for doc_id, text, sents in zip(*(columns[name][k] for k in ("doc_id", "text", "sentences")), strict=True):
            digest.update("\0".join([doc_id, text, "\x1f".join(sents), ""]).encode())
        splits[name] = datasets.Dataset(table, info=datasets.DatasetInfo(features=features),
                                        split=datasets.NamedSplit(name), fingerprint=digest.hexdigest()[:16])
    datasets.DatasetDict(splits).save_to_disk(str(out_dir))

    totals = C.SourceStats()
    for stats in cleaned.stats.values():
        for key, value in stats.as_dict().items():
            setattr(totals, key, getattr(totals, key) + value)
    return {
        **totals.as_dict(),
        "per_source": {name: s.as_dict() for name, s in cleaned.stats.items()},
        "per_split": {name: {k: v for k, v in s.as_dict().items() if k in ("documents", "sentences", "words", "bytes")}
                      for name, s in per_split.items()},
    }


def main() -> None:
    params = load_params().prepare_corpus
    with atomic_dir(CORPUS_DIR) as tmp:
        metrics = build_corpus(params, RAW_DIR, Path("."), tmp)
        write_json(METRICS, metrics)
    log.info("corpus: %d documents, %d sentences, %d words (train %d / validation %d documents)",
             metrics["documents"], metrics["sentences"], metrics["words"],
             metrics["per_split"]["train"]["documents"], metrics["per_split"]["validation"]["documents"])


if __name__ == "__main__":
    run_main(main)
