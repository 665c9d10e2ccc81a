"""CPU inference cost of a model: parameters, size on disk, latency at batch 1 and throughput at batch N.

Timing follows the usual benchmarking discipline (Dehghani et al. 2022, "The Efficiency Misnomer", §4: state
batch size, sequence length, hardware and threads): inputs are padded to a fixed ``seq_length`` so every member
of the family does the same amount of work per example whatever its vocabulary, ``warmup`` untimed runs come
first, and the figure is the median of ``runs`` timed runs. Wall-clock numbers vary from run to run: they belong
in a ``metrics/*-timing.json`` file (``cache: false``), never in the cached quality metrics.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass(frozen=True)
class Speed:
    """``latency_ms``: median ms per example at batch 1; ``throughput``: median examples/s at ``batch_size``."""

    latency_ms: float
    throughput: float
    batch_size: int
    seq_length: int
    threads: int


def encoder_parameters(model: torch.nn.Module) -> int:
    """Parameters of the encoder (``model.base_model``: embeddings + layers, + pooler if any), not the task head."""
    base = getattr(model, "base_model", model)
    return sum(p.numel() for p in base.parameters())


def size_on_disk_mb(model_dir: Path) -> float:
    """Size of the weight files (``*.safetensors``, ``*.bin``) in ``model_dir``, in MB (10**6 bytes)."""
    total = sum(p.stat().st_size for p in Path(model_dir).iterdir() if p.suffix in WEIGHT_SUFFIXES)
    return total / 1e6


def _batches(tokenizer: Any, texts: Sequence[str], batch_size: int, seq_length: int) -> list[dict[str, torch.Tensor]]:
    out = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(list(texts[i:i + batch_size]), padding="max_length", truncation=True, max_length=seq_length,
                        return_tensors="pt")
        out.append({k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
    return out


@torch.inference_mode()
def _time(model: torch.nn.Module, batches: list[dict[str, torch.Tensor]]) -> float:
    start = time.perf_counter()
    for batch in batches:
        model(**batch)
    return time.perf_counter() - start


def measure_speed(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    seq_length: int = 128,
    latency_examples: int = 16,
    batch_size: int = 32,
    warmup: int = 2,
    runs: int = 5,
    threads: int = 1,
) -> Speed:
    """Latency (ms/example, batch 1, over the first ``latency_examples`` texts) and throughput (examples/s,
    one batch of ``batch_size`` texts), each the median of ``runs`` timed runs after ``warmup`` untimed ones.

    ``texts`` are recycled when there are fewer than needed; ``seq_length`` is capped at the model's
    ``max_position_embeddings`` (the figure records the length used). Runs on CPU with ``threads`` intra-op threads
    (restored afterwards).

    Raises:
        ValueError: no texts.
    """
    if not texts:
        raise ValueError("measure_speed needs at least one text")
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if limit and seq_length > limit:
        log.warning("seq_length %d > the model's max_position_embeddings %d: timing at %d", seq_length, limit, limit)
        seq_length = limit
    need = max(latency_examples, batch_size)
    pool = [texts[i % len(texts)] for i in range(need)]
    model = model.eval().to("cpu")
    single = _batches(tokenizer, pool[:latency_examples], 1, seq_length)
    full = _batches(tokenizer, pool[:batch_size], batch_size, seq_length)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for _ in range(warmup):
            _time(model, single[:2])
            _time(model, full)
        latency = statistics.median(_time(model, single) / len(single) for _ in range(runs))
        per_batch = statistics.median(_time(model, full) for _ in range(runs))
    finally:
        torch.set_num_threads(old_threads)
    return Speed(latency_ms=1000 * latency, throughput=batch_size / per_batch, batch_size=batch_size,
                 seq_length=seq_length, threads=threads)
