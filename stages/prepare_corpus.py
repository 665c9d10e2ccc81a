"""Stage ``prepare_corpus``: documents -> clean, de-duplicated, sentence-split corpus (Arrow ``DatasetDict``).

Reads the sources of ``prepare_corpus.sources`` (packaged ones from ``data/raw/`` by name, user files by glob,
Hugging Face datasets by name) and builds the corpus with :func:`bert_pipeline.data.corpus.build_corpus`:

- ``data/corpus/``: ``DatasetDict`` with splits ``train``/``validation`` (by a seeded hash of each doc id) and
  columns ``doc_id``, ``source``, ``text``, ``sentences`` (``list[str]``);
- ``metrics/corpus.json``: documents, sentences, words, bytes, duplicates dropped, replaced (invalid UTF-8)
  bytes, short documents dropped, repaired mojibake, documents cut into parts (``max_document_chars``), parts and
  hard cuts, in total, per source and per split.

Same inputs and params give byte-identical files (the Arrow fingerprint is a hash of the content).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.data import corpus, corpus_readers
from bert_pipeline.data.corpus_files import RawDocument, ReadCounter
from bert_pipeline.data.sources import SPACY_MODEL
from bert_pipeline.io import atomic_dir, write_json
from stages import require_inputs, settings_from
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.prepare_corpus import FileSource, PrepareCorpusParams, PrepareCorpusView

log = logging.getLogger(__name__)

RAW_DIR = Path("data/raw")
CORPUS_DIR = Path("data/corpus")
METRICS = Path("metrics/corpus.json")

Reader = Callable[[ReadCounter], Iterator[RawDocument]]


def source_readers(params: PrepareCorpusParams, raw_dir: Path, root: Path) -> list[tuple[str, Reader]]:
    """``(name, reader)`` pairs for :func:`bert_pipeline.data.corpus.build_corpus`, in params order.

    Raises:
        PipelineError: a packaged source whose file or folder is missing, naming the ``fetch_data.packages`` entry
            for a Debian one (checked before the slow part starts).
    """
    readers: list[tuple[str, Reader]] = []
    for src in params.sources:
        if isinstance(src, str):
            missing = corpus_readers.packaged_missing(src, raw_dir)
            if missing is not None:
                raise missing
            readers.append((src, lambda counter, n=src: corpus_readers.read_packaged(n, raw_dir, counter)))
        elif isinstance(src, FileSource):
            readers.append((src.name, lambda counter, s=src: corpus_readers.read_files(
                s.name, s.path, s.format, root, counter, text_field=s.text_field, unit=s.unit,
                max_document_chars=params.max_document_chars)))
        else:
            readers.append((src.name, lambda counter, s=src: corpus_readers.read_hub(
                s.name, s.hf_dataset, s.hf_config, s.split, s.text_field)))
    return readers


def main() -> None:
    require_inputs("prepare_corpus")
    params = load_view(PrepareCorpusView).prepare_corpus
    readers = source_readers(params, RAW_DIR, Path("."))
    with atomic_dir(CORPUS_DIR) as tmp, settings_from("prepare_corpus"):
        metrics = corpus.build_corpus(
            readers, tmp, spacy_model_dir=RAW_DIR / SPACY_MODEL,
            **params.model_dump(exclude={"sources"}))
        write_json(METRICS, metrics)
        write_headline("corpus", {"corpus": {"documents": metrics["documents"], "words": metrics["words"]}})
    log.info("corpus: %d documents, %d sentences, %d words (train %d / validation %d documents)",
             metrics["documents"], metrics["sentences"], metrics["words"],
             metrics["per_split"]["train"]["documents"], metrics["per_split"]["validation"]["documents"])


if __name__ == "__main__":
    run_main(main)
