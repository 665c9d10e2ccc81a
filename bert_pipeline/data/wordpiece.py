"""BERT's WordPiece tokenizer built from Hugging Face ``tokenizers`` parts: train it, load it, save it, measure it.

The pipeline is BERT's (Devlin et al. 2019, §3 and appendix A; WordPiece: Schuster & Nakajima 2012, Wu et al.
2016, §4.1), assembled from ``tokenizers`` components so it runs in Rust:

- normaliser ``BertNormalizer``: drop control/zero-width characters and U+FFFD, map whitespace to a space, put spaces
  around CJK ideographs, strip accents (NFD, drop Mn marks) and lowercase;
- pre-tokenizer ``BertPreTokenizer``: split on whitespace and on every punctuation character;
- model ``WordPiece``: greedy longest-match-first, continuation pieces prefixed ``##``, a word longer than
  ``max_input_chars_per_word`` characters or with no match becomes ``[UNK]``;
- decoder ``decoders.WordPiece("##")`` and a template post-processor ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]``
  with ``token_type_ids`` 0 for ``A`` and 1 for ``B``.

Training uses ``tokenizers``' ``WordPieceTrainer``, which learns the vocabulary by BPE-style merges of the most
frequent adjacent pair (not Google's likelihood criterion); the encoding side is exactly BERT's. The trained
vocabulary is then re-assembled through :func:`build_bert_tokenizer`, the same function that loads any released
BERT ``vocab.txt``, so one code path is checked against ``transformers``' reference ``BertTokenizer``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece
from tokenizers.trainers import WordPieceTrainer

from bert_pipeline.io import atomic_dir

log = logging.getLogger(__name__)

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
CONTINUATION_PREFIX = "##"
NUM_UNUSED = 99  # [unused0]..[unused98] in BERT's released vocabularies
BERT_MAX_INPUT_CHARS_PER_WORD = 100  # what transformers' BertTokenizer always rebuilds with
MODEL_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")  # what BERT models take
PARALLELISM_ENV = "TOKENIZERS_PARALLELISM"
SPECIAL_TOKENS_MAP = {"pad_token": PAD, "unk_token": UNK, "cls_token": CLS, "sep_token": SEP, "mask_token": MASK}


class VocabTooSmallError(ValueError):
    """``vocab_size`` cannot hold the special tokens plus the alphabet the trainer must keep.

    Attributes:
        needed: the number of entries the trainer kept before any merge (special tokens + characters + their
            ``##`` forms).
        requested: the ``vocab_size`` asked for.
    """

    def __init__(self, needed: int, requested: int):
        self.needed, self.requested = needed, requested
        super().__init__(
            f"expected >= {needed} (special tokens + alphabet with its ## forms), got {requested}"
        )


class EmptyTrainingDataError(ValueError):
    """The training texts hold no word at all (empty corpus, or only whitespace/control characters)."""


def special_tokens(bert_id_layout: bool = True) -> list[str]:
    """The special tokens in id order.

    With ``bert_id_layout`` (the layout of BERT's released vocabularies): ``[PAD]``=0, ``[unused0]``..``[unused98]``
    =1..99, ``[UNK]``=100, ``[CLS]``=101, ``[SEP]``=102, ``[MASK]``=103. Without: ``[PAD]``=0, ``[UNK]``=1,
    ``[CLS]``=2, ``[SEP]``=3, ``[MASK]``=4 (the layout of ``transformers``' default ``BertTokenizer``).
    """
    if bert_id_layout:
        return [PAD] + [f"[unused{i}]" for i in range(NUM_UNUSED)] + [UNK, CLS, SEP, MASK]
    return [PAD, UNK, CLS, SEP, MASK]


def bert_normalizer(
    lowercase: bool = True, strip_accents: bool | None = None, handle_chinese_chars: bool = True
) -> normalizers.Normalizer:
    """BERT's normaliser (``BasicTokenizer`` cleaning). ``strip_accents=None`` follows ``lowercase``, as BERT."""
    return normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=handle_chinese_chars, strip_accents=strip_accents, lowercase=lowercase
    )


def bare_tokenizer(
    vocab: dict[str, int] | None,
    lowercase: bool,
    strip_accents: bool | None,
    handle_chinese_chars: bool,
    max_input_chars_per_word: int,
) -> Tokenizer:
    """An untrained (``vocab=None``) or given-vocabulary WordPiece ``Tokenizer`` with BERT's normaliser,
    pre-tokenizer and decoder, no post-processor: what training starts from."""
    model = WordPiece(
        vocab, unk_token=UNK, max_input_chars_per_word=max_input_chars_per_word,
        continuing_subword_prefix=CONTINUATION_PREFIX,
    ) if vocab is not None else WordPiece(
        unk_token=UNK, max_input_chars_per_word=max_input_chars_per_word, continuing_subword_prefix=CONTINUATION_PREFIX
    )
    tok = Tokenizer(model)
    tok.normalizer = bert_normalizer(lowercase, strip_accents, handle_chinese_chars)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix=CONTINUATION_PREFIX)
    return tok


def build_bert_tokenizer(
    vocab: dict[str, int] | str | Path,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    handle_chinese_chars: bool = True,
    max_input_chars_per_word: int = 100,
) -> Tokenizer:
    """BERT's full tokenizer pipeline around an existing WordPiece vocabulary.

    Args:
        vocab: token -> id mapping (ids ``0..n-1``), or the path of a BERT ``vocab.txt`` (one token per line,
            line number = id), e.g. the packaged MiniLM's BERT-Base uncased vocabulary.
        lowercase, strip_accents, handle_chinese_chars: ``BertNormalizer`` options; ``strip_accents=None`` strips
            exactly when ``lowercase`` (BERT's rule).
        max_input_chars_per_word: longer words become ``[UNK]``.

    Returns:
        A ``tokenizers.Tokenizer``; ``encode(a)`` gives ``[CLS] a [SEP]``, ``encode(a, b)`` gives
        ``[CLS] a [SEP] b [SEP]`` with ``type_ids`` 0/1. The five special tokens are registered as special added
        tokens (matched verbatim in the raw text, as ``transformers`` does); ``[unusedN]`` stay plain entries.

    Raises:
        ValueError: ``vocab`` lacks one of ``[PAD] [UNK] [CLS] [SEP] [MASK]``, has duplicate lines or ids that are
            not ``0..n-1``.
        FileNotFoundError: the ``vocab.txt`` path does not exist.
    """
    if not isinstance(vocab, dict):
        vocab = read_vocab_txt(vocab)
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError("vocabulary ids must be exactly 0..n-1")
    missing = [t for t in SPECIAL_TOKENS_MAP.values() if t not in vocab]
    if missing:
        raise ValueError(f"vocabulary lacks the special token(s) {', '.join(missing)}")
    tok = bare_tokenizer(dict(vocab), lowercase, strip_accents, handle_chinese_chars, max_input_chars_per_word)
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in sorted(SPECIAL_TOKENS_MAP.values(), key=vocab.get)]
    )
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS}:0 $A:0 {SEP}:0",
        pair=f"{CLS}:0 $A:0 {SEP}:0 $B:1 {SEP}:1",
        special_tokens=[(CLS, vocab[CLS]), (SEP, vocab[SEP])],
    )
    return tok


def read_vocab_txt(path: str | Path) -> dict[str, int]:
    """Read a BERT ``vocab.txt``: one token per line, the line number (from 0) is the id.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a token occurs twice.
    """
    vocab: dict[str, int] = {}
    with open(path, encoding="utf-8", newline="\n") as fh:
        for i, line in enumerate(fh):
            token = line.rstrip("\n")
            if token in vocab:
                raise ValueError(f"{path}: line {i + 1}: token {token!r} already on line {vocab[token] + 1}")
            vocab[token] = i
    return vocab


def vocab_txt(tokenizer: Tokenizer) -> str:
    """The tokenizer's vocabulary as ``vocab.txt`` text (tokens in id order, one per line).

    Raises:
        ValueError: ids are not ``0..n-1`` or a token contains a line break (it could not be read back).
    """
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ValueError("vocabulary ids must be exactly 0..n-1")
    bad = [t for t, _ in by_id if "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"token {bad[0]!r} contains a line break and cannot be written to vocab.txt")
    return "".join(t + "\n" for t, _ in by_id)


TEXT_BATCH_BYTES = 1 << 20
"""UTF-8 bytes of text per list :func:`iter_text_batches` yields (at most, but for one longer text)."""

TEXT_PIECE_CHARS = 1 << 16
"""The longest string :func:`iter_text_batches` hands a trainer: a longer text goes in pieces cut between words."""


def iter_text_batches(dataset: Any, column: str = "text", batch_size: int = 1000,
                      piece_chars: int | None = TEXT_PIECE_CHARS) -> Iterator[list[str]]:
    """Yield ``column`` of an Arrow-backed ``datasets.Dataset`` in lists of at most ``batch_size`` strings, cutting
    each text longer than ``piece_chars`` into pieces before a space that precedes a word
    (:data:`bert_pipeline.data.bounded.WORD_BOUNDARIES`; ``None``: whole texts, e.g. to count documents).

    The pipeline's pre-tokenizers (BERT's, byte-level BPE's, Unigram's ``Metaspace``) see the same words in the
    pieces as in the whole text, so the vocabularies learnt and the fertility measured do not change, while a
    trainer normalises pieces of bounded length (it holds per-character alignments of each string it normalises:
    about 100 bytes per character). A dataset read straight from its Arrow files (as :func:`bert_pipeline.data.corpus.open_corpus`
    opens a corpus) is streamed from a memory map in lists of at most :data:`TEXT_BATCH_BYTES` bytes, its pages
    released after each (:func:`bert_pipeline.data.corpus.iter_string_batches`): memory holds one list, whatever the
    corpus's size; any other dataset in lists of ``batch_size`` rows.
    """
    from bert_pipeline.data.bounded import WORD_BOUNDARIES, iter_pieces

    files = [Path(f["filename"]) for f in getattr(dataset, "cache_files", [])]
    if files and getattr(dataset, "_indices", None) is None:
        from bert_pipeline.data.corpus import iter_string_batches

        batches: Iterable[list[str]] = iter_string_batches(files, column, batch_size, TEXT_BATCH_BYTES)
    else:
        batches = (batch[column] for batch in dataset.select_columns([column]).iter(batch_size=batch_size))
    for batch in batches:
        if piece_chars is None or all(len(text) <= piece_chars for text in batch):
            yield batch
            continue
        out: list[str] = []
        for text in batch:
            for piece, _ in iter_pieces([text], piece_chars, WORD_BOUNDARIES):
                out.append(piece)
                if len(out) >= batch_size:
                    yield out
                    out = []
        if out:
            yield out


@contextlib.contextmanager
def rust_parallelism(enabled: bool = True) -> Iterator[None]:
    """Turn ``tokenizers``' own (Rayon) thread parallelism on or off inside the block, then restore the setting.

    The package default (``bert_pipeline/__init__``) is off, so that processes forked later (``datasets.map(num_proc=..)``)
    do not inherit a thread pool; a stage that forks nothing may turn it on around its heavy calls. Training
    results do not depend on it (the pair counts are sums; see :func:`train_wordpiece`).
    """
    old = os.environ.get(PARALLELISM_ENV)
    os.environ[PARALLELISM_ENV] = "true" if enabled else "false"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(PARALLELISM_ENV, None)
        else:
            os.environ[PARALLELISM_ENV] = old


def train_wordpiece(
    texts: Callable[[], Iterable[str] | Iterable[list[str]]],
    *,
    vocab_size: int,
    min_frequency: int = 2,
    limit_alphabet: int | None = 1000,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    handle_chinese_chars: bool = True,
    max_input_chars_per_word: int = 100,
    bert_id_layout: bool = True,
    length: int | None = None,
    show_progress: bool = False,
) -> Tokenizer:
    """Learn a WordPiece vocabulary from texts and return BERT's full pipeline around it.

    The vocabulary is learnt by ``tokenizers``' ``WordPieceTrainer``: the kept characters and their ``##`` forms,
    then merges of the most frequent adjacent pair (Sennrich et al. 2016 §3.1, with BERT's ``##`` continuation
    pieces). That trainer is not deterministic on its own (huggingface/tokenizers#1794): it numbers the ``##``
    forms in hash-map order, numbers break ties between equally frequent pairs, and ``limit_alphabet`` cuts ties
    at random. So training runs in two passes over ``texts``: a first pass without merges finds the alphabet and
    the ``##`` forms; the ``##`` forms are then handed to the trainer in sorted order right after the special
    tokens (so their ids, and every tie-break, are fixed), and the alphabet cut is made here (count descending,
    then code point) and handed over as ``initial_alphabet``. The result is re-numbered as BERT's vocabularies:
    special tokens (:func:`special_tokens`), characters, ``##`` characters, then merges in the order learnt.

    Args:
        texts: called once per pass; returns strings or lists of strings (batches), e.g.
            ``lambda: iter_text_batches(dataset)``.
        vocab_size: the largest vocabulary wanted (special tokens included). A small corpus may give fewer.
        min_frequency: a pair must occur at least this often to be merged.
        limit_alphabet: keep at most this many distinct characters (the most frequent); ``None`` keeps all.
        lowercase, strip_accents, handle_chinese_chars, max_input_chars_per_word: see :func:`build_bert_tokenizer`.
        bert_id_layout: BERT's released id layout (see :func:`special_tokens`).
        length: the number of items ``texts()`` yields (progress display only).
        show_progress: let ``tokenizers`` draw its progress bars on stderr.

    Returns:
        The tokenizer from :func:`build_bert_tokenizer` on the learnt vocabulary.

    Raises:
        VocabTooSmallError: ``vocab_size`` is below the special tokens plus the kept alphabet and its ``##`` forms.
        EmptyTrainingDataError: the texts hold no word.
    """
    specials = special_tokens(bert_id_layout)
    options = (lowercase, strip_accents, handle_chinese_chars, max_input_chars_per_word)

    # Pass 1: the alphabet and the characters that occur inside words (their ## forms), no merges.
    probe = bare_tokenizer(None, *options)
    probe.train_from_iterator(
        texts(),
        trainer=WordPieceTrainer(vocab_size=1, continuing_subword_prefix=CONTINUATION_PREFIX,
                                 show_progress=show_progress),
        length=length,
    )
    seen = probe.get_vocab(with_added_tokens=False)
    alphabet = sorted(t for t in seen if len(t) == 1)
    inside = {t[len(CONTINUATION_PREFIX):] for t in seen if t.startswith(CONTINUATION_PREFIX) and len(t) == 3}
    if not alphabet:
        raise EmptyTrainingDataError("the training texts contain no word")
    if limit_alphabet is not None and len(alphabet) > limit_alphabet:
        counts = _char_counts(texts(), probe.normalizer)
        alphabet = sorted(sorted(alphabet, key=lambda c: (-counts[c], c))[:limit_alphabet])
    continuations = [CONTINUATION_PREFIX + c for c in alphabet if c in inside]
    needed = len(specials) + len(alphabet) + len(continuations)
    if needed > vocab_size:
        raise VocabTooSmallError(needed, vocab_size)

    # Pass 2: the merges, with every id fixed before the first merge.
    tok = bare_tokenizer(None, *options)
    trainer = WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials + continuations,
        continuing_subword_prefix=CONTINUATION_PREFIX,
        show_progress=show_progress,
    )
    if limit_alphabet is not None:
        trainer.limit_alphabet = len(alphabet)
        trainer.initial_alphabet = alphabet
    tok.train_from_iterator(texts(), trainer=trainer, length=length)
    learnt = tok.get_vocab(with_added_tokens=True)
    fixed = specials + alphabet + continuations
    missing = [t for t in fixed if t not in learnt]
    if missing:  # the trainer's contract, checked rather than assumed
        raise RuntimeError(f"the trainer dropped {missing[0]!r} from the vocabulary")
    fixed_set = set(fixed)
    merged = sorted((t for t in learnt if t not in fixed_set), key=learnt.__getitem__)
    vocab = {t: i for i, t in enumerate(fixed + merged)}
    if len(vocab) < vocab_size:
        log.warning("the corpus gave %d vocabulary entries, fewer than vocab_size=%d", len(vocab), vocab_size)
    return build_bert_tokenizer(
        vocab, lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=handle_chinese_chars,
        max_input_chars_per_word=max_input_chars_per_word,
    )


def _char_counts(texts: Iterable[str] | Iterable[list[str]], normalizer: normalizers.Normalizer) -> Counter[str]:
    """Character counts of the normalised texts, whitespace excluded (what the trainer's alphabet counts)."""
    counts: Counter[str] = Counter()
    for item in texts:
        for text in [item] if isinstance(item, str) else item:
            counts.update(normalizer.normalize_str(text))
    counts.pop(" ", None)  # BertNormalizer maps every whitespace character to a space
    return counts


def save_tokenizer(
    tokenizer: Tokenizer,
    folder: str | Path,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    handle_chinese_chars: bool = True,
    model_max_length: int = 512,
) -> None:
    """Write a folder that ``AutoTokenizer.from_pretrained(folder)`` loads to the same ids as ``tokenizer``.

    Files: ``tokenizer.json``, ``tokenizer_config.json`` (through ``transformers``' ``save_pretrained``),
    ``vocab.txt`` and ``special_tokens_map.json`` (written here: ``transformers`` 5 no longer writes them).

    ``transformers``' ``BertTokenizer`` rebuilds its pipeline from ``tokenizer_config.json`` and the vocabulary and
    always uses ``max_input_chars_per_word=100``; when the tokenizer uses another limit the config names
    ``PreTrainedTokenizerFast`` instead, which loads ``tokenizer.json`` verbatim.

    Args:
        tokenizer: a pipeline from :func:`build_bert_tokenizer` / :func:`train_wordpiece`.
        folder: an existing, empty directory.
        lowercase, strip_accents, handle_chinese_chars: the options ``tokenizer`` was built with.
        model_max_length: the longest sequence (tokens) the models will take (BERT: 512).
    """
    from transformers import BertTokenizerFast

    folder = Path(folder)
    hf = BertTokenizerFast(
        tokenizer_object=tokenizer,
        do_lower_case=lowercase,
        strip_accents=strip_accents,
        tokenize_chinese_chars=handle_chinese_chars,
        model_max_length=model_max_length,
        model_input_names=list(MODEL_INPUT_NAMES),
        **SPECIAL_TOKENS_MAP,
    )
    model = json.loads(tokenizer.to_str())["model"]
    fast_only = model["max_input_chars_per_word"] != BERT_MAX_INPUT_CHARS_PER_WORD
    save_tokenizer_folder(hf, folder, SPECIAL_TOKENS_MAP,
                          tokenizer_class="PreTrainedTokenizerFast" if fast_only else None)
    (folder / "vocab.txt").write_text(vocab_txt(tokenizer), encoding="utf-8", newline="\n")


def save_tokenizer_folder(hf: Any, folder: Path, special_tokens: dict[str, str], *,
                          tokenizer_class: str | None = None) -> None:
    """``hf.save_pretrained(folder)``, then ``tokenizer_config.json``'s ``tokenizer_class`` set to
    ``tokenizer_class`` (when given; the class ``AutoTokenizer`` instantiates) and ``special_tokens_map.json``
    written from ``special_tokens`` (``transformers`` 5 no longer writes it), both as sorted, indented JSON so
    that the folder is byte-identical across runs. Shared by the WordPiece, BPE and Unigram savers."""
    hf.save_pretrained(str(folder))
    if tokenizer_class is not None:
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["tokenizer_class"] = tokenizer_class
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                               encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(
        json.dumps(special_tokens, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )


def check_roundtrip(folder: str | Path, tokenizer: Tokenizer, texts: list[str]) -> None:
    """Load ``folder`` with ``AutoTokenizer`` and compare its ids with ``tokenizer`` on ``texts`` and pairs of them.

    Raises:
        ValueError: the first text (or pair) whose ``input_ids`` or ``token_type_ids`` differ.
    """
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folder))
    firsts = [t for t in texts if t]  # transformers' __call__ takes text_pair="" as no pair at all
    pairs = list(zip(firsts, firsts[1:] + firsts[:1], strict=True))
    for a, b in [(t, None) for t in texts] + pairs:
        want = tokenizer.encode(a, b) if b is not None else tokenizer.encode(a)
        got = hf(a, b, verbose=False) if b is not None else hf(a, verbose=False)
        # token_type_ids only where the tokenizer returns them (RoBERTa's model_input_names leave them out)
        if got["input_ids"] != want.ids or got.get("token_type_ids", want.type_ids) != want.type_ids:
            raise ValueError(f"{folder}: AutoTokenizer gives other ids than the trained tokenizer on {a[:60]!r}")


def is_wordpiece_continuation(token: str) -> bool:
    """WordPiece's continuation rule: a piece that goes on the word before it starts with ``##``."""
    return token.startswith(CONTINUATION_PREFIX)


def fertility(
    tokenizer: Tokenizer,
    batches: Iterable[list[str]],
    *,
    unk_token: str = UNK,
    is_continuation: Callable[[str], bool] = is_wordpiece_continuation,
) -> tuple[dict[str, Any], dict[int, int]]:
    """Tokenization statistics of ``tokenizer`` on texts.

    A *word* is a unit of the tokenizer's pre-tokenizer (BERT's: a whitespace-separated run without punctuation,
    a single punctuation character, or a single CJK ideograph with ``handle_chinese_chars``).

    Args:
        tokenizer: a trained tokenizer (special tokens are not added).
        batches: lists of texts.
        unk_token: the unknown token counted by ``unk_rate``.
        is_continuation: the model's continuation rule on a token string (WordPiece ``##``; byte-level BPE: no
            leading ``Ġ``; Unigram: no leading ``▁``), counted by ``continuation_share``.

    Returns:
        ``(metrics, histogram)``. ``metrics``: ``vocab_size``, ``documents``, ``words``, ``tokens``,
        ``fertility`` (tokens per word), ``unk_rate`` (share of tokens that are ``unk_token``), ``continuation_share``
        (share of tokens that are continuation pieces), ``whole_word_share`` (share of words that are one known token);
        floats rounded to 6 decimals. ``histogram``: tokens per word -> number of words.
    """
    unk_id = tokenizer.token_to_id(unk_token)
    hist: Counter[int] = Counter()
    docs = tokens = unks = cont = whole = 0
    for batch in batches:
        for enc in tokenizer.encode_batch(batch, add_special_tokens=False):
            docs += 1
            per_word = Counter(w for w in enc.word_ids if w is not None)
            hist.update(per_word.values())
            tokens += len(enc.ids)
            unks += sum(1 for i in enc.ids if i == unk_id)
            cont += sum(1 for t in enc.tokens if is_continuation(t))
            single = {w for w, n in per_word.items() if n == 1}
            whole += sum(1 for w, i in zip(enc.word_ids, enc.ids, strict=True) if w in single and i != unk_id)
    words = sum(hist.values())

    def share(num: int, den: int) -> float:
        return round(num / den, 6) if den else 0.0

    metrics = {
        "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
        "documents": docs,
        "words": words,
        "tokens": tokens,
        "fertility": share(tokens, words),
        "unk_rate": share(unks, tokens),
        "continuation_share": share(cont, tokens),
        "whole_word_share": share(whole, words),
    }
    return metrics, dict(sorted(hist.items()))


def histogram_csv(histogram: dict[int, int]) -> str:
    """``tokens_per_word,count`` CSV text (a DVC plot), rows sorted by ``tokens_per_word``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["tokens_per_word", "count"])
    for k, v in sorted(histogram.items()):
        writer.writerow([k, v])
    return buf.getvalue()


ROUNDTRIP_TEXTS = 32
"""Validation texts re-encoded through ``AutoTokenizer`` before a trained tokenizer folder is published."""


def train_tokenizer_folder(
    corpus: Any,
    out_dir: str | Path,
    *,
    vocab_size: int,
    min_frequency: int,
    limit_alphabet: int | None,
    lowercase: bool,
    strip_accents: bool | None,
    handle_chinese_chars: bool,
    max_input_chars_per_word: int,
    bert_id_layout: bool,
    model_max_length: int,
    batch_size: int,
    text_column: str = "text",
) -> tuple[dict[str, Any], dict[int, int], dict[str, float | None]]:
    """Train BERT WordPiece on ``corpus["train"]``, measure it on ``corpus["validation"]``, and publish the
    folder ``out_dir`` atomically after checking that ``AutoTokenizer`` reloads it to the same ids.

    Args:
        corpus: a ``DatasetDict`` with ``train`` and ``validation`` splits holding ``text_column``
            (:func:`bert_pipeline.data.corpus.open_corpus`).
        out_dir: the tokenizer folder (``tokenizer.json``, ``vocab.txt``, ``tokenizer_config.json``,
            ``special_tokens_map.json``).
        vocab_size, min_frequency, limit_alphabet, max_input_chars_per_word, bert_id_layout: see
            :func:`train_wordpiece`; lowercase, strip_accents, handle_chinese_chars: :func:`bert_normalizer`.
        model_max_length: the longest input recorded in ``tokenizer_config.json`` (tokens).
        batch_size: texts per batch streamed from Arrow (bounded memory).

    Returns:
        ``(metrics, histogram, timing)``: :func:`fertility`'s metrics and histogram on the validation split, and
        wall-clock training seconds, megabytes and MB/s (for a ``cache: false`` timing file).

    Raises:
        VocabTooSmallError: ``vocab_size`` cannot hold the special tokens and the alphabet.
        EmptyTrainingDataError: no word in the train split.
        ValueError: the saved folder does not reload to the same ids.
    """
    options = {"lowercase": lowercase, "strip_accents": strip_accents, "handle_chinese_chars": handle_chinese_chars}

    def train(texts: Callable[[], Iterator[list[str]]], length: int) -> Tokenizer:
        return train_wordpiece(
            texts, vocab_size=vocab_size, min_frequency=min_frequency, limit_alphabet=limit_alphabet,
            max_input_chars_per_word=max_input_chars_per_word, bert_id_layout=bert_id_layout, length=length,
            show_progress=sys.stderr.isatty(), **options,
        )

    return train_measure_publish(
        corpus, out_dir, train=train,
        save=lambda tokenizer, folder: save_tokenizer(tokenizer, folder, model_max_length=model_max_length, **options),
        batch_size=batch_size, text_column=text_column,
    )


def train_measure_publish(
    corpus: Any,
    out_dir: str | Path,
    *,
    train: Callable[[Callable[[], Iterator[list[str]]], int], Tokenizer],
    save: Callable[[Tokenizer, Path], None],
    batch_size: int,
    text_column: str = "text",
    unk_token: str = UNK,
    is_continuation: Callable[[str], bool] = is_wordpiece_continuation,
) -> tuple[dict[str, Any], dict[int, int], dict[str, float | None]]:
    """The publishing path every vocabulary model shares: train on ``corpus["train"]``, measure on
    ``corpus["validation"]`` (:func:`fertility`), save into a temporary folder, check that ``AutoTokenizer``
    reloads it to the same ids (:func:`check_roundtrip`), then publish ``out_dir`` atomically.

    Args:
        corpus: a ``DatasetDict`` with ``train`` and ``validation`` splits holding ``text_column``.
        out_dir: the tokenizer folder to publish.
        train: ``train(texts, length)`` -> the trained pipeline; ``texts()`` yields batches of train texts anew
            on each call, ``length`` is the number of train texts.
        save: ``save(tokenizer, folder)`` writes the folder's files into an existing empty directory.
        batch_size: texts per batch streamed from Arrow (bounded memory).
        unk_token, is_continuation: see :func:`fertility`.

    Returns:
        ``(metrics, histogram, timing)`` as :func:`train_tokenizer_folder`.

    Raises:
        ValueError: the saved folder does not reload to the same ids; whatever ``train`` raises.
    """
    import time

    train_split = corpus["train"]
    start = time.perf_counter()
    with rust_parallelism(True):  # nothing forks while the trainer runs; results do not depend on it
        tokenizer = train(lambda: iter_text_batches(train_split, text_column, batch_size), len(train_split))
    train_seconds = time.perf_counter() - start
    train_bytes = sum(
        len(t.encode("utf-8")) for b in iter_text_batches(train_split, text_column, batch_size) for t in b
    )
    log.info("trained %d entries on %.1f MB in %.1f s", tokenizer.get_vocab_size(), train_bytes / 1e6, train_seconds)

    validation = corpus["validation"]
    with rust_parallelism(True):
        metrics, histogram = fertility(  # whole texts, as documents are counted (the corpus bounds their length)
            tokenizer, iter_text_batches(validation, text_column, batch_size, piece_chars=None), unk_token=unk_token,
            is_continuation=is_continuation,
        )
    heads = validation.select(range(min(ROUNDTRIP_TEXTS, len(validation))))[text_column]
    probe = [text[:TEXT_PIECE_CHARS] for text in heads]  # a long text's head checks the same ids
    with atomic_dir(out_dir) as tmp:
        save(tokenizer, Path(tmp))
        try:
            check_roundtrip(tmp, tokenizer, probe)
        except ValueError as exc:
            raise ValueError(str(exc).replace(str(tmp), str(out_dir))) from None
    timing = {
        "train_seconds": round(train_seconds, 3),
        "train_megabytes": round(train_bytes / 1e6, 3),
        "train_mb_per_s": round(train_bytes / 1e6 / train_seconds, 3) if train_seconds else None,
    }
    return metrics, histogram, timing
