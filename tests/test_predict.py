"""``bert-pipeline predict`` on tiny models whose head biases determine the labels."""

from __future__ import annotations

import io
import json

import pytest

from bert_pipeline.errors import PipelineError
from stages.cli import main
from tests.tiny_models import save_classifier, save_reader, save_tagger, save_word_tagger


def _run(capsys, argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    main(["predict", *argv])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_sentiment_label_and_probability(tmp_path, capsys):
    pos = save_classifier(tmp_path / "pos", labels=("rotten", "fresh"), favour=1)
    neg = save_classifier(tmp_path / "neg", labels=("rotten", "fresh"), favour=0)
    out = _run(capsys, [str(pos), "a great film", "a boring plot"])
    assert [r["label"] for r in out] == ["fresh", "fresh"]
    # bias 5 vs 0 with a zero weight: p = e^5 / (e^5 + 1)
    assert out[0]["probability"] == pytest.approx(0.9933, abs=1e-4)
    assert out[1]["text"] == "a boring plot"
    assert [r["label"] for r in _run(capsys, [str(neg), "a great film"])] == ["rotten"]


def test_stdin_one_text_per_line(tmp_path, capsys, monkeypatch):
    pos = save_classifier(tmp_path / "pos", favour=1)
    out = _run(capsys, [str(pos)], stdin="good\n bad film \r\n", monkeypatch=monkeypatch)
    assert [(r["text"], r["label"]) for r in out] == [("good", "positive"), ("bad film", "positive")]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("argv", "stdin", "message"), [
    (["good", "  "], None, "predict: text 2 of 2 (arguments) is blank: give words, or leave it out"),
    (["", "good"], None, "predict: text 1 of 2 (arguments) is empty: give words, or leave it out"),
    (["--context", "bob met alice", "who?", "\t"], None,
     "predict: question 2 of 2 (arguments) is blank: give words, or leave it out"),
    (["--context", " ", "who?"], None, "predict: --context is empty: expected the passage a QA model answers from"),
    ([], "good\n\nbad\n", "predict: stdin line 2 is empty: expected one text per line; drop blank lines "
                          "(e.g. grep -v '^[[:space:]]*$')"),
    ([], "good\n \n", "predict: stdin line 2 is blank: expected one text per line; drop blank lines "
                      "(e.g. grep -v '^[[:space:]]*$')"),
    ([], "", "predict: no input: stdin is empty; give texts as arguments or one per line on stdin"),
    ([], _Terminal(), "predict: no input: give texts as arguments or pipe them on stdin, one per line "
                      "(stdin is a terminal)"),
])
def test_no_or_blank_input_is_refused_before_the_model_loads(tmp_path, monkeypatch, argv, stdin, message):
    """An empty or blank text was scored ([CLS] [SEP] gets a label); no text on a terminal waited silently. The
    model folder does not exist: the input is checked first."""
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", stdin if isinstance(stdin, io.StringIO) else io.StringIO(stdin))
    with pytest.raises(PipelineError) as info:
        main(["predict", str(tmp_path / "not-loaded"), *argv])
    assert str(info.value) == message


def test_context_for_a_model_that_reads_no_context_is_refused(tmp_path):
    """A new-user finding: ``--context`` given to a sentiment model was silently ignored."""
    pos = save_classifier(tmp_path / "pos")
    with pytest.raises(PipelineError, match=r"^--context: .*pos is a sequence-classification model \(classification\), which reads "
                                            r"texts only; --context is for a question-answering model"):
        main(["predict", str(pos), "good", "--context", "some passage"])


def test_ner_entities_with_character_offsets(tmp_path, capsys):
    per = save_tagger(tmp_path / "per", favour="B-PER")
    text = "Alice met Bobs"
    (rec,) = _run(capsys, [str(per), text])
    # every word starts a PER entity; the sub-words of "Bobs" (bob ##s) stay one word
    assert [(e["type"], e["text"], e["start"], e["end"]) for e in rec["entities"]] == [
        ("PER", "Alice", 0, 5), ("PER", "met", 6, 9), ("PER", "Bobs", 10, 14)]
    none = save_tagger(tmp_path / "none", favour="O")
    (rec,) = _run(capsys, [str(none), text])
    assert rec["entities"] == []


def test_ner_tags_a_long_text_to_its_end(tmp_path, capsys):
    """The issue's case: on a 10,000-character text the entity in the last 200 characters is found (the tagger
    reads 64-token windows; one window held the first ~300 characters)."""
    tagger = save_word_tagger(tmp_path / "alice", max_position_embeddings=64)
    text = "the film was good and the plot was boring . " * 230 + "bob met alice in paris ."
    assert len(text) >= 10_000
    (rec,) = _run(capsys, [str(tagger), text])
    start = text.rindex("alice")
    assert start > len(text) - 200
    assert [(e["type"], e["start"], e["end"]) for e in rec["entities"]] == [("PER", start, start + 5)]


def test_ner_entities_of_overlapping_windows_merge_without_duplicates(tmp_path, capsys):
    tagger = save_word_tagger(tmp_path / "alice", max_position_embeddings=64)
    words = ["alice" if i % 7 == 3 else "the" for i in range(400)]
    text = " ".join(words)
    (rec,) = _run(capsys, [str(tagger), "--max-seq-length", "32", "--doc-stride", "8", text])
    starts = [len(" ".join(words[:i])) + (1 if i else 0) for i, w in enumerate(words) if w == "alice"]
    assert [e["start"] for e in rec["entities"]] == starts
    assert all(e["text"] == "alice" for e in rec["entities"])
    # a stride beyond half the window is capped there: the same entities
    (capped,) = _run(capsys, [str(tagger), "--max-seq-length", "32", "--doc-stride", "30", text])
    assert capped["entities"] == rec["entities"]


def test_sentiment_says_when_it_read_only_the_beginning(tmp_path, capsys):
    pos = save_classifier(tmp_path / "pos", favour=1)
    short, long = _run(capsys, [str(pos), "--max-seq-length", "16", "a great film", "a great film " * 10])
    assert (short["tokens"], short["truncated"]) == (5, False)
    assert (long["tokens"], long["truncated"]) == (32, True)


def test_qa_answer_is_a_context_span(tmp_path, capsys):
    reader = save_reader(tmp_path / "qa")
    context = "alice met bob in paris and bob visited london"
    out = _run(capsys, [str(reader), "--context", context, "--max-seq-length", "16", "--doc-stride", "4",
                        "who met bob ?", "where ?"])
    for rec in out:
        assert rec["answer"]
        assert 0.0 < rec["score"] <= 1.0  # a probability, as Hugging Face's QA pipeline reports it
        assert isinstance(rec["logit_sum"], float)
        assert context[rec["start"]:rec["end"]] == rec["answer"]
        assert rec["answer"] in context
        assert "?" not in rec["answer"]  # never a span of the question
    # a long question leaves little room: the stride shrinks instead of failing
    (rec,) = _run(capsys, [str(reader), "--context", context, "--max-seq-length", "14", "--doc-stride", "8",
                           "who met bob in paris and london ?"])
    assert context[rec["start"]:rec["end"]] == rec["answer"] != ""
    assert rec["question_truncated"] is True  # 8 question tokens > 14 // 2: the output says it was cut
    assert rec["windows"] > 1
    assert out[0]["question_truncated"] is False
    with pytest.raises(PipelineError, match="needs --context"):
        main(["predict", str(reader), "who?"])


@pytest.mark.parametrize("config", [None, "{not json", "[1, 2]"])
def test_not_a_model_folder_is_one_line(tmp_path, config):
    target = tmp_path / "file.txt"
    target.write_text("x")
    if config is not None:
        target = tmp_path / "broken"
        target.mkdir()
        (target / "config.json").write_text(config)
    with pytest.raises(PipelineError, match=rf"^{target}/config.json: (not found|not a readable model config|architectures)"):
        main(["predict", str(target), "hello"])


def test_window_sizes_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", str(tmp_path), "--max-seq-length", "-5", "hello"])
    assert exit_info.value.code == 2
    assert "--max-seq-length: expected an int >= 1, got -5" in capsys.readouterr().err


def test_qa_score_is_hugging_face_pipelines_probability():
    """``score`` is what transformers' question-answering pipeline reports for the span (its ``select_starts_ends``,
    kept in transformers 5 for document QA): softmax of start and of end logits over the window's context tokens and
    [CLS], multiplied; the decoder still ranks by the logit sum (kept as ``logit_sum``)."""
    import numpy as np
    from transformers.pipelines.document_question_answering import select_starts_ends

    from bert_pipeline.tasks.qa import decode_qa

    rng = np.random.default_rng(0)
    offsets = [None, None, None, None, (0, 3), (4, 7), (8, 11), (12, 15), (16, 19), None]  # [CLS] q q [SEP] ctx [SEP]
    context = "aaa bbb ccc ddd eee"
    for _ in range(5):
        start, end = rng.normal(0, 3, 10), rng.normal(0, 3, 10)
        (span,) = decode_qa([context], [0], [offsets], [start], [end], n_best=10, max_answer_length=3)
        p_mask = np.array([[0 if k == 0 or o is not None else 1 for k, o in enumerate(offsets)]])
        starts, ends, scores, _ = select_starts_ends(start[None], end[None], p_mask, np.ones((1, 10), dtype=int),
                                                     top_k=30, max_answer_len=3)
        hf = {(int(s), int(e)): float(p) for s, e, p in zip(starts, ends, scores, strict=True)}
        chosen = next((s, e) for s in range(10) for e in range(10) if offsets[s] and offsets[e]
                      and (offsets[s][0], offsets[e][1]) == (span.start, span.end))
        assert span.probability == pytest.approx(hf[chosen], rel=1e-6)
        assert span.score == pytest.approx(start[chosen[0]] + end[chosen[1]])
        assert max(hf.values()) == pytest.approx(span.probability, rel=1e-6)  # one window: the same best span
