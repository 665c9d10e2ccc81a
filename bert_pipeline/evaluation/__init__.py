"""Evaluation: what measures, used by training and above it: task metrics (accuracy/F1, seqeval, SQuAD EM/F1),
inference speed, the predictor that serves a fine-tuned folder, and sentence-embedding retrieval scores. The report
that presents them is :mod:`bert_pipeline.report`."""
