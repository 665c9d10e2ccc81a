"""The encoder families the pipeline builds, in one table: BERT, RoBERTa, ALBERT, ModernBERT and DeBERTa.

Each :class:`Family` entry of :data:`FAMILIES` is everything the pipeline knows of one family, and the only place
that names it: the stock ``transformers`` classes (by their common prefix, so every saved folder loads with the
``AutoModel*`` classes), where its encoder, MLM head and sentence-pair head sit on the pre-training model, whether it
has token types, how its position ids start, which pre-training objectives it takes, the vocabulary its paper
trains, how a sentence classifier pools it, how its config is built from BERT-style fields, its name on a model
card, the recipe the ``variants`` stage pre-trains it with and its published reference figures. The params schema
(``pretrain.model.family``, ``variants.families``), the heads, the cards and the variants table all read it; adding
a family is adding one entry (``tests/test_one_family_entry.py`` fails on a family named anywhere else).

This module imports neither torch nor ``transformers`` (the params schema reads it): a family's classes are
resolved by name when first used.

- BERT (Devlin et al. 2019, §3): ``BertForPreTraining`` (MLM + NSP, or SOP through the same two-way head) or
  ``BertForMaskedLM``; token types 0/1.
- RoBERTa (Liu et al. 2019, §4): ``RobertaForMaskedLM`` only (no NSP), one token type, position ids counted from
  ``pad_token_id + 1`` (so the position table holds ``max_seq_length + pad_token_id + 1`` rows).
- ALBERT (Lan et al. 2020, §3.1): ``AlbertForPreTraining`` (MLM + SOP) or ``AlbertForMaskedLM``; factorised
  embedding (``embedding_size`` E, projected to the hidden size H) and cross-layer sharing (``num_hidden_groups``
  1: every layer the same weights; sharing off: one group per layer).
- ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer", arXiv 2412.13663, §2.1): ``ModernBertForMaskedLM``
  only (objective none); pre-LN, rotary positions, GeGLU feed-forward, no biases, no token types, no pooler. Encoder
  ``model``, MLM head ``decoder(head(h))``. Every layer attends globally (``layer_types`` all
  ``full_attention``: ``global_attn_every_n_layers`` 1 of earlier ``transformers``). The paper alternates one global
  layer with two local ones (``local_attention`` 128 tokens in all: 64 on each side, and a RoPE base of 10,000
  against the global layers' 160,000), a saving for its 8,192-token context; the pipeline's instances are 128 tokens
  (the GPU profiles end with a phase at 512), where a local layer saves little but would still differ from a global
  one (a token sees 64 on each side, not the whole instance), so every layer global keeps attention's reach as
  BERT's and the comparison about the other changes. It also makes a layer's index moot for distillation; with
  another pattern (``pretrain.model.config.layer_types``) :func:`bert_pipeline.model.distillation.build_student`
  gives each student layer its teacher layer's kind. The GeGLU's intermediate size keeps BERT's feed-forward
  parameter count (:func:`bert_pipeline.model.sizes.glu_intermediate_size`: 8H/3, rounded to a multiple of 64).
  Its own ``sparse_prediction`` stays False: :func:`bert_pipeline.model.objectives.masked_lm_forward` gathers the
  masked positions itself. Parameters with an 8192-token vocabulary (``ModernBertForMaskedLM``, tied decoder counted
  once; encoder alone in brackets): tiny 1,450,752 (1,426,048), mini 5,384,704 (5,310,720), base 91,844,096
  (91,245,312), against ``BertForMaskedLM``'s 1,536,128 / 5,462,784 / 92,342,528 (no position or type tables, no
  biases, the GeGLU's rounding). A saved ModernBERT folder's tokenizer loads as ``transformers``' generic
  ``TokenizersBackend`` (``AutoTokenizer`` maps ``model_type`` modernbert to it whatever ``tokenizer_class`` says,
  because the hub's ModernBERT configs name a wrong class); it reads ``tokenizer.json`` as written, so its ids and
  special tokens are those of the pipeline's WordPiece tokenizer.
- DeBERTa (He et al. 2021, §3, disentangled attention; DeBERTa-v3 settings, He et al. 2023): ``DebertaV2ForMaskedLM``
  only (objective none), relative positions only (``relative_attention`` True, ``position_biased_input`` False:
  no absolute position table), ``pos_att_type`` p2c and c2p, 256 log buckets (``position_buckets``), LayerNorm on the
  relative embeddings, shared content/position projections (``share_att_key``), no token types
  (``type_vocab_size`` 0, as v3: its embeddings then ignore any ``token_type_ids``). Encoder ``deberta``, MLM head
  ``cls`` (the ``legacy`` head: transform + decoder tied to the word embeddings). Feed-forward 4H as BERT's. Its
  parameter count equals ``BertForMaskedLM``'s at every size (tiny 1,536,128 with 8192 tokens): the 2 x 256
  relative-position rows replace the 512 absolute positions, their LayerNorm the two token types. No SDPA path:
  :func:`bert_pipeline.model.configs.attention_implementation` gives it ``eager``. Its
  ``model_type`` is ``deberta-v2`` (the family's name here is ``deberta``).

Neither new family has a sentence-pair head: a pair objective (NSP, SOP) needs a pooled output ``(batch, H)`` and a
two-way classifier on it, and neither ``ModernBertForMaskedLM`` nor ``DebertaV2ForMaskedLM`` has either (there is no
``*ForPreTraining`` class); so both take objective ``none``, as RoBERTa does. Families without token types
(RoBERTa, ModernBERT, DeBERTa) get no ``token_type_ids``: :func:`bert_pipeline.model.configs.save_model` saves the
tokenizer beside them with ``model_input_names`` without them, and the pre-training objective drops the data's.

Everything here takes plain arguments (no params objects); :mod:`bert_pipeline.model.configs` builds the configs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the classes are resolved by name when used: importing this module loads neither library
    import torch
    from torch import nn
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class Recipe:
    """What the ``variants`` stage changes in the shared settings to pre-train one family as its paper did.

    ``tokenizer``: the ``train_tokenizer.model`` (``wordpiece``, ``bpe``, ``unigram``); ``objective`` and
    ``masking``: the ``create_pretraining_data`` keys; ``model``: overrides of ``pretrain.model`` (``family`` and,
    for ALBERT, ``share_layers``; its ``embedding_size`` the stage computes from the width); ``lowercase``: forced
    tokenizer casing (byte-level BPE is cased), or None to keep the pipeline's; ``packing``: the
    ``create_pretraining_data.packing``, or None to keep the pipeline's: a pair objective (NSP, SOP) needs
    ``sentences`` (``stream`` cuts sentences, so no pair is left to split), while the MLM-only families see the
    pipeline's own packing.
    """

    tokenizer: str
    objective: str
    masking: str
    model: Mapping[str, Any]
    lowercase: bool | None = None
    packing: str | None = None


@dataclass(frozen=True)
class Published:
    """A Base model's published figures: GLUE average (points), parameters (millions), inference speed relative to
    BERT-Base (x); None where no source gives the figure (the cell stays empty rather than hold a guess).
    ``source``: where the figures come from (empty: as the seeds quote them)."""

    name: str
    glue: float | None
    parameters_m: float | None
    speed: float | None
    source: str = ""


@dataclass(frozen=True)
class Family:
    """One encoder family: the one entry that holds everything the pipeline needs of it.

    Attributes:
        name: the params' ``pretrain.model.family`` and ``variants.families`` value.
        class_prefix: the prefix of its ``transformers`` classes (``Bert``: ``BertConfig``, ``BertForMaskedLM``,
            ``BertForPreTraining``, ``BertForSequenceClassification``); also the class a model card names.
        card_name: the family's name as its paper writes it (``RoBERTa``), on model cards and in the report.
        encoder: the attribute of the pre-training model that holds the encoder (``bert``, ``roberta``, ``albert``).
        mlm_head: the pre-training model -> its MLM head (hidden states ``(n, H)`` -> logits ``(n, vocab_size)``).
        pair_head: the pre-training model -> its pair head (pooled output ``(batch, H)`` -> logits ``(batch, 2)``),
            or None (no ``*ForPreTraining`` class: objective ``none`` only).
        token_types: whether inputs carry ``token_type_ids`` 0/1 (RoBERTa: one type, all 0).
        objectives: the ``create_pretraining_data.objective`` values it can pre-train on.
        vocabulary: the ``train_tokenizer.model`` a from-scratch model of the family is trained with.
        recipe: what the ``variants`` stage pre-trains it with (:class:`Recipe`).
        published: its Base model's published figures (:class:`Published`), beside ours in the variants table.
        pooled_classifier: the mean-pooling sentence classifier's last step, ``(model, pooled (batch, H)) ->
            logits (batch, num_labels)`` (:mod:`bert_pipeline.model.heads` subclasses the family's stock
            ``*ForSequenceClassification`` with it), or None where the stock class pools by its config's
            ``classifier_pooling`` itself (ModernBERT).
        config_fields: BERT-style config fields -> the family's own (:func:`family_config`; None: BERT's as they
            are), called as ``config_fields(fields, embedding_size=..., share_layers=..., cls_token_id=...,
            sep_token_id=...)``.
        field_names: BERT-style config field -> the family's own names for it (``pretrain.model.config`` may
            give either).
        layer_prefix: the state-dict key prefix of the encoder layers, before the layer index (distillation picks
            layers by it): ``encoder.layer.`` (BERT, RoBERTa, DeBERTa), ``model.layers.`` (ModernBERT), ALBERT's
            layer groups ``encoder.albert_layer_groups.`` (one group when every layer shares weights).
        model_type: the config's ``model_type`` (empty: ``name``; DeBERTa's is ``deberta-v2``).
        factorised: ALBERT's factorised embedding and layer groups: ``pretrain.model.embedding_size`` and
            ``share_layers`` apply, distillation maps groups rather than layers.
        position_offset_from_pad: position ids counted from ``pad_token_id + 1`` (RoBERTa's fairseq convention).
        glu_ffn: a gated feed-forward (GeGLU: ``Wi`` H -> 2I): the intermediate size keeping BERT's FFN parameter
            count (:func:`bert_pipeline.model.sizes.glu_intermediate_size`) and 6HI FLOPs per token, not 4HI.
        vocabulary_unit: how a model card counts its vocabulary.
    """

    name: str
    class_prefix: str
    card_name: str
    encoder: str
    mlm_head: Callable[[PreTrainedModel], Callable[[torch.Tensor], torch.Tensor]]
    pair_head: Callable[[PreTrainedModel], nn.Module] | None
    token_types: bool
    objectives: tuple[str, ...]
    vocabulary: str
    recipe: Recipe
    published: Published
    pooled_classifier: Callable[[PreTrainedModel, torch.Tensor], torch.Tensor] | None
    config_fields: Callable[..., dict[str, Any]] | None = None
    field_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    layer_prefix: str = "encoder.layer."
    model_type: str = ""
    factorised: bool = False
    position_offset_from_pad: bool = False
    glu_ffn: bool = False
    vocabulary_unit: str = "tokens"

    def __post_init__(self) -> None:
        if not self.model_type:
            object.__setattr__(self, "model_type", self.name)

    def _class(self, suffix: str) -> Any:
        import transformers

        return getattr(transformers, self.class_prefix + suffix)

    @property
    def config_class(self) -> type[PretrainedConfig]:
        """Its ``PretrainedConfig`` class (``{class_prefix}Config``)."""
        return self._class("Config")

    @property
    def pretraining_class(self) -> type[PreTrainedModel] | None:
        """The model with MLM and pair (NSP/SOP) heads (``{class_prefix}ForPreTraining``), or None without a pair
        head."""
        return self._class("ForPreTraining") if self.pair_head is not None else None

    @property
    def masked_lm_class(self) -> type[PreTrainedModel]:
        """The MLM-only model (``{class_prefix}ForMaskedLM``)."""
        return self._class("ForMaskedLM")

    @property
    def sequence_class(self) -> type[PreTrainedModel]:
        """The stock sentence classifier (``{class_prefix}ForSequenceClassification``)."""
        return self._class("ForSequenceClassification")

    def model_class(self, with_pair_head: bool) -> type[PreTrainedModel]:
        """The pre-training class: with the pair head (``pretraining_class``) or MLM only.

        Raises:
            ValueError: a pair head for a family without one.
        """
        if not with_pair_head:
            return self.masked_lm_class
        if self.pair_head is None:
            raise ValueError(f"pretrain.model.family: {self.name} has no sentence-pair head (objective none only)")
        return self.pretraining_class

    def position_offset(self, config: PretrainedConfig) -> int:
        """Rows of the position table before the first real position: RoBERTa counts position ids from
        ``pad_token_id + 1`` (fairseq's convention), the others from 0."""
        return int(config.pad_token_id) + 1 if self.position_offset_from_pad else 0


# ----------------------------------------------------------------------------------- each family's own parts
def _linear_on_pooled(model: PreTrainedModel, pooled: torch.Tensor) -> torch.Tensor:
    """BERT's and ALBERT's classifier: dropout, then Linear on the pooled vector."""
    return model.classifier(model.dropout(pooled))


def _head_on_first_position(model: PreTrainedModel, pooled: torch.Tensor) -> torch.Tensor:
    """RoBERTa's classification head (dense, tanh, projection) reads position 0 of its input: the mean vector is
    given as a one-position sequence."""
    return model.classifier(pooled.unsqueeze(1))


def _context_pooler_on_pooled(model: PreTrainedModel, pooled: torch.Tensor) -> torch.Tensor:
    """DeBERTa's ``ContextPooler`` (dropout, dense, GELU) on the mean vector as a one-position sequence, then its
    dropout and classifier, as its stock class runs them on ``[CLS]``."""
    return model.classifier(model.dropout(model.pooler(pooled.unsqueeze(1))))


def _modernbert_mlm_head(model: PreTrainedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """ModernBERT's MLM head as one step: ``decoder(head(h))`` (``ModernBertForMaskedLM`` keeps the two apart)."""
    return lambda hidden: model.decoder(model.head(hidden))


def _deberta_mlm_head(model: PreTrainedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """DeBERTa's MLM head: ``cls`` (``config.legacy`` True, what the pipeline builds: hidden -> logits); a
    non-legacy checkpoint's ``lm_predictions`` takes the word embeddings as a second argument."""
    if model.legacy:
        return model.cls
    return lambda hidden: model.lm_predictions(hidden, model.deberta.embeddings.word_embeddings)


def _roberta_fields(fields: dict[str, Any], **_: Any) -> dict[str, Any]:
    """One token type; a position table of ``max_position_embeddings + pad_token_id + 1`` rows (its ids start after
    the padding id); fairseq's ``<s>``/``</s>`` ids 0 and 2 unless given."""
    fields["type_vocab_size"] = 1
    fields["max_position_embeddings"] = int(fields.get("max_position_embeddings", 512)) + int(
        fields.get("pad_token_id", 1)) + 1
    fields.setdefault("bos_token_id", 0)
    fields.setdefault("eos_token_id", 2)
    return fields


def _albert_fields(fields: dict[str, Any], *, embedding_size: int | None = None, share_layers: bool = False,
                   **_: Any) -> dict[str, Any]:
    """``embedding_size`` (None: the hidden size), ``num_hidden_groups`` 1 with ``share_layers`` else one per layer,
    ``inner_group_num`` 1; the rest ALBERT's own defaults (``gelu_new``, no dropout: Lan et al. 2020, §4.9)."""
    fields["embedding_size"] = int(embedding_size or fields["hidden_size"])
    fields["num_hidden_groups"] = 1 if share_layers else int(fields["num_hidden_layers"])
    fields["inner_group_num"] = 1
    return fields


# BERT-style config fields and ModernBERT's names for them (ModernBertConfig has no hidden_dropout_prob, ...).
MODERNBERT_FIELDS: dict[str, tuple[str, ...]] = {
    "hidden_dropout_prob": ("mlp_dropout", "embedding_dropout"),
    "attention_probs_dropout_prob": ("attention_dropout",),
    "layer_norm_eps": ("norm_eps",),
}


def _modernbert_fields(fields: dict[str, Any], *, cls_token_id: int | None = None, sep_token_id: int | None = None,
                       **_: Any) -> dict[str, Any]:
    """The BERT-style dropout and LayerNorm fields mapped to ModernBERT's (:data:`MODERNBERT_FIELDS`), every layer
    global unless ``layer_types`` is given, ``max_position_embeddings`` 512 unless given, ``[CLS]``/``[SEP]`` ids
    (also its ``bos``/``eos``) from the tokenizer, ``sparse_prediction`` False (see :func:`family_config`)."""
    for bert_field, names in MODERNBERT_FIELDS.items():
        if bert_field in fields:
            value = fields.pop(bert_field)
            for name in names:
                fields.setdefault(name, value)
    fields.setdefault("max_position_embeddings", 512)
    fields.setdefault("layer_types", ["full_attention"] * int(fields.get("num_hidden_layers", 22)))
    for name, value in (("cls_token_id", cls_token_id), ("bos_token_id", cls_token_id),
                        ("sep_token_id", sep_token_id), ("eos_token_id", sep_token_id)):
        fields.setdefault(name, value)
    fields.setdefault("sparse_prediction", False)
    return fields


# DeBERTa-v3's attention settings (He et al. 2023, the released deberta-v3-* configs; He et al. 2021, §3).
DEBERTA_V3: dict[str, Any] = {
    "relative_attention": True, "position_biased_input": False, "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True, "max_relative_positions": -1,
    "type_vocab_size": 0, "legacy": True,
}


def _deberta_fields(fields: dict[str, Any], **_: Any) -> dict[str, Any]:
    """:data:`DEBERTA_V3` (relative positions only, no token types), BERT's field names otherwise."""
    fields = {**DEBERTA_V3, **fields, "type_vocab_size": 0}
    fields.setdefault("max_position_embeddings", 512)
    return fields


# ------------------------------------------------------------------------------------------------- the table
# Objectives: RoBERTa dropped NSP (Liu et al. 2019, §4.2); ALBERT replaced it with SOP (Lan et al. 2020, §3.1);
# ModernBERT and DeBERTa: MLM only (Warner et al. 2024, §2.2; He et al. 2021, §4): their *ForMaskedLM classes have no
# pooled output and no two-way head, which a pair objective would need.
# Vocabularies: the one each family's paper trains (the train_tokenizer stage's ``model``): WordPiece (Devlin et al.
# 2019), byte-level BPE (Liu et al. 2019, §4.4), a SentencePiece-style Unigram model (Lan et al. 2020, §4.1).
# ModernBERT's paper trains a 50k BPE (Warner et al. 2024, §2.1.2) and DeBERTa-v3 a 128k SentencePiece vocabulary (He
# et al. 2023); the pipeline keeps its WordPiece for both, so that their comparison with BERT is about the
# architecture, not the vocabulary.
# Published figures: the Base models' as the seeds quote them, or as the source each names gives them.
FAMILIES: dict[str, Family] = {family.name: family for family in (
    Family("bert", "Bert", "BERT", "bert", lambda m: m.cls.predictions, lambda m: m.cls.seq_relationship, True,
           ("nsp", "sop", "none"), "wordpiece",
           Recipe("wordpiece", "nsp", "static", {"family": "bert"}, packing="sentences"),
           Published("BERT-Base", 79.6, 110, 1.0), _linear_on_pooled, vocabulary_unit="WordPiece tokens"),
    Family("roberta", "Roberta", "RoBERTa", "roberta", lambda m: m.lm_head, None, False, ("none",), "bpe",
           Recipe("bpe", "none", "dynamic", {"family": "roberta"}, lowercase=False),
           Published("RoBERTa-Base", 83.7, 125, 1.0), _head_on_first_position, _roberta_fields,
           position_offset_from_pad=True),
    Family("albert", "Albert", "ALBERT", "albert", lambda m: m.predictions, lambda m: m.sop_classifier, True,
           ("sop", "none"), "unigram",
           Recipe("unigram", "sop", "static", {"family": "albert", "share_layers": True}, packing="sentences"),
           Published("ALBERT-Base", 80.1, 12, 1.7), _linear_on_pooled, _albert_fields,
           layer_prefix="encoder.albert_layer_groups.", factorised=True),
    # GLUE average 88.4 as reported in Warner et al. 2024 (arXiv 2412.13663), Table 1, and in the evaluation table of
    # the answerdotai/ModernBERT-base model card (checked against copies of the card; the paper text was not at hand);
    # 149M parameters: the same card ("22 layers, 149 million parameters"). No speed: neither source gives one
    # relative to BERT-Base.
    Family("modernbert", "ModernBert", "ModernBERT", "model", _modernbert_mlm_head, None, False, ("none",),
           "wordpiece", Recipe("wordpiece", "none", "dynamic", {"family": "modernbert"}),
           Published("ModernBERT-base", 88.4, 149, None,
                     "GLUE as reported in Warner et al. 2024, Table 1, and the answerdotai/ModernBERT-base "
                     "model card; parameters: the same card"),
           None, _modernbert_fields, MODERNBERT_FIELDS, layer_prefix="model.layers.", glu_ffn=True),
    # microsoft/deberta-v3-base model card: "86M backbone parameters with a vocabulary containing 128K tokens which
    # introduces 98M parameters in the Embedding layer" (184M). He et al. 2023 (DeBERTaV3) give a GLUE average for
    # the Large model (91.37); no Base GLUE average from He et al. could be checked, so the cell stays empty (other
    # papers' re-runs of DeBERTa-v3-base on GLUE, such as Warner et al. 2024's Table 1, are not He et al.'s figure
    # and were not checked either), as does speed (not reported against BERT-Base).
    Family("deberta", "DebertaV2", "DeBERTa", "deberta", _deberta_mlm_head, None, False, ("none",), "wordpiece",
           Recipe("wordpiece", "none", "dynamic", {"family": "deberta"}),
           Published("DeBERTa-v3-base", None, 184, None,
                     "He et al. 2023, DeBERTaV3; microsoft/deberta-v3-base model card (86M backbone + 98M "
                     "embedding parameters)"),
           _context_pooler_on_pooled, _deberta_fields, model_type="deberta-v2"),
)}
# The family every other is compared with: the default of pretrain.model.family, relative speed 1.0x in the
# variants table, and the Hub tag every card carries (the BERT family of encoders at large).
BASE_FAMILY = "bert"
_BY_MODEL_TYPE = {family.model_type: family for family in FAMILIES.values()}
# the pre-training class names -> (family, with the pair head): distillation and the objective accept these
PRETRAINING_CLASSES: dict[str, tuple[Family, bool]] = {
    f"{family.class_prefix}{suffix}": (family, pair) for family in FAMILIES.values()
    for suffix, pair in (("ForPreTraining", True), ("ForMaskedLM", False)) if not pair or family.pair_head is not None}


def family_of(name_or_model: Any) -> Family:
    """The family of a name (``bert``, ``deberta``), a ``model_type`` (``deberta-v2``), a config or a model (by its
    ``model_type``).

    Raises:
        ValueError: not one of :data:`FAMILIES` (one line naming them).
    """
    name = name_or_model
    if not isinstance(name, str):
        config = getattr(name_or_model, "config", name_or_model)
        name = getattr(config, "model_type", None)
    if name in FAMILIES:
        return FAMILIES[name]
    if name in _BY_MODEL_TYPE:
        return _BY_MODEL_TYPE[name]
    raise ValueError(f"model family {name!r} is not supported (expected one of {', '.join(FAMILIES)})")


def is_family_model_type(model_type: str | None) -> bool:
    """Whether ``model_type`` (a config's) is one of :data:`FAMILIES`' (``deberta-v2`` for DeBERTa)."""
    return model_type in _BY_MODEL_TYPE


def encoder_of(model: PreTrainedModel) -> nn.Module:
    """The encoder module of a pre-training model of any family (``model.bert`` / ``.roberta`` / ``.albert`` /
    ``.model`` (ModernBERT) / ``.deberta``)."""
    return getattr(model, family_of(model).encoder)


def family_config(family: str, fields: dict[str, Any], *, embedding_size: int | None = None,
                  share_layers: bool = False, cls_token_id: int | None = None,
                  sep_token_id: int | None = None) -> PretrainedConfig:
    """The family's config from BERT-style ``fields`` (``hidden_size``, ``num_hidden_layers``, ...,
    ``max_position_embeddings`` = the longest sequence, ``pad_token_id``, ``vocab_size``).

    RoBERTa: one token type, position table ``max_position_embeddings + pad_token_id + 1`` rows (its ids start
    after the padding id). ALBERT: ``embedding_size`` (None: the hidden size), ``num_hidden_groups`` 1 with
    ``share_layers`` else one per layer, ``inner_group_num`` 1; the rest ALBERT's own defaults (``gelu_new``, no
    dropout: Lan et al. 2020, §4.9).

    ModernBERT: the BERT-style dropout and LayerNorm fields mapped to its own (:data:`MODERNBERT_FIELDS`;
    ``hidden_dropout_prob`` sets ``mlp_dropout`` and ``embedding_dropout``), otherwise ModernBERT's defaults (no
    dropout, no biases); every layer global unless ``fields`` give ``layer_types`` (see the module's docstring: a
    local layer sees 64 tokens on each side, less than a 128-token instance, for little saving at these lengths),
    ``max_position_embeddings`` 512 unless given (RoPE has no table; the
    pipeline checks instances against it), ``[CLS]``/``[SEP]`` ids from the tokenizer (``cls_token_id``,
    ``sep_token_id``, also its ``bos``/``eos``: the config's defaults 50281/50282 are ids of ModernBERT's own
    50k BPE vocabulary, outside ours). The intermediate size is the caller's
    (:func:`bert_pipeline.model.sizes.glu_intermediate_size` in :func:`bert_pipeline.model.configs.build_config`).

    DeBERTa: :data:`DEBERTA_V3` (relative positions only, no token types), BERT's field names otherwise.

    Raises:
        ValueError: an unknown family, or ``embedding_size`` / ``share_layers`` for a family without them.
    """
    spec = family_of(family)
    if not spec.factorised and (embedding_size is not None or share_layers):
        owners = " and ".join(f"{f.card_name}'s" for f in FAMILIES.values() if f.factorised)
        raise ValueError(f"pretrain.model: embedding_size and share_layers are {owners} (family {spec.name!r})")
    fields = dict(fields)
    if spec.config_fields is not None:
        fields = spec.config_fields(fields, embedding_size=embedding_size, share_layers=share_layers,
                                    cls_token_id=cls_token_id, sep_token_id=sep_token_id)
    return spec.config_class(**fields)
