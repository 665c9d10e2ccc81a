"""Fine-tuning one model on one task: evaluation, the runs over seeds and grid settings, and the records
(:func:`finetune_task`).

The task data and its encoding: :mod:`bert_pipeline.train.finetune_data`; the model and the training loop with
early stopping (the standard BERT fine-tuning recipe): :mod:`bert_pipeline.train.finetune_loop`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset, DatasetDict

from bert_pipeline import tasks
from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash, split_keys
from bert_pipeline.tasks import HeldoutScorer
from bert_pipeline.train.finetune_data import (
    FinetuneError,
    load_task,
    subsample,
    subsample_indices,
    task_windows,
)
from bert_pipeline.train.finetune_loop import FitResult, TrainSettings, build_model, fit
from bert_pipeline.train.runtime import Runtime

log = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ evaluation
@torch.no_grad()
def forward_all(model, features: list[dict[str, list[int]]], collate, batch_size: int, runtime: Runtime) -> list[Any]:
    """Logits for every feature (batched by length, returned in input order), on ``runtime``'s device and autocast
    (the model must be on that device).

    Returns:
        per feature: ``logits`` ``(num_labels,)`` / ``(seq_len, num_labels)``, or ``(start, end)`` ``(seq_len,)``
        each, as float32 numpy arrays cut to the feature's own length.
    """
    model.eval()
    order = sorted(range(len(features)), key=lambda i: len(features[i]["input_ids"]))
    out: list[Any] = [None] * len(features)
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        batch = collate([{kk: v for kk, v in features[i].items() if kk in ("input_ids", "attention_mask",
                                                                           "token_type_ids")} for i in idx])
        batch = runtime.to_device(batch)
        with runtime.autocast():
            res = model(**batch)
        if hasattr(res, "start_logits") and res.start_logits is not None:
            s, e = res.start_logits.float().cpu().numpy(), res.end_logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                out[i] = (s[j, :n], e[j, :n])
        else:
            logits = res.logits.float().cpu().numpy()
            for j, i in enumerate(idx):
                out[i] = logits[j] if logits.ndim == 2 else logits[j, :len(features[i]["input_ids"])]
    return out


def make_evaluator(kind: str, tokenizer, ds: Dataset, task: dict[str, Any], label_names: Sequence[str] | None,
                   batch_size: int, runtime: Runtime) -> HeldoutScorer:
    """A :class:`~bert_pipeline.tasks.base.HeldoutScorer` on ``ds``, called as ``model -> metrics`` (the kind's:
    :meth:`~bert_pipeline.tasks.base.TaskKind.scorer`; features encoded once, the model run on ``runtime``)."""

    def forward(model, features, collate):
        return forward_all(model, features, collate, batch_size, runtime)
    return tasks.get(kind).scorer(tokenizer, ds, task, label_names, forward)


def heldout_evaluators(task_dir: Path, dd: DatasetDict, info: dict[str, Any], tokenizer, task: dict[str, Any],
                       data_seed: int, eval_batch_size: int, runtime: Runtime
                       ) -> tuple[dict[str, Dataset], dict[str, HeldoutScorer]]:
    """The validation and test subsets (``max_validation_examples`` / ``max_test_examples`` drawn with
    ``data_seed``) and a :class:`HeldoutScorer` for each (:func:`make_evaluator`): the same held-out
    examples for every family member of a task, distilled students included.

    Raises:
        FinetuneError: windows that ``max_length`` / ``doc_stride`` cannot build.
    """
    heldout = {"validation": subsample(dd["validation"], task["max_validation_examples"], data_seed),
               "test": subsample(dd["test"], task["max_test_examples"], data_seed)}
    with task_windows(task_dir):
        evaluators = {s: make_evaluator(info["kind"], tokenizer, d, task, info.get("label_names"), eval_batch_size,
                                        runtime) for s, d in heldout.items()}
    return heldout, evaluators


# ------------------------------------------------------------------------------------------ one combination
@dataclass(frozen=True)
class MemberSpec:
    """One family member to fine-tune: its folder (or hub name) ``path``; ``init`` ``pretrained`` (its weights)
    or ``random`` (its architecture and tokenizer only, or the named ``size``); learning rate (``None``: chosen
    from a :class:`Grid` on the validation split), pooling, and the epochs caps that override the task's
    (``None``: no override)."""

    path: str
    init: str
    size: str | None
    learning_rate: float | None
    pooling: str
    epochs: int | None
    low_resource_epochs: int | None


@dataclass(frozen=True)
class Grid:
    """The fine-tuning settings a member's runs are chosen from on the validation split (Devlin et al. 2019, §4:
    "we selected the best fine-tuning learning rate on the Dev set"): every learning rate with every epochs cap
    (``epochs`` for the full run, ``low_resource_epochs`` for the low-resource runs), each trained once per
    seed; the setting with the best mean validation main metric wins (ties: the first in grid order), and only
    its models are scored on test."""

    learning_rates: tuple[float, ...]
    epochs: tuple[int, ...]
    low_resource_epochs: tuple[int, ...]

    def settings(self, low_resource: bool = False) -> list[tuple[float, int]]:
        """``(learning_rate, epochs)`` in grid order: learning rates outer, epochs caps inner."""
        caps = self.low_resource_epochs if low_resource else self.epochs
        return [(rate, cap) for rate in self.learning_rates for cap in caps]


@dataclass
class FinetuneOutcome:
    """What :func:`finetune_task` produced: the metrics record (quality only, byte-identical on CPU), the timing
    record (wall and CPU seconds), and the best-validation seed's model with its tokenizer (what the stage saves;
    the record's ``saved`` names its seed and its own scores), and the per-example record of every seed's
    validation and test predictions (:func:`example_record`)."""

    metrics: dict[str, Any]
    timing: dict[str, Any]
    model: Any
    tokenizer: Any
    examples: ExampleRecord | None = None


def summarize_seeds(per_seed: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """``{metric: {"mean", "seeds": [...]}}`` rounded to 6 decimals."""
    out = {}
    for key in sorted(per_seed[0]):
        vals = [round(float(m[key]), 6) for m in per_seed]
        out[key] = {"mean": round(sum(vals) / len(vals), 6), "seeds": vals}
    return out


@dataclass
class SeedRuns:
    """One training run per seed: per seed the best validation metrics, the test metrics and the training history
    (``{"seed", "best_step", "steps", "scaler_skipped_steps", "history"}``), wall and CPU seconds; each seed's model (:meth:`saved` picks the one the stage saves)."""

    validation: list[dict[str, float]] = field(default_factory=list)
    test: list[dict[str, float]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    train_seconds: list[float] = field(default_factory=list)
    train_cpu_seconds: list[float] = field(default_factory=list)
    models: list[Any] = field(default_factory=list)

    def saved_index(self, main_metric: str) -> int:
        """The seed whose model is saved (and registered): the best validation ``main_metric`` (ties: the first
        seed), so the weights a user gets are chosen on validation, like everything else, and their own scores
        can be logged beside the seeds' mean."""
        return max(range(len(self.validation)), key=lambda i: (self.validation[i].get(main_metric, -1.0), -i))

    def saved(self, seeds: Sequence[int], main_metric: str) -> tuple[Any, dict[str, Any]]:
        """``(the saved model, {"seed", "validation", "test"})``: :meth:`saved_index`'s model, its seed and its own
        validation and test metrics (rounded to 6 decimals), for the metrics record's ``saved`` entry."""
        i = self.saved_index(main_metric)
        own = {"seed": seeds[i], "validation": {k: round(float(v), 6) for k, v in sorted(self.validation[i].items())}}
        if i < len(self.test):
            own["test"] = {k: round(float(v), 6) for k, v in sorted(self.test[i].items())}
        return self.models[i], own


def run_seeds(seeds: Sequence[int], one_run: Callable[[int], tuple[Any, FitResult, dict[str, float]]],
              main_metric: str, label: str = "") -> SeedRuns:
    """Call ``one_run(seed) -> (model, fit result, test metrics)`` for each seed, timed
    (:func:`bert_pipeline.evaluation.speed.timed`), and collect what the metrics and timing records need;
    ``label`` follows the seed in the log (e.g. ``", 500 examples"``). ``one_run`` may return ``None`` for the
    test metrics (a grid point not yet chosen: :func:`choose_on_validation` scores the winner's models)."""
    from bert_pipeline.evaluation.speed import timed

    out = SeedRuns()
    for seed in seeds:
        (model, result, test_metrics), wall, cpu = timed(lambda seed=seed: one_run(seed))
        out.train_seconds.append(round(wall, 2))
        out.train_cpu_seconds.append(round(cpu, 2))
        out.validation.append(result.best_validation)
        out.history.append({"seed": seed, "best_step": result.best_step, "steps": result.steps,
                            "scaler_skipped_steps": result.scaler_skipped_steps, "history": result.history})
        out.models.append(model)
        if test_metrics is None:
            log.info("seed %d%s: validation %s %.4f (%.0f s)", seed, label, main_metric,
                     result.best_validation.get(main_metric, float("nan")), wall)
        else:
            out.test.append(test_metrics)
            log.info("seed %d%s: test %s %.4f (%.0f s)", seed, label, main_metric, test_metrics[main_metric], wall)
    return out


def choose_on_validation(settings: Sequence[tuple[float, int]], seeds: Sequence[int],
                         one_run: Callable[[int, float, int], tuple[Any, FitResult]], main_metric: str,
                         score_test: Callable[[Any], dict[str, float]], label: str = "",
                         ) -> tuple[tuple[float, int], SeedRuns, list[dict[str, Any]]]:
    """Train every ``(learning_rate, epochs)`` of ``settings`` once per seed, keep the one with the best mean
    validation ``main_metric`` (ties: the first), and score only its models with ``score_test`` (the test split
    is read once, after the choice).

    Returns:
        ``(chosen setting, its runs with test metrics filled, the grid record)``; the record has one entry per
        setting: ``{"learning_rate", "epochs", "validation": mean main metric, "train_seconds": summed}``.
    """
    best: tuple[float, tuple[float, int], SeedRuns] | None = None
    record = []
    for rate, epochs in settings:
        tag = f"{label}, lr {rate:g}, up to {epochs} epochs" if len(settings) > 1 else label
        runs = run_seeds(seeds, lambda seed, rate=rate, epochs=epochs: (*one_run(seed, rate, epochs), None),
                         main_metric, tag)
        score = sum(v.get(main_metric, 0.0) for v in runs.validation) / len(runs.validation)
        record.append({"learning_rate": rate, "epochs": epochs, "validation": round(score, 6),
                       "train_seconds": round(sum(runs.train_seconds), 2)})
        if best is None or score > best[0]:
            best = (score, (rate, epochs), runs)
    _, chosen, runs = best
    if len(settings) > 1:
        log.info("chosen on validation%s: lr %g, up to %d epochs (mean %s %.4f)", label, chosen[0], chosen[1],
                 main_metric, best[0])
    runs.test = [score_test(model) for model in runs.models]
    return chosen, runs, record


def finetune_task(
    task_dir: Path, member: MemberSpec, task: dict[str, Any], *, seeds: Sequence[int], data_seed: int,
    runtime: Runtime, warmup_ratio: float, weight_decay: float, max_grad_norm: float, early_stopping_patience: int,
    evals_per_epoch: int, eval_batch_size: int, low_resource_train_examples: int | None,
    low_resource_epochs: int | None, on_eval: Callable[[str, int, dict[str, float]], None] | None = None,
    grid: Grid | None = None,
) -> FinetuneOutcome:
    """Fine-tune ``member`` on the task in ``task_dir`` once per seed, with early stopping on the validation metric
    (Devlin et al. 2019, §4 and A.3), and score the best weights on the test split; with
    ``low_resource_train_examples``, again on that many labelled examples.

    Args:
        task_dir: a task folder (``DatasetDict`` + ``task.json``, :func:`load_task`).
        task: the task's knobs (``max_*_examples``, ``max_length``, ``epochs``, ``batch_size``, QA's
            ``doc_stride``, ``n_best``, ``max_answer_length``).
        seeds: one run per seed; ``data_seed`` draws the ``max_*_examples`` subsets (:func:`subsample`).
        runtime: the stage's :class:`~bert_pipeline.train.runtime.Runtime` (device, autocast, fp16 loss scaler);
            the models it returns stay on its device.
        low_resource_train_examples: ``None`` skips the low-resource runs; ``low_resource_epochs`` caps their
            epochs (``member.low_resource_epochs`` wins, then this, then the full run's).
        on_eval: called with ``(prefix, step, entry)`` at each validation check (``prefix`` e.g. ``seed42/``).
        grid: where ``member.learning_rate`` is ``None``, the learning rates and epochs caps chosen from on
            validation (:func:`choose_on_validation`), separately for the full and the low-resource runs; the
            record's ``grid`` and ``learning_rate`` say what was tried and chosen.

    Raises:
        FinetuneError: a missing task folder or split, a member without a learning rate and no grid, or a
            non-finite loss.
        PipelineError: the member's tokenizer cannot be loaded.
    """
    from bert_pipeline.data.tokenizer import load_tokenizer

    dd, info = load_task(task_dir)
    kind, label_names, main = info["kind"], info.get("label_names"), info["main_metric"]
    missing = [k for k in tasks.get(kind).window_keys if task.get(k) is None]
    if missing:
        raise FinetuneError(f"finetune.tasks.{task_dir.name}.{missing[0]}: required for a {kind.upper()} task, got null")
    tokenizer = load_tokenizer(member.path)
    train = subsample(dd["train"], task["max_train_examples"], data_seed)
    heldout, evaluators = heldout_evaluators(task_dir, dd, info, tokenizer, task, data_seed, eval_batch_size, runtime)
    with task_windows(task_dir):
        features = tasks.get(kind).encode_train(tokenizer, train, task)
    collate = tasks.get(kind).collator(tokenizer)
    log.info("%s on %s (%s): %d train examples (%d features), %d validation, %d test, seeds %s", member.path,
             task_dir.name, kind, len(train), len(features), len(heldout["validation"]), len(heldout["test"]), seeds)

    if member.learning_rate is None and grid is None:
        raise FinetuneError(f"{member.path}: no learning rate and no grid to choose one from")

    def one_run(seed: int, feats: list[dict[str, Any]], rate: float, epochs: int, prefix: str = ""):
        model = build_model(kind, member.path, member.init, member.size, member.pooling, label_names,
                            len(tokenizer), seed)
        settings = TrainSettings(
            learning_rate=rate, epochs=epochs, batch_size=task["batch_size"],
            warmup_ratio=warmup_ratio, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
            patience=early_stopping_patience, evals_per_epoch=evals_per_epoch, eval_batch_size=eval_batch_size,
            seed=seed)
        tag = prefix + (f"lr{rate:g}-epochs{epochs}/" if member.learning_rate is None else "")  # grid settings apart
        report = (lambda step, entry: on_eval(f"{tag}seed{seed}/", step, entry)) if on_eval else None
        return model, fit(model, feats, collate, settings, evaluators["validation"], main, runtime, report)

    def settings_for(low_resource: bool) -> list[tuple[float, int]]:
        if member.learning_rate is None:
            return grid.settings(low_resource)
        epochs = member.epochs or task["epochs"]
        if low_resource:
            epochs = member.low_resource_epochs or low_resource_epochs or epochs
        return [(member.learning_rate, epochs)]

    (rate, epochs), runs, tried = choose_on_validation(
        settings_for(False), seeds, lambda seed, rate, cap: one_run(seed, features, rate, cap), main,
        evaluators["test"])
    timing: dict[str, list[float]] = {"train_seconds": runs.train_seconds, "train_cpu_seconds": runs.train_cpu_seconds,
                                      "low_resource_train_seconds": [], "low_resource_train_cpu_seconds": []}
    if len(tried) > 1:
        timing["grid_train_seconds"] = round(sum(t.pop("train_seconds") for t in tried), 2)
    else:
        tried[0].pop("train_seconds")
    validation, test, history = runs.validation, runs.test, runs.history
    saved, saved_scores = runs.saved(seeds, main)
    low: dict[str, Any] | None = None
    if low_resource_train_examples is not None:
        n = min(low_resource_train_examples, len(dd["train"]))
        small = tasks.get(kind).encode_train(tokenizer, subsample(dd["train"], n, data_seed), task)
        (low_rate, low_epochs), low_runs, low_tried = choose_on_validation(
            settings_for(True), seeds, lambda seed, rate, cap: one_run(seed, small, rate, cap, "low_resource/"),
            main, evaluators["test"], f", {n} examples")
        timing["low_resource_train_seconds"] = low_runs.train_seconds
        timing["low_resource_train_cpu_seconds"] = low_runs.train_cpu_seconds
        if len(low_tried) > 1:
            timing["low_resource_grid_train_seconds"] = round(sum(t.pop("train_seconds") for t in low_tried), 2)
        low = {"train_examples": n, "epochs": low_epochs, "test": summarize_seeds(low_runs.test)}
        if member.learning_rate is None:
            low.update(learning_rate=low_rate, validation=summarize_seeds(low_runs.validation),
                       grid=[{k: v for k, v in t.items() if k != "train_seconds"} for t in low_tried])
    metrics = metrics_record(info, member.path, member.init, seeds, epochs, len(train), heldout, test, validation,
                             history, low)
    metrics["learning_rate"] = rate
    metrics["saved"] = saved_scores
    if member.learning_rate is None:
        metrics["grid"] = tried
    examples = example_record(info, dd, heldout, task, data_seed, evaluators,
                              {"full": (seeds, runs), **({"low_resource": (seeds, low_runs)} if low else {})})
    return FinetuneOutcome(metrics, timing_record(runtime.device, timing), saved, tokenizer, examples)


def example_record(info: dict[str, Any], dd: DatasetDict, heldout: dict[str, Dataset], task: dict[str, Any],
                   data_seed: int, evaluators: dict[str, HeldoutScorer],
                   runs: dict[str, tuple[Sequence[int], SeedRuns]]) -> ExampleRecord:
    """The per-example record (:class:`~bert_pipeline.evaluation.examples.ExampleRecord`) of a member's runs on
    the held-out subsets :func:`heldout_evaluators` drew: per run (``full``, ``low_resource``), seed and split, the
    kind's columns of what each example contributed (the predictions kept with each seed's best validation
    metrics and its test metrics, :class:`~bert_pipeline.tasks.base.Scores`), with each split's ids, clusters and
    hash (``heldout``: those subsets; ``dd``: the whole splits, whose row numbers name examples without an id)."""
    kind = tasks.get(info["kind"])
    names = info.get("label_names")
    limits = {"validation": task["max_validation_examples"], "test": task["max_test_examples"]}
    rec = ExampleRecord(info["kind"], info["main_metric"], list(names) if names is not None else None)
    for split, scorer in evaluators.items():
        rows = subsample_indices(len(dd[split]), limits[split], data_seed)
        ids, clusters = split_keys(heldout[split], rows, split)
        rec.splits[split] = SplitInfo(ids, clusters, split_hash(ids, scorer.references))
    for run, (seeds, seed_runs) in runs.items():
        for split, scores in (("validation", seed_runs.validation), ("test", seed_runs.test)):
            for seed, s in zip(seeds, scores, strict=False):
                predictions = getattr(s, "predictions", None)
                if predictions is not None:
                    rec.add(split, run, seed, kind.example_columns(evaluators[split].references, predictions, names))
    return rec


def metrics_record(info: dict[str, Any], model_path: str, init: str, seeds: Sequence[int], epochs: int,
                   train_examples: int, heldout: dict[str, Dataset], test: list[dict[str, float]],
                   validation: list[dict[str, float]], history: list[dict[str, Any]],
                   low_resource: dict[str, Any] | None) -> dict[str, Any]:
    """The quality record of one member on one task (the stage's ``{model}-{task}.json`` without the stage's
    ``model`` and ``task`` keys): per-seed test and validation metrics (:func:`summarize_seeds`), the split sizes,
    each seed's training history. Byte-identical on CPU for the same inputs and params."""
    return {
        "kind": info["kind"], "main_metric": info["main_metric"], "silver": bool(info.get("silver")),
        "model_path": model_path, "init": init, "seeds": list(seeds), "epochs": epochs,
        "train_examples": train_examples, "validation_examples": len(heldout["validation"]),
        "test_examples": len(heldout["test"]), "test": summarize_seeds(test),
        "validation": summarize_seeds(validation), "low_resource": low_resource, "runs": history,
    }


def timing_record(device: torch.device, timing: dict[str, list[float]]) -> dict[str, Any]:
    """The wall-clock record (the stage's timing file): device, threads, total and per-seed seconds (of the
    chosen setting; ``grid_train_seconds`` and ``low_resource_grid_train_seconds``, when a grid was tried, are
    every setting's, and the total counts them)."""
    total = (timing.get("grid_train_seconds") or sum(timing.get("train_seconds", ()))) + (
        timing.get("low_resource_grid_train_seconds") or sum(timing.get("low_resource_train_seconds", ())))
    return {"device": str(device), "threads": torch.get_num_threads(), "total_seconds": round(total, 2), **timing}
