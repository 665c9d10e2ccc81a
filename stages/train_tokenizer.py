"""Stage ``train_tokenizer``: the vocabulary the model family needs, learnt on the corpus, loadable with
``AutoTokenizer``.

``train_tokenizer.model`` picks it: ``wordpiece`` (BERT, :mod:`bert_pipeline.data.wordpiece`), ``bpe`` (RoBERTa's
byte-level BPE, :mod:`bert_pipeline.data.bpe`) or ``unigram`` (ALBERT's Unigram, :mod:`bert_pipeline.data.unigram`).
Reads the ``text`` column of ``data/corpus/`` (train split to learn, validation split to measure) and, through
:func:`stages.tokenizers.train_tokenizer` (shared with ``variants``), writes:

- ``models/tokenizer/``: ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and the model's
  vocabulary files (``vocab.txt``; ``vocab.json`` + ``merges.txt`` for BPE), checked to reload through
  ``AutoTokenizer`` to the same ids before the folder is published;
- ``metrics/tokenizer.json``: vocabulary size and, on the validation split, fertility (tokens per word), unknown-token
  rate, share of continuation pieces (WordPiece ``##``; BPE: no leading ``Ġ``; Unigram: no leading ``▁``), share of
  words kept whole;
- ``plots/tokenizer_fertility.csv``: how many validation words take 1, 2, ... tokens;
- ``metrics/tokenizer-timing.json`` (wall clock, not cached): training seconds and MB/s;
- one MLflow run: params, these metrics, a pointer to ``models/tokenizer`` (path + DVC hash).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.data.corpus import open_corpus
from bert_pipeline.data.wordpiece import histogram_csv
from bert_pipeline.io import atomic_write_text, write_json
from stages import dvc_adapter, require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.train_tokenizer import TrainTokenizerView
from stages.tokenizers import CORPUS_DIR, train_tokenizer

log = logging.getLogger(__name__)

TOKENIZER_DIR = Path("models/tokenizer")
METRICS = Path("metrics/tokenizer.json")
TIMING = Path("metrics/tokenizer-timing.json")
PLOT = Path("plots/tokenizer_fertility.csv")


def main() -> None:
    require_inputs("train_tokenizer")
    params = load_view(TrainTokenizerView).train_tokenizer
    corpus = open_corpus(CORPUS_DIR, columns=["text"])
    with dvc_adapter.stage_run("train_tokenizer", params.model_dump()) as mlflow_run:
        metrics, histogram, timing = train_tokenizer(params, corpus, TOKENIZER_DIR)
        write_json(METRICS, metrics)
        write_headline("tokenizer", {"tokenizer": {k: metrics[k] for k in ("fertility", "unk_rate")}})
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
