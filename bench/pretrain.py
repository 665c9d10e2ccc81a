"""Our pre-training step vs plain ``BertForPreTraining`` on the same config and batch: tokens/s and MFU.

    python bench/pretrain.py                         # tiny (L=2, H=128, the CPU default's model), vocab 8192,
                                                     # seq 128, batch 32 (pretrain.batch_size)
    python bench/pretrain.py --size mini             # L=4, H=256
    python bench/pretrain.py --size base --batch 64  # e.g. on a GPU

Reference: ``BertForPreTraining`` (MLM decoder over every position) in the same ``--precision`` autocast (the
strongest stock configuration: bf16 where native), batches from the stock ``DataCollatorForLanguageModeling``
(+ NSP labels). Ours: :class:`bert_pipeline.model.objectives.MaskedPositionPretrainer`
(decoder on the masked positions only), ``precision auto`` autocast (bf16 on CPUs and bf16 GPUs), batches from
create_pretraining_data's collator. Both: AdamW step, SDPA attention, the same token stream and masking rate,
timing includes collation, forward, backward and the optimizer step (median of ``--steps`` steps after warmup,
the two variants interleaved). MFU = model FLOPs of the MLM task (encoder + head on the *masked* positions,
x3 for backward; :func:`bert_pipeline.model.configs.training_flops_per_step`) / the measured matmul peak of the device (best
of fp32 and bf16 ``--peak-size`` square products), so the MFU ratio equals the speed ratio.

The speed-up depends on the shape: the full decoder costs ``hidden * vocab`` multiply-adds per position against
about ``12 * layers * hidden**2`` for the encoder, so with vocab 8192 it is ~70% of a tiny model's FLOPs and ~40% of
a mini model's. On CPUs without native bf16 (AVX2; the bf16 peak printed is then ~100x below fp32) ``precision
auto`` is fp32 and the gain is the masked-position decoder and the collator alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_pipeline.evaluation.speed import measure_matmul_peak  # noqa: E402
from bert_pipeline.model.configs import (  # noqa: E402
    build_config,
    new_pretraining_model,
    set_dropout,
    training_flops_per_step,
)
from bert_pipeline.model.objectives import MaskedPositionPretrainer  # noqa: E402
from bert_pipeline.train.optim import make_optimizer  # noqa: E402
from bert_pipeline.train.runtime import make_runtime  # noqa: E402


def synthetic_tokenizer(vocab_size: int, folder: Path):
    """A BERT-layout WordPiece tokenizer with ``vocab_size`` entries (ids 104.. are words ``w0``...)."""
    from transformers import BertTokenizerFast

    tokens = ["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tokens += [f"w{i}" for i in range(vocab_size - len(tokens))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return BertTokenizerFast.from_pretrained(str(folder))


def instances(n: int, seq: int, vocab_size: int, seed: int, masked: bool, rng_mask_prob: float = 0.15):
    """``n`` full-length ``[CLS] A [SEP] B [SEP]`` rows; static 15% masks (80/10/10) when ``masked``."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        a = (seq - 3) // 2
        ids = np.concatenate([[101], rng.integers(104, vocab_size, a), [102],
                              rng.integers(104, vocab_size, seq - 3 - a), [102]]).astype(np.int64)
        types = np.r_[np.zeros(a + 2, np.int64), np.ones(seq - a - 2, np.int64)]
        row = {"input_ids": ids.tolist(), "token_type_ids": types.tolist(), "next_sentence_label": int(rng.integers(2))}
        if masked:
            cand = np.flatnonzero(ids >= 104)
            k = min(20, max(1, round(len(cand) * rng_mask_prob)))
            pos = np.sort(rng.choice(cand, k, replace=False))
            row["masked_lm_positions"] = pos.tolist()
            row["masked_lm_ids"] = ids[pos].tolist()
            for p in pos:
                r = rng.random()
                if r < 0.8:
                    ids[p] = 103
                elif r < 0.9:
                    ids[p] = rng.integers(104, vocab_size)
            row["input_ids"] = ids.tolist()
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="tiny", help="pretrain.model.size of the CPU default")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--dropout", type=float, default=None,
                        help="every dropout rate of both models (pretrain.dropout; default: the config's 0.1)")
    parser.add_argument("--peak-size", type=int, default=1024)
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file (bench/device/gpu_check.sh)")
    parser.add_argument("--profile", type=int, default=0, metavar="STEPS",
                        help="then profile this many of our steps (torch.profiler): where the time goes, by op group")
    args = parser.parse_args()

    from transformers import DataCollatorForLanguageModeling

    from bert_pipeline.data.masking import PretrainingCollator, VocabInfo

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tmp = Path(tempfile.mkdtemp())
    tokenizer = synthetic_tokenizer(args.vocab, tmp)
    config = build_config(args.size, len(tokenizer), max_seq_length=args.seq)
    n_rows = args.batch * (args.steps + args.warmup + args.profile)
    ours_rows = instances(n_rows, args.seq, len(tokenizer), seed=0, masked=True)
    ref_rows = [{k: r[k] for k in ("input_ids", "token_type_ids")} for r in
                instances(n_rows, args.seq, len(tokenizer), seed=0, masked=False)]
    labels_nsp = [r["next_sentence_label"] for r in ours_rows]
    ours_collate = PretrainingCollator(VocabInfo.from_tokenizer(tokenizer))
    stock = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=0)

    def ref_collate(rows, start):
        batch = stock(rows)
        batch["next_sentence_label"] = torch.tensor(labels_nsp[start : start + len(rows)])
        return batch

    runtime = make_runtime(args.precision, cpu=device == "cpu")
    ours = MaskedPositionPretrainer(new_pretraining_model(config, True, seed=0)).to(device)
    ref = new_pretraining_model(config, True, seed=0).to(device)
    if args.dropout is not None:
        set_dropout(ours, args.dropout)
        set_dropout(ref, args.dropout)
    opt_ours = make_optimizer(ours, "adamw", 1e-4)
    opt_ref = make_optimizer(ref, "adamw", 1e-4)

    def step_ours(i):
        batch = ours_collate(ours_rows[i * args.batch : (i + 1) * args.batch])
        batch = {k: v.to(device) for k, v in batch.items()}
        with runtime.autocast():
            out = ours(**batch)
        out.loss.backward()
        opt_ours.step()
        opt_ours.zero_grad(set_to_none=True)
        return int((batch["labels"] != -100).sum())

    def step_ref(i):
        batch = ref_collate(ref_rows[i * args.batch : (i + 1) * args.batch], i * args.batch)
        batch = {k: v.to(device) for k, v in batch.items()}
        with runtime.autocast():  # the stock model in the same precision: the strongest stock configuration
            out = ref(**batch)
        out.loss.backward()
        opt_ref.step()
        opt_ref.zero_grad(set_to_none=True)
        return int((batch["labels"] != -100).sum())

    def timed(fn, i):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        predicted = fn(i)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, predicted

    times = {"ours": [], "ref": []}
    predicted = {"ours": [], "ref": []}
    for i in range(args.warmup + args.steps):
        for name, fn in (("ref", step_ref), ("ours", step_ours)):
            dt, npred = timed(fn, i)
            if i >= args.warmup:
                times[name].append(dt)
                predicted[name].append(npred)

    measured32 = measure_matmul_peak(device, torch.float32, args.peak_size)
    measured16 = measure_matmul_peak(device, torch.bfloat16, args.peak_size)
    peak32, peak16 = measured32.flops, measured16.flops
    peak = max(peak32, peak16)
    tokens = args.batch * args.seq
    print(f"device {device} ({torch.get_num_threads()} threads), torch {torch.__version__}; size {args.size} "
          f"(L={config.num_hidden_layers}, H={config.hidden_size}), vocab {config.vocab_size}, seq {args.seq}, "
          f"batch {args.batch}, {args.steps} timed steps after {args.warmup}")
    print(f"measured matmul peak: fp32 {peak32 / 1e12:.3f} TFLOP/s, bf16 {peak16 / 1e12:.3f} TFLOP/s "
          f"({args.peak_size}^2); MFU denominator {peak / 1e12:.3f} TFLOP/s")
    for measured in (measured32, measured16):
        if measured.warning:
            print(f"WARNING: {measured.warning}")
    rows, mfu = {}, {}
    for name, label in (("ref", f"BertForPreTraining, full decoder, {runtime.precision} autocast, "
                                "DataCollatorForLanguageModeling"),
                        ("ours", f"masked-position decoder, {runtime.precision} autocast, our collator")):
        step = statistics.median(times[name])
        npred = statistics.mean(predicted[name])
        flops = training_flops_per_step(config, args.batch, args.seq, int(npred), full_decoder=False)
        executed = training_flops_per_step(config, args.batch, args.seq, int(npred), full_decoder=name == "ref")
        rows[name] = tokens / step
        mfu[name] = flops / step / peak
        print(f"{name:4s}: {step * 1e3:8.1f} ms/step  {tokens / step:10.0f} tokens/s  {args.batch / step:8.1f} seq/s  "
              f"MFU {flops / step / peak:6.3f}  (executed {executed / step / 1e12:.3f} TFLOP/s)  [{label}]")
    print(f"speed-up ours / reference: {rows['ours'] / rows['ref']:.2f}x (target >= 2.0x)")
    if args.json:
        record = {"device": device, "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                  "size": args.size, "layers": config.num_hidden_layers, "hidden": config.hidden_size,
                  "vocab": config.vocab_size, "seq": args.seq, "batch": args.batch, "steps": args.steps,
                  "precision": runtime.precision, "matmul_peak_tflops": {"fp32": round(peak32 / 1e12, 3),
                                                                          "bf16": round(peak16 / 1e12, 3)},
                  **{name: {"tokens_per_second": round(rows[name], 1), "mfu": round(mfu[name], 4)}
                     for name in rows},
                  "speedup": round(rows["ours"] / rows["ref"], 3)}
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if args.profile:
        profile_steps(step_ours, range(args.warmup + args.steps, args.warmup + args.steps + args.profile))


# Op-name groups of the profile summary, first match wins (aten op names as torch.profiler reports them).
OP_GROUPS = (
    ("matmul (linear layers, MLM decoder)", ("addmm", "aten::mm", "matmul", "linear", "bmm", "baddbmm")),
    ("loss (log-softmax, cross-entropy)", ("log_softmax", "cross_entropy", "nll_loss")),
    ("attention (SDPA)", ("scaled_dot_product", "_flash_attention", "_efficient_attention", "softmax")),
    ("dropout (bernoulli masks)", ("bernoulli", "dropout")),
    ("optimizer (AdamW)", ("adam", "_foreach", "lerp", "addcdiv", "addcmul")),
    ("LayerNorm / GELU", ("layer_norm", "gelu")),
    ("embedding and gather/scatter", ("embedding", "index", "gather", "scatter", "masked_select", "nonzero")),
    ("accuracy counts (argmax)", ("argmax",)),
    ("casts and copies (autocast)", ("to_copy", "copy_", "aten::to", "_to_copy", "clone", "contiguous")),
    ("elementwise (add, mul, ...)", ("aten::add", "aten::mul", "aten::div", "aten::sub", "aten::sum", "aten::fill",
                                     "aten::zero", "aten::where", "aten::ne", "aten::eq")),
)


def profile_steps(step, indices) -> None:
    """Run ``step(i)`` for each index under torch.profiler (CPU) and print the self CPU time by op group
    (:data:`OP_GROUPS`) and the ten costliest ops: where the time of our step goes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in indices:
            step(i)
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    groups: dict[str, float] = {}
    for e in events:
        name = e.key.lower()
        group = next((g for g, keys in OP_GROUPS if any(k in name for k in keys)), "other")
        groups[group] = groups.get(group, 0.0) + e.self_cpu_time_total
    print(f"profile of {len(indices)} steps: self CPU time {total / 1e3 / len(indices):.1f} ms/step (all threads' "
          "ops, profiler overhead included)")
    for group, us in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * us / total:5.1f}%  {group}")
    print("  costliest ops: " + ", ".join(f"{e.key} {100 * e.self_cpu_time_total / total:.1f}%" for e in
                                          sorted(events, key=lambda e: -e.self_cpu_time_total)[:10]))


if __name__ == "__main__":
    main()
