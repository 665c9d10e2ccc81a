"""The one way to load a tokenizer folder (or hub name): ``AutoTokenizer``, a fast tokenizer, one-line errors.

Every consumer (instance building, pre-training, distillation, fine-tuning, the predictor) loads through
:func:`load_tokenizer`, so a missing or broken folder gives the same message everywhere. :func:`raw_backend`
gives the ``tokenizers`` object without padding or truncation, for tokenizing sentences as they are.

A byte-level BPE without a prefix space (RoBERTa's, ``train_tokenizer.model: bpe``) tokenises a text's first word
unlike the same word after a space (``Hello`` vs ``ĠHello``). :func:`needs_prefix_space` says whether a tokenizer
is one; :func:`with_prefix_space` gives the copy that prepends a space to each text, or to each word of pre-split
input, for the callers that tokenise words as they stand in running text (NER's pre-split words, and NER served on
text the way it was trained).
"""

from __future__ import annotations

import copy
import json
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



def _prefix_space_parts(part: Any) -> list[Any]:
    """``part`` (a pre-tokenizer or post-processor, or ``None``) and, inside a ``Sequence`` of them (recursively),
    the parts with an ``add_prefix_space`` switch: ``ByteLevel`` (pre-tokenizer or post-processor) and
    ``RobertaProcessing``."""
    from tokenizers import pre_tokenizers, processors

    if isinstance(part, pre_tokenizers.Sequence | processors.Sequence):
        state = json.loads(part.__getstate__())  # a Sequence has indexing but no len()
        n = len(state.get("pretokenizers", state.get("processors", [])))
        return [p for i in range(n) for p in _prefix_space_parts(part[i])]
    switched = (pre_tokenizers.ByteLevel, processors.ByteLevel, processors.RobertaProcessing)
    return [part] if isinstance(part, switched) else []


def needs_prefix_space(backend: Any) -> bool:
    """Whether ``backend`` (a ``tokenizers.Tokenizer``) has a byte-level pre-tokenizer that prepends no space, so a
    word at the start of a text (or a pre-split word) gets other pieces than the same word after a space (no
    ``Ġ``). WordPiece and Unigram/Metaspace pipelines: False."""
    return any(not p.add_prefix_space for p in _prefix_space_parts(backend.pre_tokenizer))


def with_prefix_space(tokenizer: Any) -> Any:
    """``tokenizer`` as Hugging Face's RoBERTa tokenizer with ``add_prefix_space=True``: a space is prepended to a
    text, and with ``is_split_into_words=True`` to every word, so each word, the first included, gets the pieces it
    has after a space in running text (``ĠHello``).

    A fast tokenizer whose byte-level pre-tokenizer prepends no space (:func:`needs_prefix_space`) comes back as a
    deep copy with the switch on in its ``ByteLevel`` pre-tokenizer and in its post-processor (``trim_offsets`` then
    leaves a text's first character in its offsets); ``tokenizer`` itself is not changed. Any other tokenizer
    (WordPiece, Unigram, one that prepends a space already) comes back as it is. Hugging Face documents the prefix
    space as required for pre-split input to RoBERTa's tokenizer; ``transformers`` 5 does not check it and would
    tokenise every word as a text's first.

    Args:
        tokenizer: a ``transformers`` fast tokenizer (:func:`load_tokenizer`).

    Returns:
        ``tokenizer``, or its copy (whose ``add_prefix_space`` attribute is True).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not needs_prefix_space(backend):
        return tokenizer
    spaced = copy.deepcopy(tokenizer)  # the parts are shared objects: switching them on the original would leak
    backend = spaced.backend_tokenizer
    pre, post = backend.pre_tokenizer, backend.post_processor
    for part in _prefix_space_parts(pre) + _prefix_space_parts(post):
        part.add_prefix_space = True
    backend.pre_tokenizer = pre
    if post is not None:
        backend.post_processor = post
    spaced.add_prefix_space = True
    return spaced
