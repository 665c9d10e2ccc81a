"""RoBERTa's byte-level BPE tokenizer built from Hugging Face ``tokenizers`` parts: train it, save it.

The pipeline is RoBERTa's (Liu et al. 2019, §4.4), itself GPT-2's byte-level BPE (Radford et al. 2019, §2.2;
BPE: Sennrich et al. 2016):

- no normaliser (the vocabulary is cased and keeps every character);
- pre-tokenizer ``ByteLevel(add_prefix_space=False)``: GPT-2's split regex, every UTF-8 byte mapped to one of 256
  printable characters (``Ġ`` is the space's: a piece that starts with it starts a word that follows a space);
- model ``BPE`` over those 256 byte characters, so any text encodes without an unknown token and decodes back;
- decoder ``ByteLevel`` and RoBERTa's post-processor ``<s> A </s>`` / ``<s> A </s></s> B </s>`` with
  ``trim_offsets`` (character offsets never cover the space a ``Ġ`` stands for).

No prefix space, as RoBERTa's own tokenizer (GPT-2's encoder prepends none; ``transformers``' ``RobertaTokenizer``
defaults to ``add_prefix_space=False``), so ``decode(encode(s)) == s`` byte for byte for any UTF-8 text, leading
spaces, control characters and the empty string included (``clean_up_tokenization_spaces`` is saved false, so
decoding leaves `` ,`` alone; ``encode`` without the special tokens around the text, or ``decode`` skipping them).
The exception is text that spells a special token: ``<s>``, ``</s>``, ``<pad>``, ``<unk>`` or ``<mask>`` written
out encodes to that token's id, as in RoBERTa (how a user writes a fill-mask query); a plain ``decode`` writes the
four back as they were, ``skip_special_tokens=True`` drops them, and ``<mask>`` takes any whitespace before it
(``"x <mask> y"`` decodes to ``"x<mask> y"``). Without a prefix space a text's first word is tokenised without
``Ġ``, as at the start of any RoBERTa input. The prefix space is given where words stand alone but belong to running text:

- pre-split words (NER, ``is_split_into_words=True``; Hugging Face documents ``add_prefix_space=True`` as required
  there for RoBERTa's tokenizer): :func:`bert_pipeline.tasks.ner.tokenize_ner` takes
  :func:`bert_pipeline.data.tokenizer.with_prefix_space`, a copy that prepends a space to every word, so each word,
  the first of a sentence included, gets the pieces it has after a space in running text; the NER predictor tags
  text with the same copy, so a text's first word gets the pieces NER was trained on;
- pre-training's sentences: a document's later sentences are tokenized after a space, its first as a text's start
  (:func:`bert_pipeline.data.shard_builder.tokenize_sentences`), the ids of the document's whole text.

Special tokens ``<s> <pad> </s> <unk> <mask>`` take ids 0..4, as in RoBERTa's released vocabulary. The folder
loads with ``AutoTokenizer`` as ``transformers``' RoBERTa tokenizer (``vocab.json`` + ``merges.txt`` beside
``tokenizer.json``; ``transformers`` 5 rebuilds its pre-tokenizer and post-processor from the saved
``add_prefix_space`` and ``trim_offsets``, so the config must say false too).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

from bert_pipeline.data.wordpiece import save_tokenizer_folder, train_measure_publish

BOS, PAD, EOS, UNK, MASK = "<s>", "<pad>", "</s>", "<unk>", "<mask>"
SPECIAL_TOKENS = (BOS, PAD, EOS, UNK, MASK)
"""In id order (0..4), RoBERTa's layout."""
SPECIAL_TOKENS_MAP = {
    "bos_token": BOS, "eos_token": EOS, "cls_token": BOS, "sep_token": EOS, "pad_token": PAD, "unk_token": UNK,
    "mask_token": MASK,
}
WORD_START = "\u0120"  # "Ġ": the byte-level character of a space, so a piece starting with it starts a word
BYTE_ALPHABET_SIZE = 256
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + BYTE_ALPHABET_SIZE
MODEL_INPUT_NAMES = ("input_ids", "attention_mask")  # RoBERTa takes no token types
PREFIX_SPACE = False
"""``add_prefix_space`` of the pre-tokenizer, the post-processor and the saved config: RoBERTa's, and the exact
round trip (a prefix space would come back as a leading space of the decoded text)."""


def is_bpe_continuation(token: str) -> bool:
    """Byte-level BPE's continuation rule: a piece that does not start with ``Ġ`` goes on the piece before it (a
    text's first piece, without ``Ġ`` since no space is prepended, has no piece before it and starts its word)."""
    return not token.startswith(WORD_START)


def _finish(tokenizer: Tokenizer) -> Tokenizer:
    """Register the special tokens and RoBERTa's post-processor on a trained byte-level BPE pipeline."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    # <mask> swallows the space before it, as RoBERTa's tokenizer declares (lstrip)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=t == MASK)
                                  for t in SPECIAL_TOKENS])
    tokenizer.post_processor = processors.RobertaProcessing(
        (EOS, vocab[EOS]), (BOS, vocab[BOS]), trim_offsets=True, add_prefix_space=PREFIX_SPACE
    )
    return tokenizer


def train_bpe(
    texts: Callable[[], Iterable[str] | Iterable[list[str]]],
    *,
    vocab_size: int,
    min_frequency: int = 2,
    length: int | None = None,
    show_progress: bool = False,
) -> Tokenizer:
    """Learn a byte-level BPE vocabulary (RoBERTa's tokenizer) on texts.

    Args:
        texts: called once; yields texts or lists of texts (e.g. :func:`bert_pipeline.data.wordpiece.iter_text_batches`).
        vocab_size: entries including the 5 special tokens and the 256 byte characters (RoBERTa: 50,265).
        min_frequency: a pair must occur this often to be merged.
        length: number of items ``texts()`` yields (progress bar only).
        show_progress: the trainer's progress bar.

    Returns:
        The ``tokenizers.Tokenizer``; ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, ``<mask>``=4.

    Raises:
        ValueError: ``vocab_size`` below 261 (special tokens + byte alphabet).
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"expected >= {MIN_VOCAB_SIZE} (5 special tokens + 256 bytes), got {vocab_size}")
    tokenizer = Tokenizer(BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=PREFIX_SPACE)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=show_progress,
    )
    tokenizer.train_from_iterator(texts(), trainer=trainer, length=length)
    return _finish(tokenizer)


def save_bpe_tokenizer(tokenizer: Tokenizer, folder: str | Path, *, model_max_length: int = 512) -> None:
    """Write ``tokenizer.json``, ``vocab.json``, ``merges.txt``, ``tokenizer_config.json`` (RoBERTa's tokenizer
    class, ``add_prefix_space`` false, ``trim_offsets`` true, ``clean_up_tokenization_spaces`` false) and
    ``special_tokens_map.json`` into the existing, empty ``folder``.

    Args:
        tokenizer: a pipeline from :func:`train_bpe`.
        folder: an existing, empty directory.
        model_max_length: the longest sequence (tokens) the models will take.
    """
    from transformers import RobertaTokenizerFast

    folder = Path(folder)
    hf = RobertaTokenizerFast(
        tokenizer_object=tokenizer, add_prefix_space=PREFIX_SPACE, trim_offsets=True,
        model_max_length=model_max_length, model_input_names=list(MODEL_INPUT_NAMES), **SPECIAL_TOKENS_MAP,
        # written into the config so no transformers version's default can turn it on: clean-up deletes the
        # space before punctuation (" ," -> ","), which breaks the exact round trip
        clean_up_tokenization_spaces=False,
    )
    save_tokenizer_folder(hf, folder, SPECIAL_TOKENS_MAP, tokenizer_class="RobertaTokenizerFast")
    tokenizer.model.save(str(folder))  # vocab.json + merges.txt, the files RoBERTa's slow tokenizer reads


def train_bpe_folder(
    corpus: Any,
    out_dir: str | Path,
    *,
    vocab_size: int,
    min_frequency: int,
    model_max_length: int,
    batch_size: int,
    text_column: str = "text",
) -> tuple[dict[str, Any], dict[int, int], dict[str, float | None]]:
    """Train byte-level BPE on ``corpus["train"]``, measure it on ``corpus["validation"]`` and publish ``out_dir``
    atomically once ``AutoTokenizer`` reloads it to the same ids
    (:func:`bert_pipeline.data.wordpiece.train_measure_publish`).

    Returns:
        ``(metrics, histogram, timing)``; ``continuation_share`` counts pieces without a leading ``Ġ``.

    Raises:
        ValueError: ``vocab_size`` too small; the saved folder does not reload to the same ids.
    """

    def train(texts: Callable[[], Iterator[list[str]]], length: int) -> Tokenizer:
        return train_bpe(texts, vocab_size=vocab_size, min_frequency=min_frequency, length=length,
                         show_progress=sys.stderr.isatty())

    return train_measure_publish(
        corpus, out_dir, train=train,
        save=lambda tokenizer, folder: save_bpe_tokenizer(tokenizer, folder, model_max_length=model_max_length),
        batch_size=batch_size, text_column=text_column, unk_token=UNK, is_continuation=is_bpe_continuation,
    )
