"""Knowledge distillation of a BERT teacher into a shallower student (DistilBERT, Sanh et al. 2019).

Three pieces, each usable on its own:

* :func:`layer_map` / :func:`build_student`: the student is the teacher's architecture with fewer layers,
  initialised from the teacher "by taking one layer out of two" (Sanh et al. 2019, §3; ``selection`` "uniform") or
  from its lowest layers (``selection`` "bottom": top-layer dropping, Sajjad et al. 2023). Unlike DistilBERT, the
  student keeps ``token_type`` embeddings, the pooler and the NSP head, so it is a drop-in ``BertForPreTraining``
  that loads with ``AutoModelForMaskedLM`` and ``AutoModelForSequenceClassification``.
* :func:`distillation_loss`: the triple loss of Sanh et al. 2019, §2-3, on the MLM positions:
  ``alpha_ce * KL(softmax(t/T) || softmax(s/T)) * T^2 + alpha_mlm * CE(s, labels) + alpha_cos * (1 - cos(h_s, h_t))``.
* :func:`load_teacher`: a pre-trained teacher folder as the stock class its config names.
* :func:`kl_loss`, the soft-target term, is also what task-specific distillation applies to each task head's logits
  (:meth:`bert_pipeline.tasks.base.TaskKind.soft_target_loss`, :func:`bert_pipeline.train.task_distill.
  task_distillation_loss`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional

from bert_pipeline.data.masking import IGNORE_INDEX
from bert_pipeline.errors import PipelineError, SettingError
from bert_pipeline.model.families import family_of
from bert_pipeline.model.losses import kl_loss
from bert_pipeline.model.objectives import masked_lm_forward, top1_hits

log = logging.getLogger(__name__)

def default_student_layers(teacher_layers: int) -> int:
    """Half the teacher's layers, rounded down, at least 1 (DistilBERT: 12 -> 6)."""
    return max(1, teacher_layers // 2)


def resolve_student_layers(student_layers: int | None, teacher_layers: int, teacher_dir: Path | str) -> int:
    """``student_layers`` (None = half the teacher's, :func:`default_student_layers`), checked against the teacher.

    Raises:
        SettingError: ``student_layers``: more layers than the teacher has, or fewer than 1.
    """
    layers = default_student_layers(teacher_layers) if student_layers is None else student_layers
    if not 1 <= layers <= teacher_layers:
        raise SettingError(
            "student_layers", f"expected an int from 1 to {teacher_layers} (the teacher in "
            f"{teacher_dir} has {teacher_layers} layers), got {layers}"
        )
    return layers


LAYER_SELECTIONS = ("uniform", "bottom")


def layer_map(teacher_layers: int, student_layers: int, selection: str = "uniform") -> list[int]:
    """Teacher layer index that initialises each student layer.

    ``selection`` "uniform": student layer ``i`` <- teacher layer ``floor(i * teacher_layers / student_layers)``;
    with half the layers this is ``2i`` (0, 2, 4, ... ; "one layer out of two", Sanh et al. 2019, §3); other ratios
    spread the chosen layers evenly from the bottom. "bottom": the teacher's ``student_layers`` lowest layers
    (0, 1, 2, ...), the top ones dropped ("top-layer dropping": Sajjad et al. 2023, "On the effect of dropping
    layers of pre-trained transformer models", Computer Speech & Language 77), so that each kept layer reads the
    input it read in the teacher. Equal depth copies every layer either way.

    Returns:
        ``student_layers`` strictly increasing ints in ``[0, teacher_layers)``.

    Raises:
        ValueError: ``student_layers`` < 1 or > ``teacher_layers``, or ``selection`` not in
            :data:`LAYER_SELECTIONS`.
    """
    if not 1 <= student_layers <= teacher_layers:
        raise ValueError(f"student_layers: expected 1 <= student_layers <= {teacher_layers}, got {student_layers}")
    if selection == "bottom":
        return list(range(student_layers))
    if selection != "uniform":
        raise ValueError(f"selection: expected one of {', '.join(LAYER_SELECTIONS)}, got {selection!r}")
    return [(i * teacher_layers) // student_layers for i in range(student_layers)]


def _remap_key(key: str, mapping: dict[int, int], prefix: str) -> str | None:
    """Rename a teacher state-dict key for the student; None for a teacher layer the student does not take."""
    at = key.find(prefix)
    if at < 0:
        return key
    start = at + len(prefix)
    index, _, rest = key[start:].partition(".")
    teacher_index = int(index)
    if teacher_index not in mapping:
        return None
    return f"{key[:start]}{mapping[teacher_index]}.{rest}"


def build_student(teacher: nn.Module, student_layers: int, selection: str = "uniform") -> tuple[nn.Module, list[int]]:
    """A student with the teacher's class and config except ``num_hidden_layers = student_layers``.

    Every weight outside the encoder layers (word, position and ``token_type`` embeddings, embedding LayerNorm,
    pooler, MLM head, NSP head) is copied from the teacher; student layer ``i`` is a copy of teacher layer
    ``layer_map(L, student_layers, selection)[i]``. The teacher is not modified.

    Args:
        teacher: a pre-training model of any family (:mod:`bert_pipeline.model.families`; the student is of the
            same family and class): ``encoder.layer.N`` weights for BERT, RoBERTa and DeBERTa (whose encoder's
            shared relative-position embeddings and their LayerNorm, outside the layers, are copied),
            ``model.layers.N`` for ModernBERT (its ``layer_types`` follow the chosen layers); for ALBERT with shared
            layers the one shared layer (the student runs it ``student_layers`` times), else one group per layer.
        student_layers: depth of the student, 1 <= student_layers <= teacher layers.
        selection: which teacher layers, "uniform" or "bottom" (:func:`layer_map`).

    Returns:
        ``(student, mapping)``: the student in train mode (same dtype as the teacher) and the teacher layer index of
        each student layer.

    Raises:
        ValueError: ``student_layers`` out of range, or an unknown ``selection``.
    """
    teacher_layers = teacher.config.num_hidden_layers
    mapping = layer_map(teacher_layers, student_layers, selection)
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = student_layers
    family = family_of(config)
    prefix = family.layer_prefix
    if getattr(config, "layer_types", None) is not None:  # ModernBERT: each layer's attention kind follows it
        config.layer_types = [teacher.config.layer_types[t] for t in mapping]
    if family.factorised:  # ALBERT keeps its layers in groups (one when every layer shares weights, else one each)
        if config.num_hidden_groups == 1:  # shared layers: the student runs the same one layer fewer times
            mapping = [0] * student_layers
        else:  # one group per layer (Lan et al. 2020, §3.1 sharing off): groups follow the layers
            config.num_hidden_groups = student_layers
    student = type(teacher)(config)
    by_teacher = {0: 0} if family.factorised and config.num_hidden_groups == 1 else {
        t: s for s, t in enumerate(mapping)}
    state = {}
    for key, value in teacher.state_dict().items():
        new_key = _remap_key(key, by_teacher, prefix)
        if new_key is not None:
            state[new_key] = value.detach().clone()
    student.load_state_dict(state, strict=True)
    student.to(dtype=next(teacher.parameters()).dtype)
    student.train()
    log.info("student: %d of %d teacher layers, student layer i <- teacher layer %s", student_layers,
             teacher_layers, mapping)
    return student, mapping


# ------------------------------------------------------------------------------------------------- losses
def mlm_loss(student_logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Hard-target MLM cross-entropy, mean over positions (Devlin et al. 2019, §3.1).

    Args:
        student_logits: ``(n_positions, vocab_size)`` float logits.
        labels: ``(n_positions,)`` int64 original token ids (positions whose label is -100 are ignored).
    """
    return functional.cross_entropy(student_logits.float(), labels, ignore_index=IGNORE_INDEX)


def cosine_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor) -> torch.Tensor:
    """Cosine-embedding loss ``mean(1 - cos(h_s, h_t))`` aligning hidden-state directions (Sanh et al. 2019, §2).

    Args:
        student_hidden, teacher_hidden: ``(n_positions, hidden_size)`` float hidden states of the same positions.
    """
    target = torch.ones(student_hidden.shape[0], device=student_hidden.device)
    return functional.cosine_embedding_loss(student_hidden.float(), teacher_hidden.float(), target, reduction="mean")


@dataclass
class DistillationLoss:
    """The weighted total and each unweighted term (scalar tensors); ``total`` is what gets back-propagated."""

    total: torch.Tensor
    kl: torch.Tensor
    mlm: torch.Tensor
    cos: torch.Tensor


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    student_hidden: torch.Tensor,
    teacher_hidden: torch.Tensor,
    *,
    temperature: float,
    alpha_ce: float,
    alpha_mlm: float,
    alpha_cos: float,
) -> DistillationLoss:
    """DistilBERT's triple loss (Sanh et al. 2019, §2-3).

    ``total = alpha_ce * kl_loss + alpha_mlm * mlm_loss + alpha_cos * cosine_loss``; a term with weight 0 is still
    computed and reported but adds nothing.

    Args:
        student_logits, teacher_logits: ``(n_masked, vocab_size)`` logits at the MLM positions.
        labels: ``(n_masked,)`` int64 original ids at those positions.
        student_hidden, teacher_hidden: ``(n_tokens, hidden_size)`` last hidden states at the positions the cosine
            term aligns (DistilBERT's reference code uses every non-padding token).
        temperature: softmax temperature ``T`` > 0.
        alpha_ce, alpha_mlm, alpha_cos: non-negative weights, not all 0.

    Raises:
        ValueError: ``temperature`` <= 0, a negative weight, or all weights 0.
    """
    if temperature <= 0:
        raise ValueError(f"temperature: expected > 0, got {temperature}")
    weights = (alpha_ce, alpha_mlm, alpha_cos)
    if min(weights) < 0 or max(weights) <= 0:
        raise ValueError(f"alpha_ce, alpha_mlm, alpha_cos: expected >= 0 and not all 0, got {weights}")
    kl = kl_loss(student_logits, teacher_logits, temperature)
    mlm = mlm_loss(student_logits, labels)
    cos = cosine_loss(student_hidden, teacher_hidden)
    total = alpha_ce * kl + alpha_mlm * mlm + alpha_cos * cos
    return DistillationLoss(total=total, kl=kl.detach(), mlm=mlm.detach(), cos=cos.detach())


# ------------------------------------------------------------------------------------------------- model
@dataclass
class DistillOutput:
    """One distillation forward pass (0-d tensors). ``loss`` is the weighted triple loss that is optimised;
    ``mlm_loss`` is the student's MLM cross-entropy and ``mlm_correct`` / ``mlm_count`` its top-1 hits and the
    number of predicted positions, so a training loop's evaluation reads the student's MLM accuracy; the hits are
    counted from the detached logits only when read (a training step does not)."""

    loss: torch.Tensor
    kl_loss: torch.Tensor
    mlm_loss: torch.Tensor
    cos_loss: torch.Tensor
    mlm_count: torch.Tensor
    mlm_logits: torch.Tensor  # the student's (n_predicted, vocab_size) float32, detached
    mlm_targets: torch.Tensor  # (n_predicted,) int64
    pair_loss: torch.Tensor | None = None  # no NSP/SOP objective in distillation (Sanh et al. 2019, §3)
    pair_correct: torch.Tensor | None = None
    pair_count: torch.Tensor | None = None

    @property
    def mlm_correct(self) -> torch.Tensor:
        """The student's top-1 hits at the predicted positions (0-d int64)."""
        return top1_hits(self.mlm_logits, self.mlm_targets)


class DistillationModel(nn.Module):
    """Student + frozen teacher -> DistilBERT's triple loss on a Hugging Face MLM batch (Sanh et al. 2019, §3).

    Only the student is a submodule: ``parameters()``, ``state_dict()`` and checkpoints hold the student alone. The
    teacher is kept in eval mode, with ``requires_grad`` off, runs under ``torch.no_grad()`` and moves with the
    student: ``.to(device)`` (what accelerate's ``prepare`` calls) moves both, so the teacher is on the student's
    device before any forward, also when a resumed run evaluates without training a step.

    Args:
        student, teacher: ``BertForPreTraining`` / ``BertForMaskedLM`` models with the same vocabulary and hidden
            size (e.g. from :func:`build_student`).
        temperature, alpha_ce, alpha_mlm, alpha_cos: see :func:`distillation_loss`.
        cos_positions: ``"tokens"`` aligns the hidden states of every non-padding token (DistilBERT's reference
            code), ``"masked"`` only those of the MLM positions.
    """

    def __init__(self, student: nn.Module, teacher: nn.Module, *, temperature: float, alpha_ce: float,
                 alpha_mlm: float, alpha_cos: float, cos_positions: str = "tokens"):
        super().__init__()
        if cos_positions not in ("tokens", "masked"):
            raise ValueError(f"cos_positions: expected 'tokens' or 'masked', got {cos_positions!r}")
        if student.config.hidden_size != teacher.config.hidden_size or \
                student.config.vocab_size != teacher.config.vocab_size:
            raise ValueError("student and teacher must share hidden_size and vocab_size")
        self.student = student
        teacher.requires_grad_(False)
        teacher.eval()
        self.__dict__["teacher"] = teacher  # not a submodule: not optimised, not in state_dict
        self.loss_kwargs = {"temperature": temperature, "alpha_ce": alpha_ce, "alpha_mlm": alpha_mlm,
                            "alpha_cos": alpha_cos}
        self.cos_positions = cos_positions

    def _apply(self, fn, recurse: bool = True):  # .to(), .cuda(), .float(): the teacher follows the student
        super()._apply(fn, recurse)
        self.teacher._apply(fn, recurse)
        return self

    def train(self, mode: bool = True) -> DistillationModel:
        """Set the student's mode; the teacher stays in eval mode."""
        super().train(mode)
        self.teacher.eval()
        return self

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, masked_positions: torch.Tensor | None = None,
                **_pair_labels: torch.Tensor) -> DistillOutput:
        """Triple loss on one batch ``(batch, seq_len)`` int64; NSP/SOP labels are accepted and ignored
        (DistilBERT drops the NSP objective; the student keeps the teacher's NSP head unchanged)."""
        with torch.no_grad():
            t_logits, t_out, _ = masked_lm_forward(self.teacher, input_ids, labels, attention_mask, token_type_ids,
                                                   masked_positions)
        s_logits, s_out, targets = masked_lm_forward(self.student, input_ids, labels, attention_mask, token_type_ids,
                                                     masked_positions)
        t_hidden, s_hidden = t_out.last_hidden_state, s_out.last_hidden_state
        if self.cos_positions == "masked":
            keep = labels != IGNORE_INDEX
        elif attention_mask is not None:
            keep = attention_mask.bool()
        else:
            keep = torch.ones_like(input_ids, dtype=torch.bool)
        out = distillation_loss(s_logits, t_logits, targets, s_hidden[keep], t_hidden[keep], **self.loss_kwargs)
        count = torch.tensor(targets.numel())  # a host tensor (the shape's value)
        return DistillOutput(loss=out.total, kl_loss=out.kl, mlm_loss=out.mlm, cos_loss=out.cos, mlm_count=count,
                             mlm_logits=s_logits.detach(), mlm_targets=targets)


def load_teacher(folder: Path) -> nn.Module:
    """The teacher as the stock pre-training class its config names (``BertForPreTraining``,
    ``RobertaForMaskedLM``, ``AlbertForPreTraining``, ...: :data:`bert_pipeline.model.families.PRETRAINING_CLASSES`),
    in eval mode. The student :func:`build_student` makes from it is of the same family.

    Raises:
        PipelineError: no model in ``folder`` or not a pre-training model of a family the pipeline builds.
    """
    from transformers import AutoConfig

    from bert_pipeline.model.configs import attention_implementation
    from bert_pipeline.model.families import BASE_FAMILY, FAMILIES, PRETRAINING_CLASSES

    if not (folder / "config.json").is_file():
        raise PipelineError(f"{folder}: no config.json: expected the pretrain stage's model (run `dvc repro pretrain`)")
    config = AutoConfig.from_pretrained(str(folder))
    arch = (config.architectures or [FAMILIES[BASE_FAMILY].pretraining_class.__name__])[0]
    if arch not in PRETRAINING_CLASSES or PRETRAINING_CLASSES[arch][0].model_type != config.model_type:
        raise PipelineError(f"{folder}: expected a pre-training teacher ({', '.join(PRETRAINING_CLASSES)}), got {arch}")
    family, with_pair_head = PRETRAINING_CLASSES[arch]
    cls = family.model_class(with_pair_head)
    teacher = cls.from_pretrained(str(folder), attn_implementation=attention_implementation(cls))
    return teacher.eval()
