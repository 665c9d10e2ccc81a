"""The report's section on sentence embeddings: headline-to-article retrieval scores (measured by
:mod:`bert_pipeline.evaluation.retrieval`, after contrastive fine-tuning, :mod:`bert_pipeline.train.contrastive`),
each with its paired bootstrap interval, and each member's difference from the reference member."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bert_pipeline.evaluation.retrieval import METRICS
from bert_pipeline.report.report import markdown_table

LABELS = {"recall_at_1": "R@1", "recall_at_10": "R@10", "mrr": "MRR"}
WHEN = (("zero_shot", "zero-shot"), ("fine_tuned", "fine-tuned"))


def cell(scores: Mapping[str, Any], metric: str, signed: bool = False) -> str:
    """``metric`` of ``scores`` in points, one decimal, with its interval where ``scores`` has
    ``{metric}_ci_low`` / ``_ci_high``: ``62.0 [55.1, 68.4]`` (``signed``: ``+3.1 [-2.0, +8.2]``, a difference)."""
    fmt = "{:+.1f}" if signed else "{:.1f}"
    text = fmt.format(100 * scores[metric])
    low, high = scores.get(f"{metric}_ci_low"), scores.get(f"{metric}_ci_high")
    if low is None or high is None:
        return text
    return f"{text} [{fmt.format(100 * low)}, {fmt.format(100 * high)}]"


def retrieval_section(record: Mapping[str, Any] | None, source: str, order: Sequence[str] = ()) -> str:
    """The report's "Sentence embeddings: retrieval" section: per member the zero-shot and fine-tuned recall@1,
    recall@10 and MRR in points, each with its interval where the record has one (``record``: ``{"test_articles",
    "train_pairs", "reference", "intervals": {"confidence", "resamples", "method", "clusters"}, "members": {name:
    {"zero_shot": {METRIC, METRIC_ci_low, METRIC_ci_high, ...}, "fine_tuned": {...}, "vs_reference": {"zero_shot":
    {...}, "fine_tuned": {...}}}}}``); the record's ``reference`` member labelled as the reference, and a second
    table of every other member's paired difference from it where the record has them. Rows in ``order`` (the
    family table's), then the rest alphabetically. Empty without a record."""
    if not record or not record.get("members"):
        return ""
    reference = record.get("reference")
    header = ["model", *(f"{when} {LABELS[m]}" for _, when in WHEN for m in METRICS)]
    members = record["members"]
    names = [*(m for m in order if m in members), *sorted(set(members) - set(order))]
    rows = [[f"{name} (reference)" if name == reference else name,
             *(cell(members[name][key], m) for key, _ in WHEN for m in METRICS)] for name in names]
    intervals = record.get("intervals")
    text = [
        "## Sentence embeddings: retrieval", "",
        f"Headline-to-article retrieval over {record['test_articles']} test articles (the headline_match task's "
        "test split, from the corpus's validation articles): each headline's mean-pooled embedding ranks every "
        "article's passage by cosine similarity; R@k: share of headlines whose own article ranks in the first k, "
        f"in points. Fine-tuned: in-batch negatives on {record['train_pairs']} training pairs."
        + (f" `{reference}` is the reference." if reference else ""), "",
    ]
    if intervals:
        text[-2] += (f" In brackets: the {100 * intervals['confidence']:g}% {intervals['method']} interval of a "
                     f"paired bootstrap over the {intervals['clusters']} articles ({intervals['resamples']:,} draws, "
                     "the same draws for every member).")
    text += [markdown_table(header, rows)]
    diffs = [[name, *(cell(members[name]["vs_reference"][key], m, signed=True) for key, _ in WHEN for m in METRICS)]
             for name in names if name != reference and "vs_reference" in members[name]]
    if diffs:
        text += [f"Difference from `{reference}` (points, paired: the same draws for both; exploratory, not adjusted "
                 "for the number of comparisons; an interval that excludes 0 is a difference these test articles "
                 "tell from resampling noise):", "",
                 markdown_table(["model", *header[1:]], diffs)]
    text += [f"Source: `{source}`.", ""]
    return "\n".join(text)
