"""The pipeline's DVC stages, one module each (``python -m stages.NAME``), plus the params schema and the console
script for the tools that are not stages (``bert-pipeline``).

This package is the side that knows ``params.yaml`` and the DVC layout: a stage reads its typed params section
(:mod:`stages.params`), calls :mod:`bert_pipeline`, and writes its outputs atomically. See ``ARCHITECTURE.md``.

:func:`require_inputs` is the one check, run first by every stage's ``main``, that the inputs ``dvc.yaml`` declares
for the stage exist; it names what is missing, the stage that makes it, and the command that builds it.
:func:`settings_from` names the params key of a library argument whose value the library refused
(:class:`bert_pipeline.errors.SettingError`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bert_pipeline  # noqa: F401  (offline and telemetry defaults before any HF library is imported)
from bert_pipeline.errors import PipelineError, SettingError

log = logging.getLogger(__name__)

DVC_YAML = Path("dvc.yaml")
MAX_NAMED = 4  # missing inputs named in the message; the rest are counted
_TEMPLATE = re.compile(r"\$\{\s*([^}]+?)\s*\}")


def _substitute(text: str, values: dict[str, Any]) -> str:
    """``${item.model}``, ``${item}``, ``${key}`` of a ``foreach`` entry replaced by ``values`` (others kept)."""
    return _TEMPLATE.sub(lambda m: str(values.get(m.group(1), m.group(0))), text)


def _paths(entries: Any) -> list[str]:
    """The paths of a ``deps``/``outs``/``metrics``/``plots`` list (an entry is a path or ``{path: options}``)."""
    out: list[str] = []
    for entry in entries or []:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, dict):
            out.extend(str(k) for k in entry)
    return out


def dvc_stages(dvc_yaml: Path = DVC_YAML) -> dict[str, dict[str, list[str]]]:
    """``{address: {"deps": [...], "outs": [...]}}`` of every stage in ``dvc_yaml``; ``outs`` includes metrics and
    plots files. A ``foreach`` stage gives one ``name@key`` address per entry (DVC's: a mapping's key, a scalar
    list's value, a list of mappings' index), its ``${item.X}``/``${item}``/``${key}`` filled in; paths that stay
    templated (``vars``, ``matrix``) are dropped.

    Raises:
        OSError, yaml.YAMLError: the file cannot be read or parsed.
    """
    import yaml

    raw = yaml.safe_load(Path(dvc_yaml).read_text(encoding="utf-8")) or {}
    stages: dict[str, dict[str, list[str]]] = {}
    for name, spec in (raw.get("stages") or {}).items():
        if not isinstance(spec, dict):
            continue
        if "foreach" in spec and isinstance(spec.get("do"), dict):
            items = spec["foreach"]
            if isinstance(items, dict):
                pairs = list(items.items())
            elif any(isinstance(v, dict | list) for v in items or []):  # DVC's keys: a list of mappings by index
                pairs = [(str(i), v) for i, v in enumerate(items)]
            else:
                pairs = [(str(v), v) for v in items or []]
            instances = []
            for key, item in pairs:
                values = {"key": key, "item": item}
                if isinstance(item, dict):
                    values.update({f"item.{k}": v for k, v in item.items()})
                instances.append((f"{name}@{key}", spec["do"], values))
        else:
            instances = [(name, spec, {})]
        for address, body, values in instances:
            filled = {field: [_substitute(p, values) for p in _paths(body.get(field))]
                      for field in ("deps", "outs", "metrics", "plots")}
            stages[address] = {"deps": [p for p in filled["deps"] if "${" not in p],
                               "outs": [p for f in ("outs", "metrics", "plots") for p in filled[f] if "${" not in p]}
    return stages


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _producers(missing: str, stages: dict[str, dict[str, list[str]]]) -> tuple[str, list[str]]:
    """What to name for a missing dep and the stages that write it: the output that contains it when that output
    is missing as a whole (``data/raw`` rather than a file inside it), else the dep itself."""
    named, makers = missing, []
    for address, spec in stages.items():
        for out in spec["outs"]:
            if _within(missing, out):  # the dep is this output or inside it
                makers.append(address)
                if not Path(out).exists():
                    named = out
            elif _within(out, missing):  # the dep is a folder of several stages' outputs (metrics/finetune)
                makers.append(address)
    return named, sorted(set(makers))


def _stage_names(addresses: list[str]) -> str:
    """``a, b`` or ``finetune@*`` for several entries of one ``foreach`` stage."""
    groups: dict[str, list[str]] = {}
    for address in addresses:
        groups.setdefault(address.split("@")[0], []).append(address)
    return ", ".join(f"{base}@*" if len(group) > 1 else group[0] for base, group in groups.items())


def require_inputs(stage: str, dvc_yaml: Path = DVC_YAML) -> None:
    """Refuse to start ``stage`` (a ``dvc.yaml`` address such as ``pretrain`` or ``finetune@minilm-qa``) when a dep
    that ``dvc.yaml`` declares for it, and that another stage makes, does not exist: checked before any output, MLflow
    run or model load is started (a missing folder would otherwise surface later as a library error or, for a path
    that looks like a hub name such as ``models/tokenizer``, as a network message).

    Deps no stage makes (the code, a user's files) are left to the stage's own checks, as is everything when
    ``dvc_yaml`` is absent or does not declare ``stage`` (a run outside the project, ``finetune`` with a model of the
    user's own). Paths are relative to the working directory, which DVC sets to the repository root.

    Raises:
        PipelineError: one line naming the stage, the missing inputs (the most upstream first, at most
            :data:`MAX_NAMED`, the rest counted) each with the stage that makes it, and the fix: ``dvc repro STAGE``
            builds them first.
    """
    if not Path(dvc_yaml).is_file():
        return
    try:
        stages = dvc_stages(dvc_yaml)
    except Exception as exc:  # noqa: BLE001  (a broken dvc.yaml is DVC's to report; this check only helps)
        log.debug("%s: not read (%s); inputs of %s not checked", dvc_yaml, exc, stage)
        return
    if stage not in stages:
        return
    others = {k: v for k, v in stages.items() if k != stage}
    named: dict[str, list[str]] = {}
    for dep in stages[stage]["deps"]:
        if not Path(dep).exists():
            path, makers = _producers(dep, others)
            if makers:
                named.setdefault(path, makers)
    if not named:
        return
    order = {address: i for i, address in enumerate(stages)}
    paths = sorted(named, key=lambda p: min(order[m] for m in named[p]))  # the most upstream first: built first
    shown = [f"{p} (made by {_stage_names(named[p])})" for p in paths[:MAX_NAMED]]
    more = f" and {len(paths) - MAX_NAMED} more" if len(paths) > MAX_NAMED else ""
    what = f"input {shown[0]}" if len(paths) == 1 else f"{len(paths)} inputs: {', '.join(shown)}{more}"
    it = "it" if len(paths) == 1 else "them"
    raise PipelineError(f"stage {stage}: missing {what}; run `dvc repro {stage}`, which builds {it} first "
                        f"(or `dvc pull` if a DVC remote holds {it})")


@contextmanager
def settings_from(section: str, source: str = "params.yaml") -> Iterator[None]:
    """Map the library's argument names to params keys: a :class:`~bert_pipeline.errors.SettingError` raised inside
    becomes the one-line :class:`PipelineError` ``"{source}: {section}.{setting}: {message}"`` (``"{source}:
    {section}: {message}"`` when the error names no single setting).

    Use it around a library call whose arguments are the keys of one params section under the same names:
    ``with settings_from("prepare_corpus"): build_corpus(...)`` turns ``sources[mine].path: no file matches ...`` into
    ``params.yaml: prepare_corpus.sources[mine].path: no file matches ...``. Other errors pass unchanged.
    """
    try:
        yield
    except SettingError as err:
        key = f"{section}.{err.setting}" if err.setting else section
        raise PipelineError(f"{source}: {key}: {err.message}") from None
