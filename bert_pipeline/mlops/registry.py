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
  seed's, which finetune saves), ``parameters`` (floating-point weights in the folder), ``model_sha256``,
  ``source``, and ``validation_record_sha256`` when the version carries its per-example validation record.
- Each version's run carries that record as artifact ``examples/validation.arrow`` (:data:`EXAMPLES_ARTIFACT`): the
  saved seed's validation run only (:func:`bert_pipeline.mlops.promotion.validation_record`), so a later challenger
  is compared with it example by example. A version registered again with another record (the validation split
  changed) has the artifact replaced.
- The choice is made on validation, as fine-tuning's own grid is (Devlin et al. 2019, §4: "we selected the best
  fine-tuning learning rate on the Dev set"); a test score that chose would be an optimistic one.
- ``candidate`` moves to the best current version (highest validation score; ties go to the earlier family member).
- ``champion`` moves to the candidate (the challenger) by the :class:`~bert_pipeline.mlops.promotion.PromotionRule`:
  ``superiority`` (default: the paired bootstrap interval of challenger minus champion has its lower bound above
  the margin), ``non_inferiority`` (a smaller challenger keeping at least ``1 - margin`` of the champion's score at
  the interval's lower bound) or ``point`` (the old rule: any higher validation score). Records are paired on the
  same validation examples: the champion's stored record, or, for a champion registered without one, its
  registered model re-scored on the challenger's validation split (the caller's ``rescore``); a champion that can
  be neither is kept, never compared unpaired. A different split (``validation_split_sha256``), a champion chosen
  before validation scores were recorded (no ``validation_score`` tag), or either side without a record is not
  comparable: the champion stays unless forced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError
from bert_pipeline.evaluation.intervals import Interval
from bert_pipeline.mlops import tracking
from bert_pipeline.mlops.promotion import (
    PromotionRule,
    describe,
    judge,
    validation_record,
    weights_parameters,
)

log = logging.getLogger(__name__)

CANDIDATE = "candidate"
CHAMPION = "champion"
WEIGHT_FILES = ("model.safetensors", "config.json", "tokenizer.json", "vocab.txt")
PYFUNC_CODE = Path(__file__).with_name("pyfunc_model.py")
LIBRARY_DIR = Path(__file__).resolve().parents[1]
"""The ``bert_pipeline`` package, logged as the pyfunc model's code so a served version imports it."""
EXAMPLES_ARTIFACT = "examples/validation.arrow"
"""Where a version's run keeps its per-example validation record (the saved seed's validation run)."""
RECORD_TAG = "validation_record_sha256"
"""The version tag holding the sha256 of that record's bytes; a version without it carries no record."""

Rescore = Callable[[Path, int], ExampleRecord]
"""``(model_dir, seed) -> record``: the registered folder of a champion scored on the current validation examples
(:func:`bert_pipeline.mlops.promotion.rescore_validation` with the task's settings bound), its run filed under
``seed``."""


@dataclass(frozen=True)
class Entry:
    """One fine-tuned model to register: family ``member``, ``task``, ``model_dir``, the ``seed`` its weights
    came from, ``main_metric``, the validation score of those weights (``validation_score``, fraction: what
    chooses) with the ``validation_split_sha256`` of the examples scored, their test score and split hash (recorded
    only), the means over every fine-tuning seed (``validation_mean``, ``test_mean``: recorded beside), and the
    member's per-example record (``examples``, :class:`~bert_pipeline.evaluation.examples.ExampleRecord`, every
    seed and split; None: none was written), of which the version keeps the ``seed``'s validation run."""

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
    examples: ExampleRecord | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Decision:
    """What :func:`promote_task` did: versions, their members and validation scores, whether ``champion`` moved,
    why (``reason``, a clause), and the evidence: the ``rule`` applied, the main ``metric``, the paired ``interval``
    it read (``statistic``: ``difference``, challenger minus champion, or ``share``, challenger over champion) and
    where the champion's record came from (``paired``: ``stored`` or ``re-scored``)."""

    task: str
    candidate_version: str
    candidate_member: str
    candidate_score: float
    champion_version: str | None
    champion_score: float | None
    promoted: bool
    reason: str
    champion_member: str | None = None
    rule: str = "point"
    metric: str = ""
    interval: Interval | None = None
    statistic: str = "difference"
    paired: str = ""
    compared: bool = False

    def line(self) -> str:
        """The decision as one printable line, e.g. ``sentiment: champion stays v1 (pretrained); challenger v3
        (distilled): validation accuracy -0.4 points [-2.9, +2.0], lower bound not above 0.0 (superiority)`` or
        ``sentiment: champion moves to v3 (distilled) from v1 (pretrained): validation accuracy +40.0 points [+31.5,
        +48.5], lower bound above 0.0 (superiority)``."""
        cand = f"v{self.candidate_version} ({self.candidate_member})"
        champ = f"v{self.champion_version} ({self.champion_member or 'unknown member'})"
        if self.champion_version is None:
            head = f"champion moves to {cand}"
        elif self.promoted:
            head = f"champion moves to {cand} from {champ}"
        elif self.champion_version == self.candidate_version:
            head = f"champion stays {champ}"
        else:
            head = f"champion stays {champ}; challenger {cand}"
        parts = []
        if self.interval is not None:
            parts.append(describe(self.interval, self.statistic, self.metric))
        elif self.compared and self.champion_score is not None:
            parts.append(f"validation {self.metric} {self.candidate_score:.4f} vs {self.champion_score:.4f}")
        parts.append(self.reason)
        how = f"; champion {self.paired}" if self.paired == "re-scored" else ""
        rule = f" ({self.rule}{how})" if self.compared else ""
        return f"{self.task}: {head}: {', '.join(parts)}{rule}"


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
    """The ``point`` rule: whether ``champion`` should move to the candidate, and why; the scores are validation
    scores (no interval: :func:`bert_pipeline.mlops.promotion.judge` is the rule on evidence).

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


def log_version(client: Any, entry: Entry, uri: str, copy_origin: tracking.CopyOrigin = tracking.no_copies,
                record: ExampleRecord | None = None) -> str:
    """Log ``entry``'s folder as a new version of registered model ``entry.task``; return its version number. The
    run goes to the pipeline's experiment (:func:`bert_pipeline.mlops.tracking.experiment_id`, ``copy_origin``: which
    paths lie in a temporary copy of the repository) and carries ``record`` (the weights' validation record,
    :func:`bert_pipeline.mlops.promotion.validation_record`) as :data:`EXAMPLES_ARTIFACT` when given.

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
        if record is not None:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / Path(EXAMPLES_ARTIFACT).name
                path.write_bytes(record.to_bytes())
                mlflow.log_artifact(str(path), artifact_path=str(Path(EXAMPLES_ARTIFACT).parent))
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


def register(client: Any, entry: Entry, uri: str, copy_origin: tracking.CopyOrigin = tracking.no_copies,
             record: ExampleRecord | None = None) -> tuple[str, bool]:
    """Register ``entry`` (or reuse the version with the same content) and set its tags; return the version and
    whether it is new. ``record``: the weights' validation record, logged with a new version, and put in place of
    the stored one of a reused version whose record differs (or which has none: registered before records were)."""
    sha = model_sha256(entry.model_dir)
    found = find_version(client, entry.task, sha)
    version = str(found.version) if found else log_version(client, entry, uri, copy_origin, record)
    tags = {"family_member": entry.member, "flavour": serving_flavour(entry.model_dir), "seed": "" if entry.seed is None else str(entry.seed),
            "main_metric": entry.main_metric, "validation_score": repr(float(entry.validation_score)),
            "validation_split_sha256": entry.validation_split_sha256, "test_score": repr(float(entry.test_score)),
            "test_split_sha256": entry.test_split_sha256, "model_sha256": sha, "source": entry.source}
    parameters = weights_parameters(entry.model_dir)
    if parameters is not None:
        tags["parameters"] = str(parameters)
    for key in ("validation_mean", "test_mean"):
        if getattr(entry, key) is not None:
            tags[key] = repr(float(getattr(entry, key)))
    if record is not None:
        data = record.to_bytes()
        tags[RECORD_TAG] = hashlib.sha256(data).hexdigest()
        if found is not None and found.tags.get(RECORD_TAG) != tags[RECORD_TAG]:
            try:
                store_record(client, found.run_id, data)
            except Exception as exc:  # noqa: BLE001  (its run's artifacts unwritable: it stays without a record)
                log.warning("%s v%s: per-example record not stored (%s)", entry.task, version, _first_line(exc))
                del tags[RECORD_TAG]
                if RECORD_TAG in found.tags:  # the stored one is stale: a champion without one is re-scored
                    client.delete_model_version_tag(entry.task, version, RECORD_TAG)
    for key, value in tags.items():
        client.set_model_version_tag(entry.task, version, key, value)
    return version, found is None


def store_record(client: Any, run_id: str, data: bytes) -> None:
    """Put a record's bytes (:meth:`ExampleRecord.to_bytes`) at :data:`EXAMPLES_ARTIFACT` of run ``run_id``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(EXAMPLES_ARTIFACT).name
        path.write_bytes(data)
        client.log_artifact(run_id, str(path), str(Path(EXAMPLES_ARTIFACT).parent))


def stored_record(client: Any, version: Any, dst: Path) -> ExampleRecord | None:
    """The per-example validation record stored with ``version`` (a ``ModelVersion``), or None when it carries
    none (no :data:`RECORD_TAG`: registered before records were).

    Raises:
        ExamplesError: the artifact is not a per-example record.
        Exception: MLflow's, when the tagged artifact cannot be downloaded (its files are gone).
    """
    if RECORD_TAG not in version.tags:
        return None
    local = client.download_artifacts(version.run_id, EXAMPLES_ARTIFACT, str(dst))
    return ExampleRecord.read(local)


def registered_folder(version: Any, uri: str, dst: Path) -> Path:
    """Download ``version``'s registered model into ``dst`` and return it as a ``save_pretrained`` folder (weights,
    config and tokenizer side by side), whichever flavour holds it: the ``mlflow.transformers`` flavour keeps the
    weights in ``model/`` and the tokenizer in ``components/tokenizer/`` (joined into ``dst/folder``); the pyfunc
    flavour keeps the fine-tuned folder itself as its ``artifacts/`` entry.

    Raises:
        PipelineError: the downloaded files hold no model folder.
        Exception: MLflow's, when the model's files cannot be downloaded (gone from the artifact store).
    """
    import mlflow

    with _fluent_store(uri):
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=version.source, dst_path=str(dst)))
    if (local / "model" / "config.json").is_file():
        folder = Path(dst) / "folder"
        shutil.copytree(local / "model", folder, dirs_exist_ok=True)
        tokenizer = local / "components" / "tokenizer"
        if tokenizer.is_dir():
            shutil.copytree(tokenizer, folder, dirs_exist_ok=True)
        return folder
    found = sorted(path.parent for path in (local / "artifacts").glob("*/config.json"))
    if not found:
        raise PipelineError(f"{version.source}: the registered model's files are gone (no model folder downloaded)")
    if len(found) > 1:
        raise PipelineError(f"{version.source}: {len(found)} model folders among the registered files; expected one")
    return found[0]


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


@dataclass(frozen=True)
class _Outcome:
    """A challenge's result before the aliases move: ``comparable`` False means the two could not be paired (the
    champion stays unless forced)."""

    promoted: bool
    reason: str
    comparable: bool = True
    interval: Interval | None = None
    statistic: str = "difference"
    paired: str = ""


class _Champion:
    """The champion's version and what is fetched of it at most once: its registered folder (for re-scoring and
    its parameter count)."""

    def __init__(self, client: Any, version: Any, uri: str, tmp: Path):
        self.client, self.version, self.uri, self.tmp = client, version, uri, tmp
        self.name = f"champion v{version.version}"
        self._folder: Path | None = None

    def folder(self) -> Path:
        if self._folder is None:
            self._folder = registered_folder(self.version, self.uri, self.tmp / "model")
        return self._folder

    @property
    def seed(self) -> int | None:
        seed = self.version.tags.get("seed", "")
        return int(seed) if seed.lstrip("-").isdigit() else None

    def record(self, rescore: Rescore | None) -> tuple[ExampleRecord | None, str]:
        """``(record, "stored" | "re-scored")``, or ``(None, why not)``: the stored record of the saved seed, else
        the registered model re-scored (and the result stored with the version for the next challenger)."""
        try:
            stored = stored_record(self.client, self.version, self.tmp / "record")
        except Exception as exc:  # noqa: BLE001  (MlflowException, OSError, ExamplesError: unreadable or gone)
            stored, missing = None, f"its stored per-example record is unreadable ({_first_line(exc)})"
        else:
            missing = "no per-example validation record stored with it"
        if stored is not None:
            try:
                return validation_record(stored, self.seed, self.name), "stored"
            except ExamplesError as exc:
                missing = str(exc)
        if rescore is None:
            return None, f"{self.name}: {missing} and no way to re-score it given; never compared unpaired"
        try:
            rescored = validation_record(rescore(self.folder(), 0 if self.seed is None else self.seed), None, self.name)
        except Exception as exc:  # noqa: BLE001  (model files gone, a folder that no longer loads or scores)
            return None, (f"{self.name}: {missing}, and re-scoring its registered model failed ({_first_line(exc)}); "
                          "never compared unpaired")
        data = rescored.to_bytes()
        try:
            store_record(self.client, self.version.run_id, data)
            self.client.set_model_version_tag(self.version.name, str(self.version.version), RECORD_TAG,
                                              hashlib.sha256(data).hexdigest())
        except Exception as exc:  # noqa: BLE001  (the comparison stands; only the next one re-scores again)
            log.warning("%s: re-scored record not stored with the version (%s)", self.name, _first_line(exc))
        return rescored, "re-scored"

    def parameters(self) -> int | None:
        """The ``parameters`` tag, or the count of the registered folder's weights (then tagged), or None."""
        if self.version.tags.get("parameters", "").isdigit():
            return int(self.version.tags["parameters"])
        try:
            count = weights_parameters(self.folder())
        except Exception as exc:  # noqa: BLE001  (model files gone)
            log.warning("%s: parameter count unknown (%s)", self.name, _first_line(exc))
            return None
        if count is not None:
            self.client.set_model_version_tag(self.version.name, str(self.version.version), "parameters", str(count))
        return count


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def challenge(client: Any, uri: str, cand: Entry, cand_version: str, cand_record: ExampleRecord | None, champ: Any,
              rule: PromotionRule, rescore: Rescore | None) -> _Outcome:
    """Judge the candidate against the champion version ``champ`` by ``rule``: the same validation split (tag
    ``validation_split_sha256``) first, then the point scores (``point``) or the paired records (the candidate's
    ``cand_record``; the champion's stored one, else its registered model re-scored by ``rescore``)."""
    tags = champ.tags
    if "validation_score" not in tags:
        return _Outcome(False, "the champion has no validation score (chosen on test before validation scores were "
                               "recorded); not comparable", comparable=False)
    champ_split = tags.get("validation_split_sha256")
    if champ_split != cand.validation_split_sha256:
        return _Outcome(False, f"validation split changed ({(champ_split or '?')[:12]} -> "
                               f"{cand.validation_split_sha256[:12]}); scores not comparable", comparable=False)
    if not rule.needs_records:
        promoted, reason = decide(cand.validation_score, cand.validation_split_sha256, float(tags["validation_score"]),
                                  champ_split)
        return _Outcome(promoted, reason)
    if cand_record is None:
        return _Outcome(False, f"challenger v{cand_version} has no per-example validation record; never compared "
                               "unpaired", comparable=False)
    with tempfile.TemporaryDirectory() as tmp:
        side = _Champion(client, champ, uri, Path(tmp))
        champ_record, paired = side.record(rescore)
        if champ_record is None:
            return _Outcome(False, paired, comparable=False)
        counts = ((weights_parameters(cand.model_dir), side.parameters()) if rule.rule == "non_inferiority"
                  else (None, None))
    try:
        verdict = judge(cand_record, champ_record, rule, counts)
    except ExamplesError as exc:
        return _Outcome(False, f"{exc}", comparable=False)
    return _Outcome(verdict.promoted, verdict.reason, interval=verdict.interval, statistic=verdict.statistic,
                    paired=paired)


def promote_task(client: Any, entries: Sequence[Entry], uri: str, force: bool = False,
                 copy_origin: tracking.CopyOrigin = tracking.no_copies, rule: PromotionRule | None = None,
                 rescore: Rescore | None = None) -> Decision:
    """Register ``entries`` (one task), each version with its validation record, point ``candidate`` at the best on
    validation, and move ``champion`` to it if ``rule`` says so (default: ``superiority`` at margin 0 with the
    bootstrap's defaults, :class:`bert_pipeline.mlops.promotion.PromotionRule`; the test scores are tags only).

    The candidate is paired with the champion's stored record; a champion without one is re-scored with
    ``rescore`` (:data:`Rescore`) on its registered model. The champion stays, and the decision says why, when the
    two are not comparable (another validation split, a champion without a validation score, a side without a
    record and none to be had by re-scoring, records of different examples) unless ``force``: then it moves
    without a comparison. ``force`` never overrides a comparison the candidate lost.

    ``copy_origin``: which paths lie in a temporary copy of the repository (:func:`log_version`). Logs one INFO line
    per version (:func:`version_line`) and nothing else at INFO; MLflow's artifact progress bars are the caller's to
    switch off (``bert-pipeline promote`` does).

    Raises:
        PipelineError: no entries, entries of several tasks / main metrics, or an entry's record without a
            validation run of its saved seed (checked before anything is registered).
    """
    if not entries:
        raise PipelineError("nothing to promote: no fine-tuned models")
    tasks = {e.task for e in entries}
    metrics = {e.main_metric for e in entries}
    if len(tasks) != 1 or len(metrics) != 1:
        raise PipelineError(f"promote_task: one task and main metric expected, got {sorted(tasks)} {sorted(metrics)}")
    rule = rule or PromotionRule()
    task = entries[0].task
    records = [_own_record(e) for e in entries]
    registered = [register(client, e, uri, copy_origin, r) for e, r in zip(entries, records, strict=True)]
    versions = [version for version, _ in registered]
    cand = best_on_validation(entries)
    index = next(i for i, e in enumerate(entries) if e is cand)
    cand_version = versions[index]
    client.set_registered_model_alias(task, CANDIDATE, cand_version)
    champ = champion_of(client, task)
    champ_version = str(champ.version) if champ is not None else None
    champ_member = champ.tags.get("family_member") if champ is not None else None
    if champ is None:
        outcome, champ_score = _Outcome(True, "no champion yet", comparable=False), None
    elif champ_version == cand_version:
        outcome, champ_score = _Outcome(False, "candidate is already the champion", comparable=False), cand.validation_score
        champ_member = cand.member
    else:
        champ_score = float(champ.tags["validation_score"]) if "validation_score" in champ.tags else None
        outcome = challenge(client, uri, cand, cand_version, records[index], champ, rule, rescore)
        if not outcome.comparable:
            outcome = _Outcome(force, f"forced: {outcome.reason}" if force else
                               f"{outcome.reason} (use --force to promote anyway)", comparable=False)
    promoted = outcome.promoted
    if promoted:
        client.set_registered_model_alias(task, CHAMPION, cand_version)
    decision = Decision(task, cand_version, cand.member, cand.validation_score, champ_version, champ_score, promoted,
                        outcome.reason, champion_member=champ_member, rule=rule.rule, metric=cand.main_metric,
                        interval=outcome.interval, statistic=outcome.statistic, paired=outcome.paired,
                        compared=outcome.comparable)
    client.set_model_version_tag(task, cand_version, "promotion_decision", decision.line())
    champion = cand_version if promoted else champ_version
    for entry, (version, new) in zip(entries, registered, strict=True):
        log.info("%s", version_line(entry, version, new, [alias for alias, at in ((CANDIDATE, cand_version),
                                                                                    (CHAMPION, champion)) if at == version]))
    log.debug("%s", decision.line())
    return decision


def _own_record(entry: Entry) -> ExampleRecord | None:
    """The validation run of ``entry``'s saved seed out of its per-example record (None without a record).

    Raises:
        PipelineError: the record has no validation run of that seed.
    """
    if entry.examples is None:
        return None
    try:
        return validation_record(entry.examples, entry.seed, f"{entry.member}-{entry.task}")
    except ExamplesError as exc:
        raise PipelineError(str(exc)) from None


def version_line(entry: Entry, version: str, new: bool, aliases: Sequence[str]) -> str:
    """One registered version as one line: ``TASK vN: MEMBER seed S, validation METRIC V, test T, new|already
    registered, aliases A, B|none`` (e.g. ``sentiment v2: distilled seed 8, validation accuracy 0.7600, test 0.7500,
    new, aliases candidate, champion``): the aliases it holds after the promotion."""
    seed = "none" if entry.seed is None else entry.seed
    return (f"{entry.task} v{version}: {entry.member} seed {seed}, validation {entry.main_metric} "
            f"{entry.validation_score:.4f}, test {entry.test_score:.4f}, "
            f"{'new' if new else 'already registered'}, aliases {', '.join(aliases) or 'none'}")
