"""The create_pretraining_data stage on a tiny synthetic corpus and a tiny WordPiece tokenizer built here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bert_pipeline.data.masking import IGNORE_INDEX, collator_from_info
from bert_pipeline.errors import PipelineError
from stages.params.base import ParamsError
from stages.params.root import load_params
from tests.conftest import REPO, tree_digests, write_params

SYLLABLES = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "po"]


def make_tokenizer(folder: Path) -> None:
    """A BERT-layout WordPiece tokenizer: 1-2 syllable words whole, longer words split into ``##`` pieces."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, **{f"[unused{i}]": i for i in range(1, 100)}, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102,
             "[MASK]": 103}
    words = SYLLABLES + [a + b for a in SYLLABLES for b in SYLLABLES] + ["##" + s for s in SYLLABLES] + [".", ","]
    for w in words:
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 101), ("[SEP]", 102)])
    tok.decoder = decoders.WordPiece()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]", model_max_length=512).save_pretrained(folder)


def make_corpus(folder: Path, n_train: int = 48, n_val: int = 8, seed: int = 0) -> int:
    """A DatasetDict like prepare_corpus writes; every 6th document has one sentence. Returns that count."""
    import datasets

    rng = np.random.default_rng(seed)

    def doc(i: int) -> dict:
        n = 1 if i % 6 == 0 else int(rng.integers(2, 12))
        sents = []
        for _ in range(n):
            words = ["".join(rng.choice(SYLLABLES, size=int(rng.integers(1, 4)))) for _ in range(rng.integers(3, 14))]
            sents.append(" ".join(words).capitalize() + ".")
        return {"doc_id": f"d{i}", "source": "synthetic", "text": " ".join(sents), "sentences": sents}

    train = [doc(i) for i in range(n_train)]
    val = [doc(i) for i in range(n_train, n_train + n_val)]
    datasets.DatasetDict(train=datasets.Dataset.from_list(train),
                         validation=datasets.Dataset.from_list(val)).save_to_disk(str(folder))
    return sum(1 for i in range(n_train) if i % 6 == 0)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cpd")
    make_tokenizer(root / "models/tokenizer")
    make_corpus(root / "data/corpus")
    return root


def _write_params(root: Path, pretrain: dict | None = None, **overrides) -> None:
    # BERT's NSP pairs unless a test says otherwise (params.yaml's default is ModernBERT's stream packing)
    write_params(root, create_pretraining_data={"max_seq_length": 32, "dupe_factor": 2, "shard_size": 8, "num_proc": 1,
                                                "seed": 7, "objective": "nsp", "packing": "sentences", **overrides},
                 pretrain=pretrain or {})


def run(root: Path, monkeypatch, pretrain: dict | None = None, **overrides) -> dict[str, str]:
    """Run the stage in ``root``; return sha256 of every output file under data/pretraining."""
    from stages.create_pretraining_data import main

    monkeypatch.chdir(root)
    _write_params(root, pretrain, **overrides)
    main()
    return tree_digests(root / "data/pretraining")


def test_outputs_metrics_and_num_proc_invariance(workspace, monkeypatch):
    import datasets

    first = run(workspace, monkeypatch)
    info = json.loads((workspace / "data/pretraining/info.json").read_text())
    assert info["objective"] == "nsp"
    assert info["pair_label"] == "next_sentence_label"
    assert info["vocab_size"] == 104 + 8 + 64 + 8 + 2
    assert info["id_dtype"] == "uint16"
    assert info["tokenizer"] == "models/tokenizer"
    assert info["max_seq_length"] == 32
    train = datasets.load_from_disk(str(workspace / "data/pretraining/train"))
    assert train.features["input_ids"].feature.dtype == "uint16"
    assert set(train.column_names) == {"input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids",
                                       "next_sentence_label"}
    assert len([f for f in first if f.startswith("train/data-")]) == 6  # 48 documents / shard_size 8
    rows = train[:]
    assert max(len(r) for r in rows["input_ids"]) <= 32
    for ids, types, pos, lab in zip(rows["input_ids"], rows["token_type_ids"], rows["masked_lm_positions"],
                                    rows["masked_lm_ids"], strict=True):
        assert ids[0] == 101
        assert ids[-1] == 102
        assert len(types) == len(ids)
        assert types[ids.index(102)] == 0
        assert types[-1] == 1
        assert all(ids[p] not in (101, 102) for p in pos)
        assert all(m not in (0, 100, 101, 102, 103) for m in lab)
    metrics = json.loads((workspace / "metrics/pretraining_data.json").read_text())
    m = metrics["train"]
    assert m["instances"] == len(train) == info["splits"]["train"]["instances"]
    assert m["tokens"] == sum(len(r) for r in rows["input_ids"])
    assert m["padding_share"] == pytest.approx(1 - m["tokens"] / (32 * m["instances"]), abs=1e-6)
    assert m["skipped_one_sentence_documents"] == 8
    assert m["documents"] == 48
    assert abs(m["masked_lm_rate"] - 0.15) < 0.02
    assert abs(m["mask_token_share"] - 0.8) < 0.05
    assert m["pair_label_1_share"] == pytest.approx(np.mean(rows["next_sentence_label"]), abs=1e-6)
    assert metrics["validation"]["dupe_factor"] == 1
    # same inputs and seed: byte-identical, whatever num_proc is
    assert run(workspace, monkeypatch) == first
    assert run(workspace, monkeypatch, num_proc=2) == first
    assert run(workspace, monkeypatch, seed=8) != first


def test_copies_differ_in_masks(workspace, monkeypatch):
    """objective none without short targets packs the same instances in every copy: only the masks differ."""
    import datasets

    run(workspace, monkeypatch, objective="none", short_seq_prob=0.0, dupe_factor=3)
    train = datasets.load_from_disk(str(workspace / "data/pretraining/train"))
    copies: dict[tuple, list[tuple]] = {}
    for row in train:
        original = np.array(row["input_ids"])
        original[row["masked_lm_positions"]] = row["masked_lm_ids"]
        copies.setdefault(tuple(original), []).append(tuple(row["masked_lm_positions"]))
    assert all(len(v) == 3 for v in copies.values())
    differing = sum(len(set(v)) > 1 for v in copies.values())
    assert differing >= 0.9 * len(copies)
    assert "next_sentence_label" not in train.column_names


def test_dynamic_masking_stores_unmasked_train_and_the_collator_masks(workspace, monkeypatch):
    import datasets

    run(workspace, monkeypatch, masking="dynamic", objective="sop")
    train = datasets.load_from_disk(str(workspace / "data/pretraining/train"))
    val = datasets.load_from_disk(str(workspace / "data/pretraining/validation"))
    assert "masked_lm_positions" not in train.column_names
    assert "masked_lm_positions" in val.column_names
    assert "sentence_order_label" in train.column_names
    assert not any(103 in ids for ids in train["input_ids"])
    collator = collator_from_info(workspace / "data/pretraining", seed=0)
    rows = [train[i] for i in range(16)]
    a, b = collator(rows), collator(rows)
    assert set(a) == {"input_ids", "token_type_ids", "attention_mask", "labels", "sentence_order_label"}
    assert (a["labels"] != IGNORE_INDEX).any()
    assert not (a["labels"] == b["labels"]).all()
    v = collator([val[i] for i in range(4)])
    assert (v["labels"] != IGNORE_INDEX).sum() == sum(len(val[i]["masked_lm_positions"]) for i in range(4))


def test_stream_packing_in_the_stage_leaves_no_padding(workspace, monkeypatch):
    """objective none with packing stream: every instance of a group but its last is max_seq_length long."""
    run(workspace, monkeypatch, objective="none", packing="stream", short_seq_prob=0.0)
    metrics = json.loads((workspace / "metrics/pretraining_data.json").read_text())
    info = json.loads((workspace / "data/pretraining/info.json").read_text())
    assert info["packing"] == "stream"
    run(workspace, monkeypatch, objective="none", packing="sentences", short_seq_prob=0.0)
    packed = json.loads((workspace / "metrics/pretraining_data.json").read_text())
    # one short instance per shard and copy at most, against one per document (and per gap) when sentences pack
    assert metrics["train"]["padding_share"] < 0.5 * packed["train"]["padding_share"]
    assert metrics["train"]["instances"] < packed["train"]["instances"]


def test_the_validation_split_is_masked_at_its_own_rate(workspace, monkeypatch):
    """Training at 40% while validation_masked_lm_prob is 15%: each split's realised rate is its own."""
    run(workspace, monkeypatch, masked_lm_prob=0.4, max_predictions_per_seq=13, validation_masked_lm_prob=0.15)
    metrics = json.loads((workspace / "metrics/pretraining_data.json").read_text())
    info = json.loads((workspace / "data/pretraining/info.json").read_text())
    assert abs(metrics["train"]["masked_lm_rate"] - 0.4) < 0.03
    assert abs(metrics["validation"]["masked_lm_rate"] - 0.15) < 0.03
    assert info["rules"]["masked_lm_prob"] == 0.4
    assert info["validation_rules"]["masked_lm_prob"] == 0.15
    run(workspace, monkeypatch, masked_lm_prob=0.4, max_predictions_per_seq=13, validation_masked_lm_prob=None)
    metrics = json.loads((workspace / "metrics/pretraining_data.json").read_text())
    assert abs(metrics["validation"]["masked_lm_rate"] - 0.4) < 0.03


def test_missing_corpus_and_too_long_max_seq_length_fail_without_partial_outputs(tmp_path, monkeypatch):
    from stages.create_pretraining_data import main

    make_tokenizer(tmp_path / "models/tokenizer")
    monkeypatch.chdir(tmp_path)
    _write_params(tmp_path)
    with pytest.raises(PipelineError, match="data/corpus: corpus not found"):
        main()
    make_corpus(tmp_path / "data/corpus", n_train=6, n_val=2)
    _write_params(tmp_path, max_seq_length=600)
    with pytest.raises(PipelineError, match="max_seq_length: 600 exceeds the tokenizer's model_max_length 512"):
        main()
    _write_params(tmp_path, max_document_tokens=100,
                  pretrain={"phases": [{"max_seq_length": 32, "fraction": 0.5}, {"max_seq_length": 64, "fraction": 0.5}]})
    with pytest.raises(PipelineError) as err:
        main()
    assert str(err.value) == ("create_pretraining_data.max_document_tokens: expected >= 2 x the longest sequence "
                              "length (128 for 64), got 100")
    _write_params(tmp_path, max_seq_length=64, max_document_tokens=100,  # the longest is the data's own length
                  pretrain={"phases": [{"max_seq_length": 32, "fraction": 0.5}, {"max_seq_length": 64, "fraction": 0.5}]})
    with pytest.raises(PipelineError, match=r"expected >= 2 x the longest sequence length \(128 for 64\), got 100$"):
        main()
    _write_params(tmp_path, max_seq_length=64, max_document_tokens=100,
                  pretrain={"phases": [{"max_seq_length": 32, "fraction": 1.0}]})
    with pytest.raises(PipelineError, match=r"expected >= 2 x the longest sequence length \(128 for 64\), got 100$"):
        main()
    assert not (tmp_path / "data/pretraining").exists()


def test_a_corpus_with_an_empty_validation_split_is_one_line(tmp_path, monkeypatch):
    import datasets

    from stages.create_pretraining_data import main

    make_tokenizer(tmp_path / "models/tokenizer")
    make_corpus(tmp_path / "full", n_train=6, n_val=1)
    full = datasets.load_from_disk(str(tmp_path / "full"))
    datasets.DatasetDict(train=full["train"], validation=full["validation"].select([])).save_to_disk(
        str(tmp_path / "data/corpus"))
    monkeypatch.chdir(tmp_path)
    _write_params(tmp_path)
    with pytest.raises(PipelineError) as err:
        main()
    assert str(err.value) == ("data/corpus: the validation split is empty (expected at least one document; rebuild it "
                              "with prepare_corpus.validation_fraction changed or more documents in "
                              "prepare_corpus.sources)")
    assert not (tmp_path / "data/pretraining").exists()


def test_missing_tokenizer_is_one_line(tmp_path, monkeypatch):
    from stages.create_pretraining_data import main

    monkeypatch.chdir(tmp_path)
    _write_params(tmp_path)
    with pytest.raises(PipelineError, match="models/tokenizer: tokenizer folder not found"):
        main()


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(masked_lm_prob=1.2), "create_pretraining_data.masked_lm_prob: expected float >= 0.0 and <= 1.0, got 1.2"),
        (dict(random_token_prob=-0.1), "create_pretraining_data.random_token_prob: expected float >= 0.0"),
        (dict(mask_token_prob=0.9, random_token_prob=0.2),
         "create_pretraining_data.mask_token_prob + random_token_prob: expected <= 1"),
        (dict(max_seq_length=4), "create_pretraining_data.max_seq_length: expected int >= 5"),
        (dict(objective="mlm"), "create_pretraining_data.objective: expected one of"),
        (dict(masking="sometimes"), "create_pretraining_data.masking: expected one of"),
        (dict(max_document_tokens=8), "create_pretraining_data.max_document_tokens: expected int >= 16"),
        (dict(packing="stream", objective="nsp"), "create_pretraining_data.packing: stream needs objective none"),
        (dict(validation_masked_lm_prob=2), "create_pretraining_data.validation_masked_lm_prob: expected float >= 0.0"),
    ],
)
def test_bad_params_are_one_line(tmp_path, overrides, message):
    _write_params(tmp_path, **overrides)
    with pytest.raises(ParamsError) as err:
        load_params(tmp_path / "params.yaml")
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_tokenizer_padding_and_truncation_in_tokenizer_json_are_ignored(tmp_path):
    """A tokenizer.json may carry padding/truncation (the packaged MiniLM pads to 128): sentences stay whole."""
    from tokenizers import Tokenizer

    from bert_pipeline.data.shard_builder import tokenize_documents
    from bert_pipeline.data.tokenizer import load_tokenizer, raw_backend

    make_tokenizer(tmp_path / "tok")
    raw = Tokenizer.from_file(str(tmp_path / "tok/tokenizer.json"))
    raw.enable_padding(length=16, pad_id=0, pad_token="[PAD]")
    raw.enable_truncation(max_length=4)
    raw.save(str(tmp_path / "tok/tokenizer.json"))
    backend = raw_backend(load_tokenizer(tmp_path / "tok"))
    docs = tokenize_documents(backend, [["Kalo mine su.", "Ka lo mi ne su ta ri po ka lo."], ["Ta."]], np.dtype(np.int64))
    assert [[len(s) for s in d] for d in docs] == [[4, 11], [2]]
    assert docs[0][0][-1] == docs[1][0][-1]  # the '.' id; no [PAD] (0) anywhere
    assert all(0 not in s for d in docs for s in d)


def test_document_units_cut_long_documents_at_sentence_ends_and_long_sentences_at_words():
    from bert_pipeline.data.shard_builder import CUT_COUNTS, document_units

    ids = iter(range(10**6))

    def sents(*lengths: int) -> list[np.ndarray]:
        return [np.array([next(ids) for _ in range(n)], dtype=np.int64) for n in lengths]

    doc0, doc1, doc2, doc4 = sents(*[10] * 5), sents(*[9] * 40), sents(*[9] * 23), sents(250)
    stream = [(0, doc0), (1, doc1[:13]), (1, doc1[13:] + [np.zeros(0, dtype=np.int64)]), (2, doc2), (3, []),
              (4, doc4)]
    counts = dict.fromkeys(CUT_COUNTS, 0)
    units = list(document_units(iter(stream), max_document_tokens=100, is_continuation=np.zeros(10**6, dtype=bool),
                                min_piece=30, max_piece=60, counts=counts))
    shapes = [[len(s) for s in u] for u in units]
    assert shapes == [
        [10] * 5,                                    # under the bound: the document as it is
        [9] * 11, [9] * 11, [9] * 11, [9] * 7,        # 360 tokens: pieces of whole sentences, at most 100 tokens
        [9] * 11, [9] * 12,                          # a last piece of one sentence joins the one before
        [],                                          # an empty document stays (create_instances counts it)
        [30] * 3, [30] * 3, [30, 40],                # a 250-token sentence cut at 30s, the rest (40) whole, packed
    ]
    assert counts == {"cut_sentences": 1, "cut_sentence_pieces": 8, "cut_documents": 3, "cut_document_pieces": 9}
    for unit, doc in ((units[0], doc0), (np.concatenate([np.concatenate(u) for u in units[1:5]]), doc1)):
        assert np.array_equal(np.concatenate(unit) if isinstance(unit, list) else unit, np.concatenate(doc))


def make_long_document_corpus(folder: Path, n_words: int, chunk_chars: int = 100_000, n_small: int = 9,
                              seed: int = 0) -> int:
    """A corpus like prepare_corpus writes for one line of ``n_words`` words without a sentence end (one
    "sentence" per ``chunk_chars`` chunk, cut at a space) next to ``n_small`` short documents (one in
    validation); returns the number of chunks."""
    import datasets

    from bert_pipeline.data.sentences import chunk_text

    rng = np.random.default_rng(seed)
    words = np.array(["".join(w) for w in [(a,) for a in SYLLABLES] + [(a, b) for a in SYLLABLES for b in SYLLABLES]
                      + [(a, b, c) for a in SYLLABLES[:4] for b in SYLLABLES for c in SYLLABLES[:2]]])
    line = " ".join(words[rng.integers(0, words.size, size=n_words)])
    chunks = [c.strip() for c in chunk_text(line, chunk_chars)]
    huge = {"doc_id": "huge:user/huge.txt:block=0", "source": "huge", "text": line, "sentences": chunks}
    del line
    small = [{"doc_id": f"s{i}", "source": "small", "text": "", "sentences": [
        " ".join(words[rng.integers(0, 72, size=int(rng.integers(4, 14)))]) + "." for _ in range(int(rng.integers(2, 9)))]}
        for i in range(n_small)]
    datasets.DatasetDict(train=datasets.Dataset.from_list([small[0], huge, *small[1:-1]]),
                         validation=datasets.Dataset.from_list(small[-1:])).save_to_disk(str(folder))
    return len(chunks)


def test_a_long_one_line_document_is_cut_into_packable_pieces(tmp_path, monkeypatch):
    """A 60,000-word line without sentence ends: its 20,000-character "sentences" are cut at words, the document
    at sentence ends; the pairs keep its tokens (the old code truncated every pair to 61 of about 10,000 tokens);
    the bytes do not depend on num_proc."""
    import datasets

    from bert_pipeline.data.tokenizer import load_tokenizer, raw_backend

    make_tokenizer(tmp_path / "models/tokenizer")
    n_chunks = make_long_document_corpus(tmp_path / "data/corpus", n_words=60_000, chunk_chars=20_000)
    cfg = dict(max_seq_length=64, shard_size=4, max_document_tokens=2048, dupe_factor=1)
    first = run(tmp_path, monkeypatch, **cfg)
    m = json.loads((tmp_path / "metrics/pretraining_data.json").read_text())["train"]
    backend = raw_backend(load_tokenizer(tmp_path / "models/tokenizer"))
    huge = datasets.load_from_disk(str(tmp_path / "data/corpus"))["train"][1]["sentences"]
    lengths = [len(e.ids) for e in backend.encode_batch(huge, add_special_tokens=False)]
    assert m["documents"] == 9
    assert m["shards"] == 3
    assert min(lengths) > 61  # every chunk is longer than a pair's segment can be
    assert m["cut_sentences"] == n_chunks
    assert sum(lengths) / 61 < m["cut_sentence_pieces"] < sum(lengths) / 31 + n_chunks
    assert m["cut_documents"] == 1
    assert sum(lengths) / 2048 < m["cut_document_pieces"] < sum(lengths) / (2048 - 61) + 1
    assert m["truncated_tokens"] < 0.05 * m["tokens"]  # a word's overshoot per pair (all but 61 tokens before)
    assert m["padding_share"] < 0.01
    assert m["max_length"] == 64
    assert m["pair_label_1_share"] == pytest.approx(0.5, abs=0.02)
    train = datasets.load_from_disk(str(tmp_path / "data/pretraining/train"))
    assert len(train) == m["instances"]
    assert max(len(r) for r in train["input_ids"]) <= 64
    assert run(tmp_path, monkeypatch, **cfg, num_proc=2) == first
    assert run(tmp_path, monkeypatch, **cfg) == first


_MEASURE = """import resource, subprocess, sys
code = subprocess.call([sys.executable, "-m", "stages.create_pretraining_data"], stdout=open("stage.log", "wb"),
                       stderr=subprocess.STDOUT)
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _stage_peak_rss_mb(root: Path) -> float:
    """Run the stage in ``root`` as a child process; return its peak RSS in MB (``ru_maxrss`` of the children
    of a small launcher: the stage's, or that of a worker process it waited for when larger).

    The launcher matters: a child forked straight from this (large) test process would report this process's
    RSS, which its copy of the address space had before ``exec``."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", _MEASURE], cwd=root, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "0", (root / "stage.log").read_text()[-3000:]
    return int(out[1]) / 1024  # KB on Linux


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss in KB and /proc semantics")
def test_peak_memory_does_not_grow_with_a_one_line_document(tmp_path_factory):
    """The issue's case scaled down: one line without sentence ends, 5 MB and 20 MB, next to short documents.
    Peak RSS of the stage within 10% (the old code held the whole document and its encodings: 45 bytes per
    input byte, 511 MB against 857 MB here), and the instances grow with the document."""
    peaks, metrics = {}, {}
    for mb in (5, 20):
        root = tmp_path_factory.mktemp(f"rss{mb}")
        make_tokenizer(root / "models/tokenizer")
        chunks = make_long_document_corpus(root / "data/corpus", n_words=mb * 180_000)
        write_params(root, create_pretraining_data={"max_seq_length": 64, "shard_size": 4, "dupe_factor": 1,
                                                    "num_proc": 1, "max_document_tokens": 4096})
        peaks[mb] = _stage_peak_rss_mb(root)
        metrics[mb] = json.loads((root / "metrics/pretraining_data.json").read_text())["train"]
        assert metrics[mb]["cut_sentences"] == chunks
        assert metrics[mb]["cut_documents"] == 1
        assert metrics[mb]["truncated_tokens"] < 0.05 * metrics[mb]["tokens"]
    assert peaks[20] < 1.1 * peaks[5], peaks
    assert metrics[20]["instances"] / metrics[5]["instances"] == pytest.approx(4, rel=0.02)
    assert metrics[20]["cut_document_pieces"] / metrics[5]["cut_document_pieces"] == pytest.approx(4, rel=0.02)


def test_whole_word_masking_in_the_stage_never_masks_part_of_a_word(workspace, monkeypatch):
    import datasets
    from transformers import AutoTokenizer

    run(workspace, monkeypatch, whole_word_masking=True, dupe_factor=3)
    tok = AutoTokenizer.from_pretrained(str(workspace / "models/tokenizer"))
    continuation = np.array([t.startswith("##") for t in tok.convert_ids_to_tokens(list(range(len(tok))))])
    train = datasets.load_from_disk(str(workspace / "data/pretraining/train"))
    words_split = 0
    for row in train:
        original = np.array(row["input_ids"], dtype=np.int64)
        original[row["masked_lm_positions"]] = row["masked_lm_ids"]
        chosen = np.zeros(original.size, dtype=bool)
        chosen[row["masked_lm_positions"]] = True
        cont = continuation[original]
        cont[1:] &= ~np.isin(original[:-1], [101, 102])  # a piece cut loose by truncation starts its own word
        cont[0] = False
        # a '##' piece is chosen exactly when the piece before it is
        assert np.array_equal(chosen[1:][cont[1:]], chosen[:-1][cont[1:]])
        words_split += int(cont.sum())
    assert words_split > 100  # the corpus has many multi-piece words


def test_pretrain_init_and_phases_decide_tokenizer_and_lengths(workspace, monkeypatch):
    """pretrain.init names the tokenizer (a checkpoint folder's own); each other phase length gets seq{L}/."""
    import datasets

    if not (workspace / "ckpt").exists():
        make_tokenizer(workspace / "ckpt")
    phases = [{"max_seq_length": 32, "fraction": 0.9}, {"max_seq_length": 64, "fraction": 0.1}]
    run(workspace, monkeypatch, pretrain={"init": "ckpt", "phases": phases})
    out = workspace / "data/pretraining"
    top = json.loads((out / "info.json").read_text())
    seq64 = json.loads((out / "seq64/info.json").read_text())
    assert top["tokenizer"] == seq64["tokenizer"] == "ckpt"
    assert top["pretrain_init"] == "ckpt"
    assert top["max_seq_length"] == 32
    assert seq64["max_seq_length"] == 64
    assert top["rules"]["max_predictions_per_seq"] == 20
    assert seq64["rules"]["max_predictions_per_seq"] == 40
    assert not (out / "seq32").exists()
    long = datasets.load_from_disk(str(out / "seq64/train"))
    lengths = [len(r) for r in long["input_ids"]]
    assert max(lengths) == 64
    assert np.mean(lengths) > 40
    metrics = json.loads((workspace / "metrics/pretraining_data.json").read_text())
    assert metrics["seq64"]["train"]["instances"] == len(long)
    assert metrics["train"]["instances"] > len(long)
