"""The recording of the params a stage reads (stages.params.base.RecordedParams) and the comparison with dvc.yaml's
declarations (tests/params_declared.py). The comparison over every stage of the graph runs in the end-to-end smoke
test (tests/test_e2e_smoke.py), which runs each stage with recording on; budget_curve and variants, which train nothing
there, are compared with training on in tests/test_budget_curve.py and tests/test_variants.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from stages.params.base import RECORD_ENV, RecordedParams, load_view
from stages.params.create_pretraining_data import CreatePretrainingDataView
from stages.params.finetune import FinetuneModel, FinetuneView
from tests.conftest import REPO
from tests.params_declared import mismatches, problems


def _recorded(view_cls):
    reads: set[str] = set()
    return RecordedParams(load_view(view_cls, REPO / "params.yaml"), "", reads), reads


def test_reads_are_recorded_by_dotted_key():
    view, reads = _recorded(FinetuneView)
    p = view.finetune
    assert p.data_seed == 1234
    assert "minilm" in p.models and "nobody" not in p.models
    member = p.models["minilm"]
    assert isinstance(member, FinetuneModel) and member.pooling == "mean"
    assert p.tasks["ner"].model_dump(include={"max_length", "doc_stride"}) == {"max_length": 64, "doc_stride": 16}
    assert reads == {"finetune.data_seed", "finetune.models.minilm", "finetune.models.nobody",
                     "finetune.models.minilm.pooling", "finetune.tasks.ner.max_length", "finetune.tasks.ner.doc_stride"}


def test_whole_reads_record_the_object_itself():
    view, reads = _recorded(FinetuneView)
    sorted(view.finetune.tasks)  # iterating sees every key
    view.finetune.grid.model_copy()  # a method other than model_dump sees every field
    assert len(view.finetune.seeds) == 1
    assert reads == {"finetune.tasks", "finetune.grid", "finetune.seeds"}


def test_properties_read_the_fields_they_are_computed_from():
    view, reads = _recorded(CreatePretrainingDataView)
    assert str(view.pretrain.tokenizer_path) == "models/tokenizer"
    assert reads == {"pretrain.init"}
    with pytest.raises(AttributeError, match="read-only"):
        view.pretrain.init = "x"


def test_a_schema_method_reads_through_the_view_key_by_key():
    """``FinetuneParams.member_task`` (a method of the schema, not pydantic's) records what it reads, not the whole
    ``finetune`` section: a stage that calls it must declare only the member's entry and the task's settings."""
    view, reads = _recorded(FinetuneView)
    settings = view.finetune.member_task("minilm", "ner")
    assert settings["max_train_examples"] is None and settings["batch_size"] == 32
    assert "finetune" not in reads and "finetune.models" not in reads
    assert {r.split(".")[1] for r in reads} == {"models", "tasks"}
    assert {r for r in reads if r.startswith("finetune.tasks")} <= {f"finetune.tasks.ner.{k}" for k in
                                                                    view.finetune.tasks["ner"].model_dump()}
    assert all(r.startswith(("finetune.models.minilm", "finetune.tasks.ner")) for r in reads)


def test_load_view_records_to_the_file_at_exit(tmp_path):
    record = tmp_path / "reads.jsonl"
    code = ("from stages.params.base import load_view\nfrom stages.params.distill import DistillView\n"
            "p = load_view(DistillView).distill\nassert p.temperature > 0 and p.seed == p.seed\n")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**_env(), RECORD_ENV: str(record)}, check=True)
    (entry,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert entry["reads"] == ["distill.seed", "distill.temperature"]
    assert entry["cmd"].startswith("python -m ")


def _env():
    import os

    return {k: v for k, v in os.environ.items() if k != RECORD_ENV}


def test_mismatches_name_undeclared_and_unused_keys():
    declared = ["finetune.seeds", "finetune.tasks.ner", "pretrain.model.size", "export"]
    read = {"finetune.seeds", "finetune.tasks.ner.max_length", "finetune.grid", "export.opset"}
    assert mismatches(declared, read) == (["finetune.grid"], ["pretrain.model.size"])
    # a whole read uses the narrower declaration below it, but is itself not covered by it
    assert mismatches(["finetune.tasks.ner"], {"finetune.tasks"}) == (["finetune.tasks"], [])


def test_problems_read_the_committed_dvc_yaml(tmp_path):
    """A stage that reads finetune.grid without declaring it (what dvc.yaml's finetune stages did before the grid
    was declared) is named, as is a stage whose declared key nothing reads."""
    record = tmp_path / "reads.jsonl"
    cmd = "python -m stages.finetune --model minilm --task ner"
    from tests.params_declared import declared_params

    address, declared = declared_params(REPO)[cmd]
    read = set(declared) - {"finetune.early_stopping_patience"}
    record.write_text(json.dumps({"cmd": cmd, "reads": sorted(read | {"finetune.undeclared_knob"})}) + "\n")
    assert problems(REPO, record) == [
        f"{address}: reads finetune.undeclared_knob, which dvc.yaml does not declare in its params",
        f"{address}: declares finetune.early_stopping_patience in its params, which its code never reads"]
