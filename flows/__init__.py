"""The Prefect flow over ``dvc.yaml`` (:mod:`flows.pipeline`) and its worker logic (:mod:`flows.worker`).

Importing this package (before Prefect is imported) sets the project's offline/telemetry defaults and gives a
person's local run, which starts Prefect's temporary API server, more than Prefect's 20 s to start it on a busy
machine. A variable the user has set wins.
"""

import os

import bert_pipeline  # noqa: F401  (offline and telemetry defaults)

os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
