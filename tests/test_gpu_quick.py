"""The gpu-quick run's CPU stand-in: ``bench/device/gpu_quick.sh`` (hence ``bench/device/gpu_quick.py run``) as the GPU machine
runs it, on a tiny folder packed by ``bench/device/gpu_quick.py pack`` from the profile's own resolved params (a tiny corpus,
a WordPiece tokenizer trained on it, stream-packed dynamic-masking instances, the tiny tasks), a tiny model and a few
steps; plus pack's refusals and the step budget."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bert_pipeline.errors import PipelineError
from tests.conftest import REPO, save_tiny_tasks

SEQ = 32
STEPS, BATCH = 6, 4
WORDS = ("the film was very good bad and a story of anna smith bob who met visited loved hated paris london in "
         "plot actors".split())
RUN_ARGS = ["--size", "tiny", "--max-steps", str(STEPS), "--batch-size", str(BATCH), "--warmup-steps", "1",
            "--eval-steps", "3", "--eval-batch-size", "8", "--max-eval-batches", "2", "--logging-steps", "1",
            "--num-workers", "0", "--precision", "fp32", "--threads", "1", "--epochs", "1",
            "--max-train-examples", "16", "--max-eval-examples", "8", "--calibration-steps", "4"]
MAIN_METRIC = {"sentiment": "accuracy", "ner": "f1", "qa": "f1"}


def load_bench():
    """``bench/device/gpu_quick.py`` as a module (bench/ is no package)."""
    spec = importlib.util.spec_from_file_location("gpu_quick", REPO / "bench" / "device" / "gpu_quick.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_corpus(folder: Path, n_train: int = 40, n_validation: int = 8, seed: int = 0) -> None:
    """A ``data/corpus`` DatasetDict of documents of 3-8 sentences over :data:`WORDS`."""
    import datasets

    rng = np.random.default_rng(seed)

    def doc(i: int) -> dict:
        sentences = [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 10)))).capitalize() + "."
                     for _ in range(int(rng.integers(3, 9)))]
        return {"doc_id": f"tiny:d{i}", "source": "tiny", "text": " ".join(sentences), "sentences": sentences}

    datasets.DatasetDict(
        train=datasets.Dataset.from_list([doc(i) for i in range(n_train)]),
        validation=datasets.Dataset.from_list([doc(i) for i in range(n_train, n_train + n_validation)]),
    ).save_to_disk(str(folder))


def expected_tokens(packed: Path, seed: int) -> tuple[int, int]:
    """(non-padding, padded) input tokens of the first ``STEPS`` training batches of ``BATCH`` rows, from the
    loop's own batch order (:func:`bert_pipeline.train.loop.batch_indices`, stream 0: the one phase)."""
    import datasets

    from bert_pipeline.train.loop import batch_indices

    lengths = [len(ids) for ids in datasets.load_from_disk(str(packed / "pretraining" / "train"))["input_ids"]]
    batches = [[lengths[i] for i in batch_indices(len(lengths), BATCH, seed, 0, k)] for k in range(STEPS)]
    return sum(map(sum, batches)), sum(max(b) * len(b) for b in batches)


@pytest.fixture(scope="module")
def bench():
    return load_bench()


@pytest.fixture(scope="module")
def project(tmp_path_factory, bench) -> Path:
    """A project with the data stages' outputs, built by the library from the gpu-quick profile's resolved
    ``create_pretraining_data`` (at length 32, one process, small shards)."""
    from bert_pipeline.data.corpus import open_corpus
    from bert_pipeline.data.shards import InstanceOptions, build_pretraining_data
    from bert_pipeline.data.wordpiece import train_tokenizer_folder

    root = tmp_path_factory.mktemp("gpu_quick_project")
    tiny_corpus(root / "data/corpus")
    train_tokenizer_folder(open_corpus(root / "data/corpus"), root / "models/tokenizer", vocab_size=300,
                           min_frequency=1, limit_alphabet=None, lowercase=True, strip_accents=None,
                           handle_chinese_chars=True, max_input_chars_per_word=100, bert_id_layout=True,
                           model_max_length=512, batch_size=100)
    params, _ = bench.resolve_params("gpu-quick", {"create_pretraining_data.max_seq_length": SEQ})
    options = {**params["create_pretraining_data"], "num_proc": 1, "shard_size": 8}
    build_pretraining_data(root / "data/corpus", root / "models/tokenizer", root / "data/pretraining",
                           InstanceOptions(**options), phase_lengths=[], init="scratch")
    save_tiny_tasks(root / "data/tasks")
    return root


@pytest.fixture(scope="module")
def packed(project, bench, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gpu_quick_pack") / ".gpu_quick"
    bench.pack(project, out, "gpu-quick", {"create_pretraining_data.max_seq_length": SEQ}, 50.0)
    return out


def test_pack_holds_the_inputs_and_the_profiles_params(packed):
    assert {p.name for p in packed.iterdir()} == {"pretraining", "tokenizer", "tasks", "params.json", "manifest.json"}
    assert sorted(p.name for p in (packed / "tasks").iterdir()) == ["ner", "qa", "sentiment"]
    params = json.loads((packed / "params.json").read_text())
    assert params["profile"] == "gpu-quick"
    assert params["params"]["pretrain"]["model"]["size"] == "small"
    assert params["params"]["create_pretraining_data"]["packing"] == "stream"
    assert params["overrides"]["create_pretraining_data.max_seq_length"] == SEQ
    manifest = json.loads((packed / "manifest.json").read_text())
    assert 0 < manifest["mib"] < 1 and manifest["files"] > 10


def test_stand_in_runs_the_device_script_on_cpu(packed, tmp_path):
    """The issue's CPU stand-in: the same script, a tiny config; the record's figures are consistent."""
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "GPU_QUICK_DATA": str(packed), "GPU_QUICK_WHEELS": str(tmp_path / "none"),
           "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    started = time.perf_counter()
    command = ["bash", str(REPO / "bench" / "device" / "gpu_quick.sh"), *RUN_ARGS, "--work", str(tmp_path / "work")]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wall = time.perf_counter() - started
    r = json.loads((out / "gpu_quick.json").read_text())
    assert r["device"] == "cpu" and r["complete"] is True
    assert r["frameworks_imported"] == []  # no pydantic, dvc, mlflow, prefect, hydra, stages or spacy on the path
    p = r["pretrain"]
    shape = (p["size"], p["steps"], p["planned_steps"], p["batch_size"], p["max_seq_length"])
    assert shape == ("tiny", STEPS, STEPS, BATCH, SEQ)
    # the tokens the loop's batches hold: its data order is a pure function of (seed, phase, batch index)
    seed = json.loads((packed / "params.json").read_text())["params"]["pretrain"]["seed"]
    seen, padded = expected_tokens(packed, seed)
    assert (p["tokens_seen"], p["padded_tokens"]) == (seen, padded)
    assert 0.75 * STEPS * BATCH * SEQ <= seen <= padded <= STEPS * BATCH * SEQ  # stream packing: mostly full rows
    assert p["tokens_per_second"] == pytest.approx(p["tokens_seen"] / p["seconds"], rel=0.02)
    assert 0 < p["mfu"] < 1.5
    assert p["mfu_vs_peak"] == round(p["model_tflops_per_second"] / 790, 6)  # the script's --peak-tflops 790
    assert 0 <= p["mlm_accuracy"] <= 1 and 0 <= p["unigram_accuracy"] <= 1 and p["mlm_loss"] > 0
    assert p["calibration"]["steps"] == [1, 4] and p["calibration"]["seconds_per_step"] > 0
    assert p["precision"] == "fp32"
    assert r["skipped"] == [] and set(r["finetune"]) == set(MAIN_METRIC)
    for task, t in r["finetune"].items():
        assert t["main_metric"] == MAIN_METRIC[task]
        for member in ("pretrained", "scratch"):
            assert 0 <= t[member]["test"] <= 1 and 0 <= t[member]["validation"] <= 1
            assert t[member]["train_examples"] <= 16 and t[member]["epochs"] == 1
        assert t["gain"] == round(t["pretrained"]["test"] - t["scratch"]["test"], 6)
    low = {member: r["finetune"]["sentiment"][member]["low_resource_test"] for member in ("pretrained", "scratch")}
    assert r["finetune"]["sentiment"]["low_resource_gain"] == round(low["pretrained"] - low["scratch"], 6)
    gains = [t["gain"] for t in r["finetune"].values()]
    assert r["average_gain"] == round(sum(gains) / 3, 6)
    seconds = r["phase_seconds"]
    assert set(seconds) == {"setup", "calibration", "pretrain", "save", "finetune", "total"}
    assert set(seconds["finetune"]) == set(MAIN_METRIC) and seconds["total"] <= wall
    assert (tmp_path / "work/pretrained/config.json").exists()
    assert (out / "pretrain_history.csv").read_text().startswith("step,train_loss")
    (summary,) = [line for line in proc.stdout.splitlines() if line.startswith("gpu_quick: ")]
    assert "tiny 6 steps" in summary and "MFU" in summary
    assert summary in (out / "gpu_quick.log").read_text()


def test_gpu_check_stand_in_runs_every_part_on_cpu_and_summarizes(packed, tmp_path):
    """bench/device/gpu_check.sh as the GPU machine runs it, scaled down on the CPU: the gpu tests (all skipped here: no
    CUDA), one gpu-quick size, the step benchmark, and the one summary with each part's exit code."""
    from tests.test_gpu import __file__ as gpu_tests

    out = tmp_path / "out"
    quick_args = [a for a in RUN_ARGS if a not in ("--size", "tiny")]
    env = {**os.environ, "OUT": str(out), "GPU_QUICK_DATA": str(packed), "GPU_QUICK_WHEELS": str(tmp_path / "none"),
           "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": "", "GPU_CHECK_SIZES": "tiny",
           "GPU_CHECK_PRETRAIN_SECONDS": "0", "GPU_CHECK_BUDGET_SECONDS": "300",
           "GPU_CHECK_QUICK_ARGS": " ".join(quick_args),
           "GPU_CHECK_BENCH_ARGS": "--size tiny --steps 2 --warmup 1 --batch 4 --seq 32 --vocab 512 --peak-size 128",
           "GPU_CHECK_TESTS": "tests/test_gpu.py", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(REPO / "bench" / "device" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["exit_codes"] == {"pretrain_bench": 0, "quick_tiny": 0, "tests": 0} and summary["ok"] is True
    # the script adds the flow's gpu test where Prefect is importable, as it is here
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-o", "addopts=", "-p",
                             "no:cacheprovider", "-m", "gpu", gpu_tests, str(REPO / "tests/test_flow_pipeline.py")],
                            capture_output=True, text=True, cwd=REPO).stdout
    gpu_test_count = sum("::test_" in line for line in listed.splitlines())
    assert gpu_test_count >= 11
    assert summary["tests"]["counts"] == {"passed": 0, "failed": 0, "skipped": gpu_test_count}
    quick = summary["gpu_quick"]["tiny"]
    assert quick["size"] == "tiny" and quick["steps"] == STEPS and quick["tokens_per_second"] > 0
    assert set(quick["gain"]) == set(MAIN_METRIC) and quick["complete"] is True
    bench = summary["pretrain_bench"]
    assert bench["size"] == "tiny" and bench["ours"]["tokens_per_second"] > 0 and bench["ref"]["tokens_per_second"] > 0
    assert bench["speedup"] == pytest.approx(bench["ours"]["tokens_per_second"] / bench["ref"]["tokens_per_second"],
                                             rel=1e-2)
    assert set(bench["goals"]) == {"mfu>=0.4", "speedup>=1.5"}
    assert not (out / "quick-tiny" / "work").exists()  # the saved model does not travel back
    printed = proc.stdout.splitlines()
    assert any(line.startswith("tests: passed 0, failed 0, skipped") for line in printed)
    assert any(line.startswith("pretrain bench tiny seq 32") for line in printed)

    # a part that fails: the script goes on, the summary says which, and the script's exit code is not 0
    env.update(GPU_CHECK_SIZES="", GPU_CHECK_BENCH_ARGS="--size no-such-size")
    failed = subprocess.run(["bash", str(REPO / "bench" / "device" / "gpu_check.sh")], env={**env, "OUT": str(tmp_path / "bad")},
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert failed.returncode == 1, failed.stdout[-2000:]
    bad = json.loads((tmp_path / "bad" / "gpu_check.json").read_text())
    assert bad["ok"] is False and bad["exit_codes"]["tests"] == 0 and bad["exit_codes"]["pretrain_bench"] != 0
    assert bad["gpu_quick"] == {} and bad["pretrain_bench"] is None


def test_pack_refuses_data_built_with_other_settings(project, bench, tmp_path):
    with pytest.raises(PipelineError, match=r"data/pretraining/info.json: built with "
                                            r"create_pretraining_data.max_seq_length=32, but profiles/gpu-quick.yaml "
                                            r"resolves it to 128 \(build it first: .*pack with --exp gpu-quick\)$"):
        bench.pack(project, tmp_path / "p", "gpu-quick", {}, 50.0)
    assert not (tmp_path / "p").exists()


def test_pack_refuses_a_folder_over_its_size_limit(project, bench, tmp_path):
    with pytest.raises(PipelineError, match=r"over --max-mib 0.01 .*lower prepare_corpus.max_documents_per_source"):
        bench.pack(project, tmp_path / "p", "gpu-quick", {"create_pretraining_data.max_seq_length": SEQ}, 0.01)


def test_pack_names_a_missing_input_and_the_command_that_builds_it(bench, tmp_path):
    with pytest.raises(PipelineError, match=r"data/pretraining: not found \(build it first: python -m stages.cli "
                                            r"profile gpu-quick -n gpu-quick -- create_pretraining_data prepare_tasks"):
        bench.pack(tmp_path, tmp_path / "p", "gpu-quick", {}, 50.0)


def test_pack_reads_an_experiment_and_names_a_missing_one(bench, tmp_path):
    with pytest.raises(PipelineError, match=r"^--exp nope: no DVC experiment of that name in "):
        bench.ProjectOutputs(tmp_path, "nope")


def test_run_without_a_packed_folder_is_one_line(bench, tmp_path):
    args = bench.parser().parse_args(["run", "--data", str(tmp_path / "absent"), "--out", str(tmp_path / "out")])
    # the hint is the command that works after the profile's `dvc exp run --temp`: the experiment, not the workspace
    with pytest.raises(PipelineError, match=r"absent/params.json: not found \(make the folder here: python "
                                            r"bench/device/gpu_quick.py pack --exp gpu-quick --out "):
        bench.run(args)


def test_pack_from_a_folder_that_does_not_exist_says_so_and_writes_nothing(bench, tmp_path):
    with pytest.raises(PipelineError, match=r"^--project .*/nowhere: no such directory"):
        bench.pack(tmp_path / "nowhere", tmp_path / "p", "gpu-quick", {}, 50.0)
    assert not (tmp_path / "p").exists()


def test_steps_are_cut_to_the_time_budget(bench):
    assert bench.budget_steps(15000, 0.02, 240.0) == 12000
    assert bench.budget_steps(15000, 0.01, 240.0) == 15000
    assert bench.budget_steps(15000, 1000.0, 1.0) == 1
    assert bench.budget_steps(15000, 0.0, 1.0) == 15000


def test_run_overrides_cap_the_packed_settings(bench, packed):
    params = json.loads((packed / "params.json").read_text())["params"]
    args = bench.parser().parse_args(["run", "--out", "x", *RUN_ARGS])
    got = bench.apply_run_overrides(params, args)
    assert got["pretrain"]["model"]["size"] == "tiny" and got["pretrain"]["max_steps"] == STEPS
    assert got["pretrain"]["compute"]["num_workers"] == 0
    assert {got["pretrain"]["precision"], got["finetune"]["precision"]} == {"fp32"}
    for task in got["finetune"]["tasks"].values():
        assert task["epochs"] == 1 and task["max_train_examples"] == 16 and task["max_test_examples"] == 8
    assert got["finetune"]["models"]["scratch"]["epochs"] == 1
    assert params["pretrain"]["model"]["size"] == "small"  # the packed params are left as they were
