"""Readers of the optional Debian packages' texts, one document per chapter, file or group of entries:
Jane Austen's novels and tidytext's Project Gutenberg books (R data, read with :mod:`rdata`), the Linux kernel's
documentation (reST reduced to prose), WordNet's glosses (wndb) and the GCIDE dictionary (dictd).

Each reader is ``read(name, path, counter)`` (:class:`bert_pipeline.data.corpus_readers.ReaderSpec`) and yields
:class:`bert_pipeline.data.corpus_files.RawDocument`; doc ids: ``jane_austen:Rdata.rdb:novel=emma:chapter=1:line=11``,
``gutenberg_books:books.rda:gutenberg_id=36:chapter=1:line=18``, ``linux_docs:admin-guide/README.rst.gz``,
``wordnet_glosses:data.noun:lexfile=noun.animal:offset=00015388``, ``gcide:gcide.dict.dz:entry=0:offset=3656``.
Lines and entries count from 0, chapters from 1.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from bert_pipeline.data.corpus_files import RawDocument, ReadCounter, decode_bytes, read_text_file
from bert_pipeline.errors import PipelineError


def _paragraphs(lines: Iterable[str]) -> list[str]:
    """Blank-line-separated paragraphs of hard-wrapped lines, each unwrapped into one line (its lines joined by a
    space), so that a line break in a document is a paragraph break, as in the other sources."""
    out: list[str] = []
    current: list[str] = []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


_CHAPTER = re.compile(r"^\s*chapter\s+[\w-]+\.?\s*$", re.IGNORECASE)
_PART = re.compile(r"^\s*(volume|book|part)\s+[\w-]+\s*$", re.IGNORECASE)


def _chapters(lines: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    """``(chapter, heading line, text)`` for each chapter of a novel given as its lines (Project Gutenberg layout).

    A chapter starts at a line that is only ``CHAPTER`` and a number (``CHAPTER XIX``, ``Chapter 1``,
    ``CHAPTER ONE``: the rule of janeaustenr's and tidytext's own chapter counts) and runs to the next one; the
    heading line itself and lines that are only ``VOLUME II`` / ``BOOK ONE`` / ``PART ONE`` are left out, and
    whatever precedes the first chapter (title page, epigraph) too. Chapters count from 1, in order (Emma's three
    volumes each restart at ``CHAPTER I``); ``heading line`` counts from 0.
    """
    heads = [i for i, line in enumerate(lines) if _CHAPTER.match(line)]
    for number, (start, end) in enumerate(zip(heads, heads[1:] + [len(lines)], strict=True), start=1):
        body = [line for line in lines[start + 1:end] if not _PART.match(line)]
        yield number, start, "\n".join(_paragraphs(body))


def _r_strings(values: Iterable[object]) -> list[str]:
    """An R character vector (as :mod:`rdata` converts it) as Python strings; ``NA`` becomes ``""``."""
    return ["" if v is None or (isinstance(v, float) and v != v) else str(v) for v in values]


def _import_rdata(path: Path):
    """The ``rdata`` package (R data files), or a one-line error naming what needs it and the fix."""
    try:
        import rdata
    except ImportError:
        raise PipelineError(f"{path}: reading R data needs the rdata package (Python >= 3.11): pip install "
                            "rdata==1.1.0, or drop the R-data sources from prepare_corpus.sources") from None
    return rdata


def read_r_lazyload(path: Path) -> Iterator[tuple[str, object]]:
    """Yield ``(name, value)`` for each object of an R lazy-load database (``Rdata.rdb`` + ``Rdata.rdx``).

    An installed R package keeps its data sets so (``PACKAGE/data/Rdata.rdb``): the ``.rdx`` index is a gzip-compressed R
    serialization (read with :func:`rdata.read_rds`) of ``variables`` (name -> byte offset and length in the
    ``.rdb``) and ``compressed``; each ``.rdb`` record is a 4-byte big-endian length, then the zlib-compressed R
    serialization of one object, parsed with :func:`rdata.parser.parse_data` and converted with
    :func:`rdata.conversion.convert` (R Core Team, *R Internals*, "Lazy loading"). Objects come in the index's
    order; rdata's warnings about the bare stream's file type are silenced.

    Raises:
        PipelineError: the index is missing or not a lazy-load index, or the database is compressed otherwise
            than with zlib (R's ``compress = TRUE``, what R uses for packages).
    """
    import struct
    import warnings
    import zlib

    rdata = _import_rdata(path)

    index_path = path.with_suffix(".rdx")
    if not index_path.is_file():
        raise PipelineError(f"{index_path}: expected the R lazy-load index beside {path.name} (run `dvc repro "
                            "fetch_data`)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = rdata.read_rds(index_path)
        variables = index.get("variables") if isinstance(index, dict) else None
        compressed = index.get("compressed") if isinstance(index, dict) else None
        if not isinstance(variables, dict) or compressed is None:
            raise PipelineError(f"{index_path}: expected an R lazy-load index (variables, compressed), got "
                                f"{type(index).__name__}")
        if list(map(int, compressed)) != [1]:
            raise PipelineError(f"{index_path}: expected a zlib-compressed lazy-load database (compressed TRUE), "
                                f"got compressed={list(compressed)}")
        with open(path, "rb") as fh:
            for name, (offset, length) in variables.items():
                fh.seek(int(offset))
                record = fh.read(int(length))
                size = struct.unpack(">I", record[:4])[0]
                data = zlib.decompress(record[4:])
                if len(data) != size:
                    raise PipelineError(f"{path}: object {name}: expected {size} bytes, got {len(data)}")
                yield str(name), rdata.conversion.convert(rdata.parser.parse_data(data))


def read_jane_austen(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """Jane Austen's six novels from janeaustenr's data (Debian ``r-cran-janeaustenr``): one document per chapter.

    ``path`` is the package's lazy-load database ``Rdata.rdb`` (:func:`read_r_lazyload`), whose objects ``emma``,
    ``mansfieldpark``, ``northangerabbey``, ``persuasion``, ``prideprejudice``, ``sensesensibility`` are character
    vectors of the novels' lines (Project Gutenberg's texts, hard-wrapped). Chapters: :func:`_chapters`; a
    chapter's paragraphs are unwrapped into one line each. Doc id ``NAME:Rdata.rdb:novel=emma:chapter=1:line=11``
    (``line``: the heading's index in the vector). The texts are valid UTF-8 (``counter`` is left as it is).
    """
    for novel, lines in read_r_lazyload(path):
        for chapter, line, text in _chapters(_r_strings(lines)):
            yield RawDocument(f"{name}:{path.name}:novel={novel}:chapter={chapter}:line={line}", name, text)


GUTENBERG_SKIP = frozenset({1342})
"""Project Gutenberg ids of tidytext's books left out: 1342 is Pride and Prejudice, source ``jane_austen``."""


def read_gutenberg_books(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """The Project Gutenberg books of tidytext's ``extdata/books.rda`` (Debian ``r-cran-tidytext``): one document
    per chapter (:func:`_chapters`).

    ``path`` is the ``.rda`` file (read with :func:`rdata.read_rda`), a data frame ``books`` of lines with columns
    ``gutenberg_id``, ``text``, ``title``: The War of the Worlds (36), Twenty Thousand Leagues under the Sea (164),
    Great Expectations (1400); Pride and Prejudice (1342) is skipped (:data:`GUTENBERG_SKIP`). Doc id
    ``NAME:books.rda:gutenberg_id=36:chapter=1:line=18`` (``line`` counts the book's own lines from 0).

    Raises:
        PipelineError: the file holds no ``books`` data frame with those columns.
    """
    import warnings

    rdata = _import_rdata(path)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = rdata.read_rda(path).get("books")
    columns = ("gutenberg_id", "text", "title")
    if frame is None or any(c not in getattr(frame, "columns", ()) for c in columns):
        raise PipelineError(f"{path}: expected a data frame 'books' with columns {', '.join(columns)}")
    ids = [int(v) for v in frame["gutenberg_id"].tolist()]
    texts = _r_strings(frame["text"].tolist())
    start = 0
    while start < len(ids):
        end = start
        while end < len(ids) and ids[end] == ids[start]:
            end += 1
        if ids[start] not in GUTENBERG_SKIP:
            for chapter, line, text in _chapters(texts[start:end]):
                yield RawDocument(f"{name}:{path.name}:gutenberg_id={ids[start]}:chapter={chapter}:line={line}",
                                  name, text)
        start = end


# reStructuredText, reduced to its prose (the Linux kernel's Documentation/ is Sphinx reST, some plain text).
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+_.:])\1{2,}\s*$")
_RST_TABLE = re.compile(r"^\s*(\+[-=+]{2,}|=+( +=+)+\s*$|\|.*\|\s*$)")
_RST_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+(?:\|[^|]+\|\s+)?([\w:-]+)::")
_RST_COMMENT = re.compile(r"^(\s*)\.\.(\s|$)")
_RST_FIELD = re.compile(r"^\s*:[\w -]+:(\s|$)")
_RST_BULLET = re.compile(r"^\s*([-*+\u2022]|\d+[.)]|#\.|\(?[a-z]\))\s+")
_RST_ROLE = re.compile(r":[\w:+-]+:`([^`<]*?)\s*(?:<[^`>]*>)?`")
_RST_LINK = re.compile(r"`([^`<]*?)\s*(?:<[^`>]*>)?`__?")
_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_EMPHASIS = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*]*?)\*{1,2}(?![\w*])")
_RST_INTERPRETED = re.compile(r"`([^`]+)`")
_RST_REF = re.compile(r"(?<=\w)_(?=[\s.,;:)]|$)")
_PROSE_DIRECTIVES = frozenset("note warning important tip hint attention caution danger error admonition seealso "
                              "topic sidebar".split())
_CODE_LINE = re.compile(r"([;{}]|\*/|\\)\s*$|^\s*(#include|#define|/\*|//|\$ |# |0x[0-9a-f]+\b)")


def _indent(line: str) -> int:
    """Columns of leading white space (tabs to 8); a blank line is infinitely indented."""
    line = line.expandtabs(8)
    return len(line) - len(line.lstrip()) if line.strip() else 10**9


def _looks_like_code(lines: Sequence[str]) -> bool:
    """A paragraph of code, a device-tree node or ASCII art rather than prose: at least 30% of its lines end like
    code (``;`` ``{`` ``}``, ...) or start like a preprocessor line, comment or prompt, or a third of its
    non-space characters are neither letters nor digits."""
    if not lines:
        return False
    code = sum(1 for line in lines if _CODE_LINE.search(line))
    chars = "".join("".join(line.split()) for line in lines)
    symbols = sum(1 for ch in chars if not ch.isalnum())
    return code >= 0.3 * len(lines) or (len(chars) > 0 and symbols > len(chars) / 3)


def rst_to_prose(text: str) -> str:
    """Reduce a reStructuredText (or plain-text) document to its prose: one line per paragraph.

    Dropped: comments (``.. SPDX...``, ``.. _label:``) and directives with their indented bodies (``code-block``,
    ``kernel-doc``, ``toctree``, ``table``, images, ...) except the admonitions, whose body is prose (``note``,
    ``warning``, ``seealso``, ...); literal blocks (the indented block after a line ending ``::``, the ``::``
    becoming ``:``); tables (any paragraph with a grid or simple table line); field lists (``:Author: ...``);
    section adornments (title lines stay, as paragraphs of their own); paragraphs that look like code or ASCII
    art (:func:`_looks_like_code`). Inline markup keeps its text: ``:c:func:`foo``` -> ``foo``,
    ```title <url>`_`` -> ``title``, ````literal```` -> ``literal``, ``*emphasis*`` -> ``emphasis``. List items
    start paragraphs of their own, without their bullets.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    skip_below: int | None = None  # drop lines indented deeper than this (a directive's or literal block's body)
    literal_at: int | None = None  # the indentation of a paragraph that ended with "::"
    for line in lines:
        ind = _indent(line)
        if skip_below is not None:
            if not line.strip() or ind > skip_below:
                continue
            skip_below = None
        if literal_at is not None and line.strip():
            if ind > literal_at:
                skip_below, literal_at = literal_at, None
                continue
            literal_at = None
        directive = _RST_DIRECTIVE.match(line)
        if directive:
            if directive.group(2).lower() in _PROSE_DIRECTIVES:
                rest = line[directive.end():].strip()
                kept.extend(["", rest] if rest else [""])
            else:
                skip_below = len(directive.group(1))
            continue
        comment = _RST_COMMENT.match(line)
        if comment:
            skip_below = len(comment.group(1))
            continue
        if _RST_ADORNMENT.match(line) or _RST_FIELD.match(line):
            kept.append("")
            continue
        if line.rstrip().endswith("::"):  # "text::" -> "text:", "text ::" -> "text", "::" alone -> nothing
            body = line.rstrip()[:-2]
            line = body.rstrip() if not body.strip() or body[-1].isspace() else body + ":"
            literal_at = ind
        bullet = _RST_BULLET.match(line)
        if bullet:
            kept.append("")
            line = line[bullet.end():]
        kept.append(line)
    out: list[str] = []
    block: list[str] = []
    for line in kept + [""]:
        if line.strip():
            block.append(line)
            continue
        if block and not any(_RST_TABLE.match(b) for b in block) and not _looks_like_code(block):
            out.append(_rst_inline(" ".join(b.strip() for b in block)))
        block = []
    return "\n".join(p for p in out if p.strip())


def _rst_inline(text: str) -> str:
    """reST inline markup -> its text (see :func:`rst_to_prose`)."""
    text = _RST_ROLE.sub(lambda m: m.group(1), text)
    text = _RST_LITERAL.sub(lambda m: m.group(1), text)
    text = _RST_LINK.sub(lambda m: m.group(1), text)
    text = _RST_INTERPRETED.sub(lambda m: m.group(1), text)
    text = _RST_EMPHASIS.sub(lambda m: m.group(1), text)
    return _RST_REF.sub("", text).strip()


def read_linux_docs(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """The Linux kernel's documentation (Debian ``linux-doc-6.1``, ``Documentation/``): one document per file.

    ``path`` is the ``Documentation`` folder as ``fetch_data`` extracts it: ``*.rst.gz`` (Sphinx reST) and
    ``*.txt.gz`` (mostly device-tree bindings), gzipped as Debian ships them (uncompressed ``.rst``/``.txt`` are
    read too), in sorted path order, each reduced to prose by :func:`rst_to_prose`. Doc id
    ``NAME:admin-guide/README.rst.gz`` (the path under ``Documentation/``). Invalid UTF-8 bytes are replaced and
    counted in ``counter``.
    """
    suffixes = (".rst.gz", ".txt.gz", ".rst", ".txt")
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    for file in files:
        text = rst_to_prose(read_text_file(file, counter))
        yield RawDocument(f"{name}:{file.relative_to(path).as_posix()}", name, text)


WORDNET_LEXFILES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body noun.cognition "
    "noun.communication noun.event noun.feeling noun.food noun.group noun.location noun.motive noun.object "
    "noun.person noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation noun.shape "
    "noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication verb.competition "
    "verb.consumption verb.contact verb.creation verb.emotion verb.motion verb.perception verb.possession "
    "verb.social verb.stative verb.weather adj.ppl"
).split()
"""WordNet 3.0's lexicographer files by number (``lex_filenum``; lexnames(5WN))."""

SYNSETS_PER_DOCUMENT = 50
GCIDE_ENTRIES_PER_DOCUMENT = 25
_WN_MARKER = re.compile(r"\((a|p|ip)\)$")


def _wordnet_synset(line: str) -> tuple[int, str, str] | None:
    """``(lex_filenum, offset, text)`` of one line of a WordNet ``data.*`` file, or None for a licence line.

    The line is ``offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt ... | gloss`` (wndb(5WN); ``w_cnt`` in
    hex). The text is the synset's words (underscores as spaces, adjective markers ``(a)`` ``(p)`` ``(ip)``
    dropped), a colon, and the gloss, its first letter upper case and ended by a full stop when it has no sentence
    end of its own (glosses have none, and the sentence splitter reads neither a line break nor a lower-case start
    as a boundary): ``River: a large natural stream of water (larger than a creek); "the river was navigable for
    50 miles".``
    """
    if line.startswith("  ") or not line.strip():
        return None
    head, sep, gloss = line.partition(" | ")
    fields = head.split()
    if not sep or len(fields) < 6:
        raise PipelineError(f"WordNet data line without a gloss: {line[:60]!r} (expected wndb(5WN) layout)")
    count = int(fields[3], 16)
    words = [_WN_MARKER.sub("", w).replace("_", " ") for w in fields[4:4 + 2 * count:2]]
    gloss = gloss.strip()
    end = "" if gloss.endswith((".", "!", "?")) else "."  # a sentence end, so that the splitter sees one per synset
    text = f"{', '.join(words)}: {gloss}{end}"
    return int(fields[1]), fields[0], text[:1].upper() + text[1:]


def read_wordnet_glosses(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """WordNet 3.0's synsets with their glosses (Debian ``wordnet-base``): one document per
    :data:`SYNSETS_PER_DOCUMENT` consecutive synsets of one lexicographer file, one line per synset
    (:func:`_wordnet_synset`).

    ``path`` is the folder with ``data.noun``, ``data.verb``, ``data.adj``, ``data.adv`` (read in that order;
    the licence header lines are skipped). A data file keeps each lexicographer file's synsets together, in the
    order of its source (related senses side by side), so a group is topically coherent: ``noun.animal``'s
    animals, ``verb.motion``'s ways of moving; 50 synsets are 600-900 words, about a news article. A whole
    lexicographer file would be one document of up to 200,000 words (cut by later stages anyway), and the
    document-level split would then hold out whole domains. Doc id
    ``NAME:data.noun:lexfile=noun.animal:offset=00015388`` (the first synset's byte offset: its WordNet id).

    Raises:
        PipelineError: a data file is missing, or a line is not in wndb(5WN) layout.
    """
    for pos in ("noun", "verb", "adj", "adv"):
        file = path / f"data.{pos}"
        if not file.is_file():
            raise PipelineError(f"{file}: WordNet data file not found (run `dvc repro fetch_data`)")
        group: list[str] = []
        first, lexfile = "", -1
        for lex, offset, text in _wordnet_synsets(file, counter):
            if group and (lex != lexfile or len(group) >= SYNSETS_PER_DOCUMENT):
                yield _wordnet_document(name, file, lexfile, first, group)
                group = []
            if not group:
                first, lexfile = offset, lex
            group.append(text)
        if group:
            yield _wordnet_document(name, file, lexfile, first, group)


def _wordnet_synsets(file: Path, counter: ReadCounter) -> Iterator[tuple[int, str, str]]:
    """:func:`_wordnet_synset` of each line of a WordNet data file, licence lines skipped (read line by line)."""
    with open(file, "rb") as fh:
        for raw in fh:
            line, n = decode_bytes(raw)
            counter.replaced_bytes += n
            synset = _wordnet_synset(line.rstrip("\n"))
            if synset is not None:
                yield synset


def _wordnet_document(name: str, file: Path, lexfile: int, first: str, group: list[str]) -> RawDocument:
    lex = WORDNET_LEXFILES[lexfile] if 0 <= lexfile < len(WORDNET_LEXFILES) else str(lexfile)
    return RawDocument(f"{name}:{file.name}:lexfile={lex}:offset={first}", name, "\n".join(group))


_B64 = {ch: i for i, ch in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_GCIDE_PRON = re.compile(r"\\[^\\\n]*\\(\s*\([^()\n]*\))?")  # \\Laz`a*ret"\\ (l[a^]z`[.a]*r[e^]t")
_GCIDE_BRACKET = re.compile(r"\[[^\[\]]*\]")
_GCIDE_BRACE = re.compile(r"\{([^{}]*)\}")
_GCIDE_TRAILER = re.compile(r"\]\s*[^\s\[\]]+\s*$")  # "[1913 Webster] Lazaret": the next headword, a stray
_GCIDE_AUTHOR = re.compile(r"\s*--[A-Z][\w.,' &-]{0,40}?\.?\s*$", re.MULTILINE)


def _dictd_number(text: str) -> int:
    """A dictd index number (base 64, digits ``A-Za-z0-9+/``; dictfmt(1))."""
    value = 0
    for ch in text:
        value = value * 64 + _B64[ch]
    return value


def gcide_entry_text(entry: str) -> str:
    """One GCIDE entry (dictd text) reduced to prose: pronunciations ``\\Cho*reg"ra*phy\\`` (with a parenthesised
    respelling after one), everything in square brackets (etymologies, source tags ``[1913 Webster]``, usage
    labels, the accent codes ``[a^]``) and a stray word after an entry's last tag removed, cross references
    ``{choreography}`` kept as their words, quotation attributions ``--Shak.`` at a line's end dropped; one line
    per paragraph (sense). ``Choregraphy, n. 1. The art of representing dancing by signs ...``."""
    entry = _GCIDE_TRAILER.sub("]", _GCIDE_PRON.sub("", entry))
    previous = None
    while previous != entry:  # innermost brackets first: an etymology may nest a [see ...]
        previous, entry = entry, _GCIDE_BRACKET.sub("", entry)
    entry = _GCIDE_BRACE.sub(lambda m: m.group(1), entry)
    entry = _GCIDE_AUTHOR.sub("", entry)
    paragraphs = [re.sub(r"\s+([,.;:])", r"\1", p) for p in _paragraphs(entry.split("\n"))]
    return "\n".join(p for p in paragraphs if p.strip(" ,.;:"))


def read_gcide(name: str, path: Path, counter: ReadCounter) -> Iterator[RawDocument]:
    """The GNU Collaborative International Dictionary of English (Debian ``dict-gcide``): one document per
    :data:`GCIDE_ENTRIES_PER_DOCUMENT` consecutive entries, in the dictionary's (alphabetical) order, each entry
    a paragraph per sense (:func:`gcide_entry_text`).

    ``path`` is the dictd data ``gcide.dict.dz`` (dictzip: gzip-readable), with its index ``gcide.index`` beside
    it: one line per headword, ``headword TAB offset TAB length`` in dictd's base 64, byte offsets into the
    uncompressed data. Entries are the distinct (offset, length) pairs, in offset order (several headwords may
    share one), read in one forward pass (bounded memory); the ``00-database-*`` records are skipped. Twenty-five
    entries are about 800 words; one entry alone is often a line, a letter (``A``..``Z``, 1.5 MB) far too much.
    Doc id ``NAME:gcide.dict.dz:entry=0:offset=3656`` (the first entry's number and byte offset).

    Raises:
        PipelineError: the index is missing or a line of it is not ``headword TAB offset TAB length``.
    """
    index = path.with_name("gcide.index")
    if not index.is_file():
        raise PipelineError(f"{index}: expected the dictd index beside {path.name} (run `dvc repro fetch_data`)")
    spans: set[tuple[int, int]] = set()
    with open(index, "rb") as fh:
        for line_no, raw in enumerate(fh):
            line, _ = decode_bytes(raw.rstrip(b"\n"))
            parts = line.split("\t")
            if len(parts) != 3 or not all(ch in _B64 for ch in parts[1] + parts[2]):
                raise PipelineError(f"{index}:{line_no + 1}: expected 'headword TAB offset TAB length' (dictd index)")
            if not parts[0].startswith("00-"):
                spans.add((_dictd_number(parts[1]), _dictd_number(parts[2])))
    group: list[str] = []
    first = (0, 0)
    with gzip.open(path, "rb") as fh:
        for number, (offset, length) in enumerate(sorted(spans)):
            if not group:
                first = (number, offset)
            fh.seek(offset)  # forward only: offsets ascend
            entry, n = decode_bytes(fh.read(length))
            counter.replaced_bytes += n
            text = gcide_entry_text(entry)
            if text:
                group.append(text)
            if len(group) >= GCIDE_ENTRIES_PER_DOCUMENT:
                yield RawDocument(f"{name}:{path.name}:entry={first[0]}:offset={first[1]}", name, "\n".join(group))
                group = []
    if group:
        yield RawDocument(f"{name}:{path.name}:entry={first[0]}:offset={first[1]}", name, "\n".join(group))
