"""The one runtime every stage that trains or infers uses: device, precision, autocast, loss scaling, and DDP/FSDP
through ``accelerate``.

A :class:`Runtime` is made once per stage (:func:`make_runtime`) from the stage's ``precision`` key and handed to the
library: the pre-training/distillation loop (:mod:`bert_pipeline.train.loop`), fine-tuning and task distillation
(:func:`bert_pipeline.train.finetune_loop.fit`), teacher logits, retrieval's contrastive fine-tuning, the budget
curve, the variants, export's parity run and the speed measurements. No other module picks a device or a precision.

Precision (``auto | fp32 | bf16 | fp16``; :func:`resolve_precision`): ``auto`` is bf16 autocast where the device runs
bf16 natively (CUDA GPUs with native bf16, Ampere and later; CPUs with AVX512-BF16 or AMX where a bf16 matmul is
measured faster than an fp32 one: :func:`cpu_has_fast_bf16`), fp16 autocast with loss
scaling on CUDA GPUs without native bf16 (V100, T4: there ``torch.cuda.is_bf16_supported()`` says yes by emulation,
which is slower than fp32; fp32 under FSDP, which refuses fp16), else fp32. fp32 on a CUDA GPU uses TF32 matmuls (10-bit mantissa inputs, fp32
accumulation; the PyTorch default for convolutions, off for matmuls) unless the caller needs exact fp32 (export
parity).

Loss scaling (Micikevicius et al. 2018, "Mixed Precision Training", §3.2): under fp16 the loss is multiplied by a
scale before backward; :meth:`Runtime.step` unscales the gradients, clips them, and lets ``torch.amp.GradScaler``
decide: a step with a non-finite gradient is skipped and the scale halved, else applied (the scale doubles after
2000 clean steps). A skipped step is the scaler's decision, counted from the scale (:attr:`StepOutcome.applied`),
never an error while the scale stays at or above :data:`MIN_LOSS_SCALE`. Each training run starts with a fresh scaler
(:meth:`Runtime.new_scaler`). Without a scaler (fp32, bf16) a step with a non-finite loss or gradient is skipped by
the caller's rule.

Training forwards on a CPU (:meth:`Runtime.train_forward`): dropout draws its mask from 15-bit random integers
(:func:`cpu_dropout`) instead of PyTorch's ``bernoulli_``, whose CPU kernel draws a float per element and took 23% of
a MiniLM fine-tuning step (B=32, 128 tokens, bf16, AVX512-BF16 EPYC; docs/performance.md, section 11), and attention
runs the eager path, where that dropout applies (SDPA's CPU kernel draws its own ``bernoulli_`` mask). A MiniLM QA
step took 1.11 s instead of 1.65 there, the whole QA fine-tuning 908 s instead of 1060. Evaluation and inference
never see either: they run without dropout and keep SDPA.

Accelerate (``accelerate.Accelerator``) owns process groups, device placement, DDP/FSDP wrapping (model and optimizer
prepared together, as FSDP2 requires), gradient clipping of sharded gradients, ``no_sync`` and collectives. The
runtime gives accelerate ``mixed_precision="no"`` and applies autocast itself, so a prepared model's ``forward`` is
never patched and every stage's autocast is the same context.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
MIN_LOSS_SCALE = 1.0
"""Below this fp16 loss scale the gradients are non-finite even unscaled: the run diverged (not an fp16 overflow)."""


DROPOUT_BITS = 15
"""Random bits per element of :func:`cpu_dropout`'s mask: the drop probability is ``p`` rounded to a multiple of
2**-15 (0.1 is 0.100006)."""


def cpu_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    """Inverted dropout (Srivastava et al. 2014; kept values scaled by ``1 / (1 - p)``), the signature of
    ``torch.nn.functional.dropout``, with a mask of :data:`DROPOUT_BITS`-bit integers from the global torch
    generator (seeded runs repeat it). One 32-bit draw gives two elements' bits, about 10x cheaper on a CPU than
    ``bernoulli_``'s float per element. ``inplace`` is accepted and ignored (a new tensor is returned, as callers
    use the return value).

    Args:
        input: any shape and floating dtype; returned unchanged when ``training`` is false or ``p`` is 0.
        p: the drop probability, in [0, 1).
    Returns:
        A tensor of ``input``'s shape and dtype.
    Raises:
        ValueError: ``p`` outside [0, 1).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability has to be in [0, 1), got {p}")
    if not training or p == 0.0:
        return input
    count = input.numel()
    bits = torch.empty((count + 1) // 2, dtype=torch.int32, device=input.device).random_()
    # int32 random_ draws from [0, 2**31): both 16-bit halves are uniform on their low 15 bits
    halves = bits.view(torch.int16)[:count].view(input.shape) & (2**DROPOUT_BITS - 1)
    keep = halves >= round(p * 2**DROPOUT_BITS)
    return torch.where(keep, input * (1.0 / (1.0 - p)), 0.0)


class RuntimeSettingError(ValueError):
    """A precision or device setting that cannot work (``str(err)`` is one line naming ``precision``)."""


# ------------------------------------------------------------------------------------------------ precision
def matmul_seconds(dtype: torch.dtype, size: int = 1024, repeats: int = 5) -> float:
    """The best of ``repeats`` timed ``size x size`` CPU matmuls in ``dtype`` (seconds, after two untimed ones)."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return best


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 matmuls on this CPU's own instructions (AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


PRECISION_CACHE_ENV = "BERT_PIPELINE_PRECISION_CACHE"
"""Where :func:`cpu_has_fast_bf16` keeps each machine's decided answer (default
``~/.cache/bert-pipeline/precision-auto.json``); delete the file to measure again."""
DECISIVE_RATIO = 1.5
"""A bf16/fp32 matmul time ratio beyond this either way decides for the machine; closer is left undecided (a
loaded machine: both products slowed, their ratio pulled towards 1) and measured again by the next process."""


def precision_cache_path() -> Path:
    """``$BERT_PIPELINE_PRECISION_CACHE`` or ``~/.cache/bert-pipeline/precision-auto.json``."""
    env = os.environ.get(PRECISION_CACHE_ENV)
    return Path(env) if env else Path.home() / ".cache" / "bert-pipeline" / "precision-auto.json"


def machine_key() -> str:
    """This CPU's model name, flags and the torch version: what the bf16/fp32 speed ratio depends on."""
    model, flags = "unknown CPU", ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif name.strip() == "flags" and not flags:
                flags = hashlib.sha256(value.strip().encode()).hexdigest()[:12]
    return f"{model} | flags {flags} | torch {torch.__version__}"


def _decided() -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(precision_cache_path().read_text())
    return {}


def _remember(key: str, answer: dict[str, Any]) -> None:
    """Add this machine's decision to the cache file (atomically; a read-only home only costs the next measure)."""
    path = precision_cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**_decided(), key: answer}, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:
        log.debug("precision auto: could not record the decision in %s: %s", path, exc)


@functools.lru_cache(maxsize=1)
def cpu_has_fast_bf16() -> bool:
    """Whether bf16 pays on this CPU: oneDNN runs bf16 matmuls natively (AVX512-BF16 or AMX; without them bf16
    autocast is emulated, measured 7x slower than fp32 on an AVX2 EPYC for a BERT-mini layer) and a 1024 x 1024
    product is faster in bf16 than in fp32 (:func:`matmul_seconds`, measured once per process; about 0.1 s).
    Native support alone does not say it: on a 2-core Xeon with AVX512-BF16 and no AMX the products ran at 0.168
    TFLOP/s in bf16 against 0.320 in fp32, and MiniLM's fine-tuning step took 1.4x as long in bf16, while on an
    AVX512-BF16 EPYC bf16 ran 2.5x faster than fp32 (docs/performance.md). The margin either way is 2x or more on an
    idle machine, but a loaded one slows both products and pulls their ratio towards 1 (a smoke run beside other
    jobs measured 23.5 ms bf16 against 22.5 fp32 in one stage and chose fp32 there, bf16 in the others). So the
    first decisive answer (ratio beyond :data:`DECISIVE_RATIO`) is recorded per machine (:func:`machine_key`) in
    :func:`precision_cache_path` and every later stage and run on the machine takes it: the same precision, the same
    numbers, whatever the load."""
    if not cpu_has_native_bf16():
        return False
    key = machine_key()
    known = _decided().get(key)
    if isinstance(known, dict) and isinstance(known.get("bf16"), bool):
        log.info("bf16 on this CPU: precision auto is %s, as measured here before (%s; delete it to measure again)",
                 "bf16" if known["bf16"] else "fp32", precision_cache_path())
        return known["bf16"]
    bf16, fp32 = matmul_seconds(torch.bfloat16), matmul_seconds(torch.float32)
    fast = bf16 < fp32
    decisive = max(bf16, fp32) > DECISIVE_RATIO * min(bf16, fp32)
    log.info("bf16 on this CPU: a 1024x1024 matmul takes %.1f ms in bf16, %.1f ms in fp32: precision auto is %s%s",
             1e3 * bf16, 1e3 * fp32, "bf16" if fast else "fp32",
             f" (recorded for this machine in {precision_cache_path()})" if decisive
             else " (too close to decide for the machine: measured again by the next stage)")
    if decisive:
        _remember(key, {"bf16": fast, "bf16_ms": round(1e3 * bf16, 2), "fp32_ms": round(1e3 * fp32, 2)})
    return fast


def cuda_has_native_bf16() -> bool:
    """Whether the current CUDA device computes in bf16 natively (compute capability 8.0+). PyTorch's
    ``is_bf16_supported()`` also says yes where bf16 is only emulated (V100, T4), which is slower than fp32."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # a torch without the argument: the capability is what decides
        return torch.cuda.get_device_capability()[0] >= 8


def resolve_precision(precision: str, device_type: str) -> str:
    """``fp32``, ``bf16`` or ``fp16`` for ``precision`` in ``auto | fp32 | bf16 | fp16`` on ``device_type``
    (``cpu`` or ``cuda``); see the module docstring for ``auto``.

    Raises:
        RuntimeSettingError: an unknown ``precision``.
    """
    if precision not in PRECISIONS:
        raise RuntimeSettingError(f"precision: expected auto, fp32, bf16 or fp16, got {precision!r}")
    if precision != "auto":
        return precision
    if device_type == "cuda":
        return "bf16" if cuda_has_native_bf16() else "fp16"
    return "bf16" if cpu_has_fast_bf16() else "fp32"


# ------------------------------------------------------------------------------------------------ runtime
@dataclass(frozen=True)
class StepOutcome:
    """One optimizer step: ``applied`` (False: skipped, by the loss scaler or for a non-finite gradient) and the
    global gradient norm before clipping (``grad_norm``, float; ``inf``/``nan`` when non-finite)."""

    applied: bool
    grad_norm: float


class Runtime:
    """Device, resolved precision, autocast, loss scaler and the ``accelerate.Accelerator`` of one stage.

    Attributes:
        accelerator: the process group, device placement and DDP/FSDP wrapping.
        device: ``torch.device`` every tensor of this process goes to.
        precision: ``fp32``, ``bf16`` or ``fp16`` (resolved).
        scaler: a ``torch.amp.GradScaler`` under fp16 (:meth:`new_scaler`), else None.
        loss_scale_init: the initial fp16 loss scale of :meth:`new_scaler` (2**16; tests raise it to force
            overflows).

    Raises:
        RuntimeSettingError: an unknown precision, or fp16 under FSDP.
    """

    def __init__(self, accelerator: Any, precision: str, *, tf32: bool = True):
        self.accelerator = accelerator
        self.device: torch.device = accelerator.device
        self.precision = resolve_precision(precision, self.device.type)
        if precision == "auto" and self.precision == "fp16" and self.distributed_type == "FSDP":
            self.precision = "fp32"  # auto never picks what FSDP refuses: a GPU without native bf16 trains in fp32
        if self.precision == "fp16" and self.distributed_type == "FSDP":
            raise RuntimeSettingError("precision: fp16 under FSDP is not supported (the loss scaler checks each "
                                      "shard's gradients apart); use bf16 (native on GPUs that FSDP targets) or DDP")
        if self.precision == "fp16" and self.device.type == "cpu":
            log.warning("precision fp16 on a CPU: autocast is emulated there and slower than fp32 (auto picks bf16 "
                        "or fp32 on CPUs)")
        self.loss_scale_init = 2.0**16  # torch's default initial scale (tests raise it to force overflows)
        self.scaler: torch.amp.GradScaler | None = None
        self.new_scaler()
        if self.device.type == "cuda":
            # TF32 for fp32 matmuls (module docstring); bf16/fp16 autocast does not read the flag
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32

    # ---------------------------------------------------------------------------------------- facts
    @property
    def num_processes(self) -> int:
        return self.accelerator.num_processes

    @property
    def process_index(self) -> int:
        return self.accelerator.process_index

    @property
    def is_main_process(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def distributed_type(self) -> str:
        """accelerate's ``NO``, ``MULTI_GPU``, ``MULTI_CPU``, ``FSDP``, ... as a string."""
        return str(getattr(self.accelerator.distributed_type, "value", self.accelerator.distributed_type))

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The autocast dtype (``torch.bfloat16`` / ``torch.float16``), None under fp32."""
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the matmuls run in (the matmul peak of MFU is measured in it)."""
        return self.autocast_dtype or torch.float32

    # ---------------------------------------------------------------------------------------- compute
    def autocast(self) -> contextlib.AbstractContextManager:
        """The autocast context of this precision (a no-op under fp32)."""
        dtype = self.autocast_dtype
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=dtype)

    @contextlib.contextmanager
    def train_forward(self, model: nn.Module):
        """The context of a training forward: :meth:`autocast`, and on a CPU :func:`cpu_dropout` for
        ``torch.nn.functional.dropout`` (what ``nn.Dropout`` and the eager attention paths call) with the model's
        SDPA attention switched to eager (module docstring); a model in eval mode gets autocast only. Both are
        restored on exit, so evaluation inside a training run, inference and the saved config are unchanged. Only the
        model's own ``config`` is switched: a wrapper without one (pre-training's ``MaskedPositionPretrainer``, the
        distillation pair) keeps SDPA and gets the cheaper dropout outside attention."""
        if self.device.type != "cpu" or not model.training:
            with self.autocast():
                yield
            return
        config = getattr(self.unwrap(model), "config", None)
        attention = getattr(config, "_attn_implementation", None)
        original = torch.nn.functional.dropout
        torch.nn.functional.dropout = cpu_dropout
        if attention == "sdpa":
            config._attn_implementation = "eager"
        try:
            with self.autocast():
                yield
        finally:
            torch.nn.functional.dropout = original
            if attention == "sdpa":
                config._attn_implementation = attention

    def loader_options(self) -> dict[str, Any]:
        """``torch.utils.data.DataLoader`` keyword arguments: pinned host memory on a GPU, so that
        :meth:`to_device`'s ``non_blocking`` copies overlap with compute."""
        return {"pin_memory": self.device.type == "cuda"}

    def to_device(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``batch``'s tensors on :attr:`device`; on a GPU copied asynchronously from pinned host memory (a
        pageable tensor is pinned first), so the host does not wait for the device's queue."""
        if self.device.type != "cuda":
            return {key: value.to(self.device) for key, value in batch.items()}
        return {key: (value if value.is_pinned() else value.pin_memory()).to(self.device, non_blocking=True)
                for key, value in batch.items()}

    def tensor(self, values: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """A 1-d tensor of host ``values`` on :attr:`device`, copied without waiting for the device's queue (a
        plain ``torch.tensor(..., device="cuda")`` waits)."""
        return self.to_device({"values": torch.tensor(values, dtype=dtype)})["values"]

    def place(self, model: nn.Module) -> nn.Module:
        """``model`` on :attr:`device` in eval mode (inference: teacher logits, evaluation, speed, parity)."""
        return model.to(self.device).eval()

    def synchronize(self) -> None:
        """Wait for queued device work (around wall-clock timings on a GPU)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    # ---------------------------------------------------------------------------------------- training
    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[nn.Module, Any]:
        """Model and optimizer prepared together (device placement; DDP or FSDP wrapping, whose FSDP2 swaps the
        optimizer's parameters for the sharded ones). The optimizer must be built on ``model``'s own parameters.
        Returns ``(prepared model, prepared optimizer)``."""
        if self.distributed_type == "NO":  # nothing to wrap; accelerate would keep a reference to every model
            return model.to(self.device), optimizer
        return self.accelerator.prepare(model, optimizer)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The module under any DDP/FSDP/compile wrapper."""
        return self.accelerator.unwrap_model(model)

    def new_scaler(self) -> None:
        """A fresh fp16 loss scaler (at :attr:`loss_scale_init`) for a new training run: every run that trains
        calls it first, so a run does not start at the scale where the previous one (another seed, another grid
        setting) ended; a resumed run then loads its checkpoint's scaler state. None outside fp16."""
        self.scaler = (torch.amp.GradScaler(self.device.type, init_scale=self.loss_scale_init)
                       if self.precision == "fp16" else None)

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of ``loss`` (scaled under fp16)."""
        self.accelerator.backward(self.scaler.scale(loss) if self.scaler is not None else loss)

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        """Accumulate gradients without the DDP all-reduce (every micro-batch but an optimizer step's last)."""
        return self.accelerator.no_sync(model)

    def step(self, model: nn.Module, optimizer: Any, max_grad_norm: float,
             finite: torch.Tensor | bool = True) -> StepOutcome:
        """Unscale (fp16), clip the global gradient norm to ``max_grad_norm`` and step ``optimizer`` (prepared by
        :meth:`prepare`); the caller zeroes the gradients.

        Under a scaler the scaler decides (a non-finite gradient skips the step and halves the scale). Without
        one, the step is skipped when ``finite`` (a bool or 0-d bool tensor: the caller's losses were finite) is
        false or the gradient norm is not finite, on every process alike. One host-device synchronisation of ours
        (the scaler's ``step`` reads its overflow flag once more).

        Raises:
            RuntimeSettingError: the fp16 loss scale fell below :data:`MIN_LOSS_SCALE` (non-finite gradients even
                unscaled: lower the learning rate or use bf16/fp32).
        """
        raw = getattr(optimizer, "optimizer", optimizer)
        if self.scaler is not None:
            self.scaler.unscale_(raw)
        if self.distributed_type == "NO":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        else:  # the global norm of DDP's reduced or FSDP's sharded gradients
            norm = self.accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
        if hasattr(norm, "full_tensor"):  # FSDP2: a replicated DTensor; collectives and tolist need the plain one
            norm = norm.full_tensor()
        norm = torch.as_tensor(norm, device=self.device, dtype=torch.float32)
        # The scaler skips exactly when an unscaled gradient is inf/nan, which makes the global norm non-finite: the
        # norm's finiteness is its decision, read in the same synchronisation as the norm.
        ok = torch.isfinite(norm)
        if isinstance(finite, torch.Tensor):
            ok = ok & finite.to(self.device)
        elif not finite:
            ok = torch.zeros_like(ok)
        if self.num_processes > 1 and self.scaler is None:  # DDP/FSDP norms are global: this is a safety net
            ok = self.accelerator.reduce(ok.to(torch.float32), reduction="sum") == self.num_processes
        grad_norm, applied = torch.stack([norm, ok.to(torch.float32)]).tolist()  # the one synchronisation of ours
        if self.scaler is not None:
            self.scaler.step(raw)  # skips the update itself on an overflow (torch reads its flag once more)
            self.scaler.update()
            if not applied and self.scaler.get_scale() < MIN_LOSS_SCALE:
                raise RuntimeSettingError(f"precision: the fp16 loss scale fell to {self.scaler.get_scale():g}: the "
                                          "gradients are non-finite even unscaled; lower the learning rate or use bf16 "
                                          "or fp32")
        elif applied:
            optimizer.step()
        return StepOutcome(applied=bool(applied), grad_norm=grad_norm)

    def reduce_sum(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the processes (itself with one process)."""
        return self.accelerator.reduce(value, reduction="sum") if self.num_processes > 1 else value


def _reset_accelerate_state() -> None:
    """Forget accelerate's process-wide singletons, so a process not started by a launcher can build several
    runtimes (tests, benchmarks, stages that train several models)."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    PartialState._reset_state()


def make_runtime(precision: str, cpu: bool | None = None, *, tf32: bool = True) -> Runtime:
    """The runtime of a stage: CUDA when visible (``cpu=None``) else the CPU, ``precision`` resolved on it
    (:func:`resolve_precision`), the accelerate process group of ``accelerate launch`` / ``torchrun`` when launched
    so. ``tf32=False`` keeps fp32 matmuls exact on a GPU (parity checks).

    Raises:
        RuntimeSettingError: an unknown precision, or fp16 under FSDP.
    """
    from accelerate import Accelerator

    if cpu is None:
        cpu = not torch.cuda.is_available()
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        _reset_accelerate_state()
    return Runtime(Accelerator(mixed_precision="no", cpu=cpu), precision, tf32=tf32)
