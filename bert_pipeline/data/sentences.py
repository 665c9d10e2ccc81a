"""Sentence splitting with spaCy's trained sentence segmenter, fed in bounded chunks.

The splitter is the ``senter`` component of the fetched ``en_core_web_sm`` 3.8.0 pipeline (a small CNN tagger
trained on OntoNotes/UD sentence boundaries; Honnibal et al. 2020), loaded without the other components, or its
dependency ``parser`` (more accurate on sentence-final abbreviations, about 6x slower). A text is cut into
chunks of at most ``chunk_chars`` characters at line breaks, else at a space, else hard (spaCy refuses texts
longer than ``nlp.max_length``, and a user's file may be one 10 MB line), and the chunks go through
``nlp.pipe`` in batches, optionally in several processes.

A few deterministic repairs follow the model (see :func:`repair_boundaries`); they fix the model's known
misses on news text: a sentence that ends with an abbreviation (``... in the U.K. The next ...``,
``... at 5 p.m. Students ...``) and numbered-list items.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from bert_pipeline.errors import PipelineError

log = logging.getLogger(__name__)

# Capitalised words that begin sentences and (almost) never follow an abbreviation inside a sentence.
STARTERS = frozenset(
    "The A An He She It They We I You This That These Those His Her Their Its Our My Your But And Yet So Then "
    "However Meanwhile Still There Here In On At As If When While After Before Since Although Though Also "
    "Many Most Some Other Others One Two Three No Not Now Today Yesterday Asked According What Why How Who".split()
)
# Abbreviations that precede a name or number: never end a sentence by our rule.
TITLES = frozenset(
    "mr. mrs. ms. dr. prof. sen. rep. gen. gov. lt. col. sgt. capt. cmdr. adm. maj. rev. st. mt. ft. no. "
    "vs. v. jr. sr. pres. supt. det. insp. hon. fr. sec. atty. messrs. mme. mlle.".split()
)
_CAN_END = frozenset("st. mt. ft. jr. sr. v. vs.".split())
CLOCK = frozenset({"a.m.", "p.m."})
TIME_ZONES = frozenset("ET EST EDT CT CST CDT MT MST MDT PT PST PDT GMT BST UTC CET Eastern Central Pacific "
                       "Mountain Greenwich".split())
_LIST_MARKER = re.compile(r"^(?:\(?(?:\d{1,3}|[A-Za-z]|[ivxlcdm]{1,6})[.)]|[-*\u2022\u2013\u2014])$")
_LEADING_PUNCT = frozenset({".", "!", "?", ",", ";", ":", ")", "]"})

PIPES = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "ner", "senter")


def load_splitter(model_dir: str | Path, method: str = "spacy_senter"):
    """Load the spaCy pipeline from ``model_dir`` with only the components sentence splitting needs.

    Args:
        method: ``spacy_senter`` (``senter`` only) or ``spacy_parser`` (``tok2vec`` + ``parser``).

    Raises:
        PipelineError: the model folder is missing or lacks the component.
    """
    import spacy

    model_dir = Path(model_dir)
    if not (model_dir / "config.cfg").is_file():
        raise PipelineError(f"{model_dir}: spaCy model folder not found (run `dvc repro fetch_data` first)")
    keep = {"spacy_senter": ("senter",), "spacy_parser": ("tok2vec", "parser")}[method]
    try:
        nlp = spacy.load(model_dir, exclude=[p for p in PIPES if p not in keep])
    except (OSError, ValueError) as exc:
        raise PipelineError(f"{model_dir}: cannot load the spaCy model ({exc})") from None
    if method == "spacy_senter":
        if "senter" not in nlp.component_names:
            raise PipelineError(f"{model_dir}: the spaCy model has no 'senter' component")
        nlp.enable_pipe("senter")
    return nlp


def chunk_text(text: str, chunk_chars: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``chunk_chars`` characters, whose concatenation is ``text``.

    Cuts go after the last line break in the window, else after the last space, else at ``chunk_chars``.
    """
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be >= 1")
    pieces = []
    start = 0
    n = len(text)
    while n - start > chunk_chars:
        end = start + chunk_chars
        cut = text.rfind("\n", start + 1, end)
        if cut < 0:
            cut = text.rfind(" ", start + 1, end)
        cut = end if cut < 0 else cut + 1
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def repair_boundaries(doc) -> list[int]:
    """Sentence start token indices of a spaCy ``Doc`` after deterministic repairs of the model's output.

    1. Split after an abbreviation token that ends in ``.`` (``U.K.``, ``Inc.``, ``p.m.``; never a title such as
       ``Mr.``/``Sen.``/``St.``) when the next word is a capitalised sentence starter (``The``, ``He``, ``But`` ...),
       or after ``a.m.``/``p.m.`` when any capitalised word other than a time zone follows.
    2. A sentence that begins with closing punctuation (``.``, ``)``) gives it to the previous sentence.
    3. A sentence that is only a list marker (``1.``, ``b)``, ``iv.``, ``•``) is joined to the next sentence.
    4. A sentence that ends with a title that always precedes a name or number (``Mr.``, ``Dr.``, ``No.`` before a number; not
       ``St.`` or ``Jr.``, which can end a sentence) is joined to the next sentence.
    """
    n = len(doc)
    starts = sorted({s.start for s in doc.sents} | {0}) if n else []
    start_set = set(starts)
    # 1. sentence-final abbreviations
    for i in range(n - 1):
        tok = doc[i]
        low = tok.lower_
        if not tok.text.endswith(".") or not tok.whitespace_ or low in TITLES or not any(c.isalpha() for c in low):
            continue
        j = i + 1
        while j < n and doc[j].is_space:
            j += 1
        if j >= n or j in start_set:
            continue
        nxt = doc[j].text
        if nxt in STARTERS or (low in CLOCK and nxt[:1].isupper() and nxt not in TIME_ZONES):
            start_set.add(j)
    # 2. leading closing punctuation moves back
    for s in sorted(start_set):
        if s == 0:
            continue
        j = s
        while j < n and (doc[j].text in _LEADING_PUNCT or doc[j].is_space):
            j += 1
        if j != s:
            start_set.discard(s)
            if j < n:
                start_set.add(j)
    # 3. lone list markers join the next sentence
    ordered = sorted(start_set)
    for k, s in enumerate(ordered[:-1]):
        nxt = ordered[k + 1]
        words = [t.text for t in doc[s:nxt] if not t.is_space]
        if len(words) <= 3 and _LIST_MARKER.match("".join(words)):
            start_set.discard(nxt)
    # 4. never end a sentence on a title
    for s in sorted(start_set):
        j = s - 1
        while j > 0 and doc[j].is_space:
            j -= 1
        if s == 0:
            continue
        abbr = doc[j].lower_
        if abbr == "." and j > 0 and not doc[j - 1].whitespace_:
            abbr = doc[j - 1].lower_ + "."  # "No" "." as spaCy tokenizes it
        if abbr in TITLES and abbr not in _CAN_END and (abbr != "no." or doc[s].like_num):
            start_set.discard(s)
    return sorted(start_set)


def doc_sentences(doc) -> list[str]:
    """The sentences of a spaCy ``Doc`` after :func:`repair_boundaries`, whitespace runs collapsed to a space."""
    starts = repair_boundaries(doc)
    out = []
    for k, s in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(doc)
        span = doc[s:end]
        text = " ".join(span.text.split())
        if text:
            out.append(text)
    return out


def _split_batch(nlp, texts: list[str], chunk_chars: int, batch_size: int) -> list[list[str]]:
    """Sentences of each text of a batch (one process): chunks through ``nlp.pipe``, regrouped per text."""
    owners: list[int] = []
    pieces: list[str] = []
    for i, text in enumerate(texts):
        for piece in chunk_text(text, chunk_chars):
            owners.append(i)
            pieces.append(piece)
    out: list[list[str]] = [[] for _ in texts]
    for owner, doc in zip(owners, nlp.pipe(pieces, batch_size=batch_size), strict=True):
        out[owner].extend(doc_sentences(doc))
    return out


_WORKER: dict = {}  # per worker process: the pipeline and settings, set by _init_worker


def _init_worker(nlp, chunk_chars: int, batch_size: int) -> None:
    _WORKER.update(nlp=nlp, chunk_chars=chunk_chars, batch_size=batch_size)


def _worker_batch(texts: list[str]) -> list[list[str]]:
    return _split_batch(_WORKER["nlp"], texts, _WORKER["chunk_chars"], _WORKER["batch_size"])


def _batches(texts: Iterable[str], chunk_chars: int, batch_size: int) -> Iterator[list[str]]:
    """Group texts into batches of about ``batch_size`` chunks (a long text forms a batch of its own)."""
    batch: list[str] = []
    size = 0
    for text in texts:
        batch.append(text)
        size += len(text) // chunk_chars + 1
        if size >= batch_size:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def split_documents(
    nlp, texts: Iterable[str], chunk_chars: int, batch_size: int = 64, n_process: int = 1, progress: bool = True,
    total: int | None = None,
) -> Iterator[list[str]]:
    """Yield the sentences of each text, in input order: one ``list[str]`` per text.

    Texts are cut with :func:`chunk_text`, so spaCy never sees more than ``chunk_chars`` characters at once;
    memory is bounded by about ``n_process * batch_size * chunk_chars`` characters in flight. Batches go through
    ``nlp.pipe(batch_size=...)``; with ``n_process > 1`` a process pool (each worker holding a copy of ``nlp``)
    splits whole batches and sends back only the sentence strings, in order, so the output does not depend on
    ``n_process``. A sentence that straddles a cut inside a line longer than ``chunk_chars`` is split there.

    Raises:
        PipelineError: ``chunk_chars`` above ``nlp.max_length``.
    """
    import multiprocessing

    from tqdm.auto import tqdm

    if chunk_chars > nlp.max_length:
        raise PipelineError(f"params.yaml: prepare_corpus.chunk_chars: expected <= {nlp.max_length} (spaCy max_length)")
    bar = tqdm(total=total, desc="sentences", unit="doc", disable=not progress, mininterval=2.0)
    batches = _batches(texts, chunk_chars, batch_size)
    if n_process <= 1:
        results: Iterator[list[list[str]]] = (_split_batch(nlp, b, chunk_chars, batch_size) for b in batches)
        pool = None
    else:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        pool = multiprocessing.get_context(method).Pool(n_process, _init_worker, (nlp, chunk_chars, batch_size))
        results = pool.imap(_worker_batch, batches)
    try:
        for batch in results:
            for sentences in batch:
                bar.update(1)
                yield sentences
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
            pool.join()
