"""Evaluation: task metrics (accuracy/F1, seqeval, SQuAD EM/F1), inference speed, the predictor that serves a
fine-tuned folder, and the family report with its provenance card."""
