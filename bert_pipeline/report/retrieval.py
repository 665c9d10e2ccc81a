"""The report's section on sentence embeddings: headline-to-article retrieval scores (measured by
:mod:`bert_pipeline.evaluation.retrieval`, after contrastive fine-tuning, :mod:`bert_pipeline.train.contrastive`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bert_pipeline.evaluation.retrieval import METRICS
from bert_pipeline.report.report import markdown_table


def retrieval_section(record: Mapping[str, Any] | None, source: str, reference: str = "minilm",
                      order: Sequence[str] = ()) -> str:
    """The report's "Sentence embeddings: retrieval" section: per member the zero-shot and fine-tuned recall@1,
    recall@10 and MRR in points (``record``: ``{"test_articles", "train_pairs", "members": {name: {"zero_shot":
    {...}, "fine_tuned": {...}}}}``), ``reference`` labelled as the reference; rows in ``order`` (the family
    table's), then the rest alphabetically. Empty without a record."""
    if not record or not record.get("members"):
        return ""
    header = ["model", *(f"zero-shot {m}" for m in ("R@1", "R@10", "MRR")), *(f"fine-tuned {m}" for m in
                                                                               ("R@1", "R@10", "MRR"))]
    rows = []
    members = record["members"]
    for name in [*(m for m in order if m in members), *sorted(set(members) - set(order))]:
        scores = members[name]
        label = f"{name} (reference)" if name == reference else name
        rows.append([label, *(f"{100 * scores[when][k]:.1f}" for when in ("zero_shot", "fine_tuned") for k in METRICS)])
    return "\n".join([
        "## Sentence embeddings: retrieval", "",
        f"Headline-to-article retrieval over {record['test_articles']} test articles (the headline_match task's "
        "test split, from the corpus's validation articles): each headline's mean-pooled embedding ranks every "
        "article's passage by cosine similarity; R@k: share of headlines whose own article ranks in the first k, "
        f"in points. Fine-tuned: in-batch negatives on {record['train_pairs']} training pairs. "
        f"`{reference}` (a sentence-embedding model trained with mean pooling) is the reference.", "",
        markdown_table(header, rows),
        f"Source: `{source}`.", "",
    ])
