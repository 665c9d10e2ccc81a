"""Pre-training gain over scratch from a workspace's fine-tuning metrics: per task, the pre-trained member's main
metric minus the scratch member's, validation and test, the mean over fine-tuning seeds with [lowest, highest]
(points), the low-resource run's test gain and NER's test F1 per entity type.

    dvc repro finetune@pretrained-{sentiment,ner,qa,headline_match} finetune@scratch-{...}   # finetune.seeds: [42, 43]
    python bench/analysis/pretrain_gain.py --project . [--member pretrained --baseline scratch]

Reads metrics/finetune/{member}-{task}.json and metrics/pretrain.json (held-out MLM loss and accuracy); trains
nothing. docs/performance.md, section 12 quotes its output.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

TASKS = ("sentiment", "ner", "qa", "headline_match")
log = logging.getLogger("pretrain_gain")


def gain(member: dict, baseline: dict, metric: str) -> str:
    """``member`` minus ``baseline`` per seed (fractions in, points out): ``"+m [lo, hi]"``."""
    diffs = [100 * (a - b) for a, b in zip(member[metric]["seeds"], baseline[metric]["seeds"], strict=True)]
    return f"{sum(diffs) / len(diffs):+.1f} [{min(diffs):+.1f}, {max(diffs):+.1f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=Path("."))
    parser.add_argument("--member", default="pretrained")
    parser.add_argument("--baseline", default="scratch")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    metrics = args.project / "metrics"
    for task in TASKS:
        member = json.loads((metrics / "finetune" / f"{args.member}-{task}.json").read_text(encoding="utf-8"))
        baseline = json.loads((metrics / "finetune" / f"{args.baseline}-{task}.json").read_text(encoding="utf-8"))
        main_metric = member["main_metric"]
        cells = [f"{split} {100 * member[split][main_metric]['mean']:.1f} vs "
                 f"{100 * baseline[split][main_metric]['mean']:.1f} gain {gain(member[split], baseline[split], main_metric)}"
                 for split in ("validation", "test")]
        log.info("%-15s %s", task, " | ".join(cells))
        if member.get("low_resource") and baseline.get("low_resource"):
            low, low_base = member["low_resource"]["test"], baseline["low_resource"]["test"]
            log.info("%-15s test %.1f vs %.1f gain %s", f"  {member['low_resource']['train_examples']} labels",
                     100 * low[main_metric]["mean"], 100 * low_base[main_metric]["mean"],
                     gain(low, low_base, main_metric))
        types = sorted(k for k in member["test"] if k.startswith("f1_"))
        if types:
            log.info("   test F1 by type (member / baseline): %s", ", ".join(
                f"{k[3:]} {100 * member['test'][k]['mean']:.1f} / {100 * baseline['test'][k]['mean']:.1f}" for k in types))
    quality = json.loads((metrics / "pretrain.json").read_text(encoding="utf-8"))
    log.info("pretrain: %s steps, %s tokens, held-out MLM loss %.3f, accuracy %.2f%%", quality["steps"],
             quality["tokens_seen"], quality["eval"]["mlm_loss"], 100 * quality["eval"]["mlm_accuracy"])


if __name__ == "__main__":
    main()
