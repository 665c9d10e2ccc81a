"""Overhead of the Prefect flow over an unchanged pipeline, side by side with `dvc repro` alone.

    python bench/flow_overhead.py                 # a synthetic repository shaped like ours (15 stages, a matrix)
    python bench/flow_overhead.py --repo .        # this repository (run the pipeline once first: all unchanged)
    python bench/flow_overhead.py --mlflow        # also with the MLflow parent run (sqlite store in a temp dir)

Both are timed as a person runs them, as fresh processes: `dvc repro` and `python -m flows.pipeline` (the latter
includes importing Prefect and starting its temporary local server, about 10 s on an idle machine). Target: the
flow at most 20 s slower. The machine's load average is printed, since a shared machine inflates both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def make_repo(path: Path, stages: dict, params: dict) -> Path:
    """A git + DVC repository at ``path`` with ``stages`` as its ``dvc.yaml`` and ``params`` as its params, committed."""
    path.mkdir(parents=True, exist_ok=True)
    for cmd in (["git", "init", "-q", "-b", "main"], [sys.executable, "-m", "dvc", "init", "-q"],
                [sys.executable, "-m", "dvc", "config", "core.analytics", "false"]):
        subprocess.run(cmd, cwd=path, check=True, capture_output=True)
    (path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False), encoding="utf-8")
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=flow-bench", "-c", "user.email=flow-bench@localhost", "commit", "-q",
                    "-m", "pipeline"], cwd=path, check=True, capture_output=True)
    return path


def synthetic_stages() -> dict:
    """fetch -> corpus -> {tokenizer, tasks} -> pretraining data -> pretrain -> distill -> finetune matrix -> evaluate."""
    def stage(name, deps):
        return {"cmd": f"cat {' '.join(d + '.txt' for d in deps) or '/dev/null'} > {name}.txt; echo {name} >> {name}.txt",
                "deps": [d + ".txt" for d in deps], "outs": [name + ".txt"]}

    stages = {
        "fetch_data": stage("fetch_data", []),
        "prepare_corpus": stage("prepare_corpus", ["fetch_data"]),
        "train_tokenizer": stage("train_tokenizer", ["prepare_corpus"]),
        "create_pretraining_data": stage("create_pretraining_data", ["prepare_corpus", "train_tokenizer"]),
        "pretrain": stage("pretrain", ["create_pretraining_data"]),
        "distill": stage("distill", ["pretrain"]),
        "prepare_tasks": stage("prepare_tasks", ["prepare_corpus"]),
    }
    stages["finetune"] = {
        "matrix": {"model": ["pretrain", "distill", "minilm"], "task": ["sentiment", "ner", "qa"]},
        "cmd": "cat prepare_tasks.txt > ft-${item.model}-${item.task}.txt",
        "deps": ["prepare_tasks.txt", "pretrain.txt", "distill.txt"],
        "outs": ["ft-${item.model}-${item.task}.txt"],
    }
    stages["evaluate"] = {"cmd": "cat ft-*.txt > evaluate.txt",
                          "deps": [f"ft-{m}-{t}.txt" for m in ("pretrain", "distill", "minilm")
                                   for t in ("sentiment", "ner", "qa")],
                          "outs": ["evaluate.txt"]}
    return stages


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float | None]:
    """(wall seconds of the process, seconds of the flow body when the command is the flow)."""
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    body = None
    if "flows.pipeline" in cmd:
        body = json.loads(proc.stdout[proc.stdout.index("{"):])["seconds"]
    return seconds, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="an existing repository whose pipeline is up to date (default: synthetic)")
    parser.add_argument("--mlflow", action="store_true", help="also time the flow with its MLflow parent run")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each; the best is reported")
    parser.add_argument("--api-url", help="a running Prefect server (e.g. http://127.0.0.1:4200/api) instead of "
                        "the temporary one each `python -m flows.pipeline` starts")
    args = parser.parse_args()
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
               PYTHONPATH=str(REPO), PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="300")
    if args.api_url:
        env["PREFECT_API_URL"] = args.api_url
    tmp = Path(tempfile.mkdtemp(prefix="flow-bench-"))
    env["MLFLOW_TRACKING_URI"] = env.get("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
    if args.repo:
        repo = Path(args.repo).resolve()
    else:
        repo = make_repo(tmp / "repo", synthetic_stages(), {"orchestration": {"retries": 0}})
        timed([sys.executable, "-m", "dvc", "repro", "-q"], repo, env)  # make everything up to date
    if not args.api_url:  # the temporary server's database is created once per machine: not part of a run
        timed([sys.executable, "-m", "flows.pipeline", "--repo", str(repo), "--no-mlflow"], repo, env)
    n_stages = subprocess.run([sys.executable, "-m", "dvc", "stage", "list", "--all"], cwd=repo, env=env,
                              capture_output=True, text=True).stdout.count("\n")
    flow = [sys.executable, "-m", "flows.pipeline", "--repo", str(repo)]
    rows = [("dvc repro (unchanged)", [sys.executable, "-m", "dvc", "repro"]),
            ("python -m flows.pipeline --no-mlflow", [*flow, "--no-mlflow"])]
    if args.mlflow:
        rows.append(("python -m flows.pipeline (MLflow parent run)", flow))
    results = {}
    for label, cmd in rows:
        results[label] = min((timed(cmd, repo, env) for _ in range(args.repeat)), key=lambda r: r[0])
    base = results[rows[0][0]][0]
    server = args.api_url or "a temporary local server per run"
    print(f"repository: {repo} ({n_stages} stages); Prefect API: {server}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'command':48s} {'seconds':>8s} {'overhead':>9s} {'flow body':>10s}")
    for label, (seconds, body) in results.items():
        body_text = f"{body:10.1f}" if body is not None else f"{'':10s}"
        print(f"{label:48s} {seconds:8.1f} {seconds - base:+9.1f} {body_text}")
    print("flow body: the flow function itself (graph + dvc status + one task per stage); the rest of the")
    print("flow's time is importing Prefect and starting/stopping its API. Target: overhead <= +20.0 s.")


if __name__ == "__main__":
    main()
