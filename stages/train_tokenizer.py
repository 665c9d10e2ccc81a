"""Stage ``train_tokenizer``: a BERT WordPiece vocabulary learnt on the corpus, loadable with ``AutoTokenizer``.

Reads the ``text`` column of ``data/corpus/`` (train split to learn, validation split to measure) and, through
:func:`bert_pipeline.data.wordpiece.train_tokenizer_folder`, writes:

- ``models/tokenizer/``: ``tokenizer.json``, ``vocab.txt``, ``tokenizer_config.json``, ``special_tokens_map.json``
  (checked to reload through ``AutoTokenizer`` to the same ids before the folder is published);
- ``metrics/tokenizer.json``: vocabulary size and, on the validation split, fertility (tokens per word), ``[UNK]``
  rate, share of ``##`` pieces, share of words kept whole;
- ``plots/tokenizer_fertility.csv``: how many validation words take 1, 2, ... tokens;
- ``metrics/tokenizer-timing.json`` (wall clock, not cached): training seconds and MB/s;
- one MLflow run: params, these metrics, a pointer to ``models/tokenizer`` (path + DVC hash).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.data.corpus import open_corpus
from bert_pipeline.data.wordpiece import (
    EmptyTrainingDataError,
    VocabTooSmallError,
    histogram_csv,
    train_tokenizer_folder,
)
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_write_text, write_json
from bert_pipeline.mlops import tracking
from stages import require_inputs
from stages.headline import write_headline
from stages.params import load_params

log = logging.getLogger(__name__)

CORPUS_DIR = Path("data/corpus")
TOKENIZER_DIR = Path("models/tokenizer")
METRICS = Path("metrics/tokenizer.json")
TIMING = Path("metrics/tokenizer-timing.json")
PLOT = Path("plots/tokenizer_fertility.csv")


def main() -> None:
    require_inputs("train_tokenizer")
    params = load_params().train_tokenizer
    corpus = open_corpus(CORPUS_DIR, columns=["text"])
    with tracking.stage_run("train_tokenizer", params.model_dump()) as mlflow_run:
        try:
            metrics, histogram, timing = train_tokenizer_folder(corpus, TOKENIZER_DIR, **params.model_dump())
        except VocabTooSmallError as exc:
            raise PipelineError(f"params.yaml: train_tokenizer.vocab_size: {exc}") from None
        except EmptyTrainingDataError as exc:
            raise PipelineError(f"{CORPUS_DIR}: train split: {exc}") from None
        except ValueError as exc:  # the published folder would not reload to the same ids
            raise PipelineError(str(exc)) from None
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
