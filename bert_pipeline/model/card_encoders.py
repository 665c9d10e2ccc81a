"""The encoders' model cards: ``pretrain``'s teacher (:func:`pretrained_card`) and ``distill``'s student
(:func:`distilled_card`), with the corpus and pre-training instances they were trained on.

What every card shares (the Hub's names, :class:`~bert_pipeline.model.card.Architecture`,
:class:`~bert_pipeline.model.card.CardCitations`, rendering) and what a card holds and leaves out:
:mod:`bert_pipeline.model.card`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub import ModelCardData

from bert_pipeline.model.card import (
    FILL_MASK,
    LANGUAGE,
    LIBRARY,
    LICENSE,
    PRECISION,
    SMALL_PRETRAINED,
    Architecture,
    CardCitations,
    limits_text,
    num,
    pct,
    render,
    sources_text,
    table,
)
from bert_pipeline.model.families import BASE_FAMILY, FAMILIES

PAIR_OBJECTIVE = {"nsp": "masked LM + next-sentence prediction (Devlin et al. 2019)",
                  "sop": "masked LM + sentence-order prediction (Lan et al. 2020)",
                  "none": "masked LM only, packed sequences (Liu et al. 2019)"}

# The encoder families' names as their papers write them and their classes' prefixes, keyed by config model_type
# (each family's entry of bert_pipeline.model.families).
FAMILY_NAMES = {family.model_type: family.card_name for family in FAMILIES.values()}
CLASS_PREFIXES = {family.model_type: family.class_prefix for family in FAMILIES.values()}

# what the instances' objective makes of the recipe (create_pretraining_data.objective)
RECIPE_NAMES = {"nsp": "BERT's recipe: MLM + next-sentence prediction", "sop": "ALBERT's MLM + sentence-order prediction",
                "none": "MLM only (RoBERTa's and ModernBERT's recipe: no pair objective)"}


def _corpus_text(corpus: Mapping[str, Any] | None, cites: CardCitations) -> str:
    if not corpus:
        return f"The corpus statistics were not recorded (no `{cites.corpus_record}`)."
    per_source = corpus.get("per_source", {})
    rows = [(f"`{name}`", f"{num(s.get('documents'))} documents, {num(s.get('sentences'))} sentences, "
             f"{num(s.get('words'))} words") for name, s in sorted(per_source.items())]
    splits = corpus.get("per_split", {})
    split_text = ", ".join(f"{name} {num(s.get('documents'))} documents ({num(s.get('words'))} words)"
                           for name, s in sorted(splits.items()))
    return ("English documents cleaned (NFC, control characters removed, short documents and exact duplicates "
            f"dropped) and split into sentences by spaCy, by `prepare_corpus` (`{cites.corpus_record}`):\n\n"
            + table(rows, ("source", "kept")) + f"\n\nSplit by a seeded hash of each document's id: {split_text}. "
            "The validation documents are never trained on; the held-out scores below and the NER/QA test sets "
            "come from them.")


def _instances_text(info: Mapping[str, Any], cites: CardCitations) -> str:
    rules = info.get("rules", {})
    train = info.get("splits", {}).get("train", {})
    parts = [f"objective `{info.get('objective')}`", f"sequences of at most {info.get('max_seq_length')} tokens"]
    if info.get("packing"):
        parts.append(f"`{info['packing']}` packing")
    if rules:
        parts.append(f"{pct(rules.get('masked_lm_prob'))} of tokens masked "
                     f"({pct(rules.get('mask_token_prob'))} `[MASK]`, {pct(rules.get('random_token_prob'))} random, "
                     f"the rest kept), at most {rules.get('max_predictions_per_seq')} per sequence, whole-word "
                     f"masking {num(rules.get('whole_word_masking'))}")
    if info.get("masking"):
        dupe = f" (dupe factor {info.get('dupe_factor')}: masked copies of the train split)" if info.get("masking") == "static" else ""
        parts.append(f"{info['masking']} masking{dupe}")
    if train:
        parts.append(f"{num(train.get('instances'))} train instances of {num(train.get('tokens'))} tokens")
    recipe = RECIPE_NAMES.get(str(info.get("objective")), "MLM only")
    return (f"Pre-training instances (`create_pretraining_data`, {recipe}, `{cites.instances_record}`): "
            + "; ".join(parts) + ".")

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
        ("steps", num(settings.get("max_steps"))),
        ("tokens seen", "not recorded" if tokens_seen is None else f"{tokens_seen:,} (non-padding input tokens)"),
        ("batch", batch),
        ("sequence length", f"at most {max_seq_length} tokens"),
        ("optimizer", f"{'LAMB' if optimizer == 'lamb' else 'AdamW'}, weight decay {num(settings.get('weight_decay'))} "
                      "(not on biases and LayerNorm)"),
        ("learning rate", f"{num(settings.get('learning_rate'))}, {num(settings.get('warmup_steps'))} warmup steps "
                          "then linear decay to 0"),
        ("gradient clipping", f"max norm {num(settings.get('max_grad_norm'))}"),
        ("precision", PRECISION.get(str(settings.get("precision")), str(settings.get("precision")))),
        ("seed", num(settings.get("seed"))),
    ]
    if settings.get("phases"):
        phases = "; ".join(f"{pct(ph['fraction'])} of the steps at {ph['max_seq_length']} tokens"
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
    base_prefix = FAMILIES[BASE_FAMILY].class_prefix  # a model type outside the table: the base family's classes
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
        f"A {family} encoder with its {head} (`{CLASS_PREFIXES.get(architecture.model_type, base_prefix)}"
        f"For{'PreTraining' if objective != 'none' else 'MaskedLM'}`), "
        + ("pre-trained from random weights" if scratch else f"pre-trained further from `{init}`")
        + f" by this repository's DVC pipeline (stage `pretrain`). It is the family's teacher: `{cites.distilled}` "
        f"is distilled from it and `{cites.finetuned}/pretrained-*` are fine-tuned from it.\n\n"
        + table([("family member", role), ("architecture", f"{architecture.model_type}, {head}"), *architecture.rows()])
    )
    evaluation = (
        f"Held-out masked-LM on the corpus's validation documents (`{cites.pretrain_record}`):\n\n"
        + table([
            ("MLM accuracy", f"{pct(ev.get('mlm_accuracy'))} (first evaluation {pct(first.get('mlm_accuracy'))})"),
            ("unigram baseline", f"{pct(ev.get('unigram_accuracy'))} (always the most frequent token); the model "
                                 f"reaches {num(quality.get('mlm_accuracy_over_unigram'))}x that"),
            ("MLM loss / perplexity", f"{num(ev.get('mlm_loss'))} / {num(ev.get('perplexity'))}"),
            *([("pair accuracy", pct(ev.get("pair_accuracy")))] if "pair_accuracy" in ev else []),
            ("predicted tokens", num(ev.get("predicted_tokens"))),
        ])
        + f"\n\nDownstream scores are in the fine-tuned models' cards and `{cites.report}`."
    )
    sections = [
        ("Model description", description),
        ("Training data", "\n\n".join([_corpus_text(corpus, cites), _instances_text(data_info, cites),
                                        "### Data sources and licences\n\n" + sources_text(sources, cites)])),
        ("Training procedure", table([("objective", PAIR_OBJECTIVE.get(objective, objective)),
                                       *_training_rows(settings, quality.get("tokens_seen"),
                                                       data_info.get("max_seq_length"))])),
        ("Evaluation", evaluation),
        ("Limits and intended use", limits_text(SMALL_PRETRAINED, [])),
        ("How to load", _encoder_load(folder, objective != "none", cites)),
    ]
    return render(data, title, sections)


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
        tags=[BASE_FAMILY, "masked-lm", "distillation", "bert-pipeline"],
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
        + table([("family member", "distilled student"), ("teacher", f"`{teacher}` ({num(teach.get('layers'))} layers, "
                  f"{num(teach.get('parameters'))} parameters)"), *architecture.rows(),
                  ("share of the teacher's parameters", pct(metrics.get("parameter_ratio")))])
    )
    loss = (f"{num(settings.get('alpha_ce'))} x KL(teacher || student) at temperature {num(settings.get('temperature'))} "
            f"on the masked positions + {num(settings.get('alpha_mlm'))} x masked-LM cross-entropy + "
            f"{num(settings.get('alpha_cos'))} x cosine loss between last hidden states "
            f"({settings.get('cos_positions')} positions)")
    evaluation = (
        "Held-out masked-LM on the corpus's validation documents, teacher and student on the same batches "
        f"(`{cites.distill_record}`):\n\n"
        + table([("student MLM accuracy", pct(student.get("mlm_accuracy"))),
                  ("teacher MLM accuracy", pct(teach.get("mlm_accuracy"))),
                  ("student's share of the teacher's accuracy", pct(metrics.get("mlm_accuracy_share"))),
                  ("student MLM loss / perplexity", f"{num(student.get('mlm_loss'))} / {num(student.get('perplexity'))}"),
                  ("predicted tokens", num(metrics.get("eval_predicted_tokens")))])
        + f"\n\nSpeed (wall clock) is not part of this card; see `{cites.report}`."
    )
    sections = [
        ("Model description", description),
        ("Training data", "\n\n".join([
            f"The teacher's pre-training instances, reused unchanged (see `{teacher}/README.md`).",
            _corpus_text(corpus, cites), _instances_text(data_info, cites),
            "### Data sources and licences\n\n" + sources_text(sources, cites)])),
        ("Training procedure", table([("objective", loss),
                                       *_training_rows(settings, tokens, data_info.get("max_seq_length"))])),
        ("Evaluation", evaluation),
        ("Limits and intended use", limits_text(SMALL_PRETRAINED, [
            "- A student of a small teacher: it learnt from the teacher's predictions and rarely knows more."])),
        ("How to load", _encoder_load(folder, False, cites)),
    ]
    return render(data, f"DistilBERT-style student of {teacher}", sections)
