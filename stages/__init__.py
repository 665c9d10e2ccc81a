"""The pipeline's DVC stages, one module each (``python -m stages.NAME``), plus the params schema and the console
script for the tools that are not stages (``bert-pipeline``).

This package is the side that knows ``params.yaml`` and the DVC layout: a stage reads its typed params section
(:mod:`stages.params`), calls :mod:`bert_pipeline`, and writes its outputs atomically. See ``ARCHITECTURE.md``.
"""

import bert_pipeline  # noqa: F401  (offline and telemetry defaults before any HF library is imported)
