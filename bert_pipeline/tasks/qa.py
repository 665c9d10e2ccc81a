"""``qa``: SQuAD v1.1 extractive spans (``id``, ``context``, ``question``, ``answers``); start and end logits per
token (Devlin et al. 2019, §4.2), long contexts in overlapping windows (``doc_stride``) as in Hugging Face
``run_qa.py``, answers decoded by one n-best search (:func:`decode_qa`) that scores the test split and serves
``predict``; scored by SQuAD's exact match and F1 (main).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bert_pipeline.errors import PipelineError

if TYPE_CHECKING:
    import torch
    from datasets import Dataset
from bert_pipeline.tasks.base import (
    INPUT_KEYS,
    EncodedInputs,
    Forward,
    HeldoutScorer,
    ServeRequest,
    TaskKind,
    check_temperature,
    masked_cross_entropy,
    max_length,
    rows,
)

_MASKED_LOGIT = -1.0e4  # a padded position: exp(-1e4 / T) is 0 in float32, and finite, so KL stays finite


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


# ------------------------------------------------------------------------------------- SQuAD v1.1
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 answer normalisation (Rajpurkar et al. 2016, official ``evaluate-v1.1.py``): lower-case,
    remove punctuation, remove the articles a/an/the, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, ground_truth: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def token_f1(prediction: str, ground_truth: str) -> float:
    """Bag-of-tokens F1 between normalised prediction and ground truth (0.0 when nothing overlaps)."""
    p = normalize_answer(prediction).split()
    g = normalize_answer(ground_truth).split()
    common = collections.Counter(p) & collections.Counter(g)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(p), overlap / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Mean over questions of the best exact match and F1 against any of the gold answers.

    Returns:
        ``{"exact_match", "f1"}`` as fractions.
    Raises:
        ValueError: unequal lengths or no questions.
    """
    if not predictions or len(predictions) != len(references):
        raise ValueError(f"need equal, non-empty lists, got {len(predictions)} and {len(references)}")
    em = sum(max(exact_match(p, g) for g in golds) for p, golds in zip(predictions, references, strict=True))
    f1 = sum(max(token_f1(p, g) for g in golds) for p, golds in zip(predictions, references, strict=True))
    return {"exact_match": em / len(predictions), "f1": f1 / len(predictions)}


def answer(pred, question: str, context: str, max_seq_length: int = 384, doc_stride: int = 128,
           n_best: int = 20, max_answer_length: int = 30) -> dict:
    """The best answer span in ``context``: ``{"answer", "start", "end", "score", "logit_sum", "windows",
    "question_truncated"}`` (character offsets; the number of windows the context took; whether the question
    was cut to ``max_seq_length // 2`` tokens, the one limit left: every context token is in some window).

    The windows and the decoding are the ones fine-tuning scores the test split with
    (:func:`bert_pipeline.tasks.qa.prepare_qa_features`, :func:`bert_pipeline.tasks.qa.decode_qa`): windows
    of ``max_seq_length`` tokens overlapping by ``doc_stride`` tokens, n-best start/end pairs of at most
    ``max_answer_length`` tokens, ranked by ``logit_sum``, the span's ``start_logit + end_logit`` (unnormalised:
    comparable between spans of one model only). ``score`` is the span's probability as Hugging Face's
    question-answering pipeline reports it (:func:`bert_pipeline.tasks.qa.span_probability`: softmax of the
    start and of the end logits over its window's context tokens and ``[CLS]``, multiplied), in [0, 1].

    Raises:
        PipelineError: the question leaves no room for the context in ``max_seq_length`` tokens.
    """
    import torch

    with torch.no_grad():
        tok = pred.tokenizer
        max_seq_length = max_length(pred, max_seq_length)
        try:
            feats = prepare_qa_features(tok, [question], [context], None, max_seq_length, doc_stride)
        except ValueError as exc:
            raise PipelineError(f"--max-seq-length {max_seq_length}: {exc}") from None
        windows = [{k: feats[k][i] for k in INPUT_KEYS if k in feats} for i in range(len(feats["input_ids"]))]
        out = pred.model(**tok.pad(windows, return_tensors="pt"))
        lengths = [len(w["input_ids"]) for w in windows]
        starts = [out.start_logits[i, :n].float().numpy() for i, n in enumerate(lengths)]
        ends = [out.end_logits[i, :n].float().numpy() for i, n in enumerate(lengths)]
        (span,) = decode_qa([context], feats["example_index"], feats["offset_mapping"], starts, ends, n_best,
                            max_answer_length)
        return {"answer": span.text, "start": span.start, "end": span.end,
                "score": None if span.probability is None else round(span.probability, 4),
                "logit_sum": None if span.score is None else round(span.score, 4), "windows": len(windows),
                "question_truncated": feats["question_truncated"][0]}


class QaKind(TaskKind):
    """Extractive QA: references are the gold answer texts of each question, predictions the decoded answer."""

    name = "qa"
    main_metric = "f1"
    pipeline_tag = "question-answering"
    auto_class = "AutoModelForQuestionAnswering"
    head = "question-answering"
    window_keys = ("doc_stride", "n_best", "max_answer_length")
    per_example = False
    input_key = "question"
    reads_context = True
    objective_text = "cross-entropy of the answer's start and end positions"
    predict_example = '--context "Alice Smith flew from Paris to London on Monday." "@placeholder flew to London"'
    predict_note = "the answer span, decoded by the n-best decoder that scored the test split"

    def read_user_files(self, spec, paths):
        """SQuAD v1.1 JSON files."""
        from datasets import DatasetDict

        from bert_pipeline.data.task_loaders import load_squad

        return DatasetDict({s: load_squad(p) for s, p in paths.items()}), {}

    def split_stats(self, ds):
        lens = [len(c.split()) for c in ds["context"]]
        return {"avg_question_words": round(sum(len(q.split()) for q in ds["question"]) / max(len(ds), 1), 2),
                "avg_words": round(sum(lens) / max(len(lens), 1), 2)}

    def encode_train(self, tokenizer, ds: Dataset, task: dict[str, Any]) -> list[dict[str, list[int]]]:
        enc = prepare_qa_features(tokenizer, list(ds["question"]), list(ds["context"]), list(ds["answers"]),
                                  task["max_length"], task["doc_stride"])
        return rows(enc)

    def scorer(self, tokenizer, ds: Dataset, task: dict[str, Any], label_names: Sequence[str] | None,
               forward: Forward) -> HeldoutScorer:
        from transformers import DataCollatorWithPadding

        collate = DataCollatorWithPadding(tokenizer, return_tensors="pt")
        enc = prepare_qa_features(tokenizer, list(ds["question"]), list(ds["context"]), None, task["max_length"],
                                  task["doc_stride"])
        feats = rows(enc, INPUT_KEYS)
        contexts = list(ds["context"])

        def predict_answers(model):
            out = forward(model, feats, collate)
            preds = decode_qa(contexts, enc["example_index"], enc["offset_mapping"], [o[0] for o in out],
                              [o[1] for o in out], task["n_best"], task["max_answer_length"])
            return [p[0] for p in preds]
        return HeldoutScorer([a["text"] for a in list(ds["answers"])], predict_answers, self.metrics)

    def metrics(self, references, predictions, label_names=None) -> dict[str, float]:
        return squad_metrics(predictions, references)

    interval_metrics = ("f1", "exact_match")

    def example_columns(self, references, predictions, label_names):
        """Per question its ``exact_match`` and ``f1`` (the best over its gold answers, as SQuAD scores it)."""
        em = [max(exact_match(p, g) for g in golds) for p, golds in zip(predictions, references, strict=True)]
        f1 = [max(token_f1(p, g) for g in golds) for p, golds in zip(predictions, references, strict=True)]
        return {"exact_match": np.asarray(em, dtype=np.float64), "f1": np.asarray(f1, dtype=np.float64)}

    def example_sums(self, columns, label_names):
        return {"exact_match": columns["exact_match"], "f1": columns["f1"]}

    def metrics_from_sums(self, sums, n, label_names):
        return {"f1": sums["f1"] / n, "exact_match": sums["exact_match"] / n}

    input_columns = ("question", "context")
    onnx_outputs = ("start_logits", "end_logits")
    prediction_unit = "answers"

    def encode_inputs(self, tokenizer, examples, input_names, max_length, doc_stride):
        """Question-context pairs in windows over the context (:func:`prepare_qa_features`)."""
        contexts = [str(ex["context"]) for ex in examples]
        feats = prepare_qa_features(tokenizer, [str(ex["question"]) for ex in examples], contexts, None, max_length,
                                    doc_stride)
        features = [{k: feats[k][i] for k in input_names} for i in range(len(feats["input_ids"]))]
        return EncodedInputs(self, features, len(examples), contexts, list(feats["example_index"]),
                             list(feats["offset_mapping"]))

    def window_predictions(self, enc, logits, n_best, max_answer_length):
        """Each example's answer text, decoded over its windows by :func:`decode_qa`."""
        spans = decode_qa(enc.contexts, enc.example_index, enc.offset_mapping, logits["start_logits"],
                          logits["end_logits"], n_best, max_answer_length)
        return [span.text for span in spans]

    def serve(self, pred, texts, request: ServeRequest) -> list[dict[str, Any]]:
        """The :func:`answer` to each question in ``texts`` from ``request.context``.

        Raises:
            PipelineError: no context.
        """
        if not request.context:
            raise PipelineError(f"{pred.model_dir}: a question-answering model needs --context \"PASSAGE\"")
        return [answer(pred, q, request.context, request.max_seq_length, request.doc_stride, request.n_best,
                       request.max_answer_length) for q in texts]

    def teacher_logits(self, outputs):
        """Start and end logits stacked: ``(seq_len, 2)`` per window."""
        return [np.stack([start, end], axis=-1).astype(np.float32) for start, end in outputs]

    def teacher_batch(self, cached, scored, indices, seq_len):
        """A ``(start, end)`` pair of ``(batch, seq_len)`` float32 tensors; no mask (the student's batch gives it)."""
        logits, _ = super().teacher_batch(cached, None, indices, seq_len)
        return (logits[..., 0], logits[..., 1]), None

    def student_terms(self, out, batch, teacher, mask):
        device = batch["input_ids"].device
        return ((out.start_logits, out.end_logits), tuple(t.to(device) for t in teacher),
                (batch["start_positions"], batch["end_positions"]), batch["attention_mask"].bool())

    def soft_target_loss(self, student_logits, teacher_logits, mask, temperature: float):
        """A ``(start, end)`` pair of ``(batch, seq_len)`` logits, one distribution over positions per window for
        start and one for end, padding (``mask`` False) left out; the mean of the two terms (as Hugging Face's
        ``run_squad_w_distillation.py``)."""
        from bert_pipeline.model.losses import kl_loss

        check_temperature(temperature)
        terms = []
        for s, t in zip(student_logits, teacher_logits, strict=True):
            if mask is not None:
                s = s.float().masked_fill(~mask, _MASKED_LOGIT)
                t = t.float().masked_fill(~mask, _MASKED_LOGIT)
            terms.append(kl_loss(s, t, temperature))
        return (terms[0] + terms[1]) / 2

    def hard_target_loss(self, student_logits, labels) -> torch.Tensor:
        """The mean of the start and end cross-entropies of ``(start_positions, end_positions)`` ``(batch,)`` each
        (Devlin et al. 2019, §4.2)."""
        return (masked_cross_entropy(student_logits[0], labels[0])
                + masked_cross_entropy(student_logits[1], labels[1])) / 2

    def head_text(self, pooling: str | None, label_names: Sequence[str]) -> str:
        return "extractive QA: start and end logits per token, answers decoded by an n-best search over windows"


KIND = QaKind()
