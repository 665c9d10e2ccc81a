"""MLOps: MLflow tracking (one run per stage execution), the model registry (aliases candidate/champion) and the
pyfunc wrapper that serves what the transformers flavour cannot hold."""
