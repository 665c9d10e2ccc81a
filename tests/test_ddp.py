"""Data parallel on CPU: two processes (DDP, ``gloo``) through the launchers GPUs use.

- the stage with ``pretrain.compute.num_processes: 2`` reruns itself under ``accelerate launch``; two processes of
  per-process batch b train as one process of batch 2b (the same loss curve, learning rates, evaluations,
  ``tokens_seen`` and, within floating-point noise, weights), and only the main process writes the model,
  metrics, checkpoints and the one MLflow run;
- README's several-machine command (``torchrun --nnodes 2 ... --rdzv_backend c10d``) as 2 "machines" of one
  process on 127.0.0.1, in one workspace: the same run as one process of the doubled batch, written by rank 0 only;
- the library under ``torchrun`` (the c10d rendezvous that several machines take): a SIGKILL of the whole job after
  a checkpoint, then a resume, ends bit for bit where an uninterrupted run ends, each process on the batches it
  would have had.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import REPO, committed_params
from tests.pretrain_fixtures import pretrain_workspace

pytestmark = pytest.mark.usefixtures("one_thread")
log = logging.getLogger(__name__)

TWO = {"num_processes": 2, "accelerate_config": None, "num_workers": 0}
# fp32 sums in another order (each process pads to its own longest row, the all-reduce adds two halves) differ in
# the last bits: observed 1.2e-7 on the weights (|w| <= 1) after 6 AdamW steps, 2e-7 relative on the loss. The
# bounds are 100x that and far below what a real difference gives (averaging the processes' per-token means instead
# of the global token mean: 5.8e-3 on the weights, 6e-4 relative on the loss).
WEIGHT_ATOL = 1e-5
LOSS_RTOL = 1e-5


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **extra}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _history(checkpoint: Path) -> list[dict]:
    return torch.load(checkpoint / "state.pt", weights_only=True)["history"]


# 6 steps, 2 accumulated micro-batches, 64 instances: 4 steps per epoch, so the runs cross an epoch. Dropout is off
# (each process draws its own masks, one process draws other masks for the same rows).
COMMON = {"max_steps": 6, "gradient_accumulation_steps": 2, "save_steps": 2, "eval_steps": 3, "save_total_limit": 3,
          "dropout": 0.0}
STEPS = ["step-00000002", "step-00000004", "step-00000006"]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """The reference every launcher below is compared with: one process of batch 8, the stage's ``main`` in
    process, in a workspace of its own (run once for the module)."""
    from stages import pretrain

    one = pretrain_workspace(tmp_path_factory.mktemp("one"), committed_params(), batch_size=8, **COMMON)
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(one)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{one / 'mlflow.db'}")
        torch.set_num_threads(1)  # one_thread's setting: a module fixture starts before the test's fixtures
        try:
            pretrain.main()
        finally:
            torch.set_num_threads(threads)
    return one


def _two_processes_workspace(root: Path, raw: dict) -> Path:
    return pretrain_workspace(root, raw, batch_size=4, compute=TWO, **COMMON)


def _assert_trains_as_one(one: Path, two: Path) -> tuple[float, float]:
    """The workspace ``two`` (2 processes of batch 4) ends as ``one`` (:func:`one_process`): the same history, the
    same weights within ``WEIGHT_ATOL``, the same tokens, each output and checkpoint written once, whole, with both
    processes' RNG states. Returns the largest weight difference and the largest relative difference of a loss or
    evaluation figure."""
    # the same curve: every step's train loss within LOSS_RTOL, the same learning rates (accelerate's own
    # scheduler would step twice per step with two processes), the same evaluations
    a, b = _history(one / "checkpoints/pretrain" / STEPS[-1]), _history(two / "checkpoints/pretrain" / STEPS[-1])
    assert [sorted(r) for r in a] == [sorted(r) for r in b]
    assert [r["step"] for r in b if "train_loss" in r] == [1, 2, 3, 4, 5, 6]
    loss_diff = 0.0
    for ra, rb in zip(a, b, strict=True):
        for key, value in ra.items():
            if key == "learning_rate" or key.endswith(("_tokens", "step", "phase")):
                assert rb[key] == value, (ra["step"], key)
            else:
                assert rb[key] == pytest.approx(value, rel=LOSS_RTOL), (ra["step"], key)
                loss_diff = max(loss_diff, abs(rb[key] - value) / max(abs(value), 1e-12))
    wa = load_file(one / "models/pretrained/model.safetensors")
    wb = load_file(two / "models/pretrained/model.safetensors")
    assert wa.keys() == wb.keys()
    weight_diff = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert weight_diff <= WEIGHT_ATOL, weight_diff
    # every process's tokens, counted once: the same rows were trained on
    qa, qb = (json.loads((w / "metrics/pretrain.json").read_text()) for w in (one, two))
    assert qb["tokens_seen"] == qa["tokens_seen"] > 0
    assert qb["eval"]["predicted_tokens"] == qa["eval"]["predicted_tokens"]
    assert json.loads((two / "metrics/pretrain-timing.json").read_text())["num_processes"] == 2

    # each checkpoint saved once, whole, with every process's RNG state
    folder = two / "checkpoints/pretrain"
    assert sorted(p.name for p in folder.iterdir()) == STEPS  # no .tmp-* or stale/ left by a second writer
    meta = json.loads((folder / STEPS[-1] / "meta.json").read_text())
    assert (meta["num_processes"], meta["micro_batches_in_phase"]) == (2, 12)
    assert len(torch.load(folder / STEPS[-1] / "state.pt", weights_only=True)["rng_per_process"]) == 2
    assert sorted(p.name for p in (two / "models").iterdir()) == ["pretrained", "tokenizer"]
    return weight_diff, loss_diff


def _assert_one_mlflow_run(uri: str, two: Path) -> None:
    """The main process opened the one MLflow run and logged every step's train loss to it."""
    from mlflow import MlflowClient

    history = _history(two / "checkpoints/pretrain" / STEPS[-1])
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id])
    assert run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")] == [1, 2, 3, 4, 5, 6]
    assert run.data.metrics["train_loss"] == pytest.approx([r for r in history if "train_loss" in r][-1]["train_loss"])


def test_two_processes_of_batch_b_train_as_one_process_of_batch_2b(tmp_path, raw, one_process):
    """Two processes of batch 4 (``accelerate launch``, the stage's own relaunch) against one of batch 8
    (:func:`one_process`), on the same 6 steps across an epoch."""
    two = _two_processes_workspace(tmp_path / "two", raw)
    uri = f"sqlite:///{two / 'mlflow.db'}"
    proc = subprocess.run([sys.executable, "-m", "stages.pretrain"], cwd=two, env=_env(MLFLOW_TRACKING_URI=uri),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "--num_processes 2 --multi_gpu" in proc.stderr  # the stage relaunched itself
    _assert_trains_as_one(one_process, two)
    assert proc.stderr.count("saved checkpoint") == len(STEPS)  # only the main process saved
    _assert_one_mlflow_run(uri, two)


# ---------------------------------------------------------------------------- several machines, on one
def _torchrun_node(workspace: Path, node_rank: int, endpoint: str, out) -> subprocess.Popen:
    """README's several-machine command (``torchrun --nnodes 2 --node_rank R ... --rdzv_backend c10d
    --rdzv_endpoint HOST:29500 -m stages.pretrain``) as one "machine" of 1 process, in a process group of its own."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(node_rank),
           "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", "two-nodes",
           "-m", "stages.pretrain"]
    env = _env(MLFLOW_TRACKING_URI=f"sqlite:///{workspace / 'mlflow.db'}")
    return subprocess.Popen(cmd, cwd=workspace, env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def test_two_machines_of_one_process_train_as_one_process_of_the_doubled_batch(tmp_path, raw, one_process):
    """README's multi-machine ``torchrun`` command as 2 "machines" of 1 process each on 127.0.0.1 (c10d rendezvous,
    one endpoint and id), both in one workspace (the shared checkout and ``checkpoints/pretrain``), with
    ``pretrain.compute.num_processes: 2``: both exit 0, the run is :func:`one_process`'s within the tolerances of
    the 2-process test, and only the machine of rank 0 writes the outputs."""
    two = _two_processes_workspace(tmp_path / "two", raw)
    endpoint = f"127.0.0.1:{_free_port()}"
    logs = [tmp_path / f"node-{rank}.log" for rank in (0, 1)]  # each node's launcher and process
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        nodes = [_torchrun_node(two, rank, endpoint, stack.enter_context(path.open("w"))) for rank, path in
                 enumerate(logs)]
        try:
            deadline = started + 300
            while None in (codes := [node.poll() for node in nodes]):
                failed = [rank for rank, code in enumerate(codes) if code]  # the other waits on it: stop both
                assert not failed, [logs[rank].read_text()[-4000:] for rank in failed]
                assert time.monotonic() < deadline, [path.read_text()[-2000:] for path in logs]
                time.sleep(0.2)
        finally:
            for node in nodes:
                if node.poll() is None:
                    _kill_job(node)
    seconds = time.monotonic() - started
    outputs = [log.read_text() for log in logs]
    for rank, node in enumerate(nodes):
        assert node.returncode == 0, outputs[rank][-4000:]
    weight_diff, loss_diff = _assert_trains_as_one(one_process, two)

    # only rank 0 wrote. c10d ignores --node_rank (torchrun warns so) and ranks the machines by (host name, pid):
    # on one host the one started first, node 0, unless the pids wrapped around between the two starts
    writer = 0 if nodes[0].pid < nodes[1].pid else 1
    assert [out.count("saved checkpoint") for out in outputs] == [len(STEPS) if r == writer else 0 for r in (0, 1)]
    timing = json.loads((two / "metrics/pretrain-timing.json").read_text())  # the writer's own speed figure
    assert f"{timing['tokens_per_second']:.0f} tokens/s" in outputs[writer]
    _assert_one_mlflow_run(f"sqlite:///{two / 'mlflow.db'}", two)
    log.info("2 torchrun machines of 1 process: %.1f s, largest weight difference %.3g, largest relative loss "
             "difference %.3g against one process", seconds, weight_diff, loss_diff)


# ------------------------------------------------------------------------------------ SIGKILL and resume
def _torchrun(out: Path, *args: str) -> subprocess.Popen:
    """``tests.pretrain_worker`` as 2 processes under torchrun's c10d rendezvous (the several-machine form, here on
    one), in a process group of its own."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node_rank", "0", "--nproc_per_node",
           "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{_free_port()}", "-m",
           "tests.pretrain_worker", str(out), *args]
    return subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc: subprocess.Popen) -> None:
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output[-4000:]


def _kill_job(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher's process group and every worker (torch elastic starts each in a session of its own),
    all at once, as a scheduler that reclaims the machine does."""
    import psutil

    workers = psutil.Process(proc.pid).children(recursive=True)
    os.killpg(proc.pid, signal.SIGKILL)
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signal.SIGKILL)
    proc.communicate()
    psutil.wait_procs(workers, timeout=30)


def test_sigkill_of_two_processes_then_resume_is_bit_identical(tmp_path):
    """12 steps of per-process batch 4, 2 processes, 2 accumulated micro-batches: 16 of the 40 instances per step,
    so the checkpoint at step 6 is in the third epoch. Killed (every process, SIGKILL) while paused after step 8;
    the resume starts at step 6 and ends with the uninterrupted run's weights bit for bit (fp32 on CPU, the same
    sums in the same order), its history, its ``tokens_seen``, and on each process the batches that process would
    have had. Dropout is on: each process's RNG state is restored (they differ: each drops out its own rows)."""
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    straight.mkdir()
    killed.mkdir()
    args = ("--steps", "12", "--save-steps", "6", "--accum", "2", "--batch-size", "4", "--record-batches")
    victim = _torchrun(killed, *args, "--pause-after", "8")
    try:
        _finish(_torchrun(straight, *args))
        deadline = time.monotonic() + 300
        while not (killed / "paused").exists():
            assert victim.poll() is None, victim.communicate()[0][-4000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert (killed / "ck" / "step-00000006" / "meta.json").exists()
    finally:
        _kill_job(victim)
    assert not (killed / "final.safetensors").exists()
    assert sorted(p.name for p in (killed / "ck").iterdir()) == ["step-00000006"]  # no half-written step 12
    for rank in (0, 1):
        (killed / f"batches-{rank}.txt").rename(killed / f"before-kill-{rank}.txt")
    _finish(_torchrun(killed, *args))

    wa, wb = load_file(straight / "final.safetensors"), load_file(killed / "final.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    a, b = (json.loads((d / "history.json").read_text()) for d in (straight, killed))
    assert (a["num_processes"], a["resumed_from"], b["resumed_from"]) == (2, 0, 6)
    assert a["history"] == b["history"]
    assert a["tokens_seen"] == b["tokens_seen"] > 0  # both processes' tokens from step 0, across the resume
    for rank in (0, 1):
        whole = (straight / f"batches-{rank}.txt").read_text().split()
        before = (killed / f"before-kill-{rank}.txt").read_text().split()
        resumed = (killed / f"batches-{rank}.txt").read_text().split()
        assert 0 < len(resumed) < len(whole)
        assert resumed == whole[-len(resumed):], rank  # steps 7-12 (and the evaluations): the data position
        assert before == whole[:len(before)], rank
    first = [(straight / f"batches-{rank}.txt").read_text().split()[0] for rank in (0, 1)]
    assert first[0] != first[1]  # each process its own rows of the global batch


# ------------------------------------------------------------------------------------------ refusals
def test_resume_with_another_number_of_processes_is_refused(tmp_path):
    """A checkpoint of 2 processes holds the data position of global batches twice as large as one process's: the
    loop refuses it, naming the key (the stage's fingerprint already counts ``compute.num_processes``)."""
    from bert_pipeline.model.configs import new_pretraining_model
    from bert_pipeline.model.objectives import MaskedPositionPretrainer
    from bert_pipeline.train.checkpoint import CheckpointManager
    from bert_pipeline.train.loop import Phase, TrainConfig, TrainingError, train
    from bert_pipeline.train.runtime import make_runtime
    from tests.pretrain_fixtures import make_dataset, pad_collate, tiny_config

    manager = CheckpointManager(tmp_path / "ck", "fingerprint", keep=1)
    manager.save(2, {}, {"num_processes": 2})
    model = MaskedPositionPretrainer(new_pretraining_model(tiny_config(), with_pair_head=True, seed=7))
    phase = Phase("seq24", 0, 4, make_dataset(16, seed=1, max_seq_length=24), make_dataset(4, seed=2), 4, 24)
    config = TrainConfig(max_steps=4, learning_rate=1e-3, warmup_steps=1)
    with pytest.raises(TrainingError, match=r"^pretrain\.compute\.num_processes: checkpoint .*step-00000002 was "
                                            r"saved by 2 processes, this run has 1 "):
        train(model, [phase], pad_collate, config, make_runtime("fp32", cpu=True), manager)


def test_a_launcher_that_starts_one_process_is_an_error_not_a_relaunch(in_tmp, raw, monkeypatch, capsys):
    """``accelerate launch`` with a config of ``distributed_type: NO`` starts one plain process: the stage must not
    relaunch itself again (and again), but say which key to fix."""
    from stages import pretrain
    from tests.conftest import run_stage

    pretrain_workspace(in_tmp, raw, compute=TWO)
    monkeypatch.setenv(pretrain.LAUNCHED, "1")
    for name in ("WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    code, err = run_stage(pretrain.main, capsys)
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "error: pretrain.compute.accelerate_config: accelerate launch started one process, not "
        "pretrain.compute.num_processes=2 (expected a config with distributed_type MULTI_GPU, MULTI_CPU or FSDP)")
    assert not (in_tmp / "checkpoints").exists()
