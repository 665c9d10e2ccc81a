"""Champion promotion in a temporary sqlite MLflow store: better on validation moves it, worse or equal does not,
and the test score never chooses."""

from __future__ import annotations

from pathlib import Path

import pytest

from bert_pipeline.mlops.registry import CANDIDATE, CHAMPION, Entry, decide, promote_task
from tests.tiny_models import save_classifier, save_reader, save_word_tagger

SPLIT = "a" * 64
TEST_SPLIT = "t" * 64


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


def _entry(tmp_path, name, score, seed, split=SPLIT, member=None, test=None, task="sentiment"):
    """``score``: the validation mean; ``test``: the test mean (default the same)."""
    folder = save_classifier(tmp_path / name, favour=None, seed=seed)
    return Entry(member or name, task, folder, seed, "accuracy", score, split, score if test is None else test,
                 TEST_SPLIT, f"metrics/finetune/{name}.json")


def test_decide_rules():
    assert decide(0.7, SPLIT, None, None) == (True, "no champion yet")
    assert decide(0.7, SPLIT, 0.6, SPLIT)[0] is True
    assert decide(0.6, SPLIT, 0.6, SPLIT) == (False, "equal score on the same validation split")
    assert decide(0.5, SPLIT, 0.6, SPLIT)[0] is False
    assert decide(0.9, "b" * 64, 0.6, SPLIT)[0] is False
    assert decide(0.9, "b" * 64, 0.6, SPLIT, force=True)[0] is True


def test_champion_moves_only_on_a_better_score(store, tmp_path):
    client, uri = store

    def aliases():
        model = client.get_registered_model("sentiment")
        return {a: str(v) for a, v in model.aliases.items()}

    first = promote_task(client, [_entry(tmp_path, "pretrained", 0.60, 1)], uri)
    assert first.promoted
    assert first.reason == "no champion yet"
    assert aliases() == {CANDIDATE: "1", CHAMPION: "1"}
    v1 = client.get_model_version("sentiment", "1")
    assert v1.tags["family_member"] == "pretrained"
    assert v1.tags["seed"] == "1"
    assert v1.tags["validation_split_sha256"] == SPLIT and v1.tags["test_split_sha256"] == TEST_SPLIT
    assert float(v1.tags["validation_score"]) == 0.60 and float(v1.tags["test_score"]) == 0.60
    assert "score" not in v1.tags

    worse = promote_task(client, [_entry(tmp_path, "scratch", 0.55, 2)], uri)
    assert not worse.promoted
    assert worse.reason.startswith("worse")
    assert aliases() == {CANDIDATE: "2", CHAMPION: "1"}

    equal = promote_task(client, [_entry(tmp_path, "distilled", 0.60, 3)], uri)
    assert not equal.promoted
    assert equal.reason == "equal score on the same validation split"
    assert aliases() == {CANDIDATE: "3", CHAMPION: "1"}

    # the best of a family becomes the candidate; it beats the champion
    better = promote_task(client, [_entry(tmp_path, "minilm", 0.70, 4), _entry(tmp_path, "other", 0.65, 5)], uri)
    assert better.promoted
    assert better.candidate_member == "minilm"
    assert better.champion_version == "1"
    assert aliases() == {CANDIDATE: "4", CHAMPION: "4"}

    # a higher score on other validation examples is not comparable
    moved = promote_task(client, [_entry(tmp_path, "newsplit", 0.95, 6, split="b" * 64)], uri)
    assert not moved.promoted
    assert "validation split changed" in moved.reason
    assert aliases()[CHAMPION] == "4"

    # the same folder again is the same version, not a new one
    again = promote_task(client, [_entry(tmp_path, "minilm", 0.70, 4)], uri)
    assert again.candidate_version == "4"
    assert not again.promoted
    assert len(client.search_model_versions("name='sentiment'")) == 6


def test_the_choice_is_made_on_validation_never_on_test(store, tmp_path):
    """A member that wins on test but loses on validation is neither the candidate nor the champion: the test
    score is recorded beside, never read to choose (choosing on test makes the registry's numbers optimistic)."""
    client, uri = store
    task = "chosen_on_validation"
    first = promote_task(client, [_entry(tmp_path, "base", 0.60, 1, test=0.60, task=task)], uri)
    assert first.promoted
    lucky = _entry(tmp_path, "lucky_on_test", 0.58, 2, test=0.90, task=task)  # best on test, worse on validation
    steady = _entry(tmp_path, "steady", 0.66, 3, test=0.62, task=task)  # best on validation
    decision = promote_task(client, [lucky, steady], uri)
    assert decision.candidate_member == "steady" and decision.candidate_score == 0.66
    assert decision.promoted and decision.reason == "better on the same validation split (+6.00 points)"
    versions = {v.tags["family_member"]: v for v in client.search_model_versions(f"name='{task}'")}
    assert float(versions["lucky_on_test"].tags["test_score"]) == 0.90  # recorded, not chosen
    model = client.get_registered_model(task)
    assert {a: versions_of for a, versions_of in model.aliases.items()} == {
        CANDIDATE: versions["steady"].version, CHAMPION: versions["steady"].version}
    # a test-only winner cannot take the champion's place either
    alone = promote_task(client, [_entry(tmp_path, "lucky_again", 0.64, 4, test=0.99, task=task)], uri)
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
