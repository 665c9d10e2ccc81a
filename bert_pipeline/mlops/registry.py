"""The MLflow model registry: one registered model per task, each fine-tuned family member a version, aliases
``candidate`` (the best of the current results) and ``champion`` (what ships).

Used only by the explicit ``bert-pipeline promote`` step, never inside a cached DVC stage: registering and
moving aliases change shared state. Rules (ARCHITECTURE.md, "who owns what"):

- Every fine-tuned ``{model}-{task}/`` folder becomes a version of registered model ``{task}``, logged with the
  ``mlflow.transformers`` flavour and explicit ``pip_requirements`` (the inferred ones ask for torchvision and
  fail) when the flavour can hold it: ``[CLS]``-pooled sentence classifiers. Three cases it cannot hold go in as
  an ``mlflow.pyfunc`` model from code (:mod:`bert_pipeline.mlops.pyfunc_model`) wrapping the same folder and
  serving what ``predict`` prints: extractive QA (transformers 5 removed the question-answering pipeline the
  flavour builds); NER (the flavour's output keeps only the entity types found, without offsets, reads one
  truncated window, and fails on a text without entities: MLflow 3.17's ``_parse_tokenizer_output``); finetune's
  mean-pooling sentence classifier (a ``bert_pipeline.model.heads`` class the flavour would reload as the
  ``[CLS]`` class). Tag ``flavour`` says which. A folder already registered (same content sha256) is not
  registered twice. The folder's model card (``README.md``) travels with the version: in the pyfunc artifacts
  as is, in the transformers flavour as its ``model_card.md``.
- Version tags: ``family_member``, ``seed``, ``main_metric``, ``validation_score`` (validation mean of the main
  metric) and ``validation_split_sha256`` (content hash of the validation examples it was scored on),
  ``test_score`` and ``test_split_sha256`` (recorded beside, never used to choose), ``validation_mean`` and
  ``test_mean`` (over every fine-tuning seed; the scores are those of the registered weights: the best-validation
  seed's, which finetune saves), ``model_sha256``, ``source``.
- The choice is made on validation, as fine-tuning's own grid is (Devlin et al. 2019, §4: "we selected the best
  fine-tuning learning rate on the Dev set"); a test score that chose would be an optimistic one.
- ``candidate`` moves to the best current version (highest validation score; ties go to the earlier family member).
- ``champion`` moves to the candidate only when the candidate's validation score is strictly higher than the
  champion's on the same validation examples (equal split hash). A different split, or a champion chosen before
  validation scores were recorded (no ``validation_score`` tag), is not comparable: the champion stays unless
  forced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bert_pipeline.errors import PipelineError
from bert_pipeline.mlops import tracking

log = logging.getLogger(__name__)

CANDIDATE = "candidate"
CHAMPION = "champion"
WEIGHT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "vocab.txt")
PYFUNC_CODE = Path(__file__).with_name("pyfunc_model.py")
LIBRARY_DIR = Path(__file__).resolve().parents[1]
"""The ``bert_pipeline`` package, logged as the pyfunc model's code so a served version imports it."""


@dataclass(frozen=True)
class Entry:
    """One fine-tuned model to register: family ``member``, ``task``, ``model_dir``, the ``seed`` its weights
    came from, ``main_metric``, the validation score of those weights (``validation_score``, fraction: what
    chooses) with the ``validation_split_sha256`` of the examples scored, their test score and split hash (recorded
    only), and the means over every fine-tuning seed (``validation_mean``, ``test_mean``: recorded beside)."""

    member: str
    task: str
    model_dir: Path
    seed: int | None
    main_metric: str
    validation_score: float
    validation_split_sha256: str
    test_score: float
    test_split_sha256: str
    source: str = ""
    validation_mean: float | None = None
    test_mean: float | None = None


@dataclass(frozen=True)
class Decision:
    """What :func:`promote_task` did: versions, their validation scores, whether ``champion`` moved, and why (one
    line)."""

    task: str
    candidate_version: str
    candidate_member: str
    candidate_score: float
    champion_version: str | None
    champion_score: float | None
    promoted: bool
    reason: str

    def line(self) -> str:
        """The decision as one printable line."""
        verb = "PROMOTED" if self.promoted else "kept"
        score = "no validation score" if self.champion_score is None else f"{self.champion_score:.4f}"
        champ = "none" if self.champion_version is None else f"v{self.champion_version} ({score})"
        return (f"{self.task}: candidate v{self.candidate_version} {self.candidate_member} "
                f"(validation {self.candidate_score:.4f}) vs champion {champ}: {verb} — {self.reason}")


def split_sha256(split_dir: Path, examples: int | None = None, seed: int = 0) -> str:
    """Content hash of the examples a model was scored on: sha256 over the rows, as canonical JSON, in order.

    ``examples``/``seed``: finetune scores at most ``max_validation_examples`` / ``max_test_examples`` examples drawn with
    ``finetune.data_seed`` (``bert_pipeline.train.finetune_data.subsample``); the same draw is hashed here, so a different
    cap or seed gives a different fingerprint. Independent of the Arrow writer.

    Raises:
        PipelineError: ``split_dir`` is not a saved dataset.
    """
    from datasets import load_from_disk

    try:
        ds = load_from_disk(str(split_dir))
    except (FileNotFoundError, ValueError) as exc:
        raise PipelineError(f"{split_dir}: not a saved dataset split ({exc})") from None
    if examples is not None and examples < len(ds):
        from bert_pipeline.train.finetune_data import subsample

        ds = subsample(ds, examples, seed)
    digest = hashlib.sha256()
    for row in ds:
        digest.update(json.dumps(row, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def model_sha256(model_dir: Path) -> str:
    """sha256 over the weights, config and tokenizer files of a ``save_pretrained`` folder (names included)."""
    digest = hashlib.sha256()
    for name in WEIGHT_FILES:
        path = Path(model_dir) / name
        if path.exists():
            digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def pip_requirements() -> list[str]:
    """Exact pins of what serving a version needs (torch without its local build tag, e.g. ``+cpu``)."""
    pins = []
    for name in ("torch", "transformers", "tokenizers", "safetensors", "mlflow", "numpy", "pandas"):
        try:
            pins.append(f"{name}=={metadata.version(name).split('+')[0]}")
        except metadata.PackageNotFoundError:  # pragma: no cover
            pins.append(name)
    return pins


def decide(candidate_score: float, candidate_split: str, champion_score: float | None,
           champion_split: str | None, force: bool = False) -> tuple[bool, str]:
    """Whether ``champion`` should move to the candidate, and why; the scores are validation scores.

    Promote when there is no champion, or when the candidate is strictly better on the same validation examples.
    Equal scores keep the champion (no churn). A different split is not comparable: keep unless ``force``.
    """
    if champion_score is None:
        return True, "no champion yet"
    if candidate_split != champion_split:
        if force:
            return True, "forced: validation split changed, scores not comparable"
        return False, (f"validation split changed ({(champion_split or '?')[:12]} -> {candidate_split[:12]}); scores "
                       "not comparable (rerun with --force to promote anyway)")
    if candidate_score > champion_score:
        return True, f"better on the same validation split (+{100 * (candidate_score - champion_score):.2f} points)"
    if candidate_score == champion_score:
        return False, "equal score on the same validation split"
    return False, f"worse on the same validation split ({100 * (candidate_score - champion_score):+.2f} points)"


def find_version(client: Any, task: str, sha: str) -> Any | None:
    """The existing version of registered model ``task`` whose ``model_sha256`` tag is ``sha``, or None."""
    try:
        versions = client.search_model_versions(f"name='{task}'")
    except Exception:  # noqa: BLE001  (no registered model yet)
        return None
    for v in versions:
        if v.tags.get("model_sha256") == sha:
            return v
    return None


@contextlib.contextmanager
def _fluent_store(uri: str) -> Iterator[None]:
    """MLflow's fluent API (``log_model`` needs it) pointed at ``uri`` for the block only: set through the
    environment and restored afterwards, so no process-wide tracking URI outlives the call."""
    keys = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")
    saved = {key: os.environ.get(key) for key in keys}
    os.environ.update({key: uri for key in keys})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def log_version(client: Any, entry: Entry, uri: str, copy_origin: tracking.CopyOrigin = tracking.no_copies) -> str:
    """Log ``entry``'s folder as a new version of registered model ``entry.task``; return its version number. The
    run goes to the pipeline's experiment (:func:`bert_pipeline.mlops.tracking.experiment_id`, ``copy_origin``: which
    paths lie in a temporary copy of the repository).

    Sequence/token classifiers use the ``mlflow.transformers`` flavour; QA an ``mlflow.pyfunc`` model from code.
    """
    import mlflow

    task = _task(entry.model_dir)
    kind = task.head
    flavour = serving_flavour(entry.model_dir)
    revision, dirty = tracking.git_revision()
    tags = {"stage": "promote", "family_member": entry.member, "task": entry.task, "git_revision": revision,
            "git_dirty": str(dirty).lower()}
    if os.environ.get(tracking.PARENT_RUN_ENV):  # nested under the flow's run when the flow passes one
        tags["mlflow.parentRunId"] = os.environ[tracking.PARENT_RUN_ENV]
    with _fluent_store(uri), mlflow.start_run(run_name=f"register-{entry.member}-{entry.task}", tags=tags,
                                              experiment_id=tracking.experiment_id(client, uri, None, copy_origin)) as run:
        mlflow.log_metrics({f"validation_{entry.main_metric}": entry.validation_score,
                            f"test_{entry.main_metric}": entry.test_score})
        mlflow.set_tag("flavour", flavour)
        if flavour == "pyfunc":
            import mlflow.pyfunc

            info = mlflow.pyfunc.log_model(
                name="model", python_model=str(PYFUNC_CODE), artifacts={"model": str(entry.model_dir)},
                code_paths=[str(LIBRARY_DIR)], pip_requirements=pip_requirements(),
                registered_model_name=entry.task, model_config={"kind": task.pyfunc_input},
            )
        else:
            import mlflow.transformers

            from bert_pipeline.evaluation.predictor import load_predictor

            pred = load_predictor(entry.model_dir)
            info = mlflow.transformers.log_model(
                {"model": pred.model, "tokenizer": pred.tokenizer},
                name="model", task=kind.replace("sequence-", "text-"), pip_requirements=pip_requirements(),
                registered_model_name=entry.task, model_card=_model_card(entry.model_dir),
            )
        log.debug("%s: logged %s as run %s", entry.task, entry.model_dir, run.info.run_id)
    return str(info.registered_model_version)


def _model_card(model_dir: Path) -> Any:
    """The folder's own model card (``README.md``) as a ``huggingface_hub.ModelCard``, or None: the flavour writes
    it as ``model_card.md``/``model_card_data.yaml`` instead of looking one up on the hub by the model's name (the
    pyfunc flavour copies the whole folder, card included)."""
    from huggingface_hub import ModelCard

    from bert_pipeline.model.card import CARD_FILE

    path = Path(model_dir) / CARD_FILE
    return ModelCard.load(path) if path.is_file() else None


def _task(model_dir: Path):
    """The task kind the folder serves (:func:`bert_pipeline.evaluation.predictor.task_of`)."""
    from bert_pipeline.evaluation.predictor import task_of

    return task_of(model_dir)


def serving_flavour(model_dir: Path) -> str:
    """``transformers`` when the ``mlflow.transformers`` flavour can hold the folder, else ``pyfunc``
    (extractive QA; NER; sentence classifiers with a pooling other than ``[CLS]``; pair classifiers and regression
    heads, ``config.task_kind``)."""
    task = _task(model_dir)
    cfg = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    # the flavour's pipelines load the family's own [CLS] head: a mean-pooling head would load as another model
    if task.transformers_flavour and cfg.get("classifier_pooling", "cls") == "cls":
        return "transformers"
    return "pyfunc"


def register(client: Any, entry: Entry, uri: str,
             copy_origin: tracking.CopyOrigin = tracking.no_copies) -> tuple[str, bool]:
    """Register ``entry`` (or reuse the version with the same content) and set its tags; return the version and
    whether it is new."""
    sha = model_sha256(entry.model_dir)
    found = find_version(client, entry.task, sha)
    version = str(found.version) if found else log_version(client, entry, uri, copy_origin)
    tags = {"family_member": entry.member, "flavour": serving_flavour(entry.model_dir), "seed": "" if entry.seed is None else str(entry.seed),
            "main_metric": entry.main_metric, "validation_score": repr(float(entry.validation_score)),
            "validation_split_sha256": entry.validation_split_sha256, "test_score": repr(float(entry.test_score)),
            "test_split_sha256": entry.test_split_sha256, "model_sha256": sha, "source": entry.source}
    for key in ("validation_mean", "test_mean"):
        if getattr(entry, key) is not None:
            tags[key] = repr(float(getattr(entry, key)))
    for key, value in tags.items():
        client.set_model_version_tag(entry.task, version, key, value)
    return version, found is None


def best_on_validation(entries: Sequence[Entry]) -> Entry:
    """The candidate of one task: the entry with the best ``validation_score`` (ties: the first, family order).
    Test scores never choose."""
    return entries[max(range(len(entries)), key=lambda i: (entries[i].validation_score, -i))]


def champion_of(client: Any, task: str) -> Any | None:
    """The version that alias ``champion`` of ``task`` points to, or None."""
    try:
        return client.get_model_version_by_alias(task, CHAMPION)
    except Exception:  # noqa: BLE001  (MlflowException RESOURCE_DOES_NOT_EXIST)
        return None


def promote_task(client: Any, entries: Sequence[Entry], uri: str, force: bool = False,
                 copy_origin: tracking.CopyOrigin = tracking.no_copies) -> Decision:
    """Register ``entries`` (one task), point ``candidate`` at the best on validation, move ``champion`` if
    :func:`decide` says so (on validation; the test scores are tags only).

    ``copy_origin``: which paths lie in a temporary copy of the repository (:func:`log_version`). Logs one INFO line
    per version (:func:`version_line`) and nothing else at INFO; MLflow's artifact progress bars are the caller's to
    switch off (``bert-pipeline promote`` does).

    Raises:
        PipelineError: no entries, or entries of several tasks / main metrics.
    """
    if not entries:
        raise PipelineError("nothing to promote: no fine-tuned models")
    tasks = {e.task for e in entries}
    metrics = {e.main_metric for e in entries}
    if len(tasks) != 1 or len(metrics) != 1:
        raise PipelineError(f"promote_task: one task and main metric expected, got {sorted(tasks)} {sorted(metrics)}")
    task = entries[0].task
    registered = [register(client, e, uri, copy_origin) for e in entries]
    versions = [version for version, _ in registered]
    cand = best_on_validation(entries)
    cand_version = versions[next(i for i, e in enumerate(entries) if e is cand)]
    client.set_registered_model_alias(task, CANDIDATE, cand_version)
    champ = champion_of(client, task)
    if champ is not None and str(champ.version) == cand_version:
        promoted, reason = False, "candidate is already the champion"
        champ_score, champ_version = cand.validation_score, cand_version
    else:
        champ_tags = champ.tags if champ is not None else {}
        champ_score = float(champ_tags["validation_score"]) if "validation_score" in champ_tags else None
        champ_version = str(champ.version) if champ is not None else None
        promoted, reason = decide(cand.validation_score, cand.validation_split_sha256, champ_score,
                                  champ_tags.get("validation_split_sha256"), force)
        if champ is not None and champ_score is None:
            promoted, reason = force, ("forced: the champion has no validation score" if force else
                                       "the champion has no validation score (chosen on test before validation "
                                       "scores were recorded); not comparable (use --force)")
    if promoted:
        client.set_registered_model_alias(task, CHAMPION, cand_version)
    decision = Decision(task, cand_version, cand.member, cand.validation_score, champ_version, champ_score, promoted,
                        reason)
    client.set_model_version_tag(task, cand_version, "promotion_decision", decision.line())
    champion = cand_version if promoted else champ_version
    for entry, (version, new) in zip(entries, registered, strict=True):
        log.info("%s", version_line(entry, version, new, [alias for alias, at in ((CANDIDATE, cand_version),
                                                                                    (CHAMPION, champion)) if at == version]))
    log.debug("%s", decision.line())
    return decision


def version_line(entry: Entry, version: str, new: bool, aliases: Sequence[str]) -> str:
    """One registered version as one line: ``TASK vN: MEMBER seed S, validation METRIC V, test T, new|already
    registered, aliases A, B|none`` (e.g. ``sentiment v2: distilled seed 8, validation accuracy 0.7600, test 0.7500,
    new, aliases candidate, champion``): the aliases it holds after the promotion."""
    seed = "none" if entry.seed is None else entry.seed
    return (f"{entry.task} v{version}: {entry.member} seed {seed}, validation {entry.main_metric} "
            f"{entry.validation_score:.4f}, test {entry.test_score:.4f}, "
            f"{'new' if new else 'already registered'}, aliases {', '.join(aliases) or 'none'}")
