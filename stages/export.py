"""Stage ``export``: the fine-tuned folders of ``export.models`` as ONNX, each checked against PyTorch.

For every ``models/finetuned/{model}-{task}/`` whose model is in ``export.models`` (``all``: every folder), exports
the head with dynamic batch and sequence axes and checks it on the first ``export.max_test_examples`` examples of
``data/tasks/{task}``'s test split, encoded with ``finetune.tasks.{task}``'s windows
(:func:`bert_pipeline.mlops.onnx_export.export_folder`). Writes

- ``models/onnx/{model}-{task}/``: ``model.onnx``, ``config.json``, the tokenizer files and ``onnx_export.json``
  (opset, input and output names, dynamic axes, parity): usable without the PyTorch folder;
- ``metrics/export.json``: per ``{model}-{task}`` the parity figures (largest absolute logit difference per output,
  share of equal predictions and how many were compared), the opset and the ONNX file's sha256 (byte-identical on
  a CPU rerun; a detail file, not a DVC metric);
- ``metrics/export-timing.json``: per ``{model}-{task}`` PyTorch and ONNX Runtime ms per window at batch 1 and
  their ratio, and the stage's wall seconds (``cache: false``).

A logit difference above ``export.tolerance`` fails the stage, and nothing is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, flatten, write_json
from bert_pipeline.mlops.onnx_export import export_folder
from bert_pipeline.report.family import load_test_split
from bert_pipeline.train.runtime import make_runtime
from stages import dvc_adapter, require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.export import ExportParams, ExportView
from stages.params.finetune import FinetuneTask

log = logging.getLogger(__name__)

FINETUNED = Path("models/finetuned")
TASKS = Path("data/tasks")
OUT = Path("models/onnx")
OUT_METRICS = Path("metrics/export.json")
OUT_TIMING = Path("metrics/export-timing.json")


def selected_folders(models: str | list[str], finetuned: Path, tasks: Iterable[str]) -> list[tuple[str, str, Path]]:
    """``(model, task, folder)`` of each ``finetuned/{model}-{task}/`` (``task`` a key of ``finetune.tasks``, the
    longest that fits) whose model is in ``models`` (``all``: every one), in ``models``' order then ``tasks``'.

    Raises:
        PipelineError: a listed model has no fine-tuned folder, or there is none at all.
    """
    tasks = list(tasks)
    found: list[tuple[str, str, Path]] = []
    for folder in sorted(p for p in Path(finetuned).glob("*") if (p / "config.json").is_file()):
        fits = [t for t in tasks if folder.name.endswith(f"-{t}") and len(folder.name) > len(t) + 1]
        if fits:
            task = max(fits, key=len)
            found.append((folder.name[:-len(task) - 1], task, folder))
    if models == "all":
        order = sorted({m for m, _, _ in found})
    else:
        order = list(models)
        missing = [m for m in order if not any(fm == m for fm, _, _ in found)]
        if missing:
            have = sorted({m for m, _, _ in found})
            raise PipelineError(f"export.models: no {finetuned}/{missing[0]}-{{task}}/ folder (models with "
                                f"fine-tuned folders: {', '.join(have) or 'none'}); run finetune first or drop it")
    chosen = [f for f in found if f[0] in order]
    if not chosen:
        raise PipelineError(f"{finetuned}: no fine-tuned {{model}}-{{task}}/ folders (tasks: {', '.join(tasks)}); "
                            "run finetune first")
    return sorted(chosen, key=lambda f: (order.index(f[0]), tasks.index(f[1])))


def export_one(model: str, task: str, folder: Path, out: Path, p: ExportParams,
               t: FinetuneTask, runtime: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Export one folder into ``out``; return its (parity record, timing record). The parity reference runs on
    ``runtime`` (None: the CPU)."""
    test = load_test_split(TASKS / task)
    if p.max_test_examples is not None:
        test = test.select(range(min(p.max_test_examples, len(test))))
    start = time.perf_counter()
    report = export_folder(folder, out, list(test), max_seq_length=t.max_length, doc_stride=t.doc_stride,
                           n_best=t.n_best or 20, max_answer_length=t.max_answer_length or 30, opset=p.opset,
                           exporter=p.exporter, batch_size=p.batch_size, threads=p.num_threads,
                           latency_examples=p.latency_examples, warmup=p.warmup_runs, runs=p.timed_runs,
                           tolerance=p.tolerance, tolerance_name="export.tolerance", runtime=runtime)
    parity = {"kind": report.kind, **{k: v for k, v in report.parity.as_dict().items() if k != "kind"},
              "opset": report.opset, "exporter": report.exporter, "onnx_sha256": report.onnx_sha256,
              "onnx_mb": round(report.onnx_bytes / 1e6, 3)}
    timing = {**report.latency.as_dict(), "export_seconds": round(time.perf_counter() - start, 2)}
    return parity, timing


def main() -> None:
    require_inputs("export")
    params = load_view(ExportView)
    p = params.export
    start = time.perf_counter()
    with dvc_adapter.stage_run("export", p.model_dump()) as run:
        chosen = selected_folders(p.models, FINETUNED, params.finetune.tasks)
        parity: dict[str, Any] = {}
        timing: dict[str, Any] = {}
        # the parity reference on this worker's device, in exact fp32 (no TF32): what the graph must match
        runtime = make_runtime("fp32", tf32=False)
        with atomic_dir(OUT) as tmp:
            for model, task, folder in chosen:
                name = f"{model}-{task}"
                parity[name], timing[name] = export_one(model, task, folder, tmp / name, p,
                                                        params.finetune.tasks[task], runtime)
        timing["wall_seconds"] = round(time.perf_counter() - start, 2)
        write_json(OUT_METRICS, parity)
        # the worst pair: the numbers that say whether every export can be trusted
        write_headline("export", {"onnx": {"max_abs_diff": max(max(r["max_abs_diff"].values())
                                                               for r in parity.values()),
                                           "agreement": min(r["agreement"] for r in parity.values())}
                                  if parity else {}})
        write_json(OUT_TIMING, timing)
        log.info("wrote %d ONNX folders under %s/, %s, %s", len(chosen), OUT, OUT_METRICS, OUT_TIMING)
        run.log_metrics(flatten(parity))
        run.log_metrics(flatten(timing))
        for path in (OUT_METRICS, OUT_TIMING):
            run.log_artifact(path)


if __name__ == "__main__":
    run_main(main)
