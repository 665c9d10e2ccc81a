"""Sentence embeddings and headline-to-article retrieval (bert_pipeline.evaluation.retrieval,
bert_pipeline.train.contrastive, bert_pipeline.report.retrieval, stages.retrieval): the scores, their per-query
record and its intervals."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from bert_pipeline import tasks
from bert_pipeline.evaluation.examples import ExampleRecord
from bert_pipeline.evaluation.intervals import Bootstrap, statistics_of
from bert_pipeline.evaluation.retrieval import (
    METRICS,
    STATISTICS,
    embed,
    gold_ranks,
    interval_scores,
    mean_pool,
    rank_metrics,
    retrieval_metrics,
    retrieval_record,
)
from bert_pipeline.model.configs import save_model
from bert_pipeline.report.retrieval import retrieval_section
from bert_pipeline.train.contrastive import contrastive_finetune
from bert_pipeline.train.runtime import make_runtime
from tests.conftest import REPO, run_stage, write_params
from tests.tiny_models import bert_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

TOPICS = {"storm": "rain wind flood", "vote": "council ballot mayor", "match": "goal team score",
          "market": "price stock trade", "school": "pupil teacher exam", "fire": "smoke flame alarm"}


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[5.0, 7.0], [0.0, 0.0], [9.0, 9.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert mean_pool(hidden, mask).tolist() == [[2.0, 3.0], [5.0, 7.0]]
    assert mean_pool(hidden, torch.zeros(2, 3, dtype=torch.long)).tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_retrieval_metrics_on_a_hand_made_ranking():
    # with one-hot queries, score[i, j] = documents[j][i]; rows of `scores` are the queries
    scores = np.array([[0.9, 0.1, 0.2],    # query 0: its own document first (rank 1)
                       [0.7, 0.5, 0.1],    # query 1: document 0 ahead (rank 2)
                       [0.3, 0.4, 0.3]],   # query 2: document 1 ahead, document 0 tied and of lower index (rank 3)
                      dtype=np.float32)
    out = retrieval_metrics(np.eye(3, dtype=np.float32), scores.T.copy())
    assert out == {"recall_at_1": round(1 / 3, 6), "recall_at_10": 1.0, "mrr": round((1 + 1 / 2 + 1 / 3) / 3, 6)}
    many = np.eye(12, dtype=np.float32)
    many[:, 0] = 2.0  # document 0 outranks every other query's own document: those rank 2
    assert retrieval_metrics(np.eye(12, dtype=np.float32), many.T.copy())["recall_at_1"] == round(1 / 12, 6)
    with pytest.raises(ValueError, match="as many queries as documents"):
        retrieval_metrics(np.eye(3), np.eye(3)[:2])


def test_summed_statistics_give_the_published_scores():
    """R@k and MRR are means of per-query statistics: the record's summed statistics (what each bootstrap draw sums)
    give the published scores, for ranks from embeddings and for ranks drawn at random."""
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(40, 8)).astype(np.float32)
    documents = queries + rng.normal(scale=1.2, size=(40, 8)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    documents /= np.linalg.norm(documents, axis=1, keepdims=True)
    ranks = gold_ranks(queries, documents)
    assert ranks.dtype == np.int64 and ranks.min() >= 1 and 0 < np.mean(ranks == 1) < 1  # neither all nor none
    published = retrieval_metrics(queries, documents)
    assert published == rank_metrics(ranks) == {
        "recall_at_1": round(float(np.mean(ranks <= 1)), 6), "recall_at_10": round(float(np.mean(ranks <= 10)), 6),
        "mrr": round(float(np.mean(1.0 / ranks)), 6)}
    for draw in (ranks, rng.integers(1, 60, size=500)):
        sums = STATISTICS.example_sums(STATISTICS.example_columns(None, draw))
        got = STATISTICS.metrics_from_sums({k: np.asarray(v.sum()) for k, v in sums.items()},
                                           np.asarray(float(len(draw))))
        assert float(got["recall_at_1"]) == pytest.approx(np.mean(draw == 1), abs=1e-15)
        assert float(got["recall_at_10"]) == pytest.approx(np.mean(draw <= 10), abs=1e-15)
        assert float(got["mrr"]) == pytest.approx(np.mean(1.0 / draw), abs=1e-15)
    # the bootstrap finds the adapter by the record's kind, which no task kind shadows
    assert statistics_of("retrieval") is STATISTICS and "retrieval" not in tasks.KINDS
    assert STATISTICS.interval_metrics == METRICS and STATISTICS.main_metric == "recall_at_1"
    record = retrieval_record([f"test:{i}" for i in range(40)], [f"doc{i // 2}" for i in range(40)],
                              [[str(i), str(i)] for i in range(40)], {"zero_shot": ranks}, seed=42)
    point = {m: e.point for m, e in Bootstrap(resamples=200).estimates(record, "test", "zero_shot").items()}
    assert {m: round(v, 6) for m, v in point.items()} == published
    with pytest.raises(ValueError, match="ranks >= 1"):
        STATISTICS.example_columns(None, [1, 0, 3])


def test_record_round_trips_byte_identically(tmp_path):
    ranks = {"zero_shot": np.array([3, 1, 12, 2, 1]), "fine_tuned": np.array([1, 1, 4, 1, 2])}
    ids, clusters = [f"test:{2 * i}" for i in range(5)], ["a", "a", "b", "c", "c"]
    refs = [[f"headline {i}", f"passage {i}"] for i in range(5)]
    record = retrieval_record(ids, clusters, refs, ranks, seed=42)
    data = record.to_bytes()
    assert retrieval_record(ids, clusters, refs, ranks, seed=42).to_bytes() == data  # the same content, the same bytes
    record.write(tmp_path / "member.arrow")
    back = ExampleRecord.read(tmp_path / "member.arrow")
    assert (tmp_path / "member.arrow").read_bytes() == data and back.to_bytes() == data
    assert (back.kind, back.main_metric, back.label_names) == ("retrieval", "recall_at_1", None)
    assert back.splits["test"] == record.splits["test"] and back.seeds("test", "fine_tuned") == [42]
    assert back.runs[("test", "zero_shot", 42)]["rank"].tolist() == [3, 1, 12, 2, 1]
    # other texts are other pairs: a different split hash, so the two cannot be paired
    assert retrieval_record(ids, clusters, [[h, p + "!"] for h, p in refs], ranks, 42).splits["test"].hash != \
        record.splits["test"].hash


def test_intervals_contain_the_point_and_a_member_differs_from_itself_by_zero():
    rng = np.random.default_rng(3)
    n = 60
    ids, clusters, refs = [f"test:{i}" for i in range(n)], [f"doc{i}" for i in range(n)], [[i, i] for i in range(n)]
    weak = {"zero_shot": rng.integers(1, 30, n), "fine_tuned": rng.integers(1, 8, n)}
    strong = {"zero_shot": np.maximum(weak["zero_shot"] - 5, 1), "fine_tuned": np.maximum(weak["fine_tuned"] - 2, 1)}
    a, b = (retrieval_record(ids, clusters, refs, r, seed=42) for r in (weak, strong))
    boot = Bootstrap(resamples=2000, seed=0)
    for when in ("zero_shot", "fine_tuned"):
        got = interval_scores(boot, a, when)
        assert set(got) == {f"{m}{s}" for m in METRICS for s in ("", "_ci_low", "_ci_high")}
        assert got == {**rank_metrics(weak[when]), **{k: v for k, v in got.items() if "_ci_" in k}}
        for m in METRICS:
            assert got[f"{m}_ci_low"] <= got[m] <= got[f"{m}_ci_high"]
            assert got[f"{m}_ci_high"] - got[f"{m}_ci_low"] < 0.5 and got[m] == round(got[m], 6)
        assert set(interval_scores(boot, a, when, against=a).values()) == {0.0}  # paired: exactly 0 on every draw
        diff = interval_scores(boot, b, when, against=a)
        for m in METRICS:
            assert diff[m] == pytest.approx(rank_metrics(strong[when])[m] - rank_metrics(weak[when])[m], abs=2e-6)
            assert 0 < diff[f"{m}_ci_low"] <= diff[m] <= diff[f"{m}_ci_high"] or m == "recall_at_10"
        assert diff["mrr_ci_low"] > 0  # every query ranks at least as high: the difference is told from noise


def _pairs(n, seed):
    rng = np.random.default_rng(seed)
    names = list(TOPICS)
    heads, docs = [], []
    for i in range(n):
        topic = names[i % len(names)]
        words = TOPICS[topic].split()
        heads.append(f"{topic} {rng.choice(words)}")
        docs.append(" ".join(rng.choice(words, size=6)))
    return heads, docs


def _encoder(seed=0):
    words = sorted({w for t, ws in TOPICS.items() for w in [t, *ws.split()]})
    tok = bert_tokenizer(words)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    return BertModel(cfg), tok


def test_contrastive_finetuning_lowers_the_loss_and_raises_recall():
    model, tok = _encoder()
    heads, docs = _pairs(48, seed=1)
    test_q, test_d = [f"{t}" for t in TOPICS], [" ".join(TOPICS[t].split() * 2) for t in TOPICS]
    cpu = make_runtime("fp32", cpu=True)
    before = retrieval_metrics(embed(model, tok, test_q, cpu), embed(model, tok, test_d, cpu))
    losses = contrastive_finetune(model, tok, heads, docs, cpu, epochs=8, batch_size=6, learning_rate=3e-3, scale=20.0,
                                  max_length=16, seed=0)
    after = retrieval_metrics(embed(model, tok, test_q, cpu), embed(model, tok, test_d, cpu))
    assert np.mean(losses[-6:]) < 0.5 * np.mean(losses[:6])
    assert after["recall_at_1"] > before["recall_at_1"] and after["recall_at_1"] >= 5 / 6
    again, tok2 = _encoder()
    assert contrastive_finetune(again, tok2, heads, docs, cpu, epochs=8, batch_size=6, learning_rate=3e-3, scale=20.0,
                                max_length=16, seed=0) == losses  # seeded: the same steps
    emb = embed(model, tok, test_q, cpu)
    assert emb.dtype == np.float32 and emb.shape == (6, 32)
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)


def test_section_labels_the_reference_and_prints_intervals():
    scores = {"recall_at_1": 0.5, "recall_at_10": 0.9, "mrr": 0.61}
    record = {"test_articles": 97, "train_pairs": 512, "reference": "minilm",
              "members": {"pretrained": {"zero_shot": scores, "fine_tuned": scores}, "minilm": {
                  "zero_shot": {"recall_at_1": 0.876, "recall_at_10": 0.969, "mrr": 0.905}, "fine_tuned": scores}}}
    text = retrieval_section(record, "metrics/retrieval.json")
    assert "## Sentence embeddings: retrieval" in text and "over 97 test articles" in text
    assert "| minilm (reference) | 87.6 | 96.9 | 90.5 | 50.0 | 90.0 | 61.0 |" in text  # a record without intervals
    assert "| pretrained | 50.0 |" in text and "Difference from" not in text
    assert retrieval_section(None, "x") == ""
    # with intervals: each score and each difference from the reference with its bounds
    ci = {"recall_at_1": 0.62, "recall_at_1_ci_low": 0.551, "recall_at_1_ci_high": 0.684, "recall_at_10": 0.9,
          "recall_at_10_ci_low": 0.85, "recall_at_10_ci_high": 0.95, "mrr": 0.7, "mrr_ci_low": 0.65, "mrr_ci_high": 0.75}
    diff = {"recall_at_1": -0.256, "recall_at_1_ci_low": -0.33, "recall_at_1_ci_high": -0.18, "recall_at_10": 0.0,
            "recall_at_10_ci_low": -0.02, "recall_at_10_ci_high": 0.031, "mrr": -0.2, "mrr_ci_low": -0.25,
            "mrr_ci_high": -0.15}
    record["intervals"] = {"resamples": 10000, "confidence": 0.95, "seed": 0, "method": "percentile", "clusters": 97}
    record["members"] = {"minilm": {"zero_shot": ci, "fine_tuned": ci},
                         "pretrained": {"zero_shot": ci, "fine_tuned": ci,
                                        "vs_reference": {"zero_shot": diff, "fine_tuned": diff}}}
    text = retrieval_section(record, "x")
    assert "| minilm (reference) | 62.0 [55.1, 68.4] | 90.0 [85.0, 95.0] | 70.0 [65.0, 75.0] | 62.0 [55.1, 68.4] |" in text
    assert "95% percentile interval of a paired bootstrap over the 97 articles (10,000 draws" in text
    assert "Difference from `minilm`" in text
    assert "| pretrained | -25.6 [-33.0, -18.0] | +0.0 [-2.0, +3.1] | -20.0 [-25.0, -15.0] | -25.6 [-33.0, -18.0] |" in text
    # rows follow the family table's order (the metrics file's keys are sorted), the rest alphabetically
    record["members"] = {name: record["members"]["pretrained"] for name in ("distilled", "extra", "minilm", "pretrained")}
    rows = [line.split(" | ")[0] for line in retrieval_section(record, "x", order=["pretrained", "distilled",
                                                                                   "minilm"]).splitlines()
            if line.startswith("| ") and "---" not in line]
    assert rows == ["| model", "| pretrained", "| distilled", "| minilm (reference)", "| extra",
                    "| model", "| pretrained", "| distilled", "| extra"]


def _save_pairs(folder):
    from datasets import Dataset, DatasetDict

    from bert_pipeline.data import task_builders, task_features

    features = task_features.pair_features(task_builders.HEADLINE_LABELS)
    splits = {}
    for split, seed in (("train", 1), ("validation", 2), ("test", 3)):
        heads, docs = _pairs(12, seed)
        rows = [{"text": h, "text_pair": d, "label": 1} for h, d in zip(heads, docs, strict=True)]
        rows += [{"text": h, "text_pair": docs[(i + 1) % len(docs)], "label": 0} for i, h in enumerate(heads)]
        splits[split] = Dataset.from_list(rows, features=features)
    DatasetDict(splits).save_to_disk(str(folder))


def test_stage_scores_every_member_with_intervals_and_writes_its_ranks(in_tmp, mlflow_in_tmp, capsys, monkeypatch):
    from stages import retrieval
    from tests.params_declared import declared_params, mismatches, recorded_reads

    model, tok = _encoder()
    for folder in ("models/pretrained", "models/distilled"):
        save_model(model, in_tmp / folder, tok)
    _save_pairs(in_tmp / "data/tasks/headline_match")
    write_params(in_tmp, retrieval={"members": ["pretrained", "scratch"], "test_articles": 6,
                                           "train_pairs": 12, "batch_size": 4, "max_length": 24})
    with recorded_reads(monkeypatch) as reads:
        code, err = run_stage(retrieval.main, capsys)
    assert code == 0, err
    # the params it reads are the params dvc.yaml declares (evaluate.intervals' draw settings, not .primary)
    assert {r for r in reads if r.startswith("evaluate.")} == {f"evaluate.intervals.{k}" for k in
                                                               ("resamples", "confidence", "seed", "method")}
    assert mismatches(declared_params(REPO)["python -m stages.retrieval"][1], reads) == ([], [])
    record = json.loads((in_tmp / "metrics/retrieval.json").read_text())
    assert list(record["members"]) == ["pretrained", "scratch"] and record["test_articles"] == 6
    assert record["reference"] == "pretrained"  # the first member
    assert record["intervals"] == {"resamples": 10000, "confidence": 0.95, "seed": 0, "method": "percentile",
                                   "clusters": 6}
    keys = {f"{m}{s}" for m in METRICS for s in ("", "_ci_low", "_ci_high")}
    examples = in_tmp / "metrics/examples-retrieval"
    assert sorted(p.name for p in examples.iterdir()) == ["pretrained.arrow", "scratch.arrow"]
    for name, scores in record["members"].items():
        ranks = ExampleRecord.read(examples / f"{name}.arrow")
        assert ranks.kind == "retrieval" and ranks.splits["test"].ids == [f"test:{i}" for i in range(6)]
        for when in ("zero_shot", "fine_tuned"):
            assert set(scores[when]) == keys
            assert all(0.0 <= v <= 1.0 for v in scores[when].values())
            # the published scores are the record's ranks summed, each inside its interval
            assert {m: scores[when][m] for m in METRICS} == rank_metrics(ranks.runs[("test", when, 42)]["rank"])
            assert all(scores[when][f"{m}_ci_low"] <= scores[when][m] <= scores[when][f"{m}_ci_high"] for m in METRICS)
    vs = record["members"]["scratch"]["vs_reference"]
    assert "vs_reference" not in record["members"]["pretrained"]
    for when in ("zero_shot", "fine_tuned"):
        assert set(vs[when]) == keys
        for m in METRICS:
            want = record["members"]["scratch"][when][m] - record["members"]["pretrained"][when][m]
            assert vs[when][m] == pytest.approx(want, abs=2e-6)
            assert vs[when][f"{m}_ci_low"] <= vs[when][m] <= vs[when][f"{m}_ci_high"]
    headline = json.loads((in_tmp / "metrics/headline/retrieval.json").read_text())["retrieval"]
    assert headline == {f"{m}_recall_at_1": s["fine_tuned"]["recall_at_1"] for m, s in record["members"].items()}
    # a rerun writes the same bytes (records and metrics), and the folder holds nothing else
    before = {p.name: p.read_bytes() for p in examples.iterdir()}
    metrics = (in_tmp / "metrics/retrieval.json").read_bytes()
    code, err = run_stage(retrieval.main, capsys)
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in examples.iterdir()} == before
    assert (in_tmp / "metrics/retrieval.json").read_bytes() == metrics
    assert sorted(p.name for p in (in_tmp / "metrics").iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("key", ["members", "learning_rates"])
def test_stage_refuses_a_member_that_is_not_a_fine_tuning_model(in_tmp, mlflow_in_tmp, capsys, key):
    from stages import retrieval

    _save_pairs(in_tmp / "data/tasks/headline_match")
    value = ["pretrained", "tinybert"] if key == "members" else {"tinybert": 1e-4}
    write_params(in_tmp, retrieval={key: value})
    code, err = run_stage(retrieval.main, capsys)
    assert code != 0
    assert f"retrieval.{key}: 'tinybert' is not a key of finetune.models" in err
    assert not (in_tmp / "metrics/retrieval.json").exists()
    assert not (in_tmp / "metrics/examples-retrieval").exists()
