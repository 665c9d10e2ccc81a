"""Cleaning the corpus's documents: text normalisation and the NewsArticles mojibake repair, doc ids parsed back,
the de-duplication key and set (on disk), the keep/drop rules and counters applied in reading order
(:func:`clean_documents`, and :func:`bert_pipeline.data.corpus.build_corpus` while streaming), and each document's
train/validation split.
"""

from __future__ import annotations

import hashlib
import logging
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bert_pipeline.data.bounded import HARD
from bert_pipeline.data.corpus_files import RawDocument, ReadCounter, document_parts

log = logging.getLogger(__name__)


@dataclass
class SourceStats:
    """Counters for one source (all ints; bytes are UTF-8 bytes).

    ``read``, ``dropped_short``, ``duplicates_dropped`` and ``documents`` count what the corpus holds as documents:
    a document over ``max_document_chars`` counts as its parts. ``split_documents`` counts the documents cut into
    parts, ``parts`` the parts read, ``hard_cuts`` the cuts that found no whitespace within the limit (a word cut).
    """

    read: int = 0
    replaced_bytes: int = 0
    mojibake_fixed: int = 0
    dropped_short: int = 0
    duplicates_dropped: int = 0
    documents: int = 0
    words: int = 0
    bytes: int = 0
    sentences: int = 0
    split_documents: int = 0
    parts: int = 0
    hard_cuts: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


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


@dataclass(frozen=True)
class DocRef:
    """A parsed doc id: ``source``, ``file`` (or hub dataset path) and ``locators`` such as ``{"row": "17"}``."""

    source: str
    file: str
    locators: dict[str, str]


def parse_doc_id(doc_id: str) -> DocRef:
    """Split a doc id made by the readers (:mod:`bert_pipeline.data.corpus_readers`) back into its parts.

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
class DocumentRead:
    """One document (or part of one) as read, with the invalid bytes and repairs its reader counted while reading it.

    ``doc_id`` is ``None`` for the counts a source's reader made after its last document; ``document_id`` is the
    whole document's id (the split is drawn from it, so a document's parts stay together), ``part`` and ``cut`` as
    :class:`bert_pipeline.data.corpus_files.RawDocument`'s.
    """

    source: str
    doc_id: str | None
    text: str
    replaced_bytes: int
    mojibake_fixed: int
    document_id: str | None = None
    part: int | None = None
    cut: str | None = None


def read_in_order(sources: Iterable[tuple[str, Callable[[ReadCounter], Iterator[RawDocument]]]],
                  stopped: set[str], max_document_chars: int | None = None) -> Iterator[DocumentRead]:
    """Every source's documents in order; a source named in ``stopped`` (filled by the consumer) is left.

    A whole document longer than ``max_document_chars`` that a reader had to hold (a CSV cell, a JSON line) is cut
    into parts here (:func:`bert_pipeline.data.corpus_files.document_parts`), so what follows holds at most that
    much per document; ``None``: no limit.
    """
    for name, reader in sources:
        counter = ReadCounter()
        replaced = fixed = 0
        for read in reader(counter):
            if name in stopped:
                break
            parts = ([read] if max_document_chars is None or read.part is not None
                     or len(read.text) <= max_document_chars
                     else document_parts(read.doc_id, read.source, [read.text], max_document_chars))
            for doc in parts:
                yield DocumentRead(name, doc.doc_id, doc.text, counter.replaced_bytes - replaced,
                                   counter.mojibake_fixed - fixed, doc.document_id, doc.part, doc.cut)
                replaced, fixed = counter.replaced_bytes, counter.mojibake_fixed
        else:
            yield DocumentRead(name, None, "", counter.replaced_bytes - replaced, counter.mojibake_fixed - fixed)


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


class Tally:
    """The keep/drop rules and counters of :func:`clean_documents` and
    :func:`bert_pipeline.data.corpus.build_corpus`, applied in reading order in one process (so the output does not
    depend on how many processes cleaned the texts)."""

    def __init__(self, max_documents_per_source: int | None) -> None:
        self.stats: dict[str, SourceStats] = {}
        self.stopped: set[str] = set()
        self.seen = SeenTexts()
        self._max = max_documents_per_source

    def offer(self, read: DocumentRead, words: int, key: bytes | None, text: str) -> bool:
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
        if read.part is not None:
            stats.parts += 1
            stats.split_documents += read.part == 0
            stats.hard_cuts += read.cut == HARD
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
        sources: ``(name, reader)`` pairs; ``reader(counter)`` yields
            :class:`bert_pipeline.data.corpus_files.RawDocument` and adds replaced bytes / repairs to ``counter``.
        min_words: documents with fewer whitespace words after normalisation are dropped (an empty document
            always is).
        max_documents_per_source: stop reading a source after this many kept documents (``None``: all).

    Exact duplicates (same :func:`text_hash` of normalised text, across all sources) are dropped; the first
    occurrence in reading order wins. :func:`bert_pipeline.data.corpus.build_corpus` applies the same rules while
    streaming.
    """
    tally = Tally(max_documents_per_source)
    documents = []
    try:
        for read in read_in_order(sources, tally.stopped):
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
