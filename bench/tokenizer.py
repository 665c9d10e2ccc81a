"""Benchmark: WordPiece training and encoding speed on the corpus, batched and parallel next to a per-text loop.

    python bench/tokenizer.py [--corpus data/corpus] [--vocab-size 8192] [--reference-mb 0.5]

The corpus is ``data/corpus`` (``prepare_corpus``'s DatasetDict, train + validation ``text``) or, when that does not
exist yet, the NewsArticles texts from ``data/raw`` (title, subtitle and body per article). One run prints, in MB of
UTF-8 text per second of wall clock, and per CPU second (process, its threads and its finished worker processes:
a figure that depends less on what else runs on this shared machine):

Training (``bert_pipeline.data.wordpiece.train_wordpiece``, the stage's deterministic two-pass training; and ``tokenizers``'
own single-pass ``WordPieceTrainer`` as the reference it is built on), each with Rust parallelism off and on.

Encoding (the trained tokenizer, ``[CLS] text [SEP]``, no truncation), over the whole corpus:
  - per-text loop, ``tokenizers``: ``for t in texts: tok.encode(t)``;
  - per-text loop, ``transformers``: ``for t in texts: hf(t)`` (the loop a user writes first);
  - batched ``tok.encode_batch`` (1000 texts per call), parallelism off (one thread);
  - batched ``datasets.map(batched=True)`` with ``hf``, ``num_proc=1`` and ``num_proc=2`` (processes);
  - batched ``tok.encode_batch``, ``tokenizers``' own parallelism on (Rayon threads, one per core);
  - the pure-Python reference ``BertTokenizerLegacy`` per text, on the first ``--reference-mb`` MB only.
This machine is shared: the load average is printed before and after; wall-clock figures rise with it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bert_pipeline  # noqa: E402,F401  (offline defaults; TOKENIZERS_PARALLELISM=false)
from bert_pipeline.data.wordpiece import bare_tokenizer, save_tokenizer, special_tokens, train_wordpiece  # noqa: E402


def load_texts(corpus: Path) -> tuple[list[str], str]:
    if (corpus / "dataset_dict.json").exists():
        import datasets

        dd = datasets.load_from_disk(str(corpus))
        return [t for split in ("train", "validation") for t in dd[split]["text"]], str(corpus)
    import pandas as pd

    from bert_pipeline.data.sources import NEWS_ARTICLES

    csv = REPO / "data/raw" / NEWS_ARTICLES
    if not csv.exists():
        raise SystemExit(f"no corpus: neither {corpus} nor {csv} (run prepare_corpus or fetch_data)")
    df = pd.read_csv(csv).fillna("")
    texts = ["\n".join(p for p in (t, s, x) if p) for t, s, x in zip(df.title, df.subtitle, df.text, strict=True)]
    return texts, f"{csv} (title/subtitle/text, no cleaning)"


def parallelism(on: bool) -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if on else "false"


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, its threads and its finished child processes)."""
    wall, cpu = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - wall, _cpu() - cpu


def row(name: str, mb: float, seconds: tuple[float, float]) -> None:
    wall, cpu = seconds
    print(f"  {name:<66} {wall:7.2f} s {mb / wall:7.2f} MB/s wall {mb / cpu:7.2f} MB/CPU-s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO / "data/corpus")
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--reference-mb", type=float, default=0.5)
    args = ap.parse_args()

    texts, where = load_texts(args.corpus)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    batches = [texts[i:i + 1000] for i in range(0, len(texts), 1000)]
    print(f"corpus: {where}: {len(texts)} texts, {mb:.2f} MB; cores: {os.cpu_count()}; "
          f"load average: {os.getloadavg()[0]:.1f}")

    print(f"training, vocab_size {args.vocab_size}:")
    tok = None
    for on in (False, True):
        parallelism(on)
        label = "parallel" if on else "1 thread"
        trained = []
        row(f"ours (deterministic, 2 passes), {label}", mb, timed(
            lambda out=trained: out.append(train_wordpiece(lambda: iter(batches), vocab_size=args.vocab_size))))
        tok = trained[0]
        from tokenizers.trainers import WordPieceTrainer

        raw = bare_tokenizer(None, True, None, True, 100)
        trainer = WordPieceTrainer(vocab_size=args.vocab_size, min_frequency=2, limit_alphabet=1000,
                                   special_tokens=special_tokens(True), show_progress=False)
        row(f"tokenizers WordPieceTrainer (1 pass, not deterministic), {label}", mb,
            timed(lambda raw=raw, trainer=trainer: raw.train_from_iterator(iter(batches), trainer)))

    from transformers import AutoTokenizer

    folder = Path(tempfile.mkdtemp(prefix="bench-tokenizer-"))
    save_tokenizer(tok, folder)
    hf = AutoTokenizer.from_pretrained(str(folder))
    print("encoding ([CLS] text [SEP], whole corpus):")
    parallelism(False)
    row("per-text loop, tokenizers encode", mb, timed(lambda: [tok.encode(t) for t in texts]))
    row("per-text loop, transformers AutoTokenizer __call__", mb, timed(lambda: [hf(t, verbose=False) for t in texts]))
    row("batched encode_batch, 1 thread", mb, timed(lambda: [tok.encode_batch(b) for b in batches]))

    import datasets

    ds = datasets.Dataset.from_dict({"text": texts})
    datasets.disable_progress_bars()
    for procs in (1, 2):
        row(f"batched datasets.map(hf), num_proc={procs}", mb, timed(lambda procs=procs: ds.map(
            lambda b: hf(b["text"], verbose=False), batched=True, batch_size=1000, num_proc=procs,
            remove_columns=["text"], keep_in_memory=True, load_from_cache_file=False)))
    parallelism(True)
    row(f"batched encode_batch, tokenizers parallelism ({os.cpu_count()} threads)", mb,
        timed(lambda: [tok.encode_batch(b) for b in batches]))
    parallelism(False)

    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    ref = BertTokenizerLegacy(str(folder / "vocab.txt"))
    subset, size = [], 0
    for t in texts:
        if size >= args.reference_mb * 1e6:
            break
        subset.append(t)
        size += len(t.encode("utf-8"))
    row(f"per-text loop, Python BertTokenizerLegacy (first {size / 1e6:.2f} MB)", size / 1e6,
        timed(lambda: [ref(t, verbose=False) for t in subset]))
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
