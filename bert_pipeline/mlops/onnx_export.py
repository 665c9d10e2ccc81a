"""ONNX export of a fine-tuned folder, and the checks that the exported graph serves what PyTorch serves.

:func:`export_folder` turns a ``save_pretrained`` folder with a sentence classification, token classification or
extractive QA head (loaded through :func:`bert_pipeline.evaluation.predictor.load_predictor`, so the
``AutoModelFor*`` class its config names, mean pooling included) into a folder that runs without PyTorch:
``model.onnx`` (batch and sequence axes dynamic), ``config.json`` and the tokenizer files, and
``onnx_export.json`` (opset, exporter, input and output names, the parity figures). Before the folder is in place
the exported graph is checked on the caller's inputs (:func:`check_parity`): the largest absolute logit difference
between ONNX Runtime and PyTorch per output, over real (unpadded) positions, and the share of equal predictions:
the arg-max label (sentence classification), the per-token arg-max (NER), the decoded answer text (QA).

Inputs are encoded as fine-tuning scores the test split (:mod:`bert_pipeline.model.heads`: NER and QA windows of
``max_length`` tokens overlapping by ``doc_stride``), and both backends' QA logits go through the one n-best
decoder, :func:`bert_pipeline.tasks.qa.decode_qa`, that scores the test split and serves ``predict``. The
answer decoded from ONNX logits is what is compared, not the logits alone: the QA exports users report as
"wrong answers" (onnxruntime#14153) exported the bare encoder (``last_hidden_state``) and arg-maxed it, which an
output check would pass. Here the outputs must be the head's (``logits`` or ``start_logits``/``end_logits``, of
the head's rank), and the decoded spans must match.

:func:`compare_latency` times ONNX Runtime against PyTorch at batch 1 on the same windows with
:func:`bert_pipeline.evaluation.speed.median_seconds` (both on CPU with the same intra-op thread count).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.predictor import Predictor, load_predictor
from bert_pipeline.evaluation.speed import median_seconds
from bert_pipeline.io import atomic_dir, sha256_file, write_json
from bert_pipeline.tasks.base import INPUT_KEYS as MODEL_INPUTS
from bert_pipeline.tasks.base import EncodedInputs, TaskKind, max_length
from bert_pipeline.train.runtime import Runtime, make_runtime

log = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
FACTS_FILE = "onnx_export.json"
# What makes the folder usable alone: the config (labels, sizes) and the tokenizer files a save_pretrained
# folder may hold; weights stay behind (they are in model.onnx).
COPIED_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                "added_tokens.json")
EXPORTERS = ("torchscript", "dynamo")
INPUT_AXES = {0: "batch", 1: "sequence"}
# Two example inputs of different lengths, so the traced graph sees a padded batch (batch and sequence > 1: the
# torch.export exporter specialises a dimension of size 1).
EXAMPLE_TEXTS = ("an example sentence for tracing the graph", "short")


# -------------------------------------------------------------------------------------------------- export
def input_names(pred: Predictor) -> list[str]:
    """The model inputs the folder's tokenizer produces and the model's ``forward`` takes, in
    :data:`~bert_pipeline.tasks.base.INPUT_KEYS` order (a tokenizer without ``token_type_ids`` gives a
    graph without them, as PyTorch then runs with its default zeros)."""
    params = inspect.signature(pred.model.forward).parameters
    produced = set(pred.tokenizer.model_input_names)
    return [name for name in MODEL_INPUTS if name in produced and name in params]


@contextlib.contextmanager
def _known_export_noise():
    """Silence the exporters' known, explained messages and nothing else.

    The TorchScript exporter is used on purpose (:func:`export_onnx`), hence its deprecation notices (its own and
    one its internals raise about their logging setup). Its tracer
    warns where transformers' mask code turns shape comparisons into Python booleans (``padding_length > 0``,
    ``is_causal``): for an encoder's padding mask those are the same for every input shape, and
    :func:`check_parity` on padded batches of other lengths is what shows the graph is right. ``aten::index``
    warns about negative indices, which these graphs never index with. The torch.export exporter prints its
    progress on stdout, which is the CLI's output: it goes to stderr.
    """
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.filterwarnings("ignore", message=r"You are using the legacy TorchScript-based ONNX export")
        warnings.filterwarnings("ignore", message=r"The feature will be removed. Please remove usage of this function",
                                category=DeprecationWarning)
        warnings.filterwarnings("ignore", message=r"Converting a tensor to a Python boolean might cause the trace")
        warnings.filterwarnings("ignore", message=r"Exporting aten::index operator of advanced indexing")
        yield


def export_onnx(pred: Predictor, path: Path, cpu_runtime: Runtime, *, opset: int,
                exporter: str = "torchscript") -> list[str]:
    """Write ``pred.model`` (float32, eval mode, placed on ``cpu_runtime``: the graph is traced on the CPU, where ONNX
    Runtime will run it) to ``path`` as ONNX with dynamic batch and sequence axes.

    ``exporter``: ``torchscript`` (``torch.onnx.export(dynamo=False)`` with ``dynamic_axes``) or ``dynamo``
    (torch.export). The default is TorchScript: on these models both give graphs whose logits match PyTorch to
    ~1e-7 and byte-identical files on re-export, but the torch.export path took ~11 s per 2-layer tiny model
    against ~0.5 s (2-core CPU, torch 2.13), prints its progress on stdout and writes files 2.6x larger; it stays
    selectable for when the TorchScript exporter is removed from torch.

    Returns:
        the output names (the head's: :attr:`bert_pipeline.tasks.base.TaskKind.onnx_outputs`).
    Raises:
        PipelineError: unknown exporter, or the export failed (its first line).
    """
    if exporter not in EXPORTERS:
        raise PipelineError(f"exporter {exporter!r}: expected one of {', '.join(EXPORTERS)}")
    names = input_names(pred)
    outputs = list(pred.task.onnx_outputs)
    model = cpu_runtime.place(pred.model.float())
    example = pred.tokenizer(list(EXAMPLE_TEXTS), padding=True, return_tensors="pt")
    kwargs = {name: example[name] for name in names}
    axes = {name: INPUT_AXES for name in names} | {name: pred.task.onnx_output_axes for name in outputs}
    extra: dict[str, Any] = {"dynamic_axes": axes} if exporter == "torchscript" else {
        "dynamic_shapes": {name: {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence")} for name in names},
        "external_data": False}
    try:
        with _known_export_noise(), torch.no_grad():
            torch.onnx.export(model, (), str(path), kwargs=kwargs, input_names=names, output_names=outputs,
                              opset_version=opset, dynamo=exporter == "dynamo", **extra)
    except Exception as exc:  # the exporters raise many types; the message is what a user can act on
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PipelineError(f"{pred.model_dir}: ONNX export ({exporter}, opset {opset}) failed: {first}") from None
    return outputs


def onnx_session(path: Path, threads: int = 1):
    """An ONNX Runtime CPU session for ``path`` with ``threads`` intra-op threads (one inter-op thread), warnings
    and below not logged.

    Raises:
        PipelineError: the file is not a loadable ONNX model.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types (Fail, InvalidGraph, ...)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PipelineError(f"{path}: not a loadable ONNX model ({first})") from None


def check_outputs(session, kind: TaskKind, path: Path) -> None:
    """Refuse a graph whose outputs are not the ``kind`` head's: its output names and rank 2 (``(batch, labels)``,
    ``(batch, sequence)`` for QA) or 3 (``(batch, sequence, labels)`` for NER). An export of the bare encoder
    (``last_hidden_state``, rank 3) is how QA exports gave wrong answers in onnxruntime#14153.

    Raises:
        PipelineError: names or ranks differ.
    """
    got = [(o.name, len(o.shape)) for o in session.get_outputs()]
    want = [(name, kind.onnx_output_rank) for name in kind.onnx_outputs]
    if got != want:
        raise PipelineError(f"{path}: outputs {got} (name, rank); a {kind.head} head gives {want}")


# ------------------------------------------------------------------------------------------------ encoding
Encoded = EncodedInputs
"""Check inputs as model windows (the task kind's :meth:`~bert_pipeline.tasks.base.TaskKind.encode_inputs`)."""


def encode_examples(pred: Predictor, examples: Sequence[Mapping[str, Any]], max_seq_length: int,
                    doc_stride: int | None = None) -> Encoded:
    """Encode ``examples`` (mappings with the task data contract's columns: ``text`` (and ``text_pair`` for a
    sentence-pair classifier, encoded as a pair); ``tokens``, a list of words; ``question`` and ``context``) the way fine-tuning's evaluator encodes the test split: one window of at most
    ``max_seq_length`` tokens per text (capped at the model's ``max_position_embeddings``); NER and QA inputs
    longer than that in windows overlapping by ``doc_stride`` tokens.

    Raises:
        PipelineError: no examples, an example without the head's columns, or windows that leave no room.
    """
    columns = pred.task.input_columns
    if not examples:
        raise PipelineError(f"{pred.model_dir}: no check inputs (a {pred.kind} model reads {', '.join(columns)})")
    for i, ex in enumerate(examples):
        missing = [c for c in columns if c not in ex]
        if missing:
            raise PipelineError(f"check input {i}: a {pred.kind} model reads {', '.join(columns)}; "
                                f"{', '.join(missing)} missing (got {', '.join(sorted(ex)) or 'nothing'})")
    tok, length = pred.tokenizer, max_length(pred, max_seq_length)
    names = input_names(pred)
    stride = 128 if doc_stride is None else doc_stride
    try:
        return pred.task.encode_inputs(tok, examples, names, length, stride)
    except ValueError as exc:
        raise PipelineError(f"max_seq_length {length}, doc_stride {stride}: {exc}") from None


# ------------------------------------------------------------------------------------------------- running
Forward = Callable[[dict[str, np.ndarray]], list[np.ndarray]]


def torch_forward(pred: Predictor, runtime: Runtime) -> Forward:
    """A batch of int64 arrays ``(batch, seq)`` -> the head's outputs from PyTorch on ``runtime``'s device, fp32
    (float32 numpy, in the kind's ``onnx_outputs`` order). The model is placed on that device."""
    model = runtime.place(pred.model)

    def run(batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            out = model(**runtime.to_device({k: torch.from_numpy(v) for k, v in batch.items()}))
        return [getattr(out, name).float().cpu().numpy() for name in pred.task.onnx_outputs]
    return run


def onnx_forward(session, kind: TaskKind) -> Forward:
    """Like :func:`torch_forward`, from an ONNX Runtime session of a ``kind`` head."""
    names = list(kind.onnx_outputs)
    return lambda batch: session.run(names, batch)


def window_logits(forward: Forward, pred: Predictor, enc: Encoded, batch_size: int) -> dict[str, list[np.ndarray]]:
    """Per output name, per window its logits cut to the window's own length (``(labels,)`` for a sentence;
    ``(tokens, labels)`` or ``(tokens,)`` per window otherwise). Windows run in their order, ``batch_size`` at a
    time, each batch padded to its longest window (so the graph sees several batch sizes and lengths)."""
    names = pred.task.onnx_outputs
    out: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for i in range(0, len(enc.features), batch_size):
        chunk = enc.features[i:i + batch_size]
        padded = pred.tokenizer.pad(chunk, padding=True, return_tensors="np")
        batch = {k: np.asarray(padded[k], dtype=np.int64) for k in chunk[0]}
        for name, logits in zip(names, forward(batch), strict=True):
            for j, feature in enumerate(chunk):
                n = len(feature["input_ids"])
                out[name].append(logits[j] if pred.task.per_example else logits[j, :n])
    return out


def predictions(enc: Encoded, logits: Mapping[str, Sequence[np.ndarray]], n_best: int = 20,
                max_answer_length: int = 30) -> list[Any]:
    """What the head predicts from ``logits`` (:func:`window_logits`): per sentence its arg-max label id; per real
    token of every window its arg-max label id (NER, windows in order); per example the decoded answer text (QA,
    through :func:`~bert_pipeline.tasks.qa.decode_qa`, the decoder of fine-tuning's scoring and ``predict``)."""
    return enc.kind.window_predictions(enc, logits, n_best, max_answer_length)


@dataclass(frozen=True)
class Parity:
    """ONNX Runtime against PyTorch on the same inputs.

    Attributes:
        kind: the head.
        examples: check inputs; ``windows``: model inputs they became (a long NER/QA input is several).
        batch_size: windows per batch (each batch padded to its longest window).
        max_abs_diff: per output name, the largest absolute logit difference over real (unpadded) positions.
        compared: predictions compared: sentences, tokens (NER) or answers (QA); ``agreement``: the share equal.
    """

    kind: str
    examples: int
    windows: int
    batch_size: int
    max_abs_diff: dict[str, float]
    compared: int
    agreement: float

    def as_dict(self) -> dict[str, Any]:
        """The fields as plain JSON values."""
        return asdict(self)


def check_parity(pred: Predictor, session, enc: Encoded, runtime: Runtime, batch_size: int = 8, n_best: int = 20,
                 max_answer_length: int = 30) -> Parity:
    """Run ``enc``'s windows through PyTorch (on ``runtime``'s device, fp32) and the ONNX Runtime ``session`` in the
    same batches; compare logits and :func:`predictions` (QA: ``n_best`` and ``max_answer_length`` as in
    fine-tuning's decoding).

    ``max_abs_diff`` is rounded to 3 significant digits (run-to-run float noise stays out of the metrics file).
    """
    ref = window_logits(torch_forward(pred, runtime), pred, enc, batch_size)
    got = window_logits(onnx_forward(session, pred.task), pred, enc, batch_size)
    diffs = {name: float(f"{max(float(np.max(np.abs(a - b))) for a, b in zip(ref[name], got[name], strict=True)):.3g}")
             for name in ref}
    mine = predictions(enc, ref, n_best, max_answer_length)
    theirs = predictions(enc, got, n_best, max_answer_length)
    equal = sum(a == b for a, b in zip(mine, theirs, strict=True))
    return Parity(pred.kind, enc.examples, len(enc.features), batch_size, diffs, len(mine),
                  round(equal / max(len(mine), 1), 6))


# ------------------------------------------------------------------------------------------------- latency
@dataclass(frozen=True)
class Latency:
    """Median milliseconds per window at batch 1 (unpadded, the first ``examples`` windows), PyTorch and ONNX
    Runtime on CPU with ``threads`` intra-op threads, over ``runs`` timed rounds after ``warmup``; ``speedup`` =
    PyTorch ms / ONNX Runtime ms (2.0: ONNX Runtime twice as fast). Wall-clock: for ``*-timing.json`` only."""

    pytorch_ms: float
    onnxruntime_ms: float
    examples: int
    runs: int
    warmup: int
    threads: int

    @property
    def speedup(self) -> float:
        return self.pytorch_ms / self.onnxruntime_ms if self.onnxruntime_ms > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The fields and ``speedup``, rounded (ms to 3 decimals)."""
        return {"pytorch_ms": round(self.pytorch_ms, 3), "onnxruntime_ms": round(self.onnxruntime_ms, 3),
                "speedup": round(self.speedup, 3), "examples": self.examples, "runs": self.runs,
                "warmup": self.warmup, "threads": self.threads}


def compare_latency(pred: Predictor, onnx_path: Path, enc: Encoded, cpu_runtime: Runtime, *, examples: int = 8,
                    warmup: int = 2, runs: int = 10, threads: int = 1) -> Latency:
    """Time PyTorch (on ``cpu_runtime``, a CPU one: ONNX Runtime runs on the CPU provider) and ONNX Runtime in turn
    within each round (:func:`~bert_pipeline.evaluation.speed.median_seconds`) on the first ``examples`` windows of
    ``enc``, one at a time (batch 1, no padding).

    Raises:
        ValueError: ``runs`` < 1 or ``warmup`` < 0.
    """
    session = onnx_session(onnx_path, threads)
    singles = [{k: np.asarray([v], dtype=np.int64) for k, v in f.items()} for f in enc.features[:max(examples, 1)]]
    run_torch, run_onnx = torch_forward(pred, cpu_runtime), onnx_forward(session, pred.task)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        median = median_seconds({"pytorch": lambda: [run_torch(b) for b in singles],
                                 "onnxruntime": lambda: [run_onnx(b) for b in singles]}, warmup, runs)
    finally:
        torch.set_num_threads(before)
    return Latency(1000 * median["pytorch"] / len(singles), 1000 * median["onnxruntime"] / len(singles),
                   len(singles), runs, warmup, threads)


# ---------------------------------------------------------------------------------------------- the folder
@dataclass(frozen=True)
class ExportReport:
    """What :func:`export_folder` wrote and measured. ``facts()`` is the deterministic part (``onnx_export.json``);
    ``latency`` is wall-clock."""

    source: str
    kind: str
    opset: int
    output_axes: dict[int, str]
    exporter: str
    inputs: list[str]
    outputs: list[str]
    onnx_sha256: str
    onnx_bytes: int
    parity: Parity
    latency: Latency

    def facts(self) -> dict[str, Any]:
        """The export's facts: source folder, head, opset, exporter, input/output names and dynamic axes, library
        versions, the ONNX file's sha256 and size, and the parity figures."""
        import onnx
        import onnxruntime

        return {"source": self.source, "kind": self.kind, "file": ONNX_FILE, "opset": self.opset,
                "exporter": self.exporter, "inputs": self.inputs, "outputs": self.outputs,
                "dynamic_axes": {name: list(INPUT_AXES.values()) for name in self.inputs}
                | {name: list(self.output_axes.values()) for name in self.outputs},
                "versions": {"torch": torch.__version__.split("+")[0], "onnx": onnx.__version__,
                             "onnxruntime": onnxruntime.__version__},
                "sha256": self.onnx_sha256, "bytes": self.onnx_bytes, "parity": self.parity.as_dict()}


def export_folder(model_dir: Path, out_dir: Path, examples: Sequence[Mapping[str, Any]], *, max_seq_length: int = 384,
                  doc_stride: int | None = 128, n_best: int = 20, max_answer_length: int = 30, opset: int = 18,
                  exporter: str = "torchscript", batch_size: int = 8, threads: int = 1, latency_examples: int = 8,
                  warmup: int = 2, runs: int = 10, tolerance: float | None = 1e-4,
                  tolerance_name: str = "tolerance", runtime: Runtime | None = None) -> ExportReport:
    """Export ``model_dir`` to ``out_dir`` (``model.onnx``, :data:`COPIED_FILES`, ``onnx_export.json``), check
    parity on ``examples`` (:func:`encode_examples`, :func:`check_parity`) and time both backends at batch 1
    (:func:`compare_latency`). ``out_dir`` appears only when all of it is written (atomic) and the parity check
    passed; PyTorch and ONNX Runtime run with ``threads`` intra-op threads throughout.

    The graph is exported from the CPU; the parity reference runs on ``runtime`` (the export stage's: a GPU
    worker's device, with exact fp32 matmuls; None: the CPU), the latency on the CPU.

    ``tolerance``: the largest absolute logit difference accepted (None: any); fp32 graphs of these models differ
    by ~1e-7 (2-layer tiny models) to ~1e-6 (6-layer MiniLM). Predictions that disagree within it (a near tie) are
    logged as a warning, not refused.

    Raises:
        PipelineError: not a fine-tuned folder with a known head, no usable check inputs, a failed export, or a
            logit difference above ``tolerance`` (named ``tolerance_name`` in the message).
    """
    cpu_runtime = make_runtime("fp32", cpu=True)
    runtime = runtime or cpu_runtime
    pred = load_predictor(Path(model_dir))
    enc = encode_examples(pred, examples, max_seq_length, doc_stride)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with atomic_dir(out_dir) as tmp:
            path = tmp / ONNX_FILE
            outputs = export_onnx(pred, path, cpu_runtime, opset=opset, exporter=exporter)
            session = onnx_session(path, threads)
            check_outputs(session, pred.task, path)
            parity = check_parity(pred, session, enc, runtime, batch_size, n_best, max_answer_length)
            worst = max(parity.max_abs_diff, key=parity.max_abs_diff.get)
            if tolerance is not None and parity.max_abs_diff[worst] > tolerance:
                raise PipelineError(f"{model_dir}: ONNX Runtime's {worst} differ from PyTorch's by up to "
                                    f"{parity.max_abs_diff[worst]:g} (> {tolerance_name} {tolerance:g}); the export "
                                    "is not written")
            latency = compare_latency(pred, path, enc, cpu_runtime, examples=latency_examples, warmup=warmup,
                                      runs=runs, threads=threads)
            for name in COPIED_FILES:
                if (Path(model_dir) / name).is_file():
                    shutil.copyfile(Path(model_dir) / name, tmp / name)
            report = ExportReport(Path(model_dir).as_posix(), pred.kind, opset, pred.task.onnx_output_axes, exporter,
                                  input_names(pred), outputs, sha256_file(path), path.stat().st_size, parity, latency)
            write_json(tmp / FACTS_FILE, report.facts())
    finally:
        torch.set_num_threads(before)
    if parity.agreement < 1:
        log.warning("%s: ONNX Runtime and PyTorch disagree on %d of %d predictions (logits within %s: near ties)",
                    model_dir, round((1 - parity.agreement) * parity.compared), parity.compared,
                    json.dumps(parity.max_abs_diff))
    log.info("%s -> %s: max |logit diff| %s, agreement %.4f over %d %s; b=1 %.2f ms PyTorch, %.2f ms ONNX Runtime",
             model_dir, out_dir, json.dumps(parity.max_abs_diff), parity.agreement, parity.compared,
             pred.task.prediction_unit,
             latency.pytorch_ms, latency.onnxruntime_ms)
    return report
