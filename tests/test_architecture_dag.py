"""ARCHITECTURE.md's Mermaid chart of the stages is dvc.yaml's graph: DVC's own stage graph, each ``foreach`` stage
drawn once (``finetune`` for every ``finetune@{model}-{task}``), transitively reduced (an edge says "runs after";
one implied by a longer path is left out). After a change to the graph: ``python -m tests.test_architecture_dag
--write`` redraws it."""

from __future__ import annotations

import re

from tests.conftest import REPO

ARCHITECTURE = REPO / "ARCHITECTURE.md"
CHART = re.compile(r"(<!-- dvc.yaml's graph.*?-->\n```mermaid\n)(.*?)(```\n)", re.DOTALL)


def stage_chart(root=REPO) -> str:
    """The Mermaid ``flowchart`` of ``root/dvc.yaml``'s stages, one node per stage name."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph
        edges = {(needed.addressing.split("@")[0], stage.addressing.split("@")[0])
                 for stage, needed in graph.edges()}
        names = {stage.addressing.split("@")[0] for stage in graph.nodes()}
    collapsed = nx.DiGraph()
    collapsed.add_nodes_from(names)
    collapsed.add_edges_from((a, b) for a, b in edges if a != b)
    reduced = nx.transitive_reduction(collapsed)
    order = {name: i for i, name in enumerate(nx.lexicographical_topological_sort(collapsed))}
    lines = ["flowchart TD"]
    lines += [f"  {a} --> {b}" for a, b in sorted(reduced.edges(), key=lambda e: (order[e[0]], order[e[1]]))]
    return "\n".join(lines) + "\n"


def test_the_architecture_chart_is_dvc_yamls_graph():
    match = CHART.search(ARCHITECTURE.read_text(encoding="utf-8"))
    assert match, "ARCHITECTURE.md: no Mermaid chart after the marker `<!-- dvc.yaml's graph ... -->`"
    assert match.group(2) == stage_chart(), "redraw it: python -m tests.test_architecture_dag --write"


def test_the_chart_collapses_foreach_and_drops_implied_edges():
    chart = stage_chart()
    assert "  fetch_data --> prepare_corpus\n" in chart and "@" not in chart
    assert "  fetch_data --> evaluate\n" not in chart  # implied by fetch_data --> ... --> evaluate
    assert "  finetune --> teacher_logits\n" in chart  # a dep templated by a param (task_distill.teacher)


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.test_architecture_dag --write   (redraws ARCHITECTURE.md's stage chart)")
    text = ARCHITECTURE.read_text(encoding="utf-8")
    if not CHART.search(text):
        sys.exit("ARCHITECTURE.md: no chart to redraw (expected the marker and a ```mermaid block after it)")
    ARCHITECTURE.write_text(CHART.sub(lambda m: m.group(1) + stage_chart() + m.group(3), text), encoding="utf-8")
