"""Stage ``train_tokenizer``: a BERT WordPiece vocabulary learnt on the corpus, loadable with ``AutoTokenizer``.

Reads ``data/corpus/`` (the ``DatasetDict`` of ``prepare_corpus``; the ``text`` column of the train split, streamed
in batches from Arrow) and writes:

- ``models/tokenizer/``: ``tokenizer.json``, ``vocab.txt``, ``tokenizer_config.json``, ``special_tokens_map.json``;
  ``AutoTokenizer.from_pretrained("models/tokenizer")`` gives the same ids as the trained ``tokenizers`` object
  (checked before the folder is published);
- ``metrics/tokenizer.json``: vocabulary size and, on the validation split, fertility (tokens per word), ``[UNK]``
  rate, share of ``##`` pieces, share of words kept whole;
- ``plots/tokenizer_fertility.csv``: how many validation words take 1, 2, ... tokens;
- ``metrics/tokenizer-timing.json`` (wall clock, not cached): training seconds and MB/s;
- one MLflow run (``bert_pipeline.mlops.tracking``): params, these metrics, a pointer to ``models/tokenizer`` (path + DVC hash).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.data.wordpiece import (
    EmptyTrainingDataError,
    VocabTooSmallError,
    check_roundtrip,
    fertility,
    histogram_csv,
    iter_text_batches,
    rust_parallelism,
    save_tokenizer,
    train_wordpiece,
)
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.mlops import tracking
from stages.params import TrainTokenizerParams, load_params

log = logging.getLogger(__name__)

CORPUS_DIR = Path("data/corpus")
TOKENIZER_DIR = Path("models/tokenizer")
METRICS = Path("metrics/tokenizer.json")
TIMING = Path("metrics/tokenizer-timing.json")
PLOT = Path("plots/tokenizer_fertility.csv")
TEXT_COLUMN = "text"
ROUNDTRIP_TEXTS = 32  # validation documents re-encoded through AutoTokenizer before publishing


def load_corpus(path: Path) -> Any:
    """Open the corpus ``DatasetDict`` and check the splits and column this stage reads.

    Raises:
        PipelineError: missing folder, not a ``DatasetDict``, no ``train``/``validation`` split, no ``text`` column,
            or an empty split.
    """
    import datasets

    if not path.exists():
        raise PipelineError(f"{path}: corpus not found (expected prepare_corpus's DatasetDict; run `dvc repro prepare_corpus`)")
    for split in ("train", "validation"):  # datasets cannot load a split saved without rows (0 Arrow shards)
        state = path / split / "state.json"
        if state.is_file() and not json.loads(state.read_text(encoding="utf-8")).get("_data_files"):
            raise PipelineError(f"{path}: the {split} split is empty (expected at least one document)")
    try:
        corpus = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise PipelineError(f"{path}: not a saved datasets DatasetDict ({str(exc).splitlines()[0]})") from None
    if not isinstance(corpus, datasets.DatasetDict):
        raise PipelineError(f"{path}: expected a DatasetDict with train/validation splits, got a single Dataset")
    for split in ("train", "validation"):
        if split not in corpus:
            raise PipelineError(f"{path}: expected a {split!r} split, got {sorted(corpus)}")
        if TEXT_COLUMN not in corpus[split].column_names:
            raise PipelineError(f"{path}: {split} split: expected a {TEXT_COLUMN!r} column, got {corpus[split].column_names}")
        if len(corpus[split]) == 0:
            raise PipelineError(f"{path}: the {split} split is empty (expected at least one document)")
    return corpus


def run(params: TrainTokenizerParams, corpus_dir: Path, tokenizer_dir: Path) -> tuple[dict, dict[int, int], dict]:
    """Train, check and publish the tokenizer; return ``(metrics, histogram, timing)`` (nothing else written).

    Raises:
        PipelineError: bad corpus (see :func:`load_corpus`), ``vocab_size`` too small, no word in the train split.
    """
    corpus = load_corpus(corpus_dir)
    train = corpus["train"]
    options = {
        "lowercase": params.lowercase,
        "strip_accents": params.strip_accents,
        "handle_chinese_chars": params.handle_chinese_chars,
    }
    start = time.perf_counter()
    with rust_parallelism(True):  # this stage forks no process; results do not depend on it
        try:
            tokenizer = train_wordpiece(
                lambda: iter_text_batches(train, TEXT_COLUMN, params.batch_size),
                vocab_size=params.vocab_size,
                min_frequency=params.min_frequency,
                limit_alphabet=params.limit_alphabet,
                max_input_chars_per_word=params.max_input_chars_per_word,
                bert_id_layout=params.bert_id_layout,
                length=len(train),
                show_progress=sys.stderr.isatty(),
                **options,
            )
        except VocabTooSmallError as exc:
            raise PipelineError(f"params.yaml: train_tokenizer.vocab_size: {exc}") from None
        except EmptyTrainingDataError as exc:
            raise PipelineError(f"{corpus_dir}: train split: {exc}") from None
    train_seconds = time.perf_counter() - start
    train_bytes = sum(len(t.encode("utf-8")) for b in iter_text_batches(train, TEXT_COLUMN, params.batch_size) for t in b)
    log.info("trained %d entries on %.1f MB in %.1f s", tokenizer.get_vocab_size(), train_bytes / 1e6, train_seconds)

    validation = corpus["validation"]
    with rust_parallelism(True):
        metrics, histogram = fertility(tokenizer, iter_text_batches(validation, TEXT_COLUMN, params.batch_size))
    probe = validation.select(range(min(ROUNDTRIP_TEXTS, len(validation))))[TEXT_COLUMN]
    with atomic_dir(tokenizer_dir) as tmp:
        save_tokenizer(tokenizer, tmp, model_max_length=params.model_max_length, **options)
        try:
            check_roundtrip(tmp, tokenizer, list(probe))
        except ValueError as exc:
            raise PipelineError(str(exc).replace(str(tmp), str(tokenizer_dir))) from None
    timing = {
        "train_seconds": round(train_seconds, 3),
        "train_megabytes": round(train_bytes / 1e6, 3),
        "train_mb_per_s": round(train_bytes / 1e6 / train_seconds, 3) if train_seconds else None,
    }
    return metrics, histogram, timing


def main() -> None:
    params = load_params().train_tokenizer
    with tracking.stage_run("train_tokenizer", params.model_dump()) as mlflow_run:
        metrics, histogram, timing = run(params, CORPUS_DIR, TOKENIZER_DIR)
        write_json(METRICS, metrics)
        atomic_write_text(PLOT, histogram_csv(histogram))
        write_json(TIMING, timing)
        log.info("validation: fertility %.3f, [UNK] rate %.4f", metrics["fertility"], metrics["unk_rate"])
        mlflow_run.log_metrics(metrics)
        mlflow_run.log_metrics(timing)
        mlflow_run.log_model_pointer(TOKENIZER_DIR, name="tokenizer")
        for path in (METRICS, PLOT):
            mlflow_run.log_artifact(path)


if __name__ == "__main__":
    run_main(main)
