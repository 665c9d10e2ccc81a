"""Benchmark: the fine-tuning matrix's scores and minutes, next to the issue's reference figures.

    dvc exp run --set-param 'finetune.seeds=[42,43]'   # every combination with two seeds (a DVC experiment)
    python bench/finetune.py                           # the table from metrics/finetune*/ of the workspace

Prints, per model x task, the test main metric per seed and its mean, the low-resource (500 labels) result,
the wall and CPU minutes from ``metrics/finetune-timing/`` (this machine is shared: CPU minutes divided by the
thread count estimate the wall minutes on idle cores), then the pre-training gain (pretrained - scratch) per task
beside the tokens the teacher saw (``metrics/pretrain.json`` when present), and the issue's reference figures.
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = {
    ("minilm", "sentiment"): "prototype 82.4% in 2 epochs (~7 CPU min); target >= 80%",
    ("pretrained", "sentiment"): "prototype L4/H256 10 CPU min: 74.7% (61.7% with 500 labels)",
    ("scratch", "sentiment"): "prototype 74.6% (62.7% with 500 labels)",
    ("pretrained", "ner"): "prototype 34.1 F1 (500 silver sentences)",
    ("scratch", "ner"): "prototype 36.8 F1 (500 silver sentences)",
}


def _load(folder: Path) -> dict[tuple[str, str], dict]:
    out = {}
    for p in sorted(folder.glob("*.json")):
        m = json.loads(p.read_text())
        out[(m["model"], m["task"])] = m
    return out


def main() -> None:
    metrics = _load(REPO / "metrics/finetune")
    timing = {}
    for p in sorted((REPO / "metrics/finetune-timing").glob("*.json")):
        t = json.loads(p.read_text())
        timing[(t["model"], t["task"])] = t
    if not metrics:
        print("no metrics/finetune/*.json: run `dvc repro` (or the experiment above) first")
        return
    print(f"{'model':<11} {'task':<10} {'metric':<9} {'mean':>7}  {'per seed':<22} {'500 labels':<18} "
          f"{'wall min':>8} {'CPU min':>8}  reference")
    total_wall = total_cpu = 0.0
    for (model, task), m in sorted(metrics.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        main = m["main_metric"]
        seeds = ", ".join(f"{v:.4f}" for v in m["test"][main]["seeds"])
        low = m.get("low_resource")
        low_txt = f"{low['test'][main]['mean']:.4f} (n={low['train_examples']})" if low else "-"
        t = timing.get((model, task), {})
        wall = t.get("total_seconds", 0.0) / 60
        cpu = (sum(t.get("train_cpu_seconds", [])) + sum(t.get("low_resource_train_cpu_seconds", []))) / 60
        total_wall += wall
        total_cpu += cpu
        silver = " (silver)" if m.get("silver") else ""
        print(f"{model:<11} {task:<10} {main:<9} {m['test'][main]['mean']:>7.4f}  {seeds:<22} {low_txt:<18} "
              f"{wall:>8.2f} {cpu:>8.2f}  {REFERENCE.get((model, task), '')}{silver}")
    print(f"total: {total_wall:.1f} wall minutes, {total_cpu:.1f} CPU minutes (training + evaluation, all seeds)")
    tokens = None
    pre = REPO / "metrics/pretrain.json"
    if pre.exists():
        raw = json.loads(pre.read_text())
        tokens = raw.get("tokens_seen") or raw.get("tokens")
    print("\npre-training gain (pretrained - scratch, test main metric, mean over seeds):"
          + (f" teacher saw {tokens:,} tokens" if isinstance(tokens, int) else ""))
    for task in sorted({t for _, t in metrics}):
        a, b = metrics.get(("pretrained", task)), metrics.get(("scratch", task))
        if not (a and b):
            continue
        main = a["main_metric"]
        line = f"  {task:<10} {a['test'][main]['mean'] - b['test'][main]['mean']:+.4f}"
        if a.get("low_resource") and b.get("low_resource"):
            d = a["low_resource"]["test"][main]["mean"] - b["low_resource"]["test"][main]["mean"]
            line += f"   with {a['low_resource']['train_examples']} labels: {d:+.4f}"
        print(line)


if __name__ == "__main__":
    main()
