"""DVC's log lines as the console script relays them: ``bert-pipeline profile`` streams ``dvc exp run``'s stderr
through :func:`relay_filtered`, leaving out the warnings :func:`is_missing_hash_warning` matches.

Below ``stages/cli.py`` and importable by ``flows/`` (which runs its own DVC commands through
``flows/dvc_cli.py``), so the console script needs nothing from the flows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import IO

NO_HASH_WARNING = "WARNING: No file hash info found for "


def is_missing_hash_warning(line: str) -> bool:
    """Whether ``line`` is the warning ``dvc exp run`` prints per output it cannot check out because ``dvc.lock``
    has no hash for it yet: on the first run in a clone (no committed ``dvc.lock``), one per output, 43 in all,
    although nothing is wrong (the run builds them)."""
    return line.lstrip("\r").startswith(NO_HASH_WARNING)


def relay_filtered(source: IO[bytes], sink: IO[bytes], drop: Callable[[str], bool]) -> int:
    """Copy ``source`` to ``sink`` as it arrives, leaving out each line ``drop`` matches; returns how many.

    A line ends at ``\n`` or ``\r``, so progress bars (which redraw with ``\r``) keep moving instead of waiting for
    a newline.
    """
    dropped, pending = 0, b""
    while chunk := source.read1(65536) if hasattr(source, "read1") else source.read(65536):
        pending += chunk
        *lines, pending = re.split(rb"(?<=[\r\n])", pending)
        for line in lines:
            if drop(line.decode("utf-8", "replace")):
                dropped += 1
            else:
                sink.write(line)
        sink.flush()
    if pending and not drop(pending.decode("utf-8", "replace")):
        sink.write(pending)
        sink.flush()
    return dropped
