"""Pre-training instances as unpadded Arrow shards: tokenize, pair (:mod:`bert_pipeline.data.instances`), mask
(:mod:`bert_pipeline.data.masking`), write.

Layout of one dataset folder (what :func:`build_dataset` writes and ``datasets.load_from_disk`` opens):

- ``{train,validation}/``: one Arrow file (IPC stream) per shard of ``shard_size`` documents, columns
  ``input_ids`` (uint16 when the vocabulary has <= 65,536 ids), ``token_type_ids`` (uint8), ``masked_lm_positions``
  and ``masked_lm_ids`` (static masking only), ``next_sentence_label`` (``nsp``) or ``sentence_order_label``
  (``sop``), int8. ``train`` holds ``dupe_factor`` copies of every document's instances, each with its own pairs and
  mask (static masking) or unmasked (dynamic masking: the collator masks per batch); ``validation`` is always one
  statically masked copy, so evaluation losses are comparable between runs. Instances are shuffled within a
  group (below): a whole shard unless it holds a cut document; the training loop shuffles across shards.
- ``info.json``: objective, packing, masking, rules (and ``validation_rules``, the held-out split's), ``max_seq_length``,
  ``vocab_size``, tokenizer path and sha256, counts:
  what pre-training checks for compatibility (:func:`bert_pipeline.data.masking.collator_from_info`).

Memory is bounded by params, not by a document's size. A worker reads its shard's sentences from the corpus in
batches of :data:`TOKENIZE_BATCH_BYTES` (:func:`bert_pipeline.data.corpus.iter_sentence_batches`) and tokenizes
them batch by batch. What cannot be used whole is cut first (:func:`document_units`): a sentence longer than a
segment at word starts (:func:`bert_pipeline.data.instances.cut_sentence`), and a document longer than
``max_document_tokens`` at sentence ends into pieces, each paired as a document of its own (NotNext segments come
from the other documents and pieces of the group; pairs never span two pieces). The resulting units are paired,
masked, shuffled and written in groups of ``shard_size``, one group at a time: a shard whose documents are all at
most ``max_document_tokens`` long is one group, exactly as when shards were built whole; the pieces of a cut
document fill further groups. A worker thus holds at most ``shard_size x max_document_tokens`` tokens of text,
with their ``dupe_factor`` copies of instances (about 100 bytes per text token at ``dupe_factor`` 5).

Every random draw of shard ``k``, group ``g``, copy ``d`` comes from a generator seeded by ``(seed, split, k, d)``
(and ``g`` when ``g > 0``), so the bytes do not depend on ``num_proc``.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from bert_pipeline.data.corpus import iter_sentence_batches, open_corpus
from bert_pipeline.data.instances import (
    Instances,
    create_instances,
    cut_sentence,
    min_seq_length,
    sentence_piece_bounds,
)
from bert_pipeline.data.masking import PAIR_LABELS, MaskingRules, VocabInfo, mask_ragged
from bert_pipeline.data.tokenizer import load_tokenizer, raw_backend
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import sha256_file, write_json

log = logging.getLogger(__name__)

SPLIT_CODES = {"train": 0, "validation": 1}


@dataclass(frozen=True)
class ShardJob:
    """Everything a worker needs to build the shards of one split (plain, picklable values)."""

    corpus_dir: str
    split: str
    tokenizer_path: str
    out_dir: str
    n_shards: int
    n_documents: int
    objective: str
    max_seq_length: int
    short_seq_prob: float
    rules: MaskingRules
    store_masks: bool
    dupe_factor: int
    seed: int
    max_document_tokens: int
    group_documents: int
    packing: str = "sentences"

    def bounds(self, shard: int) -> tuple[int, int]:
        """Document range ``[start, end)`` of ``shard`` (shards differ by at most one document)."""
        return (shard * self.n_documents // self.n_shards, (shard + 1) * self.n_documents // self.n_shards)

    def filename(self, shard: int) -> str:
        return f"data-{shard:05d}-of-{self.n_shards:05d}.arrow"


TOKENIZE_BATCH_BYTES = 1 << 20
"""UTF-8 bytes of sentences per ``encode_batch`` call: about 0.25M tokens, some 30 MB of ``Encoding`` objects."""

CUT_COUNTS = ("cut_sentences", "cut_sentence_pieces", "cut_documents", "cut_document_pieces")
"""Per-shard counts of what was cut before pairing (:func:`document_units`)."""


def tokenize_sentences(backend: Any, sentences: list[str], dtype: np.dtype) -> list[np.ndarray]:
    """Tokenize sentences in one batched call (no special tokens); returns 1-D ``dtype`` id arrays, views into one
    flat array."""
    if not sentences:
        return []
    encodings = backend.encode_batch(sentences, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=dtype, count=int(lengths.sum()))
    return np.split(ids, np.cumsum(lengths)[:-1])


def tokenize_documents(backend: Any, documents: list[list[str]], dtype: np.dtype) -> list[list[np.ndarray]]:
    """Tokenize every sentence of every document in one batched call (no special tokens).

    Returns ``docs[d][s]``, 1-D ``dtype`` id arrays (views into one flat array).
    """
    sentences = tokenize_sentences(backend, [s for doc in documents for s in doc], dtype)
    out, k = [], 0
    for doc in documents:
        out.append(sentences[k:k + len(doc)])
        k += len(doc)
    return out


class _DocumentPieces:
    """The sentences of one document, closed into pieces of at most ``max_tokens`` tokens (whole sentences, each
    at most ``max_tokens``), holding the last closed piece back: a last piece of one sentence joins it (a pair
    needs two segments)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.held: list[np.ndarray] | None = None
        self.current: list[np.ndarray] = []
        self.tokens = 0
        self.pieces = 0

    def add(self, sentence: np.ndarray) -> list[np.ndarray] | None:
        """Add one sentence; returns a piece that is final now, or ``None``."""
        out = None
        if self.current and self.tokens + len(sentence) > self.max_tokens:
            out, self.held = self.held, self.current
            self.pieces += 1
            self.current, self.tokens = [], 0
        self.current.append(sentence)
        self.tokens += len(sentence)
        return out

    def end(self) -> list[list[np.ndarray]]:
        """The document's last units: the whole document if it was never cut, else its last one or two pieces."""
        if self.held is None:
            return [self.current]
        if len(self.current) < 2:
            return [self.held + self.current]
        self.pieces += 1
        return [self.held, self.current]


def document_units(documents: Iterable[tuple[int, list[np.ndarray]]], *, max_document_tokens: int,
                   is_continuation: np.ndarray, min_piece: int, max_piece: int,
                   counts: dict[str, int]) -> Iterator[list[np.ndarray]]:
    """What :func:`bert_pipeline.data.instances.create_instances` pairs, from a stream of tokenized sentences.

    Args:
        documents: ``(document index, sentences)`` in order, a document possibly over several consecutive items
            (what :func:`bert_pipeline.data.corpus.iter_sentence_batches` gives, tokenized); sentences are 1-D id
            arrays, empty ones are dropped.
        max_document_tokens: a document with more tokens is cut at sentence ends into pieces of at most this many
            tokens (a last piece of one sentence joins the piece before, which may then exceed it by one
            sentence), so no more than one piece of a document is held at a time.
        is_continuation, min_piece, max_piece: a sentence over ``max_piece`` tokens is first cut at word starts
            (:func:`bert_pipeline.data.instances.cut_sentence`).
        counts: ``cut_sentences`` / ``cut_sentence_pieces`` (sentences cut, the pieces they became) and
            ``cut_documents`` / ``cut_document_pieces`` are added to it (keys :data:`CUT_COUNTS`).

    Yields:
        One unit per document (its sentences) or, for a cut document, one per piece, in order.
    """
    current: int | None = None
    pieces = _DocumentPieces(max_document_tokens)
    for doc, sentences in documents:
        if doc != current:
            if current is not None:
                yield from _end_document(pieces, counts)
            current, pieces = doc, _DocumentPieces(max_document_tokens)
        for sentence in sentences:
            if not len(sentence):
                continue
            cut = cut_sentence(sentence, is_continuation, min_piece, max_piece)
            if len(cut) > 1:
                counts["cut_sentences"] += 1
                counts["cut_sentence_pieces"] += len(cut)
            for part in cut:
                unit = pieces.add(part)
                if unit is not None:
                    yield unit
    if current is not None:
        yield from _end_document(pieces, counts)


def _end_document(pieces: _DocumentPieces, counts: dict[str, int]) -> list[list[np.ndarray]]:
    units = pieces.end()
    if pieces.held is not None:
        counts["cut_documents"] += 1
        counts["cut_document_pieces"] += pieces.pieces
    return units


def _features(objective: str, store_masks: bool, id_dtype: np.dtype):
    import datasets

    id_type = datasets.Value(id_dtype.name)
    cols = {"input_ids": datasets.List(id_type), "token_type_ids": datasets.List(datasets.Value("uint8"))}
    if store_masks:
        cols["masked_lm_positions"] = datasets.List(datasets.Value("uint16"))
        cols["masked_lm_ids"] = datasets.List(id_type)
    if PAIR_LABELS[objective]:
        cols[PAIR_LABELS[objective]] = datasets.Value("int8")
    return datasets.Features(cols)


def _list_array(values: np.ndarray, offsets: np.ndarray):
    import pyarrow as pa

    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))


class ShardBuilder:
    """Builds the shards of one split; one instance per worker process (holds the tokenizer)."""

    def __init__(self, job: ShardJob) -> None:
        self.job = job
        self.tokenizer = load_tokenizer(job.tokenizer_path)
        self.backend = raw_backend(self.tokenizer)
        self.vocab = VocabInfo.from_tokenizer(self.tokenizer)
        self.features = _features(job.objective, job.store_masks, self.vocab.id_dtype)

    def units(self, start: int, end: int, counts: dict[str, int]) -> Iterator[list[np.ndarray]]:
        """The units of documents ``[start, end)`` (:func:`document_units`), read and tokenized in batches of
        :data:`TOKENIZE_BATCH_BYTES`."""
        job = self.job
        min_piece, max_piece = sentence_piece_bounds(job.objective, job.max_seq_length)

        def tokenized() -> Iterator[tuple[int, list[np.ndarray]]]:
            for batch in iter_sentence_batches(job.corpus_dir, job.split, start, end, TOKENIZE_BATCH_BYTES):
                ids = tokenize_sentences(self.backend, [s for _, sents in batch for s in sents], np.dtype(np.int64))
                k = 0
                for doc, sents in batch:
                    yield doc, ids[k:k + len(sents)]
                    k += len(sents)

        return document_units(tokenized(), max_document_tokens=job.max_document_tokens,
                              is_continuation=self.vocab.is_continuation, min_piece=min_piece, max_piece=max_piece,
                              counts=counts)

    def build(self, shard: int) -> dict[str, Any]:
        """Tokenize, pair, mask and write shard ``shard``; return its counts.

        Units (:meth:`units`) are paired in groups of ``group_documents`` (``shard_size``): a shard whose documents
        are all at most ``max_document_tokens`` long is one group, built as a whole; a cut document's pieces fill
        further groups. Each group is written to the shard's Arrow stream as soon as it is built, so memory holds
        one group, never the whole shard's output.
        """
        import pyarrow as pa

        job = self.job
        start, end = job.bounds(shard)
        counts = dict.fromkeys(CUT_COUNTS, 0)
        results: list[dict[str, Any]] = []
        schema = self.features.arrow_schema
        with pa.OSFile(str(Path(job.out_dir) / job.filename(shard)), "wb") as sink, \
                pa.ipc.new_stream(sink, schema) as writer:
            group: list[list[np.ndarray]] = []
            for unit in self.units(start, end, counts):
                group.append(unit)
                if len(group) == job.group_documents:
                    results.append(self.build_group(group, shard, len(results), writer))
                    group = []
            if group or not results:
                results.append(self.build_group(group, shard, len(results), writer))
        stats = {k: (max if k == "max_length" else sum)(r[k] for r in results) for k in results[0]}
        stats.update(counts, documents=end - start)
        return stats

    def build_group(self, units: list[list[np.ndarray]], shard: int, group: int, writer: Any) -> dict[str, Any]:
        """Pair, mask, shuffle and write one group of units (all ``dupe_factor`` copies); return its counts.

        Random draws of group ``g`` of shard ``k``, copy ``d`` come from generators seeded by ``(seed, split, k, d)``
        (plus ``g`` when ``g > 0``), so a shard of one group gives the bytes it gave before groups existed.
        """
        import pyarrow as pa

        job, vocab = self.job, self.vocab
        split_code = SPLIT_CODES.get(job.split, 2)
        tail = [group] if group else []
        parts: list[Instances] = []
        masked: list[Any] = []
        for dupe in range(job.dupe_factor):
            rng = np.random.default_rng([job.seed, split_code, shard, dupe, 0, *tail])
            inst = create_instances(
                units, objective=job.objective, max_seq_length=job.max_seq_length, short_seq_prob=job.short_seq_prob,
                cls_token_id=vocab.cls_token_id, sep_token_id=vocab.sep_token_id, rng=rng, packing=job.packing,
            )
            mask = mask_ragged(inst.input_ids, inst.offsets, vocab, job.rules,
                               np.random.default_rng([job.seed, split_code, shard, dupe, 1, *tail]))
            # the copies wait for the shuffle in the id dtype of the output (uint16 for BERT's vocabulary), not int64
            inst.input_ids = inst.input_ids.astype(vocab.id_dtype)
            mask.input_ids = mask.input_ids.astype(vocab.id_dtype)
            mask.positions = mask.positions.astype(np.uint16)
            mask.masked_ids = mask.masked_ids.astype(vocab.id_dtype)
            parts.append(inst)
            masked.append(mask)
        inst = _concat_instances(parts)
        del parts
        m_ids = np.concatenate([m.input_ids for m in masked])
        m_pos = np.concatenate([m.positions for m in masked])
        m_lab = np.concatenate([m.masked_ids for m in masked])
        m_off = _concat_offsets([m.label_offsets for m in masked])
        del masked
        order = np.random.default_rng([job.seed, split_code, shard, 1 << 20, *tail]).permutation(len(inst))
        stats = _shard_stats(inst, m_ids, m_lab, m_pos, m_off, vocab)
        # shuffle: instances and their label lists in the same order
        lengths = np.diff(inst.offsets)[order]
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        lab_offsets = np.concatenate(([0], np.cumsum(np.diff(m_off)[order])))
        columns: dict[str, Any] = {
            "input_ids": _list_array(_take_rows(m_ids if job.store_masks else inst.input_ids, inst.offsets, order),
                                     offsets)}
        del m_ids
        columns["token_type_ids"] = _list_array(_token_types(offsets, inst.len_a[order]), offsets)
        if job.store_masks:
            columns["masked_lm_positions"] = _list_array(_take_rows(m_pos, m_off, order), lab_offsets)
            columns["masked_lm_ids"] = _list_array(_take_rows(m_lab, m_off, order), lab_offsets)
        if PAIR_LABELS[job.objective]:
            columns[PAIR_LABELS[job.objective]] = pa.array(inst.labels[order].astype(np.int8))
        del inst
        schema = self.features.arrow_schema
        writer.write_table(pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema),
                           max_chunksize=10_000)
        return stats


def _token_types(offsets: np.ndarray, len_a: np.ndarray) -> np.ndarray:
    """``(total,)`` uint8 token_type_ids of rows ``offsets`` (0 on the first ``len_a[i]`` tokens of row ``i``, 1
    after), built with one byte per token: +1 where B starts, -1 where the row ends, summed."""
    steps = np.zeros(int(offsets[-1]) + 1, dtype=np.int8)
    np.add.at(steps, offsets[:-1] + len_a, 1)
    np.add.at(steps, offsets[1:], -1)
    return np.cumsum(steps[:-1], dtype=np.int8).view(np.uint8)


def _concat_offsets(offsets: list[np.ndarray]) -> np.ndarray:
    out, base = [np.zeros(1, dtype=np.int64)], 0
    for off in offsets:
        out.append(off[1:] + base)
        base += int(off[-1])
    return np.concatenate(out).astype(np.int64)


_PER_DOCUMENT = ("documents", "skipped_one_sentence_documents", "empty_documents")


def _concat_instances(parts: list[Instances]) -> Instances:
    """Concatenate the copies of one shard; document counts are taken once, instance counts summed."""
    counts = {k: (parts[0].counts[k] if k in _PER_DOCUMENT else sum(p.counts[k] for p in parts))
              for k in parts[0].counts}
    labels = None if parts[0].labels is None else np.concatenate([p.labels for p in parts])
    return Instances(
        np.concatenate([p.input_ids for p in parts]), _concat_offsets([p.offsets for p in parts]),
        np.concatenate([p.len_a for p in parts]), labels, None, counts,
    )


def _gather_index(offsets: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Flat indices that take the ragged rows ``order`` of a (values, offsets) pair in that order."""
    lengths = np.diff(offsets)[order]
    starts = offsets[:-1][order]
    total = int(lengths.sum())
    return np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths) + np.arange(total)


def _take_rows(values: np.ndarray, offsets: np.ndarray, order: np.ndarray, block: int = 4096) -> np.ndarray:
    """The ragged rows ``order`` of a (values, offsets) pair, flat, in that order; ``block`` rows at a time, so the
    index is never built for the whole group (three int64 arrays the size of the output otherwise)."""
    lengths = np.diff(offsets)[order]
    out = np.empty(int(lengths.sum()), dtype=values.dtype)
    at = 0
    for first in range(0, order.size, block):
        idx = _gather_index(offsets, order[first:first + block])
        out[at:at + idx.size] = values[idx]
        at += idx.size
    return out


def _shard_stats(inst: Instances, m_ids, m_lab, m_pos, m_off, vocab: VocabInfo) -> dict[str, Any]:
    """Counts for the metrics: tokens, candidates, chosen positions and what each chosen position became."""
    specials = int(vocab.is_special[inst.input_ids].sum())
    rows = np.repeat(np.arange(len(inst)), np.diff(m_off))
    replaced = m_ids[inst.offsets[:-1][rows] + m_pos]
    n_mask = int((replaced == vocab.mask_token_id).sum())
    n_keep = int((replaced == m_lab).sum())
    out = dict(inst.counts)
    out.update(
        instances=len(inst), tokens=int(inst.input_ids.size), candidate_tokens=int(inst.input_ids.size) - specials,
        chosen=int(m_lab.size), chosen_mask=n_mask, chosen_keep=n_keep, chosen_random=int(m_lab.size) - n_mask - n_keep,
        label_1=int(inst.labels.sum()) if inst.labels is not None else 0,
        max_length=int(np.diff(inst.offsets).max(initial=0)),
    )
    return out


_BUILDER: ShardBuilder | None = None  # per worker process: set by _init_worker


def _init_worker(job: ShardJob) -> None:
    global _BUILDER
    _BUILDER = ShardBuilder(job)


def _build_in_worker(shard: int) -> dict[str, Any]:
    assert _BUILDER is not None
    return _BUILDER.build(shard)


def build_split(job: ShardJob, num_proc: int) -> list[dict[str, Any]]:
    """Build every shard of ``job`` with ``num_proc`` processes; returns per-shard counts in shard order.

    The bytes of each shard depend only on ``job`` and the shard index, never on ``num_proc``.
    """
    from tqdm.auto import tqdm

    Path(job.out_dir).mkdir(parents=True, exist_ok=True)
    shards = range(job.n_shards)
    desc = f"create_pretraining_data {job.split}"
    if num_proc <= 1 or job.n_shards <= 1:
        builder = ShardBuilder(job)
        results = [builder.build(k) for k in tqdm(shards, desc=desc, unit="shard")]
    else:
        # forkserver, not fork: a caller may have run torch, the tokenizer trainer or Arrow thread pools, or hold
        # MLflow's threads (the variants stage does all of these in one process), and a forked child inherits their
        # locks without the threads that would release them; a fresh single-threaded server's children have none
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(min(num_proc, job.n_shards), initializer=_init_worker, initargs=(job,)) as pool:
            results = list(tqdm(pool.imap(_build_in_worker, shards), total=job.n_shards, desc=desc, unit="shard"))
    _write_dataset_meta(job)
    return results


def _write_dataset_meta(job: ShardJob) -> None:
    """``state.json`` and ``dataset_info.json`` so ``datasets.load_from_disk(out_dir)`` opens the shards."""
    import hashlib

    out = Path(job.out_dir)
    files = [job.filename(k) for k in range(job.n_shards)]
    digest = hashlib.sha256("".join(sha256_file(out / f) for f in files).encode()).hexdigest()[:16]
    state = {
        "_data_files": [{"filename": f} for f in files], "_fingerprint": digest, "_format_columns": None,
        "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False, "_split": None,
    }
    import datasets

    probe = datasets.Dataset.from_file(str(out / files[0]))
    info = {"citation": "", "description": "", "features": probe.features.to_dict(), "homepage": "", "license": ""}
    write_json(out / "state.json", state)
    write_json(out / "dataset_info.json", info)


def summarize(results: list[dict[str, Any]], max_seq_length: int, objective: str) -> dict[str, Any]:
    """Sum per-shard counts into the metrics of one split."""
    tot = {k: sum(r[k] for r in results) for k in results[0] if k != "max_length"}
    chosen = max(tot["chosen"], 1)
    out = {
        "instances": tot["instances"],
        "tokens": tot["tokens"],
        "padding_share": 1.0 - tot["tokens"] / max(tot["instances"] * max_seq_length, 1),
        "max_length": max(r["max_length"] for r in results),
        "masked_lm_rate": tot["chosen"] / max(tot["candidate_tokens"], 1),
        "masked_lm_predictions": tot["chosen"],
        "mask_token_share": tot["chosen_mask"] / chosen,
        "random_token_share": tot["chosen_random"] / chosen,
        "keep_token_share": tot["chosen_keep"] / chosen,
        "documents": tot["documents"],
        "skipped_one_sentence_documents": tot["skipped_one_sentence_documents"],
        "empty_documents": tot["empty_documents"],
        "dropped_single_segments": tot["dropped_single_segments"],
        "truncated_tokens": tot["truncated_tokens"],
        **{k: tot[k] for k in CUT_COUNTS},
    }
    label = PAIR_LABELS[objective]
    out["pair_label"] = label
    out["pair_label_1_share"] = tot["label_1"] / max(tot["instances"], 1) if label else None
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in out.items()}


def scaled_max_predictions(max_predictions_per_seq: int, max_seq_length: int, length: int) -> int:
    """``max_predictions_per_seq`` for a phase of ``length`` tokens, in proportion (BERT: 20 at 128, 80 at 512)."""
    return max(1, round(max_predictions_per_seq * length / max_seq_length))


@dataclass(frozen=True)
class InstanceOptions:
    """How instances are built and masked: the ``create_pretraining_data`` params section, typed.

    ``objective``: ``nsp`` (BERT), ``sop`` (ALBERT) or ``none`` (RoBERTa); ``masking``: ``static``
    (``dupe_factor`` copies, each with its own mask) or ``dynamic`` (unmasked train split); ``shard_size`` in
    documents; ``max_document_tokens`` in WordPiece tokens: a longer document is cut at sentence ends into pieces
    paired as documents of their own, and a worker holds at most ``shard_size`` such units at a time (memory per
    worker is bounded by ``shard_size x max_document_tokens`` tokens; module docstring); the MLM probabilities as
    :class:`MaskingRules` (Devlin et al. 2019, §3.1 and Appendix A.1).
    """

    max_seq_length: int
    short_seq_prob: float
    objective: str
    masked_lm_prob: float
    max_predictions_per_seq: int
    mask_token_prob: float
    random_token_prob: float
    whole_word_masking: bool
    masking: str
    dupe_factor: int
    seed: int
    shard_size: int
    max_document_tokens: int
    num_proc: int
    validation_masked_lm_prob: float | None = None
    packing: str = "sentences"

    def rules(self, length: int, split: str = "train") -> MaskingRules:
        """The masking rules of ``split`` at sequence ``length``, ``max_predictions_per_seq`` scaled in proportion
        (:func:`scaled_max_predictions`). The validation split is masked at ``validation_masked_lm_prob`` when it
        is set, so that held-out MLM accuracy reads on the same scale whatever rate training masks at (a higher
        rate makes each prediction harder: Wettig et al. 2023, §4).

        Raises:
            ValueError: probabilities out of range (see :class:`MaskingRules`).
        """
        rate = self.masked_lm_prob
        if split == "validation" and self.validation_masked_lm_prob is not None:
            rate = self.validation_masked_lm_prob
        return MaskingRules(rate,
                            scaled_max_predictions(self.max_predictions_per_seq, self.max_seq_length, length),
                            self.mask_token_prob, self.random_token_prob, self.whole_word_masking)


def build_dataset(out: Path, options: InstanceOptions, *, corpus_dir: Path, documents: dict[str, int],
                  max_seq_length: int, tok_path: Path, vocab: VocabInfo, init: str, timings: dict[str, float],
                  prefix: str = "") -> dict[str, Any]:
    """Build ``out/{train,validation}`` and ``out/info.json`` at one ``max_seq_length``; return per-split metrics.

    Args:
        corpus_dir: the corpus (:func:`bert_pipeline.data.corpus.open_corpus`); ``documents``: its documents per split.
        tok_path: the tokenizer folder the instances are built with; ``init``: the start point it was decided by,
            recorded in ``info.json``.
        timings: wall seconds per split are added under ``prefix + split``.

    Raises:
        PipelineError: a split that yields no instance.
    """
    rules = options.rules(max_seq_length)
    splits: dict[str, Any] = {}
    for split in ("train", "validation"):
        t0 = time.perf_counter()
        split_rules = options.rules(max_seq_length, split)
        n_docs = documents[split]
        dynamic_train = split == "train" and options.masking == "dynamic"
        job = ShardJob(
            # absolute: a forkserver's workers keep the working directory the server started in
            corpus_dir=str(Path(corpus_dir).resolve()), split=split, tokenizer_path=str(Path(tok_path).resolve()),
            out_dir=str((out / split).resolve()),
            n_shards=max(1, math.ceil(n_docs / options.shard_size)), n_documents=n_docs, objective=options.objective,
            max_seq_length=max_seq_length, short_seq_prob=options.short_seq_prob, rules=split_rules,
            store_masks=not dynamic_train, dupe_factor=options.dupe_factor if split == "train" else 1,
            seed=options.seed, max_document_tokens=options.max_document_tokens, group_documents=options.shard_size,
            packing=options.packing,
        )
        summary = summarize(build_split(job, options.num_proc), max_seq_length, options.objective)
        if summary["instances"] == 0:
            raise PipelineError(f"{corpus_dir}: the {split} split yields no instances for objective "
                                f"{options.objective} ({summary['skipped_one_sentence_documents']} one-sentence "
                                "documents skipped)")
        summary.update(shards=job.n_shards, dupe_factor=job.dupe_factor,
                       masking="dynamic" if dynamic_train else "static")
        splits[split] = summary
        timings[prefix + split] = time.perf_counter() - t0
        log.info("%s%s: %d instances, %d tokens, masking rate %.4f", prefix, split, summary["instances"],
                 summary["tokens"], summary["masked_lm_rate"])
    info = {
        "objective": options.objective,
        "pair_label": PAIR_LABELS[options.objective],
        "masking": options.masking,
        "rules": rules.to_dict(),
        "validation_rules": options.rules(max_seq_length, "validation").to_dict(),
        "max_seq_length": max_seq_length,
        "short_seq_prob": options.short_seq_prob,
        "packing": options.packing,
        "dupe_factor": options.dupe_factor,
        "seed": options.seed,
        "vocab_size": vocab.vocab_size,
        "id_dtype": vocab.id_dtype.name,
        "special_ids": {"pad": vocab.pad_token_id, "cls": vocab.cls_token_id, "sep": vocab.sep_token_id,
                        "mask": vocab.mask_token_id},
        "tokenizer": str(tok_path),
        "tokenizer_sha256": _tokenizer_digest(tok_path),
        "pretrain_init": str(init),
        "splits": {s: {k: splits[s][k] for k in ("instances", "tokens", "shards", "dupe_factor", "masking")}
                   for s in splits},
    }
    write_json(out / "info.json", info)
    return splits


def build_pretraining_data(corpus_dir: Path, tok_path: Path, out: Path, options: InstanceOptions, *,
                           phase_lengths: list[int], init: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every dataset pre-training needs: ``out/`` at ``options.max_seq_length``, and ``out/seq{L}/`` for each other
    phase length ``L`` (BERT's seq 128 then 512, Devlin et al. 2019, Appendix A.2).

    Args:
        corpus_dir: the corpus folder; tok_path: the tokenizer folder; out: a fresh folder to write into.
        phase_lengths: the sequence lengths of pre-training's phases (``[]``: one phase at ``max_seq_length``).
        init: pre-training's start point, which decided ``tok_path`` (recorded in ``info.json``).

    Returns:
        ``(metrics, timing)``: per split (and under ``seq{L}`` per other length) the counts of :func:`summarize`;
        wall seconds, seconds per split, tokens per second and ``num_proc``.

    Raises:
        PipelineError: a tokenizer, corpus or length that cannot work, or ``max_document_tokens`` under twice the
            longest sequence length (one line naming the file or key).
    """
    started = time.perf_counter()
    tokenizer = load_tokenizer(tok_path, hint="run train_tokenizer, or set pretrain.init to a checkpoint folder")
    lengths = [options.max_seq_length] + sorted(set(phase_lengths) - {options.max_seq_length})
    try:
        vocab = VocabInfo.from_tokenizer(tokenizer)
        for length in lengths:
            options.rules(length)
            options.rules(length, "validation")
    except ValueError as exc:
        raise PipelineError(f"{tok_path}: {exc}") from None
    for length in lengths:
        check_layout(length, options.objective, getattr(tokenizer, "model_max_length", None), str(tok_path))
    longest = max(lengths)
    if options.max_document_tokens < 2 * longest:
        raise PipelineError(f"create_pretraining_data.max_document_tokens: expected >= 2 x the longest sequence length "
                            f"({2 * longest} for {longest}), got {options.max_document_tokens}")
    corpus = open_corpus(corpus_dir, columns=["sentences"])
    documents = {split: corpus[split].num_rows for split in ("train", "validation")}
    timings: dict[str, float] = {}
    shared = {"corpus_dir": corpus_dir, "documents": documents, "tok_path": tok_path, "vocab": vocab, "init": init,
              "timings": timings}
    metrics = build_dataset(out, options, max_seq_length=lengths[0], **shared)
    for length in lengths[1:]:
        metrics[f"seq{length}"] = build_dataset(out / f"seq{length}", options, max_seq_length=length,
                                                prefix=f"seq{length}/", **shared)
    total = time.perf_counter() - started
    tokens = sum(s["tokens"] for s in metrics.values() if "tokens" in s)
    tokens += sum(s["tokens"] for k, v in metrics.items() if k.startswith("seq") for s in v.values())
    timing = {
        "seconds": round(total, 3),
        "split_seconds": {k: round(v, 3) for k, v in timings.items()},
        "tokens_per_second": round(tokens / max(total, 1e-9), 1),
        "num_proc": options.num_proc,
    }
    return metrics, timing


def check_layout(max_seq_length: int, objective: str, model_max_length: int | None, where: str) -> None:
    """Fail early when ``max_seq_length`` cannot hold ``[CLS] A [SEP] B [SEP]`` (or ``[CLS] A [SEP]``) or exceeds
    what the tokenizer declares as its model's longest input.

    Raises:
        PipelineError: one line naming the key.
    """
    need = min_seq_length(objective)
    if max_seq_length < need:
        raise PipelineError(f"create_pretraining_data.max_seq_length: expected >= {need} for objective {objective} "
                         f"({'[CLS] A [SEP]' if objective == 'none' else '[CLS] A [SEP] B [SEP]'}), got {max_seq_length}")
    if model_max_length is not None and model_max_length < 1_000_000 and max_seq_length > model_max_length:
        raise PipelineError(f"create_pretraining_data.max_seq_length: {max_seq_length} exceeds the tokenizer's "
                         f"model_max_length {model_max_length} ({where})")


def _tokenizer_digest(path: Path) -> str | None:
    for name in ("tokenizer.json", "vocab.txt"):
        if (path / name).exists():
            return sha256_file(path / name)
    return None
