"""MLflow "model from code" for fine-tuned folders the ``mlflow.transformers`` flavour cannot hold.

Three cases (see :mod:`bert_pipeline.mlops.registry`): extractive QA (transformers 5 removed the question-answering
pipeline the flavour builds), NER (the flavour keeps only entity types and reads one window), and sentence
classifiers with finetune's mean-pooling head (``config.classifier_pooling: mean``, a class of
``bert_pipeline.model.heads`` that the flavour would reload as the plain ``[CLS]``-pooler class). Logged with the
fine-tuned folder as artifact ``model`` and the ``bert_pipeline`` package as code; MLflow executes this file to build the model,
nothing imports it.

Input rows (a DataFrame, a list, or ``{"inputs": [...]}`` when served): sentence classification and NER take
texts (strings, or mappings/columns named ``text``); QA takes ``{"question", "context"}``. Output per row, as
:mod:`bert_pipeline.evaluation.predictor`: ``{"label", "probability", "tokens", "truncated"}``; ``{"entities": [...]}``
with character offsets (a long text tagged whole, in windows); ``{"answer", "start", "end", "score", "logit_sum",
"windows", "question_truncated"}`` (``score``: the answer's probability, as Hugging Face's question-answering
pipeline reports it; ``logit_sum``: its start + end logit).
"""

from __future__ import annotations

from pathlib import Path

import mlflow.models
from mlflow.pyfunc import PythonModel


def _rows(model_input) -> list:
    if hasattr(model_input, "to_dict"):  # DataFrame
        if list(model_input.columns) == [0]:
            return list(model_input[0])
        return model_input.to_dict("records")
    if hasattr(model_input, "tolist"):  # numpy array
        return model_input.tolist()
    return list(model_input) if isinstance(model_input, list | tuple) else [model_input]


def _text(row) -> str:
    return str(row["text"]) if isinstance(row, dict) else str(row)


class FinetunedModel(PythonModel):
    """Serve a fine-tuned ``{model}-{task}`` folder through :mod:`bert_pipeline.evaluation.predictor`."""

    def load_context(self, context):
        from bert_pipeline.evaluation.predictor import load_predictor

        self.pred = load_predictor(Path(context.artifacts["model"]))

    def predict(self, context, model_input, params=None):
        from bert_pipeline.evaluation.predictor import answer, classify, entities

        rows = _rows(model_input)
        if self.pred.kind == "question-answering":
            return [answer(self.pred, str(r["question"]), str(r["context"])) for r in rows]
        texts = [_text(r) for r in rows]
        if self.pred.kind == "token-classification":
            return [{"entities": e} for e in entities(self.pred, texts)]
        return classify(self.pred, texts)


mlflow.models.set_model(FinetunedModel())
