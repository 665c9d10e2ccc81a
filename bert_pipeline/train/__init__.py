"""Training: the resumable pre-training/distillation loop, optimizers (AdamW, LAMB), precision, checkpoints, the
fine-tuning loop with early stopping, and contrastive fine-tuning of sentence encoders."""
