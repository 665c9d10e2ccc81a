"""What every task kind provides (:class:`TaskKind`) and the held-out scorer they build (:class:`HeldoutScorer`).

A task kind (classification, pair classification, regression, NER, QA, multi-label classification) is one module
of this package holding all that differs between kinds, as fairseq's ``tasks/`` holds one ``FairseqTask`` per task
and transformers' ``pipelines/`` one module per task: how a user's files are read and described, how examples are
encoded (windows, label alignment), the head's config and class, the metric, how held-out outputs are decoded and
scored, the teacher-logit layout and losses of task-specific distillation, what ``predict`` serves, the ONNX
outputs and what a model card says of the head. The rest of the pipeline asks the kind
(:func:`bert_pipeline.tasks.get`, a predictor's ``task``) instead of branching on its name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch and datasets load when a method needs them: asking a kind for its facts stays cheap
    import torch
    from datasets import Dataset

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")
"""The feature keys a model's forward takes (inputs and the labels its own loss reads)."""
INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")
"""The feature keys that are model inputs (no labels)."""
LABEL_KEYS = ("labels", "start_positions", "end_positions")
"""The feature keys that hold gold labels (``-100`` where a position or example is not scored)."""

Forward = Callable[[list[dict[str, list[int]]], Any], list[Any]]
"""``(features, collate) -> outputs``: the model's float32 outputs per feature, in input order, cut to each
feature's length (``bert_pipeline.train.finetune.forward_all`` bound to a model, batch size and runtime):
``(num_labels,)`` per example for a sequence head, ``(seq_len, num_labels)`` per window for token classification,
``(start, end)`` ``(seq_len,)`` arrays per window for QA."""


class Scores(dict):
    """A split's metrics (``{metric: value}``, a plain dict to every reader) that also carry the per-example
    ``predictions`` they were computed from (one per example, in the split's order), so the per-example record
    (:meth:`TaskKind.example_columns`) needs no second forward pass."""

    def __init__(self, metrics: dict[str, float], predictions: list[Any]):
        super().__init__(metrics)
        self.predictions = predictions


@dataclass(frozen=True)
class HeldoutScorer:
    """A held-out split's gold ``references`` (one per example), a ``predict`` function ``model -> predictions``
    (one per example, in the split's order) and ``score`` ``(references, predictions) -> metrics``. Calling it with a
    model gives the split's :class:`Scores` (the metrics, with the predictions); the parts serve per-example
    analyses (:mod:`bert_pipeline.evaluation.examples`). What a reference and a prediction are is the kind's
    (:meth:`TaskKind.scorer`)."""

    references: list[Any]
    predict: Callable[[Any], list[Any]]
    score: Callable[[Sequence[Any], Sequence[Any]], dict[str, float]]

    def __call__(self, model) -> Scores:
        predictions = self.predict(model)
        return Scores(self.score(self.references, predictions), predictions)


def rows(enc: dict[str, list], keys: Sequence[str] = MODEL_KEYS) -> list[dict[str, list[int]]]:
    """Column lists of an encoding (``{"input_ids": [[...], ...], ...}``) as one dict per row, ``keys`` kept."""
    kept = [k for k in keys if k in enc]
    return [{k: enc[k][i] for k in kept} for i in range(len(enc["input_ids"]))]


class TaskKind:
    """One task kind: the facts and behaviour that differ between kinds. Subclasses set the class attributes and
    implement the methods; an instance is stateless (the registry, :data:`bert_pipeline.tasks.KINDS`, holds one).

    Attributes:
        name: the kind's name (a task folder's ``task.json`` ``kind``, and what a user task declares).
        main_metric: what early stopping, the report and the registry rank by (higher is better).
        pipeline_tag: the Hugging Face Hub ``pipeline_tag`` of a fine-tuned model.
        auto_class: the ``transformers`` ``AutoModelFor*`` class name that loads a fine-tuned folder.
        head: the head's kind as ``transformers``' pipelines name it (``sequence-classification``,
            ``token-classification``, ``question-answering``).
        window_keys: the ``finetune.tasks.{task}`` knobs the kind needs beyond ``max_length`` (null for others).
        per_example: True when a model gives one output row per example (sequence heads); False for one row per
            token of each window (token classification, QA).
        distillable: whether task-specific distillation serves the kind (a distribution to match).
        position_mask: whether the soft-target term reads a per-position mask of the training features
            (:meth:`scored_positions`).
        pooled: whether the head pools the sequence (``finetune.models.{member}.pooling``: ``cls`` or ``mean``).
    """

    name: str = ""
    main_metric: str = ""
    pipeline_tag: str = ""
    auto_class: str = ""
    head: str = ""
    window_keys: tuple[str, ...] = ()
    per_example: bool = True
    distillable: bool = True
    position_mask: bool = False
    pooled: bool = False

    def __repr__(self) -> str:
        return f"TaskKind({self.name!r})"

    # ----------------------------------------------------------------------------------------------- data
    user_options: tuple[str, ...] = ()
    """The optional user-task settings the kind reads beyond its text and label columns (``text_pair_column``,
    ``label_separator``); a user task of another kind that sets one is refused rather than silently ignored."""

    def load_user_task(self, spec: Any) -> tuple[Any, dict[str, Any]]:
        """A user's task of this kind: a Hugging Face dataset by name (``spec.hf_dataset``, ``spec.hf_config``) or
        one file per split (``spec.train`` / ``validation`` / ``test``, read by :meth:`read_user_files`); ``spec``
        is one user-task entry (``name``, ``kind``, the files or dataset, the column names).

        Returns:
            the ``DatasetDict`` and the ``task.json`` facts it adds (``label_names`` where the kind has them).
        Raises:
            PipelineError: a missing split file, or bad rows (one line naming file and row).
        """
        from bert_pipeline.data.task_features import SPLITS
        from bert_pipeline.data.task_loaders import load_hf_task
        from bert_pipeline.errors import PipelineError

        if spec.hf_dataset:
            dd = load_hf_task(spec.hf_dataset, spec.hf_config)
            return dd, self.hub_info(dd, spec)
        paths = {s: getattr(spec, s) for s in SPLITS}
        for split, p in paths.items():
            if not p or not Path(p).exists():
                raise PipelineError(f"prepare_tasks.user_tasks[{spec.name}].{split}: file {p!r} not found")
        return self.read_user_files(spec, paths)

    def read_user_files(self, spec: Any, paths: dict[str, str]) -> tuple[Any, dict[str, Any]]:
        """One file per split (``paths``: split -> path) as the kind's ``DatasetDict`` and ``task.json`` facts."""
        raise NotImplementedError

    def hub_info(self, dd: Any, spec: Any) -> dict[str, Any]:
        """The ``task.json`` facts of a hub dataset loaded for this kind (none by default)."""
        return {}

    def describe(self, dd: Any) -> dict[str, dict[str, Any]]:
        """Per split: ``examples`` and the kind's statistics (:meth:`split_stats`): the record of a task's data
        that ``prepare_tasks`` publishes."""
        return {split: {"examples": len(ds), **self.split_stats(ds)} for split, ds in dd.items()}

    def split_stats(self, ds: Any) -> dict[str, Any]:
        """Label counts (or the target's mean and spread) and average lengths in words of one split."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- encoding
    def encode_train(self, tokenizer, ds: Dataset, task: dict[str, Any]) -> list[dict[str, list[int]]]:
        """Model-ready training features, one dict per example or window, with the labels the model's loss reads.

        Raises:
            ValueError: windows that ``task``'s ``max_length`` / ``doc_stride`` cannot build.
        """
        raise NotImplementedError

    def collator(self, tokenizer):
        """Pads a list of features into a batch of tensors ``(batch, seq_len)`` (labels padded with -100 where the
        labels are per token)."""
        from transformers import DataCollatorWithPadding

        return DataCollatorWithPadding(tokenizer, return_tensors="pt")

    # ---------------------------------------------------------------------------------------------- model
    def label_config(self, label_names: Sequence[str] | None) -> dict[str, Any]:
        """The ``config`` fields of the head's labels: ``num_labels``, ``id2label``, ``label2id`` (and
        ``problem_type`` where the kind sets it); empty without label names."""
        if label_names is None:
            return {}
        return {"num_labels": len(label_names), "id2label": dict(enumerate(label_names)),
                "label2id": {n: i for i, n in enumerate(label_names)}}

    def model_class(self, config, pooling: str):
        """The model class for ``config`` (a ``transformers`` config the head's fields are set on in place)."""
        import transformers

        return getattr(transformers, self.auto_class)

    # ----------------------------------------------------------------------------------------- evaluation
    def scorer(self, tokenizer, ds: Dataset, task: dict[str, Any], label_names: Sequence[str] | None,
               forward: Forward) -> HeldoutScorer:
        """A :class:`HeldoutScorer` on the held-out split ``ds`` (features encoded once; ``forward`` runs the model).

        Raises:
            ValueError: windows that ``task``'s ``max_length`` / ``doc_stride`` cannot build.
        """
        raise NotImplementedError

    def metrics(self, references: Sequence[Any], predictions: Sequence[Any],
                label_names: Sequence[str] | None = None) -> dict[str, float]:
        """The kind's metrics of per-example ``predictions`` against ``references`` (fractions, see the module)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------ per-example statistics
    interval_metrics: tuple[str, ...] = ()
    """The metrics :meth:`metrics_from_sums` recomputes from summed per-example statistics (the main metric first):
    the ones a bootstrap interval is given for."""

    def example_columns(self, references: Sequence[Any], predictions: Sequence[Any],
                        label_names: Sequence[str] | None) -> dict[str, np.ndarray]:
        """What each example contributed to the split's metric, as the per-example record stores it: columns of
        equal length ``(n,)`` (ints or float64; no text), e.g. gold and predicted label ids, or an entity's
        true/false positives and false negatives."""
        raise NotImplementedError

    def example_sums(self, columns: dict[str, np.ndarray], label_names: Sequence[str] | None
                     ) -> dict[str, np.ndarray]:
        """The additive statistics of each example ``{name: (n,) float64}`` (counts, or per-example scores) whose
        sums over any multiset of examples give the metrics of that multiset (:meth:`metrics_from_sums`)."""
        raise NotImplementedError

    def metrics_from_sums(self, sums: dict[str, np.ndarray], n: np.ndarray, label_names: Sequence[str] | None
                          ) -> dict[str, np.ndarray]:
        """:attr:`interval_metrics` from the statistics of :meth:`example_sums` summed over a (re)sample:
        ``sums[name]`` and ``n`` (how many examples the sample holds) of any equal shape, e.g. ``(resamples,)``;
        on the whole split this equals :meth:`metrics` (tests/test_intervals.py)."""
        raise NotImplementedError

    # --------------------------------------------------------------------------- task-specific distillation
    def teacher_logits(self, outputs: Sequence[Any]) -> list[np.ndarray]:
        """A teacher's outputs (the :data:`Forward` layout) as the float32 arrays the cache stores, one per
        feature: ``(num_labels,)`` per example, or ``(seq_len, width)`` per window."""
        return [np.asarray(x, dtype=np.float32) for x in outputs]

    def scored_positions(self, feature: dict[str, list[int]]) -> list[bool] | None:
        """The positions of a training feature that the soft-target term scores, or None when the whole output is
        one distribution per example or the kind masks by its own rule."""
        return None

    def teacher_batch(self, cached: Sequence[np.ndarray], scored: Sequence[Sequence[bool]] | None,
                      indices: Sequence[int], seq_len: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The cached teacher logits of a batch's features as one float32 tensor, padded right to ``seq_len`` for
        the per-token kinds, and the scored-position mask ``(batch, seq_len)`` bool where the kind has one."""
        import torch

        if self.per_example:
            return torch.from_numpy(np.stack([cached[i] for i in indices])), None
        width = cached[indices[0]].shape[-1]
        out = np.zeros((len(indices), seq_len, width), dtype=np.float32)
        for j, i in enumerate(indices):
            out[j, :cached[i].shape[0]] = cached[i]
        if scored is None:
            return torch.from_numpy(out), None
        mask = np.zeros((len(indices), seq_len), dtype=bool)
        for j, i in enumerate(indices):
            mask[j, :len(scored[i])] = scored[i]
        return torch.from_numpy(out), torch.from_numpy(mask)

    def student_terms(self, out, batch: dict[str, torch.Tensor], teacher: torch.Tensor,
                      mask: torch.Tensor | None) -> tuple[Any, Any, Any, torch.Tensor | None]:
        """``(student logits, teacher logits, labels, mask)`` of one batch in the layout :meth:`soft_target_loss`
        and :meth:`hard_target_loss` take, on the batch's device."""
        device = batch["input_ids"].device
        return out.logits, teacher.to(device), batch["labels"], mask.to(device) if mask is not None else None

    def soft_target_loss(self, student_logits: Any, teacher_logits: Any, mask: torch.Tensor | None,
                         temperature: float) -> torch.Tensor:
        """The soft-target term ``KL(softmax(t/T) || softmax(s/T)) * T^2`` (Hinton et al. 2015, §2; Sanh et al.
        2019, §4.2) over the kind's distributions, a scalar float32 tensor, 0 when the logits are equal.

        Raises:
            ValueError: ``temperature`` <= 0, or a kind without a distribution to match.
        """
        raise ValueError(f"kind: {self.name} has no distribution for task-specific distillation to match")

    def hard_target_loss(self, student_logits: Any, labels: Any) -> torch.Tensor:
        """The task's own loss on the gold labels, ``-100`` ignored; 0 (with a gradient path) when every label
        of the batch is ``-100``."""
        raise ValueError(f"kind: {self.name} has no distribution for task-specific distillation to match")

    # --------------------------------------------------------------------------------------------- serving
    input_key: str = "text"
    """The key that echoes one served input in ``bert-pipeline predict``'s output (``text``, or QA's ``question``)."""
    reads_context: bool = False
    """Whether a served input is answered from a passage (``--context``)."""
    accepts_pair: bool = False
    """Whether a served input may be a text pair (``--text-pair``)."""
    needs_pair: bool = False
    """Whether every served input must be a text pair."""
    @property
    def pyfunc_input(self) -> str:
        """What one row of the MLflow pyfunc model's input is (:mod:`bert_pipeline.mlops.pyfunc_model`): a text
        for most heads (named by the head), ``sentence-pair-classification`` (``{"text", "text_pair"}``) or
        ``question-answering`` (``{"question", "context"}``)."""
        return self.head
    transformers_flavour: bool = False
    """Whether MLflow's ``transformers`` flavour can serve the kind (with the family's own ``[CLS]`` head)."""

    def serve(self, pred, texts: Sequence[str], request: ServeRequest) -> list[dict[str, Any]]:
        """One output record per input of ``texts`` from a loaded fine-tuned folder ``pred`` (``model``, eval mode,
        and ``tokenizer``; :func:`bert_pipeline.evaluation.predictor.load_predictor`), decoded the way the held-out
        splits were scored.

        Raises:
            PipelineError: a request the kind cannot serve (e.g. QA without a context).
        """
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------------ ONNX
    input_columns: tuple[str, ...] = ("text",)
    """The task data contract's columns (ARCHITECTURE.md) one input of the head reads."""
    onnx_outputs: tuple[str, ...] = ("logits",)
    """The head's output names, in the model output's order."""
    onnx_output_rank: int = 2
    """The rank of each output: ``(batch, labels)`` 2, ``(batch, sequence, labels)`` 3, ``(batch, sequence)`` 2."""
    prediction_unit: str = "sentences"
    """What one compared prediction is, in a log line (``sentences``, ``tokens``, ``answers``)."""

    @property
    def onnx_output_axes(self) -> dict[int, str]:
        """The dynamic axes of each output: the batch, and the sequence where outputs are per token."""
        return {0: "batch"} if self.per_example else {0: "batch", 1: "sequence"}

    def plain_input(self, line: str) -> dict[str, Any]:
        """One input from a line of plain text (a check-inputs file): ``{"text": line}``."""
        return {"text": line}

    def encode_inputs(self, tokenizer, examples: Sequence[dict[str, Any]], input_names: Sequence[str],
                      max_length: int, doc_stride: int) -> EncodedInputs:
        """``examples`` (mappings with :attr:`input_columns`) as model windows, the way the held-out splits are
        encoded (one window per text for a sequence head; windows of ``max_length`` overlapping by ``doc_stride``
        otherwise), each window's ``input_names`` kept.

        Raises:
            ValueError: windows that ``max_length`` / ``doc_stride`` cannot build.
            PipelineError: inputs that mix layouts (some pairs, some single texts).
        """
        raise NotImplementedError

    def window_predictions(self, enc: EncodedInputs, logits: dict[str, Sequence[np.ndarray]], n_best: int,
                           max_answer_length: int) -> list[Any]:
        """What the head predicts from per-window ``logits`` (by output name, each cut to its window's length):
        one comparable prediction per sentence, token or answer."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------------------- report
    report_data_text: str = ""
    """What an example of the kind is, as a report's heading says (``sentence pairs (`text`, `text_pair`)``)."""

    # ------------------------------------------------------------------------------------------------ card
    objective_text: str = ""
    """The fine-tuning loss in a model card's words."""
    predict_example: str = ""
    """A model card's example arguments of ``bert-pipeline predict FOLDER ...``."""
    predict_note: str = ""
    """What ``bert-pipeline predict`` prints for the kind, in a model card's words."""

    def head_text(self, pooling: str | None, label_names: Sequence[str]) -> str:
        """One sentence of a model card: what the head computes."""
        raise NotImplementedError

    def evaluation_note(self) -> str | None:
        """A model card's sentence on how the kind's metric is computed, if it needs one."""
        return None

    def card(self, pooling: str | None, label_names: Sequence[str]):
        """What a fine-tuned model's card says of this kind's head (:class:`HeadCard`, for
        :func:`bert_pipeline.model.card_finetuned.finetuned_card`)."""
        return HeadCard(pipeline_tag=self.pipeline_tag, head=self.head_text(pooling, label_names),
                        auto_class=self.auto_class, pooled=self.pooled, objective=self.objective_text,
                        predict_example=self.predict_example, predict_note=self.predict_note,
                        evaluation_note=self.evaluation_note())


@dataclass(frozen=True)
class HeadCard:
    """What a fine-tuned model's card says of its head, given by its task kind (:meth:`TaskKind.card`).

    Attributes:
        pipeline_tag: the Hub's ``pipeline_tag`` (``text-classification``, ``token-classification``, ...).
        head: one sentence on what the head computes.
        auto_class: the ``transformers`` class that loads the folder.
        pooled: True for a sequence head, whose pooling (``cls`` or ``mean``) decides how it loads.
        objective: the fine-tuning loss in words.
        predict_example: the arguments of an example ``bert-pipeline predict`` call after the folder.
        predict_note: what ``predict`` prints for this head.
        evaluation_note: a sentence on how the metric is computed, or None.
    """

    pipeline_tag: str
    head: str
    auto_class: str
    pooled: bool
    objective: str
    predict_example: str
    predict_note: str
    evaluation_note: str | None = None


@dataclass
class EncodedInputs:
    """Inputs as model windows (:meth:`TaskKind.encode_inputs`): ``features`` (per window the model inputs, lists
    of ints); ``examples``: how many inputs they came from; ``kind``: the task kind that encoded them; QA only:
    ``contexts``, ``example_index`` and ``offset_mapping`` (:func:`bert_pipeline.tasks.qa.prepare_qa_features`)."""

    kind: TaskKind
    features: list[dict[str, list[int]]]
    examples: int
    contexts: list[str] = field(default_factory=list)
    example_index: list[int] = field(default_factory=list)
    offset_mapping: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class ServeRequest:
    """What a caller of :meth:`TaskKind.serve` asks besides the texts: the second text of every pair, the passage QA
    answers from, and the window settings (``max_seq_length`` is capped at the model's ``max_position_embeddings``)."""

    text_pair: str | None = None
    context: str | None = None
    max_seq_length: int = 384
    doc_stride: int = 128
    n_best: int = 20
    max_answer_length: int = 30


def max_length(pred, requested: int) -> int:
    """``requested`` capped at the model's ``max_position_embeddings`` (a longer input would not run)."""
    limit = getattr(pred.model.config, "max_position_embeddings", None)
    return min(requested, limit) if limit else requested


def token_counts(pred, texts: Sequence[str], text_pairs: Sequence[str] | None = None) -> list[int]:
    """Tokens of each text (or pair, with ``text_pairs``) with the model's special tokens (what a window must hold
    to see it whole)."""
    # verbose=False: a text longer than the model is what is being measured, not a mistake to warn about
    args = (list(texts),) if text_pairs is None else (list(texts), list(text_pairs))
    return [len(ids) for ids in pred.tokenizer(*args, truncation=False, verbose=False)["input_ids"]]


def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` ``(..., num_labels)`` against ``labels`` ``(...)`` int64, ``-100`` ignored; 0
    (with a gradient path) when every label is ``-100``, where the mean cross-entropy would be NaN."""
    from torch.nn import functional

    from bert_pipeline.data.masking import IGNORE_INDEX

    flat_logits = logits.float().reshape(-1, logits.shape[-1])
    flat = labels.reshape(-1)
    if not bool((flat != IGNORE_INDEX).any()):
        return flat_logits.sum() * 0.0
    return functional.cross_entropy(flat_logits, flat, ignore_index=IGNORE_INDEX)


def f1_from_counts(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    """F1 from true/false positive and false negative counts (any equal shapes), 0 where there is nothing to
    score: ``2 tp / (2 tp + fp + fn)``."""
    den = 2 * tp + fp + fn
    return np.divide(2 * tp, den, out=np.zeros(np.shape(den), dtype=np.float64), where=den > 0)


def check_temperature(temperature: float) -> None:
    """Raises ValueError unless ``temperature`` > 0 (the softmax temperature of the soft-target term)."""
    if temperature <= 0:
        raise ValueError(f"temperature: expected > 0, got {temperature}")
