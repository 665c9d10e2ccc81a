"""Stage ``finetune``: ``python -m stages.finetune --model M --task T`` (one DVC stage per model x task).

Fine-tunes model ``M`` (a key of ``finetune.models``, a local ``save_pretrained`` folder or a hub name) on
``data/tasks/T/`` once per seed in ``finetune.seeds``, with early stopping on the validation metric, and, for
tasks in ``finetune.low_resource_tasks``, again on ``low_resource_train_examples`` labelled examples. Writes

- ``models/finetuned/{M}-{T}/``: the first seed's model (``save_pretrained``, tokenizer beside);
- ``metrics/finetune/{M}-{T}.json``: ``{"model", "task", "main_metric", "test": {METRIC: {"mean", "seeds"}},
  "validation": {...}, "low_resource": {"train_examples", "test": {...}}, ...}`` (quality only, byte-identical
  on CPU);
- ``metrics/finetune-timing/{M}-{T}.json``: wall-clock seconds (``cache: false``; ``train_seconds`` lives here,
  not in the metrics file, so that file stays byte-identical).
"""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, write_json
from bert_pipeline.mlops import tracking
from bert_pipeline.train import finetune as TT
from stages.params import FinetuneModel, FinetuneParams, load_params

log = logging.getLogger(__name__)

TASKS = Path("data/tasks")
MODELS_OUT = Path("models/finetuned")
METRICS = Path("metrics/finetune")
TIMING = Path("metrics/finetune-timing")
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def resolve_model(name: str, p: FinetuneParams) -> FinetuneModel:
    """The settings for ``--model name``: a key of ``finetune.models``, else a local folder with
    ``config.json`` or a hub name ``owner/name`` with ``finetune.user_model``'s settings.

    Raises:
        PipelineError: none of these (one line naming the key and what was expected).
    """
    if name in p.models:
        return p.models[name]
    path = Path(name)
    if (path / "config.json").exists() or (not path.exists() and _HUB_NAME.match(name)):
        return p.user_model.model_copy(update={"path": name})
    raise PipelineError(
        f"--model {name!r}: unknown model; expected a key of finetune.models in params.yaml "
        f"({', '.join(sorted(p.models))}), a folder with config.json, or a hub name owner/name"
    )


def _summary(per_seed: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """``{metric: {"mean", "seeds": [...]}}`` rounded to 6 decimals."""
    out = {}
    for key in sorted(per_seed[0]):
        vals = [round(float(m[key]), 6) for m in per_seed]
        out[key] = {"mean": round(sum(vals) / len(vals), 6), "seeds": vals}
    return out


def load_tokenizer(path: str):
    """A fast tokenizer from ``path`` (word_ids and offset_mapping need one).

    Raises:
        PipelineError: missing or slow tokenizer.
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{path}: no tokenizer could be loaded ({str(exc).splitlines()[0]})") from None
    if not tok.is_fast:
        raise PipelineError(f"{path}: a fast tokenizer (tokenizer.json) is needed for word_ids and offset_mapping")
    return tok


def run(model_name: str, task_name: str, p: FinetuneParams, tracker: Any = None,
        teacher_size: str | None = None) -> dict[str, Any]:
    """Fine-tune, evaluate and write every output of one combination. Returns the metrics dict.

    ``tracker`` (a :class:`bert_pipeline.mlops.tracking.StageRun` or None) receives the training loss and validation metrics
    at each check (as ``seed{S}/...``), the test metrics and a pointer to the saved model. ``teacher_size``
    (``pretrain.model.size``) is the shape of a ``init: random`` model whose folder has no ``config.json``.
    """
    spec = resolve_model(model_name, p)
    if spec.init == "random" and spec.size is None and not (Path(spec.path) / "config.json").exists():
        if teacher_size is None:
            raise PipelineError(f"{spec.path}: no config.json for a random-init model; set finetune.models.{model_name}.size")
        spec = spec.model_copy(update={"size": teacher_size})
    if task_name not in p.tasks:
        raise PipelineError(f"params.yaml: finetune.tasks: no settings for task {task_name!r} "
                         f"(known: {', '.join(sorted(p.tasks))})")
    if not Path(spec.path).exists() and not _HUB_NAME.match(spec.path):
        raise PipelineError(f"{spec.path}: model folder not found (finetune.models.{model_name}.path)")
    task = p.tasks[task_name].model_dump()
    try:
        dd, info = TT.load_task(TASKS / task_name)
    except TT.FinetuneError as exc:
        raise PipelineError(str(exc)) from None
    kind, label_names, main = info["kind"], info.get("label_names"), info["main_metric"]
    tokenizer = load_tokenizer(spec.path)
    device, autocast = TT.device_and_autocast(p.precision)
    train = TT.subsample(dd["train"], task["max_train_examples"], p.data_seed)
    features = TT.encode_train(kind, tokenizer, train, task)
    heldout = {"validation": TT.subsample(dd["validation"], task["max_validation_examples"], p.data_seed),
               "test": TT.subsample(dd["test"], task["max_test_examples"], p.data_seed)}
    evaluators = {s: TT.make_evaluator(kind, tokenizer, d, task, label_names, p.eval_batch_size, device, autocast)
                  for s, d in heldout.items()}
    collate = TT.collator(kind, tokenizer)
    log.info("%s on %s (%s): %d train examples (%d features), %d validation, %d test, seeds %s", model_name,
             task_name, kind, len(train), len(features), len(heldout["validation"]), len(heldout["test"]), p.seeds)

    def settings(seed: int, epochs: int) -> TT.TrainSettings:
        return TT.TrainSettings(
            learning_rate=spec.learning_rate, epochs=epochs, batch_size=task["batch_size"],
            warmup_ratio=p.warmup_ratio, weight_decay=p.weight_decay, max_grad_norm=p.max_grad_norm,
            patience=p.early_stopping_patience, evals_per_epoch=p.evals_per_epoch,
            eval_batch_size=p.eval_batch_size, precision=p.precision, seed=seed)

    def one_run(seed: int, feats: list[dict[str, Any]], epochs: int, prefix: str = ""):
        model = TT.build_model(kind, spec.path, spec.init, spec.size, spec.pooling, label_names, len(tokenizer), seed)

        def on_eval(step: int, entry: dict[str, float]) -> None:
            if tracker is not None:
                tracker.log_metrics({f"{prefix}seed{seed}/{k}": v for k, v in entry.items() if k != "step"}, step=step)

        fit = TT.fit(model, feats, collate, settings(seed, epochs), evaluators["validation"], main, on_eval)
        return model, fit, evaluators["test"](model)

    epochs = spec.epochs or task["epochs"]
    timing: dict[str, list[float]] = {"train_seconds": [], "train_cpu_seconds": [], "low_resource_train_seconds": [],
                                      "low_resource_train_cpu_seconds": []}
    val, test, saved = [], [], None
    history: list[dict[str, Any]] = []
    for seed in p.seeds:
        (model, fit, test_m), secs, cpu = TT.timed(lambda seed=seed: one_run(seed, features, epochs))
        timing["train_cpu_seconds"].append(round(cpu, 2))
        val.append(fit.best_validation)
        test.append(test_m)
        timing["train_seconds"].append(round(secs, 2))
        history.append({"seed": seed, "best_step": fit.best_step, "steps": fit.steps, "history": fit.history})
        log.info("seed %d: test %s %.4f (%.0f s)", seed, main, test_m[main], secs)
        if saved is None:
            saved = model
    low: dict[str, Any] | None = None
    if task_name in p.low_resource_tasks:
        n = min(p.low_resource_train_examples, len(dd["train"]))
        small = TT.encode_train(kind, tokenizer, TT.subsample(dd["train"], n, p.data_seed), task)
        low_test, low_epochs = [], spec.low_resource_epochs or p.low_resource_epochs or epochs
        for seed in p.seeds:
            (_, _, test_m), secs, cpu = TT.timed(lambda seed=seed: one_run(seed, small, low_epochs, "low_resource/"))
            timing["low_resource_train_cpu_seconds"].append(round(cpu, 2))
            low_test.append(test_m)
            timing["low_resource_train_seconds"].append(round(secs, 2))
            log.info("seed %d, %d examples: test %s %.4f", seed, n, main, test_m[main])
        low = {"train_examples": n, "epochs": low_epochs, "test": _summary(low_test)}
    metrics = {
        "model": model_name, "task": task_name, "kind": kind, "main_metric": main, "silver": bool(info.get("silver")),
        "model_path": spec.path, "init": spec.init, "seeds": list(p.seeds), "epochs": epochs, "train_examples": len(train),
        "validation_examples": len(heldout["validation"]), "test_examples": len(heldout["test"]),
        "test": _summary(test), "validation": _summary(val), "low_resource": low, "runs": history,
    }
    name = f"{model_name.replace('/', '--')}-{task_name}"
    with atomic_dir(MODELS_OUT / name) as tmp:
        saved.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    write_json(METRICS / f"{name}.json", metrics)
    if tracker is not None:
        flat = {f"test_{k}": v["mean"] for k, v in metrics["test"].items()}
        flat.update({f"validation_{k}": v["mean"] for k, v in metrics["validation"].items()})
        if low:
            flat.update({f"low_resource_test_{k}": v["mean"] for k, v in low["test"].items()})
        tracker.log_metrics(flat)
        tracker.log_metrics({"train_seconds": sum(timing["train_seconds"])})
        tracker.log_model_pointer(MODELS_OUT / name)
        tracker.log_artifact(METRICS / f"{name}.json")
    write_json(TIMING / f"{name}.json", {"model": model_name, "task": task_name, "device": str(device),
                                         "threads": torch.get_num_threads(),
                                         "total_seconds": round(sum(timing["train_seconds"]) +
                                                                sum(timing["low_resource_train_seconds"]), 2),
                                         **timing})
    return metrics


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.finetune", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a key of finetune.models, a folder or a hub name")
    parser.add_argument("--task", required=True, help="a task folder under data/tasks/")
    args = parser.parse_args(argv)
    params = load_params()
    p = params.finetune
    if p.num_threads:
        torch.set_num_threads(p.num_threads)
    section = p.model_dump(exclude={"models", "tasks"})
    section["model"] = resolve_model(args.model, p).model_dump()
    section["task"] = p.tasks[args.task].model_dump() if args.task in p.tasks else None
    with tracking.stage_run(f"finetune@{args.model}-{args.task}", section,
                            tags={"model": args.model, "task": args.task, "seeds": p.seeds}) as tracker:
        run(args.model, args.task, p, tracker, teacher_size=params.pretrain.model.size)


if __name__ == "__main__":
    run_main(main)
