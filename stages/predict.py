"""Inference for people: one JSON line per input from a fine-tuned model folder.

    python -m stages.predict models/finetuned/minilm-sentiment "A gripping, funny film." "Dull and overlong."
    python -m stages.predict models/finetuned/minilm-ner "Theresa May met Angela Merkel in Berlin."
    python -m stages.predict models/finetuned/minilm-qa --context "Theresa May met Angela Merkel in Berlin." \
        "Where did they meet?"
    cat reviews.txt | python -m stages.predict models/finetuned/minilm-sentiment      # one text per line

The model's head decides the output: sentiment ``{"text", "label", "probability"}``; NER ``{"text", "entities":
[{"type", "text", "start", "end", "score"}]}`` with character offsets (scores of a model trained on spaCy's silver
labels); QA (``--context`` required, each input is a question) ``{"question", "answer", "start", "end", "score"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.predictor import answer, classify, entities, load_predictor


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m stages.predict", description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path, help="a fine-tuned model folder (models/finetuned/{model}-{task})")
    parser.add_argument("texts", nargs="*", help="texts (QA: questions); read from stdin, one per line, when absent")
    parser.add_argument("--context", help="the passage QA answers from (required for a QA model)")
    parser.add_argument("--max-seq-length", type=int, default=384, help="tokens per window (default 384)")
    parser.add_argument("--doc-stride", type=int, default=128, help="QA window overlap in tokens (default 128)")
    return parser.parse_intermixed_args(argv)


def predict_lines(args: argparse.Namespace, texts: list[str]) -> list[dict]:
    """The output records for ``texts`` (see the module docstring).

    Raises:
        PipelineError: a QA model without ``--context``, or a folder that is not a fine-tuned model.
    """
    pred = load_predictor(args.model_dir)
    if pred.kind == "sequence-classification":
        return [{"text": t, **r} for t, r in zip(texts, classify(pred, texts, max_seq_length=args.max_seq_length),
                                                  strict=True)]
    if pred.kind == "token-classification":
        return [{"text": t, "entities": e} for t, e in zip(texts, entities(pred, texts), strict=True)]
    if not args.context:
        raise PipelineError(f"{args.model_dir}: a question-answering model needs --context \"PASSAGE\"")
    return [{"question": q, **answer(pred, q, args.context, args.max_seq_length, args.doc_stride)} for q in texts]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    texts = args.texts or [line.strip() for line in sys.stdin if line.strip()]
    if not texts:
        raise PipelineError("no input: give texts as arguments or one per line on stdin")
    for record in predict_lines(args, texts):
        print(json.dumps(record, ensure_ascii=False))


if __name__ == "__main__":
    run_main(main)
