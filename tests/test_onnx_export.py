"""ONNX export of each head (``bert_pipeline.mlops.onnx_export``), ``bert-pipeline export`` and the ``export`` stage,
on tiny models: ONNX Runtime gives PyTorch's logits and predictions at several batch sizes and lengths, and QA
answers decoded from exported logits are the answers ``predict`` serves."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import onnx
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, Sequence, Value
from transformers import (
    AutoTokenizer,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)

from bert_pipeline import tasks
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.predictor import load_predictor
from bert_pipeline.mlops import onnx_export as ox
from bert_pipeline.model.heads import MEAN_POOLING_CLASSES
from bert_pipeline.report.report import onnx_section
from bert_pipeline.tasks.qa import answer
from bert_pipeline.train.runtime import make_runtime
from stages.evaluate import REPORT_SOURCES
from tests.conftest import REPO, run_stage, write_params
from tests.tiny_models import (
    WORDS,
    _config,
    bert_tokenizer,
    save_classifier,
    save_reader,
    save_tagger,
    tiny_tokenizer,
)

LONG = "alice met bob in paris and the film was good . " * 12  # ~130 tokens: several 32-token windows
TEXTS = ["a good film", "bob hated the plot and the actors were awful", "bad", LONG]
SENTENCES = [t.split() for t in TEXTS]
QA = [{"question": "who met bob ?", "context": "alice met bob in paris"},
      {"question": "where did bob go ?", "context": LONG},
      {"question": "what was good ?", "context": "the film was good and the story was great . " * 6}]
WINDOW = {"max_seq_length": 32, "doc_stride": 8}


def save_random(path, head, tokenizer=None, seed=0, **config):
    """A tiny ``head`` model with random weights drawn wide (``initializer_range`` 0.5, against BERT's 0.02), so
    its logits differ between inputs by far more than the parity tolerance; mean pooling for
    ``MEAN_POOLING_CLASSES["bert"]`` (the pipeline's sentence head for its own models)."""
    torch.manual_seed(seed)
    tok = tokenizer or tiny_tokenizer()
    model = head(_config(tok, initializer_range=0.5, **config))
    if head is MEAN_POOLING_CLASSES["bert"]:
        model.config.classifier_pooling = "mean"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


HEADS = {
    "cls": (lambda p: save_random(p, BertForSequenceClassification, num_labels=3), [{"text": t} for t in TEXTS],
            ("logits",)),
    "mean-pool": (lambda p: save_random(p, MEAN_POOLING_CLASSES["bert"], num_labels=3),
                  [{"text": t} for t in TEXTS], ("logits",)),
    "ner": (lambda p: save_random(p, BertForTokenClassification, num_labels=5), [{"tokens": s} for s in SENTENCES],
            ("logits",)),
    "qa": (lambda p: save_random(p, BertForQuestionAnswering), QA, ("start_logits", "end_logits")),
    "qa-segments": (lambda p: save_random(p, BertForQuestionAnswering, bert_tokenizer(WORDS)), QA,
                    ("start_logits", "end_logits")),
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each head saved and exported once: ``{name: (model_dir, out_dir, report)}``."""
    root = tmp_path_factory.mktemp("onnx")
    out = {}
    for name, (save, examples, _) in HEADS.items():
        src = save(root / name)
        out[name] = (src, root / f"{name}-onnx", ox.export_folder(src, root / f"{name}-onnx", examples, **WINDOW,
                                                                  runs=2, warmup=1))
    return out


@pytest.mark.parametrize("name", sorted(HEADS))
def test_export_matches_pytorch_at_batch_1_and_3_of_varying_length(exported, name):
    src, out, report = exported[name]
    _, examples, outputs = HEADS[name]
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.onnx", "onnx_export.json",
                                                      "tokenizer.json", "tokenizer_config.json"]
    onnx.checker.check_model(str(out / "model.onnx"))
    assert report.outputs == list(outputs)
    assert report.inputs == (["input_ids", "attention_mask", "token_type_ids"] if name == "qa-segments"
                             else ["input_ids", "attention_mask"])
    assert report.parity.agreement == 1.0 and report.parity.compared >= len(examples)
    assert max(report.parity.max_abs_diff.values()) < 1e-4

    pred = load_predictor(src)
    enc = ox.encode_examples(pred, examples, **WINDOW)
    lengths = {len(f["input_ids"]) for f in enc.features}
    assert len(lengths) >= 3  # windows of several lengths
    session = ox.onnx_session(out / "model.onnx")
    ref = ox.window_logits(ox.torch_forward(pred, make_runtime("fp32", cpu=True)), pred, enc, batch_size=1)
    for batch_size in (1, 3):  # batch 3: padded to the longest window of each batch
        got = ox.window_logits(ox.onnx_forward(session, pred.task), pred, enc, batch_size)
        for key in outputs:
            assert max(float(np.abs(a - b).max()) for a, b in zip(ref[key], got[key], strict=True)) < 1e-4
        assert ox.predictions(enc, got) == ox.predictions(enc, ref)
    facts = json.loads((out / "onnx_export.json").read_text())
    assert facts["opset"] == 18 and facts["inputs"] == report.inputs
    assert facts["dynamic_axes"]["input_ids"] == ["batch", "sequence"]
    assert facts["parity"]["agreement"] == 1.0
    assert facts["sha256"] == hashlib.sha256((out / "model.onnx").read_bytes()).hexdigest()
    # the folder is usable alone: its tokenizer encodes as the source's
    alone = AutoTokenizer.from_pretrained(str(out))
    assert alone("alice met bob")["input_ids"] == pred.tokenizer("alice met bob")["input_ids"]


def test_the_check_compares_outputs_that_differ(exported):
    """The parity check is not a comparison of constants: the random heads' logits differ from input to input
    (several labels' worth for the sentence heads) and QA decodes different answers."""
    for name in ("cls", "mean-pool", "ner", "qa"):
        src, out, _ = exported[name]
        pred = load_predictor(src)
        enc = ox.encode_examples(pred, HEADS[name][1], **WINDOW)
        logits = ox.window_logits(ox.onnx_forward(ox.onnx_session(out / "model.onnx"), pred.task), pred, enc, 2)
        first = HEADS[name][2][0]
        rows = [x.reshape(-1)[:2] for x in logits[first]]
        assert max(float(np.abs(r - rows[0]).max()) for r in rows) > 0.1, name  # 1000x the tolerance
        assert len(set(ox.predictions(enc, logits))) > 1, name


@pytest.mark.parametrize("name", ["qa", "qa-segments"])
def test_qa_answers_decoded_from_onnx_logits_are_the_served_answers(exported, name):
    """onnxruntime#14153: wrong QA answers from an export. Here the start/end logits of ONNX Runtime, decoded by
    the one decoder (tasks.qa.decode_qa), give the answers `predict` serves with PyTorch, a long context included."""
    src, out, _ = exported[name]
    pred = load_predictor(src)
    enc = ox.encode_examples(pred, QA, **WINDOW)
    assert sum(i == 1 for i in enc.example_index) >= 3  # the long context spans several windows
    logits = ox.window_logits(ox.onnx_forward(ox.onnx_session(out / "model.onnx"), pred.task), pred, enc, 3)
    from_onnx = ox.predictions(enc, logits, n_best=5, max_answer_length=4)
    served = [answer(pred, ex["question"], ex["context"], WINDOW["max_seq_length"], WINDOW["doc_stride"], 5, 4)
              for ex in QA]
    assert from_onnx == [s["answer"] for s in served]
    assert all(from_onnx) and all(a in ex["context"] for a, ex in zip(from_onnx, QA, strict=True))


def test_an_encoder_without_its_head_is_refused(exported, tmp_path):
    """The #14153 export (the bare encoder: last_hidden_state) does not pass as a QA head."""
    src, _, _ = exported["qa"]
    pred = load_predictor(src)
    example = pred.tokenizer(["alice met bob", "bob"], padding=True, return_tensors="pt")

    class Encoder(torch.nn.Module):  # what `--feature=default` exported: the encoder's hidden states
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    with ox._known_export_noise():
        torch.onnx.export(Encoder(pred.model.bert), (example["input_ids"], example["attention_mask"]),
                          str(tmp_path / "encoder.onnx"), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], dynamo=False, opset_version=18)
    session = ox.onnx_session(tmp_path / "encoder.onnx")
    with pytest.raises(PipelineError, match=r"outputs \[\('last_hidden_state', 3\).*a question-answering head"):
        ox.check_outputs(session, tasks.get("qa"), tmp_path / "encoder.onnx")


def test_same_folder_same_onnx_bytes(exported, tmp_path):
    src, out, _ = exported["mean-pool"]
    again = ox.export_folder(src, tmp_path / "again", HEADS["mean-pool"][1], **WINDOW, runs=1, warmup=0)
    assert (tmp_path / "again/model.onnx").read_bytes() == (out / "model.onnx").read_bytes()
    first = json.loads((out / "onnx_export.json").read_text())
    assert json.loads((tmp_path / "again/onnx_export.json").read_text())["parity"] == first["parity"]
    assert again.onnx_sha256 == first["sha256"]


def test_a_difference_above_tolerance_writes_nothing(exported, tmp_path):
    src, _, _ = exported["qa"]
    with pytest.raises(PipelineError, match=r"differ from PyTorch's by up to .* \(> --tolerance 1e-12\); the export is "
                                            "not written"):
        ox.export_folder(src, tmp_path / "out", QA, **WINDOW, runs=1, warmup=0, tolerance=1e-12,
                         tolerance_name="--tolerance")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary folder left either


def test_inputs_without_the_heads_columns_are_one_line(exported):
    pred = load_predictor(exported["qa"][0])
    with pytest.raises(PipelineError, match=r"^check input 0: a question-answering model reads question, context; "
                                            r"context missing \(got question\)$"):
        ox.encode_examples(pred, [{"question": "who ?"}], 32)


# ------------------------------------------------------------------------------------------------------ CLI
def _cli(capsys, argv):
    from stages.cli import main

    code, err = run_stage(lambda: main(["export", *argv]), capsys)
    return code, err


def test_cli_prints_one_json_line(tmp_path, capsys):
    src = save_reader(tmp_path / "qa")
    checks = tmp_path / "checks.jsonl"
    checks.write_text("\n".join(json.dumps(ex) for ex in QA) + "\n\n")
    from stages.cli import main

    main(["export", str(src), "-o", str(tmp_path / "out"), "--check-texts", str(checks), "--max-seq-length", "32",
          "--doc-stride", "8", "--timed-runs", "2", "--warmup-runs", "0"])
    (line,) = capsys.readouterr().out.splitlines()
    rec = json.loads(line)
    assert rec["kind"] == "question-answering" and rec["out_dir"] == str(tmp_path / "out")
    assert rec["examples"] == 3 and rec["windows"] > 3 and rec["agreement"] == 1.0
    assert set(rec["max_abs_diff"]) == {"start_logits", "end_logits"}
    assert max(rec["max_abs_diff"].values()) < 1e-4
    assert rec["latency_ms_b1"]["pytorch"] > 0 and rec["latency_ms_b1"]["onnxruntime"] > 0
    assert rec["speedup"] == pytest.approx(rec["latency_ms_b1"]["pytorch"] / rec["latency_ms_b1"]["onnxruntime"],
                                           rel=0.01)
    assert (tmp_path / "out/model.onnx").is_file()


def test_cli_without_check_texts_uses_its_samples(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = save_classifier(tmp_path / "sent", favour=None)
    from stages.cli import main

    main(["export", str(src), "--timed-runs", "1", "--warmup-runs", "0"])
    rec = json.loads(capsys.readouterr().out)
    assert rec["out_dir"] == "onnx/sent" and (tmp_path / "onnx/sent/model.onnx").is_file()
    assert rec["examples"] == 4 and rec["agreement"] == 1.0


def test_cli_never_deletes_a_users_folder_and_writes_readable_files(tmp_path, capsys):
    """A new-user finding: ``-o`` into a folder of one's own replaced it whole (its files gone); the export's files
    came out private (mkdtemp's 0700)."""
    import stat

    src = save_classifier(tmp_path / "sent", favour=None)
    mine = tmp_path / "occupied"
    mine.mkdir()
    (mine / "mine.txt").write_text("keep me")
    code, err = _cli(capsys, [str(src), "-o", str(mine), "--timed-runs", "1", "--warmup-runs", "0"])
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 1 and "holds files that are not an ONNX export" in line
    assert (mine / "mine.txt").read_text() == "keep me" and sorted(p.name for p in mine.iterdir()) == ["mine.txt"]
    out = tmp_path / "out"
    for _ in range(2):  # a previous export is replaced
        code, _ = _cli(capsys, [str(src), "-o", str(out), "--timed-runs", "1", "--warmup-runs", "0"])
        assert code == 0
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    assert stat.S_IMODE((out / "onnx_export.json").stat().st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("case", ["no-folder", "not-a-model", "bad-line"])
def test_cli_errors_are_one_line(tmp_path, capsys, case):
    if case == "no-folder":
        argv, want = [str(tmp_path / "missing")], f"error: {tmp_path}/missing/config.json: not found"
    elif case == "not-a-model":
        (tmp_path / "m").mkdir()
        (tmp_path / "m/config.json").write_text('{"architectures": ["BertModel"]}')
        argv, want = [str(tmp_path / "m")], "have no sequence/token classification or QA head"
    else:
        src = save_reader(tmp_path / "qa")
        (tmp_path / "c.txt").write_text("who met bob ?\n")
        argv, want = [str(src), "--check-texts", str(tmp_path / "c.txt")], f"error: {tmp_path}/c.txt:1: expected a JSON"
    code, err = _cli(capsys, [*argv, "-o", str(tmp_path / "out")])
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 1 and len(lines) == 1 and want in lines[0]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------- stage
def _tasks(root):
    sent = Dataset.from_dict({"text": TEXTS, "label": [1, 0, 0, 1]},
                             features=Features({"text": Value("string"), "label": ClassLabel(names=["neg", "pos"])}))
    ner = Dataset.from_dict({"tokens": SENTENCES, "ner_tags": [[0] * len(s) for s in SENTENCES]},
                            features=Features({"tokens": Sequence(Value("string")),
                                               "ner_tags": Sequence(ClassLabel(names=["O", "B-PER", "I-PER"]))}))
    qa = Dataset.from_dict({"id": ["0", "1", "2"], "question": [q["question"] for q in QA],
                            "context": [q["context"] for q in QA],
                            "answers": [{"text": ["alice"], "answer_start": [0]}] * 3})
    for name, split in (("sentiment", sent), ("ner", ner), ("qa", qa)):
        DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(str(root / "data/tasks" / name))


@pytest.fixture
def mlflow_shared(in_tmp, module_mlflow_uri, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", module_mlflow_uri)


def test_export_stage_outputs_and_rerun(in_tmp, mlflow_shared, capsys):
    from stages.export import main

    _tasks(in_tmp)
    save_classifier(in_tmp / "models/finetuned/pretrained-sentiment", favour=None)
    save_tagger(in_tmp / "models/finetuned/pretrained-ner", favour="O")
    save_reader(in_tmp / "models/finetuned/pretrained-qa")
    save_reader(in_tmp / "models/finetuned/scratch-qa", seed=1)  # not in export.models
    write_params(in_tmp, export={"models": ["pretrained"], "max_test_examples": 3, "latency_examples": 2,
                                 "warmup_runs": 0, "timed_runs": 1})
    shutil.copy(REPO / "dvc.yaml", in_tmp / "dvc.yaml")  # the stage's declared inputs are there: it starts
    code, _ = run_stage(main, capsys)
    assert code == 0
    parity = json.loads((in_tmp / "metrics/export.json").read_text())
    assert sorted(parity) == ["pretrained-ner", "pretrained-qa", "pretrained-sentiment"]  # scratch not listed
    assert {r["agreement"] for r in parity.values()} == {1.0}
    assert parity["pretrained-qa"]["examples"] == 3 and parity["pretrained-qa"]["windows"] > 3  # 128/32 windows
    assert parity["pretrained-sentiment"]["compared"] == 3  # max_test_examples
    assert all(max(r["max_abs_diff"].values()) < 1e-4 for r in parity.values())
    headline = json.loads((in_tmp / "metrics/headline/export.json").read_text())["onnx"]
    assert headline == {"max_abs_diff": max(max(r["max_abs_diff"].values()) for r in parity.values()),
                        "agreement": 1.0}
    timing = json.loads((in_tmp / "metrics/export-timing.json").read_text())
    assert timing["pretrained-qa"]["pytorch_ms"] > 0 and timing["pretrained-qa"]["examples"] == 2
    assert sorted(p.name for p in (in_tmp / "models/onnx").iterdir()) == ["pretrained-ner", "pretrained-qa",
                                                                         "pretrained-sentiment"]
    facts = json.loads((in_tmp / "models/onnx/pretrained-qa/onnx_export.json").read_text())
    assert facts["source"] == "models/finetuned/pretrained-qa"
    before = (in_tmp / "metrics/export.json").read_bytes()
    onnx_bytes = (in_tmp / "models/onnx/pretrained-qa/model.onnx").read_bytes()
    assert run_stage(main, capsys)[0] == 0
    assert (in_tmp / "metrics/export.json").read_bytes() == before
    assert (in_tmp / "models/onnx/pretrained-qa/model.onnx").read_bytes() == onnx_bytes

    # the report's ONNX table, from the files the stage wrote
    sources = REPORT_SOURCES  # the evaluate stage's: metrics/export.json, metrics/export-timing.json
    table = onnx_section(parity, timing, sources)
    assert "`metrics/export.json`, `metrics/export-timing.json`" in table
    row = next(line for line in table.splitlines() if line.startswith("| pretrained-qa |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "100.0% of 3 answers"
    assert cells[5] == f"{timing['pretrained-qa']['speedup']:.1f}x"
    assert onnx_section(None, None, sources) == ""


def test_export_stage_names_a_model_without_folders(in_tmp, mlflow_shared, capsys):
    from stages.export import main

    save_classifier(in_tmp / "models/finetuned/pretrained-sentiment")
    write_params(in_tmp, export={"models": ["pretrained", "minilm"]})
    code, err = run_stage(main, capsys)
    assert code == 1
    assert ("error: export.models: no models/finetuned/minilm-{task}/ folder (models with fine-tuned folders: "
            "pretrained); run finetune first or drop it") in err
    assert not (in_tmp / "models/onnx").exists() and not (in_tmp / "metrics/export.json").exists()


def test_evaluate_report_shows_the_onnx_table(in_tmp, mlflow_shared):
    from bert_pipeline.io import write_json
    from stages.evaluate import main
    from tests.test_evaluate import _setup

    _setup(in_tmp)
    write_json(in_tmp / "metrics/export.json", {"distilled-qa": {
        "kind": "question-answering", "max_abs_diff": {"start_logits": 2.5e-07, "end_logits": 1.2e-07},
        "agreement": 0.975, "compared": 40}})
    write_json(in_tmp / "metrics/export-timing.json", {"distilled-qa": {
        "pytorch_ms": 3.0, "onnxruntime_ms": 1.2, "speedup": 2.5, "threads": 1}})
    main()
    summary = (in_tmp / "reports/summary.md").read_text()
    assert "## ONNX export" in summary and "CPU, 1 thread(s)" in summary
    assert "| distilled-qa | 2.5e-07 | 97.5% of 40 answers | 3.00 | 1.20 | 2.5x |" in summary
    assert summary.index("## ONNX export") < summary.index("Sources:")
