"""The thin ``main`` wrapper every stage module uses: logging set up, expected errors as one line, exit 1."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable


class StageError(RuntimeError):
    """An expected failure (bad input, bad params). ``str(err)`` is the one line shown to the user."""


def setup_logging(level: int = logging.INFO) -> None:
    """Log to stderr with time, level and logger name (Prefect captures the stream)."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)


def run_stage(main: Callable[[], None]) -> None:
    """Run a stage's ``main``; print expected errors as one line and exit non-zero."""
    from stages.params import ParamsError

    setup_logging()
    try:
        main()
    except (StageError, ParamsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
