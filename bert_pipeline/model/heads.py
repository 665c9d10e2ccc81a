"""Task heads' pre- and post-processing: NER label alignment, QA windows and n-best decoding, pooling.

Fine-tuning as in Devlin et al. 2019, §4: ``[CLS]`` (or mean) pooling -> Linear for a sentence label, a
per-token Linear for NER (label on each word's first sub-token), start/end logits for extractive QA (SQuAD,
§4.2), with long contexts split into overlapping windows (``doc_stride``) as in Hugging Face ``run_qa.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification
from transformers.modeling_outputs import SequenceClassifierOutput

from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.data.tokenizer import with_prefix_space
from bert_pipeline.model.families import FAMILIES, Family, family_of, is_family_model_type

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------- NER
class NerWindows(NamedTuple):
    """Pre-split sentences as model windows (:func:`tokenize_ner`).

    ``features``: per window ``{"input_ids", "attention_mask", "token_type_ids"?, "labels"?}`` (lists of ints,
    at most ``max_length`` long); ``example_index``: the sentence each window came from; ``word_at``: per window and
    position, the word index whose *first* sub-token sits there, else None (special tokens, later sub-tokens);
    ``context``: per window and position, tokens of context on the nearer side (how centred it is);
    ``n_words``: words per sentence.
    """

    features: list[dict[str, list[int]]]
    example_index: list[int]
    word_at: list[list[int | None]]
    context: list[list[int]]
    n_words: list[int]


def tokenize_ner(tokenizer, tokens: list[list[str]], tags: list[list[int]] | None, max_length: int,
                 doc_stride: int) -> NerWindows:
    """Tokenize pre-split words into windows of at most ``max_length`` tokens, so no word is lost to truncation.

    A sentence whose sub-tokens do not fit one window is split into windows of ``max_length`` tokens (special
    tokens included) that overlap by ``doc_stride`` sub-tokens, the way ``run_qa.py`` windows long contexts
    (Devlin et al. 2019, §4.2); every window gets the tokenizer's own special tokens. With ``tags``, each window's
    first sub-tokens carry their word's label, the other sub-tokens and special tokens ``-100`` (ignored by the
    loss).

    A byte-level BPE tokenizer without a prefix space (RoBERTa's) tokenizes the words through
    :func:`bert_pipeline.data.tokenizer.with_prefix_space`: every word, the first of a sentence included, gets the
    pieces it has after a space in running text (``ĠHello``), not those of a text's first word (``Hello``).

    Raises:
        ValueError: ``doc_stride`` leaves no step (it must be below ``max_length`` minus the special tokens).
    """
    room = max_length - tokenizer.num_special_tokens_to_add(pair=False)
    if room < 1 or doc_stride >= room:
        raise ValueError(f"doc_stride {doc_stride} must be below max_length {max_length} minus "
                         f"{max_length - room} special tokens")
    tokenizer = with_prefix_space(tokenizer)  # the tokenizer itself unless byte-level without a prefix space
    full = tokenizer(tokens, is_split_into_words=True, add_special_tokens=False)
    enc = tokenizer(tokens, is_split_into_words=True, truncation=True, max_length=max_length, stride=doc_stride,
                    return_overflowing_tokens=True, return_special_tokens_mask=True)
    windows = NerWindows([], [], [], [], [len(words) for words in tokens])
    next_start: dict[int, int] = {}
    for w, example in enumerate(enc["overflow_to_sample_mapping"]):
        ids, word_ids = full["input_ids"][example], full.word_ids(example)
        start = next_start.get(example, 0)  # a window repeats the previous one's last doc_stride sub-tokens
        special = enc["special_tokens_mask"][w]
        n_content = len(special) - sum(special)
        content = [t for t, s in zip(enc["input_ids"][w], special, strict=True) if not s]
        if content != ids[start:start + n_content]:  # the overflow contract this mapping relies on
            raise ValueError(f"tokenizer {type(tokenizer).__name__}: overflowing windows are not consecutive slices")
        next_start[example] = start + n_content - doc_stride
        word_at: list[int | None] = []
        context: list[int] = []
        k = 0
        for is_special in special:
            g = start + k
            first = not is_special and word_ids[g] is not None and (g == 0 or word_ids[g - 1] != word_ids[g])
            word_at.append(word_ids[g] if first else None)
            context.append(min(k, n_content - 1 - k) if not is_special else 0)
            k += 0 if is_special else 1
        feature = {key: enc[key][w] for key in ("input_ids", "attention_mask", "token_type_ids") if key in enc}
        if tags is not None:
            feature["labels"] = [IGNORE_INDEX if word is None else int(tags[example][word]) for word in word_at]
        windows.features.append(feature)
        windows.example_index.append(example)
        windows.word_at.append(word_at)
        windows.context.append(context)
    return windows


def word_predictions(windows: NerWindows, token_preds: Sequence[Sequence[int]], fill: int = 0) -> list[list[int]]:
    """Per sentence, one prediction per word: its first sub-token's, from the window where that sub-token has the
    most context (BERT's ``_check_is_max_context`` rule for overlapping windows). ``token_preds[w]``: window
    ``w``'s per-position predictions. A word with no sub-token (the tokenizer dropped it) gets ``fill`` (``O``)."""
    out = [[fill] * n for n in windows.n_words]
    best = [[-1] * n for n in windows.n_words]
    for w, example in enumerate(windows.example_index):
        for pos, word in enumerate(windows.word_at[w]):
            if word is not None and windows.context[w][pos] > best[example][word]:
                best[example][word] = windows.context[w][pos]
                out[example][word] = int(token_preds[w][pos])
    return out


# -------------------------------------------------------------------------------------------------- QA
def truncate_questions(tokenizer, questions: list[str], max_tokens: int) -> list[str]:
    """Cut each question after its first ``max_tokens`` tokens (at a token's character end), so a long question
    (a cloze headline with its subtitle) cannot crowd the context out of the window."""
    enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for q, offsets in zip(questions, enc["offset_mapping"], strict=True):
        out.append(q[:offsets[max_tokens - 1][1]] if len(offsets) > max_tokens else q)
    return out


def _skip_leading_space(context: str, span: tuple[int, int]) -> tuple[int, int]:
    """``span`` without the whitespace it starts with: a Metaspace vocabulary's (Unigram, SentencePiece) first
    piece of a word covers the space its ``▁`` stands for, so answers would start with it (byte-level BPE's
    ``trim_offsets`` and WordPiece already exclude it)."""
    start, end = span
    while start < end and context[start].isspace():
        start += 1
    return start, end


def prepare_qa_features(
    tokenizer, questions: list[str], contexts: list[str], answers: list[dict[str, list]] | None,
    max_length: int, doc_stride: int, max_question_length: int | None = None,
) -> dict[str, list]:
    """Tokenize (question, context) pairs into windows over the context.

    A context longer than ``max_length`` is split into windows that overlap by ``doc_stride`` tokens
    (``return_overflowing_tokens``). With ``answers``, each window gets ``start_positions``/``end_positions``:
    the token span of the first answer when it lies wholly inside the window, else ``0`` (``[CLS]``).

    Questions are first cut to ``max_question_length`` tokens (default ``max_length // 2``) and the stride is
    capped below the room left for the context (the fast tokenizer requires it).

    Returns:
        lists per window: ``input_ids``, ``attention_mask``, (``token_type_ids``), ``example_index`` (the
        pair it came from), ``offset_mapping`` (``(start, end)`` character offsets into the *context*, or
        ``None`` for question and special tokens), and the positions when ``answers`` is given; per *example*:
        ``question_truncated`` (bool: the question was cut to ``max_question_length`` tokens).
    Raises:
        ValueError: the tokenizer is not a fast tokenizer (offsets are needed), or the question leaves no
            room for the context.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("QA needs a fast tokenizer (offset_mapping)")
    pad_right = tokenizer.padding_side == "right"
    max_q = max_question_length or max_length // 2
    asked = questions
    questions = truncate_questions(tokenizer, questions, max_q)
    longest_q = max((len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]), default=0)
    room = max_length - longest_q - tokenizer.num_special_tokens_to_add(pair=True)
    if room < 2:
        raise ValueError(f"max_length {max_length} leaves no room for the context after a {longest_q}-token question")
    doc_stride = min(doc_stride, room - 1)
    enc = tokenizer(
        questions if pad_right else contexts, contexts if pad_right else questions,
        truncation="only_second" if pad_right else "only_first", max_length=max_length, stride=doc_stride,
        return_overflowing_tokens=True, return_offsets_mapping=True,
    )
    context_seq = 1 if pad_right else 0
    sample_map = enc.pop("overflow_to_sample_mapping")
    offsets_all = enc.pop("offset_mapping")
    out: dict[str, list] = {k: list(v) for k, v in enc.items()}
    out["example_index"], out["offset_mapping"] = [], []
    out["question_truncated"] = [cut != whole for cut, whole in zip(questions, asked, strict=True)]
    if answers is not None:
        out["start_positions"], out["end_positions"] = [], []
    for i, offsets in enumerate(offsets_all):
        ex = sample_map[i]
        seq_ids = enc.sequence_ids(i)
        out["example_index"].append(ex)
        offsets = [_skip_leading_space(contexts[ex], o) if seq_ids[k] == context_seq else None
                   for k, o in enumerate(offsets)]
        out["offset_mapping"].append(offsets)
        if answers is None:
            continue
        a = answers[ex]
        start_char = a["answer_start"][0]
        end_char = start_char + len(a["text"][0])
        ctx = [k for k, s in enumerate(seq_ids) if s == context_seq]
        s_tok = e_tok = 0
        if ctx and offsets[ctx[0]][0] <= start_char and offsets[ctx[-1]][1] >= end_char:
            s_tok = next(k for k in ctx if offsets[k][1] > start_char)
            e_tok = next(k for k in reversed(ctx) if offsets[k][0] < end_char)
        out["start_positions"].append(s_tok)
        out["end_positions"].append(e_tok)
    return out


class QaSpan(NamedTuple):
    """A decoded answer: ``text`` = ``context[start:end]`` (character offsets, end exclusive), its ``score``,
    ``start_logit + end_logit`` of the span (the decoder's ranking), and its ``probability`` as Hugging Face's
    question-answering pipeline reports it (:func:`span_probability`); both None when no window had a valid span."""

    text: str
    start: int
    end: int
    score: float | None
    probability: float | None = None


def _log_softmax_at(logits: np.ndarray, allowed: np.ndarray, index: int) -> float:
    """``log softmax(logits[allowed])`` at ``index`` (float64, max-shifted: no overflow)."""
    values = logits[allowed].astype(np.float64)
    top = values.max()
    return float(logits[index] - top - np.log(np.exp(values - top).sum()))


def span_probability(start_logits: np.ndarray, end_logits: np.ndarray, offsets: Sequence[Any], start: int,
                     end: int) -> float:
    """The probability of the span ``start..end`` (token indices) of one window, as Hugging Face's
    question-answering pipeline scores it (transformers 4.x ``QuestionAnsweringPipeline``, ``select_starts_ends``):
    a softmax of the start logits and one of the end logits over the window's context tokens and ``[CLS]``
    (position 0; question and other special tokens, ``offsets`` None, are left out), multiplied:
    ``p_start(start) * p_end(end)``. In [0, 1]; it does not depend on ``n_best``.

    Args:
        start_logits, end_logits: the window's logits, float arrays ``(seq_len,)``.
        offsets: the window's ``offset_mapping`` (None for question and special tokens).
    """
    n = min(len(offsets), len(start_logits))
    allowed = np.array([k for k in range(n) if k == 0 or offsets[k] is not None])
    s_log, e_log = np.asarray(start_logits), np.asarray(end_logits)
    return float(np.exp(_log_softmax_at(s_log, allowed, start) + _log_softmax_at(e_log, allowed, end)))


def decode_qa(
    contexts: list[str], example_index: Sequence[int], offset_mapping: Sequence[Sequence[Any]],
    start_logits: Sequence[np.ndarray], end_logits: Sequence[np.ndarray], n_best: int, max_answer_length: int,
) -> list[QaSpan]:
    """N-best span decoding over all windows of each example (Devlin et al. 2019, §4.2; Hugging Face
    ``run_qa.py``'s ``postprocess_qa_predictions``): the one decoder that scores the test split and serves
    predictions.

    For each window, the ``n_best`` highest start and end logits are paired; a pair is valid when both tokens
    lie in the context, ``start <= end`` and it spans at most ``max_answer_length`` tokens. The pair with the
    highest ``start_logit + end_logit`` over all windows wins (SQuAD v1.1: an answer always exists, so the
    ``[CLS]`` null answer is never returned); its :func:`span_probability` in its window comes with it.

    Args:
        start_logits, end_logits: per window, float arrays ``(seq_len,)``.
    Returns:
        per example a :class:`QaSpan` into its context; ``QaSpan("", 0, 0, None)`` when no window had a valid span.
    """
    best: dict[int, tuple[float, int, int, int, int, int]] = {}
    for w, ex in enumerate(example_index):
        offsets = offset_mapping[w]
        s_log, e_log = np.asarray(start_logits[w]), np.asarray(end_logits[w])
        n = min(len(offsets), len(s_log))
        s_idx = np.argsort(s_log[:n])[::-1][:n_best]
        e_idx = np.argsort(e_log[:n])[::-1][:n_best]
        for s in s_idx:
            if offsets[s] is None:
                continue
            for e in e_idx:
                if offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(s_log[s] + e_log[e])
                if ex not in best or score > best[ex][0]:
                    best[ex] = (score, offsets[s][0], offsets[e][1], w, int(s), int(e))
    out = []
    for ex, ctx in enumerate(contexts):
        if ex in best:
            score, a, b, w, s, e = best[ex]
            probability = span_probability(start_logits[w], end_logits[w], offset_mapping[w], s, e)
            out.append(QaSpan(ctx[a:b], a, b, score, probability))
        else:
            out.append(QaSpan("", 0, 0, None))
    return out


# -------------------------------------------------------------------------------------------- pooling
class _MeanPooling:
    """The forward of a mean-pooling sentence classifier, for any family of
    :mod:`bert_pipeline.model.families`: the sentence vector is the mean of the last hidden states over real tokens
    (``attention_mask`` 1) instead of the ``[CLS]`` pooler (as Sentence-BERT, Reimers & Gurevych 2019, §3). Same
    weights as the family's standard class; ``config.classifier_pooling = "mean"`` records the choice so
    :func:`load_sequence_classifier` restores it. One label (``num_labels == 1``, regression): MSE loss, as the
    standard class with ``problem_type="regression"``. The family's own classifier runs on the mean vector
    (:attr:`bert_pipeline.model.families.Family.pooled_classifier`: RoBERTa's head and DeBERTa's ``ContextPooler``
    read position 0, so the vector is given as a one-position sequence). A family whose stock class pools by its
    config's own ``classifier_pooling`` (ModernBERT) needs no subclass."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        family = family_of(self.config)
        types = {"token_type_ids": token_type_ids} if family.token_types else {}
        out = getattr(self, family.encoder)(input_ids=input_ids, attention_mask=attention_mask, **types)
        hidden = out[0]  # (batch, seq_len, hidden)
        if attention_mask is None:
            attention_mask = torch.ones(hidden.shape[:2], dtype=hidden.dtype, device=hidden.device)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = family.pooled_classifier(self, pooled)  # (batch, num_labels)
        loss = None
        if labels is not None and self.num_labels == 1:  # regression (problem_type "regression"): MSE, as HF's
            loss = torch.nn.functional.mse_loss(logits.view(-1), labels.view(-1).to(logits.dtype))
        elif labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)


def _mean_pooling_class(family: Family) -> type:
    """``MeanPooling{stock class}``: the family's stock ``*ForSequenceClassification`` with :class:`_MeanPooling`'s
    forward (the saved config's ``architectures`` names it; :func:`load_sequence_classifier` picks it again by
    ``classifier_pooling``)."""
    stock = family.sequence_class
    return type(f"MeanPooling{stock.__name__}", (_MeanPooling, stock),
                {"__module__": __name__, "__doc__": f"``{stock.__name__}`` with mean pooling (:class:`_MeanPooling`)."})


# keyed by family name (bert_pipeline.model.families: DeBERTa's model_type is deberta-v2), one per family entry
MEAN_POOLING_CLASSES = {name: _mean_pooling_class(family) for name, family in FAMILIES.items()
                        if family.pooled_classifier is not None}
# families whose stock sequence classifier pools by its config's ``classifier_pooling`` (cls | mean) itself
NATIVE_POOLING = frozenset(name for name, family in FAMILIES.items() if family.pooled_classifier is None)


def sequence_classifier_class(pooling: str, model_type: str):
    """The model class for ``pooling`` (``cls`` or ``mean``) and a config's ``model_type`` (or a family name of
    :mod:`bert_pipeline.model.families`): the Auto class for
    ``cls`` and for ModernBERT (:data:`NATIVE_POOLING`: the caller sets ``config.classifier_pooling``), else the
    family's mean-pooling class (:data:`MEAN_POOLING_CLASSES`).

    Raises:
        ValueError: ``mean`` for a model of another family.
    """
    if pooling not in ("cls", "mean"):
        raise ValueError(f"pooling: expected cls or mean, got {pooling!r}")
    name = family_of(model_type).name if model_type in MEAN_POOLING_CLASSES or is_family_model_type(model_type) \
        else model_type
    if pooling == "cls" or name in NATIVE_POOLING:
        return AutoModelForSequenceClassification
    if name not in MEAN_POOLING_CLASSES:
        raise ValueError(f"pooling 'mean' is implemented for {', '.join([*MEAN_POOLING_CLASSES, *NATIVE_POOLING])} "
                         f"models, got model_type {model_type!r}")
    return MEAN_POOLING_CLASSES[name]


def load_sequence_classifier(path: str):
    """Load a fine-tuned sentence classifier, honouring ``config.classifier_pooling`` (default ``cls``)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    cls = sequence_classifier_class(getattr(cfg, "classifier_pooling", "cls"), cfg.model_type)
    return cls.from_pretrained(path)
