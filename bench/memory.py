"""Benchmark: peak memory and seconds of every data stage on generated corpora of one huge document and of many
small documents of the same total size.

    python bench/memory.py                                   # 20 and 200 MB, both shapes, every data stage
    python bench/memory.py --sizes-mb 20 200 1000            # the issue's sizes
    python bench/memory.py --shapes single --stages prepare_corpus train_tokenizer
    python bench/memory.py --set create_pretraining_data.dupe_factor=5   # a params key changed for every run

A corpus of ``SIZE`` MB is generated either as one document (``single``: one file read with ``unit: file``) or as
documents of 2-8 kB (``many``: blank-line-separated blocks, ``unit: block``, in files of 10 MB), beside the packaged
news articles (NER and QA are built from them). Words are drawn Zipf-like from the whole words of the packaged
MiniLM WordPiece vocabulary, 8-30 per sentence, 20-60 sentences per paragraph; no network.

Each stage runs as ``python -m stages.NAME`` in a temporary workspace with its own ``params.yaml`` (the committed
one, the corpus sources changed, ``create_pretraining_data.dupe_factor`` 1 unless ``--set``: the memory bound is
per shard, the time is dupe_factor times longer), in order ``prepare_corpus``, ``train_tokenizer``,
``create_pretraining_data``, ``prepare_tasks``, under ``/usr/bin/time -v``: peak RSS (maximum resident set size
of the stage or of its largest worker process: with ``num_proc`` workers the machine holds about that many times
a worker's memory), wall and CPU seconds, MB/s (the generated MB over wall seconds), and the load average before
and after (this machine is shared: wall seconds rise with the load, CPU seconds much less). The table at the end
puts the sizes side by side per stage and shape: a bounded stage's peak does not grow with the size.
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

STAGES = ("prepare_corpus", "train_tokenizer", "create_pretraining_data", "prepare_tasks")
SHAPES = ("single", "many")
MANY_FILE_BYTES = 10_000_000  # the "many" shape's documents go into files of about this size


def vocabulary_words(vocab_txt: Path) -> list[str]:
    """Whole alphabetic words of a WordPiece vocabulary (no ``##`` pieces, no specials), in vocabulary order."""
    words = [w for w in vocab_txt.read_text(encoding="utf-8").split("\n") if w.isalpha() and w.isascii()]
    return [w for w in words if len(w) > 1 or w in ("a", "i")]


class Words:
    """Zipf-distributed English-looking text from a word list, seeded."""

    def __init__(self, words: list[str], seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
        self.p = weights / weights.sum()
        self.vocab = np.array(words, dtype=object)
        self._pool: list[str] = []
        self._next = 0

    def sentence(self) -> str:
        n = int(self.rng.integers(8, 31))
        if self._next + n > len(self._pool):  # a fresh draw of words; an index, not slicing, keeps this linear
            self._pool = list(self.vocab[self.rng.choice(len(self.vocab), size=500_000, p=self.p)])
            self._next = 0
        words = self._pool[self._next:self._next + n]
        self._next += n
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(int(self.rng.integers(20, 61))))

    def document(self, n_chars: int) -> str:
        parts, size = [], 0
        while size < n_chars:
            parts.append(self.sentence())
            size += len(parts[-1]) + 1
        return " ".join(parts)


def write_corpus(folder: Path, shape: str, n_bytes: int, words: list[str], seed: int) -> dict:
    """Generate ``n_bytes`` of text in ``folder``; return the params source entry that reads it."""
    gen = Words(words, seed)
    folder.mkdir(parents=True)
    if shape == "single":
        with open(folder / "doc.txt", "w", encoding="ascii") as fh:
            written = 0
            while written < n_bytes:
                text = gen.paragraph() + "\n\n"
                fh.write(text)
                written += len(text)
        return {"name": "gen", "path": "user/doc.txt", "format": "txt", "unit": "file"}
    written, index = 0, 0
    while written < n_bytes:
        with open(folder / f"docs-{index:04d}.txt", "w", encoding="ascii") as fh:
            in_file = 0
            while in_file < MANY_FILE_BYTES and written + in_file < n_bytes:
                text = gen.document(int(gen.rng.integers(2_000, 8_001))) + "\n\n"
                fh.write(text)
                in_file += len(text)
        written += in_file
        index += 1
    return {"name": "gen", "path": "user/docs-*.txt", "format": "txt", "unit": "block"}


def make_workspace(root: Path, raw: Path, shape: str, size_mb: float, words: list[str], overrides: dict) -> None:
    (root / "data").mkdir(parents=True)
    (root / "data/raw").symlink_to(raw, target_is_directory=True)
    source = write_corpus(root / "user", shape, int(size_mb * 1e6), words, seed=int(size_mb * 1000) + len(shape))
    params = yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))
    params["prepare_corpus"]["sources"] = ["news_articles", source]
    params["create_pretraining_data"]["dupe_factor"] = 1
    for key, value in overrides.items():
        section, name = key.split(".", 1)
        params[section][name] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def timed(cmd: list[str], cwd: Path, mlflow_uri: str) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v``: peak RSS (MB), wall and CPU seconds; exit on failure."""
    env = dict(os.environ, PYTHONPATH=str(REPO), MLFLOW_TRACKING_URI=mlflow_uri)
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
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[20, 200])
    ap.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    ap.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES),
                    help="in pipeline order; a stage needs the ones before it")
    ap.add_argument("--set", dest="override", nargs="*", default=[], metavar="SECTION.KEY=VALUE",
                    help="params to change for every run, e.g. prepare_corpus.max_document_chars=null")
    ap.add_argument("--keep", type=Path, help="keep the workspaces under this folder")
    args = ap.parse_args()
    overrides = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.override)}
    stages = [s for s in STAGES if s in args.stages]
    from bert_pipeline.data.fetch import archive_store, fetch
    from stages.params.root import load_params

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    print(f"{os.cpu_count()} CPUs ({cpu}), load average {os.getloadavg()[0]:.2f}; overrides {overrides}", flush=True)
    cache = Path(tempfile.mkdtemp(prefix="bench-memory-raw-"))
    rows = []
    try:
        raw = cache / "raw"
        mlflow_uri = f"sqlite:///{cache / 'mlflow.db'}"  # one store: its schema is made once, not per run
        fetch(load_params(REPO / "params.yaml").fetch_data.packages, raw, archive_store())
        words = vocabulary_words(raw / "minilm/vocab.txt")
        for shape in args.shapes:
            for size in args.sizes_mb:
                root = Path(tempfile.mkdtemp(prefix=f"bench-memory-{shape}-{size:g}mb-", dir=args.keep))
                try:
                    make_workspace(root, raw, shape, size, words, overrides)
                    for stage in stages:
                        row = {"shape": shape, "size_mb": size, "stage": stage,
                               **timed([sys.executable, "-m", f"stages.{stage}"], root, mlflow_uri)}
                        if stage == "prepare_corpus":
                            gen = json.loads((root / "metrics/corpus.json").read_text())["per_source"]["gen"]
                            row["corpus"] = {k: gen[k] for k in ("documents", "split_documents", "parts",
                                                                 "hard_cuts", "duplicates_dropped", "words")
                                             if k in gen}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                finally:
                    if args.keep is None:
                        shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    sizes = args.sizes_mb
    head = "".join(f"{f'{s:g} MB':>28}" for s in sizes)
    print(f"\n{'stage':<24}{'shape':<8}{head}")
    print(f"{'':<32}" + "".join(f"{'peak MB':>10}{'wall s':>9}{'MB/s':>9}" for _ in sizes))
    for stage in stages:
        for shape in args.shapes:
            cells = []
            for size in sizes:
                r = next((r for r in rows if (r["stage"], r["shape"], r["size_mb"]) == (stage, shape, size)), None)
                cells.append(f"{r['peak_rss_mb']:>10.0f}{r['wall_s']:>9.1f}{size / r['wall_s']:>9.2f}" if r
                             else f"{'-':>28}")
            print(f"{stage:<24}{shape:<8}" + "".join(cells))
    loads = [r["load_before"] for r in rows] + [r["load_after"] for r in rows]
    print(f"load average {min(loads):.2f}-{max(loads):.2f}; CPU seconds per run in the JSON lines above")


if __name__ == "__main__":
    main()
