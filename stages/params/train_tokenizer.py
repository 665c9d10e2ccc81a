"""Schema of ``train_tokenizer`` and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import model_validator

from stages.params.base import Section, View


class TrainTokenizerParams(Section):
    """``train_tokenizer``: the vocabulary the model family needs, learnt on the corpus's train split.

    ``model``: ``wordpiece`` (BERT), ``bpe`` (RoBERTa's byte-level BPE: cased, so ``lowercase`` must be false;
    ``vocab_size`` >= 261, the 5 special tokens + 256 bytes) or ``unigram`` (ALBERT's SentencePiece-style Unigram).
    ``strip_accents``, ``handle_chinese_chars``, ``max_input_chars_per_word``, ``bert_id_layout`` and
    ``limit_alphabet`` apply to ``wordpiece`` only; ``min_frequency`` to ``wordpiece`` and ``bpe``.

    ``strip_accents: null`` strips accents exactly when ``lowercase`` (BERT's rule). ``bert_id_layout`` gives BERT's
    released ids: ``[PAD]``=0, ``[unused0..98]``=1..99, ``[UNK]``=100, ``[CLS]``=101, ``[SEP]``=102, ``[MASK]``=103;
    without it ``[PAD] [UNK] [CLS] [SEP] [MASK]`` take 0..4. ``vocab_size`` counts the special tokens.
    """

    model: Literal["wordpiece", "bpe", "unigram"] = "wordpiece"
    vocab_size: Annotated[int, annotated_types.Ge(6)]
    min_frequency: Annotated[int, annotated_types.Ge(1)]
    limit_alphabet: Annotated[int, annotated_types.Ge(1)] | None
    lowercase: bool
    strip_accents: bool | None
    handle_chinese_chars: bool
    max_input_chars_per_word: Annotated[int, annotated_types.Ge(1)]
    bert_id_layout: bool
    model_max_length: Annotated[int, annotated_types.Ge(8)]
    batch_size: Annotated[int, annotated_types.Ge(1)]

    @model_validator(mode="after")
    def _room_for_special_tokens(self) -> TrainTokenizerParams:
        if self.model == "bpe" and self.lowercase:
            raise ValueError("train_tokenizer.lowercase: expected false with model bpe (byte-level BPE is cased, "
                             "as RoBERTa's), got true")
        if self.model == "bpe" and self.vocab_size < 261:
            raise ValueError(f"train_tokenizer.vocab_size: expected int >= 261 with model bpe (5 special tokens + "
                             f"256 bytes), got {self.vocab_size}")
        specials = 104 if self.model == "wordpiece" and self.bert_id_layout else 5
        if self.vocab_size <= specials:
            raise ValueError(
                f"train_tokenizer.vocab_size: expected int > {specials} (the special tokens of "
                f"bert_id_layout: {str(self.bert_id_layout).lower()}), got {self.vocab_size}"
            )
        return self


class TrainTokenizerView(View):
    """What stage ``train_tokenizer`` reads."""

    train_tokenizer: TrainTokenizerParams
