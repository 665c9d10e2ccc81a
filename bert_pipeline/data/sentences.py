"""Sentence splitting with spaCy's trained sentence segmenter, fed in bounded chunks.

The splitter is the ``senter`` component of the fetched ``en_core_web_sm`` 3.8.0 pipeline (a small CNN tagger
trained on OntoNotes/UD sentence boundaries; Honnibal et al. 2020), loaded without the other components, or its
dependency ``parser`` (more accurate on sentence-final abbreviations, about 6x slower). A text is cut into
chunks of at most ``chunk_chars`` characters at line breaks, else at a space, else hard (spaCy refuses texts
longer than ``nlp.max_length``, and a user's file may be one 10 MB line), and the chunks go through
``nlp.pipe`` in batches (:func:`split_batch`; ``bert_pipeline.data.corpus.build_corpus`` runs it in worker
processes).

A few deterministic repairs follow the model (see :func:`repair_boundaries`); they fix the model's known
misses on news text: a sentence that ends with an abbreviation (``... in the U.K. The next ...``,
``... at 5 p.m. Students ...``) and numbered-list items.

The fast option, ``blingfire``, is Microsoft's Bling Fire sentence breaker (a compiled finite-state model,
about 20 MB/s on one core; https://github.com/microsoft/BlingFire) followed by the same rules applied to its
output strings (:func:`repair_sentences`); a blank line always ends a sentence. It needs no model files.
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


METHODS = ("spacy_senter", "spacy_parser", "blingfire")
"""The sentence splitters :func:`load_splitter` knows (``prepare_corpus.sentence_splitter``)."""


class RuleSplitter:
    """The ``blingfire`` splitter: Bling Fire's sentence breaker, then :func:`repair_sentences`.

    It stands where a spaCy ``Language`` does in :func:`split_batch` (``max_length``, ``pipe``); it is
    picklable and holds no model state.
    """

    max_length = 1 << 62  # no limit of its own: chunk_text still bounds what one call sees

    def pipe(self, texts: Iterable[str], batch_size: int = 64) -> Iterator[list[str]]:
        return (rule_sentences(t) for t in texts)


def load_splitter(model_dir: str | Path, method: str = "spacy_senter"):
    """Load the sentence splitter ``method`` (one of :data:`METHODS`).

    Args:
        model_dir: the spaCy pipeline folder (read by the spaCy methods only).
        method: ``spacy_senter`` (``senter`` only), ``spacy_parser`` (``tok2vec`` + ``parser``), or
            ``blingfire`` (:class:`RuleSplitter`, no model folder needed).

    Raises:
        PipelineError: the model folder is missing or lacks the component.
        ValueError: an unknown method.
    """
    if method not in METHODS:
        raise ValueError(f"sentence splitter: expected one of {METHODS}, got {method!r}")
    if method == "blingfire":
        return RuleSplitter()
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


_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
_CANDIDATE_CUT = re.compile(r"[.!?][\"'\u201d\u2019)\]]* ")
_LEADING_WORD = re.compile(r"[\w'-]*")
_LOWER_START = re.compile(r"[\"\u201c\u2018'][a-z]")
_ENDED_WORD = re.compile(r"[\"'\u201c\u2018(]*([A-Za-z][a-z]+)[.!?]+[\"'\u201d\u2019)\]]*")
# Lowercase abbreviations that are not sentence ends before a quote or a title (rule 6 of repair_sentences).
LOWER_ABBREVIATIONS = frozenset("etc approx incl cf al esp viz ca jan feb mar apr jun jul aug sep sept oct nov dec "
                                "inc corp ltd co bros dept univ".split())
_TITLE_CASED = frozenset(t.capitalize() for t in TITLES if t[:-1].isalpha())
_LEADING_CLOSERS = re.compile(r"^[.!?,;:)\]]+")
_OPEN_QUOTES = "\"'\u201c\u2018(["
_QUESTION_OR_EXCLAMATION_END = re.compile(r"[?!][\"'\u201d\u2019)\]]*$")


def rule_sentences(text: str) -> list[str]:
    """Sentences of ``text`` by Bling Fire's sentence breaker and :func:`repair_sentences`.

    A blank line (two line breaks with only spaces or tabs between) always ends a sentence; inside a paragraph
    line breaks are spaces. Sentences come back with whitespace runs collapsed to one space, as from
    :func:`doc_sentences`; every non-space character of ``text`` is in exactly one sentence, in order.
    """
    import blingfire

    out: list[str] = []
    for paragraph in _BLANK_LINE.split(text):
        if paragraph.strip():
            spans = [" ".join(s.split()) for s in blingfire.text_to_sentences(paragraph).split("\n")]
            out.extend(repair_sentences([s for s in spans if s]))
    return out


def _ends_with_title(sentence: str, following: str) -> bool:
    """Whether ``sentence`` ends with a title that precedes a name or number (rule 4 of repair_boundaries)."""
    last = sentence.rsplit(" ", 1)[-1].lower()
    if last not in TITLES or last in _CAN_END:
        return False
    return last != "no." or following[:1].isdigit()


def repair_sentences(spans: list[str]) -> list[str]:
    """The rules of :func:`repair_boundaries`, applied to sentence strings (single-spaced, non-empty).

    1. Split after an abbreviation that ends in ``.`` (never a title) before a capitalised sentence starter,
       and after ``a.m.``/``p.m.`` before a capitalised word that is not a time zone.
    2. Leading closing punctuation goes to the previous sentence.
    3. A sentence that is only a list marker (``1.``, ``b)``, ``iv.``, ``•``) joins the next one.
    4. A sentence that ends with a title (``Mr.``, ``Dr.``; ``No.`` before a number) joins the next one.
    5. A sentence that begins with a lowercase letter after one that ends in ``?`` or ``!`` (and closing quotes)
       joins it: ``"Are you coming?" she asked.`` is one sentence, as in spaCy's model.
    6. Split after a word of letters (not a title, ``etc.``, ``Feb.`` or ``Inc.``: :data:`LOWER_ABBREVIATIONS`)
       ending in ``.``, ``!`` or ``?`` before an opening quote and a lowercase letter (quotes in scraped news often
       lost their capital: ``... Golembo said. "damaging winds ...``) or before a title (``... last week. Dr.
       William ...``), two cases Bling Fire keeps in one sentence.
    """
    pieces: list[str] = []
    for span in spans:  # 1 and 6: the cuts inside a span
        start = 0
        for match in _CANDIDATE_CUT.finditer(span):
            cut = match.end() - 1
            after = span.find(" ", match.end())
            if _cut_between(span[span.rfind(" ", 0, match.start()) + 1:cut],
                            span[match.end():after if after >= 0 else len(span)]):
                pieces.append(span[start:cut])
                start = cut + 1
        pieces.append(span[start:])
    out: list[str] = []
    join_next = False
    for piece in pieces:
        if out:
            closers = _LEADING_CLOSERS.match(piece)  # 2
            if closers:
                out[-1] += closers.group()
                piece = piece[closers.end():].lstrip()
                if not piece:
                    continue
            previous = out[-1]
            lower_after_question = piece.lstrip(_OPEN_QUOTES)[:1].islower() and bool(
                _QUESTION_OR_EXCLAMATION_END.search(previous))
            if join_next or _ends_with_title(previous, piece) or lower_after_question:  # 3, 4, 5
                out[-1] = f"{previous} {piece}"
                join_next = _is_list_marker(out[-1])
                continue
        out.append(piece)
        join_next = _is_list_marker(piece)
    return out


def _cut_between(token: str, following: str) -> bool:
    """Rules 1 and 6 of :func:`repair_sentences`: a sentence ends after ``token`` (which ends in ``.``, ``!`` or
    ``?`` and closing quotes) before the word ``following``."""
    if token.endswith(".") and token.lower() not in TITLES and any(c.isalpha() for c in token):
        word = _LEADING_WORD.match(following).group()
        if word in STARTERS or (token in CLOCK and word[:1].isupper() and word not in TIME_ZONES):
            return True
    ended = _ENDED_WORD.fullmatch(token)
    if ended is None or ended.group(1).lower() in LOWER_ABBREVIATIONS or f"{ended.group(1).lower()}." in TITLES:
        return False
    return bool(_LOWER_START.match(following)) or following in _TITLE_CASED


def _is_list_marker(sentence: str) -> bool:
    words = sentence.split(" ")
    return len(words) <= 3 and bool(_LIST_MARKER.match("".join(words)))


def split_batch(nlp, texts: list[str], chunk_chars: int, batch_size: int) -> list[list[str]]:
    """Sentences of each text of a batch, in this process: chunks (:func:`chunk_text`) through ``nlp.pipe`` (or
    :class:`RuleSplitter`), regrouped per text: one ``list[str]`` per text, in order."""
    owners: list[int] = []
    pieces: list[str] = []
    for i, text in enumerate(texts):
        for piece in chunk_text(text, chunk_chars):
            owners.append(i)
            pieces.append(piece)
    out: list[list[str]] = [[] for _ in texts]
    rules = isinstance(nlp, RuleSplitter)
    for owner, doc in zip(owners, nlp.pipe(pieces, batch_size=batch_size), strict=True):
        out[owner].extend(doc if rules else doc_sentences(doc))
    return out
