r"""Long texts in bounded pieces: where to cut a text that is longer than a limit, and a streaming cutter, so that no
stage holds a user's longest document whole.

Two sets of boundaries, tried in order inside the second half of the window (so every piece is at least half the
limit, except the last):

- :data:`DOCUMENT_BOUNDARIES` for the corpus (``prepare_corpus`` cuts a document into parts): a blank line
  (paragraph), a line break, a sentence end (``.``, ``!`` or ``?`` before whitespace), any whitespace. The cut comes
  after the whitespace, which the corpus's normalisation strips from each part.
- :data:`WORD_BOUNDARIES` for the tokenizer trainers (a long text fed in pieces): a space before a non-space
  character, cut before the space. Every pre-tokenizer the pipeline trains with (BERT's whitespace and punctuation
  split, byte-level BPE's GPT-2 pattern with ``add_prefix_space``, Unigram's ``Metaspace`` with
  ``prepend_scheme="always"``) then sees exactly the pre-tokens it sees in the whole text: GPT-2's pattern starts a
  token at such a space (`` ?\p{L}+``, and ``\s+(?!\S)`` leaves it to the next token), so the whitespace before it
  ends the first piece as it ends a token there, and the piece's leading space is the one the word had, so no
  prefix is added (``tests/test_bounded.py`` checks the three on random texts). Nothing else is safe for GPT-2's
  pattern, so there is no second choice.

Where no boundary of any kind lies in the window the text is cut at the limit (a *hard* cut, counted by callers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence

Boundaries = Sequence[tuple[str, re.Pattern[str]]]

DOCUMENT_BOUNDARIES: Boundaries = (
    ("paragraph", re.compile(r"\n[^\S\n]*\n\s*")),
    ("line", re.compile(r"\n\s*")),
    ("sentence", re.compile(r"(?<=[.!?])\s+")),
    ("space", re.compile(r"\s+")),
)
"""Where a corpus document is cut into parts, best first (the cut is the end of the match)."""

WORD_BOUNDARIES: Boundaries = (("word", re.compile(r"(?= \S)")),)
"""Where a tokenizer's training text is cut (the cut is the end of the match: before the space)."""

HARD = "hard"
"""The name of a cut that found no boundary: the text is cut at the limit."""


def cut_point(text: str, limit: int, boundaries: Boundaries) -> tuple[int, str]:
    """Where to end the first piece of ``text``: ``(index, boundary name)`` with ``limit // 2 < index <= limit``.

    The first kind of ``boundaries`` that occurs in ``text[limit // 2:limit]`` wins, at its last occurrence there;
    without any, ``(limit, HARD)``.

    Raises:
        ValueError: ``limit`` < 2, or ``text`` not longer than ``limit`` (nothing to cut).
    """
    if limit < 2:
        raise ValueError(f"limit: expected >= 2 characters, got {limit}")
    if len(text) <= limit:
        raise ValueError(f"nothing to cut: the text has {len(text)} characters, the limit is {limit}")
    low = limit // 2
    # one character past the limit, so that a boundary ending at the limit (a lookahead) is seen
    window = text[low:limit + 1]
    for name, pattern in boundaries:
        last = None
        for last in pattern.finditer(window):
            pass
        while last is not None and last.end() > limit - low:  # the match runs past the limit: an earlier one
            last = _last_before(pattern, window, last.start())
        if last is not None and last.end() > 0:
            return low + last.end(), name
    return limit, HARD


def _last_before(pattern: re.Pattern[str], window: str, end: int) -> re.Match[str] | None:
    last = None
    for match in pattern.finditer(window, 0, end):
        last = match
    return last


def iter_pieces(stream: Iterable[str], max_chars: int, boundaries: Boundaries) -> Iterator[tuple[str, str | None]]:
    """Cut a text that arrives in pieces of any size into pieces of at most ``max_chars`` characters.

    Args:
        stream: the text, in consecutive pieces (e.g. decoded file blocks, or ``[text]``).
        max_chars: the longest piece yielded (characters, >= 2).
        boundaries: where to cut (:data:`DOCUMENT_BOUNDARIES`, :data:`WORD_BOUNDARIES`).

    Yields:
        ``(piece, cut)``: ``cut`` is the boundary name the piece ended at (:func:`cut_point`; :data:`HARD` for a cut
        at the limit), ``None`` for the last piece. The pieces concatenate to the text exactly; a text that fits is
        one piece with ``cut`` ``None``. Memory: ``max_chars`` plus one piece of ``stream``.
    """
    buffer = ""
    for piece in stream:
        buffer += piece
        while len(buffer) > max_chars:
            cut, name = cut_point(buffer, max_chars, boundaries)
            yield buffer[:cut], name
            buffer = buffer[cut:]
    yield buffer, None
