"""Benchmark: the prepare_corpus stage on the default corpus, next to the issue's figures.

    python bench/corpus.py            # forced re-run of the stage, then a no-op `dvc repro`, then the figures
    python bench/corpus.py --no-run   # only the figures of the current data/corpus and metrics/corpus.json

Runs ``dvc repro -f prepare_corpus`` under ``/usr/bin/time`` (wall-clock and CPU seconds, the pool workers
included), hashes every output file, runs the stage again and compares the hashes (byte-identical re-run), then
times a plain ``dvc repro`` (must report "didn't change"). The machine's load average is printed: this machine is
shared, wall-clock figures rise with it, CPU seconds much less.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _hashes() -> dict[str, str]:
    out = {}
    for folder in (REPO / "data/corpus", REPO / "metrics"):
        for p in sorted(folder.rglob("*")):
            if p.is_file() and (folder.name != "metrics" or p.name == "corpus.json"):
                out[p.relative_to(REPO).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _timed(cmd: list[str]) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and its children, output)."""
    proc = subprocess.run(["/usr/bin/time", "-f", "TIME %e %U %S", *cmd], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    wall, user, sys_s = map(float, re.findall(r"TIME (\S+) (\S+) (\S+)", proc.stderr)[-1])
    return wall, user + sys_s, proc.stdout + proc.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-run", action="store_true", help="only print the figures of the current outputs")
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if not args.no_run:
        rows = []
        for run in (1, 2):
            wall, cpu, _ = _timed(["dvc", "repro", "-f", "prepare_corpus"])
            rows.append((wall, cpu, _hashes()))
            print(f"dvc repro -f prepare_corpus, run {run}: {wall:.1f} s wall, {cpu:.1f} s CPU (reference: <= 240 s)")
        same = rows[0][2] == rows[1][2]
        print(f"byte-identical re-run ({len(rows[0][2])} files): {'yes' if same else 'NO'}")
        wall, cpu, out = _timed(["dvc", "repro"])
        unchanged = "didn't change" in out and "Running stage" not in out
        print(f"no-op dvc repro: {wall:.1f} s wall, {cpu:.1f} s CPU, unchanged: {unchanged} (reference: < 3 s)")
    metrics = json.loads((REPO / "metrics/corpus.json").read_text())
    news = metrics["per_source"].get("news_articles", {})
    print(f"{'figure':<34}{'ours':>12}{'required':>12}")
    print(f"{'documents (news_articles)':<34}{news.get('documents', 0):>12,}{3500:>12,}")
    print(f"{'words (news_articles)':<34}{news.get('words', 0):>12,}{1_900_000:>12,}")
    for key in ("sentences", "bytes", "duplicates_dropped", "dropped_short", "replaced_bytes", "mojibake_fixed"):
        print(f"{key:<34}{metrics[key]:>12,}{'':>12}")
    for split, s in metrics["per_split"].items():
        print(f"{split + ' documents / words':<34}{s['documents']:>6,} / {s['words']:,}")


if __name__ == "__main__":
    main()
