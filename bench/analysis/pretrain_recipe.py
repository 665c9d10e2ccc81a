"""Pre-training recipes side by side: held-out MLM accuracy and downstream validation scores per CPU minute.

    python bench/analysis/pretrain_recipe.py --project /path/to/built/checkout --work /tmp/recipe
    python bench/analysis/pretrain_recipe.py --project . --work /tmp/recipe --variants bert none-30-nodrop --tasks ner qa
    python bench/analysis/pretrain_recipe.py --project . --work /tmp/recipe --set cram:pretrain.learning_rate=4e-3 ...

``--project`` is a checkout where the upstream stages have run (``data/corpus``, ``data/tasks``,
``models/tokenizer``, ``data/raw``). Each variant is a set of dotted ``params.yaml`` overrides over the project's
``params.yaml`` (named ones in :data:`VARIANTS`, or ``--set NAME:KEY=VALUE``); for each, in its own folder under
``--work`` (inputs linked, never copied or written), the stages themselves run: ``create_pretraining_data``
(shared between variants with the same data params), ``pretrain``, then ``finetune --model pretrained`` on each
``--tasks`` task at the first fine-tuning seed. ``--scratch`` adds the from-scratch baseline once
(``finetune --model scratch`` on the first variant's config).

The held-out split is masked at ``create_pretraining_data.validation_masked_lm_prob`` (15%) whatever rate a
variant trains at, so the MLM accuracies compare. Printed per variant: pre-training wall and CPU seconds (the
stage's own process tree, with the 1-minute load average), tokens seen, tokens/s, held-out MLM accuracy, and the
validation main metric of each task (never test). A JSON record goes to ``--work/results.json``. Run it on an idle
machine: other processes on 2 cores inflate the wall time several-fold.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mlm_context import require_built_project  # noqa: E402

from stages.params.base import apply_overrides  # noqa: E402

LINKED = ("data/corpus", "data/tasks", "data/raw", "models/tokenizer", "metrics/corpus.json")
# BERT's original recipe (Devlin et al. 2019) at the CPU default's size and steps, then one change at a time.
VARIANTS: dict[str, dict[str, Any]] = {
    "bert": {"create_pretraining_data.objective": "nsp", "create_pretraining_data.masked_lm_prob": 0.15,
             "create_pretraining_data.max_predictions_per_seq": 20, "create_pretraining_data.masking": "static",
             "pretrain.dropout": None},
    "none": {"create_pretraining_data.objective": "none"},
    "nodrop": {"pretrain.dropout": 0.0},
    "mask30": {"create_pretraining_data.masked_lm_prob": 0.3, "create_pretraining_data.max_predictions_per_seq": 40},
    "none-30-nodrop": {"create_pretraining_data.objective": "none", "create_pretraining_data.masked_lm_prob": 0.3,
                       "create_pretraining_data.max_predictions_per_seq": 40, "pretrain.dropout": 0.0},
}


def _link_inputs(project: Path, folder: Path) -> None:
    for rel in LINKED:
        source, target = project / rel, folder / rel
        if source.exists() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source.resolve())


def _run(folder: Path, *args: str) -> tuple[float, float]:
    """Run ``python -m args`` in ``folder``; return (wall seconds, CPU seconds of the process tree)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": f"sqlite:///{folder.resolve()}/mlflow.db"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *args], cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{folder}: python -m {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _prepare(project: Path, work: Path, name: str, overrides: dict[str, Any], raw: dict[str, Any]) -> Path:
    params = apply_overrides(raw, overrides)
    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    _link_inputs(project, folder)
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    data_key = json.dumps({"data": params["create_pretraining_data"], "init": params["pretrain"]["init"]},
                          sort_keys=True)
    data_dir = work / "data" / hashlib.sha256(data_key.encode()).hexdigest()[:12]
    if not (data_dir / "data/pretraining/info.json").exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        _link_inputs(project, data_dir)
        (data_dir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
        _run(data_dir, "stages.create_pretraining_data")
    target = folder / "data/pretraining"
    if target.is_symlink() or target.exists():
        target.unlink()
    target.symlink_to((data_dir / "data/pretraining").resolve())
    return folder


def _digest(path: Path) -> str:
    """sha256 of the params sections pre-training depends on (a rerun with other fine-tuning params reuses it)."""
    params = yaml.safe_load(path.read_text(encoding="utf-8"))
    sections = {k: params[k] for k in ("create_pretraining_data", "pretrain")}
    return hashlib.sha256(json.dumps(sections, sort_keys=True).encode()).hexdigest()


def _validation_score(folder: Path, member: str, task: str) -> float:
    record = json.loads((folder / f"metrics/finetune/{member}-{task}.json").read_text(encoding="utf-8"))
    return float(record["validation"][record["main_metric"]]["mean"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--params", type=Path, help="the params.yaml the variants override (default: the project's)")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    parser.add_argument("--set", action="append", default=[], metavar="NAME:KEY=VALUE",
                        help="an override of variant NAME (a new name starts a variant over the project's params)")
    parser.add_argument("--tasks", nargs="*", default=["ner", "qa"])
    parser.add_argument("--scratch", action="store_true", help="also fine-tune the from-scratch baseline once")
    parser.add_argument("--common", nargs="*", default=[], metavar="KEY=VALUE",
                        help="an override applied to every variant (e.g. pretrain.max_steps=400)")
    args = parser.parse_args()
    require_built_project(args.project, tuple(part for part in LINKED if not part.endswith(".json")),
                          "dvc repro train_tokenizer prepare_tasks")

    raw = yaml.safe_load((args.params or args.project / "params.yaml").read_text(encoding="utf-8"))
    variants = {name: dict(VARIANTS.get(name, {})) for name in args.variants}
    for item in args.set:
        name, _, assignment = item.partition(":")
        key, _, value = assignment.partition("=")
        variants.setdefault(name, {})[key] = yaml.safe_load(value)
    common = {}
    for item in args.common:
        key, _, value = item.partition("=")
        common[key] = yaml.safe_load(value)
    first_seed = {"finetune.seeds": [raw["finetune"]["seeds"][0]], "finetune.low_resource_tasks": []}
    args.work.mkdir(parents=True, exist_ok=True)
    results_path = args.work / "results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else {}
    for name, overrides in variants.items():
        folder = _prepare(args.project, args.work, name, {**common, **overrides, **first_seed}, raw)
        load = os.getloadavg()[0]
        previous = results.get(name, {})
        if previous.get("params") == _digest(folder / "params.yaml") and (folder / "metrics/pretrain.json").exists():
            wall, cpu, load = previous["pretrain_wall_seconds"], previous["pretrain_cpu_seconds"], previous["load_average_1min"]
        else:
            wall, cpu = _run(folder, "stages.pretrain")
        quality = json.loads((folder / "metrics/pretrain.json").read_text())
        timing = json.loads((folder / "metrics/pretrain-timing.json").read_text())
        row = {"overrides": overrides, "common": common, "params": _digest(folder / "params.yaml"), "pretrain_wall_seconds": round(wall, 1),
               "pretrain_cpu_seconds": round(cpu, 1), "load_average_1min": round(load, 2),
               "tokens_seen": quality["tokens_seen"], "tokens_per_second": timing["tokens_per_second"],
               "mfu": timing["mfu"], "mlm_accuracy": quality["eval"]["mlm_accuracy"], "validation": {}}
        for task in args.tasks:
            _run(folder, "stages.finetune", "--model", "pretrained", "--task", task)
            row["validation"][task] = round(_validation_score(folder, "pretrained", task), 4)
        if args.scratch and "scratch" not in results:
            results["scratch"] = {"validation": {}}
            for task in args.tasks:
                _run(folder, "stages.finetune", "--model", "scratch", "--task", task)
                results["scratch"]["validation"][task] = round(_validation_score(folder, "scratch", task), 4)
        results[name] = row
        results_path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        scores = "  ".join(f"{t} {v:.4f}" for t, v in row["validation"].items())
        print(f"{name:18s} pretrain {wall:6.1f} s wall {cpu:6.1f} s CPU (load {load:.2f})  tokens "
              f"{row['tokens_seen']:>9,}  {row['tokens_per_second']:>8.0f} tok/s  MLM acc {row['mlm_accuracy']:.4f}  "
              f"{scores}", flush=True)
    if "scratch" in results:
        print("scratch            " + "  ".join(f"{t} {v:.4f}" for t, v in results["scratch"]["validation"].items()))


if __name__ == "__main__":
    main()
