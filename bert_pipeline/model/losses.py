"""The soft-target loss every distillation shares (Hinton et al. 2015): the pre-training student's KL term
(:mod:`bert_pipeline.model.distillation`) and each task head's (:mod:`bert_pipeline.tasks`), in a module of its
own so that fine-tuning does not import the pre-training objectives.
"""

from __future__ import annotations

import torch
from torch.nn import functional


def kl_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Soft-target loss ``KL(softmax(t/T) || softmax(s/T)) * T^2`` averaged over positions (Hinton et al. 2015, §2;
    Sanh et al. 2019, §2).

    Args:
        student_logits, teacher_logits: ``(n_positions, vocab_size)`` float logits at the MLM positions.
        temperature: ``T`` > 0; the ``T^2`` factor keeps gradient magnitudes comparable across temperatures.

    Returns:
        A scalar float32 tensor; 0 when the student's logits equal the teacher's.
    """
    s = functional.log_softmax(student_logits.float() / temperature, dim=-1)
    t = functional.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return functional.kl_div(s, t, reduction="batchmean", log_target=True) * temperature**2
