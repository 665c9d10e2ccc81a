"""The stage graph, read from DVC itself (``dvc.yaml`` with foreach/matrix stages expanded), and its status.

Nothing here restates the pipeline: stage names, edges and what is out of date all come from DVC's own
``Repo.index.graph`` and ``Repo.status()``, the same objects ``dvc dag`` and ``dvc status`` print from.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageGraph:
    """Pipeline stages in a topological order and the edges between them.

    Attributes:
        order: stage addresses (``train``, ``finetune@bert-sentiment``; ``sub/dvc.yaml:name`` for a
            ``dvc.yaml`` in a subdirectory) so that every stage comes after all its upstream stages.
        upstream: stage -> stages whose outputs it depends on (direct edges only, as ``dvc dag`` draws them).
        out_of_date: stages ``dvc status`` reports as changed (deps, outs, params, command, or no lock entry).
    """

    order: list[str]
    upstream: dict[str, list[str]]
    out_of_date: frozenset[str] = frozenset()
    gpu: frozenset[str] = field(default_factory=frozenset)

    def edges(self) -> set[tuple[str, str]]:
        """``(upstream, downstream)`` pairs, the arrows of ``dvc dag``."""
        return {(u, s) for s, ups in self.upstream.items() for u in ups}

    def ancestors(self, stage: str) -> set[str]:
        """All stages ``stage`` depends on, directly or not."""
        seen: set[str] = set()
        todo = list(self.upstream[stage])
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(self.upstream[s])
        return seen

    def descendants(self, stage: str) -> set[str]:
        """All stages that depend on ``stage``, directly or not."""
        return {s for s in self.order if stage in self.ancestors(s)}

    def needs_run(self) -> set[str]:
        """Stages DVC may have to run: the out-of-date ones and everything downstream of them.

        A downstream stage of a changed one may still turn out unchanged (same upstream outputs); its task asks
        ``dvc repro --single-item``, which decides. Every other stage is skipped without a subprocess.
        """
        todo = set(self.out_of_date)
        for stage in self.order:  # topological: upstream decisions are known
            if any(u in todo for u in self.upstream[stage]):
                todo.add(stage)
        return todo

    def select(self, targets: list[str] | None) -> StageGraph:
        """The subgraph that ``dvc repro TARGETS`` would cover: the targets and all their upstream stages.

        A target may be a stage address, a foreach/matrix group name (``finetune`` = every ``finetune@...``) or
        a glob (``finetune@*-ner``).

        Raises:
            KeyError: a target that matches no stage (the message lists the stages).
        """
        if not targets:
            return self
        chosen: set[str] = set()
        for target in targets:
            hits = [s for s in self.order if s == target or s.startswith(f"{target}@") or fnmatch.fnmatch(s, target)]
            if not hits:
                raise KeyError(f"stage {target!r} is not in dvc.yaml: expected one of {', '.join(self.order)}")
            for hit in hits:
                chosen |= {hit} | self.ancestors(hit)
        order = [s for s in self.order if s in chosen]
        return StageGraph(
            order=order,
            upstream={s: [u for u in self.upstream[s] if u in chosen] for s in order},
            out_of_date=frozenset(self.out_of_date & chosen),
            gpu=frozenset(self.gpu & chosen),
        )


def load_graph(root: str | Path, gpu_patterns: list[str] | None = None, with_status: bool = True) -> StageGraph:
    """Read the pipeline graph (and, once, its status) through DVC's Python API.

    Args:
        root: the repository root (holds ``dvc.yaml``).
        gpu_patterns: glob patterns (``orchestration.gpu_stages``) naming the stages that need a GPU.
        with_status: also ask DVC which stages are out of date (one ``Repo.status()`` for all stages).

    Only pipeline stages become nodes; ``.dvc`` files (data added with ``dvc add``/``dvc import``) are sources
    with nothing to run, so an edge through one is dropped.
    """
    from dvc.repo import Repo
    from dvc.stage import PipelineStage

    root = Path(root).resolve()
    with Repo(str(root)) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        stages = [s for s in graph.nodes if isinstance(s, PipelineStage)]
        name = {s: _address(s, root) for s in stages}
        upstream = {name[s]: sorted(name[d] for d in graph.successors(s) if d in name) for s in stages}
        status = repo.status() if with_status else {}
    # Repo.status() keys are addresses relative to the current directory; map them back through the stages.
    changed = {name[s] for s in stages if s.addressing in status}
    order = _topological(upstream, [name[s] for s in stages])
    gpu = {s for s in order if any(fnmatch.fnmatch(s, p) for p in gpu_patterns or [])}
    return StageGraph(order=order, upstream=upstream, out_of_date=frozenset(changed),
                      gpu=frozenset(gpu))


def _address(stage, root: Path) -> str:
    """The address ``dvc repro`` takes when run in ``root``: ``name`` for ``root/dvc.yaml``, else
    ``sub/dvc.yaml:name`` (``Stage.addressing`` would be relative to this process's working directory)."""
    dvcfile = Path(stage.dvcfile.path).resolve()
    if dvcfile == root / "dvc.yaml":
        return stage.name
    return f"{dvcfile.relative_to(root).as_posix()}:{stage.name}"


def _topological(upstream: dict[str, list[str]], declared: list[str]) -> list[str]:
    """Kahn's algorithm, ties broken by declaration order in ``dvc.yaml`` (so the order is stable)."""
    rank = {s: i for i, s in enumerate(declared)}
    done: list[str] = []
    left = dict(upstream)
    while left:
        ready = sorted((s for s, ups in left.items() if all(u not in left for u in ups)), key=rank.__getitem__)
        if not ready:
            raise ValueError(f"dvc.yaml: the stage graph has a cycle among {sorted(left)}")
        done.append(ready[0])
        del left[ready[0]]
    return done


def parse_dot(text: str) -> tuple[set[str], set[tuple[str, str]]]:
    """Nodes and edges of ``dvc dag --dot`` output (used by tests and checks)."""
    nodes: set[str] = set()
    edges: set[tuple[str, str]] = set()
    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if "->" in line:
            a, b = (p.strip().strip('"') for p in line.split("->"))
            edges.add((a, b))
        elif line.startswith('"'):
            nodes.add(line.strip('"'))
    return nodes, edges


def read_lock(root: str | Path) -> dict[str, Any]:
    """The ``stages`` mapping of ``dvc.lock`` (empty when there is none)."""
    path = Path(root) / "dvc.lock"
    if not path.exists():
        return {}
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("stages", {}) or {}


def merge_lock(root: str | Path, entries: dict[str, Any]) -> None:
    """Write ``entries`` (stage -> ``dvc.lock`` entry) into ``root/dvc.lock``, keeping every other entry.

    Entries for stages in a ``dvc.yaml`` of a subdirectory (``sub/dvc.yaml:name``) go to that directory's lock.
    """
    by_file: dict[Path, dict[str, Any]] = {}
    for stage, entry in entries.items():
        rel, _, name = stage.rpartition(":")
        lock = Path(root) / (Path(rel).parent if rel else Path()) / "dvc.lock"
        by_file.setdefault(lock, {})[name] = entry
    for path, new in by_file.items():
        data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
        data = data or {"schema": "2.0", "stages": {}}
        data.setdefault("stages", {}).update(new)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        tmp.replace(path)


def lock_entry(root: str | Path, stage: str) -> dict[str, Any] | None:
    """The ``dvc.lock`` entry of ``stage`` (``None`` when the stage never ran)."""
    rel, _, name = stage.rpartition(":")
    base = Path(root) / (Path(rel).parent if rel else Path())
    return read_lock(base).get(name)
