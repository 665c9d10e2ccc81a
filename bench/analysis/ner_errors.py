"""Where a NER model and spaCy's silver labels disagree, and how consistent the silver labels are themselves.

    python bench/analysis/ner_errors.py                                   # models/finetuned/minilm-ner on the test split
    python bench/analysis/ner_errors.py --model models/finetuned/minilm_student-ner --split validation --examples 10

Run where ``prepare_tasks`` and the model's ``finetune`` stage have run. Two figures per entity type, printed as one
JSON object (and, with ``--examples N``, N disagreements of each kind as text lines on stderr):

- **the model's errors**, every silver span of the split put in one class: ``exact`` (same words, same type),
  ``wrong_type`` (same words, another type), ``boundary`` (an overlapping span of the same type with other words),
  ``other_overlap`` (overlapping, other type and words) or ``missed`` (no predicted span overlaps), and the predicted
  spans that overlap no silver span (``spurious``). Predictions come from the scorer's own path (the stage's
  windows, each word read from its first WordPiece in its most-centred window; fp32, where the stage may have
  scored in bf16, so a span or two can differ from the metrics file).
- **the silver labels' self-agreement** over every split: for each word sequence spaCy tagged as an entity of type
  T anywhere, its occurrences (the same words, same case, anywhere, not inside a longer tagged name) tagged T on
  exactly those words, tagged as another type, overlapping another span, or untagged. A model that learns one label per name cannot agree with spaCy more often
  than spaCy agrees with itself, so ``silver_consistency`` is a rough ceiling for names the training split holds.

Writes nothing. One thread per ``torch``'s default; seconds are printed, not a figure anything depends on.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from transformers import DataCollatorWithPadding

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bert_pipeline.evaluation.predictor import load_predictor  # noqa: E402
from bert_pipeline.tasks.ner import ner_metrics, tokenize_ner, word_predictions  # noqa: E402
from bert_pipeline.train.finetune import forward_all  # noqa: E402
from bert_pipeline.train.finetune_data import load_task  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402

CLASSES = ("exact", "wrong_type", "boundary", "other_overlap", "missed")


def spans(tags: list[str]) -> list[tuple[str, int, int]]:
    """``(type, first word, last word)`` of each entity of a BIO sequence (seqeval's reading: a stray ``I-`` opens
    a span)."""
    from seqeval.metrics.sequence_labeling import get_entities

    return [(t, a, b) for t, a, b in get_entities(tags)]


def classify(gold: list[tuple[str, int, int]], pred: list[tuple[str, int, int]]) -> tuple[list[str], list[tuple[str, int, int]]]:
    """One class of :data:`CLASSES` per gold span, and the predicted spans overlapping no gold span (spurious)."""
    out = []
    for t, a, b in gold:
        over = [(pt, pa, pb) for pt, pa, pb in pred if pa <= b and a <= pb]
        if (t, a, b) in pred:
            out.append("exact")
        elif any((pa, pb) == (a, b) for _, pa, pb in over):
            out.append("wrong_type")
        elif any(pt == t for pt, _, _ in over):
            out.append("boundary")
        elif over:
            out.append("other_overlap")
        else:
            out.append("missed")
    spurious = [(pt, pa, pb) for pt, pa, pb in pred if not any(a <= pb and pa <= b for _, a, b in gold)]
    return out, spurious


def silver_consistency(sentences: list[tuple[list[str], list[str]]]) -> dict[str, dict[str, float]]:
    """Per type T: of the occurrences of word sequences spaCy tagged T somewhere, the share tagged T on exactly
    those words, tagged otherwise (another type or span), or untagged."""
    typed: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
    for words, tags in sentences:
        for t, a, b in spans(tags):
            typed[tuple(words[a:b + 1])][t] += 1
    by_first: dict[str, list[tuple[str, ...]]] = defaultdict(list)
    for seq in typed:
        by_first[seq[0]].append(seq)
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for words, tags in sentences:
        found = spans(tags)
        entity_at = {(a, b): t for t, a, b in found}
        for i, w in enumerate(words):
            for seq in by_first.get(w, ()):
                j = i + len(seq) - 1
                if tuple(words[i:j + 1]) != seq:
                    continue
                if any(a <= i and j <= b and (a, b) != (i, j) for _, a, b in found):
                    continue  # part of a longer name ("Merkel" in "Angela Merkel"): not a disagreement
                for t in typed[seq]:
                    if entity_at.get((i, j)) == t:
                        counts[t]["same"] += 1
                    elif (i, j) in entity_at:
                        counts[t]["other_type"] += 1
                    elif any(tag != "O" for tag in tags[i:j + 1]):
                        counts[t]["other_span"] += 1
                    else:
                        counts[t]["untagged"] += 1
    keys = ("same", "other_type", "other_span", "untagged")
    return {t: {k: round(c[k] / max(1, sum(c.values())), 4) for k in keys} | {"occurrences": sum(c.values())}
            for t, c in sorted(counts.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/finetuned/minilm-ner", type=Path)
    parser.add_argument("--task", default="data/tasks/ner", type=Path)
    parser.add_argument("--split", default="test", choices=("validation", "test"))
    parser.add_argument("--max-length", type=int, default=64, help="finetune.tasks.ner.max_length")
    parser.add_argument("--doc-stride", type=int, default=16, help="finetune.tasks.ner.doc_stride")
    parser.add_argument("--examples", type=int, default=0, help="disagreements of each kind to print on stderr")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    start = time.perf_counter()
    dd, info = load_task(args.task)
    names = info["label_names"]
    ds = dd[args.split]
    words_all, gold_tags = list(ds["tokens"]), [[names[t] for t in tags] for tags in ds["ner_tags"]]
    pred = load_predictor(args.model)
    runtime = make_runtime("fp32", cpu=True)
    windows = tokenize_ner(pred.tokenizer, words_all, None, args.max_length, args.doc_stride)
    logits = forward_all(pred.model, windows.features, DataCollatorWithPadding(pred.tokenizer, return_tensors="pt"),
                         64, runtime)
    id2label = pred.model.config.id2label
    per_word = word_predictions(windows, [np.argmax(x, -1) for x in logits])
    pred_tags = [[id2label[int(p)] for p in sent] for sent in per_word]
    classes: dict[str, Counter[str]] = defaultdict(Counter)
    spurious: Counter[str] = Counter()
    shown: Counter[str] = Counter()
    for words, g, p in zip(words_all, gold_tags, pred_tags, strict=True):
        gs, ps = spans(g), spans(p)
        kinds, extra = classify(gs, ps)
        for (t, a, b), k in zip(gs, kinds, strict=True):
            classes[t][k] += 1
            if k != "exact" and shown[k] < args.examples:
                shown[k] += 1
                model_says = [f"{pt} {' '.join(words[pa:pb + 1])!r}" for pt, pa, pb in ps if pa <= b and a <= pb]
                print(f"[{k}] silver {t} {' '.join(words[a:b + 1])!r}; model: {', '.join(model_says) or 'nothing'}"
                      f"  | {' '.join(words)}", file=sys.stderr)
        spurious.update(pt for pt, _, _ in extra)
    every = [(list(r["tokens"]), [names[t] for t in r["ner_tags"]]) for s in dd for r in dd[s]]
    report = {
        "model": str(args.model), "split": args.split, "sentences": len(ds),
        "f1": {k: round(v, 4) for k, v in ner_metrics(gold_tags, pred_tags).items() if k.startswith("f1")},
        "model_errors": {t: {k: c[k] for k in CLASSES} | {"spurious": spurious[t], "silver_spans": sum(c.values())}
                         for t, c in sorted(classes.items())},
        "silver_consistency": silver_consistency(every),
        "seconds": round(time.perf_counter() - start, 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
