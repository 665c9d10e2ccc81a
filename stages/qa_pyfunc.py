"""MLflow "model from code" for extractive QA (transformers 5 has no question-answering pipeline, so the
``mlflow.transformers`` flavour cannot hold a QA model).

Logged by :func:`stages.registry.log_version` with the fine-tuned folder as artifact ``model`` and ``stages/``
as code. Input: rows with ``question`` and ``context`` (a DataFrame or a list of mappings); output: one
``{"answer", "start", "end", "score"}`` per row (character offsets into the context), as :func:`stages.predictor.answer`.
MLflow executes this file to build the model; nothing imports it.
"""

from __future__ import annotations

from pathlib import Path

import mlflow.models
from mlflow.pyfunc import PythonModel


class ExtractiveQA(PythonModel):
    """Serve a ``models/finetuned/*-qa`` folder through :func:`stages.predictor.answer`."""

    def load_context(self, context):
        from stages.predictor import load_predictor

        self.pred = load_predictor(Path(context.artifacts["model"]))

    def predict(self, context, model_input, params=None):
        from stages.predictor import answer

        rows = model_input.to_dict("records") if hasattr(model_input, "to_dict") else list(model_input)
        return [answer(self.pred, str(r["question"]), str(r["context"])) for r in rows]


mlflow.models.set_model(ExtractiveQA())
