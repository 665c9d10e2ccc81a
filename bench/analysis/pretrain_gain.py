"""Pre-training gain over scratch from a workspace's fine-tuning metrics: per task, the pre-trained member's main
metric minus the scratch member's, validation and test, the mean over fine-tuning seeds with [lowest, highest]
(points), the low-resource run's test gain and NER's test F1 per entity type.

    dvc repro finetune@pretrained-{sentiment,ner,qa,headline_match} finetune@scratch-{...}   # finetune.seeds: [42, 43]
    python bench/analysis/pretrain_gain.py --project . [--member pretrained --baseline scratch]

Reads metrics/finetune/{member}-{task}.json and metrics/pretrain.json (held-out MLM loss and accuracy); trains
nothing. docs/performance.md, section 12 quotes its output.

With ``--revs REV [REV ...]`` (git revisions, DVC experiment names or ``workspace``, each fine-tuned at other
seeds, e.g. ``HEAD seed43``) it reads instead every revision's per-example records (``metrics/examples/``, from
DVC's cache: :func:`stages.revisions.read_revision`), merges their seeds
(:func:`bert_pipeline.evaluation.examples.merge_seeds`) and prints per task and split the paired gain with its
interval, seeds and examples resampled together (``evaluate.intervals``' settings of ``--project``'s params.yaml),
the per-seed range beside it, and whether the interval excludes 0.
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
    parser.add_argument("--revs", nargs="+", help="read the per-example records of these revisions, seeds merged")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.revs:
        record_gains(args)
        return
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


def record_gains(args: argparse.Namespace) -> None:
    """The paired gain of ``args.member`` over ``args.baseline`` per task from the revisions' merged records."""
    from bert_pipeline.evaluation.examples import merge_seeds
    from bert_pipeline.evaluation.intervals import Bootstrap
    from stages.params.base import View, load_view
    from stages.params.evaluate import BootstrapView
    from stages.revisions import read_revision

    class Settings(View):
        evaluate: BootstrapView

    settings = load_view(Settings, args.project / "params.yaml").evaluate.intervals
    boot = Bootstrap(settings.resamples, settings.confidence, settings.seed, settings.method)
    runs = [read_revision(rev, args.project) for rev in args.revs]
    for task in TASKS:
        sides = []
        for who in (args.member, args.baseline):
            name = f"{who}-{task}"
            have = [(recs[name], rev) for recs, rev in zip(runs, args.revs, strict=True) if name in recs]
            sides.append(merge_seeds([r for r, _ in have], [f"{rev}:{name}" for _, rev in have]) if have else None)
        if None in sides:
            log.info("%-15s no records of both %s and %s", task, args.member, args.baseline)
            continue
        member, baseline = sides
        for split in ("validation", "test"):
            a = boot.estimates(member, split)[member.main_metric]
            b = boot.estimates(baseline, split)[baseline.main_metric]
            iv = boot.difference(a, b)
            per_seed = [100 * (x - y) for x, y in zip(a.seed_values, b.seed_values, strict=True)]
            log.info("%-15s %-10s %s %.1f vs %.1f: gain %+.1f [%+.1f, %+.1f] (%s, %d seeds: %s; %d examples, %d "
                     "clusters)%s", task, split, member.main_metric, 100 * a.point, 100 * b.point, 100 * iv.point,
                     100 * iv.low, 100 * iv.high, iv.sources, len(per_seed),
                     ", ".join(f"{d:+.1f}" for d in per_seed), len(member.splits[split].ids),
                     len(set(member.splits[split].clusters)), "  above 0" if iv.low > 0 else "")


if __name__ == "__main__":
    main()
