"""Stage ``create_pretraining_data``: tokenized sentence pairs with MLM masks, as unpadded Arrow shards.

Reads ``data/corpus/`` and the tokenizer that ``pretrain.init`` decides (``models/tokenizer`` for ``scratch``, else
the checkpoint's own), and writes with :func:`bert_pipeline.data.shards.build_pretraining_data`:

- ``data/pretraining/{train,validation}/`` and ``data/pretraining/info.json`` (layout: :mod:`bert_pipeline.data.shards`);
- with ``pretrain.phases`` at other lengths, ``data/pretraining/seq{L}/`` for each (``max_predictions_per_seq``
  scaled with the length, 20 at 128 -> 80 at 512 as BERT's phase 2), metrics under the key ``seq{L}``;
- ``metrics/pretraining_data.json`` (instances, tokens, padding share at ``max_seq_length``, realised masking rate
  and 80/10/10 split, pair-label balance, skipped documents, truncated tokens, and what was cut before pairing:
  ``cut_sentences`` longer than a segment and the ``cut_sentence_pieces`` they became, ``cut_documents`` longer
  than ``max_document_tokens`` and their ``cut_document_pieces``) and ``metrics/pretraining_data-timing.json``.

Memory per worker is bounded by ``shard_size x max_document_tokens`` tokens, not by a document's size.
"""

from __future__ import annotations

from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.data.shards import InstanceOptions, build_pretraining_data
from bert_pipeline.io import atomic_dir, write_json
from stages import require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.create_pretraining_data import CreatePretrainingDataView

CORPUS_DIR = Path("data/corpus")
OUT_DIR = Path("data/pretraining")
METRICS = Path("metrics/pretraining_data.json")
TIMING = Path("metrics/pretraining_data-timing.json")


def main() -> None:
    require_inputs("create_pretraining_data")
    params = load_view(CreatePretrainingDataView)
    options = InstanceOptions(**params.create_pretraining_data.model_dump())
    with atomic_dir(OUT_DIR) as out:
        metrics, timing = build_pretraining_data(
            CORPUS_DIR, params.pretrain.tokenizer_path, out, options,
            phase_lengths=[phase.max_seq_length for phase in params.pretrain.phases], init=params.pretrain.init)
    write_json(METRICS, metrics)
    write_headline("pretraining_data", {"pretraining_data": {
        "instances": metrics["train"]["instances"], "tokens": metrics["train"]["tokens"]}})
    write_json(TIMING, timing)


if __name__ == "__main__":
    run_main(main)
