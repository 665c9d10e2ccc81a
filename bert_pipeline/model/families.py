"""The encoder families the pipeline builds, in one table: BERT, RoBERTa and ALBERT.

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

Everything here takes plain arguments (no params objects); :mod:`bert_pipeline.model.configs` builds the configs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn
from transformers import (
    AlbertConfig,
    AlbertForMaskedLM,
    AlbertForPreTraining,
    BertConfig,
    BertForMaskedLM,
    BertForPreTraining,
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
        name: ``bert``, ``roberta`` or ``albert`` (the config's ``model_type``).
        config_class: its ``PretrainedConfig`` class.
        pretraining_class: the model with MLM and pair (NSP/SOP) heads, or None (RoBERTa has no pair head).
        masked_lm_class: the MLM-only model.
        encoder: the attribute of the pre-training model that holds the encoder (``bert``, ``roberta``, ``albert``).
        mlm_head: the pre-training model -> its MLM head (hidden states ``(n, H)`` -> logits ``(n, vocab_size)``).
        pair_head: the pre-training model -> its pair head (pooled output ``(batch, H)`` -> logits ``(batch, 2)``),
            or None.
        token_types: whether inputs carry ``token_type_ids`` 0/1 (RoBERTa: one type, all 0).
        objectives: the ``create_pretraining_data.objective`` values it can pre-train on.
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
PRETRAINING_CLASSES = {cls.__name__: (family, cls) for family in FAMILIES.values()
                       for cls in (family.pretraining_class, family.masked_lm_class) if cls is not None}


def family_of(name_or_model: Any) -> Family:
    """The family of a name (``bert``), a config or a model (by its ``model_type``).

    Raises:
        ValueError: not one of :data:`FAMILIES` (one line naming them).
    """
    name = name_or_model
    if not isinstance(name, str):
        config = getattr(name_or_model, "config", name_or_model)
        name = getattr(config, "model_type", None)
    if name not in FAMILIES:
        raise ValueError(f"model family {name!r} is not supported (expected one of {', '.join(FAMILIES)})")
    return FAMILIES[name]


def encoder_of(model: PreTrainedModel) -> nn.Module:
    """The encoder module of a pre-training model of any family (``model.bert`` / ``.roberta`` / ``.albert``)."""
    return getattr(model, family_of(model).encoder)


def family_config(family: str, fields: dict[str, Any], *, embedding_size: int | None = None,
                  share_layers: bool = False) -> PretrainedConfig:
    """The family's config from BERT-style ``fields`` (``hidden_size``, ``num_hidden_layers``, ...,
    ``max_position_embeddings`` = the longest sequence, ``pad_token_id``, ``vocab_size``).

    RoBERTa: one token type, position table ``max_position_embeddings + pad_token_id + 1`` rows (its ids start
    after the padding id). ALBERT: ``embedding_size`` (None: the hidden size), ``num_hidden_groups`` 1 with
    ``share_layers`` else one per layer, ``inner_group_num`` 1; the rest ALBERT's own defaults (``gelu_new``, no
    dropout: Lan et al. 2020, §4.9).

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
    return spec.config_class(**fields)
