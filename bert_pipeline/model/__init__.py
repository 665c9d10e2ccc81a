"""Models: named sizes and configs, the pre-training objectives (masked-position MLM + NSP/SOP), task heads and
their pre/post-processing, and DistilBERT-style distillation (student, losses)."""
