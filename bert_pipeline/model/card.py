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

This module holds what every card shares: the Hub's names, the shape (:class:`Architecture`), the base model
(:class:`BaseModel`), the cited files (:class:`CardCitations`), reading and writing a card, and the rendering
helpers. The builders: :mod:`bert_pipeline.model.card_encoders` (``pretrained_card``, ``distilled_card``) and
:mod:`bert_pipeline.model.card_finetuned` (``finetuned_card``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCardData

from bert_pipeline.errors import PipelineError
from bert_pipeline.model.families import family_of, is_family_model_type

CARD_FILE = "README.md"
LICENSE = "apache-2.0"
"""The weights' licence: the pipeline's own (``pyproject.toml``: Apache-2.0), as a Hub licence id."""
LANGUAGE = ["en"]
LIBRARY = "transformers"
FILL_MASK = "fill-mask"
METRIC_TYPE = {"accuracy": "accuracy", "macro_f1": "f1", "micro_f1": "f1", "subset_accuracy": "accuracy", "f1": "f1",
               "precision": "precision", "recall": "recall", "exact_match": "exact_match", "pearson": "pearsonr",
               "spearman": "spearmanr", "mse": "mse"}
"""Hub metric ids (https://hf.co/metrics) of the pipeline's metric names; ``f1_TYPE`` (NER per type) is ``f1``."""
METRIC_NAME = {"accuracy": "accuracy", "macro_f1": "macro F1", "micro_f1": "micro F1",
               "subset_accuracy": "subset accuracy", "f1": "F1", "precision": "precision", "recall": "recall",
               "exact_match": "exact match", "pearson": "Pearson r", "spearman": "Spearman rho", "mse": "MSE"}
PRECISION = {"fp32": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast with loss scaling"}
"""Resolved precision (:attr:`bert_pipeline.train.runtime.Runtime.precision`) as the card writes it."""
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

    @property
    def vocabulary_unit(self) -> str:
        """What the vocabulary size counts: its family's :attr:`~bert_pipeline.model.families.Family.vocabulary_unit`
        (BERT's WordPiece tokens), plain ``tokens`` for a model type outside the table."""
        return family_of(self.model_type).vocabulary_unit if is_family_model_type(self.model_type) else "tokens"

    def rows(self) -> list[tuple[str, str]]:
        """The model-description table rows."""
        def show(value: int | None, unit: str = "") -> str:
            return "not recorded" if value is None else f"{value:,}{unit}"

        rows = [("size", self.size)] if self.size else []
        return rows + [
            ("layers", show(self.layers)), ("hidden size", show(self.hidden_size)),
            ("attention heads", show(self.attention_heads)), ("feed-forward size", show(self.intermediate_size)),
            ("vocabulary", show(self.vocab_size, f" {self.vocabulary_unit}")),
            ("max positions", show(self.max_position_embeddings)), ("parameters", f"{self.parameters:,}"),
        ]


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
def num(value: Any) -> str:
    """A value as a card writes it: ``true``/``false``/``none``, integers with thousands separators, floats by ``g``."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal (``n/a`` for ``None``)."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def table(rows: Sequence[tuple[str, str]], header: tuple[str, str] = ("", "")) -> str:
    """A two-column Markdown table of ``rows`` under ``header``."""
    lines = [f"| {header[0]} | {header[1]} |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(data: ModelCardData, title: str, sections: Sequence[tuple[str, str]]) -> str:
    """The card's text: ``data`` as YAML front matter, the ``# title``, then one ``## heading`` per section."""
    body = [f"# {title}"] + [f"## {heading}\n\n{text.strip()}" for heading, text in sections]
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n\n".join(body) + "\n"


def sources_text(sources: Sequence[Mapping[str, Any]], cites: CardCitations) -> str:
    """The data packages' table (``SOURCES.json``'s ``sources``: version, licence, citation)."""
    if not sources:
        return "The data packages were not recorded (no `SOURCES.json` beside the raw data)."
    rows = ["| package | version | licence | citation |", "| --- | --- | --- | --- |"]
    rows += [f"| {_cell(str(s.get('name')))} | {_cell(str(s.get('version')))} | {_cell(str(s.get('licence')))} | "
             f"{_cell(str(s.get('citation', '')))} |" for s in sources]
    return ("The pipeline's data packages, pinned by version and sha256 and fetched as data, never installed "
            f"(`{cites.sources_record}`); the data named above comes from these. The weights are Apache-2.0; the data "
            "keeps its own terms:\n\n" + "\n".join(rows))


SMALL_PRETRAINED = ("- A small model pre-trained on a small corpus within a CPU budget: a reproducible research and "
                    "teaching artefact, orders of magnitude short of BERT's own pre-training (3.3 billion words, "
                    "Devlin et al. 2019). Expect weak language understanding.")
NOT_PRETRAINED = ("- No pre-training at all: the baseline that shows what pre-training adds, not a model to use.")


def limits_text(first: str | None, extra: Sequence[str]) -> str:
    """The "Limits and intended use" list: ``first`` (the model's own), the limits every card states, ``extra``."""
    lines = [first] if first else []
    lines += [
        "- Not for production use or for decisions about people.",
        "- English only; text unlike the training data (other domains, registers, periods) is out of scope.",
        "- It inherits the topics, period and viewpoints of the text it was trained on (see Training data), and the "
        "biases of those sources.",
        *extra,
    ]
    return "\n".join(lines)
