"""Benchmark: sentence splitters side by side, on our tricky sentences and on real news.

    python bench/sentences.py [--docs 200]

    python bench/sentences.py --disagreements 20   # also print boundaries where blingfire and senter differ

Splitters: spaCy ``senter`` alone (the model's own boundaries), ``senter`` + our repairs
(``bert_pipeline.data.sentences.doc_sentences``, ``sentence_splitter: spacy_senter``), the dependency ``parser`` +
our repairs (``spacy_parser``), Bling Fire alone, and Bling Fire + our repairs (``blingfire``,
``bert_pipeline.data.sentences.rule_sentences``). Figures: exact-split accuracy on the tricky cases of
``tests/test_sentences.py`` (``tests/tricky_sentences.json``); on the first ``--docs`` documents of ``data/corpus`` (train), boundary precision,
recall and F1 against the parser's boundaries (the parser as reference, not a gold standard) and speed in words
per CPU second (one process). ``--disagreements N`` prints N boundaries (with context) that only one of
``spacy_senter`` and ``blingfire`` puts, for a reader to judge which is right.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bert_pipeline  # noqa: E402,F401  (offline defaults)
from bert_pipeline.data.sentences import doc_sentences, load_splitter, rule_sentences  # noqa: E402
from bert_pipeline.data.sources import SPACY_MODEL  # noqa: E402

# The tricky cases of tests/test_sentences.py, from its data file: (text, exact expected sentences).
TRICKY = json.loads((REPO / "tests" / "tricky_sentences.json").read_text(encoding="utf-8"))


def _model_sentences(doc) -> list[str]:
    return [" ".join(s.text.split()) for s in doc.sents if s.text.strip()]


def _blingfire_alone(text: str) -> list[str]:
    import blingfire

    return [" ".join(s.split()) for s in blingfire.text_to_sentences(text).split("\n") if s.strip()]


def _ends(sentences: list[str]) -> set[int]:
    """Boundary positions as offsets in non-whitespace characters (robust to whitespace differences)."""
    out, n = set(), 0
    for s in sentences[:-1]:
        n += len("".join(s.split()))
        out.add(n)
    return out


def main() -> None:
    import datasets

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--disagreements", type=int, default=0, help="print this many boundaries the two differ on")
    args = ap.parse_args()
    model = REPO / "data/raw" / SPACY_MODEL
    senter, parser = load_splitter(model, "spacy_senter"), load_splitter(model, "spacy_parser")
    texts = datasets.load_from_disk(str(REPO / "data/corpus"))["train"]["text"][: args.docs]
    words = sum(len(t.split()) for t in texts)
    runs = {}
    for name, nlp, fn in (("senter (model only)", senter, _model_sentences), ("senter + repairs (spacy_senter)", senter,
                          doc_sentences), ("parser + repairs", parser, doc_sentences)):
        tricky = sum(fn(nlp(t)) == e for t, e in TRICKY)
        t0 = time.process_time()
        out = [fn(d) for d in nlp.pipe(texts, batch_size=64)]
        runs[name] = (tricky, out, words / (time.process_time() - t0))
    for name, fn in (("blingfire (alone)", _blingfire_alone), ("blingfire + repairs (blingfire)", rule_sentences)):
        tricky = sum(fn(t) == e for t, e in TRICKY)
        t0 = time.process_time()
        out = [fn(t) for t in texts]
        runs[name] = (tricky, out, words / (time.process_time() - t0))
    ref = runs["parser + repairs"][1]
    print(f"load average {os.getloadavg()[0]:.2f}; {len(TRICKY)} tricky cases; {len(texts)} documents, {words:,} words")
    print(f"{'splitter':<34}{'tricky exact':>13}{'P':>8}{'R':>8}{'F1 vs parser':>14}{'words/CPU s':>13}")
    for name, (tricky, out, speed) in runs.items():
        tp = fp = fn_ = 0
        for a, b in zip(out, ref, strict=True):
            ea, eb = _ends(a), _ends(b)
            tp, fp, fn_ = tp + len(ea & eb), fp + len(ea - eb), fn_ + len(eb - ea)
        precision, recall = tp / max(1, tp + fp), tp / max(1, tp + fn_)
        f1 = 2 * tp / max(1, 2 * tp + fp + fn_)
        print(f"{name:<34}{tricky:>7}/{len(TRICKY):<5}{precision:>8.4f}{recall:>8.4f}{f1:>14.4f}{speed:>13,.0f}")
    if args.disagreements:
        _print_disagreements(runs["senter + repairs (spacy_senter)"][1], runs["blingfire + repairs (blingfire)"][1],
                             ref, args.disagreements)


def _print_disagreements(senter: list[list[str]], fast: list[list[str]], ref: list[list[str]], limit: int) -> None:
    """Print up to ``limit`` boundaries that only one of the two splitters puts, with 60 characters around."""
    shown = 0
    for a, b, r in zip(senter, fast, ref, strict=True):
        flat = "".join("".join(s.split()) for s in a)
        ea, eb, er = _ends(a), _ends(b), _ends(r)
        for pos in sorted(ea ^ eb):
            who = "senter only" if pos in ea else "blingfire only"
            print(f"[{who}; parser {'agrees' if pos in er else 'disagrees'}] ...{flat[max(0, pos - 60):pos]} || "
                  f"{flat[pos:pos + 40]}...")
            shown += 1
            if shown >= limit:
                return


if __name__ == "__main__":
    main()
