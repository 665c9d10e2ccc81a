"""The shards of one split, built in worker processes (:func:`build_split`): each worker reads its shard's
documents from the corpus, tokenizes them, cuts what cannot be used whole, pairs
(:mod:`bert_pipeline.data.instances`), masks (:mod:`bert_pipeline.data.masking`), shuffles and writes them as one
Arrow file; the layout and the driver that calls it per split and length: :mod:`bert_pipeline.data.shards`.

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

import multiprocessing
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from bert_pipeline.data.corpus import iter_sentence_batches
from bert_pipeline.data.instances import (
    Instances,
    create_instances,
    cut_sentence,
    sentence_piece_bounds,
)
from bert_pipeline.data.masking import PAIR_LABELS, MaskingRules, VocabInfo, mask_ragged
from bert_pipeline.data.tokenizer import load_tokenizer, needs_prefix_space, raw_backend
from bert_pipeline.io import sha256_file, write_json

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


def tokenize_sentences(backend: Any, sentences: list[str], dtype: np.dtype,
                       starts: Sequence[bool] | None = None) -> list[np.ndarray]:
    """Tokenize sentences in one batched call (no special tokens); returns 1-D ``dtype`` id arrays, views into one
    flat array.

    Each sentence is tokenized as it stands in its document's running text: ``starts[i]`` says sentence ``i``
    begins its document (``None``: every sentence does); any other follows a space (corpus sentences are stripped,
    their whitespace runs one space: :mod:`bert_pipeline.data.sentences`). That changes ids only for a byte-level
    BPE without a prefix space (RoBERTa's, :func:`bert_pipeline.data.tokenizer.needs_prefix_space`), whose word
    after a space starts with ``Ġ``: there a sentence that does not begin its document is tokenized with a space
    prepended, so its first word is ``ĠThe`` as in the text and as fine-tuning will see it, not ``The`` (which
    whole-word masking would read as the previous word's continuation), and a document's ids are its whole text's.
    """
    if not sentences:
        return []
    if starts is not None and needs_prefix_space(backend):
        sentences = [s if start else " " + s for s, start in zip(sentences, starts, strict=True)]
    encodings = backend.encode_batch(sentences, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
    ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=dtype, count=int(lengths.sum()))
    return np.split(ids, np.cumsum(lengths)[:-1])


def tokenize_documents(backend: Any, documents: list[list[str]], dtype: np.dtype) -> list[list[np.ndarray]]:
    """Tokenize every sentence of every document in one batched call (no special tokens).

    Returns ``docs[d][s]``, 1-D ``dtype`` id arrays (views into one flat array).
    """
    sentences = tokenize_sentences(backend, [s for doc in documents for s in doc], dtype,
                                   [k == 0 for doc in documents for k in range(len(doc))])
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
            previous = None  # the document of the batch before: a document may go on over batches
            for batch in iter_sentence_batches(job.corpus_dir, job.split, start, end, TOKENIZE_BATCH_BYTES):
                starts = []
                for doc, sents in batch:
                    starts += [k == 0 and doc != previous for k in range(len(sents))]
                    previous = doc
                ids = tokenize_sentences(self.backend, [s for _, sents in batch for s in sents], np.dtype(np.int64),
                                         starts)
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
