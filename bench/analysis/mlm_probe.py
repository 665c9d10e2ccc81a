"""A stock cross-check of the MLM plateau and a screen of encoder architectures: a stock ``*ForMaskedLM`` +
``DataCollatorForLanguageModeling`` on our corpus.

    python bench/analysis/mlm_probe.py --project /path/to/built/checkout                    # BERT tiny, lr 2e-3, 400 steps
    python bench/analysis/mlm_probe.py --project . --learning-rate 5e-4
    python bench/analysis/mlm_probe.py --project . --hidden 256 --heads 4 --position-init sinusoidal
    python bench/analysis/mlm_probe.py --project . --arch modernbert --steps 1600 --save /tmp/modernbert
    python bench/analysis/mlm_probe.py --project . --arch deberta --steps 1200 --dropout 0

``--arch`` picks the stock class (the same shapes, the same data, the same loop):

- ``bert``: ``BertForMaskedLM`` (post-LN, learned absolute positions; Devlin et al. 2019);
- ``prelayernorm``: ``RobertaPreLayerNormForMaskedLM`` (the same block with LayerNorm before each sub-layer);
- ``modernbert``: ``ModernBertForMaskedLM`` (Warner et al. 2024: pre-LN, rotary positions, GeGLU, no biases),
  every layer global attention (the chunks are shorter than its local window); the GeGLU intermediate size
  defaults to 8H/3 rounded to a multiple of 64, BERT's feed-forward parameter count (Shazeer 2020, section 2);
- ``deberta``: ``DebertaV2ForMaskedLM`` with DeBERTa-v3's attention (He et al. 2021, section 3: disentangled
  content/position attention, c2p + p2c, relative positions only, ``position_biased_input`` false).

Equal wall time: run each architecture for a few steps first (``--steps 30 --eval-every 1000``) with nothing else
running, read ``seconds_per_step``, then give each the steps that fill the same seconds (the learning-rate
schedule ends at ``--steps``, so the budget is fixed in steps, not cut by a clock: the losses stay reproducible).
``--save DIR`` writes the trained model and the tokenizer with ``save_pretrained``, so a ``finetune.models`` entry
(``path: DIR``, and the same entry with ``init: random`` as its scratch) fine-tunes it with the pipeline's stage.

None of the pipeline's masking, objective or loop is used, so a plateau that shows here too is not the pipeline's
bug. ``--project`` is a checkout where ``prepare_corpus`` and ``train_tokenizer`` have run. The training documents
of ``data/corpus`` are tokenized, joined with ``[SEP]`` and cut into ``[CLS]`` + ``--seq - 1`` token chunks
(stream packing, no padding, no pair objective); the stock collator masks 15% (80/10/10). AdamW (no decay on biases
and LayerNorm, epsilon 1e-6), linear warmup then linear decay to 0 at ``--steps``, gradient norm clipped at 1;
the decoder runs on the masked positions only (the same loss, 2.4x faster on a tiny model than the full
decoder). Every ``--eval-every`` steps: the held-out loss (nats per masked token) and accuracy on 256 chunks of
the validation documents, masked once. Prints one JSON line: the arguments, the ``(step, loss, accuracy)``
history and the seconds per training step. Seeded, one process, ``--threads`` torch threads.

``--position-init sinusoidal`` starts the learned position table from Vaswani et al. (2017, §3.5)'s sinusoids,
scaled to ``5 * initializer_range``, so that offsets between positions are linear maps from the first step.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from mlm_context import require_built_project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--project", type=Path, default=Path("."),
                        help="a checkout where prepare_corpus and train_tokenizer have run")
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="AdamW peak rate (the default's)")
    parser.add_argument("--steps", type=int, default=400, help="training steps; the rate decays to 0 at the last")
    parser.add_argument("--warmup", type=int, default=50, help="linear warmup steps")
    parser.add_argument("--batch", type=int, default=32, help="chunks per step")
    parser.add_argument("--seq", type=int, default=128, help="tokens per chunk, [CLS] included")
    parser.add_argument("--arch", choices=("bert", "prelayernorm", "modernbert", "deberta"), default="bert",
                        help="the stock masked-LM class (module docstring)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size H")
    parser.add_argument("--intermediate", type=int, default=None,
                        help="feed-forward size (default 4H; modernbert's GeGLU: 8H/3 rounded to a multiple of 64)")
    parser.add_argument("--mask-rate", type=float, default=0.15, help="share of training tokens selected for MLM (80/10/10; held out: 15%%)")
    parser.add_argument("--save", type=Path, default=None, help="save the trained model and tokenizer here")
    parser.add_argument("--layers", type=int, default=2, help="encoder layers L")
    parser.add_argument("--heads", type=int, default=2, help="attention heads (must divide --hidden)")
    parser.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout (every arch)")
    parser.add_argument("--initializer-range", type=float, default=0.02, help="std of the initial weights")
    parser.add_argument("--position-init", choices=("random", "sinusoidal"), default="random",
                        help="the position table's start: BERT's random normal or scaled sinusoids")
    parser.add_argument("--eval-every", type=int, default=100, help="steps between held-out evaluations")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights, chunk order and masks")
    args = parser.parse_args()
    require_built_project(args.project)

    import datasets
    import numpy as np
    import torch
    from transformers import AutoTokenizer, DataCollatorForLanguageModeling
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(str(args.project / "models" / "tokenizer"))
    corpus = datasets.load_from_disk(str(args.project / "data" / "corpus"))

    def chunks(split: str, limit: int | None) -> torch.Tensor:
        rows = corpus[split] if limit is None else corpus[split].select(range(min(limit, len(corpus[split]))))
        stream: list[int] = []
        for row in rows:
            stream += tokenizer(" ".join(row["sentences"]), add_special_tokens=False)["input_ids"]
            stream.append(tokenizer.sep_token_id)
        width = args.seq - 1
        body = torch.from_numpy(np.asarray(stream[: len(stream) // width * width], dtype=np.int64)).view(-1, width)
        return torch.cat([torch.full((body.size(0), 1), tokenizer.cls_token_id), body], dim=1)

    train, held_out = chunks("train", None), chunks("validation", 200)[:256]
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=args.mask_rate, return_tensors="pt")
    # the held-out chunks are masked at 15% whatever --mask-rate trains with: every run's loss on one scale
    fixed = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")(
        [{"input_ids": row} for row in held_out])
    model, encoder, head = build(args, tokenizer)
    if args.position_init == "sinusoidal":
        if args.arch != "bert":
            raise SystemExit("--position-init sinusoidal: only --arch bert has a learned absolute position table")
        table = model.bert.embeddings.position_embeddings.weight
        position = torch.arange(table.size(0), dtype=torch.float32)[:, None]
        frequency = torch.exp(torch.arange(0, args.hidden, 2, dtype=torch.float32) * (-math.log(10000.0) / args.hidden))
        with torch.no_grad():
            table[:, 0::2] = torch.sin(position * frequency) * 5 * args.initializer_range
            table[:, 1::2] = torch.cos(position * frequency) * 5 * args.initializer_range
    def no_decay(name: str) -> bool:  # biases and every norm (BERT's LayerNorm, ModernBERT's attn_norm, ...)
        return name.endswith("bias") or "norm" in name.lower()

    decay = [p for n, p in model.named_parameters() if not no_decay(n)]
    no_decay_params = [p for n, p in model.named_parameters() if no_decay(n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay_params, "weight_decay": 0.0}],
                                  lr=args.learning_rate, eps=1e-6)
    decay_steps = max(1, args.steps - args.warmup)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / args.warmup, max(0.0, (args.steps - s) / decay_steps)))

    def masked_loss(batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        labels = batch["labels"]
        chosen = labels != -100
        logits = head(encoder(input_ids=batch["input_ids"]).last_hidden_state[chosen])
        return torch.nn.functional.cross_entropy(logits, labels[chosen], reduction="sum"), logits, labels[chosen]

    @torch.no_grad()
    def evaluate() -> tuple[float, float]:
        model.eval()
        total = correct = count = 0.0
        for i in range(0, held_out.size(0), 64):
            loss, logits, targets = masked_loss({k: v[i:i + 64] for k, v in fixed.items()})
            total += float(loss)
            correct += float((logits.argmax(-1) == targets).sum())
            count += targets.numel()
        model.train()
        return total / count, correct / count

    order = torch.randperm(train.size(0), generator=torch.Generator().manual_seed(args.seed + 1))
    history, start = [], time.perf_counter()
    evaluating = 0.0
    for step in range(args.steps):
        index = order[(step * args.batch) % train.size(0):][: args.batch]
        batch = collator([{"input_ids": row} for row in train[index]])
        loss, _, targets = masked_loss(batch)
        (loss / targets.numel()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if (step + 1) % args.eval_every == 0:
            began = time.perf_counter()
            held_loss, accuracy = evaluate()
            evaluating += time.perf_counter() - began
            history.append((step + 1, round(held_loss, 3), round(accuracy, 4)))
    seconds = (time.perf_counter() - start - evaluating) / args.steps
    if args.save is not None:
        model.save_pretrained(str(args.save))
        tokenizer.save_pretrained(str(args.save))
    print(json.dumps({"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "tokens_seen": args.steps * args.batch * args.seq,
                      "history": history, "seconds_per_step": round(seconds, 3)}))


def build(args, tokenizer):
    """The ``--arch`` model, its encoder and its MLM head (hidden ``(n, H)`` -> logits ``(n, vocab)``)."""
    import transformers

    hidden, vocab = args.hidden, len(tokenizer)
    ids = {"pad_token_id": tokenizer.pad_token_id}
    if args.arch == "modernbert":
        intermediate = args.intermediate or max(64, round(8 * hidden / 3 / 64) * 64)
        config = transformers.ModernBertConfig(
            vocab_size=vocab, hidden_size=hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
            intermediate_size=intermediate, max_position_embeddings=max(512, args.seq), global_attn_every_n_layers=1,
            mlp_dropout=args.dropout, attention_dropout=args.dropout, embedding_dropout=args.dropout,
            initializer_range=args.initializer_range, bos_token_id=tokenizer.cls_token_id,
            cls_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
            sep_token_id=tokenizer.sep_token_id, **ids)
        config._attn_implementation = "sdpa"
        model = transformers.ModernBertForMaskedLM(config)
        return model, model.model, lambda states: model.decoder(model.head(states))
    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                  intermediate_size=args.intermediate or 4 * hidden, max_position_embeddings=max(512, args.seq),
                  hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
                  initializer_range=args.initializer_range, **ids)
    if args.arch == "deberta":
        config = transformers.DebertaV2Config(
            **common, relative_attention=True, position_biased_input=False, pos_att_type=["p2c", "c2p"],
            position_buckets=256, norm_rel_ebd="layer_norm", share_att_key=True, max_relative_positions=-1,
            type_vocab_size=0)
        model = transformers.DebertaV2ForMaskedLM(config)
        return model, model.deberta, model.cls
    if args.arch == "prelayernorm":
        model = transformers.RobertaPreLayerNormForMaskedLM(transformers.RobertaPreLayerNormConfig(**common))
        return model, model.roberta_prelayernorm, model.lm_head
    model = transformers.BertForMaskedLM(transformers.BertConfig(**common))
    return model, model.bert, model.cls


if __name__ == "__main__":
    main()
