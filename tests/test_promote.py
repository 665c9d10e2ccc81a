"""Champion promotion in a temporary sqlite MLflow store: on evidence (the paired bootstrap of the two versions'
per-example validation records) an insignificant gain is kept out and a clear one moves it, a smaller model within
the non-inferiority margin replaces it; the point rule as before (better on validation moves it, worse or equal
does not); the test score never chooses; a champion's stored record pairs, one without is re-scored, never
compared unpaired."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bert_pipeline.evaluation.examples import ExampleRecord, SplitInfo, split_hash
from bert_pipeline.mlops.promotion import PromotionRule
from bert_pipeline.mlops.registry import (
    CANDIDATE,
    CHAMPION,
    EXAMPLES_ARTIFACT,
    RECORD_TAG,
    Entry,
    decide,
    promote_task,
)
from tests.tiny_models import save_classifier, save_reader, save_word_tagger

SPLIT = "a" * 64
TEST_SPLIT = "t" * 64
POINT = PromotionRule("point")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One temporary sqlite store for the module (creating its schema is the slow part)."""
    from mlflow import MlflowClient

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield MlflowClient(tracking_uri=uri, registry_uri=uri), uri


def _entry(tmp_path, name, score, seed, split=SPLIT, member=None, test=None, task="sentiment", examples=None,
           **config):
    """``score``: the validation mean; ``test``: the test mean (default the same); ``examples``: the member's
    per-example record; ``config``: the tiny classifier's config fields that differ (its size)."""
    folder = save_classifier(tmp_path / name, favour=None, seed=seed, **config)
    return Entry(member or name, task, folder, seed, "accuracy", score, split, score if test is None else test,
                 TEST_SPLIT, f"metrics/finetune/{name}.json", examples=examples)


N = 200
GOLD = np.arange(N) % 2  # 200 validation examples, half of each class
IDS = [f"validation:{i}" for i in range(N)]


def record(runs: dict[int, np.ndarray], ids=IDS, gold=GOLD) -> ExampleRecord:
    """A classification member's per-example record: per seed, which validation examples it got right (the rest
    predicted as the other class); a test split beside, as fine-tuning writes it."""
    rec = ExampleRecord("classification", "accuracy", ["negative", "positive"])
    rec.splits["validation"] = SplitInfo(list(ids), list(ids), split_hash(ids, gold.tolist()))
    rec.splits["test"] = SplitInfo(["test:0", "test:1"], ["test:0", "test:1"], split_hash(["test:0", "test:1"], [0, 1]))
    for seed, right in runs.items():
        rec.add("validation", "full", seed, {"gold": gold, "pred": np.where(right, gold, 1 - gold)})
        rec.add("test", "full", seed, {"gold": np.array([0, 1]), "pred": np.array([0, 0])})
    return rec


def right(first: int, count: int) -> np.ndarray:
    """``count`` examples right, from ``first`` on (wrapping round)."""
    out = np.zeros(N, dtype=bool)
    out[(first + np.arange(count)) % N] = True
    return out


def _stored(client, task, version, tmp_path) -> ExampleRecord:
    """The per-example record stored with a version."""
    v = client.get_model_version(task, version)
    return ExampleRecord.read(client.download_artifacts(v.run_id, EXAMPLES_ARTIFACT, str(tmp_path / f"dl-{version}")))


def test_decide_rules():
    assert decide(0.7, SPLIT, None, None) == (True, "no champion yet")
    assert decide(0.7, SPLIT, 0.6, SPLIT)[0] is True
    assert decide(0.6, SPLIT, 0.6, SPLIT) == (False, "equal score on the same validation split")
    assert decide(0.5, SPLIT, 0.6, SPLIT)[0] is False
    assert decide(0.9, "b" * 64, 0.6, SPLIT)[0] is False
    assert decide(0.9, "b" * 64, 0.6, SPLIT, force=True)[0] is True


def test_point_rule_moves_champion_only_on_a_better_score(store, tmp_path):
    """The point rule (``promote.rule: point``) behaves as before: any higher validation score moves it."""
    client, uri = store

    def aliases():
        model = client.get_registered_model("sentiment")
        return {a: str(v) for a, v in model.aliases.items()}

    first = promote_task(client, [_entry(tmp_path, "pretrained", 0.60, 1)], uri, rule=POINT)
    assert first.promoted
    assert first.reason == "no champion yet"
    assert aliases() == {CANDIDATE: "1", CHAMPION: "1"}
    v1 = client.get_model_version("sentiment", "1")
    assert v1.tags["family_member"] == "pretrained"
    assert v1.tags["seed"] == "1"
    assert v1.tags["validation_split_sha256"] == SPLIT and v1.tags["test_split_sha256"] == TEST_SPLIT
    assert float(v1.tags["validation_score"]) == 0.60 and float(v1.tags["test_score"]) == 0.60
    assert "score" not in v1.tags

    worse = promote_task(client, [_entry(tmp_path, "scratch", 0.55, 2)], uri, rule=POINT)
    assert not worse.promoted
    assert worse.reason.startswith("worse")
    assert aliases() == {CANDIDATE: "2", CHAMPION: "1"}

    equal = promote_task(client, [_entry(tmp_path, "distilled", 0.60, 3)], uri, rule=POINT)
    assert not equal.promoted
    assert equal.reason == "equal score on the same validation split"
    assert aliases() == {CANDIDATE: "3", CHAMPION: "1"}

    # the best of a family becomes the candidate; it beats the champion
    better = promote_task(client, [_entry(tmp_path, "minilm", 0.70, 4), _entry(tmp_path, "other", 0.65, 5)], uri, rule=POINT)
    assert better.promoted
    assert better.candidate_member == "minilm"
    assert better.champion_version == "1"
    assert aliases() == {CANDIDATE: "4", CHAMPION: "4"}

    # a higher score on other validation examples is not comparable
    moved = promote_task(client, [_entry(tmp_path, "newsplit", 0.95, 6, split="b" * 64)], uri, rule=POINT)
    assert not moved.promoted
    assert "validation split changed" in moved.reason
    assert aliases()[CHAMPION] == "4"

    # the same folder again is the same version, not a new one
    again = promote_task(client, [_entry(tmp_path, "minilm", 0.70, 4)], uri, rule=POINT)
    assert again.candidate_version == "4"
    assert not again.promoted
    assert len(client.search_model_versions("name='sentiment'")) == 6


def test_the_choice_is_made_on_validation_never_on_test(store, tmp_path):
    """A member that wins on test but loses on validation is neither the candidate nor the champion: the test
    score is recorded beside, never read to choose (choosing on test makes the registry's numbers optimistic)."""
    client, uri = store
    task = "chosen_on_validation"
    first = promote_task(client, [_entry(tmp_path, "base", 0.60, 1, test=0.60, task=task)], uri, rule=POINT)
    assert first.promoted
    lucky = _entry(tmp_path, "lucky_on_test", 0.58, 2, test=0.90, task=task)  # best on test, worse on validation
    steady = _entry(tmp_path, "steady", 0.66, 3, test=0.62, task=task)  # best on validation
    decision = promote_task(client, [lucky, steady], uri, rule=POINT)
    assert decision.candidate_member == "steady" and decision.candidate_score == 0.66
    assert decision.promoted and decision.reason == "better on the same validation split (+6.00 points)"
    versions = {v.tags["family_member"]: v for v in client.search_model_versions(f"name='{task}'")}
    assert float(versions["lucky_on_test"].tags["test_score"]) == 0.90  # recorded, not chosen
    model = client.get_registered_model(task)
    assert {a: versions_of for a, versions_of in model.aliases.items()} == {
        CANDIDATE: versions["steady"].version, CHAMPION: versions["steady"].version}
    # a test-only winner cannot take the champion's place either
    alone = promote_task(client, [_entry(tmp_path, "lucky_again", 0.64, 4, test=0.99, task=task)], uri, rule=POINT)
    assert not alone.promoted and alone.reason.startswith("worse on the same validation split")


def test_a_champion_chosen_on_test_is_not_compared(store, tmp_path):
    """A champion registered before validation scores were recorded (its ``score`` tag was a test mean) is not
    comparable: kept unless forced."""
    client, uri = store
    task = "chosen_on_test"
    promote_task(client, [_entry(tmp_path, "old", 0.5, 1, task=task)], uri)
    (old,) = client.search_model_versions(f"name='{task}'")
    client.delete_model_version_tag(task, old.version, "validation_score")
    client.set_model_version_tag(task, old.version, "score", "0.5")
    kept = promote_task(client, [_entry(tmp_path, "new", 0.9, 2, task=task)], uri)
    assert not kept.promoted and "no validation score" in kept.reason and "--force" in kept.reason
    forced = promote_task(client, [_entry(tmp_path, "new", 0.9, 2, task=task)], uri, force=True)
    assert forced.promoted


def test_qa_version_serves_through_pyfunc(store, tmp_path, recwarn):
    import mlflow.pyfunc

    client, uri = store
    folder = save_reader(tmp_path / "qa")
    decision = promote_task(client, [Entry("minilm", "qa", folder, 0, "f1", 0.3, SPLIT, 0.3, TEST_SPLIT)], uri)
    assert decision.promoted
    model = mlflow.pyfunc.load_model("models:/qa@champion")
    # predict's type hint is MLflow's input schema: no "Add type hints" / "Any type hint" warning on logging
    assert not [str(w.message) for w in recwarn if "type hint" in str(w.message).lower()]
    (column,) = model.metadata.get_input_schema().inputs
    assert column.type.to_dict() == {"type": "map", "values": {"type": "string"}}  # rows of question/context text
    context = "alice met bob in paris"
    (out,) = model.predict([{"question": "who met bob ?", "context": context}])
    assert out["answer"]
    assert context[out["start"]:out["end"]] == out["answer"]


def test_served_ner_version_tags_a_long_text_to_its_end(store, tmp_path):
    """The registered NER model serves what ``predict`` prints: entities with character offsets, a long text
    tagged whole (its entity in the last 200 characters of 10,000 found), a text without entities answered."""
    import mlflow.pyfunc

    client, uri = store
    folder = save_word_tagger(tmp_path / "ner", max_position_embeddings=64)
    decision = promote_task(client, [Entry("minilm", "ner", folder, 0, "f1", 0.5, SPLIT, 0.5, TEST_SPLIT)], uri)
    assert decision.promoted
    assert client.get_model_version("ner", decision.candidate_version).tags["flavour"] == "pyfunc"
    model = mlflow.pyfunc.load_model("models:/ner@champion")
    long_text = "the film was good and the plot was boring . " * 230 + "bob met alice ."
    start = long_text.rindex("alice")
    found, none = model.predict([long_text, "the film was good"])
    assert [(e["type"], e["start"], e["end"]) for e in found["entities"]] == [("PER", start, start + 5)]
    assert start > len(long_text) - 200
    assert none == {"entities": []}


def test_split_fingerprint_follows_the_scored_examples(tmp_path):
    from datasets import Dataset

    from bert_pipeline.mlops.registry import split_sha256

    Dataset.from_dict({"text": [f"t{i}" for i in range(10)], "label": [i % 2 for i in range(10)]}).save_to_disk(
        str(tmp_path / "test"))
    whole = split_sha256(tmp_path / "test")
    assert split_sha256(tmp_path / "test") == whole == split_sha256(tmp_path / "test", 10, seed=1)
    assert split_sha256(tmp_path / "test", 5, seed=1) != whole
    assert split_sha256(tmp_path / "test", 5, seed=1) != split_sha256(tmp_path / "test", 5, seed=2)
    Dataset.from_dict({"text": [f"t{i}" for i in range(10)], "label": [1] * 10}).save_to_disk(str(tmp_path / "t2"))
    assert split_sha256(tmp_path / "t2") != whole


CARD = "---\nlicense: apache-2.0\npipeline_tag: text-classification\n---\n\n# tiny card\n\nTrained on nothing real.\n"


def test_model_card_travels_with_the_version(store, tmp_path):
    """The folder's README.md (the model card) reaches the registry: the transformers flavour writes it as its
    model_card.md / model_card_data.yaml (no hub look-up by name), the pyfunc flavour copies the folder with it."""
    import mlflow
    import yaml

    client, uri = store
    cls = save_classifier(tmp_path / "cls", favour=None)
    (cls / "README.md").write_text(CARD, encoding="utf-8")
    qa = save_reader(tmp_path / "qa")
    (qa / "README.md").write_text(CARD, encoding="utf-8")
    for task, folder, flavour in (("cardcls", cls, "transformers"), ("cardqa", qa, "pyfunc")):
        decision = promote_task(client, [Entry("minilm", task, folder, 0, "accuracy", 0.5, SPLIT, 0.5, TEST_SPLIT)], uri)
        version = client.get_model_version(task, decision.candidate_version)
        assert version.tags["flavour"] == flavour
        local = Path(mlflow.artifacts.download_artifacts(version.source, dst_path=str(tmp_path / f"dl-{task}")))
        if flavour == "transformers":
            assert (local / "model_card.md").read_text(encoding="utf-8").strip() == "# tiny card\n\nTrained on nothing real."
            assert yaml.safe_load((local / "model_card_data.yaml").read_text())["pipeline_tag"] == "text-classification"
        else:
            (copied,) = local.rglob("README.md")
            assert copied.read_text(encoding="utf-8") == CARD


# ------------------------------------------------------------------------------------------ promotion on evidence
def test_an_insignificant_gain_is_kept_out_and_a_clear_one_promoted(store, tmp_path):
    """Superiority (the default): +1 point on 200 examples straddles 0 and keeps the champion (the point rule
    would move it); 90% against 50% correct moves it."""
    client, uri = store
    task = "evidence"
    champion = _entry(tmp_path, "pretrained", 0.60, 1, task=task, examples=record({1: right(0, 120)}))
    assert promote_task(client, [champion], uri).reason == "no champion yet"
    # 7 examples gained, 5 lost: +1 point
    slight = _entry(tmp_path, "distilled", 0.61, 2, task=task, examples=record({2: right(5, 122)}))
    kept = promote_task(client, [slight], uri)
    assert not kept.promoted and kept.interval.low < 0 < kept.interval.high
    assert kept.interval.point == pytest.approx(0.01)
    assert kept.line() == (f"{task}: champion stays v1 (pretrained); challenger v2 (distilled): validation accuracy "
                           f"+1.0 points [{100 * kept.interval.low:+.1f}, {100 * kept.interval.high:+.1f}], lower "
                           "bound not above 0.0 (superiority)")
    assert client.get_model_version(task, "2").tags["promotion_decision"] == kept.line()
    assert str(client.get_registered_model(task).aliases[CHAMPION]) == "1"
    # the same challenger under the point rule: any gain moves it (as before)
    pointed = promote_task(client, [slight], uri, rule=POINT)
    assert pointed.promoted and pointed.reason == "better on the same validation split (+1.00 points)"
    assert pointed.line().endswith("validation accuracy 0.6100 vs 0.6000, better on the same validation split "
                                   "(+1.00 points) (point)")

    task = "evidence_clear"
    promote_task(client, [_entry(tmp_path, "half", 0.50, 1, task=task, examples=record({1: right(0, 100)}))], uri)
    clear = promote_task(client, [_entry(tmp_path, "ninety", 0.90, 2, task=task, examples=record({2: right(50, 180)}))],
                         uri)
    assert clear.promoted and clear.interval.low > 0.3
    assert clear.line().startswith(f"{task}: champion moves to v2 (ninety) from v1 (half): validation accuracy "
                                   "+40.0 points [+")
    assert clear.line().endswith("], lower bound above 0.0 (superiority)")
    # a margin the gain's lower bound does not clear keeps it out
    task = "evidence_margin"
    promote_task(client, [_entry(tmp_path, "half_m", 0.50, 1, task=task, examples=record({1: right(0, 100)}))], uri)
    high_bar = promote_task(client, [_entry(tmp_path, "ninety_m", 0.90, 2, task=task,
                                            examples=record({2: right(50, 180)}))], uri,
                            rule=PromotionRule("superiority", margin=0.5, resamples=2000))
    assert not high_bar.promoted and high_bar.line().endswith("lower bound not above 50.0 (superiority)")


def test_non_inferiority_lets_a_smaller_model_within_the_margin_replace_the_champion(store, tmp_path):
    client, uri = store
    rule = PromotionRule("non_inferiority", margin=0.05)
    task = "noninf"
    promote_task(client, [_entry(tmp_path, "big", 0.80, 1, task=task, examples=record({1: right(0, 160)}))], uri)
    # a model of the same size within the margin is not smaller: it must be superior, and is not
    same = promote_task(client, [_entry(tmp_path, "same", 0.81, 2, task=task, examples=record({2: right(3, 162)}))],
                        uri, rule=rule)
    assert not same.promoted and same.statistic == "difference"
    assert "not smaller" in same.reason and same.line().endswith("so superiority: lower bound not above 0.0 "
                                                                  "(non_inferiority)")
    # a smaller model far below the champion: its share's lower bound is under 95%
    poor = promote_task(client, [_entry(tmp_path, "small_poor", 0.82, 3, task=task, num_hidden_layers=1,
                                        examples=record({3: right(0, 120)}))], uri, rule=rule)
    assert not poor.promoted and poor.statistic == "share" and poor.interval.high < 0.95
    assert "lower bound below 95.0% (non_inferiority)" in poor.line()
    # a smaller model within the margin (2 examples gained, 3 lost): replaces the champion
    small = _entry(tmp_path, "small", 0.83, 4, task=task, num_hidden_layers=1, examples=record({4: right(3, 159)}))
    moved = promote_task(client, [small], uri, rule=rule)
    versions = {v.tags["family_member"]: v for v in client.search_model_versions(f"name='{task}'")}
    assert int(versions["small"].tags["parameters"]) < int(versions["big"].tags["parameters"])
    assert moved.promoted and moved.statistic == "share"
    assert moved.interval.point == pytest.approx(159 / 160) and moved.interval.low >= 0.95
    assert "validation accuracy share 99.4% [" in moved.line()
    assert moved.line().endswith("parameters, lower bound at least 95.0% (non_inferiority)")


def test_the_champions_stored_record_pairs_with_its_saved_seed(store, tmp_path):
    """The champion's version carries its saved seed's validation run (seed 2 here: 50% right, where its other seed
    got 90%), and the challenger is paired with that: +25 points moves it."""
    client, uri = store
    task = "paired"
    champion = _entry(tmp_path, "champ", 0.50, 2, task=task, examples=record({1: right(0, 180), 2: right(0, 100)}))
    promote_task(client, [champion], uri)
    stored = _stored(client, task, "1", tmp_path)
    assert stored.seeds("validation") == [2] and set(stored.splits) == {"validation"} and not stored.seeds("test")
    assert int((stored.runs[("validation", "full", 2)]["gold"] == stored.runs[("validation", "full", 2)]["pred"]).sum()) == 100
    assert RECORD_TAG in client.get_model_version(task, "1").tags
    challenger = _entry(tmp_path, "chal", 0.75, 5, task=task, examples=record({5: right(0, 150)}))
    decision = promote_task(client, [challenger], uri)
    assert decision.promoted and decision.paired == "stored"
    assert decision.interval.point == pytest.approx(0.25)
    assert _stored(client, task, "2", tmp_path).seeds("validation") == [5]
    # a record of other examples under the same split tag is never compared unpaired
    shifted = [f"validation:{i + 1}" for i in range(N)]
    other = _entry(tmp_path, "other", 0.95, 6, task=task, examples=record({6: right(0, 190)}, ids=shifted))
    refused = promote_task(client, [other], uri)
    assert not refused.promoted and "scored different validation examples" in refused.reason
    assert refused.line().endswith("not paired (use --force to promote anyway)")


def _task_dir(root):
    """A classification task folder as prepare_tasks writes it: 200 validation examples, half of each class."""
    import json

    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    feats = Features({"text": Value("string"), "label": ClassLabel(names=["negative", "positive"])})
    words = ["good film", "bad plot", "great actors", "boring story"]
    split = Dataset.from_dict({"text": [words[i % 4] for i in range(N)], "label": GOLD.tolist()}, features=feats)
    DatasetDict({"train": split, "validation": split, "test": split}).save_to_disk(str(root))
    (root / "task.json").write_text(json.dumps({"kind": "classification", "main_metric": "accuracy",
                                                "label_names": ["negative", "positive"]}))
    return root


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_champion_without_a_record_is_rescored(store, tmp_path, pooling):
    """A champion registered before records were (no artifact) is re-scored from its registered files (either
    flavour) on the challenger's validation examples, paired, and the record is then stored with it."""
    import json

    from bert_pipeline.mlops.promotion import rescore_validation

    client, uri = store
    task = f"rescored_{pooling}"
    task_dir = _task_dir(tmp_path / "task")
    folder = save_classifier(tmp_path / "always_positive", favour=1)  # predicts "positive": 50% right
    if pooling == "mean":  # a mean-pooling head: registered as a pyfunc model
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "classifier_pooling": "mean"}))
    old = Entry("old", task, folder, 3, "accuracy", 0.5, SPLIT, 0.5, TEST_SPLIT)  # no per-example record
    promote_task(client, [old], uri)
    assert RECORD_TAG not in client.get_model_version(task, "1").tags
    calls = []

    def rescore(model_dir, seed):
        calls.append(seed)
        return rescore_validation(model_dir, task_dir, {"max_length": 16, "max_validation_examples": None}, 0, seed)

    challenger = _entry(tmp_path, f"better_{pooling}", 0.9, 4, task=task, examples=record({4: right(0, 180)}))
    decision = promote_task(client, [challenger], uri, rescore=rescore)
    assert calls == [3]  # filed under the champion's own seed
    assert decision.promoted and decision.paired == "re-scored"
    assert decision.interval.point == pytest.approx(0.4)
    assert decision.line().endswith("lower bound above 0.0 (superiority; champion re-scored)")
    rescored = _stored(client, task, "1", tmp_path)  # stored with the old version for the next challenger
    assert rescored.seeds("validation") == [3]
    assert (rescored.runs[("validation", "full", 3)]["pred"] == 1).all()


def test_a_champion_that_cannot_be_rescored_is_kept_and_never_compared_unpaired(store, tmp_path):
    import shutil
    from urllib.parse import urlparse

    client, uri = store
    task = "gone"
    promote_task(client, [_entry(tmp_path, "old", 0.5, 1, task=task)], uri)  # no record
    # without a way to re-score
    challenger = _entry(tmp_path, "new", 0.9, 2, task=task, examples=record({2: right(0, 180)}))
    kept = promote_task(client, [challenger], uri)
    assert not kept.promoted and kept.interval is None
    assert kept.line() == (f"{task}: champion stays v1 (old); challenger v2 (new): champion v1: no per-example "
                           "validation record stored with it and no way to re-score it given; never compared unpaired "
                           "(use --force to promote anyway)")
    # the champion's model files gone: re-scoring fails, and the line says why

    def rescore(model_dir, seed):
        raise AssertionError("never reached: the files are gone")

    source = client.get_model_version(task, "1").source
    location = client.get_logged_model(source.removeprefix("models:/")).artifact_location
    shutil.rmtree(urlparse(location).path)
    gone = promote_task(client, [challenger], uri, rescore=rescore)
    assert not gone.promoted
    assert "champion v1: no per-example validation record stored with it, and re-scoring its registered model " \
           "failed (" in gone.reason and gone.reason.endswith("never compared unpaired (use --force to promote anyway)")
    # a challenger without a record is not compared either
    bare = promote_task(client, [_entry(tmp_path, "bare", 0.95, 3, task=task)], uri, rescore=rescore)
    assert not bare.promoted and "challenger v3 has no per-example validation record" in bare.reason
    forced = promote_task(client, [challenger], uri, rescore=rescore, force=True)
    assert forced.promoted and forced.reason.startswith("forced: champion v1: ")


def test_a_record_without_the_saved_seed_is_refused_before_registering(store, tmp_path):
    from bert_pipeline.errors import PipelineError

    client, uri = store
    entry = _entry(tmp_path, "wrong_seed", 0.5, 9, task="refused", examples=record({1: right(0, 100)}))
    with pytest.raises(PipelineError, match=r"^wrong_seed-refused: no validation run of the saved seed 9 \(seeds 1\)$"):
        promote_task(client, [entry], uri)
    assert not client.search_model_versions("name='refused'")
