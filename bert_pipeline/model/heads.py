"""Sequence classifiers' pooling: ``[CLS]`` (the family's own head) or the mean of the last hidden states, per
family, and the class that loads a fine-tuned folder with the pooling it was trained with.

What differs between task kinds (NER label alignment, QA windows and decoding) is in :mod:`bert_pipeline.tasks`.
"""

from __future__ import annotations

import logging

import torch
from transformers import AutoModelForSequenceClassification
from transformers.modeling_outputs import SequenceClassifierOutput

from bert_pipeline.model.families import FAMILIES, Family, family_of, is_family_model_type

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------------- pooling
class _MeanPooling:
    """The forward of a mean-pooling sentence classifier, for any family of
    :mod:`bert_pipeline.model.families`: the sentence vector is the mean of the last hidden states over real tokens
    (``attention_mask`` 1) instead of the ``[CLS]`` pooler (as Sentence-BERT, Reimers & Gurevych 2019, §3). Same
    weights as the family's standard class; ``config.classifier_pooling = "mean"`` records the choice so
    :func:`load_sequence_classifier` restores it. One label (``num_labels == 1``, regression): MSE loss, as the
    standard class with ``problem_type="regression"``; ``problem_type="multi_label_classification"``: binary
    cross-entropy over the labels' logits, as the standard class. The family's own classifier runs on the mean vector
    (:attr:`bert_pipeline.model.families.Family.pooled_classifier`: RoBERTa's head and DeBERTa's ``ContextPooler``
    read position 0, so the vector is given as a one-position sequence). A family whose stock class pools by its
    config's own ``classifier_pooling`` (ModernBERT) needs no subclass."""

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        family = family_of(self.config)
        types = {"token_type_ids": token_type_ids} if family.token_types else {}
        out = getattr(self, family.encoder)(input_ids=input_ids, attention_mask=attention_mask, **types)
        hidden = out[0]  # (batch, seq_len, hidden)
        if attention_mask is None:
            attention_mask = torch.ones(hidden.shape[:2], dtype=hidden.dtype, device=hidden.device)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        logits = family.pooled_classifier(self, pooled)  # (batch, num_labels)
        loss = None
        if labels is not None and self.num_labels == 1:  # regression (problem_type "regression"): MSE, as HF's
            # float32 as the targets: under bf16 autocast a target cast to the logits' dtype keeps 8 bits of mantissa
            loss = torch.nn.functional.mse_loss(logits.view(-1).float(), labels.view(-1).float())
        elif labels is not None and self.config.problem_type == "multi_label_classification":  # a sigmoid per label
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
        elif labels is not None:
            loss = torch.nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return SequenceClassifierOutput(loss=loss, logits=logits)


def _mean_pooling_class(family: Family) -> type:
    """``MeanPooling{stock class}``: the family's stock ``*ForSequenceClassification`` with :class:`_MeanPooling`'s
    forward (the saved config's ``architectures`` names it; :func:`load_sequence_classifier` picks it again by
    ``classifier_pooling``)."""
    stock = family.sequence_class
    return type(f"MeanPooling{stock.__name__}", (_MeanPooling, stock),
                {"__module__": __name__, "__doc__": f"``{stock.__name__}`` with mean pooling (:class:`_MeanPooling`)."})


# keyed by family name (bert_pipeline.model.families: DeBERTa's model_type is deberta-v2), one per family entry
MEAN_POOLING_CLASSES = {name: _mean_pooling_class(family) for name, family in FAMILIES.items()
                        if family.pooled_classifier is not None}
# families whose stock sequence classifier pools by its config's ``classifier_pooling`` (cls | mean) itself
NATIVE_POOLING = frozenset(name for name, family in FAMILIES.items() if family.pooled_classifier is None)


def sequence_classifier_class(pooling: str, model_type: str):
    """The model class for ``pooling`` (``cls`` or ``mean``) and a config's ``model_type`` (or a family name of
    :mod:`bert_pipeline.model.families`): the Auto class for
    ``cls`` and for ModernBERT (:data:`NATIVE_POOLING`: the caller sets ``config.classifier_pooling``), else the
    family's mean-pooling class (:data:`MEAN_POOLING_CLASSES`).

    Raises:
        ValueError: ``mean`` for a model of another family.
    """
    if pooling not in ("cls", "mean"):
        raise ValueError(f"pooling: expected cls or mean, got {pooling!r}")
    name = family_of(model_type).name if model_type in MEAN_POOLING_CLASSES or is_family_model_type(model_type) \
        else model_type
    if pooling == "cls" or name in NATIVE_POOLING:
        return AutoModelForSequenceClassification
    if name not in MEAN_POOLING_CLASSES:
        raise ValueError(f"pooling 'mean' is implemented for {', '.join([*MEAN_POOLING_CLASSES, *NATIVE_POOLING])} "
                         f"models, got model_type {model_type!r}")
    return MEAN_POOLING_CLASSES[name]


def load_sequence_classifier(path: str):
    """Load a fine-tuned sentence classifier, honouring ``config.classifier_pooling`` (default ``cls``)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    cls = sequence_classifier_class(getattr(cfg, "classifier_pooling", "cls"), cfg.model_type)
    return cls.from_pretrained(path)
