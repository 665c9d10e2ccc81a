"""MLM masking rules and the pre-training collator (bert_pipeline.data.masking), on synthetic token streams."""

from __future__ import annotations

import numpy as np
import pytest

from bert_pipeline.data.masking import (
    IGNORE_INDEX,
    MaskingRules,
    PretrainingCollator,
    VocabInfo,
    mask_batch,
    mask_ragged,
    pad_ragged,
)
from tests.pretrain_fixtures import CLS, MASK, PAD, SEP, UNK, tiny_config

N_WORDS = 2000  # ids 104..: whole-word pieces, then '##' continuation pieces


def make_vocab() -> VocabInfo:
    tokens = {"[PAD]": PAD, "[UNK]": UNK, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK}
    tokens.update({f"[unused{i}]": i for i in range(1, 100)})
    for i in range(N_WORDS):
        tokens[f"w{i}"] = 104 + i
        tokens[f"##c{i}"] = 104 + N_WORDS + i
    return VocabInfo.from_vocab(tokens, special_ids=[PAD, UNK, CLS, SEP, MASK], pad_token_id=PAD,
                                cls_token_id=CLS, sep_token_id=SEP, mask_token_id=MASK)


VOCAB = make_vocab()


def token_stream(n_tokens: int, seed: int = 0, max_len: int = 128, continuation_share: float = 0.3):
    """Ragged instances ``[CLS] A [SEP] B [SEP]`` (lengths 8..max_len), with some ``[UNK]`` and ``##`` pieces."""
    rng = np.random.default_rng(seed)
    rows, total = [], 0
    while total < n_tokens:
        length = int(rng.integers(8, max_len + 1))
        body = rng.integers(104, 104 + N_WORDS, size=length - 3)
        cont = rng.random(length - 3) < continuation_share
        cont[0] = False
        body = np.where(cont, body + N_WORDS, body)
        body[rng.random(length - 3) < 0.01] = UNK
        a = int(rng.integers(1, length - 3))
        row = np.concatenate(([CLS], body[:a], [SEP], body[a:], [SEP]))
        rows.append(row)
        total += row.size
    offsets = np.concatenate(([0], np.cumsum([r.size for r in rows]))).astype(np.int64)
    return np.concatenate(rows).astype(np.int64), offsets


def test_vocab_info_tables():
    assert VOCAB.is_special[[PAD, UNK, CLS, SEP, MASK]].all()
    assert VOCAB.is_special.sum() == 5
    assert not np.isin(VOCAB.random_ids, [PAD, UNK, CLS, SEP, MASK, 1, 50, 99]).any()
    assert VOCAB.random_ids.size == 2 * N_WORDS
    assert VOCAB.is_continuation[104 + N_WORDS]
    assert not VOCAB.is_continuation[104]
    assert VOCAB.id_dtype == np.uint16


def test_masking_rate_and_80_10_10_over_100k_tokens():
    values, offsets = token_stream(150_000, seed=1)
    rules = MaskingRules()
    res = mask_ragged(values, offsets, VOCAB, rules, np.random.default_rng(7))
    candidates = int((~VOCAB.is_special[values]).sum())
    assert candidates >= 100_000
    rate = res.positions.size / candidates
    assert abs(rate - 0.15) <= 0.005, rate
    # what each chosen position became, read from the output
    rows = np.repeat(np.arange(offsets.size - 1), np.diff(res.label_offsets))
    flat = offsets[:-1][rows] + res.positions
    assert np.array_equal(values[flat], res.masked_ids)  # labels are the original ids
    became = res.input_ids[flat]
    mask_share = np.mean(became == MASK)
    keep_share = np.mean(became == res.masked_ids)
    random_share = 1 - mask_share - keep_share
    assert abs(mask_share - 0.8) <= 0.01
    assert abs(random_share - 0.1) <= 0.01
    assert abs(keep_share - 0.1) <= 0.01
    # special tokens are never chosen, random replacements are never special
    assert not VOCAB.is_special[res.masked_ids].any()
    assert not VOCAB.is_special[became[(became != MASK)]].any()
    # positions outside the chosen ones are untouched
    untouched = np.ones(values.size, dtype=bool)
    untouched[flat] = False
    assert np.array_equal(values[untouched], res.input_ids[untouched])
    # per instance: at most max_predictions_per_seq, positions ascending
    per_row = np.diff(res.label_offsets)
    assert per_row.max() <= rules.max_predictions_per_seq
    assert per_row.min() >= 1
    for r in range(0, offsets.size - 1, 97):
        pos = res.positions[res.label_offsets[r]:res.label_offsets[r + 1]]
        assert np.all(np.diff(pos) > 0)


def test_max_predictions_caps_long_sequences():
    values, offsets = token_stream(30_000, seed=2, max_len=512)
    res = mask_ragged(values, offsets, VOCAB, MaskingRules(max_predictions_per_seq=20), np.random.default_rng(0))
    per_row = np.diff(res.label_offsets)
    lengths = np.diff(offsets)
    assert per_row.max() == 20
    assert np.all(per_row[lengths > 300] == 20)


def test_whole_word_masking_never_masks_part_of_a_word():
    values, offsets = token_stream(120_000, seed=3, continuation_share=0.4)
    padded = pad_ragged(values, offsets, PAD)
    res = mask_batch(padded, VOCAB, MaskingRules(whole_word_masking=True), np.random.default_rng(11))
    cand = ~VOCAB.is_special[padded]
    cont = VOCAB.is_continuation[padded] & cand
    prev_cand = np.zeros_like(cand)
    prev_cand[:, 1:] = cand[:, :-1]
    cont &= prev_cand
    # a continuation piece is chosen exactly when the piece before it is
    prev_chosen = np.zeros_like(res.chosen)
    prev_chosen[:, 1:] = res.chosen[:, :-1]
    assert np.array_equal(res.chosen[cont], prev_chosen[cont])
    assert not res.chosen[~cand].any()
    n_cand = cand.sum(axis=1)
    k = res.chosen.sum(axis=1)
    assert np.all(k <= 20)
    rate = k.sum() / n_cand.sum()
    assert 0.14 <= rate <= 0.1505, rate
    # BERT's whole-word loop is maximal: no unchosen word fits the budget left over
    word_start = cand & ~cont
    word_id = np.cumsum(word_start, axis=1)
    for r in range(0, padded.shape[0], 13):
        budget_left = min(20, int(np.floor(n_cand[r] * 0.15 + 1))) - k[r]
        ids = word_id[r][cand[r]]
        chosen = res.chosen[r][cand[r]]
        lengths = np.bincount(ids)
        unchosen = np.unique(ids[~chosen])
        assert np.all(lengths[unchosen] > budget_left - 1) or budget_left <= 0


def test_masking_is_deterministic_and_seed_dependent():
    values, offsets = token_stream(20_000, seed=4)
    a = mask_ragged(values, offsets, VOCAB, MaskingRules(), np.random.default_rng(5))
    b = mask_ragged(values, offsets, VOCAB, MaskingRules(), np.random.default_rng(5))
    c = mask_ragged(values, offsets, VOCAB, MaskingRules(), np.random.default_rng(6))
    assert np.array_equal(a.input_ids, b.input_ids)
    assert np.array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, c.positions)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(masked_lm_prob=1.5), "masked_lm_prob: expected a probability in [0, 1]"),
        (dict(random_token_prob=-0.1), "random_token_prob: expected a probability in [0, 1]"),
        (dict(mask_token_prob=0.95, random_token_prob=0.1), "mask_token_prob + random_token_prob: expected <= 1"),
        (dict(max_predictions_per_seq=0), "max_predictions_per_seq: expected int >= 1"),
    ],
)
def test_bad_rules_raise(kwargs, message):
    with pytest.raises(ValueError) as err:
        MaskingRules(**kwargs)
    assert message in str(err.value)


def test_vocab_without_mask_token_raises():
    class NoMask:
        pad_token_id, cls_token_id, sep_token_id, mask_token_id = 0, 1, 2, None

    with pytest.raises(ValueError, match="mask_token"):
        VocabInfo.from_tokenizer(NoMask())


def test_mask_batch_rejects_out_of_vocabulary_ids():
    with pytest.raises(ValueError, match="expected ids in"):
        mask_batch(np.array([[CLS, 10**6, SEP]]), VOCAB, MaskingRules(), np.random.default_rng(0))


def _rows(n: int, seed: int, static: bool):
    values, offsets = token_stream(n * 60, seed=seed, max_len=60)
    res = mask_ragged(values, offsets, VOCAB, MaskingRules(), np.random.default_rng(seed)) if static else None
    rows = []
    for i in range(offsets.size - 1):
        ids = (res.input_ids if static else values)[offsets[i]:offsets[i + 1]]
        sep = int(np.flatnonzero(values[offsets[i]:offsets[i + 1]] == SEP)[0])
        row = {"input_ids": ids.tolist(), "token_type_ids": [0] * (sep + 1) + [1] * (ids.size - sep - 1),
               "next_sentence_label": i % 2}
        if static:
            lo, hi = res.label_offsets[i], res.label_offsets[i + 1]
            row["masked_lm_positions"] = res.positions[lo:hi].tolist()
            row["masked_lm_ids"] = res.masked_ids[lo:hi].tolist()
        rows.append(row)
    return rows


def test_collator_pads_static_rows_into_hf_batch():
    import torch

    rows = _rows(16, seed=8, static=True)[:16]
    batch = PretrainingCollator(VOCAB, pad_to_multiple_of=8)(rows)
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
    width = max(len(r["input_ids"]) for r in rows)
    assert batch["input_ids"].shape == (16, -(-width // 8) * 8)
    assert batch["input_ids"].dtype == torch.int64
    for i, row in enumerate(rows):
        n = len(row["input_ids"])
        assert batch["input_ids"][i, :n].tolist() == row["input_ids"]
        assert batch["input_ids"][i, n:].eq(PAD).all()
        assert batch["attention_mask"][i].sum() == n
        assert batch["token_type_ids"][i, :n].tolist() == row["token_type_ids"]
        labels = batch["labels"][i]
        assert labels[row["masked_lm_positions"]].tolist() == row["masked_lm_ids"]
        assert (labels != IGNORE_INDEX).sum() == len(row["masked_lm_positions"])
    assert batch["next_sentence_label"].tolist() == [i % 2 for i in range(16)]


def test_dynamic_collator_masks_each_batch_anew_by_the_same_rules():
    rows = _rows(400, seed=9, static=False)
    collator = PretrainingCollator(VOCAB, MaskingRules(), seed=3, return_tensors="np")
    first, second = collator(rows), collator(rows)
    assert not np.array_equal(first["labels"], second["labels"])  # a new mask per call
    again = PretrainingCollator(VOCAB, MaskingRules(), seed=3, return_tensors="np")(rows)
    assert np.array_equal(again["labels"], first["labels"])
    assert np.array_equal(again["input_ids"], first["input_ids"])
    labels, ids, attn = first["labels"], first["input_ids"], first["attention_mask"]
    chosen = labels != IGNORE_INDEX
    assert not chosen[attn == 0].any()
    assert not VOCAB.is_special[labels[chosen]].any()
    original = np.where(chosen, labels, ids)
    rate = chosen.sum() / (~VOCAB.is_special[original] & (attn == 1)).sum()
    assert abs(rate - 0.15) < 0.01
    assert abs(np.mean(ids[chosen] == MASK) - 0.8) < 0.02


def test_collator_rejects_mixed_batches_and_unmasked_rows_without_rules():
    static, dynamic = _rows(4, seed=10, static=True), _rows(4, seed=10, static=False)
    with pytest.raises(ValueError, match="mixes"):
        PretrainingCollator(VOCAB, MaskingRules())(static[:2] + dynamic[:2])
    with pytest.raises(ValueError, match="need rules"):
        PretrainingCollator(VOCAB)(dynamic)


def test_collator_batch_feeds_bert_for_pretraining():
    """The batch's keys, shapes and dtypes are what Hugging Face's BertForPreTraining takes (MLM + NSP loss)."""
    import torch
    from transformers import BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(tiny_config(vocab_size=VOCAB.vocab_size, num_hidden_layers=1)).eval()
    for rows, rules in ((_rows(8, seed=12, static=True), None), (_rows(8, seed=13, static=False), MaskingRules())):
        batch = PretrainingCollator(VOCAB, rules, seed=0)(rows)
        with torch.no_grad():
            out = model(**batch)
        assert out.prediction_logits.shape == (*batch["input_ids"].shape, VOCAB.vocab_size)
        # an untrained model's loss is about ln(vocab_size) for MLM plus ln(2) for NSP
        assert abs(float(out.loss) - (np.log(VOCAB.vocab_size) + np.log(2))) < 1.5
