"""bert_pipeline.mlops.tracking against a temporary SQLite store: tags, nesting, params, metrics, end on error, pointers;
and stages.dvc_adapter's side of it: the DVC experiment's tags, the repository root of DVC's temporary copies, the
lock pointer."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from bert_pipeline.mlops import tracking
from stages import dvc_adapter


def test_run_tags_params_metrics_nesting(module_mlflow_uri, monkeypatch, tmp_path):
    monkeypatch.setenv("PREFECT__FLOW_RUN_ID", "flow-123")
    monkeypatch.delenv("BERT_PIPELINE_FLOW_RUN_ID", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    client = MlflowClient(module_mlflow_uri)
    parent = client.create_run(tracking.experiment_id(client, module_mlflow_uri), run_name="flow")
    monkeypatch.setenv(tracking.PARENT_RUN_ENV, parent.info.run_id)
    monkeypatch.setenv("MLFLOW_RUN_ID", "must-not-be-used")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "w.bin").write_bytes(b"123")
    params = {"model": {"size": "mini"}, "lr": 1e-3, "sources": "s" * 400, "long": "x" * 7000}
    with tracking.stage_run("pretrain", params, uri=module_mlflow_uri) as run:
        run.log_metrics({"train_loss": 3.0}, step=10)
        run.log_metrics({"train_loss": 2.0, "note": "text"}, step=20)
        pointer = run.log_model_pointer(tmp_path / "model")
    got = client.get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.tags["stage"] == "pretrain"
    assert got.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert got.data.tags["prefect_flow_run_id"] == "flow-123"
    assert got.data.tags["params_hash"] == tracking.params_hash(params)
    assert got.data.tags["model_dvc_md5"] == pointer["md5"]
    assert pointer["md5"].endswith(".dir")
    assert len(got.data.tags["git_revision"]) in (40, 7) or got.data.tags["git_revision"] == "unknown"
    assert got.data.params["model.size"] == "mini"
    assert got.data.params["lr"] == "0.001"
    assert got.data.params["sources"] == "s" * 400  # MLflow 3 takes 6,000 characters: nothing cut below that
    assert len(got.data.params["long"]) == 6000
    assert got.data.params["long"].endswith("...")
    assert got.data.tags["params_shortened"] == "long"
    full = json.loads(Path(client.download_artifacts(run.run_id, "params.json", str(tmp_path))).read_text())
    assert full["long"] == "x" * 7000
    assert full["model.size"] == "mini"
    history = client.get_metric_history(run.run_id, "train_loss")
    assert [(m.step, m.value) for m in history] == [(10, 3.0), (20, 2.0)]
    assert client.get_experiment(got.info.experiment_id).name == "bert-pipeline"


def test_run_is_ended_failed_after_exception(module_mlflow_uri, monkeypatch):
    monkeypatch.delenv(tracking.PARENT_RUN_ENV, raising=False)
    with pytest.raises(ZeroDivisionError):
        with tracking.stage_run("distill", {"a": 1}, uri=module_mlflow_uri) as run:
            1 / 0  # noqa: B018
    got = MlflowClient(module_mlflow_uri).get_run(run.run_id)
    assert got.info.status == "FAILED"
    assert "mlflow.parentRunId" not in got.data.tags


def test_nested_runs_and_an_old_experiment_gets_the_training_kind(module_mlflow_uri, monkeypatch):
    monkeypatch.delenv(tracking.PARENT_RUN_ENV, raising=False)
    client = MlflowClient(module_mlflow_uri)
    old = client.create_experiment("made-before-the-tag")  # as an older version of the pipeline left it
    assert "mlflow.experimentKind" not in client.get_experiment(old).tags
    assert tracking.experiment_id(client, module_mlflow_uri, "made-before-the-tag") == old
    assert client.get_experiment(old).tags["mlflow.experimentKind"] == "custom_model_development"
    with tracking.stage_run("finetune@a-b", {"x": 1}, uri=module_mlflow_uri, experiment="made-before-the-tag",
                            tags={"task": "b"}) as run:
        with pytest.raises(KeyError), run.nested("seed 2", {"seed": 2}) as failed:
            raise KeyError("x")
        with run.nested("seed 1", {"seed": 1}) as child:
            child.log_metrics({"test_f1": 0.5})
    got = client.get_run(child.run_id)
    assert (got.data.tags["mlflow.parentRunId"], got.data.tags["seed"], got.data.tags["task"]) == (run.run_id, "1", "b")
    assert got.data.metrics == {"test_f1": 0.5} and got.info.run_name == "seed 1" and got.info.status == "FINISHED"
    assert client.get_run(failed.run_id).info.status == "FAILED"
    assert tracking.experiment_url("http://mlflow:5000/", old) == (
        f"http://mlflow:5000/#/experiments/{old}?workflowType=machine_learning")


def test_default_uri_is_absolute_repo_root_also_in_dvc_temp_copies(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    repo = tmp_path / "repo"
    inner = repo / ".dvc" / "tmp" / "exps" / "tmpabc" / "stages"
    inner.mkdir(parents=True)
    (repo / "dvc.yaml").write_text("stages: {}\n")
    assert dvc_adapter.repo_root(inner) == repo.resolve()
    assert dvc_adapter.copy_origin(inner) == repo and dvc_adapter.copy_origin(repo) is None
    assert dvc_adapter.tracking_uri(repo / ".dvc") == f"sqlite:///{repo.resolve().as_posix()}/mlflow.db"
    clone = repo / ".dvc" / "tmp" / "flows" / "run-x"  # the flow's clone has a .git of its own
    (clone / ".git").mkdir(parents=True)
    assert dvc_adapter.tracking_uri(clone) == f"sqlite:///{repo.resolve().as_posix()}/mlflow.db"
    assert tracking.tracking_uri(clone) == f"sqlite:///{clone.resolve().as_posix()}/mlflow.db"  # the library: as given
    assert tracking.artifact_location(f"sqlite:///{inner}/mlflow.db", "e", dvc_adapter.copy_origin) == (
        (repo.resolve() / "mlruns" / "e").as_uri())
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    assert dvc_adapter.tracking_uri(inner) == "http://tracking:5000"


def test_a_stage_run_under_dvc_exp_run_carries_the_experiment(module_mlflow_uri, monkeypatch):
    """``dvc exp run`` hands the experiment's name and baseline commit to the stage's process (``DVC_EXP_NAME``,
    ``DVC_EXP_BASELINE_REV``: dvc.env); the stage's run and its seed runs carry them as tags."""
    monkeypatch.delenv(tracking.PARENT_RUN_ENV, raising=False)
    monkeypatch.setenv("DVC_EXP_NAME", "tepid-bark")
    monkeypatch.setenv("DVC_EXP_BASELINE_REV", "a" * 40)
    with dvc_adapter.stage_run("finetune@a-b", {"x": 1}, uri=module_mlflow_uri, tags={"task": "b"}) as run:
        with run.nested("seed 1", {"seed": 1}) as child:
            pass
    client = MlflowClient(module_mlflow_uri)
    for run_id in (run.run_id, child.run_id):
        tags = client.get_run(run_id).data.tags
        assert (tags["dvc_experiment"], tags["dvc_baseline_rev"], tags["task"]) == ("tepid-bark", "a" * 40, "b")
    monkeypatch.delenv("DVC_EXP_NAME")
    monkeypatch.delenv("DVC_EXP_BASELINE_REV")
    with dvc_adapter.stage_run("evaluate", {}, uri=module_mlflow_uri) as plain:  # dvc repro: no experiment
        pass
    assert not {"dvc_experiment", "dvc_baseline_rev"} & set(client.get_run(plain.run_id).data.tags)
    assert dvc_adapter.experiment_tags({"DVC_EXP_NAME": "x", "DVC_EXP_BASELINE_REV": ""}) == {"dvc_experiment": "x"}


def test_dvc_dir_md5_matches_dvc_and_lock_pointer(tmp_path):
    folder = tmp_path / "d"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("hi\n")
    (folder / "sub" / "b.bin").write_bytes(b"x\ny")
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([dvc, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([dvc, "add", "-q", "d"], cwd=tmp_path, check=True)
    recorded = [ln.split()[-1] for ln in (tmp_path / "d.dvc").read_text().splitlines() if "md5:" in ln][0]
    assert tracking.dvc_dir_md5(folder) == recorded
    lock = tmp_path / "dvc.lock"
    lock.write_text(f"schema: '2.0'\nstages:\n  pretrain:\n    outs:\n    - path: models/pretrained\n"
                    f"      md5: {recorded}\n")
    assert dvc_adapter.lock_pointer("models/pretrained", lock) == {"path": "models/pretrained", "md5": recorded,
                                                                   "stage": "pretrain"}
    assert dvc_adapter.lock_pointer("models/other", lock) is None
    assert dvc_adapter.lock_sha256(tmp_path) == hashlib.sha256(lock.read_bytes()).hexdigest()
    assert dvc_adapter.lock_sha256(folder) is None


def test_flatten_params_nested_lists():
    flat, full = tracking.flatten_params({"a": {"b": [1, 2]}, "c": None})
    assert flat == {"a.b": "[1, 2]", "c": "null"}
    assert full == {}


def test_run_of_folder_finds_the_run_that_saved_those_exact_weights(module_mlflow_uri, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "models/finetuned/teacher-ner"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights v1")
    with tracking.stage_run("finetune@teacher-ner", {"x": 1}, uri=module_mlflow_uri, experiment="pairs") as run:
        run.log_model_pointer(Path("models/finetuned/teacher-ner"))
    with tracking.stage_run("distill_task@ner", {"x": 2}, uri=module_mlflow_uri, experiment="pairs") as student:
        assert tracking.run_of_folder(student, Path("models/finetuned/teacher-ner")) == run.run_id
        (folder / "model.safetensors").write_bytes(b"weights v2")  # other weights: not that run's
        assert tracking.run_of_folder(student, Path("models/finetuned/teacher-ner")) is None
