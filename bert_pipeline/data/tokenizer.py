"""The one way to load a tokenizer folder (or hub name): ``AutoTokenizer``, a fast tokenizer, one-line errors.

Every consumer (instance building, pre-training, distillation, fine-tuning, the predictor) loads through
:func:`load_tokenizer`, so a missing or broken folder gives the same message everywhere. :func:`raw_backend`
gives the ``tokenizers`` object without padding or truncation, for tokenizing sentences as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bert_pipeline.errors import PipelineError


def load_tokenizer(path: str | Path, hint: str = "") -> Any:
    """``AutoTokenizer.from_pretrained(path)``, checked to be a fast tokenizer (``word_ids``, offsets and the Rust
    backend need one). ``path`` may be a hub name when the network is allowed (``HF_HUB_OFFLINE=0``).

    Args:
        path: a tokenizer folder (``tokenizer.json`` and its config) or a hub name.
        hint: the fix named in the error when the folder does not exist (e.g. "run train_tokenizer").

    Returns:
        A ``transformers`` ``PreTrainedTokenizerFast``.

    Raises:
        PipelineError: one line naming ``path``: not found, not loadable, or not a fast tokenizer.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except Exception as exc:  # noqa: BLE001  (every load failure is the same user error)
        if not Path(path).exists():
            raise PipelineError(f"{path}: tokenizer folder not found{f' ({hint})' if hint else ''}") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PipelineError(f"{path}: expected a tokenizer loadable with AutoTokenizer ({first})") from None
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "backend_tokenizer", None) is None:
        raise PipelineError(f"{path}: expected a fast tokenizer (tokenizer.json)")
    return tokenizer


def raw_backend(tokenizer: Any) -> Any:
    """A copy of ``tokenizer``'s ``tokenizers.Tokenizer`` with padding and truncation off (a ``tokenizer.json``
    may carry either, which would silently cut or pad sentences)."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_padding()
    backend.no_truncation()
    return backend
