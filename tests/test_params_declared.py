"""The recording of the params a stage reads (stages.params.base.RecordedParams) and the comparison with dvc.yaml's
declarations (tests/params_declared.py). The comparison over every stage of the graph runs in the end-to-end smoke
test (tests/test_e2e_smoke.py), which runs each stage with recording on; budget_curve and variants, which train nothing
there, are compared with training on in tests/test_budget_curve.py and tests/test_variants.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

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
    view.finetune.user_model.model_copy()  # a method other than model_dump sees every field
    assert len(view.finetune.seeds) == 1
    assert reads == {"finetune.tasks", "finetune.user_model", "finetune.seeds"}


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
    read = {"finetune.seeds", "finetune.tasks.ner.max_length", "finetune.models.scratch.grid", "export.opset"}
    assert mismatches(declared, read) == (["finetune.models.scratch.grid"], ["pretrain.model.size"])
    # a whole read uses the narrower declaration below it, but is itself not covered by it
    assert mismatches(["finetune.tasks.ner"], {"finetune.tasks"}) == (["finetune.tasks"], [])


def test_problems_read_the_committed_dvc_yaml(tmp_path):
    """A stage that reads a key without declaring it (what dvc.yaml's finetune stages did before the grid was
    declared) is named, as is a stage whose declared key nothing reads."""
    record = tmp_path / "reads.jsonl"
    cmd = "python -m stages.finetune --model minilm --task ner"
    from tests.params_declared import declared_params

    address, declared = declared_params(REPO)[cmd]
    read = set(declared) - {"finetune.early_stopping_patience"}
    record.write_text(json.dumps({"cmd": cmd, "reads": sorted(read | {"finetune.undeclared_knob"})}) + "\n")
    assert problems(REPO, record) == [
        f"{address}: reads finetune.undeclared_knob, which dvc.yaml does not declare in its params",
        f"{address}: declares finetune.early_stopping_patience in its params, which its code never reads"]


def _grid_readers_check(graph: dict, raw: dict) -> list[str]:
    """One line per grid key of ``raw`` that is not in a member tuned on it, or that a stage declares which is
    neither that member's fine-tuning nor downstream of it (a stage a grid edit would rerun for nothing)."""
    from tests.params_declared import downstream, grid_keys, readers_of

    ft = raw["finetune"]
    members = {f"finetune.models.{name}": (name, m) for name, m in ft["models"].items()}
    members["finetune.user_model"] = (None, ft["user_model"])  # --model FOLDER: no dvc.yaml stage
    out = []
    for key in grid_keys(raw):
        owner = key.rpartition(".")[0]
        if owner not in members or members[owner][1].get("learning_rate") != "grid":
            out.append(f"{key}: not the grid of a member with learning_rate grid")
        name = members.get(owner, (None, None))[0]
        own = {stage for stage in graph if name and stage.startswith(f"finetune@{name}-")}
        readers = readers_of(graph, key)
        out += [f"{key}: {stage} does not declare it" for stage in sorted(own - readers)]
        anyway = downstream(graph, own)
        # retrieval embeds each of retrieval.members from its entry (path, init): a list DVC cannot interpolate
        # into keys, so it declares all of finetune.models and reruns on an edit of a member it embeds
        embeds = {"retrieval"} if name in raw.get("retrieval", {}).get("members", ()) else set()
        out += [f"{key}: {stage} declares it, yet trains no member tuned on it and uses no output of one"
                for stage in sorted(readers - own - anyway - embeds)]
    return out


def test_the_committed_grids_are_declared_only_where_they_are_read():
    """Every grid in params.yaml is in the member tuned on it (no default member is: the default's results do not
    depend on a grid), and no stage of dvc.yaml declares a grid it does not read (the shared finetune.grid of old
    marked all 16 fine-tunings, the budget curve and the variants changed on an edit no default member reads)."""
    from tests.conftest import committed_params
    from tests.params_declared import stage_graph

    raw = committed_params()
    assert all(m["learning_rate"] != "grid" for m in raw["finetune"]["models"].values())
    assert _grid_readers_check(stage_graph(REPO), raw) == []
    for stage, entry in stage_graph(REPO).items():  # no stage names a grid outright (a member's grid is in its entry)
        assert not [key for key in entry["params"] if "grid" in key.split(".")], stage


def test_a_members_grid_edit_reruns_only_that_members_stages(tmp_path):
    """With member scratch tuned on a grid (as a profile may set it), the stages whose declared params cover its grid
    are scratch's four fine-tunings and stages downstream of them (which rerun anyway on their new outputs): not the
    other members' fine-tunings, the variants or the teacher's logits. DVC resolves the stages from the edited
    params.yaml, as ``dvc status`` would."""
    from tests.conftest import committed_params
    from tests.params_declared import readers_of, stage_graph

    raw = committed_params()
    raw["finetune"]["models"]["scratch"].update(learning_rate="grid", epochs=None, low_resource_epochs=None,
                                                grid={"learning_rates": [3.0e-4, 1.0e-3], "epochs": [8],
                                                      "low_resource_epochs": [8]})
    from stages.params.root import validate_params

    validate_params(raw)  # the edit is one a user can make
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n    analytics = false\n")
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    graph = stage_graph(tmp_path)
    assert _grid_readers_check(graph, raw) == []
    readers = readers_of(graph, "finetune.models.scratch.grid")
    assert {s for s in readers if s.startswith("finetune@")} == {f"finetune@scratch-{t}" for t in raw["finetune"]["tasks"]}
    assert "variants" not in readers and not any(s.startswith(("teacher_logits", "distill_task")) for s in readers)
