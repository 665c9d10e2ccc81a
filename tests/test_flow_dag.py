"""flows.dag: the stage graph read through DVC's API equals what `dvc dag` prints; selection and lock merging."""

from __future__ import annotations

import sys

import pytest

from flows.dag import load_graph, lock_entry, merge_lock, parse_dot, read_lock
from tests.flow_repos import make_repo, sh

STAGES = {
    "a": {"cmd": "echo a > a.txt", "outs": ["a.txt"]},
    "b": {"cmd": "cat a.txt > b.txt", "deps": ["a.txt"], "outs": ["b.txt"]},
    "c": {"cmd": "echo c > c.txt", "outs": ["c.txt"]},
    "m": {"matrix": {"x": ["p", "q"], "y": [1, 2]}, "cmd": "cat b.txt c.txt > m-${item.x}-${item.y}.txt",
          "deps": ["b.txt", "c.txt"], "outs": ["m-${item.x}-${item.y}.txt"]},
    "f": {"foreach": ["u", "v"], "do": {"cmd": "echo ${item} > f-${item}.txt", "deps": ["a.txt"],
                                       "outs": ["f-${item}.txt"]}},
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("dag") / "repo", STAGES, gpu_params())


def gpu_params():
    return {"orchestration": {"gpu_stages": ["m@*"]}}


def test_graph_equals_dvc_dag(repo):
    graph = load_graph(repo, ["m@*"])
    nodes, edges = parse_dot(sh([sys.executable, "-m", "dvc", "dag", "--dot"], repo))
    assert set(graph.order) == nodes
    assert graph.edges() == edges
    assert {"m@p-1", "m@q-2", "f@u", "f@v"} <= nodes  # matrix and foreach expanded
    pos = {s: i for i, s in enumerate(graph.order)}
    assert all(pos[u] < pos[d] for u, d in edges)  # topological
    assert graph.gpu == {"m@p-1", "m@p-2", "m@q-1", "m@q-2"}
    assert graph.out_of_date == nodes  # nothing ran yet


def test_select_and_needs_run(repo):
    graph = load_graph(repo, [])
    sub = graph.select(["m@p-1"])
    assert sub.order == ["a", "b", "c", "m@p-1"]
    assert set(graph.select(["f"]).order) == {"a", "f@u", "f@v"}  # a foreach group name
    with pytest.raises(KeyError, match="nope"):
        graph.select(["nope"])
    # Only `c` out of date: it and everything downstream of it may run; the `a` branch is skipped.
    partial = type(graph)(graph.order, graph.upstream, frozenset({"c"}))
    assert partial.needs_run() == {"c", "m@p-1", "m@p-2", "m@q-1", "m@q-2"}


def test_merge_lock_keeps_other_entries(tmp_path):
    merge_lock(tmp_path, {"a": {"cmd": "echo a", "outs": [{"path": "a.txt", "md5": "1"}]}})
    merge_lock(tmp_path, {"b": {"cmd": "echo b"}, "sub/dvc.yaml:c": {"cmd": "echo c"}})
    assert set(read_lock(tmp_path)) == {"a", "b"}
    assert lock_entry(tmp_path, "a")["outs"][0]["md5"] == "1"
    assert lock_entry(tmp_path, "sub/dvc.yaml:c") == {"cmd": "echo c"}
