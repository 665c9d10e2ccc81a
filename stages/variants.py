"""Stage ``variants``: BERT, RoBERTa, ALBERT, ModernBERT and DeBERTa pre-trained at the same size from the same
corpus, each fine-tuned on the same tasks beside its own from-scratch baseline, for the report's table beside the
published figures (:mod:`bert_pipeline.report.variants`).

    python -m stages.variants        (dvc repro variants; profile `variants` lists the families and their budgets)

For each family of ``variants.families`` (none by default: the stage then writes an empty record and costs
nothing), with the recipe of :data:`bert_pipeline.report.variants.RECIPES`:

1. its own vocabulary on ``data/corpus/`` (``train_tokenizer``'s settings, the recipe's ``model``), the same code
   as the ``train_tokenizer`` stage;
2. its own pre-training data (``create_pretraining_data``'s settings, the recipe's ``objective``, ``masking`` and,
   for the pair objectives NSP and SOP, ``packing: sentences``), the same code as ``create_pretraining_data``;
3. pre-training from scratch with every ``pretrain`` setting (size, batch, schedule, warmup, phases) but the
   recipe's ``pretrain.model`` overrides (``family``; ALBERT's ``share_layers`` and ``embedding_size``) and the
   family's ``variants.budgets`` entry (its own ``max_steps`` and peak ``learning_rate``, for a screen at equal
   wall time; none: ``pretrain``'s), one process, the same code as ``pretrain``;
4. fine-tuning on each of ``variants.tasks`` with ``finetune.models[variants.member]``'s settings at
   ``finetune.seeds``, the same code as ``finetune``; with ``variants.scratch``, the family's own scratch too: the
   same config and vocabulary (its pre-trained folder), every weight drawn afresh under each seed
   (``init: random``), the same settings and seeds, so the gain of pre-training is measured within the family.

Writes

- ``metrics/variants.json``: per family its recipe, parameters, steps, peak learning rate, tokens seen, held-out
  MLM loss (nats) and accuracy, and each task's main metric (test mean, per-seed test values, validation mean) for
  the pre-trained model and, with ``variants.scratch``, its scratch; every test figure with its interval
  (``ci_low``, ``ci_high``, ``sources``): each score, the mean over tasks, the gain over the family's own scratch
  and, when ``bert`` is a family, each other family's difference from it (the paired bootstrap of the members'
  per-example records, ``evaluate.intervals``' ``resamples``, ``confidence``, ``seed``, ``method``) (quality only,
  byte-identical on CPU);
- ``metrics/examples-variants/{family}-{member}-{task}.arrow`` and ``{family}-scratch-{task}.arrow``: the
  per-example record of each family's fine-tuning and its scratch's (every seed's validation and test predictions'
  statistics; byte-identical on CPU);
- ``metrics/headline/variants.json``: per family the average of the tasks' test main metrics (the DVC metric);
- ``metrics/variants-timing.json``: per family the wall and CPU seconds of each part (the scratch's fine-tuning
  apart) and the encoder's inference throughput, every family timed side by side in one call (``cache: false``).

A finished family is kept in ``checkpoints/variants/{family}/`` (its vocabulary, pre-trained model, per-example
records ``examples/`` and ``family.json``, fingerprinted by its params, inputs and this package's code), so a stopped
run resumes at the next family; its pre-training resumes from its own checkpoints.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.io import atomic_dir, atomic_write_text, write_json
from bert_pipeline.model.families import FAMILIES
from bert_pipeline.report.report import parse_finetune_metrics
from bert_pipeline.report.variants import (
    SIDES,
    albert_embedding_size,
    average,
    recipe_of,
    variants_record,
    with_intervals,
)
from stages import require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.variants import VariantsView

log = logging.getLogger(__name__)

CORPUS_DIR = Path("data/corpus")
METRICS = Path("metrics/variants.json")
EXAMPLES = Path("metrics/examples-variants")
TIMING = Path("metrics/variants-timing.json")
WORK = Path("checkpoints/variants")
PRETRAINED = "models/pretrained"
# What a family's result depends on besides its params: its inputs and the code that trains and scores it.
FAMILY_INPUTS = ("data/corpus", "data/tasks")
CODE = ("bert_pipeline", "stages")


def family_settings(family: str, params: VariantsView) -> dict[str, Any]:
    """The three sections one family trains with: ``train_tokenizer``, ``create_pretraining_data`` and
    ``pretrain`` (pydantic models), each the pipeline's own with the family's recipe applied (its vocabulary,
    objective, masking, packing where the recipe names one, model overrides) and its ``variants.budgets`` entry
    (``max_steps``, ``learning_rate``; null or no entry: ``pretrain``'s), each validated by its section's schema.

    Raises:
        PipelineError: an unknown family, or a budget the ``pretrain`` schema refuses (``max_steps`` below
            ``warmup_steps`` + ``head_only_steps``; one line naming ``variants.budgets.{family}``).
    """
    from bert_pipeline.model.sizes import SIZES
    from stages.params.base import ParamsError, validate_as
    from stages.params.create_pretraining_data import CreatePretrainingDataParams
    from stages.params.pretrain import PretrainParams
    from stages.params.train_tokenizer import TrainTokenizerParams

    recipe = recipe_of(family)
    tok_update: dict[str, Any] = {"model": recipe.tokenizer}
    if recipe.lowercase is not None:
        tok_update["lowercase"] = recipe.lowercase
    if recipe.tokenizer != "wordpiece":
        tok_update["bert_id_layout"] = False  # BERT's [unused] ids are WordPiece's layout
    # validated again: a recipe over the user's settings must pass the same schema as params.yaml
    tokenizer = TrainTokenizerParams.model_validate({**params.train_tokenizer.model_dump(), **tok_update})
    data_update = {"objective": recipe.objective, "masking": recipe.masking}
    if recipe.packing is not None:
        data_update["packing"] = recipe.packing  # NSP and SOP pairs need whole sentences, whatever the pipeline packs
    data = CreatePretrainingDataParams.model_validate({**params.create_pretraining_data.model_dump(), **data_update})
    pre = params.pretrain
    model_update = dict(recipe.model)
    if FAMILIES[family].factorised:  # ALBERT's factorised embedding, a sixth of the width
        hidden = int(pre.model.config.get("hidden_size") or SIZES[pre.model.size]["hidden_size"])
        model_update["embedding_size"] = albert_embedding_size(hidden)
    dumped = pre.model_dump()
    budget = params.variants.budgets.get(family)
    own = {k: v for k, v in (budget.model_dump() if budget is not None else {}).items() if v is not None}
    try:  # the pretrain schema checks warmup_steps (+ head_only_steps) <= the family's max_steps
        pretrain = validate_as(PretrainParams, {**dumped, **own, "init": "scratch",
                                                "model": {**dumped["model"], **model_update},
                                                "compute": {**dumped["compute"], "num_processes": 1}})
    except ParamsError as exc:
        if not own:
            raise
        raise PipelineError(f"params.yaml: variants.budgets.{family}: over pretrain's settings, "
                            f"{str(exc).removeprefix('params.yaml: ')}; give variants.budgets.{family}.max_steps at least "
                            f"{pre.warmup_steps + pre.head_only_steps} (pretrain.warmup_steps + head_only_steps), "
                            "or null for pretrain's own") from None
    return {"train_tokenizer": tokenizer, "create_pretraining_data": data, "pretrain": pretrain}


def task_score(record: dict[str, Any], source: str) -> dict[str, Any]:
    """One task's entry of a record row from its fine-tuning metrics record (``metrics/finetune``'s layout):
    ``{"metric", "mean", "seeds", "validation_mean"}``, the main metric's test mean over seeds, its per-seed test
    values and its mean validation score over seeds (the split each seed's run was chosen on), fractions rounded to
    6 decimals.

    Raises:
        PipelineError: the record misses a key (one line naming ``source``).
    """
    result = parse_finetune_metrics(record, source)
    main = result.main_metric
    validation = (record.get("validation") or {}).get(main) or {}
    if not isinstance(validation.get("mean"), int | float):
        raise PipelineError(f"{source}: validation.{main}.mean missing (main_metric is {main!r})")
    return {"metric": main, "mean": round(result.test[main], 6),
            "seeds": [round(v, 6) for v in result.test_seeds.get(main, ())],
            "validation_mean": round(float(validation["mean"]), 6)}


def member_name(family: str, side: str, member: str) -> str:
    """The name a family's fine-tuned member goes by in logs and file names: ``{family}-{member}`` (pre-trained)
    or ``{family}-scratch``."""
    return f"{family}-{member}" if side == "pretrained" else f"{family}-scratch"


def train_family(family: str, params: VariantsView
                 ) -> tuple[dict[str, Any], dict[str, Any], Any, dict[tuple[str, str, str], ExampleRecord]]:
    """Train ``family``'s vocabulary, data and model and fine-tune it on ``variants.tasks`` (or reuse its finished
    ``family.json`` and per-example records); returns its record row (without intervals), its timing row, the
    pre-trained encoder (for the side-by-side speed) and its per-example records by ``(family, side, task)``.

    Raises:
        PipelineError: a part failed (one line naming the family and the part).
    """
    from transformers import AutoModelForMaskedLM

    from bert_pipeline.data.corpus import open_corpus
    from bert_pipeline.data.shards import InstanceOptions, build_pretraining_data
    from bert_pipeline.model.configs import count_parameters, save_model
    from bert_pipeline.train.checkpoint import fingerprint
    from bert_pipeline.train.runtime import make_runtime
    from stages.members import train_member
    from stages.pretraining import load_pretraining, pretrain_model
    from stages.tokenizers import train_tokenizer

    settings = family_settings(family, params)
    var, fine = params.variants, params.finetune
    folder = WORK / family
    code = sorted(path for root in CODE for path in Path(root).rglob("*.py"))
    key = fingerprint({**{k: v.model_dump(mode="json") for k, v in settings.items()},
                       "finetune": fine.member_training(var.member, var.tasks), "member": var.member, "tasks": var.tasks,
                       "scratch": var.scratch},
                      [*FAMILY_INPUTS, *code])
    done = folder / "family.json"
    kept = {(family, side, task): folder / "examples" / f"{member_name(family, side, var.member)}-{task}.arrow"
            for side in (SIDES if var.scratch else SIDES[:1]) for task in var.tasks}
    if done.is_file() and all(path.is_file() for path in kept.values()):
        saved = json.loads(done.read_text(encoding="utf-8"))
        if saved.get("fingerprint") == key:
            log.info("variants %s: reusing %s (same params, inputs and code)", family, done)
            return (saved["row"], saved["timing"], AutoModelForMaskedLM.from_pretrained(folder / "model"),
                    {k: read_examples(path) for k, path in kept.items()})
    timing: dict[str, Any] = {"family": family}
    clock = time.perf_counter(), time.process_time()

    def lap(name: str) -> None:
        nonlocal clock
        timing[f"{name}_seconds"] = round(time.perf_counter() - clock[0], 1)
        timing[f"{name}_cpu_seconds"] = round(time.process_time() - clock[1], 1)
        clock = time.perf_counter(), time.process_time()

    log.info("variants %s: %s vocabulary", family, settings["train_tokenizer"].model)
    tok_dir = folder / "tokenizer"
    train_tokenizer(settings["train_tokenizer"], open_corpus(CORPUS_DIR, columns=["text"]), tok_dir)  # atomic
    lap("tokenizer")
    data_dir = folder / "pretraining"
    pre = settings["pretrain"]
    with atomic_dir(data_dir) as out:
        build_pretraining_data(CORPUS_DIR, tok_dir, out, InstanceOptions(**settings["create_pretraining_data"].model_dump()),
                               phase_lengths=[ph.max_seq_length for ph in pre.phases], init=pre.init)
    lap("pretraining_data")
    log.info("variants %s: pre-training %d steps", family, pre.max_steps)
    loaded = load_pretraining(pre, data_dir=data_dir, tokenizer_path=tok_dir)
    outcome = pretrain_model(pre, loaded, folder / "checkpoints", make_runtime(pre.precision))
    with atomic_dir(folder / "model") as out:
        save_model(outcome.model, out, loaded.tokenizer)
    lap("pretrain")
    spec = fine.models[var.member].model_copy(update={"path": (folder / "model").as_posix()})

    records: dict[tuple[str, str, str], ExampleRecord] = {}

    def scores_of(side: str, member: Any) -> dict[str, dict[str, Any]]:
        name, out = member_name(family, side, var.member), {}
        for task in var.tasks:
            log.info("variants %s: fine-tuning %s", name, task)
            outcome_task = train_member(name, member, task, fine)
            out[task] = task_score({"model": name, "task": task, **outcome_task.metrics}, f"{folder}/{task}")
            records[(family, side, task)] = outcome_task.examples
            outcome_task.examples.write(kept[(family, side, task)])  # before family.json, which says it is finished
        return out

    scores = scores_of("pretrained", spec)
    lap("finetune")
    row = {"family": family, "recipe": {k: (v if not hasattr(v, "items") else dict(v))
                                        for k, v in vars(recipe_of(family)).items()},
           "parameters": count_parameters(outcome.model.base_model), "steps": int(outcome.quality["steps"]),
           "learning_rate": pre.learning_rate, "tokens_seen": int(outcome.quality["tokens_seen"]),
           "mlm_loss": round(float(outcome.quality["eval"]["mlm_loss"]), 6),
           "mlm_accuracy": round(float(outcome.quality["eval"]["mlm_accuracy"]), 6), "scores": scores}
    if var.scratch:  # the same config, vocabulary, settings and seeds, every weight drawn afresh
        row["scratch_scores"] = scores_of("scratch", spec.model_copy(update={"init": "random"}))
        lap("scratch_finetune")
    atomic_write_text(done, json.dumps({"fingerprint": key, "row": row, "timing": timing}, indent=1) + "\n")
    return row, timing, outcome.model, records


def read_examples(path: Path) -> ExampleRecord:
    """A finished family's per-example record.

    Raises:
        PipelineError: not a record of this layout.
    """
    try:
        return ExampleRecord.read(path)
    except ExamplesError as exc:
        raise PipelineError(str(exc)) from None


def bootstrap(params: VariantsView) -> Bootstrap:
    """The paired bootstrap of ``evaluate.intervals``' resampling settings."""
    settings = params.evaluate.intervals
    return Bootstrap(settings.resamples, settings.confidence, settings.seed, settings.method)


def check_variants(params: VariantsView) -> None:
    """The member must fine-tune ``models/pretrained``'s weights (the settings a pre-trained family member gets), each
    task be a key of ``finetune.tasks`` and each family's recipe and budget pass the schema
    (:func:`family_settings`), all before the first family trains.

    Raises:
        PipelineError: one line naming the ``variants`` key, what was expected and the fix.
    """
    var, models = params.variants, params.finetune.models
    if var.member not in models:
        raise PipelineError(f"params.yaml: variants.member: {var.member!r} is not a key of finetune.models "
                            f"({', '.join(sorted(models))})")
    if Path(models[var.member].path).as_posix() != PRETRAINED or models[var.member].init == "random":
        raise PipelineError(f"params.yaml: variants.member: {var.member!r} fine-tunes {models[var.member].path!r}; "
                            f"expected a pre-trained member of {PRETRAINED} (its fine-tuning settings serve every family)")
    unknown = [t for t in var.tasks if t not in params.finetune.tasks]
    if unknown:
        raise PipelineError(f"params.yaml: variants.tasks: {unknown[0]!r} is not a key of finetune.tasks")
    for family in var.families:  # every family's recipe and budget checked before the first one trains
        family_settings(family, params)


def main() -> None:
    require_inputs("variants")
    params = load_view(VariantsView)
    check_variants(params)
    var = params.variants
    from bert_pipeline.evaluation.speed import measure_throughput
    from bert_pipeline.train.runtime import make_runtime
    from stages import dvc_adapter

    rows, timings, encoders, records = [], [], {}, {}
    boot = bootstrap(params)
    with dvc_adapter.stage_run("variants", {"variants": var.model_dump(), "seeds": params.finetune.seeds}) as run:
        for family in var.families:
            row, timing, model, family_records = train_family(family, params)
            rows.append(row)
            timings.append(timing)
            encoders[family] = model.base_model
            records.update(family_records)
        if encoders:  # every family timed in one call, side by side (the relative speed is a paired ratio)
            speed = measure_throughput(encoders, make_runtime(params.pretrain.precision),
                                       seq_len=params.evaluate.seq_length)
            for timing in timings:
                timing["examples_per_second"] = round(speed[timing["family"]]["sequences_per_second"], 1)
        try:
            rows = with_intervals(rows, records, var.tasks, boot)
        except ExamplesError as exc:
            raise PipelineError(f"variants ({WORK}/*/examples): {exc}") from None
        record = variants_record(rows, member=var.member, tasks=var.tasks, seeds=params.finetune.seeds, boot=boot)
        with atomic_dir(EXAMPLES) as out:
            for (family, side, task), examples in records.items():
                examples.write(out / f"{member_name(family, side, var.member)}-{task}.arrow")
        write_json(METRICS, record)
        write_headline("variants", {"variants": {f"{r['family']}_average": round(average(r["scores"], var.tasks), 6)
                                                 for r in rows}})
        write_json(TIMING, {"families": timings})
        for r in rows:
            run.log_metrics({f"{r['family']}_{t}": s["mean"] for t, s in r["scores"].items()}
                            | {f"{r['family']}_scratch_{t}": s["mean"] for t, s in r.get("scratch_scores", {}).items()}
                            | {f"{r['family']}_{k}": r[k] for k in ("mlm_loss", "mlm_accuracy")})
        for path in (METRICS, TIMING):
            run.log_artifact(path)
    log.info("variants: %s", ", ".join(f"{r['family']} {100 * average(r['scores'], var.tasks):.1f}" for r in rows)
             or "no families (variants.families is empty)")


if __name__ == "__main__":
    run_main(main)
