"""Speed and size: parameters on disk, latency and throughput of fine-tuned models, encoder throughput of a
teacher against its student, the machine's matmul peak (for MFU), and wall/CPU seconds of a call.

Every measurement runs on the device of the :class:`bert_pipeline.train.runtime.Runtime` it is given (the model is
placed there, inputs are built there, a GPU is synchronised around each timed call) and records that device: the
``evaluate`` stage times serving on the CPU, distillation and the variants time encoders where they trained.

Timing follows the usual benchmarking discipline (Dehghani et al. 2022, "The Efficiency Misnomer", §4: state
batch size, sequence length, hardware and threads): fixed input shapes, ``warmup`` untimed rounds first, the
median of ``runs`` timed rounds, and several models timed in turn within each round (:func:`median_seconds`) so a
shared machine's changing load affects them alike. Wall-clock numbers vary from run to run: they belong in a
``*-timing.json`` file (``cache: false``), never in the cached quality metrics.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin")


def median_seconds(calls: Mapping[str, Callable[[], object]], warmup: int, runs: int) -> dict[str, float]:
    """Median wall seconds of each call over ``runs`` rounds, after ``warmup`` untimed rounds; within a round the
    calls run in turn, in the mapping's order.

    Raises:
        ValueError: ``runs`` < 1 or ``warmup`` < 0.
    """
    if runs < 1 or warmup < 0:
        raise ValueError(f"runs: expected >= 1 and warmup >= 0, got runs={runs}, warmup={warmup}")
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for round_index in range(warmup + runs):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if round_index >= warmup:
                seconds[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in seconds.items()}


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``(fn(), wall seconds, process CPU seconds)`` (for timing files only). On a shared machine the CPU
    seconds divided by the thread count estimate the wall time on idle cores."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


# ------------------------------------------------------------------------------------- fine-tuned models
@dataclass(frozen=True)
class Speed:
    """``latency_ms``: median ms per example at batch 1; ``throughput``: median examples/s at ``batch_size``;
    ``device``: where it was timed (``cpu``, ``cuda:0``)."""

    latency_ms: float
    throughput: float
    batch_size: int
    seq_length: int
    threads: int
    device: str = "cpu"


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


def measure_speed(
    model: torch.nn.Module,
    tokenizer: Any,
    texts: Sequence[str],
    runtime: Any,
    seq_length: int = 128,
    latency_examples: int = 16,
    batch_size: int = 32,
    warmup: int = 2,
    runs: int = 5,
    threads: int = 1,
) -> Speed:
    """Latency (ms/example, batch 1, over the first ``latency_examples`` texts) and throughput (examples/s,
    one batch of ``batch_size`` texts), each the median of ``runs`` timed rounds after ``warmup`` untimed ones.

    ``texts`` are recycled when there are fewer than needed; ``seq_length`` is capped at the model's
    ``max_position_embeddings`` (the figure records the length used). Runs on ``runtime``'s device (fp32, no
    autocast) with ``threads`` intra-op threads (restored afterwards).

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
    model = runtime.place(model)
    single = [runtime.to_device(b) for b in _batches(tokenizer, pool[:latency_examples], 1, seq_length)]
    full = [runtime.to_device(b) for b in _batches(tokenizer, pool[:batch_size], batch_size, seq_length)]
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)

    def synced(call: Callable[[], object]) -> Callable[[], None]:
        return lambda: (call(), runtime.synchronize())

    try:
        with torch.inference_mode():
            median = median_seconds({"latency": synced(lambda: [model(**b) for b in single]),
                                     "throughput": synced(lambda: model(**full[0]))}, warmup, runs)
    finally:
        torch.set_num_threads(old_threads)
    return Speed(latency_ms=1000 * median["latency"] / len(single), throughput=batch_size / median["throughput"],
                 batch_size=batch_size, seq_length=seq_length, threads=threads, device=str(runtime.device))


# --------------------------------------------------------------------------------------- encoders
@torch.inference_mode()
def measure_throughput(
    models: Mapping[str, nn.Module],
    runtime: Any,
    *,
    batch_size: int = 32,
    seq_len: int = 128,
    warmup: int = 2,
    runs: int = 5,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """Inference throughput of several encoders' forward passes on ``runtime``'s device, fp32 (pass
    ``model.base_model`` to time the encoder that downstream tasks use, without the pre-training heads).

    Runs ``model(input_ids, attention_mask, token_type_ids)`` (no token types for a model with fewer than two)
    on one fixed random batch ``(batch_size, seq_len)`` of int64 ids (full attention), in eval mode, timed with :func:`median_seconds`. The models are moved to the
    device (and stay there); their train/eval modes are restored.

    Returns:
        Per name ``{"sequences_per_second": batch_size / median seconds, "median_seconds", "runs", "batch_size",
        "seq_len", "device"}`` (wall-clock: write only to ``*-timing.json``).

    Raises:
        ValueError: ``runs`` < 1 or ``warmup`` < 0.
    """
    modes = {name: m.training for name, m in models.items()}
    gen = torch.Generator().manual_seed(seed)
    vocab = min(m.config.vocab_size for m in models.values())
    input_ids = torch.randint(1000 if vocab > 2000 else 1, vocab, (batch_size, seq_len), generator=gen)
    batch = runtime.to_device({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                               "token_type_ids": torch.zeros_like(input_ids)})
    # token types only for models that have them (RoBERTa one, ModernBERT and DeBERTa-v3 none)
    inputs = {name: batch if getattr(m.config, "type_vocab_size", 0) >= 2 else
              {k: v for k, v in batch.items() if k != "token_type_ids"} for name, m in models.items()}
    for m in models.values():
        runtime.place(m)
    try:
        median = median_seconds({name: (lambda m=m, b=inputs[name]: (m(**b), runtime.synchronize()))
                                 for name, m in models.items()}, warmup, runs)
    finally:
        for name, m in models.items():
            m.train(modes[name])
    return {name: {"sequences_per_second": batch_size / median[name], "median_seconds": median[name], "runs": runs,
                   "batch_size": batch_size, "seq_len": seq_len, "device": str(runtime.device)} for name in models}


# ------------------------------------------------------------------------------------------- peak
# A CPU peak measured while other processes used more than this share of the machine's CPUs is not the usual figure.
BUSY_SHARE = 0.25


def _busy_cpu_seconds() -> float | None:
    """CPU seconds every process on the machine has used since boot (``/proc/stat``), None where unreadable."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
    except (OSError, ValueError, IndexError):
        return None


class OtherProcesses:
    """Context manager: the share of the machine's CPU time that *other* processes used while the block ran
    (``share``, 0..1, set on exit; None where ``/proc/stat`` is unreadable). 0.5 on 2 cores: one core's worth of
    other work, which halves what a 2-thread measurement gets."""

    share: float | None = None

    def __enter__(self) -> OtherProcesses:
        self._t0, self._cpu0, self._busy0 = time.perf_counter(), time.process_time(), _busy_cpu_seconds()
        return self

    def __exit__(self, *exc: object) -> None:
        wall, ours, busy = time.perf_counter() - self._t0, time.process_time() - self._cpu0, _busy_cpu_seconds()
        if busy is None or self._busy0 is None or wall <= 0:
            self.share = None
            return
        others = max(0.0, busy - self._busy0 - ours)
        self.share = round(min(others / (wall * (os.cpu_count() or 1)), 1.0), 3)


@dataclass(frozen=True)
class MatmulPeak:
    """A measured matmul peak (``flops``, FLOP/s) and how much of the machine other processes used meanwhile
    (``other_share``: :class:`OtherProcesses`; None where unknown)."""

    flops: float
    other_share: float | None

    @property
    def warning(self) -> str | None:
        """One line when other processes used more than :data:`BUSY_SHARE` of the CPUs while the peak was
        measured (an MFU against it says nothing about the code), else None."""
        if self.other_share is None or self.other_share <= BUSY_SHARE:
            return None
        return (f"other processes used {100 * self.other_share:.0f}% of the {os.cpu_count()} CPUs while the matmul "
                f"peak ({self.flops / 1e12:.4f} TFLOP/s) was measured, so it is below this machine's usual figure "
                f"(about {1 / max(1.0 - self.other_share, 1e-3):.1f}x) and the MFU is not comparable; measure on an "
                "idle machine")


def measure_matmul_peak(device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                        size: int = 1024, seconds: float = 1.0) -> MatmulPeak:
    """Measured peak matmul throughput of ``size x size`` products in ``dtype`` on ``device`` (FLOP/s), with the
    share of the CPUs other processes used meanwhile (:class:`MatmulPeak`).

    The denominator of model FLOPs utilisation (MFU, Chowdhery et al. 2022, Appendix B) on machines whose
    datasheet peak is unknown or unreachable (CPUs). A CPU peak is what the cores gave while it ran: on a busy
    2-core machine 0.021 against 0.15 TFLOP/s idle, which ``other_share`` tells apart.
    """
    device = torch.device(device)
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    for _ in range(3):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    with OtherProcesses() as others:
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a @ b
            n += 1
            if device.type == "cuda" and n % 10 == 0:
                torch.cuda.synchronize()
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    return MatmulPeak(2.0 * size**3 * n / wall, others.share if device.type == "cpu" else None)
