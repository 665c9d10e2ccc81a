"""``bert-pipeline compare A B``: two runs' per-example records, paired (:mod:`bert_pipeline.report.compare`), read
at a git revision, a DVC experiment or the workspace (:mod:`stages.revisions`) of a real tiny git + DVC repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, SplitInfo, split_hash
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.report.compare import compare_records, comparison_table, member_task
from bert_pipeline.report.report import fmt_change, fmt_score
from stages.cli import main
from tests.conftest import REPO
from tests.flow_repos import GIT, commit, make_repo, sh


def qa_record(f1: np.ndarray, gold: str = "g", seeds=(42,), n_docs: int = 10) -> ExampleRecord:
    """A QA record on ``len(f1)`` test examples in ``n_docs`` clusters; ``gold``: a tag of the gold answers (another
    tag, another split hash)."""
    f1 = np.atleast_2d(np.asarray(f1, dtype=np.float64))
    n = f1.shape[1]
    ids = [str(i) for i in range(n)]
    rec = ExampleRecord("qa", "f1", None)
    rec.splits["test"] = SplitInfo(ids, [f"doc{i % n_docs}" for i in range(n)],
                                   split_hash(ids, [[f"{gold}{i}"] for i in range(n)]))
    for row, seed in zip(f1, seeds, strict=True):
        rec.add("test", "full", seed, {"f1": row, "exact_match": (row == 1).astype(np.float64)})
    return rec


def scores(seed: int, n: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 0.8, n)


# ------------------------------------------------------------------------------------------------ the library
def test_identical_records_differ_by_exactly_zero():
    f1 = np.stack([scores(0), scores(1)])
    a = {"minilm-qa": qa_record(f1, seeds=(42, 43))}
    b = {"minilm-qa": qa_record(f1.copy(), seeds=(42, 43))}
    comparison = compare_records(a, b, Bootstrap(resamples=300, seed=3))
    (row,) = comparison.rows
    assert (row.member, row.task, row.metric) == ("minilm", "qa", "f1")
    assert (row.difference.point, row.difference.low, row.difference.high) == (0.0, 0.0, 0.0)
    assert not row.difference.excludes(0.0)
    assert row.a == row.b and row.a.point == pytest.approx(f1.mean(), abs=1e-12)
    assert row.difference.sources == "examples+seeds"
    table = comparison_table(comparison, "HEAD", "workspace")
    assert "| +0.0 [+0.0, +0.0] | no " in table and "only in" not in table


def test_shifted_scores_give_the_point_difference_and_its_paired_interval():
    a_f1 = scores(0)
    b_f1 = a_f1.copy()
    b_f1[::4] += 0.2  # a quarter of the examples 0.2 better: +5 points
    boot = Bootstrap(resamples=2000, seed=0)
    comparison = compare_records({"minilm-qa": qa_record(a_f1)}, {"minilm-qa": qa_record(b_f1)}, boot)
    (row,) = comparison.rows
    assert row.difference.point == pytest.approx(b_f1.mean() - a_f1.mean(), abs=1e-12)
    assert row.difference.point == pytest.approx(0.05, abs=1e-12)
    assert 0.0 < row.difference.low < 0.05 < row.difference.high  # every draw gains (paired), by a varying amount
    assert row.difference.excludes(0.0)
    assert (row.a.point, row.b.point) == pytest.approx((a_f1.mean(), b_f1.mean()), abs=1e-12)
    # the unpaired intervals overlap although the paired one excludes 0: the pairing is what shows the gain
    assert row.b.low < row.a.high
    text = comparison_table(comparison, "A", "B")
    assert f"| {fmt_change(0.05, row.difference, unit='')} | yes " in text and "| +5.0 [+" in text
    # a uniform shift: every draw gains exactly the same
    (row,) = compare_records({"minilm-qa": qa_record(a_f1)}, {"minilm-qa": qa_record(a_f1 + 0.1)}, boot).rows
    assert row.difference.point == pytest.approx(0.1, abs=1e-12)
    assert row.difference.high - row.difference.low < 1e-12


def test_different_split_hashes_are_refused_in_one_line():
    a = {"minilm-qa": qa_record(scores(0))}
    b = {"minilm-qa": qa_record(scores(0), gold="other")}
    ha, hb = a["minilm-qa"].splits["test"].hash, b["minilm-qa"].splits["test"].hash
    with pytest.raises(ExamplesError) as err:
        compare_records(a, b, Bootstrap(resamples=10), a_name="HEAD", b_name="exp1",
                        label=lambda name: f"records/{name}.arrow")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("records/minilm-qa.arrow: HEAD and exp1 scored different test examples")
    assert ha[:12] in message and hb[:12] in message


def test_members_on_one_side_are_listed_after_the_table():
    a = {"minilm-qa": qa_record(scores(0)), "scratch-qa": qa_record(scores(1))}
    b = {"minilm-qa": qa_record(scores(0)), "minilm-headline_match": qa_record(scores(2))}
    comparison = compare_records(a, b, Bootstrap(resamples=50))
    assert [r.name for r in comparison.rows] == ["minilm-qa"]
    assert (comparison.only_a, comparison.only_b) == (["scratch-qa"], ["minilm-headline_match"])
    lines = comparison_table(comparison, "base", "exp").splitlines()
    assert lines[-1] == "only in base: scratch-qa; only in exp: minilm-headline_match" and lines[-2] == ""
    assert len(lines) == 5  # header, rule, one row, blank, the line


def test_member_and_task_of_a_name():
    assert member_task("minilm_student-headline_match") == ("minilm_student", "headline_match")
    assert member_task("bert-my-task") == ("bert", "my-task")


def test_the_record_folder_is_the_stages_one():
    """``stages.revisions.EXAMPLES`` is ``stages.members.EXAMPLES`` (read from the source: importing that module
    imports torch)."""
    import ast

    from stages.revisions import EXAMPLES

    tree = ast.parse((REPO / "stages" / "members.py").read_text(encoding="utf-8"))
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["EXAMPLES"]]
    assert ast.unparse(value) == f"Path({EXAMPLES.as_posix()!r})"


# ------------------------------------------------------------------------------------- through the console
RECORDS = "metrics/examples"
PARAMS = {"evaluate": {"intervals": {"resamples": 200, "confidence": 0.95, "seed": 0, "method": "percentile",
                                     "primary": ["gain_over_scratch"]}}}


def write_input(repo, name: str, rec: ExampleRecord) -> None:
    (repo / "inputs").mkdir(exist_ok=True)
    rec.write(repo / "inputs" / f"{name}.arrow")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A git + DVC repository whose stage copies ``inputs/{name}.arrow`` to ``metrics/examples/`` (a DVC out):
    commit 1 without results, commit 2 with two records (``HEAD``), experiment ``better`` with ``minilm-qa``'s
    scores 10 points higher (applied to the workspace too)."""
    repo = make_repo(tmp_path_factory.mktemp("compare") / "repo", {"record": {"foreach": ["minilm-qa", "scratch-qa"], "do": {
        "cmd": f"mkdir -p {RECORDS} && cp inputs/${{item}}.arrow {RECORDS}/${{item}}.arrow",
        "deps": ["inputs/${item}.arrow"], "outs": [f"{RECORDS}/${{item}}.arrow"]}}}, PARAMS)
    write_input(repo, "minilm-qa", qa_record(scores(0)))
    write_input(repo, "scratch-qa", qa_record(scores(1)))
    sh([sys.executable, "-m", "dvc", "repro", "-q"], repo)
    commit(repo, "results")
    write_input(repo, "minilm-qa", qa_record(scores(0) + 0.1))
    sh([*GIT, "add", "inputs"], repo)
    sh([sys.executable, "-m", "dvc", "exp", "run", "-q", "-n", "better"], repo)
    return repo


def compare(argv, repo, monkeypatch, capsys) -> str:
    monkeypatch.chdir(repo)
    main(["compare", *argv])
    return capsys.readouterr().out


def row_of(table: str, name: str) -> list[str]:
    member, task = member_task(name)
    (line,) = [x for x in table.splitlines() if x.startswith(f"| {member} ") and f" {task} " in x]
    return [c.strip() for c in line.strip("|").split("|")]


def test_compare_reads_a_revision_an_experiment_and_the_workspace(runs, monkeypatch, capsys):
    for b in ("better", "workspace"):
        out = compare(["HEAD", b], runs, monkeypatch, capsys)
        lines = out.splitlines()
        assert [c.strip() for c in lines[0].strip("|").split("|")] == [
            "member", "task", "metric", "A: HEAD", f"B: {b}", "B - A [95%]", "excludes 0"], out
        assert len(lines) == 4, out  # header, rule, two rows: nothing else on stdout
        gained, same = row_of(out, "minilm-qa"), row_of(out, "scratch-qa")
        assert gained[2] == "f1" and gained[5:] == ["+10.0 [+10.0, +10.0]", "yes"], out
        assert gained[3].startswith(f"{fmt_score(scores(0).mean())} [") and gained[4].startswith(
            f"{fmt_score(scores(0).mean() + 0.1)} [")
        assert same[5:] == ["+0.0 [+0.0, +0.0]", "no"], out
    # the other way round, and at a named commit
    out = compare(["better", "HEAD", "--resamples", "100"], runs, monkeypatch, capsys)
    assert row_of(out, "minilm-qa")[5] == "-10.0 [-10.0, -10.0]"


def test_compare_refuses_a_revision_without_records_and_an_unknown_one(runs, monkeypatch):
    monkeypatch.chdir(runs)
    with pytest.raises(PipelineError, match=r"^HEAD~1: no per-example records \(metrics/examples/\*\.arrow\): run "
                                            r"`dvc repro`.*`dvc pull`"):
        main(["compare", "HEAD~1", "HEAD"])
    with pytest.raises(PipelineError, match="^no-such-run: not a git revision or DVC experiment"):
        main(["compare", "HEAD", "no-such-run"])


def test_compare_names_a_record_missing_from_the_cache(runs, tmp_path, monkeypatch):
    cache = runs / ".dvc" / "cache"
    shutil.move(cache, tmp_path / "cache")
    try:
        monkeypatch.chdir(runs)
        with pytest.raises(PipelineError, match=r"^HEAD:metrics/examples/minilm-qa\.arrow: not in DVC's cache here .*"
                                                r"`dvc pull`"):
            main(["compare", "HEAD", "workspace"])
    finally:
        shutil.move(tmp_path / "cache", cache)


def run_cli(repo, *args, code: str | None = None) -> subprocess.CompletedProcess:
    """``bert-pipeline ARGS`` in ``repo`` with this checkout's code (``code``: a ``python -c`` program instead)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "stages.cli", *args]
    return subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=120)


def test_compare_imports_no_torch(runs):
    probe = ("import sys\nfrom stages.cli import main\nmain(sys.argv[1:])\n"
             "assert 'torch' not in sys.modules, 'compare imported torch'\n")
    proc = run_cli(runs, "compare", "HEAD", "better", "--resamples", "100", code=probe)
    assert proc.returncode == 0, proc.stderr
    assert "+10.0 [+10.0, +10.0]" in proc.stdout


def test_compare_refuses_runs_that_scored_different_examples(runs):
    (runs / RECORDS / "scratch-qa.arrow").unlink()  # the workspace's copy, as DVC checked it out
    qa_record(scores(1), gold="relabelled").write(runs / RECORDS / "scratch-qa.arrow")
    try:
        proc = run_cli(runs, "compare", "HEAD", "workspace")
    finally:
        sh([sys.executable, "-m", "dvc", "checkout", "-q", "--force", "record@scratch-qa"], runs)
    errors = proc.stderr.splitlines()
    assert proc.returncode == 1 and proc.stdout == ""
    line = errors[-1]
    assert line.startswith("error: metrics/examples/scratch-qa.arrow: HEAD and workspace scored different test "
                           "examples"), proc.stderr
    hashes = (qa_record(scores(1)).splits["test"].hash[:12],
              qa_record(scores(1), gold="relabelled").splits["test"].hash[:12])
    assert all(h in line for h in hashes) and not any(e.startswith(("Traceback", "error:")) for e in errors[:-1])
