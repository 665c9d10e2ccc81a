"""Benchmark: corpus preparation (the prepare_corpus stage's library call) at 1 and 2 processes, per splitter.

    python bench/corpus.py                                  # the default corpus: spacy_senter and blingfire, 1 and 2
    python bench/corpus.py --profile big-corpus             # the profile's sources (data/raw must hold them)
    python bench/corpus.py --runs blingfire@2 spacy_senter@2

Each run is ``bert_pipeline.data.corpus.build_corpus`` on the sources of ``params.yaml`` (with the profile's
overrides and ``prepare_corpus.sentence_splitter`` / ``num_proc`` of the run), in a fresh process under
``/usr/bin/time``, written to a temporary folder (the checkout's ``data/corpus`` is not touched). Figures: wall and
CPU seconds (the worker processes included), MB/s (UTF-8 text bytes of the corpus kept over wall seconds), peak
RSS of the largest process (``/usr/bin/time`` ``%M``: the main process or one worker), and a hash of the output
folder, which must be equal for the same splitter at any number of processes. The 1-minute load average is
printed before each run: wall seconds rise with other work on the machine, CPU seconds much less.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_RUN = """
import json, sys
from pathlib import Path
from bert_pipeline.data import corpus
from bert_pipeline.data.sources import SPACY_MODEL
from stages.params.root import load_params
from stages.prepare_corpus import RAW_DIR, source_readers
params = load_params(overrides=json.loads(sys.argv[1])).prepare_corpus
out = Path(sys.argv[2])
metrics = corpus.build_corpus(source_readers(params, RAW_DIR, Path(".")), out, spacy_model_dir=RAW_DIR / SPACY_MODEL,
                              progress=False, **params.model_dump(exclude={"sources"}))
print("METRICS " + json.dumps(metrics))
"""


def _tree_hash(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def run(overrides: dict) -> dict:
    """One timed build; returns its figures."""
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        out = Path(tmp) / "corpus"
        out.mkdir()
        load = os.getloadavg()[0]
        proc = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S %M", sys.executable, "-c", _RUN,
                               json.dumps(overrides), str(out)], cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"build failed:\n{proc.stderr[-3000:]}")
        wall, user, system, rss_kb = re.findall(r"TIME (\S+) (\S+) (\S+) (\S+)", proc.stderr)[-1]
        metrics = json.loads(proc.stdout.split("METRICS ", 1)[1])
        return {"load": load, "wall": float(wall), "cpu": float(user) + float(system), "rss_mib": int(rss_kb) / 1024,
                "metrics": metrics, "hash": _tree_hash(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", help="a profile in profiles/ whose overrides apply (e.g. big-corpus)")
    ap.add_argument("--runs", nargs="+", default=["spacy_senter@1", "spacy_senter@2", "blingfire@1", "blingfire@2"],
                    help="SPLITTER@NUM_PROC, in order")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from stages.cli import load_profile

    base = load_profile(args.profile) if args.profile else {}
    print(f"{os.cpu_count()} CPUs; profile: {args.profile or '(none: params.yaml)'}")
    print(f"{'splitter@procs':<18}{'load':>6}{'wall s':>9}{'CPU s':>8}{'MB/s':>8}{'peak RSS MiB':>14}"
          f"{'documents':>11}{'words':>12}{'sentences':>11}  output hash")
    hashes: dict[str, set[str]] = {}
    for spec in args.runs:
        splitter, procs = spec.split("@")
        figures = run({**{k: v for k, v in base.items() if k.startswith("prepare_corpus.")},
                       "prepare_corpus.sentence_splitter": splitter, "prepare_corpus.num_proc": int(procs)})
        m = figures["metrics"]
        hashes.setdefault(splitter, set()).add(figures["hash"])
        print(f"{spec:<18}{figures['load']:>6.2f}{figures['wall']:>9.2f}{figures['cpu']:>8.2f}"
              f"{m['bytes'] / 1e6 / figures['wall']:>8.2f}{figures['rss_mib']:>14.0f}{m['documents']:>11,}"
              f"{m['words']:>12,}{m['sentences']:>11,}  {figures['hash']}", flush=True)
    for splitter, seen in hashes.items():
        print(f"{splitter}: output {'identical' if len(seen) == 1 else 'DIFFERS'} across process counts")
    print(f"text: {m['bytes'] / 1e6:.1f} MB in {m['documents']:,} documents; per source:")
    for name, s in m["per_source"].items():
        print(f"  {name:<24}{s['documents']:>10,} documents {s['words']:>12,} words {s['bytes'] / 1e6:>8.1f} MB")


if __name__ == "__main__":
    main()
