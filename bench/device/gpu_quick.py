"""One short GPU run: pre-train the ``gpu-quick`` profile's model, then fine-tune it against the same model from
scratch on sentiment, NER and QA, all in one device call (``bench/device/gpu_quick.sh`` is that call).

    python -m stages.cli profile gpu-quick -n gpu-quick -- create_pretraining_data prepare_tasks   # the data, here
    python bench/device/gpu_quick.py pack --exp gpu-quick --out .gpu_quick [--profile gpu-quick] [--set KEY=VALUE ...]
    python bench/device/gpu_quick.py run --data .gpu_quick --out DIR [--budget-seconds 450] [--pretrain-seconds 270]
    python bench/device/gpu_quick.py run --data D --out DIR --size tiny --max-steps 8 --batch-size 4 ...   # a CPU stand-in

``pack`` runs here, where the params schema (pydantic) and DVC are installed. It resolves ``params.yaml`` with the
profile's overrides (and ``--set KEY=VALUE`` ones, YAML values) and copies what the GPU run reads from the outputs
of the data stages run under that profile, either those of DVC experiment ``--exp NAME`` (read from its
``dvc.lock`` and the DVC cache: ``dvc exp run --temp`` leaves the workspace as it was) or, without ``--exp``,
the workspace's: ``data/pretraining`` -> ``pretraining/``, ``data/tasks/{sentiment,ner,qa}``
-> ``tasks/``, ``models/tokenizer`` -> ``tokenizer/``, the data stages' ``metrics/{corpus,pretraining_data,tasks}.json``
when present -> ``metrics/``, plus ``params.json`` (the resolved sections ``prepare_corpus`` .. ``finetune``) and
``manifest.json`` (size, files, the project's git revision). It refuses data built with other settings than the
resolved ones (objective, packing, masking, length, masking rates, the tokenizer's sha256, the corpus's sources)
and a folder over ``--max-mib`` (the device call carries at most 64 MiB with the working tree and the wheels).

``run`` needs only PyTorch, transformers, tokenizers, accelerate, pyarrow, pandas and the carried ``datasets``,
``dill``, ``multiprocess`` and ``seqeval``: it calls the library (``bert_pipeline``) alone, never a stage module,
DVC, MLflow, Prefect or pydantic (``frameworks_imported`` in the result lists any of them found imported at the
end: it must be empty). In order:

1. pre-training (:func:`bert_pipeline.train.pretrain.run_pretraining`) with the packed ``pretrain`` section and
   the command line's overrides, no checkpoints. With ``--pretrain-seconds S`` (and ``--calibration-steps N``)
   runs of ``N // 4`` (after a warm-up run of as many) and ``N`` steps on copies of the model time one step
   first (the difference of their loop times, so start-up, DataLoader workers and the final evaluation cancel),
   and ``max_steps`` is cut to ``floor(S / seconds per step)`` when it would not fit (``warmup_steps`` in
   proportion); the RNG state is restored after them, so the run is the one it would have been;
2. the model saved (``save_pretrained`` + tokenizer) under ``--work``;
3. per task, :func:`bert_pipeline.train.finetune.finetune_task` of the ``pretrained`` member and of the
   ``scratch`` member (``init: random``: the same config and tokenizer, every weight drawn afresh), with the
   packed ``finetune`` section at its first seed (and the low-resource run for ``low_resource_tasks``). A task
   pair starts only while the mean pair so far still fits in what is left of ``--budget-seconds``; a skipped task
   is listed in ``skipped``.

``DIR/gpu_quick.json``: ``device`` (``cpu``/``cuda``), ``device_name``, ``versions``, ``data`` (corpus words and
documents per source, instances and tokens, packed MiB), ``pretrain`` (``size``, ``parameters``, ``steps`` and
``planned_steps``, ``batch_size``, ``max_seq_length``, ``tokens_seen`` (non-padding input tokens),
``padded_tokens``, ``tokens_per_second``, ``model_tflops_per_second``, ``matmul_peak_tflops`` (measured 1024^2
products in the run's precision), ``mfu`` (against that peak), ``mfu_vs_peak`` (against ``--peak-tflops``, when
given), ``precision``, ``mlm_accuracy`` / ``unigram_accuracy`` / ``mlm_loss`` (held-out, masked at
``validation_masked_lm_prob``), ``first_eval``, ``calibration``, ``seconds``), ``finetune`` (per task: ``main_metric``,
per member ``test`` / ``validation`` main metric, ``learning_rate``, ``epochs``, ``train_examples``,
``low_resource_test``, ``seconds``; ``gain`` = pretrained - scratch on test, ``low_resource_gain``),
``average_gain``, ``skipped``, ``phase_seconds`` (setup, calibration, pretrain, save, finetune, total: wall
seconds), ``frameworks_imported`` and ``complete`` (the file is first written after pre-training and again after
each task, so a call cut short keeps what it finished). ``DIR/pretrain_history.csv`` holds the training curve. One summary line
goes to stdout; the log (stderr) prints the elapsed seconds at each phase.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import bert_pipeline  # noqa: E402,F401  (the offline and telemetry-free defaults, before any HF library)
from bert_pipeline.errors import PipelineError  # noqa: E402
from bert_pipeline.io import atomic_dir, sha256_file, write_json  # noqa: E402

log = logging.getLogger("gpu_quick")

PROFILE = "gpu-quick"
TASKS = ("sentiment", "ner", "qa")
MEMBERS = ("pretrained", "scratch")
COPIED = {"pretraining": "data/pretraining", "tokenizer": "models/tokenizer",
          **{f"tasks/{task}": f"data/tasks/{task}" for task in TASKS}}
"""Packed folder name -> the project path it is copied from."""
METRICS = ("corpus.json", "pretraining_data.json", "tasks.json")
"""The data stages' records under the project's ``metrics/``, copied when present (the result cites them)."""
SECTIONS = ("prepare_corpus", "train_tokenizer", "create_pretraining_data", "pretrain", "finetune")
BUILT_KEYS = ("objective", "packing", "masking", "max_seq_length")
"""``info.json`` keys that must equal the resolved ``create_pretraining_data`` values."""
RULE_KEYS = ("masked_lm_prob", "max_predictions_per_seq", "mask_token_prob", "random_token_prob", "whole_word_masking")
FORBIDDEN = ("pydantic", "dvc", "mlflow", "prefect", "hydra", "stages", "spacy")
"""Top-level modules the run must not import (the GPU machine lacks most of them)."""
VERSIONED = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "pyarrow", "numpy", "seqeval")
NEEDED = ("torch", "transformers", "tokenizers", "accelerate", "datasets", "dill", "multiprocess", "pyarrow", "pandas",
          "seqeval", "sklearn", "yaml")
"""Modules the run imports (``seqeval`` only when NER is scored: checked before pre-training spends the budget)."""
RESULT = "gpu_quick.json"
HISTORY = "pretrain_history.csv"
MIB = 1 << 20
BUILD_HINT = (f"build it first: python -m stages.cli profile {PROFILE} -n {PROFILE} -- create_pretraining_data "
              f"prepare_tasks, then pack with --exp {PROFILE}")


# ------------------------------------------------------------------------------------------------------ pack
def parse_sets(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as ``{dotted key: value}``, each value read as YAML (``2e-3`` a number, ``[a, b]`` a
    list).

    Raises:
        PipelineError: an item without ``=`` or with an empty key.
    """
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PipelineError(f"--set {item!r}: expected KEY=VALUE, e.g. pretrain.max_steps=100")
        out[key.strip()] = yaml.safe_load(value)
    return out


def resolve_params(profile: str, sets: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The committed ``params.yaml`` with profile ``profile``'s overrides, then ``sets``, validated by the schema.

    Returns:
        ``(the sections of SECTIONS as plain JSON-able values, the overrides applied)``.

    Raises:
        PipelineError: an unknown profile; ParamsError (a PipelineError): a bad key or value, naming where it came
            from (the profile's file or ``--set``).
    """
    from stages.cli import load_profile
    from stages.params.root import load_params

    overrides = load_profile(profile, REPO / "profiles")
    origins = {key: f"profiles/{profile}.yaml" for key in overrides} | dict.fromkeys(sets, "--set")
    params = load_params(REPO / "params.yaml", {**overrides, **sets}, origins).model_dump(mode="json")
    return {section: params[section] for section in SECTIONS}, {**overrides, **sets}


def source_names(sources: list[Any]) -> list[str]:
    """The names of ``prepare_corpus.sources`` entries (a packaged name or a mapping with ``name``)."""
    return [s if isinstance(s, str) else s["name"] for s in sources]


def _git(project: Path, *args: str) -> str | None:
    """``git -C project ARGS`` stdout, stripped (None when git fails or is absent)."""
    try:
        out = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


class ProjectOutputs:
    """The stage outputs ``pack`` copies, read from a workspace (``project/PATH``) or, with ``experiment``, from that
    DVC experiment's ``dvc.lock`` and the project's DVC cache (what ``dvc exp run --temp`` leaves: the workspace
    keeps its own params and outputs).

    Raises:
        PipelineError: no experiment of that name, or its ``dvc.lock`` unreadable.
    """

    def __init__(self, project: Path, experiment: str | None = None):
        self.project, self.experiment = project, experiment
        self.commit: str | None = _git(project, "rev-parse", "HEAD")
        self.outs: dict[str, str] = {}
        if experiment is None:
            return
        import yaml

        refs = (_git(project, "for-each-ref", "--sort=-committerdate", "--format=%(refname) %(objectname)",
                     "refs/exps") or "").splitlines()
        found = [line.split()[1] for line in refs if line.split()[0].rsplit("/", 1)[-1] == experiment]
        if not found:
            raise PipelineError(f"--exp {experiment}: no DVC experiment of that name in {project} (dvc exp show "
                                f"lists them; {BUILD_HINT})")
        self.commit = found[0]  # the newest of that name
        lock = yaml.safe_load(_git(project, "show", f"{self.commit}:dvc.lock") or "null")
        if not isinstance(lock, dict) or "stages" not in lock:
            raise PipelineError(f"--exp {experiment}: commit {self.commit[:12]} has no readable dvc.lock")
        for stage in lock["stages"].values():
            for out in stage.get("outs", []):
                if "md5" in out:
                    self.outs[out["path"]] = out["md5"]
        try:  # the configured cache, else DVC's default
            dvc = subprocess.run(["dvc", "cache", "dir"], cwd=project, capture_output=True, text=True, check=True)
            self.cache = Path(dvc.stdout.strip())
        except (OSError, subprocess.CalledProcessError):
            self.cache = project / ".dvc" / "cache"

    def describe(self, rel: str) -> str:
        """How errors name ``rel``: its workspace path, or the path in the experiment."""
        if self.experiment is None:
            return str(self.project / rel)
        return f"{rel} of experiment {self.experiment}"

    def _cached(self, md5: str) -> Path:
        path = self.cache / "files" / "md5" / md5[:2] / md5[2:]
        if not path.exists():
            raise PipelineError(f"{path}: not in the DVC cache (experiment {self.experiment}: dvc pull, or run it "
                                f"again here)")
        return path

    def files(self, rel: str) -> dict[str, Path] | None:
        """``{path relative to rel: the file holding it}`` for a file or folder output ``rel`` (None: absent)."""
        if self.experiment is None:
            path = self.project / rel
            if path.is_file():
                return {"": path}
            return {p.relative_to(path).as_posix(): p for p in sorted(path.rglob("*")) if p.is_file()} \
                if path.is_dir() else None
        for out, md5 in self.outs.items():
            if rel == out and not md5.endswith(".dir"):
                return {"": self._cached(md5)}
            if rel == out or rel.startswith(out + "/"):
                sub = rel[len(out):].strip("/")
                entries = json.loads(self._cached(md5).read_text(encoding="utf-8"))
                picked = {e["relpath"][len(sub):].lstrip("/") if sub else e["relpath"]: e["md5"] for e in entries
                          if not sub or e["relpath"].startswith(sub + "/")}
                return {name: self._cached(m) for name, m in picked.items()} or None
        return None


def check_built(packed: Path, params: dict[str, Any], profile: str, where: ProjectOutputs) -> None:
    """Check that the data copied into ``packed`` were built with ``params``, the resolved profile.

    Raises:
        PipelineError: one line naming the file, the params key, the built and the expected value and the fix
            (rebuild under the profile), or a ``pretrain.init`` other than ``scratch``.
    """
    origin = f"profiles/{profile}.yaml"
    if params["pretrain"]["init"] != "scratch":
        raise PipelineError(f"{origin}: pretrain.init: expected scratch (gpu_quick compares pre-training from scratch "
                            f"with none), got {params['pretrain']['init']!r}")
    info_name = where.describe(f"{COPIED['pretraining']}/info.json")
    info = json.loads((packed / "pretraining" / "info.json").read_text(encoding="utf-8"))
    cpd = params["create_pretraining_data"]
    built = {**{key: info.get(key) for key in BUILT_KEYS}, **{key: info.get("rules", {}).get(key) for key in RULE_KEYS}}
    for key, got in built.items():
        if got != cpd[key]:
            raise PipelineError(f"{info_name}: built with create_pretraining_data.{key}={got!r}, but {origin} "
                                f"resolves it to {cpd[key]!r} ({BUILD_HINT})")
    tokenizer = packed / "tokenizer" / "tokenizer.json"
    if info.get("tokenizer_sha256") and tokenizer.exists() and sha256_file(tokenizer) != info["tokenizer_sha256"]:
        raise PipelineError(f"{info_name}: built with another tokenizer than {where.describe(COPIED['tokenizer'])} "
                            f"(sha256 differs; {BUILD_HINT})")
    corpus = packed / "metrics" / METRICS[0]
    if corpus.exists():
        have = sorted(json.loads(corpus.read_text(encoding="utf-8")).get("per_source", {}))
        want = sorted(source_names(params["prepare_corpus"]["sources"]))
        if have != want:
            raise PipelineError(f"{where.describe('metrics/' + METRICS[0])}: the corpus holds sources "
                                f"{', '.join(have)}, but {origin} resolves prepare_corpus.sources to {', '.join(want)} "
                                f"({BUILD_HINT})")


def pack(project: Path, out: Path, profile: str, sets: dict[str, Any], max_mib: float,
         experiment: str | None = None) -> dict[str, Any]:
    """Copy what ``run`` needs into ``out`` (atomically: a failure leaves ``out`` as it was) from ``project``'s
    workspace or, with ``experiment``, from that DVC experiment's outputs in the DVC cache.

    Returns:
        The manifest written as ``out/manifest.json`` (``bytes``, ``mib``, ``files``, the copied paths, the
        project's path, the experiment and its commit (else the checkout's), the profile and its overrides).

    Raises:
        PipelineError: a missing input (named, with the command that builds it), data built with other settings
            (:func:`check_built`), or more than ``max_mib`` MiB to copy.
    """
    if not project.is_dir():
        raise PipelineError(f"--project {project}: no such directory; give this repository's checkout (default .)")
    params, overrides = resolve_params(profile, sets)
    where = ProjectOutputs(project, experiment)
    wanted = {**COPIED, **{f"metrics/{name}": f"metrics/{name}" for name in METRICS}}
    found: dict[str, dict[str, Path]] = {}
    for name, rel in wanted.items():
        files = where.files(rel)
        if files is None and name in COPIED:
            raise PipelineError(f"{where.describe(rel)}: not found ({BUILD_HINT})")
        if files is not None:
            found[name] = files
    sizes = {name: sum(p.stat().st_size for p in files.values()) for name, files in found.items()}
    total = sum(sizes.values())
    if total > max_mib * MIB:
        biggest = max(sizes, key=sizes.__getitem__)
        raise PipelineError(f"{where.describe(wanted[biggest])}: the run's inputs are {total / MIB:.1f} MiB, over "
                            f"--max-mib {max_mib:g} (the device call carries at most 64 MiB with the working tree and "
                            f"the wheels; this one is {sizes[biggest] / MIB:.1f} MiB: lower "
                            f"prepare_corpus.max_documents_per_source)")
    manifest = {"profile": profile, "overrides": overrides, "project": str(project.resolve()),
                "experiment": experiment, "git_revision": where.commit, "bytes": total, "mib": round(total / MIB, 2),
                "files": sum(len(files) for files in found.values()), "copied": {n: wanted[n] for n in found}}
    with atomic_dir(out) as tmp:
        for name, files in found.items():
            for sub, path in files.items():
                target = tmp / name / sub if sub else tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
        check_built(tmp, params, profile, where)
        write_json(tmp / "params.json", {"profile": profile, "overrides": overrides, "params": params})
        write_json(tmp / "manifest.json", manifest)
    log.info("packed %s into %s: %d files, %.1f MiB", where.describe("outputs"), out, manifest["files"], total / MIB)
    return manifest


# ------------------------------------------------------------------------------------------------------- run
def check_modules(names: tuple[str, ...] = NEEDED) -> None:
    """Check that every module the run will import can be found, before any time is spent.

    Raises:
        PipelineError: the first missing one, with the fix (carry its wheel: ``bench/device/gpu_quick.sh``'s header).
    """
    import importlib.util

    for name in names:
        if importlib.util.find_spec(name) is None:
            raise PipelineError(f"{name}: not importable here (carry its wheel in .whl and name .whl in the device "
                                f"call's carry: bench/device/gpu_quick.sh's header has the pip download line)")


def read_packed(data: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(params, manifest)`` of a packed folder.

    Raises:
        PipelineError: the folder, its ``params.json`` or one of its inputs is missing.
    """
    if not (data / "params.json").exists():
        raise PipelineError(f"{data}/params.json: not found (make the folder here: python bench/device/gpu_quick.py pack "
                            f"--exp gpu-quick --out {data}; on the device, name it in carry)")
    for name in COPIED:
        if not (data / name).exists():
            raise PipelineError(f"{data / name}: not found (pack again: python bench/device/gpu_quick.py pack)")
    packed = json.loads((data / "params.json").read_text(encoding="utf-8"))
    manifest_path = data / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {}
    return packed["params"], manifest


def _cap(value: int | None, limit: int | None) -> int | None:
    """``min(value, limit)``; ``None`` (no cap) on either side keeps the other."""
    if limit is None:
        return value
    return limit if value is None else min(value, limit)


def apply_run_overrides(params: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """A copy of the packed ``params`` with the command line's overrides: ``pretrain`` keys (``--size``,
    ``--max-steps``, ...), ``--precision`` for both phases, and the caps ``--epochs``, ``--max-train-examples``,
    ``--max-eval-examples`` on every fine-tuning task, member and grid (a stand-in or a shorter run)."""
    params = copy.deepcopy(params)
    pre, ft = params["pretrain"], params["finetune"]
    if args.size is not None:
        pre["model"]["size"] = args.size
    for key in ("max_steps", "batch_size", "warmup_steps", "eval_steps", "eval_batch_size", "max_eval_batches",
                "logging_steps"):
        if getattr(args, key) is not None:
            pre[key] = getattr(args, key)
    pre["warmup_steps"] = min(pre["warmup_steps"], pre["max_steps"])
    if args.num_workers is not None:
        pre["compute"]["num_workers"] = args.num_workers
    if args.precision is not None:
        pre["precision"] = ft["precision"] = args.precision
    for task in ft["tasks"].values():
        task["epochs"] = _cap(task["epochs"], args.epochs)
        task["max_train_examples"] = _cap(task["max_train_examples"], args.max_train_examples)
        for split in ("validation", "test"):
            task[f"max_{split}_examples"] = _cap(task[f"max_{split}_examples"], args.max_eval_examples)
    for member in ft["models"].values():
        for key in ("epochs", "low_resource_epochs"):
            member[key] = _cap(member.get(key), args.epochs)
            if member.get("grid"):  # a member tuned on a grid carries its own
                member["grid"][key] = sorted({_cap(v, args.epochs) for v in member["grid"][key]})
    ft["low_resource_epochs"] = _cap(ft["low_resource_epochs"], args.epochs)
    ft["low_resource_train_examples"] = _cap(ft["low_resource_train_examples"], args.max_train_examples)
    return params


def train_config(pre: dict[str, Any]) -> Any:
    """The loop's :class:`bert_pipeline.train.loop.TrainConfig` from a resolved ``pretrain`` section."""
    from bert_pipeline.train.loop import TrainConfig

    fields = {key: pre[key] for key in TrainConfig.__dataclass_fields__ if key in pre}
    return TrainConfig(**fields, num_workers=pre["compute"]["num_workers"])


def budget_steps(planned: int, seconds_per_step: float, seconds: float) -> int:
    """The steps that fit in ``seconds`` at ``seconds_per_step``: ``min(planned, floor(seconds / seconds_per_step))``,
    at least 1.

    >>> budget_steps(15000, 0.02, 240.0)
    12000
    >>> budget_steps(100, 0.02, 240.0)
    100
    """
    if seconds_per_step <= 0:
        return planned
    return max(1, min(planned, int(seconds / seconds_per_step)))


def calibrate(model: Any, open_data: Any, config: Any, precision: str, steps: int) -> dict[str, Any]:
    """Seconds per optimizer step of ``model`` under ``config``, timed on copies of ``model``: a warm-up run of
    ``steps // 4`` steps (at least 1; it pays the one-time costs: kernels, allocator, lazy imports), then runs of
    ``steps // 4`` and ``steps`` steps, whose loop times' difference over the difference of their steps is the
    answer, so the fixed costs of a run (DataLoader workers, the final evaluation) cancel. Should noise make that
    difference negative, the longer run's seconds per step (an upper bound) stand in. The global RNG state is
    restored afterwards.

    Args:
        open_data: ``max_steps -> PretrainingData`` (:func:`bert_pipeline.train.pretrain.open_pretraining_data`).
        steps: the longer run's steps, >= 2.

    Returns:
        ``{"steps": [short, steps], "loop_seconds": [...], "warmup_seconds", "seconds_per_step", "wall_seconds"}``.
    """
    from bert_pipeline.train.checkpoint import rng_state, set_rng_state
    from bert_pipeline.train.pretrain import run_pretraining
    from bert_pipeline.train.runtime import make_runtime

    runtime = make_runtime(precision)
    started, state = time.perf_counter(), rng_state(runtime.device)
    short = max(1, steps // 4)
    seconds = []
    for n in (short, short, steps):
        cfg = replace(config, max_steps=n, warmup_steps=min(config.warmup_steps, n), eval_steps=0, save_steps=0,
                      logging_steps=n)
        outcome = run_pretraining(copy.deepcopy(model), open_data(n), cfg, make_runtime(precision), None,
                                  describe={"calibration": n})
        seconds.append(outcome.result.seconds)
    set_rng_state(state, runtime.device)
    diff = seconds[2] - seconds[1]
    per_step = diff / (steps - short) if diff > 0 else seconds[2] / steps
    log.info("calibration: %d and %d steps in %.2f and %.2f s (warm-up %.2f s): %.4f s a step", short, steps,
             seconds[1], seconds[2], seconds[0], per_step)
    return {"steps": [short, steps], "loop_seconds": [round(s, 3) for s in seconds[1:]],
            "warmup_seconds": round(seconds[0], 3), "seconds_per_step": round(per_step, 6),
            "wall_seconds": round(time.perf_counter() - started, 2)}


def member_spec(entry: dict[str, Any], path: Path, key: str) -> Any:
    """The library's :class:`bert_pipeline.train.finetune.MemberSpec` of a packed ``finetune.models`` entry, reading
    its weights (or, for ``init: random``, its config) from ``path`` (``learning_rate: grid`` -> ``None``).

    Raises:
        PipelineError: a member with a ``size`` of its own (the comparison needs the pre-trained model's shape).
    """
    from bert_pipeline.train.finetune import MemberSpec

    if entry.get("size") is not None:
        raise PipelineError(f"finetune.models.{key}.size: expected null (gpu_quick's scratch member takes the "
                            f"pre-trained model's config), got {entry['size']!r}")
    rate = entry["learning_rate"]
    return MemberSpec(path=str(path), init=entry["init"], size=None, learning_rate=None if rate == "grid" else rate,
                      pooling=entry["pooling"], epochs=entry.get("epochs"),
                      low_resource_epochs=entry.get("low_resource_epochs"))


def device_info(torch: Any, device: Any) -> tuple[str, str]:
    """``(device type, a name)``: the GPU's name, or the CPU model from ``/proc/cpuinfo``."""
    if device.type == "cuda":
        return "cuda", torch.cuda.get_device_name(device)
    from bert_pipeline.report.provenance import hardware

    return device.type, str(hardware().get("cpu") or "cpu")


def data_record(data: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """What the packed data hold: corpus words and documents per source, instances and tokens per split."""
    def read(name: str) -> dict[str, Any]:
        path = data / "metrics" / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    corpus = read("corpus.json")
    info = json.loads((data / "pretraining" / "info.json").read_text(encoding="utf-8"))
    return {"packed_mib": manifest.get("mib"), "git_revision": manifest.get("git_revision"),
            "corpus_words": corpus.get("words"), "corpus_documents": corpus.get("documents"),
            "per_source": {name: {"documents": s.get("documents"), "words": s.get("words")}
                           for name, s in corpus.get("per_source", {}).items()},
            "pretraining": info.get("splits", {})}


def finetune_pair(task: str, data: Path, params: dict[str, Any], members: dict[str, Any],
                  low_resource: bool) -> dict[str, Any]:
    """Fine-tune each member on ``task`` (first seed only) and score both on test; ``gain`` = pretrained - scratch.

    Raises:
        PipelineError: a fine-tuning failure (one line, from :class:`bert_pipeline.train.finetune_data.FinetuneError`).
    """
    from bert_pipeline.train.finetune import Grid, finetune_task
    from bert_pipeline.train.finetune_data import FinetuneError
    from bert_pipeline.train.runtime import make_runtime

    ft = params["finetune"]
    loop = {key: ft[key] for key in ("data_seed", "warmup_ratio", "weight_decay", "max_grad_norm",
                                     "early_stopping_patience", "evals_per_epoch", "eval_batch_size")}
    runtime = make_runtime(ft["precision"])
    record: dict[str, Any] = {}
    for name, spec in members.items():
        started = time.perf_counter()
        own = ft["models"][name].get("grid")  # learning_rate: grid -> the member's own grid
        grid = Grid(*(tuple(own[key]) for key in ("learning_rates", "epochs", "low_resource_epochs"))) if own else None
        try:
            outcome = finetune_task(
                data / "tasks" / task, spec, ft["tasks"][task], seeds=ft["seeds"][:1],
                low_resource_train_examples=ft["low_resource_train_examples"] if low_resource else None,
                low_resource_epochs=ft["low_resource_epochs"], grid=grid, runtime=runtime, **loop)
        except FinetuneError as exc:
            raise PipelineError(f"{task}, {name}: {exc}") from None
        m = outcome.metrics
        main = m["main_metric"]
        record["main_metric"] = main
        record[name] = {
            "test": m["test"][main]["mean"], "validation": m["validation"][main]["mean"],
            "learning_rate": m["learning_rate"], "epochs": m["epochs"], "train_examples": m["train_examples"],
            "test_examples": m["test_examples"],
            "low_resource_test": m["low_resource"]["test"][main]["mean"] if m["low_resource"] else None,
            "seconds": round(time.perf_counter() - started, 2)}
        log.info("%s %s: test %s %.4f (%.0f s)", task, name, main, record[name]["test"], record[name]["seconds"])
    record["gain"] = round(record["pretrained"]["test"] - record["scratch"]["test"], 6)
    lows = [record[name]["low_resource_test"] for name in MEMBERS]
    record["low_resource_gain"] = round(lows[0] - lows[1], 6) if None not in lows else None
    return record


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Pre-train, save, fine-tune both members per task, write ``args.out/gpu_quick.json``; returns that record.

    Raises:
        PipelineError: a missing packed input, a data/params mismatch the library finds, or a training failure.
    """
    started = time.perf_counter()
    check_modules()
    data, out = Path(args.data), Path(args.out)
    packed, manifest = read_packed(data)
    params = apply_run_overrides(packed, args)
    pre = params["pretrain"]
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpu_quick-"))
    model_dir = work / "pretrained"
    members = {name: member_spec(params["finetune"]["models"][name], model_dir, name) for name in MEMBERS
               if name in params["finetune"]["models"]}
    if set(members) != set(MEMBERS):
        raise PipelineError(f"finetune.models: expected entries {' and '.join(MEMBERS)} in the packed params "
                            f"({data}/params.json), got {', '.join(sorted(members)) or 'none'}")
    if members["scratch"].init != "random" or members["pretrained"].init != "pretrained":
        raise PipelineError(f"finetune.models ({data}/params.json): expected pretrained with init pretrained and "
                            "scratch with init random")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from bert_pipeline.data.tokenizer import load_tokenizer
    from bert_pipeline.model.configs import save_model, set_dropout
    from bert_pipeline.report.provenance import library_versions
    from bert_pipeline.train import pretrain as pretraining
    from bert_pipeline.train.runtime import make_runtime

    def elapsed() -> float:
        return time.perf_counter() - started

    tokenizer = load_tokenizer(data / "tokenizer", hint="pack again: python bench/device/gpu_quick.py pack")
    phases = [pretraining.PhaseSpec(**phase) for phase in pre["phases"]]

    def open_data(max_steps: int) -> Any:
        return pretraining.open_pretraining_data(
            data / "pretraining", tokenizer, init="scratch", phases=phases, max_steps=max_steps,
            batch_size=pre["batch_size"], num_processes=1, seed=pre["seed"])

    config = train_config(pre)
    planned = config.max_steps
    pdata = open_data(planned)
    model = pretraining.build_pretraining_model(
        "scratch", size=pre["model"]["size"], config=pre["model"]["config"], tokenizer=tokenizer,
        max_seq_length=pdata.max_seq_length, with_pair_head=pdata.pair_key is not None, seed=pre["seed"])
    if pre["dropout"] is not None:
        set_dropout(model, pre["dropout"])
    seconds = {"setup": round(elapsed(), 2)}
    log.info("setup done at %.0f s: %s model, %d steps of %d x %d planned", elapsed(), pre["model"]["size"],
             planned, pre["batch_size"], pdata.max_seq_length)

    calibration = None
    if args.pretrain_seconds > 0 and args.calibration_steps:
        calibration = calibrate(model, open_data, config, pre["precision"], args.calibration_steps)
        steps = budget_steps(planned, calibration["seconds_per_step"], args.pretrain_seconds)
        if steps < planned:
            log.warning("pre-training cut from %d to %d steps to fit --pretrain-seconds %g", planned, steps,
                        args.pretrain_seconds)
            config = replace(config, max_steps=steps, warmup_steps=round(config.warmup_steps * steps / planned))
            pdata = open_data(steps)
        seconds["calibration"] = calibration["wall_seconds"]

    t0 = time.perf_counter()
    runtime = make_runtime(pre["precision"])
    outcome = pretraining.run_pretraining(model, pdata, config, runtime, None,
                                          describe={"init": "scratch", "size": pre["model"]["size"]})
    seconds["pretrain"] = round(time.perf_counter() - t0, 2)
    log.info("pre-training done at %.0f s (%.0f s)", elapsed(), seconds["pretrain"])

    t0 = time.perf_counter()
    with atomic_dir(model_dir) as tmp:
        save_model(outcome.model, tmp, tokenizer)
    out.mkdir(parents=True, exist_ok=True)
    (out / HISTORY).write_text(pretraining.history_csv(outcome.result.history, pretraining.PLOT_COLUMNS),
                               encoding="utf-8")
    seconds["save"] = round(time.perf_counter() - t0, 2)

    quality, timing = outcome.quality, outcome.timing
    device, device_name = device_info(torch, runtime.device)
    record: dict[str, Any] = {
        "device": device, "device_name": device_name,
        "versions": {"python": sys.version.split()[0], **library_versions(VERSIONED)},
        "data": data_record(data, manifest),
        "pretrain": {
            "size": pre["model"]["size"], "parameters": quality["parameters"], "steps": config.max_steps,
            "planned_steps": planned, "batch_size": pre["batch_size"], "max_seq_length": pdata.max_seq_length,
            "learning_rate": config.learning_rate, "warmup_steps": config.warmup_steps,
            "tokens_seen": quality["tokens_seen"], "padded_tokens": outcome.result.padded_tokens,
            "tokens_per_second": timing["tokens_per_second"],
            "model_tflops_per_second": timing["model_tflops_per_second"],
            "matmul_peak_tflops": timing["matmul_peak_tflops"], "mfu": timing["mfu"],
            "mfu_vs_peak": (round(timing["model_tflops_per_second"] / args.peak_tflops, 6)
                            if args.peak_tflops else None),
            "peak_tflops": args.peak_tflops, "precision": timing["precision"],
            "mlm_accuracy": quality["eval"]["mlm_accuracy"], "unigram_accuracy": quality["eval"]["unigram_accuracy"],
            "mlm_loss": quality["eval"]["mlm_loss"], "first_eval": quality["first_eval"],
            "final_train_loss": quality["final_train_loss"], "bad_steps": quality["bad_steps"],
            "calibration": calibration, "seconds": timing["seconds"]},
        "finetune": {}, "skipped": [], "complete": False, "phase_seconds": seconds,
    }
    write_json(out / RESULT, record)  # rewritten after each task: a call cut short keeps what it finished

    seconds["finetune"] = {}
    pairs: list[float] = []
    for task in args.tasks:
        mean_pair = sum(pairs) / len(pairs) if pairs else 0.0
        if args.budget_seconds and elapsed() + mean_pair > args.budget_seconds:
            log.warning("%s skipped: %.0f s gone, a pair takes about %.0f s, --budget-seconds %g", task, elapsed(),
                        mean_pair, args.budget_seconds)
            record["skipped"].append(task)
            continue
        t0 = time.perf_counter()
        low = task in params["finetune"]["low_resource_tasks"] and not args.no_low_resource
        record["finetune"][task] = finetune_pair(task, data, params, members, low)
        pairs.append(time.perf_counter() - t0)
        seconds["finetune"][task] = round(pairs[-1], 2)
        log.info("%s done at %.0f s: gain %+.4f", task, elapsed(), record["finetune"][task]["gain"])
        write_json(out / RESULT, record)
    gains = [r["gain"] for r in record["finetune"].values()]
    record["average_gain"] = round(sum(gains) / len(gains), 6) if gains else None
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    seconds["total"] = round(elapsed(), 2)
    record["complete"] = True
    record["frameworks_imported"] = sorted(name for name in FORBIDDEN if name in sys.modules)
    if record["frameworks_imported"]:
        log.warning("imported on the run's path: %s (the GPU machine lacks them)",
                    ", ".join(record["frameworks_imported"]))
    write_json(out / RESULT, record)
    return record


def summary_line(record: dict[str, Any], out: Path) -> str:
    """The one-line summary ``run`` prints."""
    p = record["pretrain"]
    mfu = f"MFU {p['mfu']:.3f}"
    if p["mfu_vs_peak"] is not None:
        mfu += f" ({p['mfu_vs_peak']:.3f} of {p['peak_tflops']:g} TFLOP/s)"
    gains = " ".join(f"{task} {r['gain']:+.4f}" for task, r in record["finetune"].items()) or "none"
    skipped = f" (skipped: {', '.join(record['skipped'])})" if record["skipped"] else ""
    return (f"gpu_quick: {record['device_name']} ({record['device']}), {p['size']} {p['steps']} steps, "
            f"{p['tokens_seen'] / 1e6:.2f}M tokens at {p['tokens_per_second']:.0f} tokens/s, {mfu}; held-out MLM "
            f"accuracy {p['mlm_accuracy']:.4f} (unigram {p['unigram_accuracy']:.4f}); gain over scratch: "
            f"{gains}{skipped}; {record['phase_seconds']['total']:.0f} s -> {out / RESULT}")


# ------------------------------------------------------------------------------------------------------- CLI
def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _calibration(text: str) -> int:
    value = int(text)
    if value == 1 or value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 (off) or an integer >= 2, got {text}")
    return value


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python bench/device/gpu_quick.py", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)
    pk = sub.add_parser("pack", help="copy the GPU run's inputs out of a built project (here, on CPU)")
    pk.add_argument("--project", type=Path, default=Path("."), help="the DVC project (default .)")
    pk.add_argument("--exp", help="read the outputs of this DVC experiment from the cache (default: the workspace's)")
    pk.add_argument("--out", type=Path, default=Path(".gpu_quick"), help="the folder to write (default .gpu_quick)")
    pk.add_argument("--profile", default=PROFILE, help=f"the profile the data were built under (default {PROFILE})")
    pk.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="a further params override (YAML value), as given to the profile's run with -S")
    pk.add_argument("--max-mib", type=float, default=50.0, help="refuse a bigger folder (default 50)")
    rn = sub.add_parser("run", help="pre-train, then fine-tune pretrained vs scratch (on the GPU machine)")
    rn.add_argument("--data", type=Path, default=Path(".gpu_quick"), help="the packed folder (default .gpu_quick)")
    rn.add_argument("--out", type=Path, required=True, help="where gpu_quick.json and the curve go")
    rn.add_argument("--work", type=Path, help="where the pre-trained model is saved (default a temporary folder, "
                                              "removed at the end)")
    rn.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="tasks to fine-tune on")
    rn.add_argument("--budget-seconds", type=float, default=450.0,
                    help="no task pair starts unless the mean pair so far fits in what is left (0: no limit)")
    rn.add_argument("--pretrain-seconds", type=float, default=0.0,
                    help="cut max_steps to what fits in this many seconds of the loop, timed first (0: no cut)")
    rn.add_argument("--calibration-steps", type=_calibration, default=40,
                    help="steps of the longer timing run (0: no timing; default 40)")
    rn.add_argument("--peak-tflops", type=float, help="the device's peak in the run's precision, for mfu_vs_peak")
    rn.add_argument("--threads", type=_positive, help="torch intra-op threads (default torch's)")
    rn.add_argument("--no-low-resource", action="store_true", help="skip the low-resource runs")
    over = rn.add_argument_group("overrides of the packed params (a stand-in or a shorter run)")
    over.add_argument("--size", help="pretrain.model.size")
    for flag in ("max-steps", "batch-size", "warmup-steps", "eval-steps", "eval-batch-size", "max-eval-batches",
                 "logging-steps", "num-workers"):
        over.add_argument(f"--{flag}", type=int, help=f"pretrain.{flag.replace('-', '_')}")
    over.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), help="pretrain and finetune precision")
    over.add_argument("--epochs", type=_positive, help="cap on every fine-tuning epochs setting")
    over.add_argument("--max-train-examples", type=_positive, help="cap on every task's training subset")
    over.add_argument("--max-eval-examples", type=_positive, help="cap on every task's validation and test subsets")
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "pack":
        manifest = pack(args.project, args.out, args.profile, parse_sets(args.sets), args.max_mib, args.exp)
        sys.stdout.write(f"gpu_quick pack: {manifest['files']} files, {manifest['mib']:.1f} MiB -> {args.out}\n")
        return
    record = run(args)
    sys.stdout.write(summary_line(record, args.out) + "\n")


if __name__ == "__main__":
    from bert_pipeline.console import run_main

    run_main(main)
