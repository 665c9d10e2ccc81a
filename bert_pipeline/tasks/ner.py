"""``ner``: word-level BIO tags (``tokens``, ``ner_tags``); a per-token Linear labels each word's first sub-token
(Devlin et al. 2019, §4.3), long sentences in overlapping windows (``doc_stride``); scored by entity-level F1
(``seqeval``, micro over entities, and per type).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from bert_pipeline.errors import PipelineError

if TYPE_CHECKING:
    from datasets import Dataset
from bert_pipeline.tasks.base import (
    EncodedInputs,
    Forward,
    HeldoutScorer,
    ServeRequest,
    TaskKind,
    check_temperature,
    masked_cross_entropy,
    max_length,
)


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
    from bert_pipeline.data.masking import IGNORE_INDEX
    from bert_pipeline.data.tokenizer import with_prefix_space

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


def ner_metrics(gold: list[list[str]], pred: list[list[str]]) -> dict[str, float]:
    """Entity-level precision/recall/F1 with ``seqeval`` (CoNLL-2000 style span matching): micro over all
    entities, and F1 per type as ``f1_TYPE``.

    Returns:
        ``{"precision", "recall", "f1", "f1_PERSON", ...}`` (types found in gold or predictions).
    """
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score

    out = {
        "precision": float(precision_score(gold, pred, zero_division=0)),
        "recall": float(recall_score(gold, pred, zero_division=0)),
        "f1": float(f1_score(gold, pred, zero_division=0)),
    }
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    for key, vals in report.items():
        if key not in ("micro avg", "macro avg", "weighted avg"):
            out[f"f1_{key}"] = float(vals["f1-score"])
    return out


def entity_types(label_names: Sequence[str]) -> list[str]:
    """The entity types of BIO label names (``B-PERSON`` -> ``PERSON``), in first-seen order."""
    return list(dict.fromkeys(n.split("-", 1)[1] for n in label_names if "-" in n))


def sentence_entity_counts(gold: Sequence[str], pred: Sequence[str]) -> dict[str, int]:
    """One sentence's entity counts as seqeval matches spans (its default mode: ``get_entities``, a span equal in
    type, start and end): ``tp`` / ``fp`` / ``fn`` overall and ``tp_TYPE`` / ... per type. seqeval scores a corpus
    by the same sets over sentences joined with ``O`` between them, so these counts sum to its micro counts."""
    from seqeval.metrics.sequence_labeling import get_entities

    truth, guess = set(get_entities(list(gold))), set(get_entities(list(pred)))
    out: dict[str, int] = {}
    for key, spans in (("tp", truth & guess), ("fp", guess - truth), ("fn", truth - guess)):
        out[key] = len(spans)
        for typ, _, _ in spans:
            out[f"{key}_{typ}"] = out.get(f"{key}_{typ}", 0) + 1
    return out


def tagging_windows(pred, max_seq_length: int = 384, doc_stride: int = 128) -> tuple[Any, int]:
    """What Hugging Face's ``token-classification`` pipeline needs to tag a long text whole: a copy of the
    tokenizer whose ``model_max_length`` (the pipeline's window) is ``max_seq_length`` capped at the model's
    ``max_position_embeddings``, and the stride capped at half the window's text (each window moves on by at least
    half). A byte-level BPE tokenizer without a prefix space (RoBERTa's) is copied with one
    (:func:`bert_pipeline.data.tokenizer.with_prefix_space`): fine-tuning gave every word the pieces it has after a
    space (:func:`bert_pipeline.tasks.ner.tokenize_ner`), so the text's first word gets them too.

    Raises:
        PipelineError: the window holds no text after the special tokens.
    """
    import copy

    from bert_pipeline.data.tokenizer import with_prefix_space

    window = max_length(pred, max_seq_length)
    room = window - pred.tokenizer.num_special_tokens_to_add(pair=False)
    if room < 2:
        raise PipelineError(f"--max-seq-length {window}: leaves no room for text after the special tokens")
    tokenizer = copy.copy(with_prefix_space(pred.tokenizer))
    tokenizer.model_max_length = window
    return tokenizer, min(doc_stride, room // 2)


def entities(pred, texts: Sequence[str], max_seq_length: int = 384, doc_stride: int = 128) -> list[list[dict]]:
    """Per text, its entities ``{"type", "text", "start", "end", "score"}`` (character offsets, end exclusive).

    The whole text is tagged, however long: Hugging Face's ``token-classification`` pipeline with ``stride`` cuts
    it into windows of ``max_seq_length`` tokens (capped at the model's ``max_position_embeddings``) that overlap by
    ``doc_stride`` tokens (:func:`tagging_windows`), and merges the entities of overlapping windows (the longer,
    then the higher-scored, entity wins).

    Raises:
        PipelineError: ``max_seq_length`` holds no text after the special tokens.
    """
    from transformers import pipeline

    tokenizer, stride = tagging_windows(pred, max_seq_length, doc_stride)
    tagger = pipeline("token-classification", model=pred.model, tokenizer=tokenizer,
                      aggregation_strategy="first", stride=stride, device=-1)
    results = []
    for text in texts:
        found = tagger(text)
        results.append([{"type": e["entity_group"], "text": text[e["start"]:e["end"]], "start": int(e["start"]),
                         "end": int(e["end"]), "score": round(float(e["score"]), 4)} for e in found])
    return results


class NerKind(TaskKind):
    """Token classification of pre-split words: every gold word is scored, read from its most centred window."""

    name = "ner"
    main_metric = "f1"
    pipeline_tag = "token-classification"
    auto_class = "AutoModelForTokenClassification"
    head = "token-classification"
    window_keys = ("doc_stride",)
    per_example = False
    position_mask = True
    objective_text = "per-token cross-entropy (labels on each word's first sub-token)"
    predict_example = '"Alice Smith flew from Paris to London on Monday."'
    predict_note = "entities with character offsets, long texts tagged in overlapping windows"

    def read_user_files(self, spec, paths):
        """CoNLL files (one word per line, the BIO tag in the last column, blank lines between sentences)."""
        from datasets import DatasetDict

        from bert_pipeline.data.task_features import ner_dataset
        from bert_pipeline.data.task_loaders import conll_label_names, load_conll

        read = {s: load_conll(p) for s, p in paths.items()}
        names = conll_label_names(*[tags for _, tags in read.values()])
        return DatasetDict({s: ner_dataset(tok, tags, names, s) for s, (tok, tags) in read.items()}), {"label_names": names}

    def hub_info(self, dd, spec):
        return {"label_names": dd["train"].features["ner_tags"].feature.names}

    def split_stats(self, ds):
        from bert_pipeline.data.task_features import label_counts

        lens = [len(t) for t in ds["tokens"]]
        return {"label_counts": label_counts(ds, "ner_tags"), "avg_words": round(sum(lens) / max(len(lens), 1), 2)}

    def encode_train(self, tokenizer, ds: Dataset, task: dict[str, Any]) -> list[dict[str, list[int]]]:
        return tokenize_ner(tokenizer, list(ds["tokens"]), list(ds["ner_tags"]), task["max_length"],
                            task["doc_stride"]).features

    def collator(self, tokenizer):
        from transformers import DataCollatorForTokenClassification

        return DataCollatorForTokenClassification(tokenizer, return_tensors="pt")

    def scorer(self, tokenizer, ds: Dataset, task: dict[str, Any], label_names: Sequence[str] | None,
               forward: Forward) -> HeldoutScorer:
        """References and predictions are word-level BIO tag lists (names, not ids)."""
        from transformers import DataCollatorWithPadding

        collate = DataCollatorWithPadding(tokenizer, return_tensors="pt")
        windows = tokenize_ner(tokenizer, list(ds["tokens"]), None, task["max_length"], task["doc_stride"])

        def predict_tags(model):
            logits = forward(model, windows.features, collate)
            words = word_predictions(windows, [np.argmax(x, -1) for x in logits])
            return [[label_names[p] for p in sent] for sent in words]
        return HeldoutScorer([[label_names[t] for t in tags] for tags in list(ds["ner_tags"])], predict_tags,
                             self.metrics)

    def metrics(self, references, predictions, label_names=None) -> dict[str, float]:
        return ner_metrics(references, predictions)

    interval_metrics = ("f1", "precision", "recall")
    """And ``f1_TYPE`` for every entity type of the label names."""

    def example_columns(self, references, predictions, label_names):
        """Per sentence the entities (seqeval's spans, :func:`sentence_entity_counts`) found in both gold and
        prediction ``tp``, only predicted ``fp``, only gold ``fn``, overall and per type (``tp_PERSON``, ...)."""
        types = entity_types(label_names)
        cols = {f"{c}{t}": np.zeros(len(references), dtype=np.int64) for t in ("", *(f"_{x}" for x in types))
                for c in ("tp", "fp", "fn")}
        for i, (gold, pred) in enumerate(zip(references, predictions, strict=True)):
            for key, count in sentence_entity_counts(gold, pred).items():
                cols[key][i] = count
        return cols

    def example_sums(self, columns, label_names):
        return {k: v.astype(np.float64) for k, v in columns.items()}

    def metrics_from_sums(self, sums, n, label_names):
        """Micro precision, recall and F1 over entities, as seqeval computes them from the summed counts
        (``2PR / (P + R)``), and each type's F1."""
        def prf(tp, fp, fn):
            zero = np.zeros(np.shape(tp))
            p = np.divide(tp, tp + fp, out=zero.copy(), where=tp + fp > 0)
            r = np.divide(tp, tp + fn, out=zero.copy(), where=tp + fn > 0)
            return p, r, np.divide(2 * p * r, p + r, out=zero.copy(), where=p + r > 0)
        precision, recall, f1 = prf(sums["tp"], sums["fp"], sums["fn"])
        out = {"f1": f1, "precision": precision, "recall": recall}
        for t in entity_types(label_names):
            out[f"f1_{t}"] = prf(sums[f"tp_{t}"], sums[f"fp_{t}"], sums[f"fn_{t}"])[2]
        return out

    input_columns = ("tokens",)
    onnx_output_rank = 3
    prediction_unit = "tokens"

    def plain_input(self, line: str) -> dict[str, Any]:
        """A sentence of space-separated words: ``{"tokens": line.split()}``."""
        return {"tokens": line.split()}

    def encode_inputs(self, tokenizer, examples, input_names, max_length, doc_stride):
        """Sentences of words (``tokens``) in windows (:func:`tokenize_ner`), the stride capped below the room a
        window leaves."""
        room = max_length - tokenizer.num_special_tokens_to_add(pair=False)
        windows = tokenize_ner(tokenizer, [list(ex["tokens"]) for ex in examples], None, max_length,
                               min(doc_stride, max(room - 1, 0)))
        return EncodedInputs(self, [{k: f[k] for k in input_names} for f in windows.features], len(examples))

    def window_predictions(self, enc, logits, n_best, max_answer_length):
        """The arg-max label id of every position of every window, windows in order."""
        return [int(p) for x in logits["logits"] for p in np.argmax(x, axis=-1)]

    def serve(self, pred, texts, request: ServeRequest) -> list[dict[str, Any]]:
        """``{"entities": [...]}`` per text (:func:`entities`)."""
        return [{"entities": e} for e in entities(pred, texts, request.max_seq_length, request.doc_stride)]

    def scored_positions(self, feature: dict[str, list[int]]) -> list[bool]:
        """Gold labels sit exactly at each word's first sub-token: those positions."""
        from bert_pipeline.data.masking import IGNORE_INDEX

        return [label != IGNORE_INDEX for label in feature["labels"]]

    def soft_target_loss(self, student_logits, teacher_logits, mask, temperature: float):
        """Logits ``(batch, seq_len, num_labels)``, one distribution per position where ``mask`` ``(batch,
        seq_len)`` bool is True (the positions the task scores: each word's first sub-token)."""
        from bert_pipeline.model.losses import kl_loss

        check_temperature(temperature)
        return kl_loss(student_logits[mask], teacher_logits[mask], temperature)

    def hard_target_loss(self, student_logits, labels):
        """Cross-entropy per token of ``labels`` ``(batch, seq_len)``."""
        return masked_cross_entropy(student_logits, labels)

    def head_text(self, pooling: str | None, label_names: Sequence[str]) -> str:
        return (f"token classification: per-token linear over {len(label_names)} BIO labels (scored on each word's "
                "first sub-token)")

    def evaluation_note(self) -> str:
        return "Entity-level precision, recall and F1 (seqeval, exact spans), per type as `f1_TYPE`."


KIND = NerKind()
