"""Promotion on evidence: whether a challenger replaces the champion of a task, judged on the paired bootstrap of
their per-example validation records (:mod:`bert_pipeline.evaluation.examples`,
:mod:`bert_pipeline.evaluation.intervals`), not on a difference of two point scores.

Both sides are the registered weights: each member's best-validation seed (the one fine-tuning saves), so each
side's record is cut down to that seed's validation run (:func:`validation_record`). The two records must hold the
same validation examples against the same gold (equal split hash); the bootstrap then resamples whole clusters
with one draw matrix for both, so the examples both find hard cancel (Koehn 2004). The rules
(:class:`PromotionRule`):

- ``superiority``: the challenger minus the champion (main metric) has its lower bound above ``margin`` (a
  fraction of the metric; default 0: better at the chosen confidence).
- ``non_inferiority``: a challenger with fewer parameters than the champion replaces it when its share of the
  champion's score has its lower bound at least ``1 - margin`` (``margin`` 0.02: it keeps at least 98% of the
  champion's score); a challenger that is not smaller must show superiority (lower bound above 0).
- ``point``: the difference of the two point scores, as before (any gain moves the champion).

When the champion's record is not stored with its version, the champion is re-scored on the challenger's
validation examples (:func:`rescore_validation`) from its registered files: never compared unpaired.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_pipeline.errors import SettingError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, SplitInfo, check_paired
from bert_pipeline.evaluation.intervals import METHODS, Bootstrap, Interval

RULES = ("superiority", "non_inferiority", "point")
"""The promotion rules (see the module docstring)."""
SPLIT = "validation"
RUN = "full"


@dataclass(frozen=True)
class PromotionRule:
    """How ``champion`` may move: ``rule`` (one of :data:`RULES`), ``margin`` (a fraction in [0, 1): the lower
    bound a difference must exceed under ``superiority``; one minus the share a smaller challenger must keep under
    ``non_inferiority``; unused by ``point``), and the bootstrap's ``resamples``, ``confidence``, ``seed`` and
    ``method`` (:class:`bert_pipeline.evaluation.intervals.Bootstrap`).

    Raises:
        SettingError: an unknown rule or method, a margin outside [0, 1), resamples < 1, confidence outside (0, 1).
    """

    rule: str = "superiority"
    margin: float = 0.0
    resamples: int = 10_000
    confidence: float = 0.95
    seed: int = 0
    method: str = "percentile"

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise SettingError("rule", f"expected one of {', '.join(RULES)}, got {self.rule!r}")
        if not 0.0 <= self.margin < 1.0:
            raise SettingError("margin", f"expected a fraction in [0, 1), got {self.margin!r}")
        if self.resamples < 1:
            raise SettingError("resamples", f"expected >= 1, got {self.resamples!r}")
        if not 0.0 < self.confidence < 1.0:
            raise SettingError("confidence", f"expected a value in (0, 1), got {self.confidence!r}")
        if self.method not in METHODS:
            raise SettingError("method", f"expected one of {', '.join(METHODS)}, got {self.method!r}")

    @property
    def needs_records(self) -> bool:
        """Whether the rule compares per-example records (every rule but ``point``)."""
        return self.rule != "point"

    def bootstrap(self) -> Bootstrap:
        """A fresh :class:`Bootstrap` with these settings."""
        return Bootstrap(self.resamples, self.confidence, self.seed, self.method)


@dataclass(frozen=True)
class Verdict:
    """What :func:`judge` found: whether the challenger replaces the champion, why (a short clause such as
    ``lower bound not above 0.0``), and the interval it read (``statistic``: ``difference`` or ``share``)."""

    promoted: bool
    reason: str
    interval: Interval
    statistic: str = "difference"


def validation_record(record: ExampleRecord, seed: int | None, name: str = "record") -> ExampleRecord:
    """The part of a member's per-example record that belongs to its registered weights: the ``full`` run of
    ``seed`` (the saved, best-validation seed; None: the record's only seed) on the validation split.

    Raises:
        ExamplesError: no validation examples, no such seed (or several seeds and ``seed`` None); ``name`` names
            the record in the one-line message.
    """
    seeds = record.seeds(SPLIT, RUN)
    if SPLIT not in record.splits or not seeds:
        raise ExamplesError(f"{name}: no {RUN} run on {SPLIT} in its per-example record")
    if seed is None:
        if len(seeds) != 1:
            raise ExamplesError(f"{name}: {len(seeds)} seeds on {SPLIT} and no saved seed to choose one")
        seed = seeds[0]
    if int(seed) not in seeds:
        raise ExamplesError(f"{name}: no {SPLIT} run of the saved seed {seed} (seeds {', '.join(map(str, seeds))})")
    out = ExampleRecord(record.kind, record.main_metric, record.label_names, {SPLIT: record.splits[SPLIT]})
    out.runs[(SPLIT, RUN, int(seed))] = record.runs[(SPLIT, RUN, int(seed))]
    return out


def judge(challenger: ExampleRecord, champion: ExampleRecord, rule: PromotionRule,
          parameters: tuple[int | None, int | None] = (None, None)) -> Verdict:
    """Apply ``rule`` (``superiority`` or ``non_inferiority``) to two validation records of the main metric, each
    holding one seed (:func:`validation_record`); ``parameters``: the challenger's and the champion's parameter
    counts (``non_inferiority`` needs both).

    Raises:
        ExamplesError: the records are not paired (different examples, gold, kind or labels), or the champion
            scores 0 (a share of it is undefined).
        SettingError: the ``point`` rule (it needs no records: :func:`bert_pipeline.mlops.registry.decide`).
    """
    if not rule.needs_records:
        raise SettingError("rule", "the point rule compares two scores, not records")
    check_paired(challenger, champion, SPLIT, "the challenger", "the champion")
    metric = challenger.main_metric
    boot = rule.bootstrap()
    ours, theirs = (boot.estimates(r, SPLIT, RUN)[metric] for r in (challenger, champion))
    if rule.rule == "non_inferiority":
        mine, other = parameters
        if mine is not None and other is not None and mine < other:
            share = boot.ratio(ours, theirs)
            goal = 1.0 - rule.margin
            ok = share.low >= goal
            return Verdict(ok, f"{mine:,} vs {other:,} parameters, lower bound {'at least' if ok else 'below'} "
                               f"{100 * goal:.1f}%", share, "share")
        diff = boot.difference(ours, theirs)
        ok = diff.low > 0.0
        size = ("parameter count unknown" if mine is None or other is None else
                f"not smaller ({mine:,} vs {other:,} parameters)")
        return Verdict(ok, f"{size}, so superiority: lower bound {'above' if ok else 'not above'} 0.0", diff)
    diff = boot.difference(ours, theirs)
    ok = diff.low > rule.margin
    return Verdict(ok, f"lower bound {'above' if ok else 'not above'} {100 * rule.margin:.1f}", diff)


def weights_parameters(model_dir: Path) -> int | None:
    """The number of floating-point weights in a ``save_pretrained`` folder's safetensors files (from their
    headers, nothing loaded; integer buffers such as position ids left out; tied weights are stored once), or None
    when the folder has none."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with path.open("rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        for name, entry in header.items():
            if name != "__metadata__" and entry["dtype"].startswith(("F", "BF")):
                count = 1
                for dim in entry["shape"]:
                    count *= int(dim)
                total += count
    return total


def rescore_validation(model_dir: Path, task_dir: Path, task: dict[str, Any], data_seed: int, seed: int,
                       precision: str = "fp32", batch_size: int = 32) -> ExampleRecord:
    """Score the fine-tuned folder ``model_dir`` on the validation subset fine-tuning scored (at most
    ``task["max_validation_examples"]`` of ``task_dir``'s validation split, drawn with ``data_seed``; windows per
    ``task``'s ``max_length``/``doc_stride``) and return its per-example record: one ``full`` run under ``seed`` (the
    weights' own seed), with the split's ids, clusters and hash as fine-tuning writes them, so it pairs with a
    record fine-tuning wrote.

    Raises:
        PipelineError: the folder is not a loadable model, the task folder is missing, or its windows cannot be
            built (:class:`bert_pipeline.train.finetune_data.FinetuneError`).
    """
    from bert_pipeline import tasks
    from bert_pipeline.evaluation.examples import split_hash, split_keys
    from bert_pipeline.evaluation.predictor import load_predictor
    from bert_pipeline.train.finetune import make_evaluator
    from bert_pipeline.train.finetune_data import load_task, subsample_indices, task_windows
    from bert_pipeline.train.runtime import make_runtime

    pred = load_predictor(model_dir)
    dd, info = load_task(task_dir)
    names = info.get("label_names")
    rows = subsample_indices(len(dd[SPLIT]), task.get("max_validation_examples"), data_seed)
    ds = dd[SPLIT].select(rows)
    runtime = make_runtime(precision)
    with task_windows(Path(task_dir)):
        scorer = make_evaluator(info["kind"], pred.tokenizer, ds, task, names, batch_size, runtime)
    scores = scorer(pred.model.to(runtime.device))
    ids, clusters = split_keys(ds, rows, SPLIT)
    rec = ExampleRecord(info["kind"], info["main_metric"], list(names) if names is not None else None,
                        {SPLIT: SplitInfo(ids, clusters, split_hash(ids, scorer.references))})
    rec.add(SPLIT, RUN, seed, tasks.get(info["kind"]).example_columns(scorer.references, scores.predictions, names))
    return rec


def describe(interval: Interval, statistic: str, metric: str) -> str:
    """``validation METRIC -0.4 points [-2.9, +2.0]`` (a difference) or ``validation METRIC share 99.1% [97.5%,
    100.8%]`` (a share of the champion's score)."""
    if statistic == "share":
        return (f"validation {metric} share {100 * interval.point:.1f}% [{100 * interval.low:.1f}%, "
                f"{100 * interval.high:.1f}%]")
    return (f"validation {metric} {100 * interval.point:+.1f} points [{100 * interval.low:+.1f}, "
            f"{100 * interval.high:+.1f}]")

