"""Schema of ``prepare_corpus`` (sources, cleaning, sentence splitting) and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import Field, field_validator

from stages.params.base import Section, View, first_repeat


class FileSource(Section):
    """A user corpus on disk.

    ``path`` is a glob relative to the repository root. ``format``: ``txt`` (``unit: file`` = one document per
    file, ``unit: block`` = one document per blank-line-separated block), ``jsonl`` or ``parquet`` (one document
    per row, text in ``text_field``).
    """

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    path: str = Field(min_length=1)
    format: Literal["txt", "jsonl", "parquet"]
    text_field: str = "text"
    unit: Literal["file", "block"] = "file"


class HubSource(Section):
    """A Hugging Face dataset by name (needs the network; never used by defaults or tests)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    hf_dataset: str = Field(min_length=1)
    hf_config: str | None = None
    split: str = "train"
    text_field: str = "text"


CorpusSource = str | FileSource | HubSource


class PrepareCorpusParams(Section):
    """``prepare_corpus``: sources, cleaning, sentence splitting and the document-level split."""

    sources: list[CorpusSource] = Field(min_length=1)
    min_words: Annotated[int, annotated_types.Ge(0)]
    max_documents_per_source: Annotated[int, annotated_types.Ge(1)] | None
    max_document_chars: Annotated[int, annotated_types.Ge(1000)] | None
    validation_fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]
    split_seed: int
    sentence_splitter: Literal["spacy_senter", "spacy_parser", "blingfire"]
    chunk_chars: Annotated[int, annotated_types.Ge(1000), annotated_types.Le(1_000_000)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    num_proc: Annotated[int, annotated_types.Ge(1)]

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, value: list[CorpusSource]) -> list[CorpusSource]:
        if (repeated := first_repeat([s if isinstance(s, str) else s.name for s in value])) is not None:
            raise ValueError(f"prepare_corpus.sources: source names must be unique, got {repeated!r} twice")
        return value


class PrepareCorpusView(View):
    """What stage ``prepare_corpus`` reads."""

    prepare_corpus: PrepareCorpusParams
