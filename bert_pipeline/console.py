"""How every entry point runs: logging to stderr, expected errors as one line, exit status 1.

Used by each DVC stage's ``__main__`` and by the ``bert-pipeline`` console script, so a user sees the same
behaviour everywhere: ``error: <file or key>: <what was expected>`` on stderr and no traceback for an
expected failure (:class:`bert_pipeline.errors.PipelineError` and its subclasses).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from bert_pipeline.errors import PipelineError


def setup_logging(level: int = logging.INFO) -> None:
    """Log to stderr with time, level and logger name (Prefect captures the stream)."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)


def run_main(main: Callable[[], object]) -> None:
    """Run ``main``; print an expected error as one line on stderr and exit 1.

    Raises:
        SystemExit: status 1 after a :class:`PipelineError`.
    """
    setup_logging()
    try:
        main()
    except PipelineError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)
