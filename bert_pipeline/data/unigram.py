"""ALBERT's SentencePiece-style Unigram tokenizer built from Hugging Face ``tokenizers`` parts: train it, save it.

ALBERT (Lan et al. 2020, §4.1) tokenises with SentencePiece (Kudo & Richardson 2018) using the Unigram language
model (Kudo 2018): a vocabulary of pieces with log-probabilities, pruned by EM from a large seed set, and Viterbi
segmentation. Assembled from ``tokenizers`` components:

- normaliser ``NFKC`` (SentencePiece's default ``nmt_nfkc`` without its extra rules), then ``Lowercase`` when the
  vocabulary is uncased (ALBERT's released models are);
- pre-tokenizer ``Metaspace``: whitespace becomes ``▁``, prepended to every word (``prepend_scheme="always"``);
- model ``Unigram`` trained by ``UnigramTrainer``; decoder ``Metaspace``;
- ALBERT's template post-processor ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0/1.

Special tokens ``<pad> <unk> [CLS] [SEP] [MASK]`` take ids 0..4 (ALBERT's layout). ``UnigramTrainer`` is not
deterministic: it walks its word counts in hash-map order, so on the same texts its scores differ between runs (by
up to ~1e-3 on the tests' corpus) although the set of pieces it keeps came out the same. So the trainer only picks
the pieces; their scores are then re-estimated deterministically (:func:`reestimate_scores`: a seed score from
substring frequency, as SentencePiece's seeding, then hard-EM Viterbi passes over the sorted word counts), rounded
to :data:`SCORE_DECIMALS` decimals, and the pieces ordered by (score, piece), so two trainings give the same
``tokenizer.json`` bytes.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from tokenizers.trainers import UnigramTrainer

from bert_pipeline.data.wordpiece import save_tokenizer_folder, train_measure_publish

PAD, UNK, CLS, SEP, MASK = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
"""In id order (0..4), ALBERT's layout."""
SPECIAL_TOKENS_MAP = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}
WORD_START = "\u2581"  # "▁": SentencePiece's whitespace mark, so a piece starting with it starts a word
SCORE_DECIMALS = 6
EM_ITERATIONS = 2
MAX_PIECE_LENGTH = 16  # UnigramTrainer's default max_piece_length
MODEL_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")  # ALBERT takes token types


def is_unigram_continuation(token: str) -> bool:
    """Unigram's continuation rule: a piece that does not start with ``▁`` goes on the piece before it."""
    return not token.startswith(WORD_START)


def _pipeline(model: Unigram, lowercase: bool) -> Tokenizer:
    tokenizer = Tokenizer(model)
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tokenizer.normalizer = normalizers.Sequence(steps)
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement=WORD_START, prepend_scheme="always")
    return tokenizer


def canonical_unigram(pieces: Iterable[tuple[str, float]], lowercase: bool) -> Tokenizer:
    """A Unigram pipeline from ``(piece, log-probability)`` pairs, made canonical: the special tokens first (ids
    0..4), then the other pieces by decreasing score rounded to :data:`SCORE_DECIMALS` decimals, ties by piece.

    Raises:
        ValueError: a special token is missing from ``pieces``.
    """
    scores = dict(pieces)
    missing = [t for t in SPECIAL_TOKENS if t not in scores]
    if missing:
        raise ValueError(f"the Unigram vocabulary lacks the special token(s) {', '.join(missing)}")
    rest = sorted(((t, round(float(s), SCORE_DECIMALS)) for t, s in scores.items() if t not in SPECIAL_TOKENS),
                  key=lambda item: (-item[1], item[0]))
    vocab = [(t, 0.0) for t in SPECIAL_TOKENS] + rest
    tokenizer = _pipeline(Unigram(vocab, unk_id=SPECIAL_TOKENS.index(UNK), byte_fallback=False), lowercase)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, SPECIAL_TOKENS.index(CLS)), (SEP, SPECIAL_TOKENS.index(SEP))],
    )
    return tokenizer


def word_counts(tokenizer: Tokenizer, texts: Iterable[str] | Iterable[list[str]]) -> Counter[str]:
    """Counts of the words ``tokenizer``'s normaliser and pre-tokenizer make of texts (with their ``▁``)."""
    counts: Counter[str] = Counter()
    for item in texts:
        for text in [item] if isinstance(item, str) else item:
            normalized = tokenizer.normalizer.normalize_str(text)
            counts.update(word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(normalized))
    return counts


def reestimate_scores(pieces: Iterable[str], counts: Counter[str], iterations: int = EM_ITERATIONS) -> dict[str, float]:
    """Deterministic log-probabilities for a fixed set of Unigram pieces (Kudo 2018, §3.2, with hard EM).

    Seed: each piece's score is ``log(freq * len)`` normalised, ``freq`` its occurrences as a substring of the
    words (SentencePiece's seed-piece score). Then ``iterations`` times: segment every word by Viterbi with the
    current scores (the ``tokenizers`` Unigram model) and set each piece's score to the log of its share of all
    pieces used, counts weighted by word frequency; a piece no word uses gets the lowest score minus 1. Words are
    visited in sorted order and sums are exact integers, so the result does not depend on hash order.

    Args:
        pieces: the non-special pieces the trainer kept.
        counts: word -> frequency (:func:`word_counts`).
        iterations: hard-EM passes (>= 0).

    Returns:
        piece -> score, rounded to :data:`SCORE_DECIMALS` decimals.
    """
    pieces = sorted(set(pieces))
    piece_set = set(pieces)
    words = sorted(counts)
    longest = min(MAX_PIECE_LENGTH, max((len(p) for p in pieces), default=1))
    freq: Counter[str] = Counter()
    for word in words:
        c = counts[word]
        for i in range(len(word)):
            for j in range(i + 1, min(len(word), i + longest) + 1):
                if word[i:j] in piece_set:
                    freq[word[i:j]] += c

    def normalise(weights: dict[str, int]) -> dict[str, float]:
        total = sum(weights.values())
        scores = {p: round(math.log(w / total), SCORE_DECIMALS) for p, w in weights.items() if w > 0}
        floor = round(min(scores.values(), default=0.0) - 1.0, SCORE_DECIMALS)
        return {p: scores.get(p, floor) for p in pieces}

    scores = normalise({p: freq[p] * len(p) for p in pieces})
    for _ in range(iterations):
        vocab = [(UNK, 0.0)] + [(p, scores[p]) for p in pieces]
        segmenter = Tokenizer(Unigram(vocab, unk_id=0, byte_fallback=False))
        used: Counter[str] = Counter()
        for word, enc in zip(words, segmenter.encode_batch(words, add_special_tokens=False), strict=True):
            for token in enc.tokens:
                if token in piece_set:
                    used[token] += counts[word]
        scores = normalise({p: used[p] for p in pieces})
    return scores


def train_unigram(
    texts: Callable[[], Iterable[str] | Iterable[list[str]]],
    *,
    vocab_size: int,
    lowercase: bool = True,
    length: int | None = None,
    show_progress: bool = False,
) -> Tokenizer:
    """Learn a Unigram vocabulary (ALBERT's tokenizer) on texts.

    Args:
        texts: called twice (the trainer, then the word counts); yields texts or lists of texts.
        vocab_size: entries including the 5 special tokens (ALBERT: 30,000); the trainer may return fewer on a
            small corpus.
        lowercase: an uncased vocabulary (ALBERT's released models).
        length: number of items ``texts()`` yields (progress bar only).
        show_progress: the trainer's progress bar.

    Returns:
        The canonical ``tokenizers.Tokenizer`` (:func:`canonical_unigram`) with the trainer's pieces and
        :func:`reestimate_scores`' scores.
    """
    tokenizer = _pipeline(Unigram(), lowercase)
    trainer = UnigramTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), unk_token=UNK, show_progress=show_progress
    )
    tokenizer.train_from_iterator(texts(), trainer=trainer, length=length)
    kept = [t for t, _ in json.loads(tokenizer.to_str())["model"]["vocab"] if t not in SPECIAL_TOKENS]
    scores = reestimate_scores(kept, word_counts(tokenizer, texts()))
    return canonical_unigram([(t, 0.0) for t in SPECIAL_TOKENS] + sorted(scores.items()), lowercase)


def save_unigram_tokenizer(tokenizer: Tokenizer, folder: str | Path, *, model_max_length: int = 512) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` (a fast tokenizer with the five special tokens set)
    and ``special_tokens_map.json`` into the existing, empty ``folder``; ``AutoTokenizer`` loads it."""
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, model_max_length=model_max_length, model_input_names=list(MODEL_INPUT_NAMES),
        **SPECIAL_TOKENS_MAP,
    )
    save_tokenizer_folder(hf, folder, SPECIAL_TOKENS_MAP)


def train_unigram_folder(
    corpus: Any,
    out_dir: str | Path,
    *,
    vocab_size: int,
    lowercase: bool,
    model_max_length: int,
    batch_size: int,
    text_column: str = "text",
) -> tuple[dict[str, Any], dict[int, int], dict[str, float | None]]:
    """Train Unigram on ``corpus["train"]``, measure it on ``corpus["validation"]`` and publish ``out_dir``
    atomically once ``AutoTokenizer`` reloads it to the same ids
    (:func:`bert_pipeline.data.wordpiece.train_measure_publish`).

    Returns:
        ``(metrics, histogram, timing)``; ``continuation_share`` counts pieces without a leading ``▁``.

    Raises:
        ValueError: the saved folder does not reload to the same ids.
    """

    def train(texts: Callable[[], Iterator[list[str]]], length: int) -> Tokenizer:
        return train_unigram(texts, vocab_size=vocab_size, lowercase=lowercase, length=length,
                             show_progress=sys.stderr.isatty())

    return train_measure_publish(
        corpus, out_dir, train=train,
        save=lambda tokenizer, folder: save_unigram_tokenizer(tokenizer, folder, model_max_length=model_max_length),
        batch_size=batch_size, text_column=text_column, unk_token=UNK, is_continuation=is_unigram_continuation,
    )
