"""Task-specific distillation: a fine-tuned teacher's logits, cached once, teach a half-depth student on the task.

"Distillation during fine-tuning" (Sanh et al. 2019, §4.2) with Hinton et al.'s (2015) soft targets:

1. :func:`transfer_set` picks the training-split rows the student learns from: the labelled subset the teacher was
   fine-tuned on (the same ``max_train_examples`` rows, drawn with the same ``data_seed``) plus, optionally, further
   rows of the *training* split that only the teacher labels (their gold labels are never read). Validation and
   test rows cannot enter it.
2. :func:`compute_teacher_logits` runs the teacher once over the transfer set's features and
   :func:`save_teacher_logits` writes them as ``.npy`` arrays (byte-identical on a CPU rerun), so a change of the
   student's settings never reruns the teacher.
3. :func:`distill_task` builds the student from some of the teacher's layers, its lowest or every other one
   (:func:`bert_pipeline.model.distillation.build_student`, task head included) and trains it, once per seed, with
   ``alpha_ce * KL(teacher || student at T) * T^2 + alpha_task * task loss``
   (:func:`task_distillation_loss`, each kind's soft and hard terms) in the fine-tuning loop
   (:func:`bert_pipeline.train.finetune_loop.fit`: early stopping on validation, test read once after).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset

from bert_pipeline import tasks
from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.errors import SettingError
from bert_pipeline.model import distillation
from bert_pipeline.tasks.base import LABEL_KEYS
from bert_pipeline.train.finetune import (
    FinetuneOutcome,
    example_record,
    forward_all,
    heldout_evaluators,
    metrics_record,
    run_seeds,
    timing_record,
)
from bert_pipeline.train.finetune_data import (
    FinetuneError,
    load_task,
    subsample_indices,
    task_windows,
)
from bert_pipeline.train.finetune_loop import TrainSettings, fit
from bert_pipeline.train.runtime import Runtime

log = logging.getLogger(__name__)

LOGITS_FILE = "logits.npy"
INDEX_FILE = "teacher_logits.json"


# ------------------------------------------------------------------------------------------ the transfer set
@dataclass(frozen=True)
class TransferSet:
    """Training-split rows the student learns from: ``labelled`` (the teacher's own fine-tuning subset; the task
    loss reads their gold labels) and ``teacher_only`` (soft targets only). Both sorted, disjoint."""

    labelled: list[int]
    teacher_only: list[int]

    @property
    def rows(self) -> list[int]:
        """``labelled + teacher_only``: the order of features and cached logits."""
        return self.labelled + self.teacher_only


def transfer_set(train_size: int, max_train_examples: int | None, teacher_only_examples: int,
                 data_seed: int) -> TransferSet:
    """The rows of a training split of ``train_size`` examples: the ``max_train_examples`` rows fine-tuning draws
    with ``data_seed`` (:func:`bert_pipeline.train.finetune_data.subsample_indices`), and up to
    ``teacher_only_examples`` of the remaining rows, drawn with the seed sequence ``[data_seed, 1]`` (fewer when fewer
    remain)."""
    labelled = subsample_indices(train_size, max_train_examples, data_seed)
    taken = set(labelled)
    rest = np.array([i for i in range(train_size) if i not in taken], dtype=np.int64)
    n = min(teacher_only_examples, len(rest))
    extra = np.sort(np.random.default_rng([data_seed, 1]).choice(rest, size=n, replace=False)) if n else rest[:0]
    return TransferSet(labelled, extra.tolist())


@dataclass
class TransferFeatures:
    """Model-ready features of a transfer set, in :attr:`TransferSet.rows` order (a NER or QA example may give
    several windows): ``features`` (labels ``-100`` on teacher-only rows) and ``scored`` (NER: per position, True at
    each word's first sub-token, the positions the task and the soft-target term score; None for the other kinds)."""

    features: list[dict[str, list[int]]]
    scored: list[list[bool]] | None


def transfer_features(kind: str, tokenizer, train: Dataset, rows: TransferSet, task: dict[str, Any]) -> TransferFeatures:
    """Encode the transfer set's rows as fine-tuning encodes its training set
    (:meth:`bert_pipeline.tasks.base.TaskKind.encode_train`), then blank the labels of teacher-only rows to
    ``-100`` (the task loss never reads them).

    Raises:
        ValueError: windows that ``task``'s ``max_length`` / ``doc_stride`` cannot build.
    """
    task_kind = tasks.get(kind)
    out = TransferFeatures([], [] if task_kind.position_mask else None)
    for part, blank in ((rows.labelled, False), (rows.teacher_only, True)):
        if not part:
            continue
        for feature in task_kind.encode_train(tokenizer, train.select(part), task):
            if out.scored is not None:  # read before a teacher-only row's labels are blanked
                out.scored.append(task_kind.scored_positions(feature))
            if blank:
                feature = {key: ([IGNORE_INDEX] * len(value) if isinstance(value, list) else IGNORE_INDEX)
                           if key in LABEL_KEYS else value for key, value in feature.items()}
            out.features.append(feature)
    return out


def check_distillable(task_dir: Path, kind: str) -> None:
    """Refuse a task whose kind task-specific distillation does not serve (:attr:`bert_pipeline.tasks.base.TaskKind.
    distillable`: no distribution to match), before any model is loaded.

    Raises:
        FinetuneError: naming the task and its kind.
    """
    if not tasks.get(kind).distillable:
        raise FinetuneError(f"{task_dir.name}: a {kind} task has no distribution for task-specific distillation to "
                            f"match; leave it out of the teacher_logits and distill_task stages")


# ------------------------------------------------------------------------------------------ teacher logits
@dataclass
class TeacherLogits:
    """The teacher's logits on each transfer-set feature, in feature order: classification ``(num_labels,)``,
    NER ``(seq_len, num_labels)``, QA ``(seq_len, 2)`` (start, end), float32 each; ``record`` is the index file
    (:func:`save_teacher_logits`)."""

    logits: list[np.ndarray]
    record: dict[str, Any]


def compute_teacher_logits(teacher, tokenizer, kind: str, features: TransferFeatures, batch_size: int,
                           runtime: Runtime) -> list[np.ndarray]:
    """One inference pass of ``teacher`` (eval mode, no gradient, on ``runtime``'s device and autocast) over
    ``features``, batched by length (:func:`bert_pipeline.train.finetune.forward_all`).

    Returns:
        per feature float32: classification ``(num_labels,)``, NER ``(seq_len, num_labels)``, QA ``(seq_len, 2)``
        (start and end logits stacked).
    """
    from transformers import DataCollatorWithPadding

    pad = DataCollatorWithPadding(tokenizer, return_tensors="pt")
    out = forward_all(runtime.place(teacher), features.features, pad, batch_size, runtime)
    return tasks.get(kind).teacher_logits(out)


def save_teacher_logits(folder: Path, logits: Sequence[np.ndarray], record: dict[str, Any]) -> None:
    """Write ``logits.npy`` (every feature's logits concatenated along the first axis, float32) and
    ``teacher_logits.json`` (``record`` plus ``lengths``: rows per feature, and ``shape``) into ``folder``, an
    empty folder the caller makes atomic. Both byte-identical for the same logits."""
    from bert_pipeline.io import write_json

    lengths = [1 if x.ndim == 1 else int(x.shape[0]) for x in logits]
    flat = np.concatenate([x.reshape(1, -1) if x.ndim == 1 else x for x in logits], axis=0).astype("<f4")
    np.save(folder / LOGITS_FILE, flat, allow_pickle=False)
    write_json(folder / INDEX_FILE, {**record, "shape": list(flat.shape), "lengths": lengths})


def load_teacher_logits(folder: Path) -> TeacherLogits:
    """Read what :func:`save_teacher_logits` wrote.

    Raises:
        FinetuneError: a file missing or the arrays not matching the index (names the folder and the stage that
            writes it).
    """
    index, array = folder / INDEX_FILE, folder / LOGITS_FILE
    if not index.is_file() or not array.is_file():
        raise FinetuneError(f"{folder}: no cached teacher logits (expected {INDEX_FILE} and {LOGITS_FILE}; "
                            f"run `dvc repro teacher_logits@{folder.name}`)")
    record = json.loads(index.read_text(encoding="utf-8"))
    flat = np.load(array, allow_pickle=False)
    lengths = record["lengths"]
    if flat.shape[0] != sum(lengths):
        raise FinetuneError(f"{array}: {flat.shape[0]} rows, but {INDEX_FILE} lists {sum(lengths)}; rerun "
                            f"`dvc repro teacher_logits@{folder.name}`")
    cuts = np.cumsum([0, *lengths])
    single = tasks.get(record["kind"]).per_example
    return TeacherLogits([flat[a] if single else flat[a:b] for a, b in zip(cuts[:-1], cuts[1:], strict=True)], record)


def label_task(task_dir: Path, teacher_dir: Path, task: dict[str, Any], *, teacher_only_examples: int,
               data_seed: int, batch_size: int, runtime: Runtime) -> TeacherLogits:
    """The teacher's logits on a task's transfer set (:func:`transfer_set`, :func:`compute_teacher_logits`) and the
    index record :func:`save_teacher_logits` writes beside them: the task, kind, teacher folder, the transfer set's
    training-split rows and their example ``id`` (and ``doc_id`` where the task has one: NER, QA), and the feature
    count.

    Raises:
        FinetuneError: a missing task folder or split, or windows that cannot be built.
        PipelineError: the teacher folder is not a loadable fine-tuned model.
    """
    from bert_pipeline.evaluation.predictor import load_predictor

    dd, info = load_task(task_dir)
    check_distillable(task_dir, info["kind"])
    kind, train = info["kind"], dd["train"]
    rows = transfer_set(len(train), task["max_train_examples"], teacher_only_examples, data_seed)
    teacher = load_predictor(teacher_dir)
    with task_windows(task_dir):
        features = transfer_features(kind, teacher.tokenizer, train, rows, task)
    logits = compute_teacher_logits(teacher.model, teacher.tokenizer, kind, features, batch_size, runtime)
    picked = train.select(rows.rows)
    record: dict[str, Any] = {
        "task": task_dir.name, "kind": kind, "teacher_path": Path(teacher_dir).as_posix(),
        "labelled_rows": rows.labelled, "teacher_only_rows": rows.teacher_only, "features": len(features.features),
        "ids": list(picked["id"]) if "id" in picked.column_names else None,
        "doc_ids": list(picked["doc_id"]) if "doc_id" in picked.column_names else None,
    }
    log.info("%s: teacher %s labelled %d + %d teacher-only examples (%d features)", task_dir.name, teacher_dir,
             len(rows.labelled), len(rows.teacher_only), len(features.features))
    return TeacherLogits(logits, record)


# ----------------------------------------------------------------------------------------- the objective
@dataclass
class TaskDistillationLoss:
    """``total = alpha_ce * soft + alpha_task * hard`` and its unweighted terms (scalar tensors)."""

    total: torch.Tensor
    soft: torch.Tensor
    hard: torch.Tensor


def task_distillation_loss(kind: tasks.TaskKind, student_logits: Any, teacher_logits: Any, labels: Any,
                           mask: torch.Tensor | None, *, temperature: float, alpha_ce: float,
                           alpha_task: float) -> TaskDistillationLoss:
    """Task-specific distillation (Sanh et al. 2019, §4.2; Hinton et al. 2015):
    ``alpha_ce * soft_target_loss + alpha_task * hard_target_loss``, each term the kind's
    (:meth:`~bert_pipeline.tasks.base.TaskKind.soft_target_loss`, :meth:`~bert_pipeline.tasks.base.TaskKind.
    hard_target_loss`, which give the shapes per kind).

    Raises:
        ValueError: a negative weight, both weights 0, ``temperature`` <= 0 or a kind without a distribution to
            match (regression).
    """
    if min(alpha_ce, alpha_task) < 0 or max(alpha_ce, alpha_task) <= 0:
        raise ValueError(f"alpha_ce, alpha_task: expected >= 0 and not both 0, got {(alpha_ce, alpha_task)}")
    soft = kind.soft_target_loss(student_logits, teacher_logits, mask, temperature)
    hard = kind.hard_target_loss(student_logits, labels)
    return TaskDistillationLoss(total=alpha_ce * soft + alpha_task * hard, soft=soft.detach(), hard=hard.detach())


def distillation_objective(kind: str, cached: Sequence[np.ndarray], scored: Sequence[Sequence[bool]] | None, *,
                           temperature: float, alpha_ce: float, alpha_task: float) -> Callable[..., torch.Tensor]:
    """The loss hook of :func:`bert_pipeline.train.finetune_loop.fit` for task-specific distillation: the student's
    logits on the batch against the cached teacher logits of the same features
    (:func:`task_distillation_loss`; the kind lays out the batch's teacher logits,
    :meth:`~bert_pipeline.tasks.base.TaskKind.teacher_batch`, and the student's,
    :meth:`~bert_pipeline.tasks.base.TaskKind.student_terms`)."""
    task_kind = tasks.get(kind)

    def loss_fn(model, batch: dict[str, torch.Tensor], indices: list[int]) -> torch.Tensor:
        inputs = {k: v for k, v in batch.items() if k not in LABEL_KEYS}
        out = model(**inputs)
        teacher, mask = task_kind.teacher_batch(cached, scored, indices, batch["input_ids"].shape[1])
        student, teacher, labels, mask = task_kind.student_terms(out, batch, teacher, mask)
        return task_distillation_loss(task_kind, student, teacher, labels, mask, temperature=temperature,
                                      alpha_ce=alpha_ce, alpha_task=alpha_task).total

    return loss_fn


# ---------------------------------------------------------------------------------------- one student
@dataclass(frozen=True)
class StudentSpec:
    """How the student is built and trained: ``student_layers`` (None: half the teacher's), which teacher layers
    initialise them (``layer_selection``: "bottom" or "uniform", :func:`bert_pipeline.model.distillation.layer_map`),
    the loss weights and temperature, the learning rate, and the epochs cap (None: the task's)."""

    student_layers: int | None
    layer_selection: str
    temperature: float
    alpha_ce: float
    alpha_task: float
    learning_rate: float
    epochs: int | None


def distill_task(
    task_dir: Path, teacher_dir: Path, logits_dir: Path, spec: StudentSpec, task: dict[str, Any], *,
    teacher_only_examples: int, seeds: Sequence[int], data_seed: int, runtime: Runtime, warmup_ratio: float,
    weight_decay: float,
    max_grad_norm: float, early_stopping_patience: int, evals_per_epoch: int, eval_batch_size: int,
    on_eval: Callable[[str, int, dict[str, float]], None] | None = None,
) -> FinetuneOutcome:
    """Distil the fine-tuned ``teacher_dir`` into a shallower student (``spec``), once per seed, on the transfer
    set (:func:`transfer_set` of ``task``'s ``max_train_examples``, ``teacher_only_examples`` and ``data_seed``)
    whose teacher logits ``logits_dir`` caches (:func:`label_task`), with early stopping on the validation metric; score the best
    weights on the test split (the same held-out subsets fine-tuning scores,
    :func:`bert_pipeline.train.finetune.heldout_evaluators`).

    Returns:
        :class:`bert_pipeline.train.finetune.FinetuneOutcome`: the metrics record (fine-tuning's keys plus
        ``distillation``: layers, layer map, loss weights, transfer-set sizes, teacher and student parameters),
        timing, and the best-validation seed's student with the teacher's tokenizer (the record's ``saved``).

    Raises:
        FinetuneError: a missing task or logits folder, logits that do not match the transfer set's features
            (stale cache), windows that cannot be built, or a non-finite loss.
        SettingError: ``student_layers`` (``spec.student_layers``) outside 1..the teacher's depth, or
            ``layer_selection`` not one the library knows.
    """
    from bert_pipeline.evaluation.predictor import load_predictor
    from bert_pipeline.model.configs import count_parameters

    if spec.layer_selection not in distillation.LAYER_SELECTIONS:
        raise SettingError("layer_selection", f"expected one of {', '.join(distillation.LAYER_SELECTIONS)}, got "
                           f"{spec.layer_selection!r}")
    dd, info = load_task(task_dir)
    check_distillable(task_dir, info["kind"])
    kind, main = info["kind"], info["main_metric"]
    cache = load_teacher_logits(logits_dir)
    rows = transfer_set(len(dd["train"]), task["max_train_examples"], teacher_only_examples, data_seed)
    if (rows.labelled, rows.teacher_only) != (cache.record["labelled_rows"], cache.record["teacher_only_rows"]) \
            or cache.record["teacher_path"] != Path(teacher_dir).as_posix():
        raise FinetuneError(f"{logits_dir}: the cached teacher logits are of another transfer set or teacher than "
                            f"these settings give; rerun `dvc repro teacher_logits@{task_dir.name}`")
    teacher = load_predictor(teacher_dir)
    tokenizer = teacher.tokenizer
    with task_windows(task_dir):
        features = transfer_features(kind, tokenizer, dd["train"], rows, task)
    lengths = [1 if tasks.get(kind).per_example else len(f["input_ids"]) for f in features.features]
    if lengths != cache.record["lengths"]:
        raise FinetuneError(f"{logits_dir}: the cached teacher logits do not match the transfer set's features "
                            f"({len(cache.logits)} cached, {len(lengths)} now); rerun `dvc repro teacher_logits@"
                            f"{task_dir.name}`")
    heldout, evaluators = heldout_evaluators(task_dir, dd, info, tokenizer, task, data_seed, eval_batch_size, runtime)
    depth = teacher.model.config.num_hidden_layers
    layers = distillation.resolve_student_layers(spec.student_layers, depth, teacher_dir)
    objective = distillation_objective(kind, cache.logits, features.scored, temperature=spec.temperature,
                                       alpha_ce=spec.alpha_ce, alpha_task=spec.alpha_task)
    collate = tasks.get(kind).collator(tokenizer)
    epochs = spec.epochs or task["epochs"]
    log.info("%s -> %d-layer student on %s: %d labelled + %d teacher-only examples (%d features), seeds %s",
             teacher_dir, layers, task_dir.name, len(rows.labelled), len(rows.teacher_only), len(features.features),
             list(seeds))

    mapping = distillation.layer_map(depth, layers, spec.layer_selection)

    def one_run(seed: int):
        torch.manual_seed(seed)
        student, _ = distillation.build_student(teacher.model, layers, spec.layer_selection)
        settings = TrainSettings(
            learning_rate=spec.learning_rate, epochs=epochs, batch_size=task["batch_size"], warmup_ratio=warmup_ratio,
            weight_decay=weight_decay, max_grad_norm=max_grad_norm, patience=early_stopping_patience,
            evals_per_epoch=evals_per_epoch, eval_batch_size=eval_batch_size, seed=seed)
        report = (lambda step, entry: on_eval(f"seed{seed}/", step, entry)) if on_eval else None
        result = fit(student, features.features, collate, settings, evaluators["validation"], main, runtime, report,
                     loss_fn=objective)
        return student, result, evaluators["test"](student)

    runs = run_seeds(seeds, one_run, main)
    saved, saved_scores = runs.saved(seeds, main)
    metrics = metrics_record(info, Path(teacher_dir).as_posix(), "distilled", seeds, epochs, len(rows.labelled),
                             heldout, runs.test, runs.validation, runs.history, None)
    metrics["saved"] = saved_scores
    metrics["distillation"] = {
        "method": "task-specific (Sanh et al. 2019, §4.2)", "teacher_path": Path(teacher_dir).as_posix(),
        "teacher_layers": teacher.model.config.num_hidden_layers, "student_layers": layers,
        "layer_selection": spec.layer_selection, "layer_map": mapping,
        "temperature": spec.temperature, "alpha_ce": spec.alpha_ce, "alpha_task": spec.alpha_task,
        "labelled_examples": len(rows.labelled), "teacher_only_examples": len(rows.teacher_only),
        "features": len(features.features),
        "teacher_parameters": {"total": count_parameters(teacher.model),
                               "encoder": count_parameters(teacher.model.base_model, exclude_embeddings=True)},
        "student_parameters": {"total": count_parameters(saved),
                               "encoder": count_parameters(saved.base_model, exclude_embeddings=True)},
    }
    timing = {"train_seconds": runs.train_seconds, "train_cpu_seconds": runs.train_cpu_seconds}
    examples = example_record(info, dd, heldout, task, data_seed, evaluators, {"full": (seeds, runs)})
    return FinetuneOutcome(metrics, timing_record(runtime.device, timing), saved, tokenizer, examples)
