"""Schema of ``create_pretraining_data``, of the ``pretrain`` keys it reads, and the stage's view."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import annotated_types
from pydantic import Field, model_validator

from stages.params.base import Probability, Section, View


class CreatePretrainingDataParams(Section):
    """``create_pretraining_data``: sentence pairs and MLM masks (Devlin et al. 2019, §3.1, Appendix A.1).

    ``objective``: ``nsp`` (BERT), ``sop`` (ALBERT) or ``none`` (RoBERTa, packed sentences, no pair label).
    ``mask_token_prob`` + ``random_token_prob`` must be <= 1; the rest of the chosen tokens keep their id.
    ``masking``: ``static`` (``dupe_factor`` copies, each with its own mask) or ``dynamic`` (unmasked instances,
    the collator masks every batch anew). ``shard_size`` is in documents per shard; ``max_document_tokens`` in
    WordPiece tokens: a longer document is cut at sentence ends into pieces paired as documents of their own, and a
    worker holds at most ``shard_size`` documents or pieces at a time (memory per worker is bounded by
    ``shard_size x max_document_tokens`` tokens, whatever a document's size); at least twice the longest sequence
    length (checked by the stage, which knows the phases). ``packing`` (objective ``none``): ``sentences`` (whole
    sentences of one document) or ``stream`` (fixed-length chunks across sentences and documents: no padding).
    ``validation_masked_lm_prob`` (null: ``masked_lm_prob``) masks the held-out split at a rate of its own.
    """

    max_seq_length: Annotated[int, annotated_types.Ge(5), annotated_types.Le(65536)]
    short_seq_prob: Probability
    objective: Literal["nsp", "sop", "none"]
    masked_lm_prob: Probability
    max_predictions_per_seq: Annotated[int, annotated_types.Ge(1)]
    mask_token_prob: Probability
    random_token_prob: Probability
    whole_word_masking: bool
    masking: Literal["static", "dynamic"]
    dupe_factor: Annotated[int, annotated_types.Ge(1)]
    seed: Annotated[int, annotated_types.Ge(0)]
    shard_size: Annotated[int, annotated_types.Ge(1)]
    max_document_tokens: Annotated[int, annotated_types.Ge(16), annotated_types.Le(1 << 24)]
    num_proc: Annotated[int, annotated_types.Ge(1)]
    validation_masked_lm_prob: Probability | None
    packing: Literal["sentences", "stream"]

    @model_validator(mode="after")
    def _keep_share(self) -> CreatePretrainingDataParams:
        if self.packing == "stream" and self.objective != "none":
            raise ValueError("create_pretraining_data.packing: stream needs objective none (it cuts sentences, so "
                             f"no pair is left to split), got objective {self.objective}; use packing sentences")
        total = self.mask_token_prob + self.random_token_prob
        if total > 1.0 + 1e-9:
            raise ValueError(
                "create_pretraining_data.mask_token_prob + random_token_prob: expected <= 1 (the rest keeps the "
                f"token, so mask/random/keep sum to 1), got {total:g}"
            )
        return self


# ``pretrain.init`` and ``pretrain.phases`` decide which tokenizer builds the instances and at which lengths, so
# this stage reads them; their schema lives here (upstream), and ``stages.params.pretrain`` takes it from here.
PretrainInit = Annotated[str, Field(min_length=1)]


def tokenizer_path(init: str) -> Path:
    """The tokenizer that builds the instances and that pre-training uses, decided by ``pretrain.init`` alone
    (ARCHITECTURE.md, "data contracts"): ``models/tokenizer`` (train_tokenizer's output) for ``scratch``, else the
    checkpoint folder (or hub name) itself."""
    return Path("models/tokenizer") if init == "scratch" else Path(init)


class PretrainPhase(Section):
    """One phase of BERT's two-phase schedule (Devlin et al. 2019, Appendix A.2: seq 128 for 90% of the steps,
    then 512): ``max_seq_length`` of the instances (create_pretraining_data builds one dataset per length, under
    ``data/pretraining/seq{max_seq_length}/`` when there are several), ``fraction`` of ``max_steps`` and an
    optional per-process ``batch_size`` (default ``pretrain.batch_size``)."""

    max_seq_length: Annotated[int, annotated_types.Ge(8), annotated_types.Le(65536)]
    fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Le(1.0)]
    batch_size: Annotated[int, annotated_types.Ge(1)] | None = None


class PretrainDataKeys(View):
    """The two ``pretrain`` keys that shape the pre-training data: ``init`` (the tokenizer) and ``phases`` (one
    dataset per other sequence length)."""

    init: PretrainInit
    phases: list[PretrainPhase]

    @property
    def tokenizer_path(self) -> Path:
        """:func:`tokenizer_path` of ``init``."""
        return tokenizer_path(self.init)


class CreatePretrainingDataView(View):
    """What stage ``create_pretraining_data`` reads."""

    create_pretraining_data: CreatePretrainingDataParams
    pretrain: PretrainDataKeys
