"""The BERT pipeline's stages (``python -m stages.NAME``) and the library they share.

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
