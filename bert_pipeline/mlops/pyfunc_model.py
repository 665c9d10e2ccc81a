"""MLflow "model from code" for fine-tuned folders the ``mlflow.transformers`` flavour cannot hold.

Three cases (see :mod:`bert_pipeline.mlops.registry`): extractive QA (transformers 5 removed the question-answering
pipeline the flavour builds), NER (the flavour keeps only entity types and reads one window), and sentence
classifiers with finetune's mean-pooling head (``config.classifier_pooling: mean``, a class of
``bert_pipeline.model.heads`` that the flavour would reload as the plain ``[CLS]``-pooler class). Logged with the
fine-tuned folder as artifact ``model`` and the ``bert_pipeline`` package as code; MLflow executes this file to build the model,
nothing imports it.

Input (a list, or ``{"inputs": [...]}`` when served): sentence classification and NER take texts; QA takes
``{"question", "context"}`` rows; a sentence-pair classifier ``{"text", "text_pair"}`` rows (a regression head
takes texts and returns ``{"value", "tokens", "truncated"}``). The class is chosen by the ``kind`` in the logged ``model_config``. Output per row, as
:mod:`bert_pipeline.evaluation.predictor`: ``{"label", "probability", "tokens", "truncated"}``; ``{"entities": [...]}``
with character offsets (a long text tagged whole, in windows); ``{"answer", "start", "end", "score", "logit_sum",
"windows", "question_truncated"}`` (``score``: the answer's probability, as Hugging Face's question-answering
pipeline reports it; ``logit_sum``: its start + end logit).
"""

from __future__ import annotations

from pathlib import Path

import mlflow.models
from mlflow.pyfunc import PythonModel


class FinetunedTextModel(PythonModel):
    """Serve a fine-tuned sentence classifier or NER folder: texts in, one result per text.

    The type hint (``list[str]``) is MLflow's schema: it validates served input and infers the signature, and its
    absence was a warning on every ``promote``.
    """

    def load_context(self, context):
        from bert_pipeline.evaluation.predictor import load_predictor

        self.pred = load_predictor(Path(context.artifacts["model"]))

    def predict(self, context, model_input: list[str], params=None):
        from bert_pipeline.tasks import ServeRequest

        return self.pred.task.serve(self.pred, [str(text) for text in model_input], ServeRequest())


class FinetunedQAModel(FinetunedTextModel):
    """Serve a fine-tuned extractive-QA folder: ``{"question", "context"}`` rows in, one answer per row."""

    def predict(self, context, model_input: list[dict[str, str]], params=None):
        from bert_pipeline.tasks import ServeRequest

        return [self.pred.task.serve(self.pred, [str(row["question"])], ServeRequest(context=str(row["context"])))[0]
                for row in model_input]


class FinetunedPairModel(FinetunedTextModel):
    """Serve a fine-tuned sentence-pair classifier: ``{"text", "text_pair"}`` rows in, ``{"label", "probability",
    "tokens", "truncated"}`` per row (the pair encoded as fine-tuning encoded it, ``token_type_ids`` 0 then 1)."""

    def predict(self, context, model_input: list[dict[str, str]], params=None):
        from bert_pipeline.tasks.sequence import classify

        return classify(self.pred, [str(row["text"]) for row in model_input],
                        text_pairs=[str(row["text_pair"]) for row in model_input])


# The registry logs this file with model_config {"kind": ...}; MLflow runs it to build the model.
_KIND = (mlflow.models.ModelConfig(development_config={"kind": "text"}).get("kind"))
# bert_pipeline.tasks.base.TaskKind.pyfunc_input names the row layout
mlflow.models.set_model({"question-answering": FinetunedQAModel,
                         "sentence-pair-classification": FinetunedPairModel}.get(_KIND, FinetunedTextModel)())
