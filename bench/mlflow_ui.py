"""What does MLflow's UI open on? The experiment page of a pipeline run's store, in headless Chromium.

    python bench/mlflow_ui.py --store /tmp/run/mlflow.db --out /tmp/mlflow-ui-check

Starts `mlflow server` on 127.0.0.1 over the SQLite store (artifacts beside it), opens the experiment
`bert-pipeline` in Debian's headless `chromium` (fresh profile, no network beyond localhost), waits for the page to
render (`--virtual-time-budget`), and prints one JSON object: the experiment's `mlflow.experimentKind` tag, whether
the rendered page is the GenAI overview (traces, "GenAI") or the training runs (the runs table with the run names),
how many fine-tuning runs carry each of the tags `model`, `task`, `role`, `seed`, and the screenshot's path.

Installs nothing: when `chromium` is missing it says `apt-get install -y chromium`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="the SQLite file (mlflow.db) of a pipeline run")
    ap.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="mlflow-ui-")))
    ap.add_argument("--experiment", default="bert-pipeline")
    ap.add_argument("--path", default="", help="after #/experiments/ID, e.g. '?workflowType=machine_learning'")
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("chromium not found: apt-get install -y chromium")
    from mlflow import MlflowClient

    uri = f"sqlite:///{args.store.resolve()}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        sys.exit(f"{args.store}: no experiment {args.experiment!r}")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    finetune = [r for r in runs if (r.info.run_name or "").startswith("finetune@")]
    tagged = {tag: sum(tag in r.data.tags for r in finetune) for tag in ("model", "task", "role", "seed")}

    args.out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(f"http://127.0.0.1:{port}/health", 120)
        page = f"http://127.0.0.1:{port}/#/experiments/{experiment.experiment_id}{args.path}"
        common = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp()}", "--window-size=1600,1000",
                  "--virtual-time-budget=20000"]
        shot = args.out / "experiment.png"
        subprocess.run([*common, f"--screenshot={shot}", page], capture_output=True, timeout=600)
        dom = subprocess.run([*common, "--dump-dom", page], capture_output=True, text=True, timeout=600).stdout
    finally:
        server.terminate()
        server.wait(timeout=30)
    (args.out / "experiment.html").write_text(dom)
    names = [r.info.run_name for r in finetune]
    report = {
        "experiment_kind_tag": experiment.tags.get("mlflow.experimentKind"),
        "page_mentions_genai": "GenAI" in dom or "genai" in dom.lower(),
        "page_shows_traces_tab_selected": 'aria-selected="true"' in dom and "Traces" in dom.split(
            'aria-selected="true"')[1][:200] if 'aria-selected="true"' in dom else None,
        "run_names_on_page": sum(name in dom for name in set(names)),
        "finetune_runs": len(finetune),
        "finetune_runs_tagged": tagged,
        "url": page,
        "screenshot": str(shot),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
