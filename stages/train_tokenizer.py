"""Stage ``train_tokenizer``: the vocabulary the model family needs, learnt on the corpus, loadable with
``AutoTokenizer``.

``train_tokenizer.model`` picks it: ``wordpiece`` (BERT, :mod:`bert_pipeline.data.wordpiece`), ``bpe`` (RoBERTa's
byte-level BPE, :mod:`bert_pipeline.data.bpe`) or ``unigram`` (ALBERT's Unigram, :mod:`bert_pipeline.data.unigram`).
Reads the ``text`` column of ``data/corpus/`` (train split to learn, validation split to measure) and, through
:func:`train_tokenizer`, writes:

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
from typing import Any

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
from stages import dvc_adapter, require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.train_tokenizer import TrainTokenizerParams, TrainTokenizerView

log = logging.getLogger(__name__)

CORPUS_DIR = Path("data/corpus")
TOKENIZER_DIR = Path("models/tokenizer")
METRICS = Path("metrics/tokenizer.json")
TIMING = Path("metrics/tokenizer-timing.json")
PLOT = Path("plots/tokenizer_fertility.csv")


def train_tokenizer(
    section: TrainTokenizerParams, corpus: Any, out_dir: Path
) -> tuple[dict[str, Any], dict[int, int], dict[str, float | None]]:
    """Train the vocabulary ``section.model`` names on ``corpus["train"]``, measure it on ``corpus["validation"]``
    and publish the tokenizer folder ``out_dir`` atomically (after the ``AutoTokenizer`` reload check).

    Args:
        section: the ``train_tokenizer`` params.
        corpus: what :func:`bert_pipeline.data.corpus.open_corpus` returns (``train`` and ``validation`` with
            ``text``).
        out_dir: the tokenizer folder to publish (replaced whole, never half-written).

    Returns:
        ``(metrics, histogram, timing)``: fertility metrics, the tokens-per-word histogram and wall-clock timing
        (:func:`bert_pipeline.data.wordpiece.train_measure_publish`).

    Raises:
        PipelineError: one line: ``vocab_size`` too small, no word in the train split, or a folder that would not
            reload to the same ids.
    """
    options = section.model_dump()
    model = options.pop("model")
    try:
        if model == "wordpiece":  # exactly today's call: the default's bytes do not change
            return train_tokenizer_folder(corpus, out_dir, **options)
        if model == "bpe":
            from bert_pipeline.data.bpe import train_bpe_folder

            return train_bpe_folder(corpus, out_dir, vocab_size=section.vocab_size,
                                    min_frequency=section.min_frequency, model_max_length=section.model_max_length,
                                    batch_size=section.batch_size)
        from bert_pipeline.data.unigram import train_unigram_folder

        return train_unigram_folder(corpus, out_dir, vocab_size=section.vocab_size, lowercase=section.lowercase,
                                    model_max_length=section.model_max_length, batch_size=section.batch_size)
    except VocabTooSmallError as exc:
        raise PipelineError(f"params.yaml: train_tokenizer.vocab_size: {exc}") from None
    except EmptyTrainingDataError as exc:
        raise PipelineError(f"{CORPUS_DIR}: train split: {exc}") from None
    except ValueError as exc:  # the published folder would not reload to the same ids, or a trainer's refusal
        raise PipelineError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001  (the Rust trainers raise plain Exception on bad input)
        if type(exc).__module__.startswith("tokenizers") or type(exc) is Exception:
            raise PipelineError(f"train_tokenizer (model {model}): {str(exc).splitlines()[0] if str(exc) else exc!r}"
                                ) from None
        raise


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
