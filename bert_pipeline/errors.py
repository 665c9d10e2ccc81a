"""The one exception type for expected failures: bad input files, bad params, missing upstream outputs."""

from __future__ import annotations


class PipelineError(RuntimeError):
    """An expected failure. ``str(err)`` is the one line shown to the user: it names the file or params key,
    what was expected, and the fix. Stages and the console script print it and exit 1 (:mod:`bert_pipeline.console`)."""
