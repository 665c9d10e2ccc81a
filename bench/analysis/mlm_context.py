"""How far below the unigram floor could a masked LM go on this corpus from its immediate neighbours alone?

    python bench/analysis/mlm_context.py --project /path/to/built/checkout [--train-docs 3000 --validation-docs 300]

``--project`` is a checkout where ``prepare_corpus`` and ``train_tokenizer`` have run. Each sentence of the first
``--train-docs`` training documents and the first ``--validation-docs`` validation documents of ``data/corpus`` is
tokenized with ``models/tokenizer`` as pre-training tokenizes it (no special tokens; sentence ends marked). Counted
on train, scored on validation, in nats per token (the unit of ``metrics/pretrain.json``'s ``eval.mlm_loss``):

- unigram: add-0.5 smoothed token frequencies (what ``unigram_loss`` in ``metrics/pretrain.json`` measures on the
  held-out MLM targets);
- left neighbour: P(token | previous token), interpolated with the unigram (Dirichlet prior 20);
- both neighbours: P(token | previous, next), interpolated with the left-neighbour estimate (prior 5).

These are count models over a few million tokens, not a ceiling: a masked LM that reads the two neighbours of a
masked position as well as these counts do would sit at least this far below the unigram loss.
"""

from __future__ import annotations

import argparse
import collections
import math
from pathlib import Path


def _sentences(dataset, tokenizer, limit: int) -> list[list[int]]:
    """The sentences of ``dataset``'s first ``limit`` documents as id lists, tokenized as pre-training tokenizes
    them (:func:`bert_pipeline.data.shard_builder.tokenize_documents`): each as it stands in its document's text, so
    with a byte-level BPE (no prefix space) a document's later sentences start with a ``Ġ`` piece, as in the
    shards, not with a text's first piece."""
    import numpy as np

    from bert_pipeline.data.shard_builder import tokenize_documents
    from bert_pipeline.data.tokenizer import raw_backend

    rows = dataset.select(range(min(limit, len(dataset))))
    docs = tokenize_documents(raw_backend(tokenizer), [list(row["sentences"]) for row in rows], np.dtype(np.int64))
    return [sentence.tolist() for doc in docs for sentence in doc]


def require_built_project(project: Path, parts: tuple[str, ...] = ("models/tokenizer", "data/corpus"),
                           build: str = "dvc repro train_tokenizer") -> None:
    """Exit with one line unless ``project`` is a folder holding every one of ``parts`` (folders).

    Raises:
        SystemExit: the folder does not exist, or it lacks one of ``parts`` (names them and ``build``, the command
            that makes them).
    """
    if not project.is_dir():
        raise SystemExit(f"--project {project}: no such directory; give a checkout of this repository where "
                         f"`{build}` has run")
    missing = [str(project / part) for part in parts if not (project / part).is_dir()]
    if missing:
        raise SystemExit(f"--project {project}: no {' and no '.join(missing)}; run `{build}` there first (it "
                         "builds the stages before it too)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--project", type=Path, default=Path("."),
                        help="a checkout where prepare_corpus and train_tokenizer have run")
    parser.add_argument("--train-docs", type=int, default=3000,
                        help="the first this many training documents of data/corpus are counted")
    parser.add_argument("--validation-docs", type=int, default=300,
                        help="the first this many validation documents are scored")
    args = parser.parse_args()
    require_built_project(args.project)

    import datasets
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # long documents: the length warning is irrelevant to counting
    tokenizer = AutoTokenizer.from_pretrained(str(args.project / "models" / "tokenizer"))
    corpus = datasets.load_from_disk(str(args.project / "data" / "corpus"))
    start, end = -1, -2  # sentence boundary markers, outside the vocabulary
    unigram, left, both = collections.Counter(), collections.Counter(), collections.Counter()
    left_context, both_context = collections.Counter(), collections.Counter()
    for ids in _sentences(corpus["train"], tokenizer, args.train_docs):
        ids = [start, *ids, end]
        for i in range(1, len(ids) - 1):
            unigram[ids[i]] += 1
            left[ids[i - 1], ids[i]] += 1
            left_context[ids[i - 1]] += 1
            both[ids[i - 1], ids[i + 1], ids[i]] += 1
            both_context[ids[i - 1], ids[i + 1]] += 1
    total, vocab_size = sum(unigram.values()), len(tokenizer)
    nats, count = [0.0, 0.0, 0.0], 0
    for ids in _sentences(corpus["validation"], tokenizer, args.validation_docs):
        ids = [start, *ids, end]
        for i in range(1, len(ids) - 1):
            token = ids[i]
            p_unigram = (unigram[token] + 0.5) / (total + 0.5 * vocab_size)
            p_left = (left[ids[i - 1], token] + 20 * p_unigram) / (left_context[ids[i - 1]] + 20)
            p_both = (both[ids[i - 1], ids[i + 1], token] + 5 * p_left) / (both_context[ids[i - 1], ids[i + 1]] + 5)
            for k, p in enumerate((p_unigram, p_left, p_both)):
                nats[k] -= math.log(p)
            count += 1
    print(f"train tokens {total:,}, held-out tokens {count:,}, vocabulary {vocab_size:,}")
    for name, value in zip(("unigram", "left neighbour", "both neighbours"), nats, strict=True):
        print(f"{name:>16}: {value / count:.3f} nats per token")


if __name__ == "__main__":
    main()
