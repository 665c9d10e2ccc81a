"""The corpus's documents as read and the bytes under them: :class:`RawDocument` and :class:`ReadCounter`, UTF-8
decoding with each invalid byte replaced and counted, and (possibly compressed) files read in bounded blocks.

Reading is streamed in bounded byte blocks, so a user's file that is one 10 MB line without a newline is read with
memory of the order of the document itself, never of a whole multi-document file.
"""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BLOCK_BYTES = 1 << 20  # bytes read per step from a file


# ---------------------------------------------------------------------------------------------- records
@dataclass(frozen=True)
class RawDocument:
    """One document as read: ``doc_id`` (stable, traceable), ``source`` (source name), ``text`` (decoded)."""

    doc_id: str
    source: str
    text: str


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

    with open_binary(path) as fh:
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
