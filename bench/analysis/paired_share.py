"""How sure is a student's share of its teacher? A paired bootstrap over each held-out split, from a finished run.

    python bench/analysis/paired_share.py [--tasks qa ner] [--resamples 1000] [--seed 0] [--goal 0.97]

Run in a repository whose ``dvc repro`` has finished: it reads the teacher ``models/finetuned/{teacher}-{T}/`` and the
student ``models/finetuned/{student}-{T}/`` (``task_distill.teacher`` / ``student``), ``data/tasks/{T}/`` and their
metrics files. Both models predict the validation and test examples the stages score (the same subsets, the same
precision); the script checks that each model's main metric equals its metrics file's ``saved`` score, then draws the
split's examples with replacement (:func:`bert_pipeline.evaluation.metrics.paired_bootstrap_share`) and prints one JSON
line per task and split: both scores, the student's share, its percentile interval and the fraction of draws at or
above ``--goal``. Writes nothing. A few seconds per split, NER's about 4 minutes (seqeval over 500 sentences on each of
1000 draws, 2 cores).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bert_pipeline.evaluation.metrics import paired_bootstrap_share  # noqa: E402
from bert_pipeline.evaluation.predictor import load_predictor  # noqa: E402
from bert_pipeline.train.finetune import heldout_evaluators  # noqa: E402
from bert_pipeline.train.finetune_data import load_task  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402
from stages.members import MODELS_OUT, TASKS  # noqa: E402
from stages.params.root import load_params  # noqa: E402

METRICS = Path("metrics/finetune")
SPLITS = ("validation", "test")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=None, help="keys of finetune.tasks (default: every one)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap draws per split (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the draws' seed (default 0)")
    parser.add_argument("--confidence", type=float, default=0.95, help="the interval's level (default 0.95)")
    parser.add_argument("--goal", type=float, default=0.97, help="the share goal counted in `at_least` (default 0.97)")
    args = parser.parse_args()
    if args.resamples < 1 or not 0.0 < args.confidence < 1.0:
        parser.error(f"expected --resamples >= 1 and 0 < --confidence < 1, got {args.resamples} and {args.confidence}")
    logging.basicConfig(level=logging.WARNING)
    params = load_params()
    td, ft = params.task_distill, params.finetune
    tasks = args.tasks or list(ft.tasks)
    runtime = make_runtime(ft.precision)
    for task in tasks:
        if task not in ft.tasks:
            raise SystemExit(f"--tasks {task}: not a key of finetune.tasks in params.yaml (tasks: {', '.join(ft.tasks)})")
        names = {"teacher": f"{td.teacher}-{task}", "student": f"{td.student}-{task}"}
        missing = [n for n in names.values() if not (METRICS / f"{n}.json").is_file() or not (MODELS_OUT / n).is_dir()]
        if missing:
            raise SystemExit(f"--tasks {task}: needs a finished run here (no {METRICS}/NAME.json or {MODELS_OUT}/NAME/ "
                             f"for {', '.join(missing)}); run `dvc repro distill_task@{task}` first")
        models = {role: load_predictor(MODELS_OUT / name) for role, name in names.items()}
        task_dir = TASKS / task
        dd, info = load_task(task_dir)
        main_metric = info["main_metric"]
        _, scorers = heldout_evaluators(task_dir, dd, info, models["teacher"].tokenizer,
                                        ft.member_task(td.teacher, task), ft.data_seed, ft.eval_batch_size, runtime)
        saved = {role: json.loads((METRICS / f"{name}.json").read_text())["saved"] for role, name in names.items()}
        for split in SPLITS:
            started = time.perf_counter()
            scorer = scorers[split]
            predictions, scores = {}, {}
            for role, name in names.items():
                predictions[role] = scorer.predict(models[role].model)
                scores[role] = scorer.score(scorer.references, predictions[role])[main_metric]
                recorded = saved[role][split][main_metric]
                if abs(scores[role] - recorded) > 2e-6:
                    raise SystemExit(f"{MODELS_OUT / name}: scores {main_metric} {scores[role]:.6f} on {split}, its "
                                     f"metrics file {recorded:.6f}: not the run's model or not this machine's precision")
            interval = paired_bootstrap_share(
                scorer.references, predictions["student"], predictions["teacher"],
                lambda refs, preds, scorer=scorer, key=main_metric: scorer.score(refs, preds)[key],
                resamples=args.resamples, seed=args.seed, confidence=args.confidence, goal=args.goal)
            sys.stdout.write(json.dumps({
                "task": task, "split": split, "metric": main_metric, "examples": len(scorer.references),
                "teacher": round(scores["teacher"], 4), "student": round(scores["student"], 4),
                "share": round(interval.share, 4), "low": round(interval.low, 4), "high": round(interval.high, 4),
                "confidence": args.confidence, "at_least_goal": round(interval.at_least, 4), "goal": args.goal,
                "resamples": interval.resamples, "seconds": round(time.perf_counter() - started, 1)}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
