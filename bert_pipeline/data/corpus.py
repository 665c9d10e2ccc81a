"""The corpus build and its readers: :func:`build_corpus` reads, cleans, de-duplicates and sentence-splits the
documents of several sources into an Arrow ``DatasetDict`` (streaming: worker processes, a bounded window of
batches, Arrow files written as rows come); :func:`open_corpus` is the one reader of its output that later stages
use, :func:`iter_sentence_batches` and :func:`iter_string_batches` stream one split's sentences or texts in bounded
memory.

Everything here takes plain arguments (paths, ints, strings); the ``prepare_corpus`` stage wires params to it. The
sources are read by :mod:`bert_pipeline.data.corpus_readers` (doc ids ``SOURCE:FILE:LOCATOR``; the Debian texts by
:mod:`bert_pipeline.data.corpus_debian`, the bytes by :mod:`bert_pipeline.data.corpus_files`) and cleaned by
:mod:`bert_pipeline.data.corpus_clean` (normalisation, de-duplication, the document-level split).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bert_pipeline.data.corpus_clean import (
    DocumentRead,
    SourceStats,
    Tally,
    clean_text,
    read_in_order,
    split_of,
)
from bert_pipeline.data.corpus_files import RawDocument, ReadCounter
from bert_pipeline.errors import PipelineError, SettingError

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- the corpus
SPLITS = ("train", "validation")
"""The corpus's splits, by document (:func:`bert_pipeline.data.corpus_clean.split_of`)."""

COLUMNS = ("doc_id", "source", "text", "sentences")
"""The corpus's columns: ``sentences`` is ``list[str]``, the others ``str``."""


SHARD_BYTES = 256 << 20
"""Text characters (documents and sentences) per Arrow file of a split: a new ``data-NNNNN-of-MMMMM.arrow`` after
this many."""

WRITE_BUFFER_BYTES = 8 << 20
"""Text characters of rows held before they are written out as one Arrow record batch."""


def build_corpus(
    readers: Iterable[tuple[str, Callable[[ReadCounter], Iterator[RawDocument]]]],
    out_dir: Path,
    *,
    spacy_model_dir: Path,
    min_words: int,
    max_documents_per_source: int | None,
    max_document_chars: int | None,
    validation_fraction: float,
    split_seed: int,
    sentence_splitter: str,
    chunk_chars: int,
    batch_size: int,
    num_proc: int,
    progress: bool = True,
) -> dict:
    """Read, clean, de-duplicate and sentence-split documents into ``out_dir`` (a fresh folder), streaming;
    return the metrics record.

    The documents flow through once, in reading order: the main process reads them and sends batches of about
    ``batch_size`` chunks (of at most ``chunk_chars`` characters) to ``num_proc`` worker processes, which normalise
    each text (:func:`bert_pipeline.data.corpus_clean.clean_text`) and split it into sentences; the main process
    keeps or drops each document (:class:`bert_pipeline.data.corpus_clean.Tally`: short, duplicate, over
    ``max_documents_per_source``), assigns its split and appends it to that split's Arrow files
    (:class:`CorpusWriter`). At most ``2 * num_proc + 1`` batches are in flight, the de-duplication set lives on
    disk (:class:`bert_pipeline.data.corpus_clean.SeenTexts`) and rows are written every
    :data:`WRITE_BUFFER_BYTES`, so memory does not grow with the corpus: the main process holds about ``(2 * num_proc + 1) * batch_size *
    chunk_chars`` characters of text (three copies at most: raw, normalised, sentences) plus the write buffer,
    and each worker the splitter's model and one batch. A document longer than ``max_document_chars`` is cut into
    parts (:func:`bert_pipeline.data.corpus_files.document_parts`: at a paragraph, else a line, a sentence end, a
    space), each a row of its own (``doc_id`` ``...:part=K``) in the split of the whole document; a user's txt file
    is read part by part, never whole (a reader still holds what its format needs at once: a packaged CSV file,
    one JSON line). The metrics count the documents cut, the parts and the cuts that found no whitespace.
    The output bytes do not depend on ``num_proc``.

    Args:
        readers: ``(source name, reader)`` pairs, in order (see
            :func:`bert_pipeline.data.corpus_clean.clean_documents`).
        out_dir: where the ``DatasetDict`` is saved (splits :data:`SPLITS`, columns :data:`COLUMNS`; the layout of
            ``datasets.DatasetDict.save_to_disk``, loaded by :func:`open_corpus`).
        spacy_model_dir: the spaCy pipeline folder the spaCy sentence splitters load
            (:func:`bert_pipeline.data.sentences.load_splitter`).
        sentence_splitter, chunk_chars, batch_size: see :func:`bert_pipeline.data.sentences.split_documents`.
        num_proc: worker processes (1: all in this process).
        min_words, max_documents_per_source: see :func:`bert_pipeline.data.corpus_clean.clean_documents`.
        max_document_chars: the longest document kept whole (characters; ``None``: no limit).
        validation_fraction, split_seed: see :func:`bert_pipeline.data.corpus_clean.split_of`.

    Returns:
        Documents, sentences, words, bytes, duplicates dropped, replaced (invalid UTF-8) bytes, short documents
        dropped, repaired mojibake, documents cut into parts, parts, hard cuts: in total, ``per_source`` and ``per_split``.

    Raises:
        SettingError: ``chunk_chars`` above the splitter's limit, no document left after filtering (no single
            setting), a split without documents (:func:`check_splits`), or a reader's (a source named ``sources``,
            ``sources[NAME].path``, ...: :mod:`bert_pipeline.data.corpus_readers`).
        PipelineError: a missing source or file, bad content. The caller's ``atomic_dir`` then leaves no output.
    """
    from bert_pipeline.data.sentences import load_splitter

    nlp = load_splitter(spacy_model_dir, sentence_splitter)
    if chunk_chars > nlp.max_length:
        raise SettingError("chunk_chars", f"expected <= {nlp.max_length} (spaCy max_length)")
    tally = Tally(max_documents_per_source)
    per_split = {s: SourceStats() for s in SPLITS}
    writer = CorpusWriter(out_dir)
    log.info("reading, cleaning and splitting into sentences (%s, %d process%s)", sentence_splitter, num_proc,
             "es" if num_proc > 1 else "")
    from tqdm.auto import tqdm

    bar = tqdm(desc="documents", unit="doc", disable=not progress, mininterval=2.0)
    with _Workers(nlp, min_words, chunk_chars, batch_size, num_proc) as workers:
        try:
            batches = _read_batches(read_in_order(readers, tally.stopped, max_document_chars), chunk_chars,
                                     batch_size)
            for batch, results in workers.map(batches):
                for read, (text, words, key, sentences) in zip(batch, results, strict=True):
                    bar.update(read.doc_id is not None and read.source not in tally.stopped)
                    if not tally.offer(read, words, key, text):
                        continue
                    split = split_of(read.document_id or read.doc_id, split_seed, validation_fraction)
                    writer.add(split, read.doc_id, read.source, text, sentences)
                    tally.stats[read.source].sentences += len(sentences)
                    ps = per_split[split]
                    ps.documents += 1
                    ps.sentences += len(sentences)
                    ps.words += words
                    ps.bytes += len(text.encode("utf-8"))
        finally:
            bar.close()
            tally.seen.close()
    kept = sum(s.documents for s in tally.stats.values())
    if not kept:
        raise SettingError(
            "", f"no document left after filtering "
            f"({sum(s.read for s in tally.stats.values())} read, "
            f"{sum(s.dropped_short for s in tally.stats.values())} under min_words={min_words}, "
            f"{sum(s.duplicates_dropped for s in tally.stats.values())} duplicates)"
        )
    check_splits({name: ps.documents for name, ps in per_split.items()}, validation_fraction)
    writer.close()

    totals = SourceStats()
    for stats in tally.stats.values():
        for key, value in stats.as_dict().items():
            setattr(totals, key, getattr(totals, key) + value)
    return {
        **totals.as_dict(),
        "per_source": {name: s.as_dict() for name, s in tally.stats.items()},
        "per_split": {name: {k: v for k, v in s.as_dict().items() if k in ("documents", "sentences", "words", "bytes")}
                      for name, s in per_split.items()},
    }


def _read_batches(reads: Iterator[DocumentRead], chunk_chars: int, batch_size: int) -> Iterator[list[DocumentRead]]:
    """Group documents into batches of about ``batch_size`` chunks (a long document forms a batch of its own)."""
    batch: list[DocumentRead] = []
    size = 0
    for read in reads:
        batch.append(read)
        size += len(read.text) // chunk_chars + 1
        if size >= batch_size:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


_WORKER: dict = {}  # per worker process: the splitter and settings, set by _init_worker


def _init_worker(nlp, min_words: int, chunk_chars: int, batch_size: int) -> None:
    _WORKER.update(nlp=nlp, min_words=min_words, chunk_chars=chunk_chars, batch_size=batch_size)


def _prepare_texts(texts: list[str]) -> list[tuple[str, int, bytes | None, list[str]]]:
    """In a worker: ``(normalised text, words, key, sentences)`` per text; short texts are not split."""
    from bert_pipeline.data.sentences import split_batch

    cleaned = [clean_text(t, _WORKER["min_words"]) for t in texts]
    kept = [text for text, _, key in cleaned if key is not None]
    sentences = iter(split_batch(_WORKER["nlp"], kept, _WORKER["chunk_chars"], _WORKER["batch_size"]))
    return [(text, words, key, next(sentences) if key is not None else []) for text, words, key in cleaned]


class _Workers:
    """Ordered map of :func:`_prepare_texts` over batches of documents, in ``num_proc`` forked processes with at
    most ``2 * num_proc + 1`` batches in flight (``Pool.imap`` would read the whole input ahead), or in this
    process when ``num_proc <= 1``. The pool is forked before the caller imports Arrow (no Arrow thread is
    copied into a worker)."""

    def __init__(self, nlp, min_words: int, chunk_chars: int, batch_size: int, num_proc: int) -> None:
        import multiprocessing

        self._args = (nlp, min_words, chunk_chars, batch_size)
        self._pool = None
        self._window = 2 * num_proc + 1
        if num_proc > 1:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self._pool = multiprocessing.get_context(method).Pool(num_proc, _init_worker, self._args)

    def __enter__(self) -> _Workers:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._pool is not None:
            if exc_type is None:
                self._pool.close()  # every result is in: the workers exit on the pool's sentinel, no signal
            else:
                self._pool.terminate()
            self._pool.join()

    def map(self, batches: Iterator[list[DocumentRead]]) -> Iterator[tuple[list[DocumentRead], list]]:
        """Yield ``(batch, results)`` in input order."""
        from collections import deque

        if self._pool is None:
            _init_worker(*self._args)
            for batch in batches:
                yield batch, _prepare_texts([r.text for r in batch])
            return
        pending: deque = deque()
        for batch in batches:
            pending.append((batch, self._pool.apply_async(_prepare_texts, ([r.text for r in batch],))))
            if len(pending) >= self._window:
                done, result = pending.popleft()
                yield done, result.get()
        while pending:
            done, result = pending.popleft()
            yield done, result.get()


class CorpusWriter:
    """Rows -> the corpus folder (:data:`SPLITS`, :data:`COLUMNS`), split by split as they come; :meth:`close`
    finishes every split's files and writes ``dataset_dict.json``. Memory: one write buffer per split."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._splits: dict[str, _SplitWriter] = {}

    def add(self, split: str, doc_id: str, source: str, text: str, sentences: list[str]) -> None:
        if split not in self._splits:
            self._splits[split] = _SplitWriter(self.out_dir / split, split)
        self._splits[split].add(doc_id, source, text, sentences)

    def close(self) -> None:
        for writer in self._splits.values():
            writer.close()
        (self.out_dir / "dataset_dict.json").write_text(json.dumps({"splits": list(SPLITS)}), encoding="utf-8")


class _SplitWriter:
    """One split's rows -> Arrow files in the layout of ``datasets.Dataset.save_to_disk`` (``data-NNNNN-of-MMMMM.arrow``,
    ``state.json``, ``dataset_info.json``), written as they come: record batches of :data:`WRITE_BUFFER_BYTES` characters,
    a new file every :data:`SHARD_BYTES`. The fingerprint is a hash of the content, as :func:`open_corpus`'s
    readers expect; nothing depends on time or random state."""

    def __init__(self, folder: Path, split: str) -> None:
        import datasets  # after the worker pool is forked

        self.folder, self.split = folder, split
        folder.mkdir(parents=True)
        self.features = datasets.Features({
            "doc_id": datasets.Value("string"), "source": datasets.Value("string"), "text": datasets.Value("string"),
            "sentences": datasets.List(datasets.Value("string")),
        })
        self._digest = hashlib.sha256()
        self._rows: dict[str, list] = {k: [] for k in COLUMNS}
        self._buffered = 0
        self._shard_bytes = 0
        self._files: list[Path] = []
        self._writer = None

    def add(self, doc_id: str, source: str, text: str, sentences: list[str]) -> None:
        self._digest.update("\0".join([doc_id, text, "\x1f".join(sentences), ""]).encode())
        for key, value in zip(COLUMNS, (doc_id, source, text, sentences), strict=True):
            self._rows[key].append(value)
        size = len(text) + sum(len(s) for s in sentences)
        self._buffered += size
        if self._buffered >= WRITE_BUFFER_BYTES:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        from datasets.arrow_writer import ArrowWriter

        if not self._rows["doc_id"]:
            return
        if self._writer is None:
            self._files.append(self.folder / f".shard-{len(self._files):05d}.arrow")
            self._writer = ArrowWriter(features=self.features, path=str(self._files[-1]))
        self._writer.write_table(pa.Table.from_pydict(self._rows, schema=self.features.arrow_schema))
        self._shard_bytes += self._buffered
        self._rows = {k: [] for k in COLUMNS}
        self._buffered = 0
        if self._shard_bytes >= SHARD_BYTES:
            self._close_file()

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.finalize()
            self._writer.close()
            self._writer, self._shard_bytes = None, 0

    def close(self) -> None:
        """Write the last rows, name the files ``data-NNNNN-of-MMMMM.arrow``, and write the split's JSON files."""
        from dataclasses import asdict

        import datasets

        self._flush()
        self._close_file()
        names = [f"data-{i:05d}-of-{len(self._files):05d}.arrow" for i in range(len(self._files))]
        for file, name in zip(self._files, names, strict=True):
            file.rename(self.folder / name)
        state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": self._digest.hexdigest()[:16],
                 "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
                 "_split": self.split}
        (self.folder / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
        info = asdict(datasets.DatasetInfo(features=self.features))
        (self.folder / "dataset_info.json").write_text(json.dumps({k: info[k] for k in sorted(info)}, indent=2),
                                                       encoding="utf-8")


_EMPTY_SPLIT_HINT = ("rebuild it with prepare_corpus.validation_fraction changed or more documents in "
                    "prepare_corpus.sources")


def check_splits(documents: Mapping[str, int], validation_fraction: float) -> None:
    """Fail when a split of the corpus would hold no document (every later stage needs both).

    Args:
        documents: the documents kept per split (:func:`bert_pipeline.data.corpus_clean.split_of`); a split not
            named has none.

    Raises:
        SettingError: ``validation_fraction``, with the documents kept per split and what to change.
    """
    n_val = documents.get("validation", 0)
    n_train = documents.get("train", 0)
    if n_val == 0:
        raise SettingError(
            "validation_fraction", f"no validation document ({n_train} documents kept, "
            f"each in validation with probability {validation_fraction:g}); raise validation_fraction or add "
            "documents to prepare_corpus.sources")
    if n_train == 0:
        raise SettingError(
            "validation_fraction", f"no train document ({n_val} documents kept, all "
            f"in validation at {validation_fraction:g}); lower validation_fraction or add documents to "
            "prepare_corpus.sources")


def open_corpus(path: str | Path, columns: Sequence[str] = COLUMNS):
    """Open a corpus written by :func:`build_corpus` and check what the caller reads.

    Args:
        path: the corpus folder (a saved ``DatasetDict``).
        columns: the columns the caller needs in both splits.

    Returns:
        The ``datasets.DatasetDict`` (memory-mapped), splits :data:`SPLITS`.

    Raises:
        PipelineError: one line naming the folder: missing, not a saved ``DatasetDict``, a split missing or empty,
            or a column missing.
    """
    import datasets

    path = Path(path)
    if not path.exists():
        raise PipelineError(f"{path}: corpus not found (expected prepare_corpus's DatasetDict; run "
                            "`dvc repro prepare_corpus`)")
    for split in SPLITS:  # datasets cannot load a split saved without rows (0 Arrow shards)
        state = path / split / "state.json"
        if state.is_file() and not json.loads(state.read_text(encoding="utf-8")).get("_data_files"):
            raise PipelineError(f"{path}: the {split} split is empty (expected at least one document; "
                                f"{_EMPTY_SPLIT_HINT})")
    try:
        corpus = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise PipelineError(f"{path}: not a saved datasets DatasetDict ({str(exc).splitlines()[0]})") from None
    if not isinstance(corpus, datasets.DatasetDict):
        raise PipelineError(f"{path}: expected a DatasetDict with train/validation splits, got a single Dataset")
    for split in SPLITS:
        if split not in corpus:
            raise PipelineError(f"{path}: expected a {split!r} split, got {sorted(corpus)}")
        missing = [c for c in columns if c not in corpus[split].column_names]
        if missing:
            raise PipelineError(f"{path}: {split} split: expected a {missing[0]!r} column, got "
                                f"{corpus[split].column_names}")
        if len(corpus[split]) == 0:
            raise PipelineError(f"{path}: the {split} split is empty (expected at least one document; "
                                f"{_EMPTY_SPLIT_HINT})")
    return corpus


def _mapped_chunks(files: Sequence[Path], column: str) -> Iterator[tuple[Any, Callable[[], None]]]:
    """Each chunk of ``column`` in the Arrow stream files (``datasets``' layout), in order, as zero-copy views of a
    memory map of its file, with a function that releases the map's resident pages (``madvise(MADV_DONTNEED)``;
    call it once the chunk's values are copied out: a page read once stays resident otherwise, and counts in the
    process's RSS). A file's map is closed when the next file is opened, or with the last view of it."""
    import mmap

    import pyarrow as pa

    advice = getattr(mmap, "MADV_DONTNEED", None)
    for file in files:
        with open(file, "rb") as fh:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

        def release(mapped: mmap.mmap = mapped) -> None:
            if advice is not None:
                mapped.madvise(advice)

        chunks = pa.ipc.open_stream(pa.py_buffer(mapped)).read_all().column(column).chunks
        while chunks:
            yield chunks.pop(0), release
        try:
            mapped.close()
        except BufferError:  # the caller still holds a view: the map goes with the last reference
            pass


def split_files(path: str | Path, split: str) -> list[Path]:
    """The Arrow files of one split of a corpus folder (:func:`build_corpus`'s layout), in row order."""
    folder = Path(path) / split
    return [folder / f["filename"] for f in json.loads((folder / "state.json").read_text("utf-8"))["_data_files"]]


def iter_string_batches(files: Sequence[Path], column: str, max_rows: int, max_bytes: int) -> Iterator[list[str]]:
    """Stream a string column of Arrow stream files (``datasets``' layout) in lists of at most ``max_rows`` strings
    holding at most ``max_bytes`` UTF-8 bytes together (a longer string is a list of its own), in row order.

    Memory: one list of strings, whatever the files' size: the files are memory-mapped and their pages released
    after each list (:func:`_mapped_chunks`).

    Raises:
        ValueError: ``max_rows`` or ``max_bytes`` < 1.
    """
    import numpy as np
    import pyarrow.compute as pc

    if max_rows < 1 or max_bytes < 1:
        raise ValueError(f"max_rows, max_bytes: expected >= 1, got {max_rows}, {max_bytes}")
    for chunk, release in _mapped_chunks(files, column):
        ends = np.cumsum(pc.binary_length(chunk).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        row = 0
        while row < len(chunk):
            before = int(ends[row - 1]) if row else 0
            # the rows from `row` that fit in max_bytes; at least one
            take = int(np.searchsorted(ends[row:row + max_rows], before + max_bytes, side="right")) or 1
            yield chunk.slice(row, take).to_pylist()
            release()
            row += take


def iter_sentence_batches(path: str | Path, split: str, start: int, end: int,
                          max_bytes: int) -> Iterator[list[tuple[int, list[str]]]]:
    """Stream the ``sentences`` of documents ``[start, end)`` of one split of a corpus, in bounded batches.

    Yields batches in document and sentence order; a batch is a list of ``(document index, sentences)`` whose
    sentences hold at most ``max_bytes`` UTF-8 bytes together (a longer sentence is a batch of its own). A document
    may continue over several batches; one without sentences appears once with ``[]``.

    Memory: the split's Arrow files are memory-mapped, only the sentences of the current batch are turned into
    Python strings, and the mapping's pages are released after each batch (:func:`_mapped_chunks`), so resident
    memory holds about one batch, not the document (a one-line 200 MB document is one row). The folder must be one
    :func:`open_corpus` accepts; rows are read in the order ``datasets.load_from_disk`` gives them.

    Raises:
        ValueError: ``max_bytes`` < 1.
    """
    import numpy as np
    import pyarrow as pa

    if max_bytes < 1:
        raise ValueError(f"max_bytes: expected >= 1, got {max_bytes}")
    batch: list[tuple[int, list[str]]] = []
    size = 0
    row = 0
    for chunk, release in _mapped_chunks(split_files(path, split), "sentences"):
        if row >= end:
            break
        first, last = max(start, row), min(end, row + len(chunk))
        lists = chunk.offsets.to_numpy()  # sentence ranges in chunk.values, the chunk's own offset applied
        values = chunk.values
        width = np.int64 if pa.types.is_large_string(values.type) else np.int32
        ends = np.frombuffer(values.buffers()[1], dtype=width)[values.offset:values.offset + len(values) + 1]
        for doc in range(first, last):
            lo, hi = int(lists[doc - row]), int(lists[doc - row + 1])
            if lo == hi:
                batch.append((doc, []))
            while lo < hi:
                # the sentences from lo that fit in what is left of the batch; at least one in an empty batch
                take = int(np.searchsorted(ends[lo + 1:hi + 1], int(ends[lo]) + max_bytes - size, side="right"))
                take = take or (0 if batch else 1)
                if take:
                    batch.append((doc, values.slice(lo, take).to_pylist()))
                    size += int(ends[lo + take]) - int(ends[lo])
                    lo += take
                if lo < hi or size >= max_bytes:
                    yield batch
                    batch, size = [], 0
                    release()
        row += len(chunk)
        del chunk, values, ends, lists
    if batch:
        yield batch
