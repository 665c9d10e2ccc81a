"""The one exception type for expected failures: bad input files, bad params, missing upstream outputs."""

from __future__ import annotations


class PipelineError(RuntimeError):
    """An expected failure. ``str(err)`` is the one line shown to the user: it names the file or params key,
    what was expected, and the fix. Stages and the console script print it and exit 1 (:mod:`bert_pipeline.console`)."""


class SettingError(PipelineError):
    """A bad value of one of a library function's own arguments: ``setting`` names that argument or a path inside it
    (``"chunk_chars"``, ``"packages"``, ``"sources[news].path"``; ``""`` when no single one is to blame), ``message``
    says what was expected. ``str(err)`` is ``"{setting}: {message}"`` (the message alone when ``setting`` is empty).

    The library knows no params key: the stage that passed the value maps ``setting`` to its key
    (:func:`stages.settings_from`), so the user's line names the params file and ``SECTION.SETTING: MESSAGE``.
    """

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(setting, message)  # both in args: the error pickles (a worker process may raise it)
        self.setting = setting
        self.message = message

    def __str__(self) -> str:
        return f"{self.setting}: {self.message}" if self.setting else self.message
