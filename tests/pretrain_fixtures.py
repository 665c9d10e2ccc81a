"""Synthetic pre-training instances in the ``data/pretraining/`` contract (ARCHITECTURE.md), for fast tests.

Instances are unpadded ``[CLS] A [SEP] B [SEP]`` with ``token_type_ids`` 0/1, static MLM masks
(``masked_lm_positions``/``masked_lm_ids``, 80% ``[MASK]``) and a pair label. Each instance draws its words from one
of 5 topic blocks of 8 ids (NotNext B from another block), so a tiny model can learn from the context to beat
the unigram guess (about 1/8 against 1/40) and the NSP label.
``pad_collate`` pads them into Hugging Face's batch: it stands in for create_pretraining_data's collator in the
library tests only.
"""

from __future__ import annotations

import numpy as np
import torch

PAD, UNK, CLS, SEP, MASK = 0, 100, 101, 102, 103
FIRST_WORD = 104
N_WORDS = 40
TOPIC_WORDS = 8
N_TOPICS = N_WORDS // TOPIC_WORDS
VOCAB_SIZE = FIRST_WORD + N_WORDS


def _sentence(rng: np.random.Generator, length: int, topic: int) -> list[int]:
    """Words of one topic: ``TOPIC_WORDS`` consecutive ids, so the context tells which block a mask is from."""
    return [FIRST_WORD + topic * TOPIC_WORDS + int(t) for t in rng.integers(TOPIC_WORDS, size=length)]


def make_instances(n: int, seed: int, max_seq_length: int = 32, pair_key: str | None = "next_sentence_label",
                   masked_lm_prob: float = 0.15) -> list[dict]:
    """``n`` instances as dicts of lists (the Arrow columns), lengths between max_seq_length/2 and max."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        total = int(rng.integers(max_seq_length // 2, max_seq_length + 1)) - 3
        a_len = int(rng.integers(1, total))
        label = int(rng.integers(2))
        topic = int(rng.integers(N_TOPICS))
        other = (topic + 1 + int(rng.integers(N_TOPICS - 1))) % N_TOPICS
        a = _sentence(rng, a_len, topic)
        b = _sentence(rng, total - a_len, other if (label and pair_key == "next_sentence_label") else topic)
        if pair_key == "sentence_order_label" and label:
            a, b = b, a
        ids = [CLS, *a, SEP, *b, SEP]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
        candidates = [i for i, t in enumerate(ids) if t >= FIRST_WORD]
        k = max(1, round(len(candidates) * masked_lm_prob))
        positions = sorted(rng.choice(candidates, size=k, replace=False).tolist())
        originals = [ids[p] for p in positions]
        for p in positions:
            r = rng.random()
            if r < 0.8:
                ids[p] = MASK
            elif r < 0.9:
                ids[p] = FIRST_WORD + int(rng.integers(N_WORDS))
        row = {"input_ids": ids, "token_type_ids": types, "masked_lm_positions": positions,
               "masked_lm_ids": originals}
        if pair_key:
            row[pair_key] = label
        rows.append(row)
    return rows


def make_dataset(n: int, seed: int, **kwargs):
    """A ``datasets.Dataset`` of :func:`make_instances`."""
    import datasets

    rows = make_instances(n, seed, **kwargs)
    return datasets.Dataset.from_list(rows)


def pad_collate(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Pad unpadded instances into ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels`` (-100)."""
    width = max(len(r["input_ids"]) for r in rows)
    n = len(rows)
    input_ids = torch.full((n, width), PAD, dtype=torch.long)
    token_type_ids = torch.zeros((n, width), dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    labels = torch.full((n, width), -100, dtype=torch.long)
    for i, r in enumerate(rows):
        L = len(r["input_ids"])
        input_ids[i, :L] = torch.as_tensor(r["input_ids"])
        token_type_ids[i, :L] = torch.as_tensor(r["token_type_ids"])
        attention_mask[i, :L] = 1
        labels[i, torch.as_tensor(r["masked_lm_positions"], dtype=torch.long)] = torch.as_tensor(
            r["masked_lm_ids"], dtype=torch.long)
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
             "labels": labels}
    for key in ("next_sentence_label", "sentence_order_label"):
        if key in rows[0]:
            batch[key] = torch.as_tensor([r[key] for r in rows], dtype=torch.long)
    return batch


def tiny_config(**overrides):
    """A 2-layer, H=32 BertConfig, by default over the synthetic vocabulary (dropout kept: resume must restore RNG)."""
    from transformers import BertConfig

    fields = {"vocab_size": VOCAB_SIZE, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 64, "max_position_embeddings": 64}
    fields.update(overrides)
    return BertConfig(**fields)


def save_tokenizer(folder) -> None:
    """A BERT-layout WordPiece tokenizer over the synthetic vocabulary (``[PAD]``=0 ... ``[MASK]``=103, w0..w39)."""
    from pathlib import Path

    from transformers import BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokens = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]",
              *(f"w{i}" for i in range(N_WORDS))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    BertTokenizerFast.from_pretrained(str(folder)).save_pretrained(str(folder))


def save_pretraining_data(folder, n_train: int, n_validation: int, max_seq_length: int = 32,
                          objective: str = "nsp", init: str = "scratch", tokenizer: str = "models/tokenizer") -> None:
    """``data/pretraining``-layout folder: ``train/``, ``validation/`` (``save_to_disk``) and ``info.json``."""
    import json
    from pathlib import Path

    import datasets

    pair_key = {"nsp": "next_sentence_label", "sop": "sentence_order_label", "none": None}[objective]
    folder = Path(folder)
    for split, n, seed in (("train", n_train, 1), ("validation", n_validation, 2)):
        rows = make_instances(n, seed, max_seq_length=max_seq_length, pair_key=pair_key)
        ds = datasets.Dataset.from_list(rows) if rows else datasets.Dataset.from_dict(
            {"input_ids": [], "token_type_ids": [], "masked_lm_positions": [], "masked_lm_ids": []})
        ds.save_to_disk(str(folder / split))
    info = {"objective": objective, "pair_label": pair_key, "masking": "static", "max_seq_length": max_seq_length,
            "vocab_size": VOCAB_SIZE, "tokenizer": tokenizer, "pretrain_init": init,
            "special_ids": {"pad": PAD, "cls": CLS, "sep": SEP, "mask": MASK},
            "rules": {"masked_lm_prob": 0.15, "max_predictions_per_seq": 20, "mask_token_prob": 0.8,
                      "random_token_prob": 0.1, "whole_word_masking": False}}
    (folder / "info.json").write_text(json.dumps(info), encoding="utf-8")


# A tiny fp32 ``pretrain`` section's changes: 4 steps of batch 8, checkpoints and evaluations every 2 steps, 2
# held-out batches of 8, a ``tiny`` model of 64 positions (instances of up to 32 tokens, RoBERTa's offset of 2 too).
TINY_PRETRAIN = {
    "max_steps": 4, "batch_size": 8, "warmup_steps": 1, "save_steps": 2, "eval_steps": 2, "max_eval_batches": 2,
    "eval_batch_size": 8, "logging_steps": 1, "precision": "fp32",
    "model": {"size": "tiny", "config": {"max_position_embeddings": 64}, "family": "bert"}}
# the data pretrain_workspace writes is BERT's NSP pairs (params.yaml's default is ModernBERT's MLM-only stream)
NSP_DATA = {"objective": "nsp", "packing": "sentences"}


def pretrain_workspace(root, raw, n_train: int = 64, **pretrain):
    """A repository-like folder for the pretrain stage: ``params.yaml`` (``raw``, the committed params, with
    :data:`TINY_PRETRAIN`'s changes, then ``pretrain``'s keys; BERT's NSP data settings, :data:`NSP_DATA`),
    ``models/tokenizer`` (:func:`save_tokenizer`) and ``data/pretraining`` (``n_train`` NSP instances of up to 32
    tokens, 16 held out). Returns ``root``."""
    import copy
    from pathlib import Path

    from tests.conftest import write_params

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    write_params(root, copy.deepcopy(raw), pretrain={**copy.deepcopy(TINY_PRETRAIN), **pretrain},
                 create_pretraining_data=dict(NSP_DATA))
    save_tokenizer(root / "models" / "tokenizer")
    save_pretraining_data(root / "data" / "pretraining", n_train, 16)
    return root
