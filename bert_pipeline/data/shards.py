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

How a worker builds a split's shards (memory bounded by params, not by a document's size; bytes independent of
``num_proc``): :mod:`bert_pipeline.data.shard_builder`.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_pipeline.data.corpus import open_corpus
from bert_pipeline.data.instances import min_seq_length
from bert_pipeline.data.masking import PAIR_LABELS, MaskingRules, VocabInfo
from bert_pipeline.data.shard_builder import CUT_COUNTS, ShardJob, build_split
from bert_pipeline.data.tokenizer import load_tokenizer
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import sha256_file, write_json

log = logging.getLogger(__name__)


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
    worker is bounded by ``shard_size x max_document_tokens`` tokens; :mod:`bert_pipeline.data.shard_builder`);
    the MLM probabilities as :class:`MaskingRules` (Devlin et al. 2019, §3.1 and Appendix A.1).
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
