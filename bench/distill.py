"""The distilled student vs its teacher, side by side with DistilBERT's published trade-off (Sanh et al. 2019).

    python bench/distill.py                      # models/pretrained vs models/distilled, CPU, batch 32, seq 128
    python bench/distill.py --runs 20 --threads 1

Reference (Sanh et al. 2019, abstract and Table 3: BERT-base 12 layers -> DistilBERT 6 layers): 40% fewer
parameters (66M vs 110M), 60% faster inference (CPU, batch 1), 97% of the teacher's GLUE score. Ours: parameter
counts from the saved models, encoder throughput in sequences/s (``base_model`` forward, fp32, batch ``--batch``,
seq ``--seq-len``; median of ``--runs`` timed runs after warm-up, teacher and student interleaved so that a shared
machine's load affects both alike), and the held-out MLM accuracy share the ``distill`` stage recorded in
``metrics/distill.json``. The figures are the issue's: size, speed, retention.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_pipeline.evaluation.speed import measure_throughput  # noqa: E402
from bert_pipeline.model.configs import count_parameters  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402

REFERENCE = {"parameter_reduction": 0.40, "speedup": 1.60, "score_share": 0.97}


def main() -> None:
    from transformers import AutoModel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", default="models/pretrained")
    parser.add_argument("--student", default="models/distilled")
    parser.add_argument("--metrics", default="metrics/distill.json")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    models = {name: AutoModel.from_pretrained(path).eval() for name, path in
              (("teacher", args.teacher), ("student", args.student))}
    params = {name: count_parameters(m) for name, m in models.items()}
    timed = measure_throughput(models, make_runtime("fp32", cpu=True), batch_size=args.batch, seq_len=args.seq_len, warmup=args.warmup,
                               runs=args.runs, seed=0)
    speed = {name: t["sequences_per_second"] for name, t in timed.items()}
    share = None
    if Path(args.metrics).exists():
        share = json.loads(Path(args.metrics).read_text())["mlm_accuracy_share"]

    t, s = models["teacher"].config, models["student"].config
    print(f"teacher: {t.num_hidden_layers} layers, H={t.hidden_size}, vocab {t.vocab_size}; "
          f"student: {s.num_hidden_layers} layers; torch threads {torch.get_num_threads()}")
    print(f"{'figure':<42}{'ours':>14}{'DistilBERT (paper)':>22}")
    print(f"{'encoder parameters, teacher':<42}{params['teacher']:>14,}{'110M':>22}")
    print(f"{'encoder parameters, student':<42}{params['student']:>14,}{'66M':>22}")
    print(f"{'parameter reduction':<42}{1 - params['student'] / params['teacher']:>14.1%}"
          f"{REFERENCE['parameter_reduction']:>22.0%}")
    label = f"sequences/s teacher (batch {args.batch}, seq {args.seq_len})"
    print(f"{label:<42}{speed['teacher']:>14.1f}{'':>22}")
    print(f"{'sequences/s student':<42}{speed['student']:>14.1f}{'':>22}")
    print(f"{'speed-up':<42}{speed['student'] / speed['teacher']:>13.2f}x{REFERENCE['speedup']:>21.2f}x")
    kept = f"{share:.1%}" if share is not None else "(run dvc repro distill)"
    print(f"{'score kept (ours: held-out MLM accuracy)':<42}{kept:>14}{REFERENCE['score_share']:>22.0%}")


if __name__ == "__main__":
    main()
