"""Memory bounded by a constant: the data stages on a corpus whose one document is 2 MB and on one whose one
document is 20 MB peak within a fixed margin of each other (each stage in its own process, peak RSS from
``wait4``). Before documents were cut into parts, ``prepare_corpus`` peaked at about 16 bytes and
``train_tokenizer`` at about 100 bytes per character of the longest document: 290 MB and 1.8 GB apart here."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

from tests.conftest import REPO, committed_params, write_params

MARGIN_MB = 60
"""How far apart the two peaks may be: allocator noise and the Arrow files' metadata, not the document."""

STAGES = ("prepare_corpus", "train_tokenizer")


def _document(path, n_chars: int, seed: int) -> None:
    """One document of about ``n_chars`` characters: sentences of random common words, a paragraph break every 40
    sentences, no two paragraphs alike (the corpus keeps one copy of a duplicate part), a vocabulary that does
    not grow with the length (a trainer's memory grows with its distinct words, which is not what is tested)."""
    rng = random.Random(seed)
    words = ("the of and to in a is that for it as was with be by on not he this are or his from at which but have "
             "an they you were her she there been one all we their has would when if so no will can more other "
             "market city report water season court school music energy").split()
    with open(path, "w", encoding="utf-8") as fh:
        written = 0
        while written < n_chars:
            sentences = [" ".join(rng.choices(words, k=rng.randint(8, 24))).capitalize() + "." for _ in range(40)]
            paragraph = " ".join(sentences) + "\n\n"
            fh.write(paragraph)
            written += len(paragraph)


def _peak_mb(stage: str, cwd, mlflow_uri: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO), MLFLOW_TRACKING_URI=mlflow_uri)
    proc = subprocess.Popen([sys.executable, "-m", f"stages.{stage}"], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, err[-2000:]
    return usage.ru_maxrss / 1024  # KiB on Linux


@pytest.mark.e2e
def test_data_stages_peak_the_same_on_a_2_and_a_20_megabyte_document(tmp_path, raw_data):
    peaks = {}
    for size_mb in (2, 20):
        root = tmp_path / f"{size_mb}mb"
        (root / "data/raw").mkdir(parents=True)
        for entry in raw_data.iterdir():
            (root / "data/raw" / entry.name).symlink_to(entry)
        (root / "user").mkdir()
        _document(root / "user/long.txt", size_mb * 1_000_000, seed=size_mb)
        (root / "user/short.txt").write_text("\n\n".join(
            f"Story {i} begins here and runs for a while. It has a middle part too. It ends with story {i}."
            for i in range(40)), encoding="utf-8")
        params = committed_params()
        write_params(root, params, prepare_corpus={
            "sources": [{"name": "long", "path": "user/long.txt", "format": "txt", "unit": "file"},
                        {"name": "short", "path": "user/short.txt", "format": "txt", "unit": "block"}],
            "max_document_chars": 200_000, "min_words": 5, "validation_fraction": 0.3})
        peaks[size_mb] = {stage: _peak_mb(stage, root, f"sqlite:///{tmp_path / 'mlflow.db'}") for stage in STAGES}
    for stage in STAGES:
        assert peaks[20][stage] - peaks[2][stage] < MARGIN_MB, (stage, peaks)
