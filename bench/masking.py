"""Benchmark: our MLM masking next to transformers' ``DataCollatorForLanguageModeling``, and the whole stage.

    python bench/masking.py [--tokenizer DIR] [--corpus data/corpus] [--tokens 2000000] [--skip-stage]

Part 1, masking (one process): a fixed token stream (pairs built by ``bert_pipeline.data.instances`` from the corpus, or a
synthetic stream when no corpus exists) is masked by
  - ours, static: ``mask_ragged`` over all instances at once (what the stage does per shard);
  - ours, collator: ``PretrainingCollator`` with dynamic masking, batches of 32 (pad + mask + torch tensors);
  - ours, collator, whole-word masking;
  - transformers' ``DataCollatorForLanguageModeling(mlm_probability=0.15)``, the same batches of 32, given
    ``special_tokens_mask`` (its fastest path, as ``run_mlm.py`` tokenizes).
Figures are tokens/s (all tokens of the batch, padding excluded), best of 3 runs.

Part 2, the whole stage on the corpus with ``dupe_factor`` 5 and ``num_proc`` 2, run in a temporary folder (links to
``data/corpus`` and the tokenizer; nothing in the repository is written) under ``/usr/bin/time -v``: wall-clock,
CPU seconds and peak resident memory (GNU time reports the largest single process, i.e. the parent or one worker).
The machine's load average is printed too: this machine is shared, wall-clock figures rise with it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bert_pipeline  # noqa: E402,F401  (offline defaults)
from bert_pipeline.data.masking import MaskingRules, PretrainingCollator, VocabInfo, mask_ragged  # noqa: E402


def default_tokenizer() -> Path:
    for cand in (REPO / "models/tokenizer", REPO / "data/raw/minilm"):
        if (cand / "tokenizer.json").exists() or (cand / "vocab.txt").exists():
            return cand
    raise SystemExit("no tokenizer: run train_tokenizer or fetch_data (data/raw/minilm)")


def token_stream(tokenizer, corpus: Path, n_tokens: int):
    """Flat ids + offsets of ``[CLS] A [SEP] B [SEP]`` instances of length <= 128, about ``n_tokens`` tokens."""
    from bert_pipeline.data.instances import create_instances
    from bert_pipeline.data.shard_builder import tokenize_documents
    from bert_pipeline.data.tokenizer import load_tokenizer, raw_backend

    vocab = VocabInfo.from_tokenizer(tokenizer)
    rng = np.random.default_rng(0)
    if (corpus / "dataset_dict.json").exists():
        import datasets

        ds = datasets.load_from_disk(str(corpus))["train"]
        backend = raw_backend(load_tokenizer(tokenizer.name_or_path))
        docs, total, start = [], 0, 0
        while total < n_tokens and start < ds.num_rows:
            batch = tokenize_documents(backend, ds[start:start + 200]["sentences"], np.dtype(np.int64))
            docs += batch
            total += sum(len(s) for d in batch for s in d)
            start += 200
        source = f"{corpus} ({start} documents)"
    else:
        words = vocab.random_ids
        docs = [[rng.choice(words, size=int(rng.integers(5, 40))) for _ in range(12)] for _ in range(n_tokens // 250)]
        source = "synthetic"
    inst = create_instances(docs, objective="nsp", max_seq_length=128, short_seq_prob=0.1,
                            cls_token_id=vocab.cls_token_id, sep_token_id=vocab.sep_token_id, rng=rng)
    return inst, vocab, source


def best_of(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_masking(args) -> None:
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling

    tokenizer = AutoTokenizer.from_pretrained(str(args.tokenizer))
    inst, vocab, source = token_stream(tokenizer, args.corpus, args.tokens)
    n_tok = int(inst.input_ids.size)
    print(f"token stream: {n_tok:,} tokens in {len(inst):,} instances from {source}, tokenizer {args.tokenizer}")
    rows = [inst.input_ids[inst.offsets[i]:inst.offsets[i + 1]] for i in range(len(inst))]
    types = inst.token_type_ids()
    ours_rows = [{"input_ids": r.tolist(), "token_type_ids": types[inst.offsets[i]:inst.offsets[i + 1]].tolist(),
                  "next_sentence_label": int(inst.labels[i])} for i, r in enumerate(rows)]
    hf_rows = [{"input_ids": r["input_ids"], "token_type_ids": r["token_type_ids"],
                "special_tokens_mask": vocab.is_special[rows[i]].astype(int).tolist()} for i, r in enumerate(ours_rows)]
    batches = [slice(i, i + 32) for i in range(0, len(rows), 32)]
    rules = MaskingRules()

    t_static = best_of(lambda: mask_ragged(inst.input_ids, inst.offsets, vocab, rules, np.random.default_rng(0)))
    ours = PretrainingCollator(vocab, rules, seed=0)
    t_coll = best_of(lambda: [ours(ours_rows[b]) for b in batches])
    ours_wwm = PretrainingCollator(vocab, MaskingRules(whole_word_masking=True), seed=0)
    t_wwm = best_of(lambda: [ours_wwm(ours_rows[b]) for b in batches])
    import torch

    torch.manual_seed(0)
    hf = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    t_hf = best_of(lambda: [hf(hf_rows[b]) for b in batches])

    # realised rates of the stock collator and ours on one pass (same stream)
    def rate(collate, data):
        chosen = cand = 0
        for b in batches:
            out = collate(data[b])
            chosen += int((out["labels"] != -100).sum())
            cand += int((~torch.from_numpy(vocab.is_special)[torch.where(out["labels"] != -100, out["labels"],
                                                                       out["input_ids"])] &
                         out["attention_mask"].bool()).sum())
        return chosen / cand

    print(f"{'masking':<58}{'tokens/s':>14}{'x stock':>9}{'rate':>8}")
    for name, t, r in (
        ("ours, static mask_ragged (whole stream at once)", t_static, None),
        ("ours, PretrainingCollator dynamic, batch 32", t_coll, rate(ours, ours_rows)),
        ("ours, PretrainingCollator dynamic whole-word, batch 32", t_wwm, rate(ours_wwm, ours_rows)),
        ("transformers DataCollatorForLanguageModeling, batch 32", t_hf, rate(hf, hf_rows)),
    ):
        print(f"{name:<58}{n_tok / t:>14,.0f}{t_hf / t:>9.2f}{'' if r is None else f'{r:.4f}':>8}")


def bench_stage(args) -> None:
    if not (args.corpus / "dataset_dict.json").exists():
        print(f"stage: skipped ({args.corpus} missing: run prepare_corpus)")
        return
    import yaml

    time_bin = shutil.which("time") or "/usr/bin/time"
    with tempfile.TemporaryDirectory(prefix="bench-cpd-") as tmp:
        root = Path(tmp)
        (root / "data").mkdir()
        (root / "models").mkdir()
        os.symlink(args.corpus.resolve(), root / "data/corpus")
        os.symlink(Path(args.tokenizer).resolve(), root / "models/tokenizer")
        raw = yaml.safe_load((REPO / "params.yaml").read_text())
        raw["create_pretraining_data"].update(dupe_factor=args.dupe_factor, num_proc=args.num_proc)
        if "pretrain" in raw:  # the stage then reads models/tokenizer (linked above), one length only
            raw["pretrain"].update(init="scratch", phases=[])
        (root / "params.yaml").write_text(yaml.safe_dump(raw))
        env = dict(os.environ, PYTHONPATH=str(REPO))
        load = os.getloadavg()[0]
        proc = subprocess.run([time_bin, "-v", sys.executable, "-m", "stages.create_pretraining_data"], cwd=root,
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            raise SystemExit("stage failed")
        err = proc.stderr

        def grab(label: str) -> str:
            m = re.search(rf"{re.escape(label)}: (.+)", err)
            return m.group(1).strip() if m else "?"

        import json

        metrics = json.loads((root / "metrics/pretraining_data.json").read_text())
        timing = json.loads((root / "metrics/pretraining_data-timing.json").read_text())
        cpu = float(grab("User time (seconds)")) + float(grab("System time (seconds)"))
        print(f"stage create_pretraining_data on {args.corpus} (dupe_factor {args.dupe_factor}, num_proc "
              f"{args.num_proc}, load average before {load:.1f} on {os.cpu_count()} cores):")
        print(f"  wall-clock {grab('Elapsed (wall clock) time (h:mm:ss or m:ss)')}  (stage's own timer "
              f"{timing['seconds']:.1f} s; target <= 60 s)  CPU {cpu:.1f} s  peak RSS "
              f"{int(grab('Maximum resident set size (kbytes)')) / 1024:.0f} MiB")
        tr = metrics["train"]
        print(f"  train: {tr['instances']:,} instances, {tr['tokens']:,} tokens, padding share {tr['padding_share']:.3f}, "
              f"masked {tr['masked_lm_rate']:.4f}, 80/10/10 = {tr['mask_token_share']:.3f}/{tr['random_token_share']:.3f}/"
              f"{tr['keep_token_share']:.3f}, NSP NotNext share {tr['pair_label_1_share']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=Path, default=None)
    ap.add_argument("--corpus", type=Path, default=REPO / "data/corpus")
    ap.add_argument("--tokens", type=int, default=2_000_000)
    ap.add_argument("--dupe-factor", type=int, default=5)
    ap.add_argument("--num-proc", type=int, default=2)
    ap.add_argument("--skip-stage", action="store_true")
    ap.add_argument("--skip-masking", action="store_true")
    args = ap.parse_args()
    args.tokenizer = args.tokenizer or default_tokenizer()
    if not args.skip_masking:
        bench_masking(args)
    if not args.skip_stage:
        bench_stage(args)


if __name__ == "__main__":
    main()
