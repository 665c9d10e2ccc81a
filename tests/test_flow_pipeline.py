"""The Prefect flow over throwaway DVC repositories: task graph = `dvc dag`, retries, failure isolation, a
second run that skips every stage, a run with overrides saved as a DVC experiment, two worker clones
sharing data through a local-directory DVC remote, and the GPU devices each stage gets (``compute.num_processes``
of them for a multi-process stage; too many refused before any stage runs).

One Prefect test server (temporary database) serves every flow run of this module.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from flows.dag import StageGraph, parse_dot, read_lock
from flows.dvc_cli import GIT_ADVICE_ONCE, is_git_advice
from flows.pipeline import PipelineFailed, _schedule, gpu_devices, pipeline
from tests.conftest import REPO as REPO_ROOT
from tests.flow_repos import make_repo, py, sh

DVC = [sys.executable, "-m", "dvc"]


@pytest.fixture(scope="module", autouse=True)
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=600):
        yield


def task_graph(flow_run_id, expected: int) -> tuple[dict[str, str], set[tuple[str, str]]]:
    """(task run name -> final state name, upstream->downstream edges) of a flow run, from the Prefect API
    (``wait_for`` inputs, the edges the UI draws). Task runs are recorded asynchronously: poll briefly."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 120  # generous: a loaded CI machine delays the event recorder
        while True:
            runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
            done = len(runs) >= expected and all(r.state and r.state.is_final() for r in runs)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    names = {r.id: r.name for r in runs}
    edges = {(names[i.id], r.name) for r in runs for i in r.task_inputs.get("wait_for", []) if i.id in names}
    return {r.name: r.state.name for r in runs}, edges


GRAPH = {
    "a": {"cmd": "echo a > a.txt", "outs": ["a.txt"]},
    "c": {"cmd": "echo c > c.txt", "outs": ["c.txt"]},
    "f": {"foreach": ["u"], "do": {"cmd": "cat a.txt > f-${item}.txt", "deps": ["a.txt"],
                                  "outs": ["f-${item}.txt"]}},
    "m": {"matrix": {"x": ["p", "q"], "y": [1]},
          "cmd": "cat a.txt c.txt > m-${item.x}-${item.y}.txt; echo $CUDA_VISIBLE_DEVICES > dev-${item.x}.txt",
          "deps": ["a.txt", "c.txt"], "outs": ["m-${item.x}-${item.y}.txt", "dev-${item.x}.txt"]},
}
FAST = {"orchestration": {"retries": 0, "retry_delay_seconds": 0}}


def flow_logs(flow_run_id, until: str) -> list[str]:
    """The messages the flow run logged (its tasks' included), from the Prefect API; written asynchronously, so
    polled until one contains ``until``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        deadline = time.monotonic() + 120
        while True:
            logs = [log.message for log in client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))]
            if any(until in m for m in logs) or time.monotonic() > deadline:
                return logs
            time.sleep(0.2)


def test_task_graph_equals_dvc_dag_and_second_run_skips_everything(tmp_path):
    repo = make_repo(tmp_path / "repo", GRAPH, {"orchestration": {"retries": 0, "gpu_stages": ["m@*"]}})
    state = pipeline(repo=str(repo), track=False, gpus=2, return_state=True)
    first = state.result()
    logs = flow_logs(state.state_details.flow_run_id, until=GIT_ADVICE_ONCE)
    assert any(m.startswith("Running stage 'a'") for m in logs)  # the stages' DVC output is logged
    # DVC's "To track the changes with git, run: git add dvc.lock" came after each of the 5 stages: said once instead
    assert not any("To track the changes with git" in m or m.strip().startswith("git add") for m in logs)
    assert sum(m == GIT_ADVICE_ONCE for m in logs) == 1
    assert {s: o["status"] for s, o in first["stages"].items()} == dict.fromkeys(
        ["a", "c", "f@u", "m@p-1", "m@q-1"], "ran")
    assert (repo / "m-q-1.txt").read_text() == "a\nc\n"
    # GPU stages each got one device of the two; the `gpu` tag limit equals the GPU count.
    assert {(repo / f"dev-{x}.txt").read_text().strip() for x in "pq"} <= {"0", "1"}
    assert (repo / "f-u.txt").read_text() == "a\n"
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        assert client.read_concurrency_limit_by_tag("gpu").concurrency_limit == 2

    state = pipeline(repo=str(repo), track=False, return_state=True)
    second = state.result()
    assert {o["status"] for o in second["stages"].values()} == {"skipped"}  # no dvc subprocess at all
    states, edges = task_graph(state.state_details.flow_run_id, expected=5)
    nodes, dag_edges = parse_dot(sh([*DVC, "dag", "--dot"], repo))
    assert set(states) == nodes == {"a", "c", "f@u", "m@p-1", "m@q-1"}
    assert edges == dag_edges
    assert set(states.values()) == {"Completed"}


def test_git_advice_lines_are_recognised_and_stage_output_is_not():
    advice = ["To track the changes with git, run:", "\tgit add dvc.lock a.txt.gitignore", "To enable auto staging, run:",
              "\tdvc config core.autostage true"]
    assert all(is_git_advice(line) for line in advice)
    assert not any(is_git_advice(line) for line in ["Running stage 'a':", "> echo a > a.txt", "Updating lock file 'dvc.lock'"])


def test_flaky_stage_is_retried_and_flow_completes(tmp_path):
    flaky = py("import pathlib,sys; p=pathlib.Path('attempts'); n=len(p.read_text()) if p.exists() else 0; "
               "p.write_text('x'*(n+1)); sys.exit('transient failure %d' % (n+1)) if n < 2 else "
               "pathlib.Path('ok.txt').write_text('ok')")
    repo = make_repo(tmp_path / "repo", {"flaky": {"cmd": flaky, "outs": ["ok.txt"]}},
                     {"orchestration": {"retries": 2, "retry_delay_seconds": 0}})
    result = pipeline(repo=str(repo), track=False)
    assert result["ok"]
    assert result["stages"]["flaky"]["status"] == "ran"
    assert (repo / "attempts").read_text() == "xxx"  # two failures, then success
    assert "flaky" in read_lock(repo)


def test_failing_stage_fails_flow_and_its_dependents_only(tmp_path):
    stages = {
        "bad": {"cmd": py("import sys; print('loading shards'); sys.exit('boom: shard 3 is corrupt')"),
                "outs": ["bad.txt"]},
        "after_bad": {"cmd": "cat bad.txt > after.txt", "deps": ["bad.txt"], "outs": ["after.txt"]},
        "other": {"cmd": "echo fine > other.txt", "outs": ["other.txt"]},
    }
    repo = make_repo(tmp_path / "repo", stages, FAST)
    with pytest.raises(PipelineFailed) as info:
        pipeline(repo=str(repo), track=False)
    message = str(info.value)
    assert message.startswith("stage bad failed")
    assert "boom: shard 3 is corrupt" in message
    assert "loading shards" in message
    outcome = {s: o["status"] for s, o in info.value.summary["stages"].items()}
    assert outcome == {"bad": "failed", "after_bad": "blocked", "other": "ran"}
    assert (repo / "other.txt").read_text() == "fine\n"  # the unrelated branch ran
    assert not (repo / "after.txt").exists()
    assert set(read_lock(repo)) == {"other"}


def test_overrides_run_in_a_clone_and_become_an_experiment(tmp_path):
    stages = {"greet": {"cmd": py("import yaml; p=yaml.safe_load(open('params.yaml')); "
                                  "open('greet.txt','w').write(p['greet']['word'])"),
                        "params": ["greet.word"], "outs": ["greet.txt"]}}
    repo = make_repo(tmp_path / "repo", stages, {"greet": {"word": "hello"}, **FAST})
    before = (repo / "params.yaml").read_text()
    result = pipeline(repo=str(repo), set_params=["greet.word=bonjour"], experiment="bonjour-run", track=False,
                      promote_models=True)
    assert result["experiment"] == "bonjour-run"
    assert (repo / "params.yaml").read_text() == before  # the user's workspace is untouched
    assert not (repo / "greet.txt").exists()
    assert not (repo / "dvc.lock").exists()
    shown = sh([*DVC, "exp", "show", "--json"], repo)
    assert "bonjour-run" in shown
    assert "bonjour" in shown
    sh([*DVC, "exp", "apply", "bonjour-run"], repo)
    assert (repo / "greet.txt").read_text() == "bonjour"
    assert yaml.safe_load((repo / "params.yaml").read_text())["greet"]["word"] == "bonjour"


def test_two_worker_clones_share_data_through_a_dvc_remote(tmp_path):
    # prep -> (left, right): prep runs on one clone; the next free clone pulls prep.txt from the remote.
    stages = {
        "prep": {"cmd": "echo base > prep.txt", "outs": ["prep.txt"]},
        "left": {"cmd": "cat prep.txt > left.txt; echo L >> left.txt", "deps": ["prep.txt"], "outs": ["left.txt"]},
        "right": {"cmd": "cat prep.txt > right.txt; echo R >> right.txt", "deps": ["prep.txt"],
                  "outs": ["right.txt"]},
    }
    repo = make_repo(tmp_path / "coordinator", stages, FAST, remote=tmp_path / "remote")
    workers = [str(tmp_path / "worker-1"), str(tmp_path / "worker-2")]
    result = pipeline(repo=str(repo), workers=workers, track=False)
    ran_on = {s: o["worker"] for s, o in result["stages"].items()}
    assert {o["status"] for o in result["stages"].values()} == {"ran"}
    assert ran_on["prep"] != ran_on["left"]  # data crossed clones
    assert set(ran_on.values()) == set(workers)
    assert not (repo / "left.txt").exists()  # nothing ran in the coordinator's workspace...
    assert set(read_lock(repo)) == set(stages)  # ...which ends with the complete dvc.lock
    sh([*DVC, "pull"], repo)  # every output is on the remote, at the versions dvc.lock names
    assert (repo / "left.txt").read_text() == "base\nL\n"
    assert (repo / "right.txt").read_text() == "base\nR\n"
    assert "up to date" in sh([*DVC, "status"], repo)


def test_mlflow_stage_runs_nest_under_the_flow_parent_run(tmp_path, monkeypatch):
    # The stage stands in for bert_pipeline.mlops.tracking: it opens its own run under the parent id the flow passes in.
    stage = py("import os; from mlflow import MlflowClient; c=MlflowClient(); "
               "e=c.get_experiment_by_name(os.environ['MLFLOW_EXPERIMENT_NAME']).experiment_id; "
               "r=c.create_run(e, run_name='train', tags={'stage': 'train', "
               "'mlflow.parentRunId': os.environ['BERT_PIPELINE_PARENT_RUN_ID'], "
               "'prefect_flow_run_id': os.environ['BERT_PIPELINE_FLOW_RUN_ID']}); "
               "c.set_terminated(r.info.run_id); open('model.txt', 'w').write('w')")
    repo = make_repo(tmp_path / "repo", {"train": {"cmd": stage, "outs": ["model.txt"]}}, FAST)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    state = pipeline(repo=str(repo), return_state=True)
    result = state.result()
    flow_run_id = str(state.state_details.flow_run_id)

    from mlflow import MlflowClient

    from flows.tracking import child_runs

    parent = MlflowClient(uri).get_run(result["mlflow_parent_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["prefect_flow_run_id"] == flow_run_id
    children = child_runs(uri, parent.info.run_id)
    assert [(c["stage"], c["status"]) for c in children] == [("train", "FINISHED")]
    tagged = MlflowClient(uri).get_run(children[0]["run_id"]).data.tags
    assert tagged["prefect_flow_run_id"] == flow_run_id

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        artifact = client.read_latest_artifacts()  # the summary artifact of this run links both runs
    text = next(a.data for a in artifact if a.key == "bert-pipeline-summary")
    assert parent.info.run_id in text
    assert children[0]["run_id"] in text


# ------------------------------------------------------------------------------------ one workspace, two runs
WAIT = '''import pathlib, sys, time
pathlib.Path("started").write_text("1")
deadline = time.monotonic() + 120
while not pathlib.Path("go").exists():
    if time.monotonic() > deadline:
        sys.exit("go never came")
    time.sleep(0.1)
pathlib.Path("s.txt").write_text("s")
'''
SLOW = {"s": {"cmd": f"{sys.executable} wait.py", "deps": ["wait.py"], "outs": ["s.txt"]},
        "t": {"cmd": "cat s.txt > t.txt", "deps": ["s.txt"], "outs": ["t.txt"]}}
LOCKED = "Unable to acquire lock"


def _slow_repo(tmp_path):
    from tests.flow_repos import commit

    repo = make_repo(tmp_path / "repo", SLOW, FAST)
    (repo / "wait.py").write_text(WAIT, encoding="utf-8")
    (repo / ".gitignore").write_text("/attempts*\n/started\n/go\n", encoding="utf-8")
    commit(repo, "slow stage")
    return repo


def _wait_for(path, proc, seconds=120):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.1)


def _background(cmd, repo):
    from flows.dvc_cli import tool_env

    return subprocess.Popen(cmd, cwd=repo, env=tool_env({"PYTHONPATH": str(REPO_ROOT), **_prefect_env()}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _prefect_env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    return {"PREFECT_API_URL": url} if url else {}


def test_dvc_commands_fail_while_a_flow_holds_the_workspace_between_its_stages(tmp_path):
    """Between two stages a flow holds DVC's lock: a user's `dvc repro` (or a second flow) fails on it, and the
    flow's own command, handed the lock, runs."""
    from bert_pipeline.errors import PipelineError
    from flows.dvc_cli import WorkspaceLock, handed_over

    repo = make_repo(tmp_path / "repo", {"a": {"cmd": "echo a > a.txt", "outs": ["a.txt"]}}, FAST)
    with WorkspaceLock(repo):
        user = subprocess.run(DVC + ["repro"], cwd=repo, capture_output=True, text=True)
        assert user.returncode != 0
        assert LOCKED in user.stderr
        assert not (repo / "a.txt").exists()
        with pytest.raises(PipelineError, match=r"repo: the workspace is in use by another flow run; wait for it to "
                                                r"finish, or run the flow with --profile/--set-param \(a temporary "
                                                r"clone\)$"):
            WorkspaceLock(repo).acquire()
        with handed_over(repo) as options:
            assert options == ["--wait-for-lock"]
            sh(DVC + options + ["repro"], repo)
        assert (repo / "a.txt").read_text() == "a\n"
        again = subprocess.run(DVC + ["repro"], cwd=repo, capture_output=True, text=True)
        assert LOCKED in again.stderr  # taken back after the flow's own command
    sh(DVC + ["repro"], repo)  # released at the end


def test_a_second_flow_and_a_user_repro_fail_while_a_flow_runs_and_the_first_finishes(tmp_path, capsys):
    from flows.pipeline import main

    repo = _slow_repo(tmp_path)
    first = _background([sys.executable, "-m", "flows.pipeline", "--repo", str(repo), "--no-mlflow"], repo)
    _wait_for(repo / "started", first)
    assert main(["--repo", str(repo), "--no-mlflow"]) == 1  # the second flow: one line, at once
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"error: {repo}: the workspace is in use by another flow run; wait for it to finish, or run the "
                    "flow with --profile/--set-param (a temporary clone)")
    user = subprocess.run(DVC + ["repro"], cwd=repo, capture_output=True, text=True)
    assert user.returncode != 0
    assert "s.txt' is busy, it is being blocked by" in user.stderr  # DVC's lock on the running stage's output
    (repo / "go").write_text("1")
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    assert (repo / "t.txt").read_text() == "s"
    assert set(read_lock(repo)) == {"s", "t"}


def test_a_flow_started_during_a_user_repro_fails_in_one_line_and_the_repro_finishes(tmp_path, capsys):
    from bert_pipeline.errors import PipelineError

    repo = _slow_repo(tmp_path)
    user = _background(DVC + ["repro"], repo)
    _wait_for(repo / "started", user)
    with pytest.raises(PipelineError, match=r"repo: the workspace is in use by a DVC stage running \(PID \d+: "
                                            r".*repro\); wait for it to finish"):
        pipeline(repo=str(repo), track=False)
    (repo / "go").write_text("1")
    out, _ = user.communicate(timeout=300)
    assert user.returncode == 0, out[-3000:]
    assert (repo / "t.txt").read_text() == "s"


# ------------------------------------------------------------------------------------------------- GPU devices
class _Finished:
    """A task future that has already finished (what ``_schedule`` asks of a Prefect future); ``wait()``, which
    ``_schedule`` calls when it takes the stage's result, tells the fake machine the stage's devices are free."""

    def __init__(self, stage: str, release):
        self.stage, self._release = stage, release
        self.state = SimpleNamespace(is_completed=lambda: True)

    def add_done_callback(self, fn):
        fn(self)

    def wait(self):
        self._release(self.stage)

    def result(self):
        return {"stage": self.stage, "status": "ran"}


def schedule_fake(graph: StageGraph, devices: list[str], needed: dict[str, int] | None,
                  slots: int = 4) -> list[tuple[str, str | None]]:
    """``_schedule`` every stage of ``graph`` with fake submits; returns ``(stage, CUDA_VISIBLE_DEVICES)`` in submit
    order, asserting that no device is ever handed to two running stages."""
    calls: list[tuple[str, str | None]] = []
    busy: dict[str, list[str]] = {}

    def submit(stage, slot, device, runs, ups):
        ids = device.split(",") if device else []
        held = {d for h in busy.values() for d in h}
        assert not set(ids) & held, f"{stage} got {device} while {busy} run"
        busy[stage] = ids
        calls.append((stage, device))
        return _Finished(stage, lambda s: busy.pop(s, None))

    def submit_blocked(stage, failed, ups):
        raise AssertionError(f"{stage} blocked by {failed}")

    outcome: dict = {}
    _schedule(graph, set(graph.order), [f"clone-{i}" for i in range(slots)], devices, submit, submit_blocked,
              logging.getLogger("test"), outcome, needed)
    assert {o["status"] for o in outcome.values()} == {"ran"}
    assert not busy
    return calls


def test_a_multi_process_stage_reserves_its_devices_at_once_and_returns_them():
    # big (2 processes) and small start together on 0,1 and 2; other waits for a free device; last, after all,
    # needs all three: only there once every device came back.
    graph = StageGraph(order=["big", "small", "other", "cpu", "last"],
                       upstream={"big": [], "small": [], "other": [], "cpu": [],
                                 "last": ["big", "small", "other", "cpu"]},
                       gpu=frozenset({"big", "small", "other", "last"}))
    calls = schedule_fake(graph, ["0", "1", "2"], {"big": 2, "last": 3})
    assert calls == [("big", "0,1"), ("small", "2"), ("cpu", None), ("other", "0"), ("last", "0,1,2")]
    # a 2-device stage waits while a 1-device stage holds one of two devices
    pair = StageGraph(order=["small", "big"], upstream={"small": [], "big": []}, gpu=frozenset({"small", "big"}))
    assert schedule_fake(pair, ["0", "1"], {"big": 2}) == [("small", "0"), ("big", "0,1")]
    # a CPU machine: no device for anyone, whatever the count
    assert schedule_fake(pair, [], {"big": 2}) == [("small", None), ("big", None)]


def test_devices_needed_reads_compute_num_processes_of_the_stages_section(tmp_path):
    from bert_pipeline.errors import PipelineError
    from flows.pipeline import devices_needed, read_orchestration

    (tmp_path / "params.yaml").write_text(yaml.safe_dump({
        "pre": {"compute": {"num_processes": 8}}, "finetune": {"compute": {"num_workers": 2}}, "flat": 3}))
    assert devices_needed(tmp_path, ["pre", "finetune@bert-ner", "flat", "absent", "sub/dvc.yaml:pre"]) == {
        "pre": 8, "finetune@bert-ner": 1, "flat": 1, "absent": 1, "sub/dvc.yaml:pre": 1}  # sub/params.yaml: none
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"pre": {"compute": {"num_processes": "eight"}}}))
    with pytest.raises(PipelineError, match=r"^params.yaml: pre.compute.num_processes: expected an integer >= 1, "
                                            r"got 'eight'; set it to the number of processes \(one per GPU\)$"):
        devices_needed(tmp_path, ["pre"])
    # the project's stages that train are GPU stages, pretrain's count comes from its compute section
    gpu = read_orchestration(REPO_ROOT).gpu_stages
    assert {"pretrain", "budget_curve", "variants", "retrieval"} <= set(gpu)
    assert devices_needed(REPO_ROOT, ["pretrain"]) == {
        "pretrain": yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["pretrain"]["compute"]["num_processes"]}


def test_a_count_above_the_machines_devices_is_refused_before_any_stage_and_none_on_a_cpu(tmp_path, monkeypatch,
                                                                                           capsys):
    from flows.pipeline import main

    stages = {"a": {"cmd": "echo a > a.txt", "outs": ["a.txt"]},
              "pre": {"cmd": "cat a.txt > pre.txt; echo \"[$CUDA_VISIBLE_DEVICES]\" > dev.txt", "deps": ["a.txt"],
                      "params": ["pre.compute.num_processes"], "outs": ["pre.txt", "dev.txt"]}}
    params = {"pre": {"compute": {"num_processes": 2}},
              "orchestration": {"retries": 0, "retry_delay_seconds": 0, "gpu_stages": ["pre"]}}
    repo = make_repo(tmp_path / "repo", stages, params)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert main(["--repo", str(repo), "--no-mlflow"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert errors == ["error: params.yaml: pre.compute.num_processes: 2 processes need 2 GPUs, this machine has 1 "
                      "(CUDA_VISIBLE_DEVICES / nvidia-smi); lower it or run on a machine with 2 GPUs"]
    assert not (repo / "a.txt").exists()  # nothing ran, not even the CPU stage before it
    assert not (repo / "dvc.lock").exists()

    result = pipeline(repo=str(repo), track=False, gpus=2)
    assert result["stages"]["pre"]["status"] == "ran"
    assert (repo / "dev.txt").read_text() == "[0,1]\n"  # both devices, one per process

    # a CPU machine (no device): nothing refused, the stage runs on the CPU with whatever count
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    (repo / "params.yaml").write_text(yaml.safe_dump({**params, "pre": {"compute": {"num_processes": 4}}}))
    result = pipeline(repo=str(repo), track=False)
    assert result["stages"]["pre"]["status"] == "ran"
    assert (repo / "dev.txt").read_text() == "[]\n"


@pytest.mark.gpu
def test_each_gpu_stage_gets_devices_of_this_machine():
    devices = gpu_devices(None)
    assert devices, "CUDA is available but neither CUDA_VISIBLE_DEVICES nor nvidia-smi -L names a device"
    multi = min(2, len(devices))
    graph = StageGraph(order=["pretrain", "finetune@a", "finetune@b", "prepare"],
                       upstream={"pretrain": [], "finetune@a": ["pretrain"], "finetune@b": ["pretrain"], "prepare": []},
                       gpu=frozenset({"pretrain", "finetune@a", "finetune@b"}))
    calls = dict(schedule_fake(graph, devices, {"pretrain": multi}))
    assert calls["prepare"] is None
    for stage in ("pretrain", "finetune@a", "finetune@b"):
        assert calls[stage] and set(calls[stage].split(",")) <= set(devices), (stage, calls[stage], devices)
    assert len(calls["pretrain"].split(",")) == multi
    # the id is one CUDA itself accepts: a child process given it sees exactly that device
    seen = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": calls["finetune@a"]},
                          capture_output=True, text=True, timeout=300)
    assert seen.stdout.strip() == "1", seen.stderr[-2000:]
