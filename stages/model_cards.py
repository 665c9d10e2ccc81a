"""Stage ``model_cards``: every trained model folder with its model card, in ``models/release/``.

    python -m stages.model_cards          (dvc repro model_cards)

The training stages write weights and tokenizers only (``models/pretrained/``, ``models/distilled/``,
``models/finetuned/{model}-{task}/``) and record in their metrics what only a run knows (parameters, the precision it
resolved). This stage puts each folder, hard-linked where the file system allows (else copied), under
``models/release/`` with its card ``README.md`` (:mod:`bert_pipeline.model.card`; the builders in
:mod:`bert_pipeline.model.card_encoders` and :mod:`bert_pipeline.model.card_finetuned`: the Hub's YAML metadata, the
test scores, data and licences), so rewording a card reruns this stage alone and never a training stage:

- ``models/release/pretrained/``, ``models/release/distilled/``: the encoders and their cards;
- ``models/release/finetuned/{model}-{task}/``: each fine-tuned member and task-specific student with its card
  (what ``bert-pipeline promote`` registers and the cards' loading examples name).

The cards cite ``metrics/pretrain.json``, ``metrics/distill.json``, ``metrics/finetune/*.json``,
``metrics/corpus.json``, ``data/pretraining/info.json``, each task's ``task.json``, ``data/raw/SOURCES.json`` and
the params of the stages that trained the models. Same inputs, same bytes (a card holds no date, wall-clock figure
or absolute path).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from bert_pipeline import tasks
from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.io import atomic_dir
from bert_pipeline.model import card, card_encoders, card_finetuned
from stages import require_inputs
from stages.params.base import DEFAULT_PARAMS, load_view
from stages.params.evaluate import IntervalSettings
from stages.params.finetune import FinetuneModel, FinetuneParams
from stages.params.model_cards import ModelCardsView
from stages.params.task_distill import TaskDistillParams

log = logging.getLogger(__name__)

PRETRAINED = Path("models/pretrained")
DISTILLED = Path("models/distilled")
FINETUNED = Path("models/finetuned")
RELEASE = Path("models/release")
PRETRAIN_METRICS = Path("metrics/pretrain.json")
DISTILL_METRICS = Path("metrics/distill.json")
FINETUNE_METRICS = Path("metrics/finetune")
EXAMPLES = Path("metrics/examples")  # the members' per-example records (stages.members.EXAMPLES)
CORPUS_METRICS = Path("metrics/corpus.json")  # prepare_corpus's record
DATA_INFO = Path("data/pretraining/info.json")  # create_pretraining_data's record of the instances
TASKS = Path("data/tasks")
SOURCES = Path("data/raw/SOURCES.json")  # the data packages' versions and licences
REPORT = Path("reports/summary.md")  # stage evaluate's page (stages.evaluate.REPORT; not imported: its code is no dep)
CARD_CITATIONS = card.CardCitations(
    sources_record=SOURCES.as_posix(), corpus_record=CORPUS_METRICS.as_posix(), instances_record=DATA_INFO.as_posix(),
    pretrain_record=PRETRAIN_METRICS.as_posix(), distill_record=DISTILL_METRICS.as_posix(),
    finetune_records=FINETUNE_METRICS.as_posix(), distilled=DISTILLED.as_posix(), finetuned=FINETUNED.as_posix(),
    report=REPORT.as_posix(), params_file=DEFAULT_PARAMS.as_posix())
"""What the cards cite: the files above, the pipeline's folders, the report and the params file."""
LOOP_KEYS = {"seeds", "data_seed", "warmup_ratio", "weight_decay", "max_grad_norm", "early_stopping_patience",
             "evals_per_epoch", "eval_batch_size"}  # stages.members.LOOP_KEYS, ``precision`` from the record


def released(folder: str | Path, release: Path = RELEASE) -> str:
    """The release copy of one of the pipeline's model folders under ``release`` (``models/pretrained`` ->
    ``models/release/pretrained``); any other folder or hub name unchanged."""
    path = Path(folder)
    for made in (PRETRAINED, DISTILLED, FINETUNED):
        if path == made or made in path.parents:
            return (release / path.relative_to(made.parent)).as_posix()
    return str(folder)


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` holding ``src``'s files: hard links on the same file system (no second copy of the weights), else
    copies. A training stage replaces its folder whole (a new directory), never a file in place, so a link never
    sees its release copy change."""
    for path in sorted(src.rglob("*")):
        target = dst / path.relative_to(src)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.name == card.CARD_FILE:
            continue
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _architecture(folder: Path, parameters: int, size: str | None = None) -> card.Architecture:
    config = card.read_json_record(folder / "config.json")
    if config is None:
        raise PipelineError(f"{folder}/config.json: not found (rerun the stage that writes {folder})")
    return card.Architecture.from_config(config, parameters, size)


def _record(path: Path) -> dict[str, Any]:
    record = card.read_json_record(path)
    if record is None:
        raise PipelineError(f"{path}: not found (rerun the stage that writes it)")
    return record


def pretrained_card(view: ModelCardsView, sources: list[Any]) -> str:
    """The card of ``models/pretrained/`` from ``metrics/pretrain.json`` (which records the resolved precision and
    process count) and the ``pretrain`` params."""
    p = view.pretrain
    quality = _record(PRETRAIN_METRICS)
    settings = {**p.model_dump(mode="json"), "precision": quality.get("precision", p.precision),
                "num_processes": quality.get("num_processes", 1)}
    return card_encoders.pretrained_card(
        quality={**quality, "init": card.portable_path(p.init, Path.cwd())}, data_info=_record(DATA_INFO),
        corpus=card.read_json_record(CORPUS_METRICS), settings=settings,
        architecture=_architecture(PRETRAINED, quality["parameters"], p.model.size if p.init == "scratch" else None),
        sources=sources, folder=released(PRETRAINED), cites=CARD_CITATIONS)


def distilled_card(view: ModelCardsView, sources: list[Any]) -> str:
    """The card of ``models/distilled/`` from ``metrics/distill.json`` and the ``distill`` params."""
    metrics = _record(DISTILL_METRICS)
    settings = {**view.distill.model_dump(mode="json"), "precision": metrics.get("precision", view.distill.precision)}
    return card_encoders.distilled_card(
        metrics=metrics, settings=settings, data_info=_record(DATA_INFO),
        architecture=_architecture(DISTILLED, metrics["student"]["parameters"]), teacher=released(PRETRAINED),
        corpus=card.read_json_record(CORPUS_METRICS), sources=sources, folder=released(DISTILLED), cites=CARD_CITATIONS)


def member_settings(record: dict[str, Any], finetune: FinetuneParams,
                    task_distill: TaskDistillParams | None) -> FinetuneModel:
    """The ``finetune.models`` entry a metrics record was trained with, its own settings for the record's task merged
    (:meth:`FinetuneParams.settings_for`); a task-specific student's (a record with ``teacher``) is its teacher's
    entry with the student's path, learning rate and epochs (stage ``distill_task``)."""
    task = record["task"]
    if record.get("teacher"):
        if task_distill is None:
            raise PipelineError(f"{record['model']}-{task}: a task-specific student's card needs task_distill's params")
        teacher = finetune.models[record["teacher"]]
        return teacher.model_copy(update={"path": (FINETUNED / f"{record['teacher']}-{task}").as_posix(),
                                          "learning_rate": task_distill.learning_rate,
                                          "epochs": task_distill.epochs.get(task), "tasks": {}})
    return finetune.settings_for(finetune.models[record["model"]], task)[0].model_copy(update={"tasks": {}})


def finetuned_card(record: dict[str, Any], finetune: FinetuneParams, sources: list[Any], *,
                   task_distill: TaskDistillParams | None = None, cards: Path = RELEASE,
                   intervals: IntervalSettings | None = None) -> str:
    """The card of ``models/finetuned/{model}-{task}/`` from its metrics record (with the ``parameters`` and
    resolved ``precision`` the stage recorded), the task's ``task.json``, the base folder's own card and the
    member's, task's and loop's params. The pipeline's own encoders' cards are read from their copies under
    ``cards`` (the release folder being written). With ``intervals`` (``evaluate.intervals``), each test score
    carries its interval from the member's per-example record (:func:`score_intervals`)."""
    name, task = record["model"], record["task"]
    spec = member_settings(record, finetune, task_distill)
    base_path = released(card.portable_path(spec.path, Path.cwd()))
    meta, title = card.read_card(released(card.portable_path(spec.path, Path.cwd()), cards))
    base = card.BaseModel(base_path, meta, title, card.package_of(base_path, SOURCES.parent.as_posix(), sources))
    loop = {**finetune.model_dump(include=LOOP_KEYS), "precision": record["precision"]}
    folder = FINETUNED / f"{name.replace('/', '--')}-{task}"
    shape = _architecture(folder, record["parameters"], spec.size or base.facts.get("size"))
    task_info = card.read_json_record(TASKS / task / "task.json") or {}
    ivs, text = score_intervals(EXAMPLES / f"{name.replace('/', '--')}-{task}.arrow", intervals)
    return card_finetuned.finetuned_card(
        name=name, task=task, record=record, task_info=task_info,
        task_settings=finetune.member_task(record.get("teacher") or name, task),
        member=spec.model_dump(exclude={"tasks"}), loop=loop, sources=sources,
        base=base, architecture=shape, folder=released(folder), cites=CARD_CITATIONS,
        head=tasks.get(record["kind"]).card(spec.pooling, task_info.get("label_names") or []), intervals=ivs,
        interval_text=text)


def score_intervals(path: Path, settings: IntervalSettings | None) -> tuple[dict[str, Any], str]:
    """Each test metric's interval from the member's per-example record at ``path`` (``{}`` without a record or
    ``settings``), and the card's sentence on how they were computed."""
    if settings is None or not path.exists():
        return {}, ""
    boot = Bootstrap(settings.resamples, settings.confidence, settings.seed, settings.method)
    est = boot.estimates(ExampleRecord.read(path), "test")
    sources = next(iter(est.values())).sources if est else "examples"
    return ({m: boot.score(e) for m, e in est.items()},
            f"Intervals: {100 * settings.confidence:g}% paired bootstrap ({settings.resamples:,} draws, "
            f"{settings.method}) resampling whole source articles or films"
            + (" and the seeds" if sources == "examples+seeds" else "") + f" (`{path.as_posix()}`); a metric "
            "without one is not a sum over examples.")


def write_release(view: ModelCardsView, out: Path) -> list[str]:
    """Write ``out`` (the release folder): the pre-trained and distilled encoders, then every fine-tuned folder
    that has a metrics record, each with its card; the encoders' cards first, since the fine-tuned cards read
    theirs. Returns the folder names written, relative to ``out``.

    Raises:
        PipelineError: a record or model folder is missing (one line naming it).
    """
    sources = list((card.read_json_record(SOURCES) or {}).get("sources", ()))
    written = []
    for folder, render in ((PRETRAINED, pretrained_card), (DISTILLED, distilled_card)):
        target = out / folder.relative_to(folder.parent)
        _link_tree(folder, target)
        card.write_card(target, render(view, sources))
        written.append(target.relative_to(out).as_posix())
    records = {path: _record(path) for path in sorted(FINETUNE_METRICS.glob("*.json"))}
    # members before task-specific students: a student's card reads its fine-tuned teacher's
    for path, record in sorted(records.items(), key=lambda item: (bool(item[1].get("teacher")), item[0].name)):
        folder = FINETUNED / path.stem
        if not (folder / "config.json").is_file():
            raise PipelineError(f"{folder}: missing (its record {path} exists; rerun the stage that writes both)")
        target = out / "finetuned" / path.stem
        _link_tree(folder, target)
        card.write_card(target, finetuned_card(record, view.finetune, sources, task_distill=view.task_distill,
                                               cards=out, intervals=view.evaluate.intervals))
        written.append(target.relative_to(out).as_posix())
    return written


def main() -> None:
    require_inputs("model_cards")
    view = load_view(ModelCardsView)
    with atomic_dir(RELEASE) as out:
        written = write_release(view, out)
    log.info("model_cards: %d model folders with their cards in %s", len(written), RELEASE)


if __name__ == "__main__":
    run_main(main)
