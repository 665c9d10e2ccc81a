"""``bert-pipeline promote`` end to end on files laid out as the finetune stage writes them: one version per
family member, candidate = the best, champion moved, the decision printed as one line per task."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from logging import INFO

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash
from bert_pipeline.io import write_json
from stages.cli import main
from tests.conftest import REPO
from tests.tiny_models import save_classifier

# (test, validation) means: distilled is the best on test, pretrained on validation, which is what chooses
SCORES = {"pretrained": (0.70, 0.80), "distilled": (0.75, 0.65), "scratch": (0.60, 0.50)}


def _workspace(root) -> None:
    (root / "params.yaml").write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    feats = Features({"text": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    split = Dataset.from_dict({"text": ["good", "bad", "fine"], "label": [1, 0, 1]}, features=feats)
    DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(str(root / "data/tasks/sentiment"))
    write_json(root / "data/tasks/sentiment/task.json", {"kind": "classification", "main_metric": "accuracy",
                                                         "label_names": ["negative", "positive"]})
    for i, (member, (score, validation)) in enumerate(SCORES.items()):
        save_classifier(root / f"models/release/finetuned/{member}-sentiment", favour=1, seed=i)  # model_cards' copies
        if member == "scratch":  # mean pooling, as finetune's members: a pyfunc version (its folder as an artifact)
            config = root / f"models/release/finetuned/{member}-sentiment/config.json"
            config.write_text(json.dumps({**json.loads(config.read_text()), "classifier_pooling": "mean"}))
        write_json(root / f"metrics/finetune/{member}-sentiment.json", {
            "model": member, "task": "sentiment", "kind": "classification", "main_metric": "accuracy",
            "seeds": [7 + i, 99], "test_examples": 3, "validation_examples": 3, "low_resource": None,
            "test": {"accuracy": {"mean": score, "seeds": [score, score]}},
            "validation": {"accuracy": {"mean": validation, "seeds": [validation, validation]}},
            # scratch's saved weights are its second seed's (the better on validation): their own scores
            **({"saved": {"seed": 99, "validation": {"accuracy": 0.55}, "test": {"accuracy": 0.58}}}
               if member == "scratch" else {})})
        _examples(root, member, [7 + i, 99])


def _examples(root, member, seeds, right=(True, False, True)) -> None:
    """The member's per-example record as fine-tuning writes it (``metrics/examples/{member}-sentiment.arrow``):
    each seed's validation predictions, ``right`` saying which of the 3 examples it got right."""
    gold = np.array([1, 0, 1])
    ids = [f"validation:{r}" for r in range(3)]
    rec = ExampleRecord("classification", "accuracy", ["negative", "positive"])
    rec.splits["validation"] = SplitInfo(ids, ids, split_hash(ids, gold.tolist()))
    for seed in seeds:
        rec.add("validation", "full", seed, {"gold": gold, "pred": np.where(right, gold, 1 - gold)})
    rec.write(root / f"metrics/examples/{member}-sentiment.arrow")


def _version_lines(caplog) -> list[str]:
    """The registry's INFO lines (one per registered version), taken out of ``caplog``."""
    lines = [r.getMessage() for r in caplog.records if r.name == "bert_pipeline.mlops.registry" and r.levelno == INFO]
    caplog.clear()
    return lines


def test_promote_registers_the_family_and_moves_champion_to_the_best(in_tmp, monkeypatch, capsys, caplog):
    from mlflow import MlflowClient

    _workspace(in_tmp)
    uri = f"sqlite:///{in_tmp / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    caplog.set_level(INFO)
    main(["promote"])
    out, err = capsys.readouterr()
    (line,) = out.splitlines()
    assert line == "sentiment: champion moves to v1 (pretrained): no champion yet"
    # one log line per registered version, no MLflow progress bars (4 "Downloading artifacts" bars per version before)
    assert "Downloading artifacts" not in err and "Uploading artifacts" not in err
    assert "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR" not in os.environ  # switched off for promote alone
    assert _version_lines(caplog) == [
        "sentiment v1: pretrained seed 7, validation accuracy 0.8000, test 0.7000, new, aliases candidate, champion",
        "sentiment v2: distilled seed 8, validation accuracy 0.6500, test 0.7500, new, aliases none",
        "sentiment v3: scratch seed 99, validation accuracy 0.5500, test 0.5800, new, aliases none"]
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    model = client.get_registered_model("sentiment")
    # the best on test (distilled) is not chosen: the choice reads validation
    assert {alias: str(version) for alias, version in model.aliases.items()} == {"candidate": "1", "champion": "1"}
    versions = {v.tags["family_member"]: v for v in client.search_model_versions("name='sentiment'")}
    assert sorted(versions) == ["distilled", "pretrained", "scratch"]
    assert versions["distilled"].tags["seed"] == "8"  # the first seed's weights are the saved ones
    assert versions["pretrained"].tags["seed"] == "7"
    scratch = versions["scratch"].tags  # the registered weights' own scores, the seeds' means beside
    assert (scratch["seed"], float(scratch["validation_score"]), float(scratch["test_score"])) == ("99", 0.55, 0.58)
    assert (float(scratch["validation_mean"]), float(scratch["test_mean"])) == (0.50, 0.60)
    assert len(versions["scratch"].tags["validation_split_sha256"]) == 64 == len(versions["scratch"].tags["test_split_sha256"])
    # each version carries its saved seed's validation run
    for member, seed in (("pretrained", 7), ("scratch", 99)):
        local = client.download_artifacts(versions[member].run_id, "examples/validation.arrow", str(in_tmp / member))
        assert ExampleRecord.read(local).seeds("validation") == [seed]

    main(["promote"])  # the same folders again: no new version, champion stays
    (again,) = capsys.readouterr().out.splitlines()
    assert "candidate is already the champion" in again
    assert _version_lines(caplog)[0] == "sentiment v1: pretrained seed 7, validation accuracy 0.8000, test 0.7000, " \
                                        "already registered, aliases candidate, champion"
    assert len(client.search_model_versions("name='sentiment'")) == 3

    # a champion registered before records were (and no longer among the results, which would store its record
    # again) is re-scored on data/tasks/sentiment with finetune.tasks.sentiment's settings; 3 validation examples
    # prove nothing, so it stays
    client.delete_model_version_tag("sentiment", "1", "validation_record_sha256")
    (in_tmp / "metrics/finetune/pretrained-sentiment.json").unlink()
    write_json(in_tmp / "metrics/finetune/distilled-sentiment.json", {
        **json.loads((in_tmp / "metrics/finetune/distilled-sentiment.json").read_text()),
        "validation": {"accuracy": {"mean": 1.0, "seeds": [1.0, 1.0]}}})
    _examples(in_tmp, "distilled", [8, 99], right=(True, True, True))
    main(["promote"])
    (kept,) = capsys.readouterr().out.splitlines()
    assert kept.startswith("sentiment: champion stays v1 (pretrained); challenger v2 (distilled): validation accuracy ")
    assert kept.endswith("lower bound not above 0.0 (superiority; champion re-scored)")
    main(["promote", "--rule", "point"])  # the old rule: any gain moves it
    (moved,) = capsys.readouterr().out.splitlines()
    assert moved.startswith("sentiment: champion moves to v2 (distilled) from v1 (pretrained): validation accuracy "
                            "1.0000 vs 0.8000")


def test_promote_flags_are_checked(in_tmp, capsys):
    for argv, message in ((["--rule", "best"], "invalid choice: 'best'"),
                          (["--margin", "1.5"], "expected a fraction in [0, 1), got 1.5")):
        with pytest.raises(SystemExit):
            main(["promote", *argv])
        assert message in capsys.readouterr().err


def test_unknown_task_is_one_line(in_tmp):
    _workspace(in_tmp)
    with pytest.raises(PipelineError, match=r"^--tasks: no metrics/finetune/\*-qa.json \(tasks with results: sentiment\)$"):
        main(["promote", "--tasks", "qa"])


PROBE = '''from pathlib import Path
from stages.dvc_adapter import stage_run
with stage_run("probe", {"lr": 0.001}, tags={"cwd": str(Path.cwd())}) as run:
    Path("probe.txt").write_text(run.run_id)
'''


def test_models_promoted_after_a_temp_experiment_outlive_dvc_tmp(in_tmp, monkeypatch, capsys):
    """The issue's path: the experiment is first created by a stage inside ``dvc exp run --temp``; ``promote`` then
    registers models; ``.dvc/tmp`` is deleted; the champion still loads and predicts."""
    import mlflow.pyfunc
    from mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    (in_tmp / "probe.py").write_text(PROBE, encoding="utf-8")
    (in_tmp / "dvc.yaml").write_text(f"stages:\n  probe:\n    cmd: {sys.executable} probe.py\n    deps: [probe.py]\n"
                                     "    outs: [probe.txt]\n", encoding="utf-8")
    (in_tmp / ".gitignore").write_text("/mlflow.db\n/mlruns/\n/data/\n/models/\n/metrics/\n", encoding="utf-8")
    for cmd in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"],
                ["git", "add", "-A"], ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "probe"],
                [sys.executable, "-m", "dvc", "exp", "run", "--temp", "-q"]):
        done = subprocess.run(cmd, cwd=in_tmp, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    uri = f"sqlite:///{in_tmp / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    (probe,) = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id])
    assert "/.dvc/tmp/exps/" in probe.data.tags["cwd"]  # the stage ran in DVC's temporary copy
    location = client.get_experiment_by_name("bert-pipeline").artifact_location
    assert location == (in_tmp / "mlruns" / "bert-pipeline").as_uri()

    _workspace(in_tmp)
    main(["promote"])
    capsys.readouterr()
    shutil.rmtree(in_tmp / ".dvc" / "tmp")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    served = mlflow.pyfunc.load_model("models:/sentiment@champion")
    (prediction,) = served.predict(["good"]).to_dict("records")
    assert prediction["label"] in ("negative", "positive")


def test_an_experiment_left_in_a_temp_copy_is_refused_in_one_line(in_tmp, monkeypatch):
    from mlflow import MlflowClient

    from stages import dvc_adapter

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = f"sqlite:///{in_tmp / 'mlflow.db'}"
    lost = in_tmp / ".dvc" / "tmp" / "exps" / "tmpabc" / "mlruns" / "1"
    exp = MlflowClient(uri).create_experiment("bert-pipeline", artifact_location=lost.as_uri())
    with pytest.raises(PipelineError, match=(
            rf"^MLflow experiment 'bert-pipeline' \(id {exp}\) of {uri} keeps its artifacts in a DVC temporary copy, "
            rf"which no longer exists \({lost}\); rename it \(mlflow experiments rename --experiment-id {exp} "
            r"--new-name bert-pipeline-lost\) or set MLFLOW_EXPERIMENT_NAME to a new name, and rerun$")):
        dvc_adapter.stage_run("pretrain", {}, uri=uri).__enter__()


def test_uncommitted_lock_says_how_dvc_lock_differs_from_head(tmp_path):
    """`bert-pipeline profile` warns when dvc.lock is not committed: its experiment starts from the committed lock."""
    from stages.cli import uncommitted_lock

    git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]
    assert uncommitted_lock(tmp_path) is None  # not a git checkout
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "graph"], cwd=tmp_path, check=True)
    assert uncommitted_lock(tmp_path) is None  # no lock yet: a first run
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    assert uncommitted_lock(tmp_path) == "untracked"
    subprocess.run(["git", "add", "dvc.lock"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "results"], cwd=tmp_path, check=True)
    assert uncommitted_lock(tmp_path) is None
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    assert uncommitted_lock(tmp_path) == "modified"


def test_profile_relays_dvc_output_without_the_first_run_no_hash_warnings():
    """``bert-pipeline profile`` streams ``dvc exp run``'s stderr as it comes (progress bars redraw with ``\\r``)
    and leaves out the warning DVC prints per output that a fresh clone's missing ``dvc.lock`` cannot restore."""
    import io

    from stages.dvc_log import is_missing_hash_warning, relay_filtered

    script = ("import sys, time\n"
              "w = sys.stderr.write\n"
              "w(\"WARNING: No file hash info found for '/r/.dvc/tmp/exps/x/models/a'. It won't be created.\\n\")\n"
              "w(\"Running stage 'a':\\n\"); sys.stderr.flush(); time.sleep(0.2)\n"
              "w('\\rstep 1/2'); w('\\rstep 2/2\\n')\n"
              "w(\"WARNING: No file hash info found for '/r/metrics/b.json'. It won't be created.\\n\")\n"
              "w('WARNING: something else\\n')\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    sink = io.BytesIO()
    assert relay_filtered(proc.stderr, sink, is_missing_hash_warning) == 2
    assert proc.wait() == 0
    assert sink.getvalue().decode() == "Running stage 'a':\n\rstep 1/2\rstep 2/2\nWARNING: something else\n"
