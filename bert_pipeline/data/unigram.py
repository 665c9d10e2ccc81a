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
bit-deterministic (its EM sums run in hash-map order, so scores differ in the last digits between runs); the scores
are rounded to :data:`SCORE_DECIMALS` decimals and the pieces re-ordered by (score, piece), so two trainings give
the same ``tokenizer.json`` bytes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from tokenizers.trainers import UnigramTrainer

from bert_pipeline.data.wordpiece import train_measure_publish

PAD, UNK, CLS, SEP, MASK = "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
"""In id order (0..4), ALBERT's layout."""
SPECIAL_TOKENS_MAP = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}
WORD_START = "\u2581"  # "▁": SentencePiece's whitespace mark, so a piece starting with it starts a word
SCORE_DECIMALS = 6
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
        texts: called once; yields texts or lists of texts.
        vocab_size: entries including the 5 special tokens (ALBERT: 30,000); the trainer may return fewer on a
            small corpus.
        lowercase: an uncased vocabulary (ALBERT's released models).
        length: number of items ``texts()`` yields (progress bar only).
        show_progress: the trainer's progress bar.

    Returns:
        The canonical ``tokenizers.Tokenizer`` (:func:`canonical_unigram`).
    """
    tokenizer = _pipeline(Unigram(), lowercase)
    trainer = UnigramTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), unk_token=UNK, show_progress=show_progress
    )
    tokenizer.train_from_iterator(texts(), trainer=trainer, length=length)
    model = json.loads(tokenizer.to_str())["model"]
    return canonical_unigram(((t, s) for t, s in model["vocab"]), lowercase)


def save_unigram_tokenizer(tokenizer: Tokenizer, folder: str | Path, *, model_max_length: int = 512) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` (a fast tokenizer with the five special tokens set)
    and ``special_tokens_map.json`` into the existing, empty ``folder``; ``AutoTokenizer`` loads it."""
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, model_max_length=model_max_length, model_input_names=list(MODEL_INPUT_NAMES),
        **SPECIAL_TOKENS_MAP,
    )
    hf.save_pretrained(str(folder))
    (folder / "special_tokens_map.json").write_text(
        json.dumps(SPECIAL_TOKENS_MAP, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


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
