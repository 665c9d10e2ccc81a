"""Sentence embeddings and headline-to-article retrieval (bert_pipeline.evaluation.retrieval,
bert_pipeline.train.contrastive, bert_pipeline.report.retrieval, stages.retrieval)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from bert_pipeline.evaluation.retrieval import embed, mean_pool, retrieval_metrics
from bert_pipeline.model.configs import save_model
from bert_pipeline.report.retrieval import retrieval_section
from bert_pipeline.train.contrastive import contrastive_finetune
from bert_pipeline.train.runtime import make_runtime
from tests.conftest import run_stage, write_params
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


def test_section_labels_the_reference():
    scores = {"recall_at_1": 0.5, "recall_at_10": 0.9, "mrr": 0.61}
    record = {"test_articles": 97, "train_pairs": 512,
              "members": {"pretrained": {"zero_shot": scores, "fine_tuned": scores}, "minilm": {
                  "zero_shot": {"recall_at_1": 0.876, "recall_at_10": 0.969, "mrr": 0.905}, "fine_tuned": scores}}}
    text = retrieval_section(record, "metrics/retrieval.json")
    assert "## Sentence embeddings: retrieval" in text and "over 97 test articles" in text
    assert "| minilm (reference) | 87.6 | 96.9 | 90.5 | 50.0 | 90.0 | 61.0 |" in text
    assert "| pretrained | 50.0 |" in text
    assert retrieval_section(None, "x") == ""
    # rows follow the family table's order (the metrics file's keys are sorted), the rest alphabetically
    record["members"] = {name: record["members"]["pretrained"] for name in ("distilled", "extra", "minilm", "pretrained")}
    rows = [line.split(" | ")[0] for line in retrieval_section(record, "x", order=["pretrained", "distilled",
                                                                                   "minilm"]).splitlines()
            if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| pretrained", "| distilled", "| minilm (reference)", "| extra"]


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


def test_stage_scores_every_member_on_the_test_split(in_tmp, mlflow_in_tmp, capsys):
    from stages import retrieval

    model, tok = _encoder()
    for folder in ("models/pretrained", "models/distilled"):
        save_model(model, in_tmp / folder, tok)
    _save_pairs(in_tmp / "data/tasks/headline_match")
    write_params(in_tmp, retrieval={"members": ["pretrained", "scratch"], "test_articles": 6,
                                           "train_pairs": 12, "batch_size": 4, "max_length": 24})
    code, err = run_stage(retrieval.main, capsys)
    assert code == 0, err
    record = json.loads((in_tmp / "metrics/retrieval.json").read_text())
    assert list(record["members"]) == ["pretrained", "scratch"] and record["test_articles"] <= 6
    for scores in record["members"].values():
        for when in ("zero_shot", "fine_tuned"):
            assert set(scores[when]) == {"recall_at_1", "recall_at_10", "mrr"}
            assert all(0.0 <= v <= 1.0 for v in scores[when].values())
    headline = json.loads((in_tmp / "metrics/headline/retrieval.json").read_text())["retrieval"]
    assert headline == {f"{m}_recall_at_1": s["fine_tuned"]["recall_at_1"] for m, s in record["members"].items()}


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
