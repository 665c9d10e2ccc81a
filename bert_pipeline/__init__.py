"""The BERT pipeline library: corpus to registered models, by part. It reads no params file and names no DVC
path (``tests/test_layering.py`` keeps it so); the stages in ``stages/`` wire params and paths to it
(``ARCHITECTURE.md`` has the map).

- :mod:`bert_pipeline.data`: sources, fetching, corpus cleaning, sentence splitting, WordPiece, instances, masking,
  shards, task sets;
- :mod:`bert_pipeline.model`: sizes and configs, the pre-training objectives, task heads, distillation;
- :mod:`bert_pipeline.train`: the pre-training loop, optimizers, precision, checkpoints, fine-tuning;
- :mod:`bert_pipeline.evaluation`: task metrics, speed, the predictor, the report and its provenance;
- :mod:`bert_pipeline.mlops`: MLflow tracking, the registry and its pyfunc wrapper.

Importing this package sets the defaults that keep every run offline and telemetry-free unless the user
has set the variable already (a user with the network can export ``HF_HUB_OFFLINE=0``).
"""

import os

OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DVC_NO_ANALYTICS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

for _key, _value in OFFLINE_DEFAULTS.items():
    os.environ.setdefault(_key, _value)
