"""Training: the resumable pre-training/distillation loop, optimizers (AdamW, LAMB), precision, checkpoints, and
the fine-tuning loop with early stopping."""
