"""Evaluation: what measures, used by training and above it: the per-example records of held-out results and their
paired bootstrap intervals (:mod:`.examples`, :mod:`.intervals`), inference speed, the predictor that serves a
fine-tuned folder, and sentence-embedding retrieval scores with their per-query ranks. Each task kind's own metrics
are its module's (:mod:`bert_pipeline.tasks`); the report that presents them is :mod:`bert_pipeline.report`."""
