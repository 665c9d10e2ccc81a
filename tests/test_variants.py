"""The variants comparison: recipes, record, intervals and the report's tables (bert_pipeline.report.variants), and
the stage itself training RoBERTa and ALBERT for real on a tiny corpus, in process (the smoke profile of
tests/test_e2e_smoke.py trains no family), its per-example records and intervals checked against its metrics."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bert_pipeline import tasks
from bert_pipeline.errors import PipelineError
from bert_pipeline.evaluation.examples import ExampleRecord, ExamplesError, SplitInfo, split_hash
from bert_pipeline.evaluation.intervals import Bootstrap
from bert_pipeline.report.variants import (
    BASE_DIFFERENCE,
    PUBLISHED,
    RECIPES,
    albert_embedding_size,
    average,
    recipe_of,
    variants_record,
    variants_section,
    with_intervals,
)
from tests.conftest import REPO, run_stage, save_tiny_tasks, synthetic_texts, tiny_finetune, write_params


def _row(family, parameters, mlm, scores):
    return {"family": family, "recipe": {}, "parameters": parameters, "steps": 10, "tokens_seen": 2_500_000,
            "mlm_accuracy": mlm, "scores": {t: {"metric": "f1", "mean": v, "seeds": [v]} for t, v in scores.items()}}


def test_recipes_follow_the_papers():
    assert (RECIPES["bert"].tokenizer, RECIPES["bert"].objective, RECIPES["bert"].masking) == ("wordpiece", "nsp", "static")
    assert (RECIPES["roberta"].tokenizer, RECIPES["roberta"].objective, RECIPES["roberta"].masking) == ("bpe", "none", "dynamic")
    assert RECIPES["roberta"].lowercase is False
    assert (RECIPES["albert"].tokenizer, RECIPES["albert"].objective) == ("unigram", "sop")
    assert RECIPES["albert"].model["share_layers"] is True
    # the pair objectives need whole sentences; the MLM-only families keep the pipeline's packing
    assert {f: r.packing for f, r in RECIPES.items()} == {
        "bert": "sentences", "roberta": None, "albert": "sentences", "modernbert": None, "deberta": None}
    with pytest.raises(PipelineError, match="variants.families: unknown family 'xlnet'"):
        recipe_of("xlnet")


@pytest.mark.parametrize(("objective", "packing", "family"), [("none", "stream", "modernbert"),
                                                                 ("nsp", "sentences", "bert")])
def test_family_settings_pass_the_whole_schema_over_either_packing(objective, packing, family):
    """Each family's three sections over the pipeline's (the default's MLM-only stream packing, or BERT's NSP
    pairs) validate as the whole params file would, with the recipe's objective and packing: NSP and SOP get whole
    sentences whatever the pipeline packs, the MLM-only families the pipeline's own packing."""
    from stages.params.base import validate_as
    from stages.params.root import validate_params
    from stages.params.variants import VariantsView
    from stages.variants import family_settings
    from tests.conftest import family_params

    raw = family_params(family)
    raw["create_pretraining_data"].update(objective=objective, packing=packing)
    raw["variants"]["families"] = list(RECIPES)
    validate_params(raw)  # the pipeline's own settings are valid to begin with
    params = validate_as(VariantsView, raw)
    for name, recipe in RECIPES.items():
        settings = family_settings(name, params)
        data = settings["create_pretraining_data"]
        assert (data.objective, data.masking) == (recipe.objective, recipe.masking)
        assert data.packing == (recipe.packing or packing), name
        assert (settings["pretrain"].model.family, settings["train_tokenizer"].model) == (name, recipe.tokenizer)
        validate_params({**raw, **{k: v.model_dump(mode="json") for k, v in settings.items()}})


def test_budgets_set_a_familys_steps_and_peak_rate_and_keep_pretrains_warmup(raw):
    """A family's ``variants.budgets`` entry replaces ``pretrain``'s ``max_steps`` and ``learning_rate`` for that family
    alone (null: pretrain's); warmup and the rest stay the pipeline's."""
    from stages.params.base import validate_as
    from stages.params.variants import VariantsView
    from stages.variants import family_settings

    raw["variants"].update(families=["bert", "deberta", "modernbert"],
                           budgets={"bert": {"max_steps": 1600, "learning_rate": 2.0e-3},
                                    "deberta": {"max_steps": 1380, "learning_rate": None}})
    params = validate_as(VariantsView, raw)
    pre = raw["pretrain"]
    got = {f: family_settings(f, params)["pretrain"] for f in ("bert", "deberta", "modernbert")}
    assert {f: (p.max_steps, p.learning_rate, p.warmup_steps) for f, p in got.items()} == {
        "bert": (1600, 2.0e-3, pre["warmup_steps"]), "deberta": (1380, pre["learning_rate"], pre["warmup_steps"]),
        "modernbert": (pre["max_steps"], pre["learning_rate"], pre["warmup_steps"])}


def test_a_budget_below_warmup_or_for_an_unlisted_family_is_a_one_line_error(raw, in_tmp, capsys):
    """The pretrain schema's warmup check runs over each budget, before any family trains; a budget whose key is not
    in ``variants.families`` is refused by the schema, naming the key."""
    from stages import variants
    from stages.params.base import validate_as
    from stages.params.variants import VariantsView
    from stages.variants import family_settings
    from tests.conftest import params_error

    raw["variants"].update(families=["deberta"], budgets={"deberta": {"max_steps": 10}})
    raw["pretrain"].update(warmup_steps=50, head_only_steps=0)
    with pytest.raises(PipelineError) as info:
        family_settings("deberta", validate_as(VariantsView, raw))
    assert str(info.value) == (
        "params.yaml: variants.budgets.deberta: over pretrain's settings, pretrain.warmup_steps: expected <= "
        "max_steps (10), got 50; give variants.budgets.deberta.max_steps at least 50 (pretrain.warmup_steps + "
        "head_only_steps), or null for pretrain's own")
    write_params(in_tmp, raw)
    code, err = run_stage(variants.main, capsys)
    assert code != 0 and "variants.budgets.deberta: over pretrain's settings" in err
    assert not (in_tmp / "checkpoints/variants").exists()

    raw["variants"].update(families=["bert", "albert"], budgets={"deberta": {"max_steps": 1380}})
    assert params_error(raw) == ("params.yaml: variants.budgets.deberta: not a family of variants.families (bert, "
                                 "albert); add 'deberta' to variants.families or remove its budget")
    write_params(in_tmp, raw)
    code, err = run_stage(variants.main, capsys)
    assert code != 0 and "variants.budgets.deberta: not a family of variants.families" in err


def test_albert_embedding_size_is_a_sixth_of_the_width_rounded_to_16():
    assert albert_embedding_size(768) == 128
    assert albert_embedding_size(128) == 32   # ceil(128/6) = 22 -> 32
    assert albert_embedding_size(256) == 48   # 43 -> 48
    assert albert_embedding_size(16) == 16


def test_average_needs_every_task():
    scores = {"a": {"mean": 0.5}, "b": {"mean": 0.7}}
    assert average(scores, ["a", "b"]) == pytest.approx(0.6)
    assert average(scores, ["a", "b", "c"]) is None


def test_section_keeps_published_figures_apart_and_speed_relative_to_bert():
    record = variants_record([_row("bert", 4_400_000, 0.12, {"sentiment": 0.70, "ner": 0.40}),
                              _row("albert", 1_100_000, 0.10, {"sentiment": 0.66, "ner": 0.30})],
                             member="pretrained", tasks=["sentiment", "ner"], seeds=[42])
    timing = {"families": [{"family": "bert", "examples_per_second": 200.0, "pretrain_cpu_seconds": 120},
                           {"family": "albert", "examples_per_second": 300.0, "pretrain_cpu_seconds": 90}]}
    text = variants_section(record, timing, "metrics/variants.json", "metrics/variants-timing.json",
                            distilled={"parameters": 2_000_000, "scores": {"sentiment": {"mean": 0.6},
                                                                         "ner": {"mean": 0.2}}, "speed": 1.9})
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:12] == ["model", "parameters", "steps", "peak LR", "tokens seen", "held-out MLM loss",
                           "held-out MLM acc", "sentiment", "ner", "average", "relative speed", "pre-training CPU min"]
    assert [h for h in header if h.startswith("published")] == [
        "published: model", "published: GLUE", "published: parameters", "published: speed"]
    bert, albert, distilled = ([c.strip() for c in line.strip("|").split("|")] for line in lines[2:5])
    # a record from before learning_rate, mlm_loss and the scratch: those cells empty, no gain table
    assert bert[:11] == ["bert (ours)", "4.40M", "10", "", "2.50M", "", "12.00%", "70.0", "40.0", "55.0", "1.00x"]
    assert albert[:11] == ["albert (ours)", "1.10M", "10", "", "2.50M", "", "10.00%", "66.0", "30.0", "48.0", "1.50x"]
    assert albert[11] == "1.5" and albert[-4:] == ["ALBERT-Base", "80.1", "12M", "1.7x"]
    assert len(lines) == 5 and "own scratch" not in text
    assert distilled[0].startswith("distilled (ours") and distilled[-4:] == ["DistilBERT", "77.0", "66M", "1.6x"]
    assert bert[-4:] == ["BERT-Base", f"{PUBLISHED['bert'].glue:.1f}", "110M", "1x"]
    # our cells never hold a published number: the GLUE figures appear only in the published columns
    assert all("79.6" not in c for c in bert[:-4])


def test_section_gives_each_familys_gain_over_its_own_scratch_on_validation_and_test():
    """A record with ``scratch_scores``: the main table gains steps, peak LR and held-out MLM loss; a second table
    gives per family and task the pre-trained model's main metric minus its own scratch's, validation / test, in
    points, averaged over the tasks."""
    def row(family, scores, scratch):
        out = _row(family, 4_400_000, 0.30, {})
        out.update(steps=1380, learning_rate=3.0e-3, mlm_loss=4.8123)
        for key, values in (("scores", scores), ("scratch_scores", scratch)):
            out[key] = {t: {"metric": "f1", "mean": test, "seeds": [test], "validation_mean": val}
                        for t, (val, test) in values.items()}
        return out

    record = variants_record([row("deberta", {"sentiment": (0.74, 0.72), "ner": (0.52, 0.50)},
                                  {"sentiment": (0.60, 0.61), "ner": (0.40, 0.41)}),
                              _row("bert", 4_400_000, 0.12, {"sentiment": 0.70, "ner": 0.40})],
                             member="pretrained", tasks=["sentiment", "ner"], seeds=[42])
    record["families"][1]["scratch_scores"] = {"sentiment": {"metric": "f1", "mean": 0.65, "seeds": [0.65]}}
    text = variants_section(record, None, "metrics/variants.json", "metrics/variants-timing.json")
    tables = [[[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]
              for block in text.split("\n\n") if block.startswith("| ")]
    main, gains = tables
    assert main[2][:10] == ["deberta (ours)", "4.40M", "1380", "0.003", "2.50M", "4.812", "30.00%", "72.0", "50.0",
                            "61.0"]
    assert "own scratch (validation / test, points)" in text
    assert gains[0] == ["model", "sentiment", "ner", "average"]
    assert gains[2] == ["deberta (ours)", "+14.0 / +11.0", "+12.0 / +9.0", "+13.0 / +10.0"]
    # an older row: test gain where both sides have one, no validation mean, no average over a missing task
    assert gains[3] == ["bert (ours)", "– / +5.0", "", ""]


GOLD = np.random.default_rng(1).integers(0, 3, 90)
NAMES = ["negative", "neutral", "positive"]


def _examples(task: str, accuracies: dict[int, float], offset: int) -> tuple[ExampleRecord, list[float]]:
    """A member's per-example record on ``task`` (the same 90 test examples for every member of a task, in articles
    of 3; one full run per seed) and its per-seed accuracies as its metrics file gives them."""
    kind = tasks.get("classification")
    gold = GOLD if task == "sentiment" else GOLD[::-1].copy()
    ids = [f"{task}:{i}" for i in range(len(gold))]
    rec = ExampleRecord("classification", "accuracy", NAMES)
    rec.splits["test"] = SplitInfo(ids, [f"doc{i // 3}" for i in range(len(gold))], split_hash(ids, gold.tolist()))
    scores = []
    for seed, acc in accuracies.items():
        rng = np.random.default_rng(seed + offset)
        pred = np.where(rng.random(len(gold)) > acc, (gold + 1) % 3, gold)
        rec.add("test", "full", seed, kind.example_columns(gold, pred, NAMES))
        scores.append(round(float(np.mean(pred == gold)), 6))
    return rec, scores


def _rows_and_records():
    """BERT and ALBERT on sentiment and ner, seeds 42 and 43, each beside its own scratch; ALBERT's scratch is
    BERT's scratch exactly (the same predictions), so their records are identical."""
    accuracy = {("bert", "pretrained"): 0.8, ("bert", "scratch"): 0.5, ("albert", "pretrained"): 0.7,
                ("albert", "scratch"): 0.5}
    offsets = {("bert", "pretrained"): 0, ("bert", "scratch"): 100, ("albert", "pretrained"): 200,
               ("albert", "scratch"): 100}
    rows, records = [], {}
    for family in ("bert", "albert"):
        row = _row(family, 4_400_000, 0.3, {})
        for side, key in (("pretrained", "scores"), ("scratch", "scratch_scores")):
            row[key] = {}
            for task in ("sentiment", "ner"):
                rec, seeds = _examples(task, {42: accuracy[family, side], 43: accuracy[family, side] - 0.05},
                                       offsets[family, side] + (7 if task == "ner" else 0))
                records[(family, side, task)] = rec
                row[key][task] = {"metric": "accuracy", "mean": round(sum(seeds) / 2, 6), "seeds": seeds,
                                  "validation_mean": 0.5}
        rows.append(row)
    return rows, records


def test_intervals_of_every_score_gain_and_difference_from_bert():
    """Each score gets its interval; each family's gain over its scratch and ALBERT's difference from BERT are
    paired differences whose intervals hold their points, the mean over tasks too; identical records differ by
    exactly [0, 0]; records of other runs are refused."""
    rows, records = _rows_and_records()
    boot = Bootstrap(resamples=1000, seed=5)
    bert, albert = with_intervals(rows, records, ["sentiment", "ner"], boot)
    for row in (bert, albert):
        for key in ("scores", "scratch_scores"):
            for entry in row[key].values():
                assert entry["sources"] == "examples+seeds" and entry["ci_low"] <= entry["mean"] <= entry["ci_high"]
        for entry in row["gain_over_scratch"].values():
            assert entry["ci_low"] - 1e-6 <= entry["mean"] <= entry["ci_high"] + 1e-6
        assert row["average"]["ci_low"] <= row["average"]["mean"] <= row["average"]["ci_high"]
    assert bert["gain_over_scratch"]["sentiment"]["ci_low"] > 0  # 80 vs 50 on 90 examples
    assert bert["gain_over_scratch"]["average"]["mean"] == pytest.approx(
        (bert["gain_over_scratch"]["sentiment"]["mean"] + bert["gain_over_scratch"]["ner"]["mean"]) / 2, abs=1e-6)
    assert BASE_DIFFERENCE == "difference_from_bert" and BASE_DIFFERENCE not in bert
    diff = albert[BASE_DIFFERENCE]
    assert list(diff) == ["sentiment", "ner", "average"]
    for task in ("sentiment", "ner"):
        assert diff[task]["mean"] == pytest.approx(albert["scores"][task]["mean"] - bert["scores"][task]["mean"],
                                                   abs=1e-6)
        assert diff[task]["ci_low"] - 1e-6 <= diff[task]["mean"] <= diff[task]["ci_high"] + 1e-6
        assert diff[task]["seeds"] == [round(a - b, 6) for a, b in zip(albert["scores"][task]["seeds"],
                                                                       bert["scores"][task]["seeds"], strict=True)]

    # identical records (ALBERT's scratch is BERT's): the paired difference is exactly [0, 0]
    from bert_pipeline.report.contrasts import difference

    same = difference(records[("albert", "scratch", "ner")], records[("bert", "scratch", "ner")], boot)
    assert (same.point, same.low, same.high) == (0.0, 0.0, 0.0)

    stale = {**records, ("albert", "pretrained", "ner"): records[("bert", "pretrained", "ner")]}  # not ALBERT's runs
    with pytest.raises(ExamplesError, match="albert pre-trained on ner: the per-example record gives per-seed scores"):
        with_intervals(rows, stale, ["sentiment", "ner"], boot)
    del records[("albert", "scratch", "sentiment")]
    with pytest.raises(ExamplesError, match="albert scratch on sentiment: no per-example record"):
        with_intervals(rows, records, ["sentiment", "ner"], boot)


def test_section_prints_each_figure_with_its_interval_and_the_difference_from_bert():
    rows, records = _rows_and_records()
    boot = Bootstrap(resamples=1000, seed=5)
    record = variants_record(with_intervals(rows, records, ["sentiment", "ner"], boot), member="pretrained",
                             tasks=["sentiment", "ner"], seeds=[42, 43], boot=boot)
    text = variants_section(record, None, "metrics/variants.json", "metrics/variants-timing.json")
    bert, albert = record["families"]
    score = bert["scores"]["sentiment"]
    tables = [[[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()]
              for block in text.split("\n\n") if block.startswith("| ")]
    main, scratch, versus = tables
    assert main[2][7] == f"{100 * score['mean']:.1f} [{100 * score['ci_low']:.1f}, {100 * score['ci_high']:.1f}]"
    avg = bert["average"]
    assert main[2][9] == f"{100 * avg['mean']:.1f} [{100 * avg['ci_low']:.1f}, {100 * avg['ci_high']:.1f}]"
    gain = bert["gain_over_scratch"]["sentiment"]
    assert scratch[2][1] == (f"+0.0 / {100 * gain['mean']:+.1f} [{100 * gain['ci_low']:.1f}, "
                             f"{100 * gain['ci_high']:.1f}]")
    assert versus[0] == ["model", "sentiment", "ner", "average"] and [r[0] for r in versus[2:]] == ["albert (ours)"]
    diff = albert[BASE_DIFFERENCE]["ner"]
    assert versus[2][2] == f"{100 * diff['mean']:+.1f} [{100 * diff['ci_low']:.1f}, {100 * diff['ci_high']:.1f}]"
    assert "Difference from our `bert` (test, points)" in text
    assert ("[low, high]: the 95% paired bootstrap interval (percentile, 1,000 draws, seed 5), resampling the test "
            "examples, whole source articles or films at a time, and the fine-tuning seeds (sources "
            "`examples+seeds`).") in text


def test_section_is_empty_without_families():
    assert variants_section(None, None, "a", "b") == ""
    assert variants_section({"families": [], "tasks": []}, None, "a", "b") == ""


def test_stage_without_families_writes_an_empty_record_and_trains_nothing(mlflow_in_tmp, capsys):
    from stages import variants

    write_params(Path.cwd())
    code, err = run_stage(variants.main, capsys)
    assert code == 0, err
    record = json.loads(open("metrics/variants.json", encoding="utf-8").read())
    assert record == {"member": "pretrained", "tasks": ["sentiment", "ner", "qa"], "seeds": record["seeds"],
                      "intervals": record["intervals"], "families": []}
    assert set(record["intervals"]) == {"resamples", "confidence", "seed", "method"}
    assert json.loads(open("metrics/variants-timing.json", encoding="utf-8").read()) == {"families": []}
    assert not Path("checkpoints/variants").exists()
    assert list(Path("metrics/examples-variants").iterdir()) == []  # the declared output, empty


def test_stage_refuses_a_member_that_is_not_pretrained(in_tmp, capsys):
    from stages import variants

    write_params(in_tmp, variants={"families": ["albert"], "member": "scratch"})
    code, err = run_stage(variants.main, capsys)
    assert code != 0
    assert "variants.member: 'scratch' fine-tunes" in err and "expected a pre-trained member of models/pretrained" in err
    assert not (in_tmp / "metrics/variants.json").exists()
    write_params(in_tmp, variants={"families": ["albert"], "member": "minilm"})
    code, err = run_stage(variants.main, capsys)
    assert code != 0 and "variants.member: 'minilm' fine-tunes 'data/raw/minilm'" in err



def _save_corpus(folder: Path, n_train: int = 40, n_validation: int = 8) -> None:
    """A ``data/corpus`` DatasetDict: :func:`tests.conftest.synthetic_texts`'s words in sentences of 8, then two
    sentences of the tiny tasks' words (so each vocabulary has them)."""
    import datasets

    def doc(i: int, text: str) -> dict:
        words = text.split()
        sentences = [" ".join(words[k:k + 8]) for k in range(0, len(words), 8)]
        sentences += ["The film was very good.", "Anna smith met the film in paris, it was bad."]
        return {"doc_id": f"synthetic:d{i}", "source": "synthetic", "text": " ".join(sentences),
                "sentences": sentences}

    docs = [doc(i, text) for i, text in enumerate(synthetic_texts(n_train + n_validation))]
    datasets.DatasetDict(train=datasets.Dataset.from_list(docs[:n_train]),
                         validation=datasets.Dataset.from_list(docs[n_train:])).save_to_disk(str(folder))


def test_stage_trains_roberta_and_albert_and_reads_what_dvc_yaml_declares(in_tmp, mlflow_in_tmp, raw, monkeypatch,
                                                                         capsys, one_thread):
    """RoBERTa and ALBERT each with its own vocabulary (BPE, Unigram: 320 entries, BPE's floor is 261), data (32
    tokens) and pre-training (tiny, 4 steps), fine-tuned on sentiment: the record, headline and timing hold both,
    ALBERT (shared layers, factorised embedding) has fewer parameters than RoBERTa at the same size, and the params
    the stage read are the ones dvc.yaml declares."""
    from bert_pipeline.report.variants import RECIPES
    from stages import variants
    from tests.params_declared import declared_params, mismatches, recorded_reads
    from tests.pretrain_fixtures import TINY_PRETRAIN

    _save_corpus(in_tmp / "data/corpus")
    save_tiny_tasks(in_tmp / "data/tasks")
    write_params(in_tmp, tiny_finetune(raw, low_resource_tasks=[]),
                 variants={"families": ["roberta", "albert"], "tasks": ["sentiment"], "scratch": True,
                           "budgets": {"albert": {"max_steps": 3, "learning_rate": 2.0e-3}}},
                 train_tokenizer={"vocab_size": 320, "batch_size": 100},
                 create_pretraining_data={"max_seq_length": 32, "dupe_factor": 1, "shard_size": 16, "num_proc": 1},
                 pretrain=TINY_PRETRAIN, evaluate={"seq_length": 32})
    with recorded_reads(monkeypatch) as reads:
        code, err = run_stage(variants.main, capsys)
    assert code == 0, err

    record = json.loads(Path("metrics/variants.json").read_text(encoding="utf-8"))
    assert (record["member"], record["tasks"], record["seeds"]) == ("pretrained", ["sentiment"], [42])
    assert [r["family"] for r in record["families"]] == ["roberta", "albert"]
    rows = {r["family"]: r for r in record["families"]}
    for family, row in rows.items():
        recipe = RECIPES[family]
        assert (row["recipe"]["tokenizer"], row["recipe"]["objective"], row["recipe"]["masking"]) == (
            recipe.tokenizer, recipe.objective, recipe.masking)
        assert row["tokens_seen"] > 0 and 0.0 <= row["mlm_accuracy"] <= 1.0 and row["mlm_loss"] > 0.0
        assert list(row["scores"]) == list(row["scratch_scores"]) == ["sentiment"]
        for score in (row["scores"]["sentiment"], row["scratch_scores"]["sentiment"]):
            assert score["metric"] == "accuracy" and len(score["seeds"]) == 1 and 0.0 <= score["mean"] <= 1.0
            assert 0.0 <= score["validation_mean"] <= 1.0
        config = json.loads((Path("checkpoints/variants") / family / "model/config.json").read_text(encoding="utf-8"))
        assert config["model_type"] == family
    assert (rows["roberta"]["recipe"]["tokenizer"], rows["roberta"]["recipe"]["objective"]) == ("bpe", "none")
    assert (rows["albert"]["recipe"]["tokenizer"], rows["albert"]["recipe"]["objective"]) == ("unigram", "sop")
    # albert's budget (3 steps at 2e-3), roberta pretrain's own (4 steps at its rate)
    assert (rows["albert"]["steps"], rows["albert"]["learning_rate"]) == (3, 2.0e-3)
    assert (rows["roberta"]["steps"], rows["roberta"]["learning_rate"]) == (4, raw["pretrain"]["learning_rate"])
    assert 0 < rows["albert"]["parameters"] < rows["roberta"]["parameters"]
    assert Path("checkpoints/variants/roberta/tokenizer/merges.txt").is_file()  # byte-level BPE
    headline = json.loads(Path("metrics/headline/variants.json").read_text(encoding="utf-8"))["variants"]
    assert headline == {f"{f}_average": round(r["scores"]["sentiment"]["mean"], 6) for f, r in rows.items()}
    timing = json.loads(Path("metrics/variants-timing.json").read_text(encoding="utf-8"))["families"]
    assert [t["family"] for t in timing] == ["roberta", "albert"]
    assert all(t["examples_per_second"] > 0 and t["pretrain_seconds"] >= 0 and t["scratch_finetune_seconds"] >= 0
               for t in timing)

    declared = declared_params(REPO)["python -m stages.variants"][1]
    assert mismatches(declared, reads) == ([], [])

    # each member's per-example record: its summed statistics give each seed's score in the metrics file
    folder = Path("metrics/examples-variants")
    assert sorted(p.name for p in folder.iterdir()) == [
        "albert-pretrained-sentiment.arrow", "albert-scratch-sentiment.arrow", "roberta-pretrained-sentiment.arrow",
        "roberta-scratch-sentiment.arrow"]
    for family, row in rows.items():
        for side, key in (("pretrained", "scores"), ("scratch", "scratch_scores")):
            rec = ExampleRecord.read(folder / f"{family}-{side}-sentiment.arrow")
            kind, n = tasks.get(rec.kind), np.asarray(float(len(rec.splits["test"].ids)))
            per_seed = [float(kind.metrics_from_sums({k: np.asarray(v.sum()) for k, v in kind.example_sums(
                rec.runs[("test", "full", seed)], rec.label_names).items()}, n, rec.label_names)[rec.main_metric])
                for seed in rec.seeds("test")]
            assert per_seed == pytest.approx(row[key]["sentiment"]["seeds"], abs=1e-6)
            score = row[key]["sentiment"]
            assert score["sources"] == "examples" and score["ci_low"] <= score["mean"] <= score["ci_high"]
        gain = row["gain_over_scratch"]["sentiment"]
        assert gain["mean"] == round(row["scores"]["sentiment"]["mean"] - row["scratch_scores"]["sentiment"]["mean"], 6)
        assert gain["ci_low"] - 1e-6 <= gain["mean"] <= gain["ci_high"] + 1e-6
        assert "difference_from_bert" not in row  # no bert among the families
    intervals = raw["evaluate"]["intervals"]
    assert record["intervals"] == {k: intervals[k] for k in ("resamples", "confidence", "seed", "method")}

    # a rerun reuses both families and writes the same bytes
    before = {p.name: p.read_bytes() for p in [Path("metrics/variants.json"), *folder.iterdir()]}
    code, err = run_stage(variants.main, capsys)
    assert code == 0, err
    assert "variants roberta: reusing" in err and "variants albert: reusing" in err
    assert {p.name: p.read_bytes() for p in [Path("metrics/variants.json"), *folder.iterdir()]} == before


def test_stage_trains_modernbert_and_deberta_on_wordpiece(in_tmp, mlflow_in_tmp, raw, capsys, one_thread):
    """ModernBERT and DeBERTa through the stage's own code (tokenizer, pre-training data, the pretrain stage's loop,
    fine-tuning, the side-by-side speed): both on a WordPiece vocabulary, objective none with dynamic masking, their
    stock MLM classes saved with a tokenizer that gives no token types, and the report's table holding their rows
    beside their published figures."""
    from stages import variants
    from tests.pretrain_fixtures import TINY_PRETRAIN

    _save_corpus(in_tmp / "data/corpus")
    save_tiny_tasks(in_tmp / "data/tasks")
    write_params(in_tmp, tiny_finetune(raw, low_resource_tasks=[]),
                 variants={"families": ["modernbert", "deberta"], "tasks": ["sentiment"], "scratch": False},
                 train_tokenizer={"vocab_size": 320, "batch_size": 100},
                 create_pretraining_data={"max_seq_length": 32, "dupe_factor": 1, "shard_size": 16, "num_proc": 1},
                 pretrain=TINY_PRETRAIN, evaluate={"seq_length": 32})
    code, err = run_stage(variants.main, capsys)
    assert code == 0, err

    record = json.loads(Path("metrics/variants.json").read_text(encoding="utf-8"))
    rows = {r["family"]: r for r in record["families"]}
    assert list(rows) == ["modernbert", "deberta"]
    for family, model_type, architecture in (("modernbert", "modernbert", "ModernBertForMaskedLM"),
                                             ("deberta", "deberta-v2", "DebertaV2ForMaskedLM")):
        row = rows[family]
        assert (row["recipe"]["tokenizer"], row["recipe"]["objective"], row["recipe"]["masking"]) == (
            "wordpiece", "none", "dynamic")
        assert row["steps"] == 4 and row["tokens_seen"] > 0 and 0.0 <= row["mlm_accuracy"] <= 1.0
        assert 0.0 <= row["scores"]["sentiment"]["mean"] <= 1.0 and "scratch_scores" not in row  # scratch: false
        folder = Path("checkpoints/variants") / family
        config = json.loads((folder / "model/config.json").read_text(encoding="utf-8"))
        assert (config["model_type"], config["architectures"]) == (model_type, [architecture])
        assert (folder / "tokenizer/vocab.txt").is_file()  # WordPiece
        tok_config = json.loads((folder / "model/tokenizer_config.json").read_text(encoding="utf-8"))
        assert tok_config["model_input_names"] == ["input_ids", "attention_mask"]
    assert json.loads(Path("checkpoints/variants/modernbert/model/config.json").read_text(encoding="utf-8"))[
        "intermediate_size"] == 320  # tiny's GeGLU at BERT's FFN parameters
    timing = json.loads(Path("metrics/variants-timing.json").read_text(encoding="utf-8"))["families"]
    assert all(t["examples_per_second"] > 0 for t in timing)
    text = variants_section(record, {"families": timing}, "metrics/variants.json", "metrics/variants-timing.json")
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
             for line in text.splitlines() if line.startswith("| ") and "(ours)" in line}
    assert cells["modernbert (ours)"][-4:] == ["ModernBERT-base", "88.4", "149M", ""]
    assert cells["deberta (ours)"][-4:] == ["DeBERTa-v3-base", "", "184M", ""]
