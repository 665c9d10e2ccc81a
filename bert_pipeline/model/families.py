"""The encoder families the pipeline builds, in one table: BERT, RoBERTa, ALBERT, ModernBERT and DeBERTa.

Each :class:`Family` names the stock ``transformers`` classes (so every saved folder loads with the ``AutoModel*``
classes), where its encoder, MLM head and sentence-pair head sit on the pre-training model, whether it has token
types, how its position ids start, and which pre-training objectives it takes:

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import (
    AlbertConfig,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
    DebertaV2Config,
    DebertaV2ForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PretrainedConfig,
    PreTrainedModel,
    RobertaConfig,
    RobertaForMaskedLM,
)

from bert_pipeline.model.sizes import FAMILY_OBJECTIVES


@dataclass(frozen=True)
class Family:
    """One encoder family.

    Attributes:
        name: ``bert``, ``roberta``, ``albert``, ``modernbert`` or ``deberta`` (the params' ``pretrain.model.family``).
        config_class: its ``PretrainedConfig`` class.
        pretraining_class: the model with MLM and pair (NSP/SOP) heads, or None (RoBERTa has no pair head).
        masked_lm_class: the MLM-only model.
        encoder: the attribute of the pre-training model that holds the encoder (``bert``, ``roberta``, ``albert``).
        mlm_head: the pre-training model -> its MLM head (hidden states ``(n, H)`` -> logits ``(n, vocab_size)``).
        pair_head: the pre-training model -> its pair head (pooled output ``(batch, H)`` -> logits ``(batch, 2)``),
            or None.
        token_types: whether inputs carry ``token_type_ids`` 0/1 (RoBERTa: one type, all 0).
        objectives: the ``create_pretraining_data.objective`` values it can pre-train on.
        layer_prefix: the state-dict key prefix of the encoder layers, before the layer index (distillation picks
            layers by it): ``encoder.layer.`` (BERT, RoBERTa, DeBERTa), ``model.layers.`` (ModernBERT); ALBERT's
            groups are handled apart.
        model_type: the config's ``model_type`` (empty: ``name``; DeBERTa's is ``deberta-v2``).
    """

    name: str
    config_class: type[PretrainedConfig]
    pretraining_class: type[PreTrainedModel] | None
    masked_lm_class: type[PreTrainedModel]
    encoder: str
    mlm_head: Callable[[PreTrainedModel], nn.Module]
    pair_head: Callable[[PreTrainedModel], nn.Module] | None
    token_types: bool
    objectives: tuple[str, ...]
    layer_prefix: str = "encoder.layer."
    model_type: str = ""

    def __post_init__(self) -> None:
        if not self.model_type:
            object.__setattr__(self, "model_type", self.name)

    def model_class(self, with_pair_head: bool) -> type[PreTrainedModel]:
        """The pre-training class: with the pair head (``pretraining_class``) or MLM only.

        Raises:
            ValueError: a pair head for a family without one.
        """
        if not with_pair_head:
            return self.masked_lm_class
        if self.pretraining_class is None:
            raise ValueError(f"pretrain.model.family: {self.name} has no sentence-pair head (objective none only)")
        return self.pretraining_class

    def position_offset(self, config: PretrainedConfig) -> int:
        """Rows of the position table before the first real position: RoBERTa counts position ids from
        ``pad_token_id + 1`` (fairseq's convention), the others from 0."""
        return int(config.pad_token_id) + 1 if self.name == "roberta" else 0


FAMILIES: dict[str, Family] = {
    "bert": Family("bert", BertConfig, BertForPreTraining, BertForMaskedLM, "bert",
                   lambda m: m.cls.predictions, lambda m: m.cls.seq_relationship, True, FAMILY_OBJECTIVES["bert"]),
    "roberta": Family("roberta", RobertaConfig, None, RobertaForMaskedLM, "roberta",
                      lambda m: m.lm_head, None, False, FAMILY_OBJECTIVES["roberta"]),
    "albert": Family("albert", AlbertConfig, AlbertForPreTraining, AlbertForMaskedLM, "albert",
                     lambda m: m.predictions, lambda m: m.sop_classifier, True, FAMILY_OBJECTIVES["albert"]),
}


class _ModernBertMlmHead(nn.Module):
    """ModernBERT's MLM head as one module: ``decoder(head(h))`` (``ModernBertForMaskedLM`` keeps the two apart).
    Holds references to the model's own modules (no copy)."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.head, self.decoder = model.head, model.decoder

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.head(hidden))


def _deberta_mlm_head(model: PreTrainedModel) -> Callable[[torch.Tensor], torch.Tensor]:
    """DeBERTa's MLM head: ``cls`` (``config.legacy`` True, what the pipeline builds: hidden -> logits); a
    non-legacy checkpoint's ``lm_predictions`` takes the word embeddings as a second argument."""
    if model.legacy:
        return model.cls
    return lambda hidden: model.lm_predictions(hidden, model.deberta.embeddings.word_embeddings)


FAMILIES["modernbert"] = Family("modernbert", ModernBertConfig, None, ModernBertForMaskedLM, "model",
                                _ModernBertMlmHead, None, False, FAMILY_OBJECTIVES["modernbert"],
                                layer_prefix="model.layers.")
FAMILIES["deberta"] = Family("deberta", DebertaV2Config, None, DebertaV2ForMaskedLM, "deberta",
                             _deberta_mlm_head, None, False, FAMILY_OBJECTIVES["deberta"], model_type="deberta-v2")
_BY_MODEL_TYPE = {family.model_type: family for family in FAMILIES.values()}
PRETRAINING_CLASSES = {cls.__name__: (family, cls) for family in FAMILIES.values()
                       for cls in (family.pretraining_class, family.masked_lm_class) if cls is not None}


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


# BERT-style config fields and ModernBERT's names for them (ModernBertConfig has no hidden_dropout_prob, ...).
MODERNBERT_FIELDS: dict[str, tuple[str, ...]] = {
    "hidden_dropout_prob": ("mlp_dropout", "embedding_dropout"),
    "attention_probs_dropout_prob": ("attention_dropout",),
    "layer_norm_eps": ("norm_eps",),
}
# DeBERTa-v3's attention settings (He et al. 2023, the released deberta-v3-* configs; He et al. 2021, §3).
DEBERTA_V3: dict[str, Any] = {
    "relative_attention": True, "position_biased_input": False, "pos_att_type": ["p2c", "c2p"],
    "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True, "max_relative_positions": -1,
    "type_vocab_size": 0, "legacy": True,
}


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
    fields = dict(fields)
    if spec.name != "albert" and (embedding_size is not None or share_layers):
        raise ValueError(f"pretrain.model: embedding_size and share_layers are ALBERT's (family {spec.name!r})")
    if spec.name == "roberta":
        fields["type_vocab_size"] = 1
        fields["max_position_embeddings"] = int(fields.get("max_position_embeddings", 512)) + int(
            fields.get("pad_token_id", 1)) + 1
        fields.setdefault("bos_token_id", 0)
        fields.setdefault("eos_token_id", 2)
    if spec.name == "albert":
        fields["embedding_size"] = int(embedding_size or fields["hidden_size"])
        fields["num_hidden_groups"] = 1 if share_layers else int(fields["num_hidden_layers"])
        fields["inner_group_num"] = 1
    if spec.name == "modernbert":
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
    if spec.name == "deberta":
        fields = {**DEBERTA_V3, **fields, "type_vocab_size": 0}
        fields.setdefault("max_position_embeddings", 512)
    return spec.config_class(**fields)
