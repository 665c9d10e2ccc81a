"""Params declared = params read: the keys each stage's code read (recorded by :class:`stages.params.base.RecordedParams`
when ``BERT_PIPELINE_PARAMS_RECORD`` names a file) against the params ``dvc.yaml`` declares for that stage.

A read key is covered by a declared key when it is that key or lies below it (``finetune.tasks.ner.epochs`` under
``finetune.tasks.ner``); a declared key is used when some read key is it, lies below it, or lies above it (a read of
all of ``finetune.tasks`` uses ``finetune.tasks.ner``). A read key no declaration covers is a param DVC does not
watch (a change of it leaves the stage's outputs stale); a declared key nothing read is a param whose change reruns
the stage for nothing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def declared_params(repo: Path) -> dict[str, tuple[str, list[str]]]:
    """``{cmd: (stage address, declared params keys of params.yaml)}`` of every stage of ``repo/dvc.yaml``, as DVC
    resolves them (``foreach`` items and ``${...}`` from params.yaml filled in)."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        out = {}
        for stage in dvc.index.stages:
            keys = [key for dep in stage.deps if type(dep).__name__ == "ParamsDependency"
                    and Path(dep.def_path).name == "params.yaml" for key in dep.params]
            out[stage.cmd] = (stage.name, keys)
    return out


def read_records(record_file: Path) -> dict[str, set[str]]:
    """``{cmd: keys read}`` from the record file, the reads of several runs of one command merged."""
    reads: dict[str, set[str]] = {}
    for line in Path(record_file).read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        reads.setdefault(entry["cmd"], set()).update(entry["reads"])
    return reads


def _below(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def mismatches(declared: list[str], read: set[str]) -> tuple[list[str], list[str]]:
    """``(read but not declared, declared but not read)`` for one stage, each sorted."""
    undeclared = sorted(r for r in read if not any(_below(r, d) for d in declared))
    unused = sorted(d for d in declared if not any(_below(r, d) or _below(d, r) for r in read))
    return undeclared, unused


def problems(repo: Path, record_file: Path) -> list[str]:
    """One line per stage whose reads and declarations differ (``stage: reads K, which dvc.yaml does not declare``
    / ``stage: declares K, which its code never reads``), for every stage that ran with recording on."""
    stages = declared_params(repo)
    out = []
    for cmd, read in sorted(read_records(record_file).items()):
        if cmd not in stages:
            out.append(f"{cmd}: no dvc.yaml stage runs this command")
            continue
        address, declared = stages[cmd]
        undeclared, unused = mismatches(declared, read)
        out += [f"{address}: reads {key}, which dvc.yaml does not declare in its params" for key in undeclared]
        out += [f"{address}: declares {key} in its params, which its code never reads" for key in unused]
    return out


@contextlib.contextmanager
def recorded_reads(monkeypatch) -> Iterator[set[str]]:
    """Record, in this process, the params keys a stage's ``main`` reads while the block runs (its views come
    wrapped in :class:`stages.params.base.RecordedParams`); yields the set the keys are added to. No exit hook is
    registered: compare the set with :func:`declared_params` and :func:`mismatches` after the block."""
    from stages.params import base

    reads: set[str] = set()
    monkeypatch.setenv(base.RECORD_ENV, "in-process")
    monkeypatch.setattr(base, "_READS", reads)
    monkeypatch.setattr(base, "_RECORDING", ["in-process"])  # as if the exit hook were registered
    yield reads


def stage_graph(repo: Path) -> dict[str, dict[str, list[str]]]:
    """``{stage address: {"params": declared params.yaml keys, "deps": dep paths, "outs": out paths}}`` of every
    stage of ``repo/dvc.yaml`` as DVC resolves it (``foreach`` items and ``${...}`` from ``repo/params.yaml`` filled
    in); ``repo`` needs only ``dvc.yaml``, ``params.yaml`` and ``.dvc/``."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        out = {}
        for stage in dvc.index.stages:
            params = [key for dep in stage.deps if type(dep).__name__ == "ParamsDependency"
                      and Path(dep.def_path).name == "params.yaml" for key in dep.params]
            deps = [dep.def_path for dep in stage.deps if type(dep).__name__ != "ParamsDependency"]
            out[stage.name] = {"params": params, "deps": deps, "outs": [o.def_path for o in stage.outs]}
    return out


def downstream(graph: dict[str, dict[str, list[str]]], roots: set[str]) -> set[str]:
    """The stages of ``graph`` (:func:`stage_graph`) that depend, through a chain of deps on outs (a path equal to,
    inside or around an out), on any of ``roots``: what reruns anyway when the roots' outputs change."""
    def overlaps(a: str, b: str) -> bool:
        a, b = a.rstrip("/"), b.rstrip("/")
        return a == b or a.startswith(b + "/") or b.startswith(a + "/")

    reached: set[str] = set()
    frontier = set(roots)
    while frontier:
        outs = [o for name in frontier for o in graph[name]["outs"]]
        frontier = {name for name, stage in graph.items() if name not in reached and name not in roots
                    and any(overlaps(d, o) for d in stage["deps"] for o in outs)}
        reached |= frontier
    return reached


def grid_keys(params: dict[str, Any]) -> list[str]:
    """The dotted keys of every ``grid`` mapping in a params mapping (at any depth), sorted."""
    found = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                dotted = f"{path}.{key}" if path else str(key)
                if key == "grid":
                    found.append(dotted)
                walk(value, dotted)

    walk(params, "")
    return sorted(found)


def readers_of(graph: dict[str, dict[str, list[str]]], key: str) -> set[str]:
    """The stages of ``graph`` whose declared params cover ``key`` (declare it, a key above it, or a key below it):
    the stages DVC calls changed when the value at ``key`` is edited."""
    return {name for name, stage in graph.items() if any(_below(key, d) or _below(d, key) for d in stage["params"])}
