"""Per-example statistics and the paired bootstrap (:mod:`bert_pipeline.evaluation.examples`,
:mod:`bert_pipeline.evaluation.intervals`): summed statistics give each kind's metric, bounds equal scipy's, the
cluster bootstrap covers where the example bootstrap does not, identical models differ by exactly 0."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bert_pipeline import tasks
from bert_pipeline.evaluation.examples import (
    ExampleRecord,
    ExamplesError,
    SplitInfo,
    check_paired,
    split_hash,
)
from bert_pipeline.evaluation.intervals import Bootstrap, ClusterDraws


def whole_split_metrics(kind_name: str, refs, preds, label_names):
    """The kind's metrics recomputed from the per-example record's summed statistics."""
    kind = tasks.get(kind_name)
    sums = kind.example_sums(kind.example_columns(refs, preds, label_names), label_names)
    return kind.metrics_from_sums({k: np.asarray(v.sum()) for k, v in sums.items()}, np.asarray(float(len(refs))),
                                  label_names)


def random_bio(rng, n_sentences: int, types: list[str]) -> list[list[str]]:
    tags = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
    return [[tags[int(i)] for i in rng.integers(0, len(tags), size=int(rng.integers(1, 12)))]
            for _ in range(n_sentences)]


@pytest.mark.parametrize("draw", range(3))
def test_summed_statistics_reproduce_every_kinds_metric(draw):
    rng = np.random.default_rng(draw)
    # classification (3 classes, one never predicted), pair classification
    names = ["a", "b", "c"]
    gold = rng.integers(0, 3, 200).tolist()
    pred = [g if rng.random() < 0.6 else int(rng.integers(0, 2)) for g in gold]
    for kind in ("classification", "pair_classification"):
        want = tasks.get(kind).metrics(gold, pred, names)
        got = whole_split_metrics(kind, gold, pred, names)
        assert set(tasks.get(kind).interval_metrics) <= set(want)
        for m in tasks.get(kind).interval_metrics:
            assert float(got[m]) == pytest.approx(want[m], abs=1e-12), (kind, m)
    # regression: Pearson (scipy) and MSE
    y = rng.normal(3.0, 1.0, 150)
    p = 0.7 * y + rng.normal(0, 0.5, 150) + 1e3  # a large offset: the centred moments keep precision
    want = tasks.get("regression").metrics(y.tolist(), p.tolist())
    got = whole_split_metrics("regression", y.tolist(), p.tolist(), None)
    assert float(got["pearson"]) == pytest.approx(want["pearson"], abs=1e-10)
    assert float(got["mse"]) == pytest.approx(want["mse"], rel=1e-12)
    # NER against seqeval, malformed I- tags included
    types = ["PER", "ORG", "LOC"]
    label_names = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
    gold_tags = random_bio(rng, 120, types)
    pred_tags = [[g if rng.random() < 0.7 else label_names[int(rng.integers(0, 7))] for g in s] for s in gold_tags]
    want = tasks.get("ner").metrics(gold_tags, pred_tags)
    got = whole_split_metrics("ner", gold_tags, pred_tags, label_names)
    for m in ("f1", "precision", "recall", *(f"f1_{t}" for t in types)):
        assert float(got[m]) == pytest.approx(want[m], abs=1e-12), m
    # QA: SQuAD EM and F1 against several gold answers
    refs = [["the Paris office", "Paris"], ["London"], ["New York City"], ["a b c"]] * 10
    preds = ["paris", "London!", "York City", "d e"] * 10
    want = tasks.get("qa").metrics(refs, preds)
    got = whole_split_metrics("qa", refs, preds, None)
    assert float(got["f1"]) == pytest.approx(want["f1"], abs=1e-12)
    assert float(got["exact_match"]) == pytest.approx(want["exact_match"], abs=1e-12)
    # multi-label: micro/macro-F1 and subset accuracy
    ml_names = [f"l{j}" for j in range(5)]
    ml_gold = [sorted(set(rng.integers(0, 5, int(rng.integers(0, 3))).tolist())) for _ in range(100)]
    ml_pred = [sorted(set(g) ^ ({int(rng.integers(0, 5))} if rng.random() < 0.4 else set())) for g in ml_gold]
    want = tasks.get("multi_label_classification").metrics(ml_gold, ml_pred, ml_names)
    got = whole_split_metrics("multi_label_classification", ml_gold, ml_pred, ml_names)
    for m in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert float(got[m]) == pytest.approx(want[m], abs=1e-12), m


def test_every_kind_gives_intervals_for_its_main_metric():
    for name, kind in tasks.KINDS.items():
        assert kind.interval_metrics and kind.interval_metrics[0] == kind.main_metric, name


def qa_record(f1: np.ndarray, clusters: list[str] | None = None, seeds=(42,)) -> ExampleRecord:
    n = f1.shape[-1]
    ids = [str(i) for i in range(n)]
    rec = ExampleRecord("qa", "f1", None)
    rec.splits["test"] = SplitInfo(ids, clusters or ids, split_hash(ids, [[str(i)] for i in range(n)]))
    for j, seed in enumerate(seeds):
        row = f1 if f1.ndim == 1 else f1[j]
        rec.add("test", "full", seed, {"f1": row, "exact_match": (row == 1).astype(np.float64)})
    return rec


@pytest.mark.parametrize("method", ["percentile", "basic"])
def test_bounds_equal_scipy_on_a_mean_and_a_paired_difference(method):
    rng = np.random.default_rng(7)
    a, b = rng.random(80), rng.random(80)
    boot = Bootstrap(resamples=2000, confidence=0.9, seed=123, method=method)
    rec_a, rec_b = qa_record(a), qa_record(b)
    est_a = boot.estimates(rec_a, "test")["f1"]
    est_b = boot.estimates(rec_b, "test")["f1"]
    mean = boot.score(est_a)
    seed = boot.split_seed(rec_a.splits["test"])  # one seed per split, the same for every model on it
    ref = stats.bootstrap((a,), np.mean, n_resamples=2000, confidence_level=0.9, method=method,
                          rng=np.random.default_rng(seed), vectorized=True)
    assert (mean.low, mean.high) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    diff = boot.difference(est_a, est_b)
    ref = stats.bootstrap((a, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis), paired=True, vectorized=True,
                          n_resamples=2000, confidence_level=0.9, method=method, rng=np.random.default_rng(seed))
    assert (diff.low, diff.high) == pytest.approx(tuple(ref.confidence_interval), abs=1e-12)
    assert diff.point == pytest.approx(a.mean() - b.mean(), abs=1e-12)


def test_identical_predictions_differ_by_exactly_zero_and_share_exactly_one():
    rng = np.random.default_rng(0)
    f1 = rng.random((2, 60))
    clusters = [f"doc{i // 3}" for i in range(60)]
    boot = Bootstrap(resamples=500, seed=1)
    a = boot.estimates(qa_record(f1, clusters, seeds=(42, 43)), "test")["f1"]
    b = boot.estimates(qa_record(f1.copy(), clusters, seeds=(42, 43)), "test")["f1"]
    diff = boot.difference(a, b)
    assert (diff.point, diff.low, diff.high) == (0.0, 0.0, 0.0)
    share = boot.ratio(a, b)
    assert (share.point, share.low, share.high) == (1.0, 1.0, 1.0)
    assert diff.sources == "examples+seeds"
    assert a.seed_values == pytest.approx(tuple(f1.mean(axis=1)), abs=1e-12)


def test_cluster_draws_move_whole_clusters():
    clusters = ["x", "x", "y", "z", "z", "z"]
    draws = ClusterDraws(clusters, resamples=300, seed=5)
    assert draws.clusters == 3 and draws.counts.sum(axis=1).tolist() == [3.0] * 300
    values = np.eye(6)
    per_example = draws.sums(values)  # how often each example was drawn
    assert np.array_equal(per_example[:, 0], per_example[:, 1])
    assert np.array_equal(per_example[:, 3], per_example[:, 5])
    assert np.array_equal(draws.sizes(), per_example.sum(axis=1))


def coverage(clustered: bool, trials: int = 300, resamples: int = 400) -> float:
    """How often the 90% interval of a clustered sample's mean covers the true mean (0), resampling clusters or
    examples."""
    rng = np.random.default_rng(11)
    k, m = 30, 8  # 30 articles of 8 questions each; the article effect dominates
    hits = 0
    for t in range(trials):
        x = (rng.normal(0, 1, k)[:, None] + rng.normal(0, 0.5, (k, m))).ravel()
        clusters = [str(i // m) for i in range(k * m)] if clustered else None
        boot = Bootstrap(resamples=resamples, confidence=0.9, seed=t)
        iv = boot.score(boot.estimates(qa_record(x, clusters), "test")["f1"])
        hits += iv.low <= 0.0 <= iv.high
    return hits / trials


def test_cluster_bootstrap_covers_where_the_example_bootstrap_does_not():
    by_cluster, by_example = coverage(True), coverage(False)
    assert 0.83 <= by_cluster <= 0.96, by_cluster  # nominal 0.90; 300 trials: sd about 0.017
    assert by_example < 0.6, by_example  # treating 8 questions of an article as independent: far too narrow


def test_iid_coverage_is_near_nominal():
    rng = np.random.default_rng(3)
    hits = 0
    for t in range(300):
        x = rng.random(100)
        boot = Bootstrap(resamples=400, confidence=0.9, seed=t)
        iv = boot.score(boot.estimates(qa_record(x), "test")["f1"])
        hits += iv.low <= 0.5 <= iv.high
    assert 0.84 <= hits / 300 <= 0.95


def test_record_round_trip_is_byte_identical_and_unpaired_records_are_refused(tmp_path):
    rng = np.random.default_rng(2)
    rec = qa_record(rng.random((2, 30)), [f"d{i // 2}" for i in range(30)], seeds=(42, 43))
    rec.write(tmp_path / "a.arrow")
    again = ExampleRecord.read(tmp_path / "a.arrow")
    again.write(tmp_path / "b.arrow")
    assert (tmp_path / "a.arrow").read_bytes() == (tmp_path / "b.arrow").read_bytes()
    assert again.seeds("test") == [42, 43]
    assert np.array_equal(again.runs[("test", "full", 43)]["f1"], rec.runs[("test", "full", 43)]["f1"])
    assert again.splits["test"].clusters == rec.splits["test"].clusters
    other = qa_record(rng.random(31))
    with pytest.raises(ExamplesError, match="different test examples"):
        check_paired(rec, other, "test", "A", "B")
    boot = Bootstrap(resamples=10)
    with pytest.raises(ExamplesError, match="not paired"):
        boot.difference(boot.estimates(rec, "test")["f1"], boot.estimates(other, "test")["f1"])
    (tmp_path / "bad.arrow").write_bytes(b"not arrow")
    with pytest.raises(ExamplesError, match="bad.arrow: not a per-example record"):
        ExampleRecord.read(tmp_path / "bad.arrow")


def test_settings_are_checked():
    for kwargs, key in (({"resamples": 0}, "resamples"), ({"confidence": 1.0}, "confidence"),
                        ({"method": "bca"}, "method")):
        with pytest.raises(ValueError, match=key):
            Bootstrap(**kwargs)


def test_merged_seeds_resample_like_one_two_seed_record():
    from bert_pipeline.evaluation.examples import merge_seeds

    rng = np.random.default_rng(4)
    f1 = rng.random((2, 40))
    clusters = [f"d{i // 4}" for i in range(40)]
    both = qa_record(f1, clusters, seeds=(42, 43))
    merged = merge_seeds([qa_record(f1[0], clusters, seeds=(42,)), qa_record(f1[1], clusters, seeds=(43,))],
                         ["HEAD", "seed43"])
    boot = Bootstrap(resamples=300, seed=2)
    a, b = boot.estimates(both, "test")["f1"], boot.estimates(merged, "test")["f1"]
    assert np.array_equal(a.draws, b.draws) and a.seed_values == b.seed_values
    with pytest.raises(ExamplesError, match="both hold the full run at seed 42"):
        merge_seeds([both, qa_record(f1[0], clusters, seeds=(42,))], ["a", "b"])
    with pytest.raises(ExamplesError, match="different test examples"):
        merge_seeds([both, qa_record(f1[0][:30], seeds=(44,))], ["a", "b"])
