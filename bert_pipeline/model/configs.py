"""BERT configs from the named sizes (:mod:`bert_pipeline.model.sizes`), building, loading and saving models,
counting their parameters and their training FLOPs.

Reused by pre-training, distillation and fine-tuning. Everything here takes plain arguments (no params objects).

- :func:`build_config`: a ``BertConfig`` from a size name, the tokenizer's ``vocab_size`` and field overrides,
  with one-line :class:`ModelConfigError` messages for the mistakes users make.
- :func:`new_pretraining_model`, :func:`load_pretraining_model`, :func:`save_model`: the stock
  ``BertForPreTraining`` / ``BertForMaskedLM`` classes, so ``AutoModelFor*`` load what is saved.
- :func:`load_weights`: ``from_pretrained`` that says in one log line which weights are new and which were left
  out, instead of transformers' per-tensor load report table.
- :func:`count_parameters`: the one parameter count (tied weights once) every report uses.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel

from bert_pipeline.model.families import BASE_FAMILY
from bert_pipeline.model.sizes import SIZES, glu_intermediate_size

log = logging.getLogger(__name__)

class ModelConfigError(ValueError):
    """A model shape or start point that cannot work. ``str(err)`` is one line naming the key."""


def build_config(
    size: str,
    vocab_size: int,
    overrides: dict[str, Any] | None = None,
    max_seq_length: int | None = None,
    pad_token_id: int = 0,
    key: str = "pretrain.model",
    family: str = BASE_FAMILY,
    embedding_size: int | None = None,
    share_layers: bool = False,
    cls_token_id: int | None = None,
    sep_token_id: int | None = None,
) -> PretrainedConfig:
    """A config of the named size with the tokenizer's vocabulary size and any field overridden: ``BertConfig``,
    or for ``family`` ``roberta`` / ``albert`` / ``modernbert`` / ``deberta`` that family's
    (:func:`bert_pipeline.model.families.family_config`: the same layers, width, heads and FFN, so a ``tiny`` RoBERTa
    has BERT-tiny's shape; ModernBERT's GeGLU the intermediate size of the same FFN parameter count,
    :func:`bert_pipeline.model.sizes.glu_intermediate_size`).

    Args:
        size: a key of :data:`SIZES`.
        vocab_size: the tokenizer's vocabulary size (``len(tokenizer)``).
        overrides: ``BertConfig`` fields to set (e.g. ``{"hidden_dropout_prob": 0.0}``). An explicit
            ``vocab_size`` must equal ``vocab_size``.
        max_seq_length: the longest instance the model will see; must be <= ``max_position_embeddings``.
        pad_token_id: the tokenizer's ``[PAD]`` id.
        key: the params key named in error messages.
        family, embedding_size, share_layers: the encoder family and ALBERT's factorised embedding size (None: the
            hidden size) and cross-layer sharing.
        cls_token_id, sep_token_id: the tokenizer's ``[CLS]`` / ``[SEP]`` ids (ModernBERT's config records them).

    Raises:
        ModelConfigError: unknown size, unknown field, vocab_size mismatch, max_seq_length too long, hidden
            size not divisible by the number of heads, or ALBERT's fields for another family.
    """
    from bert_pipeline.model.families import family_config, family_of

    if size not in SIZES:
        raise ModelConfigError(f"{key}.size: unknown size {size!r}, expected one of {', '.join(SIZES)}")
    try:
        spec = family_of(family)
    except ValueError as exc:
        raise ModelConfigError(f"{key}.family: {exc}") from None
    overrides = dict(overrides or {})
    known = set(spec.config_class().to_dict()) | set(spec.field_names)  # BERT's names the family maps to its own
    unknown = sorted(k for k in overrides if k not in known)
    if unknown:
        raise ModelConfigError(f"{key}.config.{unknown[0]}: not a {spec.config_class.__name__} field")
    if "vocab_size" in overrides and overrides["vocab_size"] != vocab_size:
        raise ModelConfigError(
            f"{key}.config.vocab_size: {overrides['vocab_size']} does not match the tokenizer's vocabulary "
            f"of {vocab_size} tokens (leave it out: vocab_size comes from the tokenizer)"
        )
    fields = {**SIZES[size], "pad_token_id": pad_token_id, **overrides, "vocab_size": vocab_size}
    if spec.glu_ffn and "intermediate_size" not in overrides:
        fields["intermediate_size"] = glu_intermediate_size(int(fields["hidden_size"]))
    try:
        config = family_config(spec.name, fields, embedding_size=embedding_size, share_layers=share_layers,
                               cls_token_id=cls_token_id, sep_token_id=sep_token_id)
    except ValueError as exc:
        raise ModelConfigError(str(exc)) from None
    if config.hidden_size % config.num_attention_heads:
        raise ModelConfigError(
            f"{key}: hidden_size {config.hidden_size} is not a multiple of num_attention_heads "
            f"{config.num_attention_heads}"
        )
    check_max_seq_length(config, max_seq_length, key)
    return config


def check_max_seq_length(config: PretrainedConfig, max_seq_length: int | None, key: str = "pretrain") -> None:
    """Raise :class:`ModelConfigError` when instances are longer than the model's ``max_position_embeddings``:
    the position table (RoBERTa's first ``pad_token_id + 1`` rows hold no position). ModernBERT (rotary positions)
    and DeBERTa-v3 (``position_biased_input`` False: relative positions only) have no absolute table; for them
    ``max_position_embeddings`` is the longest sequence the config declares (ModernBERT) and the scale of DeBERTa's
    log-bucketed relative distances (``max_relative_positions`` -1), and instances are held to it the same way."""
    from bert_pipeline.model.families import family_of, is_family_model_type

    offset = family_of(config).position_offset(config) if is_family_model_type(config.model_type) else 0
    usable = config.max_position_embeddings - offset
    if max_seq_length is not None and max_seq_length > usable:
        table = (f"{usable} positions (max_position_embeddings {config.max_position_embeddings}, the first {offset} "
                 "rows before the first position)" if offset else
                 f"max_position_embeddings {config.max_position_embeddings}")
        raise ModelConfigError(f"{key}: max_seq_length {max_seq_length} exceeds the model's {table}")


def check_vocab(config: PretrainedConfig, vocab_size: int, where: str) -> None:
    """Raise :class:`ModelConfigError` when a model's embedding table does not match the tokenizer."""
    if config.vocab_size != vocab_size:
        raise ModelConfigError(
            f"{where}: model vocab_size {config.vocab_size} does not match the tokenizer's {vocab_size} tokens"
        )


def new_pretraining_model(config: PretrainedConfig, with_pair_head: bool, seed: int) -> PreTrainedModel:
    """A freshly initialised pre-training model of the config's family (:mod:`bert_pipeline.model.families`):
    ``BertForPreTraining`` / ``AlbertForPreTraining`` (``with_pair_head``) or ``BertForMaskedLM`` /
    ``RobertaForMaskedLM`` / ``AlbertForMaskedLM`` / ``ModernBertForMaskedLM`` / ``DebertaV2ForMaskedLM``, SDPA
    attention (DeBERTa's disentangled attention has its own implementation).

    The initial weights depend only on ``config`` and ``seed`` (the global torch RNG is seeded here).

    Raises:
        ModelConfigError: a pair head for a family without one (RoBERTa).
    """
    from bert_pipeline.model.families import family_of

    family = family_of(config)
    try:
        cls = family.model_class(with_pair_head)
    except ValueError as exc:
        raise ModelConfigError(str(exc)) from None
    torch.manual_seed(seed)
    config = type(config).from_dict(config.to_dict())
    config._attn_implementation = attention_implementation(cls)
    return cls(config)


def attention_implementation(cls: type[PreTrainedModel]) -> str:
    """``sdpa`` (PyTorch's fused attention) where the class supports it, else ``eager`` (DeBERTa's disentangled
    attention adds its relative-position scores inside its own implementation)."""
    return "sdpa" if getattr(cls, "_supports_sdpa", False) else "eager"


def load_pretraining_model(folder: str | Path, with_pair_head: bool, seed: int) -> PreTrainedModel:
    """Load a checkpoint (folder or hub name) of any family (:mod:`bert_pipeline.model.families`) as its
    pre-training class (``BertForPreTraining`` / ``BertForMaskedLM``, ...) for DAPT.

    Heads missing from the checkpoint (e.g. a sentence-embedding BERT such as MiniLM has no MLM head) are freshly
    initialised with the torch RNG seeded by ``seed``, and the log names them (Gururangan et al. 2020 continue
    a model's pre-training on domain text the same way).

    Raises:
        ModelConfigError: the checkpoint is not of a family the pipeline builds, or a pair head for one without.
    """
    from transformers import AutoConfig

    from bert_pipeline.model.families import FAMILIES, family_of, is_family_model_type

    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as exc:
        raise ModelConfigError(f"pretrain.init: cannot load a model config from {folder!s} ({exc})") from None
    if not is_family_model_type(config.model_type):
        raise ModelConfigError(f"pretrain.init: {folder!s} is a {config.model_type!r} model, expected one of "
                               f"{', '.join(repr(f.model_type) for f in FAMILIES.values())}")
    try:
        cls = family_of(config).model_class(with_pair_head)
    except ValueError as exc:
        raise ModelConfigError(str(exc)) from None
    torch.manual_seed(seed)
    model, info = load_weights(cls, folder, attn_implementation=attention_implementation(cls))
    missing = sorted(k for k in info.get("missing_keys", ()) if "decoder.weight" not in k)
    if missing:
        heads = sorted({".".join(k.split(".")[:3]) for k in missing})
        log.warning(
            "%s has no weights for %d tensors (%s): freshly initialised (seed %d)",
            folder, len(missing), ", ".join(heads), seed,
        )
    return model


def _weight_groups(keys: Any) -> str:
    """``"classifier (2 tensors), cls.predictions (5 tensors)"``: keys grouped by their module, first two parts."""
    groups: dict[str, int] = {}
    for key in sorted(keys):
        parts = key.split(".")
        name = ".".join(parts[:2]) if len(parts) > 2 else parts[0]
        groups[name] = groups.get(name, 0) + 1
    return ", ".join(f"{name} ({n} tensor{'s' if n > 1 else ''})" for name, n in groups.items())


def load_weights(cls: Any, path: str | Path, **kwargs: Any) -> tuple[PreTrainedModel, dict[str, list[str]]]:
    """``cls.from_pretrained(path, **kwargs)``, summarising what did not match in one INFO line.

    A task head on a pre-trained encoder always starts with new head weights (``MISSING``) and leaves the
    pre-training heads out (``UNEXPECTED``); transformers prints a table of every such tensor on each load (about 20
    lines per fine-tuning seed). That table is silenced for this call only; the line logged instead names the
    modules, and a shape mismatch or load error still raises as before.

    Returns:
        the model and its loading info (``missing_keys``, ``unexpected_keys``, ``mismatched_keys``, ``error_msgs``).
    """
    hf_logger = logging.getLogger("transformers.modeling_utils")
    hf_logger.addFilter(_drop_load_report)
    try:
        model, info = cls.from_pretrained(str(path), output_loading_info=True, **kwargs)
    finally:
        hf_logger.removeFilter(_drop_load_report)
    new, unused = info.get("missing_keys", ()), info.get("unexpected_keys", ())
    if new or unused:
        log.info("%s from %s: new weights %s; checkpoint weights not used: %s", type(model).__name__, path,
                 _weight_groups(new) or "none", _weight_groups(unused) or "none")
    return model, info


def _drop_load_report(record: logging.LogRecord) -> bool:
    """A logging filter: False for transformers' load report (its message names ``LOAD REPORT``). A filter, not a
    higher level on the logger: transformers runs an extra tensor-parallel check, which warns about every tensor of
    an unsharded model, whenever that logger's own level is WARNING or above."""
    return "LOAD REPORT" not in str(record.msg)


def save_model(model: PreTrainedModel, folder: str | Path, tokenizer=None) -> None:
    """``save_pretrained`` (safetensors) of the standard class with the tokenizer beside it.

    The config's ``architectures`` names the stock class, so ``AutoModelForPreTraining`` /
    ``AutoModelForMaskedLM`` load the folder. For a family without token types (RoBERTa, ModernBERT, DeBERTa:
    :attr:`bert_pipeline.model.families.Family.token_types`) the tokenizer is saved with ``model_input_names``
    without ``token_type_ids`` (a WordPiece tokenizer has them) written into its ``tokenizer_config.json``, so
    everything that encodes with the saved tokenizer (fine-tuning, predict, ONNX export, retrieval) gives the model
    no token types; ``tokenizer`` itself is unchanged.
    """
    from bert_pipeline.model.families import family_of, is_family_model_type

    model.config.architectures = [type(model).__name__]
    model.save_pretrained(str(folder), safe_serialization=True)
    if tokenizer is None:
        return
    tokenizer.save_pretrained(str(folder))
    names = list(tokenizer.model_input_names)
    if (is_family_model_type(model.config.model_type) and not family_of(model.config).token_types
            and "token_type_ids" in names):
        # tokenizer_config.json records no model_input_names by itself: the class's default would come back on
        # loading (BertTokenizer's has token_type_ids); written here, from_pretrained passes them to the class
        path = Path(folder) / "tokenizer_config.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["model_input_names"] = [n for n in names if n != "token_type_ids"]
        path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def set_dropout(model: nn.Module, probability: float) -> int:
    """Set every ``nn.Dropout`` of ``model`` (embeddings, attention probabilities, hidden states, heads) to
    ``probability`` in place, leaving ``model.config`` as it is, so a model pre-trained without dropout (Geiping and
    Goldstein 2023, "Cramming", §4.2) is saved with the config's rates for fine-tuning.

    ModernBERT's attention applies its probability dropout from a float attribute (``attention_dropout``, passed
    to the attention function) and its output dropout only where the config's rate was above 0 (else an
    ``nn.Identity``): both are set here too, the Identity replaced by an ``nn.Dropout`` (no weights) for a rate
    above 0.

    Returns:
        The number of dropout modules changed (ModernBERT's attention probability dropouts included).

    Raises:
        ValueError: ``probability`` outside [0, 1).
    """
    if not 0.0 <= probability < 1.0:
        raise ValueError(f"dropout: expected a probability in [0, 1), got {probability!r}")
    changed = 0
    for module in list(model.modules()):
        if isinstance(getattr(module, "attention_dropout", None), float):  # ModernBERT's attention
            module.attention_dropout = float(probability)
            changed += 1
            if isinstance(getattr(module, "out_drop", None), nn.Identity) and probability > 0:
                module.out_drop = nn.Dropout(float(probability))
    modules = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    for module in modules:
        module.p = float(probability)
    return changed + len(modules)


def count_parameters(model: nn.Module, exclude_embeddings: bool = False) -> int:
    """Number of distinct parameters (tied weights, such as BERT's MLM decoder and word embeddings, counted once);
    optionally without the embedding tables. Pass ``model.base_model`` to count the encoder without a task head."""
    seen: set[int] = set()
    total = 0
    for name, p in model.named_parameters():
        if id(p) in seen or (exclude_embeddings and "embeddings" in name):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def training_flops_per_step(config: PretrainedConfig, batch: int, seq_len: int, predicted: int, full_decoder: bool) -> float:
    """Model FLOPs of one training step (forward + backward = 3x forward), counting matmuls only.

    Encoder per layer and token: QKV/output projections 8 H^2, FFN 4 H I (ModernBERT's GeGLU 6 H I), attention
    scores and values 4 S H (multiply-add = 2 FLOPs); DeBERTa's relative-position projections and c2p/p2c scores are
    not counted. MLM head per predicted position (or per position with ``full_decoder``):
    transform 2 H^2, projection 2 H V. This is the "model FLOPs" of Chowdhery et al. 2022 (PaLM, Appendix B),
    so the MLM head's FLOPs are those actually required by each variant.

    Args:
        batch: sequences per step; seq_len: padded length; predicted: predicted positions in the step.
    """
    h, i, layers, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    tokens = batch * seq_len
    from bert_pipeline.model.families import family_of, is_family_model_type

    glu = is_family_model_type(config.model_type) and family_of(config).glu_ffn
    ffn = (6 if glu else 4) * h * i  # a GeGLU (ModernBERT's): H -> 2I, I -> H
    encoder = layers * tokens * (8 * h * h + ffn + 4 * seq_len * h)
    head_positions = tokens if full_decoder else predicted
    head = head_positions * (2 * h * h + 2 * h * v)
    pooler = batch * 2 * h * h
    return 3.0 * (encoder + head + pooler)
