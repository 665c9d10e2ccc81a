"""Schema of ``prepare_tasks`` and the stage's view."""

from __future__ import annotations

from typing import Annotated, Literal

import annotated_types
from pydantic import Field, model_validator

from bert_pipeline import tasks
from stages.params.base import Section, View

TASK_KINDS = tuple(tasks.KINDS)
"""The kinds a user task may declare: the registered ones (:data:`bert_pipeline.tasks.KINDS`)."""


class SentimentTaskParams(Section):
    """``prepare_tasks.sentiment``: Rotten Tomatoes snippets split by film (fractions of examples)."""

    validation_fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(0.5)]
    test_fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(0.5)]


class SplitSizes(Section):
    """Most examples per split (fewer when the source has fewer)."""

    train: Annotated[int, annotated_types.Ge(1)]
    validation: Annotated[int, annotated_types.Ge(1)]
    test: Annotated[int, annotated_types.Ge(1)]


class NerTaskParams(Section):
    """``prepare_tasks.ner``: silver BIO labels from the spaCy model over corpus sentences."""

    entity_types: list[str] = Field(min_length=1)
    other_types: Literal["drop", "misc"]
    sentences: SplitSizes
    min_words: Annotated[int, annotated_types.Ge(1)]
    max_words: Annotated[int, annotated_types.Ge(1)]


class QaTaskParams(Section):
    """``prepare_tasks.qa``: cloze questions (Hermann et al. 2015) from news headlines, SQuAD layout."""

    answer_types: list[str] = Field(min_length=1)
    passage_words: Annotated[int, annotated_types.Ge(10)]
    max_questions_per_article: Annotated[int, annotated_types.Ge(1)]
    questions: SplitSizes
    placeholder: str = Field(min_length=1)


class HeadlineMatchParams(Section):
    """``prepare_tasks.headline_match``: sentence pairs (news title, body passage), half from the same article,
    half from another one (:func:`bert_pipeline.data.task_builders.build_headline_match`). ``passage_words``: the body
    passage's most words; ``pairs``: most pairs per split (even: half positive)."""

    passage_words: Annotated[int, annotated_types.Ge(10)]
    pairs: SplitSizes


class UserTask(Section):
    """A user task. ``kind``: classification (CSV/JSONL with ``text_column``/``label_column``), pair_classification
    (also ``text_pair_column``), regression (a float ``label_column``; ``text_pair_column`` optional), ner
    (CoNLL-2003 files), qa (SQuAD v1.1 JSON), multi_label_classification (the labels of a row in ``label_column``
    separated by ``label_separator``, or a JSONL list; none is allowed); files per split, or ``hf_dataset`` (+
    ``hf_config``) instead of files."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal[TASK_KINDS]  # type: ignore[valid-type]
    train: str | None = None
    validation: str | None = None
    test: str | None = None
    hf_dataset: str | None = None
    hf_config: str | None = None
    text_column: str = "text"
    label_column: str = "label"
    text_pair_column: str | None = None
    label_separator: str = Field(default="|", min_length=1)

    @model_validator(mode="after")
    def _pair_column(self) -> UserTask:
        kind = tasks.get(self.kind)
        if kind.needs_pair and not self.text_pair_column and not self.hf_dataset:
            raise ValueError(f"prepare_tasks.user_tasks[{self.name}].text_pair_column: required for a "
                             f"{self.kind} task (the second text's column), got null")
        for option in ("text_pair_column", "label_separator"):
            if option in self.model_fields_set and option not in kind.user_options:
                readers = [k.name for k in tasks.KINDS.values() if option in k.user_options]
                raise ValueError(f"prepare_tasks.user_tasks[{self.name}].{option}: a {self.kind} task does not read "
                                 f"it (only {', '.join(readers)}); leave it out")
        return self


class PrepareTasksParams(Section):
    """``prepare_tasks``: the three default task sets and any user tasks."""

    seed: int
    heldout_validation_fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]
    spacy_batch_size: Annotated[int, annotated_types.Ge(1)]
    sentiment: SentimentTaskParams
    ner: NerTaskParams
    qa: QaTaskParams
    headline_match: HeadlineMatchParams
    user_tasks: list[UserTask]


class PrepareTasksView(View):
    """What stage ``prepare_tasks`` reads."""

    prepare_tasks: PrepareTasksParams
