"""Benchmark: sentence splitters side by side, on our tricky sentences and on real news.

    python bench/sentences.py [--docs 200]

Splitters: spaCy ``senter`` alone (the model's own boundaries), ``senter`` + our repairs (what the stage uses,
``bert_pipeline.data.sentences.doc_sentences``), and the dependency ``parser`` + our repairs (``sentence_splitter:
spacy_parser``). Figures: exact-split accuracy on the tricky cases of ``tests/test_sentences.py``; on the first
``--docs`` news documents of ``data/corpus`` (train), the boundary F1 against the parser's boundaries (the parser
as reference, not a gold standard) and speed in words per CPU second (one process).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bert_pipeline  # noqa: E402,F401  (offline defaults)
from bert_pipeline.data.sentences import doc_sentences, load_splitter  # noqa: E402
from bert_pipeline.data.sources import SPACY_MODEL  # noqa: E402
from tests.test_sentences import TRICKY  # noqa: E402


def _model_sentences(doc) -> list[str]:
    return [" ".join(s.text.split()) for s in doc.sents if s.text.strip()]


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
    args = ap.parse_args()
    model = REPO / "data/raw" / SPACY_MODEL
    senter, parser = load_splitter(model, "spacy_senter"), load_splitter(model, "spacy_parser")
    texts = datasets.load_from_disk(str(REPO / "data/corpus"))["train"]["text"][: args.docs]
    words = sum(len(t.split()) for t in texts)
    runs = {}
    for name, nlp, fn in (("senter (model only)", senter, _model_sentences), ("senter + repairs (stage)", senter,
                          doc_sentences), ("parser + repairs", parser, doc_sentences)):
        tricky = sum(fn(nlp(t)) == e for t, e in TRICKY)
        t0 = time.process_time()
        out = [fn(d) for d in nlp.pipe(texts, batch_size=64)]
        runs[name] = (tricky, out, words / (time.process_time() - t0))
    ref = runs["parser + repairs"][1]
    print(f"{len(TRICKY)} tricky cases; {len(texts)} news documents, {words:,} words")
    print(f"{'splitter':<28}{'tricky exact':>14}{'boundary F1 vs parser':>24}{'words/CPU s':>14}")
    for name, (tricky, out, speed) in runs.items():
        tp = fp = fn_ = 0
        for a, b in zip(out, ref, strict=True):
            ea, eb = _ends(a), _ends(b)
            tp, fp, fn_ = tp + len(ea & eb), fp + len(ea - eb), fn_ + len(eb - ea)
        f1 = 2 * tp / max(1, 2 * tp + fp + fn_)
        print(f"{name:<28}{tricky:>8}/{len(TRICKY):<5}{f1:>24.4f}{speed:>14,.0f}")


if __name__ == "__main__":
    main()
