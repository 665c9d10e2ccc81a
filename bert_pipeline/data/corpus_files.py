"""The corpus's documents as read and the bytes under them: :class:`RawDocument` and :class:`ReadCounter`, UTF-8
decoding with each invalid byte replaced and counted, and (possibly compressed) files read in bounded blocks.

Reading is streamed in bounded byte blocks, and a document longer than a limit is yielded in parts
(:func:`document_parts`, cut where :mod:`bert_pipeline.data.bounded` says), so a user's file that is one 1 GB line
is read with memory of the order of the limit, never of the document or of a whole multi-document file.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bert_pipeline.data.bounded import DOCUMENT_BOUNDARIES, iter_pieces

BLOCK_BYTES = 1 << 20  # bytes read per step from a file


# ---------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class RawDocument:
    """One document as read: ``doc_id`` (stable, traceable), ``source`` (source name), ``text`` (decoded).

    A document longer than the reader's limit comes as parts (:func:`document_parts`): ``doc_id`` is the
    document's id with ``:part=K`` appended, ``part`` is ``K`` (from 0), ``cut`` the boundary the part ended at
    (:mod:`bert_pipeline.data.bounded`; ``None`` for the last part). A whole document has ``part`` and ``cut``
    ``None``.
    """

    doc_id: str
    source: str
    text: str
    part: int | None = None
    cut: str | None = None

    @property
    def document_id(self) -> str:
        """The id of the whole document (``doc_id`` without ``:part=K``): what its split is drawn from."""
        return self.doc_id if self.part is None else self.doc_id.removesuffix(f":part={self.part}")


def document_parts(doc_id: str, source: str, stream: Iterable[str], max_chars: int | None) -> Iterator[RawDocument]:
    """The document whose text ``stream`` yields in pieces, whole or in parts of at most ``max_chars`` characters.

    Args:
        doc_id, source: the document's id and source name.
        stream: its text in consecutive pieces (decoded blocks, or ``[text]``).
        max_chars: the longest part (characters); ``None`` joins the stream into one document, however long.

    Yields:
        One :class:`RawDocument` (``part`` ``None``) when the text fits, else its parts in order, cut at a paragraph,
        then a line, a sentence end or a space (:data:`bert_pipeline.data.bounded.DOCUMENT_BOUNDARIES`). Nothing is
        dropped: the parts concatenate to the text.
    """
    if max_chars is None:
        yield RawDocument(doc_id, source, "".join(stream))
        return
    pieces = iter_pieces(stream, max_chars, DOCUMENT_BOUNDARIES)
    text, cut = next(pieces)
    if cut is None:
        yield RawDocument(doc_id, source, text)
        return
    yield RawDocument(f"{doc_id}:part=0", source, text, 0, cut)
    for part, (text, cut) in enumerate(pieces, 1):
        yield RawDocument(f"{doc_id}:part={part}", source, text, part, cut)


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


def open_binary(path: Path) -> io.BufferedIOBase:
    """Open a file for binary reading, transparently decompressing ``.gz`` and ``.bz2``."""
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    if path.suffix == ".bz2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def read_text_file(path: Path, counter: ReadCounter, block_bytes: int = BLOCK_BYTES) -> str:
    """Read a whole (possibly compressed) text file, decoding in blocks; see :func:`iter_decoded`."""
    with open_binary(path) as fh:
        return "".join(iter_decoded(fh, counter, block_bytes))


def iter_blocks(path: Path, counter: ReadCounter, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[int, Iterator[str]]]:
    """Yield ``(block_index, pieces)`` for each blank-line-separated block of a text file, streaming: ``pieces``
    yields the block's text (its lines joined by ``\\n``) in consecutive pieces; it is read lazily, so take what
    you need of it before asking for the next block (the rest is then skipped).

    A block is a run of lines without an empty (whitespace-only) line; block indices count every non-empty block
    from 0. Memory is bounded by about ``block_bytes``, whatever the length of a line or a block: the file is
    never held whole, nor a block, nor a line (feed ``pieces`` to :func:`document_parts` to bound the document).
    """
    events = _block_events(path, counter, block_bytes)
    index = 0
    for first in events:

        def block(first: str = first) -> Iterator[str]:
            yield first
            for event in events:
                if event is None:
                    return
                yield event

        pieces = block()
        yield index, pieces
        for _ in pieces:
            pass
        index += 1


def _block_events(path: Path, counter: ReadCounter, block_bytes: int) -> Iterator[str | None]:
    """The blocks of a text file as a stream of text pieces, ``None`` after each block (see :func:`iter_blocks`).

    The whitespace before a line's first non-space character is held until that character comes (a whitespace-only
    line is blank and ends the block); past ``block_bytes`` characters only the last ``block_bytes`` are held, which
    the corpus's normalisation reads the same (a run of spaces is one space).
    """
    lead = ""  # the current line's whitespace so far, before any content
    has_content = False  # the current line has a non-space character
    block_open = False  # the current block has a line with content
    with open_binary(path) as fh:
        for piece in iter_decoded(fh, counter, block_bytes):
            segments = piece.split("\n")
            for i, segment in enumerate(segments):
                if has_content:
                    if segment:
                        yield segment
                elif segment.strip():
                    if block_open:
                        yield "\n"
                    yield lead + segment
                    lead, has_content, block_open = "", True, True
                else:
                    lead = (lead + segment)[-block_bytes:]
                if i < len(segments) - 1:  # a line break follows this segment
                    if not has_content and block_open:
                        yield None
                        block_open = False
                    lead, has_content = "", False
    if block_open:
        yield None
