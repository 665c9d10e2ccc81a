"""``bert-pipeline``: the pipeline's tools that are not DVC stages, behind one console script.

    bert-pipeline profile smoke [--print] [-n NAME]    # run the graph under profiles/smoke.yaml as a DVC experiment
    bert-pipeline promote [--tasks sentiment] [--rule superiority] [--margin 0.0] [--force]  # register, move aliases
    bert-pipeline predict models/finetuned/minilm-sentiment "A gripping, funny film."   # one JSON line per input
    bert-pipeline export models/finetuned/minilm-qa [-o OUT_DIR] [--check-texts FILE]  # ONNX + parity, one JSON line
    bert-pipeline compare baseline seed43 [--split validation] [--resamples N]   # two runs, paired intervals

(``python -m stages.cli ...`` is the same command.) ``profile`` validates the profile's overrides against the schema
first (a bad key fails before DVC starts), then runs ``dvc exp run --temp --set-param ...``: the run happens in a
temporary copy, ``params.yaml`` is never edited and ``dvc exp show`` lists it. ``promote`` is the explicit,
never-cached step that changes the shared registry (:mod:`bert_pipeline.mlops.registry`): run it after
``dvc repro`` on results you mean to keep, never from a throwaway ``dvc exp run``. It moves ``champion`` by
``params.yaml``'s ``promote`` rule (``--rule``/``--margin`` override it) on the paired bootstrap of the per-example
validation records (``evaluate.intervals``' settings), re-scoring a champion registered without one. ``predict`` reads a fine-tuned
folder: sentiment ``{"text", "label", "probability", "tokens", "truncated"}`` (``truncated``: the text is longer than
``--max-seq-length`` tokens and was classified on its beginning); NER ``{"text", "entities": [{"type", "text",
"start", "end", "score"}]}`` (character offsets; a long text is tagged whole, in overlapping windows); QA
(``--context`` required, each input a question) ``{"question", "answer", "start", "end", "score", "logit_sum",
"windows", "question_truncated"}``; a pair classifier (``--text-pair PASSAGE``, each input the first text)
``{"text", "text_pair", "label", "probability", "tokens", "truncated"}``; a regression head ``{"text", "value",
"tokens", "truncated"}``; a multi-label classifier ``{"text", "labels": [{"label", "probability"}], "tokens",
"truncated"}`` (every label above 0.5, most probable first; none is an empty list). For QA, ``score`` is the
answer's probability as Hugging Face's question-answering pipeline reports it (a softmax of the start and of the end
logits over the answer's window, multiplied), and
``logit_sum`` the start + end logit the decoder ranks spans by (unnormalised). Texts come from the arguments, else
one per line on stdin; an empty or blank text is refused by position, and so is a terminal on stdin (nothing piped).

``export`` writes the folder as ONNX (:func:`bert_pipeline.mlops.onnx_export.export_folder`; default
``onnx/{folder name}/``: ``model.onnx``, config, tokenizer, ``onnx_export.json``), checks it against PyTorch on the
inputs of ``--check-texts`` (one per line: a text for sentiment, a sentence of space-separated words for NER, a JSON
object ``{"question", "context"}`` for QA; any line may be a JSON object with the task data's columns) or, without
it, on built-in inputs of several lengths, and prints ``{"model_dir", "out_dir", "kind", "opset", "inputs",
"outputs", "examples", "windows", "compared", "agreement", "max_abs_diff": {OUTPUT: float}, "latency_ms_b1":
{"pytorch", "onnxruntime"}, "speedup", "threads"}`` (``agreement``: the share of equal predictions, i.e. labels,
per-token tags or decoded answers; ``speedup``: PyTorch ms / ONNX Runtime ms at batch 1). A logit difference above
``--tolerance`` is an error and writes nothing.

``compare A B`` reads the per-example records (``metrics/examples/*.arrow``) of two runs, each a git revision, a DVC
experiment's name or ``workspace`` (the files on disk now), from git and DVC's cache (:mod:`stages.revisions`: it
trains and predicts nothing), and prints a Markdown table on stdout, one row per member and task both runs scored:
the task's main metric, A's and B's score with its interval, ``B - A`` with its paired interval (points, e.g.
``+1.2 [-0.8, +3.1]``: +0.012 of accuracy or F1; :func:`bert_pipeline.report.compare.compare_records`) and whether
that interval excludes 0; a line after the table names the members and tasks one run alone has. The intervals are
the paired cluster bootstrap of ``params.yaml``'s ``evaluate.intervals`` (this workspace's file; ``--resamples``
overrides its ``resamples``). It refuses, in one line, two runs that scored different held-out examples of a member
and task (the split hashes differ: the file and both hashes named) and a revision with no records (the fix named).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import flatten
from stages.dvc_log import is_missing_hash_warning, relay_filtered
from stages.params.base import DEFAULT_PARAMS, ParamsError, View, load_view, read_yaml
from stages.params.evaluate import BootstrapView
from stages.params.root import load_params

log = logging.getLogger(__name__)

PROFILES_DIR = Path("profiles")


# ------------------------------------------------------------------------------------------------ profile
def available_profiles(profiles_dir: Path = PROFILES_DIR) -> list[str]:
    """Names of the profiles in ``profiles_dir`` (file stems of ``*.yaml``)."""
    return sorted(p.stem for p in profiles_dir.glob("*.yaml"))


def load_profile(name: str, profiles_dir: Path = PROFILES_DIR) -> dict[str, Any]:
    """Return the flattened dotted-key overrides of profile ``name``.

    Raises:
        PipelineError: unknown profile name or a file that is not a mapping.
    """
    path = profiles_dir / f"{name}.yaml"
    if name not in available_profiles(profiles_dir):
        raise PipelineError(f"unknown profile {name!r}: expected one of {', '.join(available_profiles(profiles_dir))}")
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise PipelineError(f"{path}: expected a mapping of params overrides, got {type(raw).__name__}")
    return flatten(raw)


def hydra_value(value: Any) -> str:
    """``value`` written in Hydra's override grammar, the one ``dvc exp run --set-param`` parses (JSON is not: its
    quoted mapping keys, as in a profile's ``pretrain.phases``, fail there). Strings are quoted, so ``"2e-3"`` or
    ``"null"`` stay text."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(hydra_value(item) for item in value) + "]"
    return json.dumps(value)  # a quoted string, a number, true/false or null


def set_param_args(overrides: dict[str, Any], base: dict[str, Any] | None = None) -> list[str]:
    """``--set-param key=value`` arguments for ``dvc exp run`` (values in Hydra's grammar: :func:`hydra_value`).

    ``base``: the params mapping the overrides apply to (``params.yaml``). A key it does not have, such as an entry
    of a mapping ``params.yaml`` leaves empty (``variants.budgets.bert.max_steps`` over ``budgets: {}``), is written
    ``++key=value``: DVC applies ``--set-param`` with Hydra in struct mode, which refuses to add a key without the
    prefix (``++``: set it, adding it where absent). The schema has checked every key before (a typo never gets
    this far), and a key ``base`` has keeps the plain form."""
    present = set(flatten(base)) if base is not None else None
    args: list[str] = []
    for key, value in overrides.items():
        add = "++" if present is not None and key not in present else ""
        args += ["--set-param", f"{add}{key}={hydra_value(value)}"]
    return args


def set_param_items(args: list[str]) -> list[str]:
    """The raw ``key=value`` (or ``~key``) strings of the ``--set-param``/``-S`` options among ``dvc exp run``
    arguments, in order."""
    items: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg in ("--set-param", "-S"):
            items.append(next(rest, ""))
        elif arg.startswith("--set-param="):
            items.append(arg.removeprefix("--set-param="))
        elif arg.startswith("-S") and not arg.startswith("--"):
            items.append(arg[2:].removeprefix("="))
    return items


def params_as_dvc_applies(params_path: Path, items: list[str]) -> None:
    """Validate ``params_path`` with the ``--set-param`` strings ``items`` applied by DVC's own function
    (``dvc.utils.hydra.apply_overrides``, on a copy): what the experiment's stages will read. Hydra merges a
    mapping value into the mapping it replaces (``variants.budgets={}`` keeps every budget) and ``~key`` deletes,
    which a dotted-key overlay does not show.

    Raises:
        ParamsError: the merged params break the schema (one line; the file is named as ``params_path`` with the
            overrides applied as dvc exp run applies them).
        PipelineError: DVC refuses an override (one line).
    """
    import tempfile

    from dvc.exceptions import InvalidArgumentError
    from dvc.utils.hydra import apply_overrides

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / Path(params_path).name
        copy.write_bytes(Path(params_path).read_bytes())
        try:
            apply_overrides(copy, items)
        except InvalidArgumentError as exc:
            cause = str(exc.__cause__ or exc).splitlines()[0]
            raise PipelineError(f"--set-param: dvc exp run would refuse these overrides ({cause})") from None
        try:
            load_params(copy)
        except ParamsError as exc:
            where = f"{Path(params_path).name} with the overrides applied as dvc exp run applies them"
            raise ParamsError(str(exc).replace(str(copy), where, 1)) from None


def set_param_values(args: list[str]) -> dict[str, Any]:
    """The ``--set-param``/``-S`` overrides among ``dvc exp run`` arguments as ``{dotted key: value}``, each value
    parsed as DVC parses it (Hydra's override grammar, which DVC uses: ``2e-3`` is a float, ``abc`` text, ``[1, 2]``
    a list). A deletion (``~key``) is left to DVC.

    Raises:
        PipelineError: an override Hydra's grammar cannot parse (one line naming it).
    """
    items = set_param_items(args)
    if not items:
        return {}
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    values: dict[str, Any] = {}
    for item in items:
        try:
            (override,) = parser.parse_overrides([item])
        except OverrideParseException as exc:
            raise PipelineError(f"--set-param {item!r}: expected key=value as dvc exp run takes it "
                                f"({str(exc).splitlines()[0]})") from None
        if not override.is_delete():
            values[override.key_or_group] = override.value()
    return values


def profile_command(name: str, extra: list[str] | None = None, params_path: Path = DEFAULT_PARAMS) -> list[str]:
    """The ``dvc exp run`` command for profile ``name``, after validating the merged params: ``params_path``, the
    profile's overrides, then the ``--set-param`` values among ``extra`` (the order ``dvc exp run`` applies them).

    Raises:
        PipelineError: unknown profile, or a ``--set-param`` that is not ``key=value``.
        ParamsError: a key the schema does not have, or a wrong type; the line names where the bad value came
            from: the profile's file, ``--set-param``, or ``params_path``.
    """
    overrides = load_profile(name)
    given = set_param_values(list(extra or []))
    origins = {key: (PROFILES_DIR / f"{name}.yaml").as_posix() for key in overrides}
    origins.update(dict.fromkeys(given, "--set-param"))
    base = read_yaml(Path(params_path)) or {}
    profile_args = set_param_args(overrides, base)
    try:  # what the stages will read: DVC's merge of every override, deletions included
        params_as_dvc_applies(params_path, set_param_items(profile_args) + set_param_items(list(extra or [])))
    except (ParamsError, PipelineError):
        # the same problem in the plain overlay names where the bad value came from (the profile, --set-param) and
        # a misspelt key's close match (DVC only says it could not override the key)
        load_params(params_path, {**overrides, **given}, origins)
        raise
    return ["dvc", "exp", "run", "--temp", *profile_args, *(extra or [])]


def uncommitted_lock(repo: Path = Path(".")) -> str | None:
    """How ``dvc.lock`` in ``repo`` differs from git's HEAD: ``"untracked"``, ``"modified"``, or None (committed,
    absent, or not a git checkout). ``dvc exp run --temp`` starts from the committed lock, and ``dvc exp apply``
    replaces the workspace's with the experiment's."""
    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--", "dvc.lock"], cwd=repo, capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    status = proc.stdout[:2] if proc.returncode == 0 else ""
    return "untracked" if status == "??" else "modified" if status.strip() else None


def run_profile(args: argparse.Namespace, extra: list[str]) -> None:
    cmd = profile_command(args.name, [a for a in extra if a != "--"])
    if args.print:
        sys.stdout.write(shlex.join(cmd) + "\n")
        return
    state = uncommitted_lock()
    if state:
        log.warning("dvc.lock is %s in git: the experiment starts from the committed dvc.lock (stages whose inputs "
                    "match a run DVC cached are restored, not rerun), and `dvc exp apply` will replace this "
                    "workspace's dvc.lock with the experiment's and take away the outputs of every stage that lock "
                    "does not hold (`dvc repro` restores them from the cache); to keep this run as the baseline, commit it "
                    "first: git add dvc.lock && git commit -m results", state)
    log.info("running: %s", shlex.join(cmd))
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    dropped = relay_filtered(proc.stderr, sys.stderr.buffer, is_missing_hash_warning)
    proc.wait()
    if dropped:
        log.info("DVC found no dvc.lock entry for %d outputs (a first run here): nothing to restore, the run "
                 "builds them", dropped)
    if proc.returncode != 0:
        raise PipelineError(f"profile {args.name}: dvc exp run failed with exit code {proc.returncode}")


# ------------------------------------------------------------------------------------------------ promote


def entries_by_task(teacher: str, student: str, scratch: str, only: list[str] | None, data_seed: int = 0) -> dict:
    """Per task, the registrable :class:`bert_pipeline.mlops.registry.Entry` list in family order, each with its
    per-example record (``metrics/examples/{member}-{task}.arrow``; None where the member has none).

    Raises:
        PipelineError: a requested task has no results, a metrics file's model folder is missing, or a per-example
            record is unreadable.
    """
    from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError
    from bert_pipeline.mlops.registry import Entry, split_sha256
    from bert_pipeline.report.report import by_model_task, family_order, load_finetune_results, task_order
    from stages.members import EXAMPLES, METRICS, TASKS
    from stages.model_cards import FINETUNED, released

    index = by_model_task(load_finetune_results(METRICS))
    tasks = task_order({t for _, t in index})
    for t in only or []:
        if t not in tasks:
            raise PipelineError(f"--tasks: no {METRICS}/*-{t}.json (tasks with results: {', '.join(tasks)})")
    out: dict[str, list[Entry]] = {}
    for t in only or tasks:
        entries = []
        for m in family_order({m for m, tt in index if tt == t}, teacher, student, scratch):
            r = index[m, t]
            record = json.loads(Path(r.source).read_text(encoding="utf-8"))
            # the examples each score was measured on (finetune draws both subsets with data_seed)
            validation_split = split_sha256(TASKS / t / "validation", record["validation_examples"], data_seed)
            test_split = split_sha256(TASKS / t / "test", record["test_examples"], data_seed)
            folder = Path(released(FINETUNED / f"{m}-{t}"))  # the release copy: the weights with their card
            if not (folder / "config.json").exists():
                raise PipelineError(f"{folder}: missing (named by {r.source}); run `dvc repro model_cards`")
            # the folder holds the best-validation seed's weights (finetune's ``saved``): its own scores choose
            main = r.main_metric
            saved = record.get("saved") or {"seed": record["seeds"][0]}
            means = record["validation"][main]["mean"], record["test"][main]["mean"]
            own = (saved["validation"][main] if "validation" in saved else means[0],
                   saved["test"][main] if "test" in saved else means[1])
            examples_path = EXAMPLES / f"{m.replace('/', '--')}-{t}.arrow"
            examples = None
            if examples_path.exists():
                try:
                    examples = ExampleRecord.read(examples_path)
                except ExamplesError as exc:
                    raise PipelineError(f"{exc}; rerun `dvc repro` to rewrite it") from None
            else:
                log.warning("%s: missing; %s cannot be compared on evidence (rerun its fine-tuning stage)",
                            examples_path, m)
            entries.append(Entry(m, t, folder, saved["seed"], main, own[0], validation_split, own[1], test_split,
                                 r.source, validation_mean=means[0], test_mean=means[1], examples=examples))
        out[t] = entries
    return out


PROGRESS_BAR_ENV = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
"""MLflow's switch (``mlflow.environment_variables``) for its artifact upload/download progress bars: ``promote``
turns it off unless the user set it, so each registered version is one log line, not four bars."""


@contextlib.contextmanager
def quiet_artifact_transfers() -> Iterator[None]:
    """MLflow's artifact progress bars off for the block (``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false`` unless the
    environment sets it already), the environment restored afterwards."""
    if os.environ.get(PROGRESS_BAR_ENV) is not None:
        yield
        return
    os.environ[PROGRESS_BAR_ENV] = "false"
    try:
        yield
    finally:
        os.environ.pop(PROGRESS_BAR_ENV, None)


def promotion_rule(args: argparse.Namespace, params: Any) -> Any:
    """The :class:`bert_pipeline.mlops.promotion.PromotionRule` of ``params.yaml``'s ``promote`` section (``--rule``,
    ``--margin`` override it) with ``evaluate.intervals``' bootstrap settings."""
    from bert_pipeline.mlops.promotion import PromotionRule

    own, boot = params.promote, params.evaluate.intervals
    return PromotionRule(rule=args.rule or own.rule, margin=own.margin if args.margin is None else args.margin,
                         resamples=boot.resamples, confidence=boot.confidence, seed=boot.seed, method=boot.method)


def rescorer(task: str, params: Any) -> Any:
    """The :data:`bert_pipeline.mlops.registry.Rescore` of ``task``: a registered folder scored on
    ``data/tasks/{task}``'s validation subset as fine-tuning drew it (``finetune.tasks.{task}``,
    ``finetune.data_seed``, ``finetune.precision``, ``finetune.eval_batch_size``).

    The returned callable raises PipelineError when ``task`` has no ``finetune.tasks`` entry."""
    from bert_pipeline.mlops.promotion import rescore_validation
    from stages.members import TASKS

    p = params.finetune

    def rescore(model_dir: Path, seed: int) -> Any:
        if task not in p.tasks:
            raise PipelineError(f"params.yaml: finetune.tasks: no settings for task {task!r}")
        return rescore_validation(model_dir, TASKS / task, p.tasks[task].model_dump(), p.data_seed, seed,
                                  precision=p.precision, batch_size=p.eval_batch_size)
    return rescore


def run_promote(args: argparse.Namespace) -> None:
    """Register each task's fine-tuned versions and move its aliases: one INFO line per version on stderr
    (:func:`bert_pipeline.mlops.registry.version_line`), the task's decision on stdout
    (:meth:`bert_pipeline.mlops.registry.Decision.line`)."""
    from mlflow import MlflowClient

    from bert_pipeline.mlops.registry import promote_task
    from stages.dvc_adapter import copy_origin, tracking_uri

    params = load_params()
    p = params.evaluate
    rule = promotion_rule(args, params)
    uri = tracking_uri()
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    with quiet_artifact_transfers():
        for task, entries in entries_by_task(p.teacher, p.student, p.scratch, args.tasks,
                                             params.finetune.data_seed).items():
            decision = promote_task(client, entries, uri, force=args.force, copy_origin=copy_origin, rule=rule,
                                    rescore=rescorer(task, params))
            sys.stdout.write(decision.line() + "\n")


# ------------------------------------------------------------------------------------------------ predict
def predict_lines(args: argparse.Namespace, texts: list[str]) -> list[dict]:
    """The output records for ``texts`` (see the module docstring).

    Raises:
        PipelineError: a QA model without ``--context``, ``--context`` for another model, or a folder that is not a
            fine-tuned model.
    """
    from bert_pipeline.evaluation.predictor import load_predictor
    from bert_pipeline.tasks import ServeRequest

    pred = load_predictor(args.model_dir)
    task = pred.task
    if getattr(args, "text_pair", None) is None and task.needs_pair:
        raise PipelineError(f"{args.model_dir}: a sentence-pair classifier needs --text-pair \"SECOND TEXT\" "
                            "(each input is the first text of a pair)")
    if args.context is not None and not task.reads_context:
        raise PipelineError(f"--context: {args.model_dir} is a {pred.kind} model ({task.name}), which reads texts "
                            "only; --context is for a question-answering model (leave it out)")
    pair = getattr(args, "text_pair", None)
    if pair is not None and not task.accepts_pair:
        raise PipelineError(f"--text-pair: {args.model_dir} is a {pred.kind} model ({task.name}); --text-pair is for a "
                            "sentence-pair classifier (leave it out)")
    if pair is not None and not pair.strip():
        raise PipelineError("predict: --text-pair is empty: expected the second text of each pair")
    request = ServeRequest(text_pair=pair, context=args.context, max_seq_length=args.max_seq_length,
                           doc_stride=args.doc_stride, n_best=args.n_best, max_answer_length=args.max_answer_length)
    found = task.serve(pred, texts, request)
    return [{task.input_key: t, **({"text_pair": pair} if pair is not None else {}), **r}
            for t, r in zip(texts, found, strict=True)]


def read_texts(args: argparse.Namespace, stdin: Any = None) -> list[str]:
    """The texts to predict on: the arguments, else one per line of ``stdin`` (default ``sys.stdin``); each output
    line answers the input at the same position.

    With no arguments and a terminal on stdin there is nothing to read: refused at once rather than waiting
    silently for typed lines (``predict`` is a batch command whose stdout is JSON lines for a program; a prompt
    would mix with a pipeline's output, and a forgotten text is the usual cause).

    Raises:
        PipelineError: no text at all, an empty or blank text (named by its position: argument or stdin line), or
            an empty ``--context``.
    """
    stdin = sys.stdin if stdin is None else stdin
    what = "question" if args.context is not None else "text"
    if args.context is not None and not args.context.strip():
        raise PipelineError("predict: --context is empty: expected the passage a QA model answers from")
    if args.texts:
        for i, text in enumerate(args.texts, 1):
            if not text.strip():
                raise PipelineError(f"predict: {what} {i} of {len(args.texts)} (arguments) is "
                                    f"{'empty' if not text else 'blank'}: give words, or leave it out")
        return list(args.texts)
    if stdin is None or stdin.isatty():
        raise PipelineError(f"predict: no input: give {what}s as arguments or pipe them on stdin, one per line "
                            "(stdin is a terminal)")
    texts = [line.rstrip("\r\n") for line in stdin]
    for i, text in enumerate(texts, 1):
        if not text.strip():
            raise PipelineError(f"predict: stdin line {i} is {'empty' if not text else 'blank'}: expected one {what} "
                                "per line; drop blank lines (e.g. grep -v '^[[:space:]]*$')")
    if not texts:
        raise PipelineError(f"predict: no input: stdin is empty; give {what}s as arguments or one per line on stdin")
    return [t.strip() for t in texts]


def run_predict(args: argparse.Namespace) -> None:
    texts = read_texts(args)
    for record in predict_lines(args, texts):
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")


# ------------------------------------------------------------------------------------------------- export
ONNX_DIR = Path("onnx")
# Built-in check inputs: short, medium and longer than one window at the defaults (--max-seq-length 384), so the
# check covers padding, several lengths and (NER, QA) several windows of one input.
_LONG = " ".join(["The committee met in London on Monday and Alice Smith of the Acme Corporation spoke first."] * 40)
SAMPLE_INPUTS: dict[str, list[dict[str, Any]]] = {
    "sequence-classification": [{"text": t} for t in (
        "A gripping, funny film.", "Dull.",
        "The plot wanders, the actors look bored and the ending arrives long after anyone still cares.", _LONG)],
    "token-classification": [{"tokens": t.split()} for t in (
        "Alice Smith flew to Paris on Monday .", "Bob",
        "The Acme Corporation opened an office in Berlin , said its chief executive , John Doe .", _LONG)],
    "question-answering": [
        {"question": "Who spoke first?", "context": "Alice Smith of the Acme Corporation spoke first."},
        {"question": "Where did the committee meet?", "context": _LONG},
        {"question": "When?", "context": "The committee met in London on Monday."}],
}


def read_check_inputs(path: Path, task: Any) -> list[dict[str, Any]]:
    """The check inputs of ``path`` for a model of the task kind ``task`` (see the module docstring); blank lines
    skipped.

    Raises:
        PipelineError: unreadable file, a line that is not the JSON object it must be, or no inputs.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineError(f"--check-texts {path}: cannot read ({exc.strerror or exc})") from None
    out: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("{") or task.reads_context:
            try:
                record = json.loads(text)
            except json.JSONDecodeError:
                record = None
            if not isinstance(record, dict):
                raise PipelineError(f"{path}:{number}: expected a JSON object (a {task.head} model's check input, e.g. "
                                    '{"question": "...", "context": "..."} for QA)')
            out.append(record)
        else:
            out.append(task.plain_input(text))
    if not out:
        raise PipelineError(f"--check-texts {path}: no inputs (one per line)")
    return out


def run_export(args: argparse.Namespace) -> None:
    from bert_pipeline.evaluation.predictor import task_of
    from bert_pipeline.mlops.onnx_export import FACTS_FILE, export_folder

    task = task_of(args.model_dir)
    examples = read_check_inputs(args.check_texts, task) if args.check_texts else SAMPLE_INPUTS[task.head]
    if task.needs_pair and not args.check_texts:  # a pair classifier reads two texts
        examples = [{**ex, "text_pair": _LONG if i % 2 else "The committee met in London."}
                    for i, ex in enumerate(examples)]
    out_dir = args.out_dir or ONNX_DIR / Path(args.model_dir).resolve().name
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / FACTS_FILE).is_file():
        raise PipelineError(f"-o {out_dir}: the folder exists and holds files that are not an ONNX export (no "
                            f"{FACTS_FILE}); the export replaces its folder whole: give a new or empty folder")
    if out_dir.exists() and not out_dir.is_dir():
        raise PipelineError(f"-o {out_dir}: exists and is not a folder; give a new or empty folder")
    report = export_folder(args.model_dir, out_dir, examples, max_seq_length=args.max_seq_length,
                           doc_stride=args.doc_stride, n_best=args.n_best, max_answer_length=args.max_answer_length,
                           opset=args.opset, exporter=args.exporter, batch_size=args.batch_size,
                           threads=args.num_threads, latency_examples=args.latency_examples,
                           warmup=args.warmup_runs, runs=args.timed_runs, tolerance=args.tolerance,
                           tolerance_name="--tolerance")
    parity, latency = report.parity, report.latency
    record = {"model_dir": str(args.model_dir), "out_dir": str(out_dir), "kind": report.kind, "opset": report.opset,
              "inputs": report.inputs, "outputs": report.outputs, "examples": parity.examples,
              "windows": parity.windows, "compared": parity.compared, "agreement": parity.agreement,
              "max_abs_diff": parity.max_abs_diff,
              "latency_ms_b1": {"pytorch": round(latency.pytorch_ms, 3), "onnxruntime": round(latency.onnxruntime_ms, 3)},
              "speedup": round(latency.speedup, 3), "threads": latency.threads}
    sys.stdout.write(json.dumps(record) + "\n")


# ------------------------------------------------------------------------------------------------ compare
class CompareView(View):
    """What ``compare`` reads of ``params.yaml``: ``evaluate.intervals``."""

    evaluate: BootstrapView


def run_compare(args: argparse.Namespace) -> None:
    """Compare run ``args.b`` against run ``args.a`` (module docstring): the table on stdout, progress in the log.

    Raises:
        PipelineError: a revision that is not one, or has no records; two runs that scored different examples.
        ParamsError: ``evaluate.intervals`` of ``params.yaml`` breaks the schema.
    """
    from bert_pipeline.evaluation.examples import ExamplesError
    from bert_pipeline.evaluation.intervals import Bootstrap
    from bert_pipeline.report.compare import compare_records, comparison_table
    from stages.revisions import EXAMPLES, read_revision

    if args.a == args.b:
        log.warning("comparing %s with itself: every difference is 0", args.a)
    p = load_view(CompareView).evaluate.intervals
    boot = Bootstrap(args.resamples or p.resamples, p.confidence, p.seed, p.method)
    records = {rev: read_revision(rev) for rev in dict.fromkeys((args.a, args.b))}
    log.info("%s split, %d resamples per split, %g%% %s intervals (evaluate.intervals)", args.split, boot.resamples,
             boot.confidence * 100, boot.method)
    try:
        comparison = compare_records(records[args.a], records[args.b], boot, args.split, a_name=args.a,
                                     b_name=args.b, label=lambda name: (EXAMPLES / f"{name}.arrow").as_posix())
    except ExamplesError as exc:
        raise PipelineError(str(exc)) from None  # one line: the file, both runs and what differs
    if not comparison.rows:
        raise PipelineError(f"{args.a} and {args.b} have no member and task in common (A: "
                            f"{', '.join(comparison.only_a)}; B: {', '.join(comparison.only_b)})")
    sys.stdout.write(comparison_table(comparison, args.a, args.b))


def _positive_float(text: str) -> float:
    """An argparse type: a float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value:g}")
    return value


def _fraction(text: str) -> float:
    """An argparse type: a float in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 1), got {value:g}")
    return value


# ---------------------------------------------------------------------------------------------------- main
def _int_at_least(minimum: int):
    """An argparse type: an int >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}, got {value}")
        return value
    return parse


_positive = _int_at_least(1)
_non_negative = _int_at_least(0)


def _window_options(sub: argparse.ArgumentParser) -> None:
    """The windowing and QA-decoding options ``predict`` and ``export`` share (the same defaults as serving)."""
    sub.add_argument("--max-seq-length", type=_positive, default=384, help="tokens per window (default 384)")
    sub.add_argument("--doc-stride", type=_positive, default=128,
                     help="overlap in tokens of the windows a long QA context or NER text is cut into (default 128)")
    sub.add_argument("--n-best", type=_positive, default=20, help="QA start/end candidates per window (default 20)")
    sub.add_argument("--max-answer-length", type=_positive, default=30, help="QA answer tokens at most (default 30)")


def parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The ``bert-pipeline`` argument parser (one sub-command per tool) and its ``predict`` sub-parser."""
    top = argparse.ArgumentParser(prog="bert-pipeline", description="The BERT pipeline's tools that are not DVC "
                                  "stages (python -m stages.NAME runs those).")
    sub = top.add_subparsers(dest="command", required=True, metavar="{profile,promote,predict,export,compare}")
    prof = sub.add_parser("profile", help="run the pipeline under profiles/NAME.yaml as a DVC experiment",
                          description="Other options (e.g. -n NAME, or -S KEY=VALUE for a further params override, checked "
                          "like the profile's) go to dvc exp run; -- TARGET ... limits the run to those stages.")
    prof.add_argument("name", help=f"profile name (a file in {PROFILES_DIR}/: "
                      f"{', '.join(available_profiles()) or 'none found here'})")
    prof.add_argument("--print", action="store_true", help="print the dvc command instead of running it")
    prom = sub.add_parser("promote", help="register fine-tuned models; move candidate and champion per task")
    prom.add_argument("--tasks", nargs="+", help="only these tasks (default: every task with results)")
    prom.add_argument("--rule", choices=("superiority", "non_inferiority", "point"),
                      help="how champion moves (default: params.yaml promote.rule)")
    prom.add_argument("--margin", type=_fraction, help="the rule's margin, a fraction in [0, 1) (default: "
                      "params.yaml promote.margin; e.g. 0.02 for non_inferiority)")
    prom.add_argument("--force", action="store_true",
                      help="promote the candidate without a comparison when it cannot be compared with the champion "
                      "(validation split changed, no per-example record to pair); never over a comparison it lost")
    pred = sub.add_parser(
        "predict", help="one JSON line per input from a fine-tuned model folder",
        description="One JSON line per input. Sentiment: label, probability, tokens, truncated. NER: entities with "
        "character offsets and score (the entity's probability). QA: answer, start, end, score (the answer's "
        "probability as Hugging Face's question-answering pipeline reports it: softmax of the start and of the end "
        "logits over the answer's window, multiplied), logit_sum (start + end logit, what the decoder ranks spans "
        "by; not a probability), windows, question_truncated.")
    pred.add_argument("model_dir", type=Path, help="a fine-tuned model folder (models/finetuned/{model}-{task})")
    pred.add_argument("texts", nargs="*", help="texts (QA: questions), none blank; read from stdin, one per line, "
                      "when absent (stdin must then be a pipe or a file, not a terminal)")
    pred.add_argument("--context", help="the passage QA answers from (required for a QA model)")
    pred.add_argument("--text-pair", help="the second text of every pair (a sentence-pair classifier, e.g. "
                      "headline_match: the texts are headlines, --text-pair the article passage); output adds text_pair")
    _window_options(pred)
    exp = sub.add_parser("export", help="a fine-tuned folder as ONNX, checked against PyTorch; one JSON line",
                         description="Export a fine-tuned folder to ONNX (dynamic batch and sequence axes), check "
                         "ONNX Runtime against PyTorch and time both at batch 1.")
    exp.add_argument("model_dir", type=Path, help="a fine-tuned model folder (models/finetuned/{model}-{task})")
    exp.add_argument("-o", "--out-dir", type=Path, help=f"output folder (default {ONNX_DIR}/NAME of MODEL_DIR)")
    exp.add_argument("--check-texts", type=Path, metavar="FILE",
                     help="check inputs, one per line (QA: JSON {\"question\", \"context\"}); default: built-in ones")
    _window_options(exp)
    exp.add_argument("--opset", type=_positive, default=18, help="ONNX opset (default 18)")
    exp.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript",
                     help="torch.onnx.export path (default torchscript: fast; dynamo: torch.export, opset >= 18)")
    exp.add_argument("--tolerance", type=_positive_float, default=1e-4,
                     help="largest absolute logit difference accepted (default 1e-4)")
    exp.add_argument("--batch-size", type=_positive, default=8, help="windows per parity batch (default 8)")
    exp.add_argument("--latency-examples", type=_positive, default=8, help="windows timed at batch 1 (default 8)")
    exp.add_argument("--warmup-runs", type=_non_negative, default=2, help="untimed rounds first (default 2)")
    exp.add_argument("--timed-runs", type=_positive, default=10, help="timed rounds, the median is reported (default 10)")
    exp.add_argument("--num-threads", type=_positive, default=1, help="intra-op threads of both runtimes (default 1)")
    cmp = sub.add_parser(
        "compare", help="two runs' scores per member and task, with paired bootstrap intervals; trains nothing",
        description="Read the per-example records (metrics/examples/*.arrow) of runs A and B from git and DVC's "
        "cache and print, per member and task both scored, each run's main metric and B - A with paired bootstrap "
        "intervals (evaluate.intervals of params.yaml), in points. A and B: a git revision (HEAD, a branch, a "
        "commit), a DVC experiment's name, or 'workspace' (the files on disk now).")
    cmp.add_argument("a", metavar="A", help="the reference run: revision, experiment name or 'workspace'")
    cmp.add_argument("b", metavar="B", help="the run compared with it (the table shows B - A)")
    cmp.add_argument("--split", choices=("test", "validation"), default="test",
                     help="the held-out split compared (default test)")
    cmp.add_argument("--resamples", type=_positive, default=None,
                     help="bootstrap draws per split (default: evaluate.intervals.resamples)")
    return top, pred


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    top, predict_parser = parser()
    if argv[:1] == ["predict"]:  # texts and options in any order, as `bert-pipeline predict DIR --context C Q`
        run_predict(predict_parser.parse_intermixed_args(argv[1:]))
        return
    args, extra = top.parse_known_args(argv)
    if args.command == "profile":
        run_profile(args, extra)
    elif extra:
        top.error(f"unrecognized arguments: {' '.join(extra)}")
    elif args.command == "export":
        run_export(args)
    elif args.command == "compare":
        run_compare(args)
    else:
        run_promote(args)


def console() -> None:
    """Entry point of the ``bert-pipeline`` console script."""
    run_main(main)


if __name__ == "__main__":
    console()
