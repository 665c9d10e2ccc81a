"""How every entry point runs: logging to stderr, expected errors as one line, exit status 1.

Used by each DVC stage's ``__main__`` and by the ``bert-pipeline`` console script, so a user sees the same
behaviour everywhere: ``error: <file or key>: <what was expected>`` on stderr and no traceback for an
expected failure (:class:`bert_pipeline.errors.PipelineError` and its subclasses).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from bert_pipeline.errors import PipelineError


def setup_logging(level: int = logging.INFO) -> None:
    """Log to stderr with time, level and logger name (Prefect captures the stream)."""
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)


QUIET_DEFAULTS = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def quiet_libraries() -> None:
    """Turn off the libraries' own progress bars for sub-second steps, unless the user set the variables.

    ``datasets`` draws a bar for every ``save_to_disk``/``filter`` and ``transformers`` one for every weight load
    and save (a smoke run printed 60 of them, each under a second); the pipeline's own bars (tqdm) cover the long
    work: corpus sentences, shards, training steps. Warnings stay on. The variables cover a library imported
    later; one that is already imported is told directly (importing one here would cost seconds).
    """
    for key, value in QUIET_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if "datasets" in sys.modules and os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1":
        sys.modules["datasets"].disable_progress_bars()
    if "transformers" in sys.modules and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1":
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def run_main(main: Callable[[], object]) -> None:
    """Run ``main``; print an expected error as one line on stderr and exit 1.

    Raises:
        SystemExit: status 1 after a :class:`PipelineError`; 130 after Ctrl-C or SIGTERM, once the temporary outputs
            are removed.
    """
    setup_logging()
    quiet_libraries()
    install_sigterm_handler()
    try:
        main()
    except PipelineError as exc:
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted; no output was written (rerun the stage)\n")
        sys.exit(130)


_FORK_RESET_REGISTERED = False


def install_sigterm_handler() -> None:
    """SIGTERM (a killed `dvc repro`, a CI timeout) unwinds like Ctrl-C, so ``atomic_dir`` removes its temporary
    folder and nothing half-written stays behind. Forked children (worker pools, DataLoader workers) get the
    default action back: a Python handler runs only on a main thread, and a SIGTERM from ``Pool.terminate()``
    landing on a worker's library thread (OpenBLAS) left the worker blocked on the pool's queue lock and the stage
    waiting for it forever."""
    import os
    import signal

    global _FORK_RESET_REGISTERED
    signal.signal(signal.SIGTERM, _terminated)
    if not _FORK_RESET_REGISTERED:
        os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
        _FORK_RESET_REGISTERED = True


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
