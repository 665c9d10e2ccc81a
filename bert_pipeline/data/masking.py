"""MLM masking rules (BERT's 15% with 80/10/10, optional whole-word masking) and the pre-training collator.

Devlin et al. 2019, §3.1 "Task #1: Masked LM" and Appendix A.1: choose ``masked_lm_prob`` (15%) of the
non-special tokens of a sequence, at most ``max_predictions_per_seq``; of the chosen positions ``mask_token_prob``
(80%) become ``[MASK]``, ``random_token_prob`` (10%) a random token, the rest (10%) keep their token. Whole-word
masking (the BERT repository's 2019 update, used by later BERT releases): all WordPiece pieces of a chosen word
are chosen together. Dynamic masking (Liu et al. 2019, RoBERTa §4.1): a new mask for every batch.

Public API (used by :mod:`bert_pipeline.data.shards`, :mod:`bert_pipeline.data.shard_builder` and the pre-training
loop):

- :class:`MaskingRules`: the masking probabilities, validated (raises ``ValueError``).
- :class:`VocabInfo`: what masking needs from a tokenizer (special ids, ``[MASK]`` id, ids a random
  replacement draws from, which ids are ``##`` continuation pieces); build it with
  :meth:`VocabInfo.from_tokenizer`.
- :func:`mask_batch`: the vectorised numpy masking of a padded ``(batch, seq_len)`` id matrix.
- :func:`mask_ragged`: the same rules on unpadded instances (flat ids + offsets), returning BERT's
  ``masked_lm_positions`` / ``masked_lm_ids`` (static masking in ``create_pretraining_data``).
- :class:`PretrainingCollator`: pads instances (rows of a :mod:`bert_pipeline.data.shards` split) into Hugging Face's
  batch ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels`` (-100 where nothing is predicted) and the
  pair label ``next_sentence_label`` (NSP) or ``sentence_order_label`` (SOP) when present. Rows that carry
  ``masked_lm_positions`` (static masking) are padded as they are; rows without them (``masking: dynamic``) are
  masked by the collator with its own seeded generator, a new mask per call.
- :func:`collator_from_info`: builds the collator from a dataset's ``info.json`` and the tokenizer folder
  recorded there, so the rules used at training time are the ones the data was built with.

Every random choice takes a ``numpy.random.Generator``; the same generator state gives the same mask.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

IGNORE_INDEX = -100
"""Label value of positions the MLM loss ignores (PyTorch's ``CrossEntropyLoss`` default ``ignore_index``)."""

PAIR_LABELS = {"nsp": "next_sentence_label", "sop": "sentence_order_label", "none": None}
"""Column / batch key of the sentence-pair label for each ``objective``."""

_UNUSED = re.compile(r"^\[unused\d+\]$")


@dataclass(frozen=True)
class MaskingRules:
    """BERT's masking probabilities (Devlin et al. 2019, §3.1 and Appendix A.1).

    Attributes:
        masked_lm_prob: share of non-special tokens chosen for prediction, in [0, 1].
        max_predictions_per_seq: cap on chosen positions per sequence, >= 1.
        mask_token_prob: share of chosen positions replaced by ``[MASK]``, in [0, 1].
        random_token_prob: share replaced by a random non-special token, in [0, 1]; the remaining
            ``1 - mask_token_prob - random_token_prob`` keep their token, so the two must sum to <= 1.
        whole_word_masking: choose whole words (a word = a piece plus its following ``##`` pieces).

    Raises:
        ValueError: a probability outside [0, 1], mask + random > 1, or ``max_predictions_per_seq`` < 1.
    """

    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    mask_token_prob: float = 0.8
    random_token_prob: float = 0.1
    whole_word_masking: bool = False

    def __post_init__(self) -> None:
        for name in ("masked_lm_prob", "mask_token_prob", "random_token_prob"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0.0 <= float(value) <= 1.0):
                raise ValueError(f"{name}: expected a probability in [0, 1], got {value!r}")
        total = self.mask_token_prob + self.random_token_prob
        if total > 1.0 + 1e-9:
            raise ValueError(
                "mask_token_prob + random_token_prob: expected <= 1 (the rest keeps the token, "
                f"so mask/random/keep sum to 1), got {total:g}"
            )
        if int(self.max_predictions_per_seq) < 1:
            raise ValueError(f"max_predictions_per_seq: expected int >= 1, got {self.max_predictions_per_seq!r}")

    @property
    def keep_token_prob(self) -> float:
        """Share of chosen positions that keep their original token."""
        return max(0.0, 1.0 - self.mask_token_prob - self.random_token_prob)

    def to_dict(self) -> dict[str, Any]:
        """The rules as a JSON-able mapping (recorded in the dataset's ``info.json``)."""
        return {
            "masked_lm_prob": self.masked_lm_prob,
            "max_predictions_per_seq": self.max_predictions_per_seq,
            "mask_token_prob": self.mask_token_prob,
            "random_token_prob": self.random_token_prob,
            "whole_word_masking": self.whole_word_masking,
        }


def continuation_rule(tokenizer: Any) -> tuple[str, str | None]:
    """How ``tokenizer``'s pieces mark a word's continuation, read from its ``tokenizers`` pipeline.

    Returns:
        ``(prefix, word_start)``: WordPiece (or a BPE with a continuing-subword prefix): ``(prefix, None)``, a
        piece starting with ``prefix`` (``##``) continues a word; byte-level BPE: ``("##", "Ġ")`` and Unigram /
        Metaspace: ``("##", "▁")``, a piece *not* starting with ``word_start`` continues a word.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return "##", None
    model = backend.model
    if getattr(model, "continuing_subword_prefix", None):
        return model.continuing_subword_prefix, None
    pipeline = json.loads(backend.to_str())

    def kinds(part: dict | None) -> list[str]:
        if not part:
            return []
        return [part.get("type", "")] + [k for p in part.get("pretokenizers", []) for k in kinds(p)]

    pre = kinds(pipeline.get("pre_tokenizer"))
    if "ByteLevel" in pre:
        return "##", "\u0120"
    if "Metaspace" in pre or pipeline["model"].get("type") == "Unigram":
        return "##", "\u2581"
    return "##", None


@dataclass(frozen=True, eq=False)
class VocabInfo:
    """What masking needs to know about a vocabulary.

    Attributes:
        vocab_size: number of ids (``len(tokenizer)``).
        pad_token_id, cls_token_id, sep_token_id, mask_token_id: the special ids (BERT layout: 0, 101, 102, 103).
        is_special: ``(vocab_size,)`` bool, ids never chosen for masking (all special tokens, ``[UNK]`` included).
        random_ids: ``(n,)`` int64, the ids a random replacement draws from uniformly (non-special, not
            ``[unusedN]``).
        is_continuation: ``(vocab_size,)`` bool, pieces that continue a word (WordPiece ``##ing``; byte-level BPE
            and Unigram: no leading ``Ġ`` / ``▁``; :func:`continuation_rule`), for whole-word masking.
    """

    vocab_size: int
    pad_token_id: int
    cls_token_id: int
    sep_token_id: int
    mask_token_id: int
    is_special: np.ndarray = field(repr=False)
    random_ids: np.ndarray = field(repr=False)
    is_continuation: np.ndarray = field(repr=False)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> VocabInfo:
        """Build from a Hugging Face tokenizer (``AutoTokenizer.from_pretrained(folder)``).

        Raises:
            ValueError: the tokenizer lacks ``[PAD]``, ``[CLS]``, ``[SEP]`` or ``[MASK]``, or has no
                non-special token to draw random replacements from.
        """
        ids = {}
        for name in ("pad_token_id", "cls_token_id", "sep_token_id", "mask_token_id"):
            value = getattr(tokenizer, name, None)
            if value is None:
                token = name.removesuffix("_id")
                raise ValueError(f"tokenizer: expected a {token} (BERT's [CLS] A [SEP] B [SEP] and [MASK]), got none")
            ids[name] = int(value)
        vocab = tokenizer.get_vocab()
        size = max(len(tokenizer), max(vocab.values()) + 1)
        prefix, word_start = continuation_rule(tokenizer)
        return cls.from_vocab(vocab, size=size, special_ids=tokenizer.all_special_ids, prefix=prefix,
                              word_start=word_start, **ids)

    @classmethod
    def from_vocab(
        cls,
        vocab: Mapping[str, int],
        *,
        special_ids: Sequence[int],
        pad_token_id: int,
        cls_token_id: int,
        sep_token_id: int,
        mask_token_id: int,
        size: int | None = None,
        prefix: str = "##",
        word_start: str | None = None,
    ) -> VocabInfo:
        """Build from a token -> id mapping (tests use small synthetic vocabularies).

        The continuation rule: with ``word_start`` (byte-level BPE ``Ġ``, Unigram ``▁``) a non-special piece
        that does not start with it continues a word; without, a piece starting with ``prefix`` (WordPiece ``##``).

        Raises:
            ValueError: an id out of range or no id left for random replacement.
        """
        size = int(size if size is not None else max(vocab.values()) + 1)
        is_special = np.zeros(size, dtype=bool)
        specials = list(special_ids) + [pad_token_id, cls_token_id, sep_token_id, mask_token_id]
        for i in specials:
            if not 0 <= int(i) < size:
                raise ValueError(f"tokenizer: special id {i} outside the vocabulary of {size} ids")
            is_special[int(i)] = True
        is_continuation = np.zeros(size, dtype=bool)
        unused = np.zeros(size, dtype=bool)
        known = np.zeros(size, dtype=bool)
        for token, i in vocab.items():
            known[i] = True
            if word_start is not None:
                if not token.startswith(word_start) and not is_special[i]:
                    is_continuation[i] = True
            elif prefix and token.startswith(prefix) and len(token) > len(prefix):
                is_continuation[i] = True
            if _UNUSED.match(token):
                unused[i] = True
        random_ids = np.flatnonzero(known & ~is_special & ~unused).astype(np.int64)
        if random_ids.size == 0:
            raise ValueError("tokenizer: expected at least one non-special token to draw random replacements from")
        return cls(size, int(pad_token_id), int(cls_token_id), int(sep_token_id), int(mask_token_id),
                   is_special, random_ids, is_continuation)

    @property
    def id_dtype(self) -> np.dtype:
        """Smallest unsigned storage dtype for ids: ``uint16`` when ``vocab_size`` <= 65,536, else ``uint32``."""
        return np.dtype(np.uint16) if self.vocab_size <= 1 << 16 else np.dtype(np.uint32)


@dataclass
class MaskedBatch:
    """Result of :func:`mask_batch`.

    Attributes:
        input_ids: ``(batch, seq_len)``, the input dtype, with the 80/10/10 replacements applied.
        chosen: ``(batch, seq_len)`` bool, the positions to predict.
        labels: ``(batch, seq_len)`` int64, the original id at chosen positions, -100 elsewhere.
        action: ``(n_chosen,)`` int8 in row-major order of ``chosen``: 0 ``[MASK]``, 1 random token, 2 kept.
    """

    input_ids: np.ndarray
    chosen: np.ndarray
    labels: np.ndarray
    action: np.ndarray


def _row_budget(n_candidates: np.ndarray, rules: MaskingRules, rng: np.random.Generator) -> np.ndarray:
    """Tokens to predict per row: ``n * masked_lm_prob`` rounded stochastically, in [min(1, n), max_predictions].

    BERT's reference rounds to nearest (``max(1, round(len * p))``); rounding stochastically
    (``floor(n p + u)``, ``u ~ U[0, 1)``) makes the realised rate unbiased for every sequence length.
    """
    u = rng.random(n_candidates.shape[0])
    k = np.floor(n_candidates * rules.masked_lm_prob + u).astype(np.int64)
    if rules.masked_lm_prob > 0:
        k = np.maximum(k, np.minimum(n_candidates, 1))
    return np.minimum(np.minimum(k, n_candidates), int(rules.max_predictions_per_seq))


def _choose_tokens(candidate: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Choose exactly ``budget[r]`` candidate positions of each row, uniformly without replacement.

    Random 32-bit keys with the position in the low bits (so keys never tie); a row's ``k`` smallest keys win.
    """
    batch, seq_len = candidate.shape
    if batch == 0 or seq_len == 0:
        return np.zeros_like(candidate)
    shift = max(1, int(seq_len - 1).bit_length())
    keys = rng.integers(0, 1 << 32, size=candidate.shape, dtype=np.uint64) << np.uint64(shift)
    keys |= np.arange(seq_len, dtype=np.uint64)
    keys[~candidate] = np.iinfo(np.uint64).max
    ordered = np.sort(keys, axis=1)
    kth = ordered[np.arange(batch), np.maximum(budget, 1) - 1]
    return candidate & (keys <= kth[:, None]) & (budget > 0)[:, None]


def _choose_words(
    candidate: np.ndarray, word_start: np.ndarray, budget: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Whole-word choice: visit a row's words in random order, take a word when all its pieces fit the budget.

    This is exactly the BERT repository's whole-word loop (shuffle the word groups; skip a word that would
    overflow ``num_to_predict``; stop when it is reached), vectorised: each pass takes, per row, the longest
    prefix of the still-eligible words (in the random order) that fits the remaining budget; the first word that
    does not fit can never fit later (the budget only shrinks), so the next pass starts after it.
    """
    batch, seq_len = candidate.shape
    flat_cand = candidate.ravel()
    starts = np.flatnonzero(word_start.ravel() & flat_cand)
    n_words = starts.size
    chosen = np.zeros(batch * seq_len, dtype=bool)
    if n_words == 0:
        return chosen.reshape(batch, seq_len)
    # word index of every candidate position (pieces follow their word start within a row)
    word_of = np.cumsum(word_start.ravel() & flat_cand) - 1
    cand_pos = np.flatnonzero(flat_cand)
    lengths = np.bincount(word_of[cand_pos], minlength=n_words)
    rows = starts // seq_len
    keys = rng.random(n_words)
    order = np.lexsort((keys, rows))  # words grouped by row, random order within a row
    o_rows, o_len = rows[order], lengths[order]
    remaining = budget.astype(np.int64).copy()
    open_ = np.ones(n_words, dtype=bool)  # not yet visited by the sequential loop
    taken = np.zeros(n_words, dtype=bool)
    row_first = np.searchsorted(o_rows, np.arange(batch))
    while True:
        eligible = open_ & (o_len <= remaining[o_rows])
        if not eligible.any():
            break
        elig_len = np.where(eligible, o_len, 0)
        csum = np.cumsum(elig_len)
        base = np.concatenate(([0], csum))[row_first][o_rows]  # cumulative length before each row
        within = csum - base
        fits = eligible & (within <= remaining[o_rows])
        overflow = eligible & ~fits
        # per row: the first overflowing word (sequential order); words up to it are visited
        idx = np.arange(n_words)
        first_over = np.full(batch, n_words, dtype=np.int64)
        np.minimum.at(first_over, o_rows[overflow], idx[overflow])
        before = idx < first_over[o_rows]
        take = fits & before
        taken |= take
        remaining -= np.bincount(o_rows[take], weights=o_len[take], minlength=batch).astype(np.int64)
        open_ &= ~(idx <= first_over[o_rows])
        if not overflow.any():
            break
    chosen_words = np.zeros(n_words, dtype=bool)
    chosen_words[order[taken]] = True
    chosen[cand_pos] = chosen_words[word_of[cand_pos]]
    return chosen.reshape(batch, seq_len)


def mask_batch(
    input_ids: np.ndarray, vocab: VocabInfo, rules: MaskingRules, rng: np.random.Generator
) -> MaskedBatch:
    """Apply BERT's MLM masking to a padded batch (Devlin et al. 2019, §3.1; whole words as in BERT's 2019 update).

    Args:
        input_ids: ``(batch, seq_len)`` integer ids, padded with ``[PAD]`` (any special id is never chosen).
        vocab: special ids, ``[MASK]`` id, random-replacement ids and continuation pieces.
        rules: the probabilities and the per-sequence cap.
        rng: the generator every draw comes from (same state -> same mask).

    Returns:
        :class:`MaskedBatch` with ``input_ids`` of the input dtype and ``labels`` int64 (-100 where not chosen).

    Raises:
        ValueError: ``input_ids`` is not 2-D or holds ids outside the vocabulary.
    """
    ids = np.asarray(input_ids)
    if ids.ndim != 2:
        raise ValueError(f"input_ids: expected shape (batch, seq_len), got {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab.vocab_size):
        raise ValueError(f"input_ids: expected ids in [0, {vocab.vocab_size}), got [{ids.min()}, {ids.max()}]")
    candidate = ~vocab.is_special[ids]
    budget = _row_budget(candidate.sum(axis=1), rules, rng)
    if rules.whole_word_masking:
        cont = vocab.is_continuation[ids]
        prev_cand = np.zeros_like(candidate)
        prev_cand[:, 1:] = candidate[:, :-1]
        word_start = candidate & (~cont | ~prev_cand)
        chosen = _choose_words(candidate, word_start, budget, rng)
    else:
        chosen = _choose_tokens(candidate, budget, rng)
    n = int(chosen.sum())
    u = rng.random(n)
    action = np.full(n, 2, dtype=np.int8)
    action[u < rules.mask_token_prob + rules.random_token_prob] = 1
    action[u < rules.mask_token_prob] = 0
    replacement = ids[chosen].copy()
    replacement[action == 0] = vocab.mask_token_id
    n_random = int((action == 1).sum())
    replacement[action == 1] = vocab.random_ids[rng.integers(0, vocab.random_ids.size, n_random)]
    labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
    labels[chosen] = ids[chosen]
    out = ids.copy()
    out[chosen] = replacement
    return MaskedBatch(out, chosen, labels, action)


def pad_ragged(values: np.ndarray, offsets: np.ndarray, pad_id: int, width: int | None = None) -> np.ndarray:
    """Pad ragged rows (flat ``values`` with ``offsets`` of length ``rows + 1``) into ``(rows, width)``.

    ``width`` defaults to the longest row; rows longer than ``width`` raise ``ValueError``.
    """
    lengths = np.diff(offsets)
    width = int(lengths.max(initial=0)) if width is None else int(width)
    if lengths.size and lengths.max() > width:
        raise ValueError(f"pad_ragged: a row of {lengths.max()} exceeds width {width}")
    out = np.full((lengths.size, width), pad_id, dtype=values.dtype)
    out[np.arange(width)[None, :] < lengths[:, None]] = values
    return out


@dataclass
class RaggedMasked:
    """Static masking of unpadded instances (:func:`mask_ragged`).

    Attributes:
        input_ids: flat ids with replacements applied (same offsets as the input).
        positions: flat ``masked_lm_positions`` (ascending within an instance), with ``label_offsets``.
        masked_ids: flat ``masked_lm_ids`` (the original ids at ``positions``).
        label_offsets: ``(rows + 1,)`` offsets into ``positions`` / ``masked_ids``.
        action: ``(n_chosen,)`` int8: 0 ``[MASK]``, 1 random, 2 kept (in the order of ``positions``).
    """

    input_ids: np.ndarray
    positions: np.ndarray
    masked_ids: np.ndarray
    label_offsets: np.ndarray
    action: np.ndarray


def mask_ragged(
    values: np.ndarray, offsets: np.ndarray, vocab: VocabInfo, rules: MaskingRules, rng: np.random.Generator
) -> RaggedMasked:
    """:func:`mask_batch` on unpadded instances, returning BERT's ``masked_lm_positions`` / ``masked_lm_ids``.

    Args:
        values: ``(total_tokens,)`` flat ids of all instances.
        offsets: ``(rows + 1,)`` int64 start offsets (row ``i`` is ``values[offsets[i]:offsets[i+1]]``).
    """
    lengths = np.diff(offsets)
    padded = pad_ragged(values, offsets, vocab.pad_token_id)
    res = mask_batch(padded, vocab, rules, rng)
    valid = np.arange(padded.shape[1])[None, :] < lengths[:, None]
    flat_ids = res.input_ids[valid].astype(values.dtype)
    rows, cols = np.nonzero(res.chosen)  # row-major: rows ascending, positions ascending within a row
    label_offsets = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=lengths.size)))).astype(np.int64)
    return RaggedMasked(flat_ids, cols.astype(np.int64), padded[rows, cols], label_offsets, res.action)


class PretrainingCollator:
    """Pad pre-training instances into Hugging Face's batch; mask them when they are unmasked (dynamic masking).

    Input rows (mappings, e.g. rows of ``datasets.load_from_disk(split_dir)``) hold
    ``input_ids`` and ``token_type_ids`` (unpadded sequences), optionally ``masked_lm_positions`` and
    ``masked_lm_ids`` (static masking) and ``next_sentence_label`` / ``sentence_order_label``.

    Output (``torch.int64`` tensors, ``seq_len`` = the longest row, rounded up to ``pad_to_multiple_of``):
    ``input_ids``, ``token_type_ids``, ``attention_mask`` (1 on tokens, 0 on padding) and ``labels``
    (the original id where a prediction is made, -100 elsewhere), all ``(batch, seq_len)``, plus the pair label
    ``(batch,)`` under the same key as the rows carry it. This is what ``BertForPreTraining`` takes
    (``sentence_order_label`` is ``AlbertForPreTraining``'s name for SOP).

    Rows without ``masked_lm_positions`` are masked by :func:`mask_batch` with the collator's own
    ``numpy.random.Generator`` seeded by ``seed``: each call draws a new mask (RoBERTa's dynamic masking,
    Liu et al. 2019, §4.1), and the sequence of masks is fixed by ``seed`` and the call order. With a
    ``DataLoader(num_workers > 0)`` every worker holds a copy of the generator: call :meth:`reseed` in the
    ``worker_init_fn`` (e.g. with ``seed + worker_id``) so workers draw different masks.

    Args:
        vocab: :class:`VocabInfo` of the tokenizer the instances were built with.
        rules: :class:`MaskingRules` for dynamic masking; ``None`` accepts only statically masked rows.
        seed: seed of the dynamic-masking generator.
        pad_to_multiple_of: round ``seq_len`` up to a multiple (e.g. 8 for tensor cores); ``None`` = no rounding.
        return_tensors: ``"pt"`` (torch tensors) or ``"np"`` (numpy int64 arrays).

    Raises (on call):
        ValueError: a batch mixing masked and unmasked rows, or unmasked rows without ``rules``.
    """

    def __init__(
        self,
        vocab: VocabInfo,
        rules: MaskingRules | None = None,
        seed: int = 0,
        pad_to_multiple_of: int | None = None,
        return_tensors: str = "pt",
    ) -> None:
        if return_tensors not in ("pt", "np"):
            raise ValueError(f"return_tensors: expected 'pt' or 'np', got {return_tensors!r}")
        self.vocab = vocab
        self.rules = rules
        self.pad_to_multiple_of = pad_to_multiple_of
        self.return_tensors = return_tensors
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Restart the dynamic-masking generator from ``seed``."""
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)

    def __call__(self, examples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not examples:
            raise ValueError("PretrainingCollator: expected at least one example, got an empty batch")
        rows = [np.asarray(ex["input_ids"], dtype=np.int64).ravel() for ex in examples]
        lengths = np.fromiter((r.size for r in rows), dtype=np.int64, count=len(rows))
        width = int(lengths.max())
        if self.pad_to_multiple_of:
            m = int(self.pad_to_multiple_of)
            width = -(-width // m) * m
        valid = np.arange(width)[None, :] < lengths[:, None]
        ids = np.full((len(rows), width), self.vocab.pad_token_id, dtype=np.int64)
        ids[valid] = np.concatenate(rows)
        types = np.zeros_like(ids)
        if "token_type_ids" in examples[0]:
            types[valid] = np.concatenate([np.asarray(ex["token_type_ids"], dtype=np.int64).ravel() for ex in examples])
        static = ["masked_lm_positions" in ex and ex["masked_lm_positions"] is not None for ex in examples]
        if all(static):
            labels = np.full_like(ids, IGNORE_INDEX)
            for r, ex in enumerate(examples):
                pos = np.asarray(ex["masked_lm_positions"], dtype=np.int64)
                labels[r, pos] = np.asarray(ex["masked_lm_ids"], dtype=np.int64)
        elif any(static):
            raise ValueError("PretrainingCollator: a batch mixes statically masked rows and unmasked rows")
        else:
            if self.rules is None:
                raise ValueError("PretrainingCollator: unmasked rows (masking: dynamic) need rules=MaskingRules(...)")
            res = mask_batch(ids, self.vocab, self.rules, self.rng)
            ids, labels = res.input_ids, res.labels
        batch: dict[str, Any] = {
            "input_ids": ids,
            "token_type_ids": types,
            "attention_mask": valid.astype(np.int64),
            "labels": labels,
        }
        for key in ("next_sentence_label", "sentence_order_label"):
            if key in examples[0]:
                batch[key] = np.asarray([int(ex[key]) for ex in examples], dtype=np.int64)
        if self.return_tensors == "pt":
            import torch

            batch = {k: torch.from_numpy(v) for k, v in batch.items()}
        return batch


def load_info(pretraining_dir: str | Path) -> dict[str, Any]:
    """Read ``info.json`` of a ``create_pretraining_data`` output folder.

    Raises:
        FileNotFoundError: no ``info.json`` there.
    """
    return json.loads((Path(pretraining_dir) / "info.json").read_text(encoding="utf-8"))


def collator_from_info(
    pretraining_dir: str | Path,
    *,
    seed: int = 0,
    tokenizer: Any = None,
    pad_to_multiple_of: int | None = None,
    return_tensors: str = "pt",
) -> PretrainingCollator:
    """The collator matching a ``create_pretraining_data`` output (its masking rules and tokenizer).

    Args:
        pretraining_dir: a folder written by :func:`bert_pipeline.data.shards.build_dataset` (with ``info.json``).
        seed: dynamic-masking seed (used only when ``info["masking"] == "dynamic"``).
        tokenizer: the tokenizer to use; default the folder ``info["tokenizer"]`` names
            (:func:`bert_pipeline.data.tokenizer.load_tokenizer`).

    Raises:
        ValueError: the tokenizer's vocabulary size differs from the one the data was built with.
    """
    info = load_info(pretraining_dir)
    if tokenizer is None:
        from bert_pipeline.data.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(info["tokenizer"])
    vocab = VocabInfo.from_tokenizer(tokenizer)
    if vocab.vocab_size != info["vocab_size"]:
        raise ValueError(
            f"{Path(pretraining_dir) / 'info.json'}: vocab_size {info['vocab_size']} differs from the tokenizer's "
            f"{vocab.vocab_size}"
        )
    rules = MaskingRules(**info["rules"]) if info["masking"] == "dynamic" else None
    return PretrainingCollator(vocab, rules, seed=seed, pad_to_multiple_of=pad_to_multiple_of,
                               return_tensors=return_tensors)
