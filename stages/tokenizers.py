"""The tokenizer training that several stages share (not a stage): a ``train_tokenizer`` section in, the vocabulary
it names trained (:mod:`bert_pipeline.data.wordpiece`, :mod:`bert_pipeline.data.bpe`,
:mod:`bert_pipeline.data.unigram`) and published, the trainers' refusals as one-line errors naming the params key.

Stage ``train_tokenizer`` trains the pipeline's vocabulary with it and ``variants`` each family's, so no stage imports
another. It reads a typed params section and names the DVC layout, which is why it lives here and not in
:mod:`bert_pipeline`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bert_pipeline.data.wordpiece import EmptyTrainingDataError, VocabTooSmallError, train_tokenizer_folder
from bert_pipeline.errors import PipelineError
from stages.params.train_tokenizer import TrainTokenizerParams

CORPUS_DIR = Path("data/corpus")


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
