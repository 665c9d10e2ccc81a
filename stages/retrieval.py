"""Stage ``retrieval``: sentence embeddings of each family member, scored on headline-to-article retrieval.

    python -m stages.retrieval        (dvc repro retrieval)

The pairs are the ``headline_match`` task's positive pairs (a headline and its own article's first passage):
the test split's (corpus-validation articles only) are the retrieval benchmark, the train split's (at most
``retrieval.train_pairs``) the fine-tuning set. For each of ``retrieval.members`` (keys of ``finetune.models``:
its folder, or for ``init: random`` that folder's config with weights drawn under ``retrieval.seed``), the bare
encoder is scored zero-shot (:mod:`bert_pipeline.evaluation.retrieval`), then fine-tuned with in-batch negatives
(:mod:`bert_pipeline.train.contrastive`) and scored again. Each score carries the paired cluster bootstrap's
interval (``evaluate.intervals``' ``resamples``, ``confidence``, ``seed``, ``method``: drawn as the report's are,
whole articles, the same draws for every member), and every member after the first of ``retrieval.members`` (the
reference) its paired difference from the reference. Writes

- ``metrics/retrieval.json``: ``test_articles``, ``train_pairs``, ``reference``, ``intervals`` (the bootstrap's
  settings and the articles drawn) and per member ``zero_shot`` and ``fine_tuned`` recall@1, recall@10 and MRR,
  each with ``{metric}_ci_low`` / ``_ci_high``, and (all but the reference) ``vs_reference``: the same for its
  difference from the reference (fractions rounded to 6 digits; quality only, byte-identical on CPU);
- ``metrics/examples-retrieval/{member}.arrow``: each member's per-example record
  (:func:`bert_pipeline.evaluation.retrieval.retrieval_record`: kind ``retrieval``, runs ``zero_shot`` and
  ``fine_tuned`` on ``test``, each query's rank of its own article's passage; id ``test:ROW``, the query's row in
  the headline_match test split; cluster its article's ``doc_id``), byte-identical on a CPU rerun;
- ``metrics/headline/retrieval.json``: each member's fine-tuned recall@1 (the DVC metric);
- ``metrics/retrieval-timing.json``: wall and CPU seconds per member (``cache: false``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from bert_pipeline.console import run_main
from bert_pipeline.errors import PipelineError
from bert_pipeline.io import atomic_dir, write_json
from stages import require_inputs
from stages.headline import write_headline
from stages.params.base import load_view
from stages.params.retrieval import RetrievalView

log = logging.getLogger(__name__)

PAIRS = Path("data/tasks/headline_match")
METRICS = Path("metrics/retrieval.json")
EXAMPLES = Path("metrics/examples-retrieval")
TIMING = Path("metrics/retrieval-timing.json")
SPLIT = "test"
WHEN = ("zero_shot", "fine_tuned")


def positive_rows(split: Any, limit: int | None) -> list[int]:
    """The rows of a headline_match split's positive pairs (label ``same_article``), in order, at most ``limit``."""
    same = split.features["label"].names.index("same_article")
    rows = [i for i, y in enumerate(split["label"]) if y == same]
    return rows[:limit] if limit is not None else rows


def positive_pairs(split: Any, limit: int | None) -> tuple[list[str], list[str]]:
    """The (headline, passage) texts of a headline_match split's positive rows (:func:`positive_rows`)."""
    chosen = split.select(positive_rows(split, limit))
    return [str(t) for t in chosen["text"]], [str(p) for p in chosen["text_pair"]]


def load_encoder(name: str, params: RetrievalView) -> tuple[Any, Any]:
    """The bare encoder (``AutoModel``) and tokenizer of the ``finetune.models`` entry ``name``.

    Raises:
        PipelineError: its folder is missing (``main`` has checked that ``name`` is a key of finetune.models).
    """
    from transformers import AutoConfig, AutoModel

    from bert_pipeline.data.tokenizer import load_tokenizer
    from bert_pipeline.model.configs import load_weights

    spec = params.finetune.models[name]
    if not (Path(spec.path) / "config.json").is_file():
        raise PipelineError(f"{spec.path}: model folder not found (finetune.models.{name}.path; run the stage that "
                            "writes it)")
    tokenizer = load_tokenizer(spec.path)
    if spec.init == "random":  # the no-pre-training baseline: the folder's shape, fresh weights
        torch.manual_seed(params.retrieval.seed)
        return AutoModel.from_config(AutoConfig.from_pretrained(spec.path)), tokenizer
    model, _ = load_weights(AutoModel, spec.path)
    return model, tokenizer


def main() -> None:
    require_inputs("retrieval")
    params = load_view(RetrievalView)
    r = params.retrieval
    import datasets

    from bert_pipeline.evaluation.examples import split_keys
    from bert_pipeline.evaluation.intervals import Bootstrap
    from bert_pipeline.evaluation.retrieval import (
        embed,
        gold_ranks,
        interval_scores,
        rank_metrics,
        retrieval_record,
    )
    from bert_pipeline.train.contrastive import contrastive_finetune
    from bert_pipeline.train.runtime import RuntimeSettingError, make_runtime
    from stages import dvc_adapter

    # checked here, not in the schema: other stages' tests and profiles may replace finetune.models freely
    for key, names in (("members", r.members), ("learning_rates", list(r.learning_rates))):
        unknown = [n for n in names if n not in params.finetune.models]
        if unknown:
            raise PipelineError(f"params.yaml: retrieval.{key}: {unknown[0]!r} is not a key of finetune.models "
                                f"(expected one of {', '.join(sorted(params.finetune.models))})")
    iv = params.evaluate.intervals
    bootstrap = Bootstrap(iv.resamples, iv.confidence, iv.seed, iv.method)
    if params.finetune.num_threads:
        torch.set_num_threads(params.finetune.num_threads)
    try:
        pairs = datasets.load_from_disk(str(PAIRS))
    except FileNotFoundError:
        raise PipelineError(f"{PAIRS}: not found; run `dvc repro prepare_tasks`") from None
    rows = positive_rows(pairs[SPLIT], r.test_articles)
    test_q, test_d = positive_pairs(pairs[SPLIT], r.test_articles)
    ids, clusters = split_keys(pairs[SPLIT].select(rows), rows, SPLIT)  # id SPLIT:ROW, cluster the article
    train_q, train_d = positive_pairs(pairs["train"], r.train_pairs)
    runtime = make_runtime(params.finetune.precision)  # fine-tuning's precision: retrieval fine-tunes, too
    reference = r.members[0]
    record: dict[str, Any] = {"test_articles": len(test_q), "train_pairs": len(train_q), "reference": reference,
                              "intervals": {"resamples": bootstrap.resamples, "confidence": bootstrap.confidence,
                                            "seed": bootstrap.seed, "method": bootstrap.method,
                                            "clusters": len(set(clusters))},
                              "members": {}}
    records = {}
    timing: dict[str, Any] = {"members": {}}
    settings = {"resamples": iv.resamples, "confidence": iv.confidence, "seed": iv.seed, "method": iv.method}
    with dvc_adapter.stage_run("retrieval", {"retrieval": r.model_dump(), "intervals": settings}) as run:
        for name in r.members:
            start, cpu = time.perf_counter(), time.process_time()
            model, tokenizer = load_encoder(name, params)
            kw = {"batch_size": r.batch_size, "max_length": r.max_length}
            ranks = {"zero_shot": gold_ranks(embed(model, tokenizer, test_q, runtime, **kw),
                                             embed(model, tokenizer, test_d, runtime, **kw))}
            rate = r.learning_rates.get(name, r.learning_rate)
            try:
                losses = contrastive_finetune(model, tokenizer, train_q, train_d, runtime, epochs=r.epochs,
                                              batch_size=r.batch_size, learning_rate=rate, scale=r.scale,
                                              max_length=r.max_length, seed=r.seed)
            except RuntimeSettingError as exc:  # its key is the precision retrieval trains in: finetune's
                raise PipelineError(f"params.yaml: finetune.{exc} (retrieval, {name})") from None
            except ValueError as exc:
                raise PipelineError(f"retrieval: {name}: {exc}") from None
            ranks["fine_tuned"] = gold_ranks(embed(model, tokenizer, test_q, runtime, **kw),
                                             embed(model, tokenizer, test_d, runtime, **kw))
            records[name] = retrieval_record(ids, clusters, [[q, d] for q, d in zip(test_q, test_d, strict=True)],
                                             ranks, r.seed, SPLIT)
            entry: dict[str, Any] = {when: interval_scores(bootstrap, records[name], when, split=SPLIT)
                                     for when in WHEN}
            if name != reference:
                entry["vs_reference"] = {when: interval_scores(bootstrap, records[name], when,
                                                               against=records[reference], split=SPLIT)
                                         for when in WHEN}
            record["members"][name] = {**entry, "learning_rate": rate, "final_loss": losses[-1] if losses else None}
            timing["members"][name] = {"seconds": round(time.perf_counter() - start, 1),
                                       "cpu_seconds": round(time.process_time() - cpu, 1)}
            points = {when: rank_metrics(ranks[when]) for when in WHEN}
            log.info("retrieval %s: R@1 %.3f -> %.3f, R@10 %.3f -> %.3f", name, points["zero_shot"]["recall_at_1"],
                     points["fine_tuned"]["recall_at_1"], points["zero_shot"]["recall_at_10"],
                     points["fine_tuned"]["recall_at_10"])
            run.log_metrics({f"{name}_{when}_{k}": v for when, s in points.items() for k, v in s.items()})
        with atomic_dir(EXAMPLES) as tmp:
            for name, examples in records.items():
                (tmp / f"{name.replace('/', '--')}.arrow").write_bytes(examples.to_bytes())
        write_json(METRICS, record)
        write_headline("retrieval", {"retrieval": {f"{m}_recall_at_1": s["fine_tuned"]["recall_at_1"]
                                                   for m, s in record["members"].items()}})
        write_json(TIMING, timing)
        run.log_artifact(METRICS)

if __name__ == "__main__":
    run_main(main)
