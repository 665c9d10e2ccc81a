"""Sentence-pair instances for BERT pre-training: NSP (BERT), SOP (ALBERT) or packed single segments (RoBERTa).

The procedure follows BERT's reference ``create_instances_from_document`` (Devlin et al. 2019, §3.1 "Task #2:
Next Sentence Prediction" and Appendix A.1; google-research/bert ``create_pretraining_data.py``):

1. Per document, accumulate sentence segments until they reach a target length: ``max_seq_length - 3``, or with
   probability ``short_seq_prob`` a random length in ``[2, max_seq_length - 3]`` (drawn per chunk; the reference
   draws once per document, which makes every chunk of a long document short or none).
2. Split the chunk at a random sentence boundary into A and B.
3. ``nsp``: with probability 0.5, B is replaced by a span of sentences from a random *other* document
   (``next_sentence_label`` 1, "NotNext"), and the chunk's unused segments go back to the stream; else B is the
   rest of the chunk (label 0, "IsNext"). ``sop`` (Lan et al. 2020, ALBERT §4.1): B always follows A in the
   same document; with probability 0.5 the two are swapped (``sentence_order_label`` 1).
4. Truncate the longer side, one token at a time from the front or the back at random, until the pair fits;
   emit ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``.

``none`` (Liu et al. 2019, RoBERTa §4.2, DOC-SENTENCES): contiguous full sentences of one document packed up to
the target length as ``[CLS] S [SEP]``, no pair label; a sentence longer than ``max_seq_length - 2`` is cut into
consecutive pieces. With ``packing="stream"`` (Geiping and Goldstein 2023, "Cramming", §4.3) the shard's documents
are one token stream, a ``[SEP]`` between two documents (RoBERTa's FULL-SENTENCES separator), cut into chunks of
exactly the target length whatever the sentence ends: every instance but the shard's last is full, so batches
hold no padding (a sentence-packed instance stops where the next whole sentence would not fit, and a document's
last one is short: about a fifth of the positions of the CPU default's news articles were padding).

Deviations from the reference, all to make the label exactly balanced and the output bounded:

- A pair chunk always holds at least two sentences (the reference forces "NotNext" on a one-sentence chunk,
  which biases NSP towards NotNext); a lone last sentence of a document joins the chunk before it, and a
  NotNext pair whose given-back segments would be that lone sentence takes the whole chunk as A.
- The 0.5 decisions are block-randomised: each consecutive pair of decisions is one 0 and one 1 in random order,
  so the label share is 50% within one instance per shard and dupe (the instances are shuffled afterwards).
- The random other document comes from the same shard of documents (bounded memory; a shard holds many
  documents), or from the same group of documents and document pieces when the stage builds a shard in groups
  (below). With a single document in the shard no NotNext is possible and every pair is IsNext.
- Documents of one sentence are skipped for ``nsp``/``sop`` (counted), kept for ``none``.
- Before pairing, the stage (:mod:`bert_pipeline.data.shard_builder`) cuts what the procedure cannot use whole. A
  "sentence" longer than a segment can be (a chunk of text without sentence ends, as the sentence splitter
  returns it) is cut at word starts into pieces two of which fill one pair (:func:`cut_sentence`,
  :func:`sentence_piece_bounds`); the reference keeps it and truncates the pair, which throws away all but
  ``max_seq_length - 3`` of its tokens. A document longer than ``max_document_tokens`` is cut at sentence ends
  into pieces, and each piece is a document of its own here: its pairs never span two pieces, and a NotNext
  segment may come from another piece of the same document (bounded memory whatever a document's size).

Public API: :func:`create_instances` (one shard's documents -> :class:`Instances`), :func:`min_seq_length`,
:func:`cut_sentence`, :func:`sentence_piece_bounds`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

OBJECTIVES = ("nsp", "sop", "none")
PACKINGS = ("sentences", "stream")


def min_seq_length(objective: str) -> int:
    """Smallest ``max_seq_length`` that holds one token per segment: 5 for ``[CLS] A [SEP] B [SEP]``, 3 for
    ``[CLS] A [SEP]`` (``none``)."""
    return 3 if objective == "none" else 5


def sentence_piece_bounds(objective: str, max_seq_length: int) -> tuple[int, int]:
    """``(min_piece, max_piece)`` in tokens for :func:`cut_sentence` at ``max_seq_length``.

    ``max_piece`` is the longest segment an instance holds: ``max_seq_length - 3`` for a pair, ``- 2`` for
    ``none``. For pairs ``min_piece`` is half of it, rounded up: a chunk stops growing once it reaches its target
    length (``max_piece`` mostly) with two segments, so two pieces just over half fill one pair and truncation
    takes at most the pieces of the words that overshoot (pieces of exactly ``max_piece`` tokens would lose half
    of every pair to truncation; pieces just under half would need a third piece). ``none`` packs whole segments
    up to ``max_piece``, so its pieces are as long as possible (``min_piece == max_piece``).
    """
    if objective == "none":
        return max_seq_length - 2, max_seq_length - 2
    longest = max_seq_length - 3
    return (longest + 1) // 2, longest


def cut_sentence(ids: np.ndarray, is_continuation: np.ndarray, min_piece: int, max_piece: int) -> list[np.ndarray]:
    """Cut a sentence longer than ``max_piece`` tokens at word starts into consecutive pieces of at most
    ``max_piece`` tokens, each of at least ``min_piece`` tokens where a word start allows.

    A word start is a token that is not a WordPiece continuation (``##ing``). Each cut goes at the first word
    start at or after ``min_piece`` tokens into the piece; failing one up to ``max_piece``, at the last word start
    before ``min_piece``; failing that (one word longer than ``max_piece`` tokens), hard at ``max_piece``. The last
    piece is what is left (it may be short). Google's ``create_pretraining_data.py`` keeps such a sentence whole
    and truncates the pair; this cut keeps its tokens (see :func:`sentence_piece_bounds`).

    Args:
        ids: ``(n,)`` integer token ids of one sentence, no special tokens.
        is_continuation: ``(vocab_size,)`` bool, the continuation pieces
            (:attr:`bert_pipeline.data.masking.VocabInfo.is_continuation`).
        min_piece, max_piece: ``1 <= min_piece <= max_piece``, in tokens.

    Returns:
        Views of ``ids`` whose concatenation is ``ids``; ``[ids]`` when it has at most ``max_piece`` tokens.

    Raises:
        ValueError: ``min_piece`` or ``max_piece`` out of range.
    """
    if not 1 <= min_piece <= max_piece:
        raise ValueError(f"expected 1 <= min_piece <= max_piece, got {min_piece} and {max_piece}")
    n = len(ids)
    if n <= max_piece:
        return [ids]
    starts = np.flatnonzero(~is_continuation[ids])
    pieces = []
    at = 0
    while n - at > max_piece:
        k = int(np.searchsorted(starts, at + min_piece))
        if k < starts.size and starts[k] <= at + max_piece:
            cut = int(starts[k])
        elif k > 0 and starts[k - 1] > at:
            cut = int(starts[k - 1])
        else:
            cut = at + max_piece
        pieces.append(ids[at:cut])
        at = cut
    pieces.append(ids[at:])
    return pieces


@dataclass
class Instances:
    """Unpadded instances of one shard, flat.

    Attributes:
        input_ids: ``(total_tokens,)`` int64, ``[CLS] A [SEP] B [SEP]`` of every instance, concatenated.
        offsets: ``(n + 1,)`` int64, instance ``i`` is ``input_ids[offsets[i]:offsets[i+1]]``.
        len_a: ``(n,)`` int64, tokens of ``[CLS] A [SEP]`` (token_type_ids are 0 there, 1 after).
        labels: ``(n,)`` int8 pair label (``nsp``: 1 = NotNext; ``sop``: 1 = swapped); ``None`` for ``none``.
        provenance: when requested, per instance ``(a_doc, a_first_sentence, a_end_sentence, b_doc,
            b_first_sentence, b_end_sentence)`` before any swap (``-1`` for B with ``none``), ``(n, 6)`` int64.
        counts: ``documents``, ``skipped_one_sentence_documents``, ``empty_documents``,
            ``dropped_single_segments`` (a lone sentence left after NotNext gave segments back),
            ``truncated_tokens``.
    """

    input_ids: np.ndarray
    offsets: np.ndarray
    len_a: np.ndarray
    labels: np.ndarray | None
    provenance: np.ndarray | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def token_type_ids(self) -> np.ndarray:
        """``(total_tokens,)`` uint8: 0 on ``[CLS] A [SEP]``, 1 on ``B [SEP]``."""
        pos = np.arange(self.input_ids.size) - np.repeat(self.offsets[:-1], np.diff(self.offsets))
        return (pos >= np.repeat(self.len_a, np.diff(self.offsets))).astype(np.uint8)

    def take(self, order: np.ndarray) -> Instances:
        """The instances in ``order`` (a permutation or subset of ``range(n)``)."""
        lengths = np.diff(self.offsets)[order]
        starts = self.offsets[:-1][order]
        idx = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(lengths.sum())
        return Instances(
            self.input_ids[idx], np.concatenate(([0], np.cumsum(lengths))).astype(np.int64), self.len_a[order],
            None if self.labels is None else self.labels[order],
            None if self.provenance is None else self.provenance[order], dict(self.counts),
        )


class _BalancedCoin:
    """Fair coin whose flips come in blocks of two holding one 0 and one 1 (permuted block randomisation)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.pending: list[int] = []

    def flip(self) -> int:
        if not self.pending:
            self.pending = [1, 0] if self.rng.random() < 0.5 else [0, 1]
        return self.pending.pop()


def _truncate(la: int, lb: int, max_tokens: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
    """BERT's ``truncate_seq_pair`` in closed form: returns tokens cut from (A front, A back, B front, B back).

    The reference removes one token at a time from the longer side (B on ties), front or back with
    probability 0.5. Removals from A happen while A is longer, then the two alternate (B first); the number
    taken from the front of a side is Binomial(removals, 0.5), the same distribution as the token loop.
    """
    excess = la + lb - max_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    cut_a = cut_b = 0
    if la > lb:
        cut_a = min(la - lb, excess)
    elif lb > la:
        cut_b = min(lb - la, excess)
    rest = excess - cut_a - cut_b
    cut_b += (rest + 1) // 2
    cut_a += rest // 2
    fa = int(rng.binomial(cut_a, 0.5)) if cut_a else 0
    fb = int(rng.binomial(cut_b, 0.5)) if cut_b else 0
    return fa, cut_a - fa, fb, cut_b - fb


def _concat(sentences: Sequence[np.ndarray], start: int, end: int) -> np.ndarray:
    return sentences[start] if end - start == 1 else np.concatenate(sentences[start:end])


def create_instances(
    documents: Sequence[Sequence[np.ndarray]],
    *,
    objective: str,
    max_seq_length: int,
    short_seq_prob: float,
    cls_token_id: int,
    sep_token_id: int,
    rng: np.random.Generator,
    with_provenance: bool = False,
    packing: str = "sentences",
) -> Instances:
    """Build pre-training instances from one shard of tokenized documents (see the module docstring).

    Args:
        documents: ``documents[d][s]`` is sentence ``s`` of document ``d`` as a 1-D integer id array (no special
            tokens). Empty sentences are ignored.
        objective: ``"nsp"``, ``"sop"`` or ``"none"``.
        max_seq_length: the longest instance in tokens, special tokens included.
        short_seq_prob: probability of a random shorter target length, in [0, 1].
        cls_token_id, sep_token_id: ids of ``[CLS]`` and ``[SEP]``.
        rng: every random choice (targets, split points, labels, random documents, truncation) draws from it.
        with_provenance: also return which document sentences each segment came from (tests); for ``stream``
            packing ``(first document, -1, -1, last document, -1, -1)`` of each chunk.
        packing: ``"sentences"`` (whole sentences) or ``"stream"`` (fixed-length chunks of the shard's token
            stream); ``stream`` is for objective ``none`` only.

    Returns:
        :class:`Instances` in document order (shuffle them with :meth:`Instances.take`).

    Raises:
        ValueError: unknown ``objective`` or ``packing``, ``stream`` packing with a pair objective,
            ``max_seq_length`` below :func:`min_seq_length`, or ``short_seq_prob`` outside [0, 1].
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: expected one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if max_seq_length < min_seq_length(objective):
        raise ValueError(
            f"max_seq_length: expected >= {min_seq_length(objective)} to hold "
            f"{'[CLS] A [SEP]' if objective == 'none' else '[CLS] A [SEP] B [SEP]'}, got {max_seq_length}"
        )
    if not 0.0 <= short_seq_prob <= 1.0:
        raise ValueError(f"short_seq_prob: expected a probability in [0, 1], got {short_seq_prob!r}")
    if packing not in PACKINGS:
        raise ValueError(f"packing: expected one of {', '.join(PACKINGS)}, got {packing!r}")
    if packing == "stream" and objective != "none":
        raise ValueError(f"packing: stream cuts sentences, so it needs objective none (no pair to split), got "
                         f"objective {objective!r}")
    docs = [[np.asarray(s, dtype=np.int64) for s in doc if len(s)] for doc in documents]
    counts = {
        "documents": len(docs),
        "skipped_one_sentence_documents": 0,
        "empty_documents": sum(1 for d in docs if not d),
        "dropped_single_segments": 0,
        "truncated_tokens": 0,
    }
    pieces: list[np.ndarray] = []
    len_a: list[int] = []
    labels: list[int] = []
    prov: list[tuple[int, int, int, int, int, int]] = []
    cls = np.array([cls_token_id], dtype=np.int64)
    sep = np.array([sep_token_id], dtype=np.int64)

    if packing == "stream":
        return _stream_instances(docs, max_seq_length - 2, short_seq_prob, cls, sep, rng, counts, with_provenance)
    if objective == "none":
        max_tokens = max_seq_length - 2
        for d, sents in enumerate(docs):
            i = 0
            target = _target(max_tokens, short_seq_prob, rng)
            while i < len(sents):
                if len(sents[i]) > max_tokens:  # an over-long sentence: consecutive pieces
                    sent = sents[i]
                    for start in range(0, len(sent), max_tokens):
                        pieces.extend((cls, sent[start:start + max_tokens], sep))
                        len_a.append(min(max_tokens, len(sent) - start) + 2)
                        prov.append((d, i, i + 1, -1, -1, -1))
                    i += 1
                    target = _target(max_tokens, short_seq_prob, rng)
                    continue
                j, length = i, 0
                while j < len(sents) and length + len(sents[j]) <= max_tokens and (j == i or length + len(sents[j]) <= target):
                    length += len(sents[j])
                    j += 1
                pieces.extend((cls, _concat(sents, i, j), sep))
                len_a.append(length + 2)
                prov.append((d, i, j, -1, -1, -1))
                i = j
                target = _target(max_tokens, short_seq_prob, rng)
        return _finish(pieces, len_a, None, prov, counts, with_provenance)

    max_tokens = max_seq_length - 3
    coin = _BalancedCoin(rng)
    donors = np.array([d for d, s in enumerate(docs) if s], dtype=np.int64)
    for d, sents in enumerate(docs):
        n = len(sents)
        if n == 1:
            counts["skipped_one_sentence_documents"] += 1
            continue
        i = 0
        while i < n:
            target = _target(max_tokens, short_seq_prob, rng)
            j, length = i, 0
            while j < n:
                length += len(sents[j])
                j += 1
                if length >= target and j - i >= 2:
                    break
            if n - j == 1:  # a lone last sentence joins this chunk
                j += 1
            if j - i < 2:
                counts["dropped_single_segments"] += 1
                break
            a_end = i + 1 if j - i == 2 else int(rng.integers(i + 1, j))
            label = coin.flip()
            other = donors[donors != d] if objective == "nsp" else donors[:0]
            notnext = objective == "nsp" and label == 1 and other.size > 0
            if notnext and n - a_end == 1:
                a_end = n  # giving back one lone last sentence would drop it: A takes the whole chunk
            tokens_a = _concat(sents, i, a_end)
            if notnext:
                r = int(other[rng.integers(0, other.size)])
                rsents = docs[r]
                b_start = int(rng.integers(0, len(rsents)))
                b_end, blen = b_start, 0
                target_b = target - len(tokens_a)
                while b_end < len(rsents):
                    blen += len(rsents[b_end])
                    b_end += 1
                    if blen >= target_b:
                        break
                tokens_b = _concat(rsents, b_start, b_end)
                source = (d, i, a_end, r, b_start, b_end)
                next_i = a_end  # the unused segments go back to the stream
            else:
                if objective == "nsp":
                    label = 0  # a shard of one document has no other document to draw from
                tokens_b = _concat(sents, a_end, j)
                source = (d, i, a_end, d, a_end, j)
                next_i = j
            fa, ba, fb, bb = _truncate(len(tokens_a), len(tokens_b), max_tokens, rng)
            counts["truncated_tokens"] += fa + ba + fb + bb
            tokens_a = tokens_a[fa:len(tokens_a) - ba]
            tokens_b = tokens_b[fb:len(tokens_b) - bb]
            if objective == "sop" and label == 1:
                tokens_a, tokens_b = tokens_b, tokens_a
            pieces.extend((cls, tokens_a, sep, tokens_b, sep))
            len_a.append(len(tokens_a) + 2)
            labels.append(label)
            prov.append(source)
            i = next_i
    return _finish(pieces, len_a, labels, prov, counts, with_provenance)


def _stream_instances(docs: list[list[np.ndarray]], max_tokens: int, short_seq_prob: float, cls: np.ndarray,
                      sep: np.ndarray, rng: np.random.Generator, counts: dict[str, int],
                      with_provenance: bool) -> Instances:
    """``[CLS] chunk [SEP]`` over the documents' token stream (``[SEP]`` between documents), each chunk the
    target length (:func:`_target`) but the last."""
    parts: list[np.ndarray] = []
    owner: list[np.ndarray] = []
    for d, sents in enumerate(docs):
        if not sents:
            continue
        if parts:
            parts.append(sep)
            owner.append(np.array([d], dtype=np.int64))
        parts.extend(sents)
        owner.append(np.full(sum(len(x) for x in sents), d, dtype=np.int64))
    stream = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    doc_of = np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64)
    pieces: list[np.ndarray] = []
    len_a: list[int] = []
    prov: list[tuple[int, int, int, int, int, int]] = []
    start = 0
    while start < stream.size:
        end = min(stream.size, start + _target(max_tokens, short_seq_prob, rng))
        pieces.extend((cls, stream[start:end], sep))
        len_a.append(end - start + 2)
        prov.append((int(doc_of[start]), -1, -1, int(doc_of[end - 1]), -1, -1))
        start = end
    return _finish(pieces, len_a, None, prov, counts, with_provenance)


def _target(max_tokens: int, short_seq_prob: float, rng: np.random.Generator) -> int:
    if short_seq_prob > 0 and rng.random() < short_seq_prob:
        return int(rng.integers(2, max_tokens + 1)) if max_tokens >= 2 else max_tokens
    return max_tokens


def _finish(pieces, len_a, labels, prov, counts, with_provenance) -> Instances:
    per_instance = 5 if labels is not None else 3
    lengths = np.add.reduceat(np.array([len(p) for p in pieces], dtype=np.int64),
                              np.arange(0, len(pieces), per_instance)) if pieces else np.zeros(0, dtype=np.int64)
    return Instances(
        input_ids=np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64),
        offsets=np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        len_a=np.asarray(len_a, dtype=np.int64),
        labels=None if labels is None else np.asarray(labels, dtype=np.int8),
        provenance=np.asarray(prov, dtype=np.int64).reshape(-1, 6) if with_provenance else None,
        counts=counts,
    )
