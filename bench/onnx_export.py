"""ONNX export parity and ONNX Runtime vs PyTorch latency for the three task heads of a model of one named size.

    nice python bench/onnx_export.py                        # the pipeline's `tiny` shape (L=2, H=128), 3 heads
    nice python bench/onnx_export.py --size mini --runs 30
    nice python bench/onnx_export.py models/finetuned/minilm-qa ...   # also any fine-tuned folders

Builds a sentence classifier (mean pooling, the pipeline's head for its own models), a token classifier (11 BIO
labels: 5 entity types) and an extractive QA model of ``--size`` (``bert_pipeline.model.sizes``; random weights,
seeded) over a WordPiece vocabulary of the synthetic words below, and exports each with
:func:`bert_pipeline.mlops.onnx_export.export_folder` (TorchScript exporter, opset 18). The check inputs are
synthetic texts at the lengths the pipeline's tasks have, encoded with ``params.yaml``'s ``finetune.tasks``
windows (sentiment 64 tokens; NER 64/16; QA 128/32, a third of the contexts long enough for several windows).
Parity: the largest absolute logit difference over real tokens and the share of equal predictions (label,
per-token tag, decoded answer). Latency: ms per window at batch 1 (unpadded), median of ``--runs`` rounds after
``--warmup``, PyTorch and ONNX Runtime in turn within each round, ``--threads`` intra-op threads each.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bert_pipeline.data.wordpiece import build_bert_tokenizer, save_tokenizer, special_tokens  # noqa: E402
from bert_pipeline.evaluation.predictor import model_kind  # noqa: E402
from bert_pipeline.mlops.onnx_export import export_folder  # noqa: E402
from bert_pipeline.model.configs import build_config  # noqa: E402
from bert_pipeline.model.heads import MEAN_POOLING_CLASSES  # noqa: E402
from stages.params.root import load_params  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WORDS = ("the a film movie was is good bad great awful boring plot actors story alice bob paris london berlin met in "
         "of and to who where when what visited went loved hated said minister company city monday year new old "
         "first last team game market price bank court police . , ? !").split()
NER_LABELS = ["O"] + [f"{p}-{t}" for t in ("PERSON", "ORG", "GPE", "LOC", "DATE") for p in ("B", "I")]
TASK_OF_KIND = {"sequence-classification": "sentiment", "token-classification": "ner", "question-answering": "qa"}


def sentence(rng: random.Random, lo: int, hi: int) -> list[str]:
    return [rng.choice(WORDS[:-4]) for _ in range(rng.randint(lo, hi))] + ["."]


def examples(kind: str, n: int, seed: int = 0) -> list[dict]:
    """``n`` synthetic check inputs for a ``kind`` head (lengths like the pipeline's task data)."""
    rng = random.Random(seed)
    make = {"sequence-classification": lambda i: {"text": " ".join(sentence(rng, 4, 50))},
            "token-classification": lambda i: {"tokens": sentence(rng, 5, 50)},
            "question-answering": lambda i: {
                "question": " ".join(sentence(rng, 4, 10)[:-1]) + " ?",
                "context": " ".join(sentence(rng, 250, 300) if i % 3 == 0 else sentence(rng, 60, 90))}}[kind]
    return [make(i) for i in range(n)]


def build_heads(root: Path, size: str, seed: int = 0) -> list[Path]:
    """The three heads of ``size`` (random weights under ``seed``) saved with one WordPiece tokenizer."""
    vocab = {tok: i for i, tok in enumerate(dict.fromkeys(special_tokens(False) + WORDS))}
    tokenizer = build_bert_tokenizer(vocab)
    from transformers import BertForQuestionAnswering, BertForTokenClassification

    folders = []
    for name, cls, labels in (("sentiment", MEAN_POOLING_CLASSES["bert"], ["negative", "positive"]),
                              ("ner", BertForTokenClassification, NER_LABELS), ("qa", BertForQuestionAnswering, None)):
        torch.manual_seed(seed)
        config = build_config(size, len(vocab))
        if labels:
            config.num_labels, config.id2label = len(labels), dict(enumerate(labels))
            config.label2id = {v: k for k, v in config.id2label.items()}
        model = cls(config)
        if name == "sentiment":
            model.config.classifier_pooling = "mean"
        folder = root / f"{size}-{name}"
        model.save_pretrained(folder)
        save_tokenizer(tokenizer, folder)
        folders.append(folder)
    return folders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="fine-tuned folders to bench as well")
    parser.add_argument("--size", default="tiny", help="named shape of the built heads (default tiny)")
    parser.add_argument("--examples", type=int, default=64, help="check inputs per head (default 64)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--latency-examples", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    tasks = load_params(REPO / "params.yaml").finetune.tasks
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for folder in build_heads(Path(tmp), args.size) + list(args.folders):
            kind = model_kind(folder)
            t = tasks[TASK_OF_KIND[kind]]
            r = export_folder(folder, Path(tmp) / "onnx" / folder.name, examples(kind, args.examples),
                              max_seq_length=t.max_length, doc_stride=t.doc_stride, n_best=t.n_best or 20,
                              max_answer_length=t.max_answer_length or 30, opset=18, batch_size=16,
                              threads=args.threads, latency_examples=args.latency_examples, warmup=args.warmup,
                              runs=args.runs)
            p, lat = r.parity, r.latency
            rows.append([folder.name, f"{p.examples}/{p.windows}", f"{max(p.max_abs_diff.values()):.1e}",
                         f"{100 * p.agreement:.1f}% of {p.compared}", f"{lat.pytorch_ms:.2f}",
                         f"{lat.onnxruntime_ms:.2f}", f"{lat.speedup:.2f}x", f"{r.onnx_bytes / 1e6:.1f}"])
    header = ["model", "inputs/windows", "max |diff|", "equal predictions", "PyTorch ms", "ORT ms", "ORT speed-up",
              "ONNX MB"]
    import onnxruntime

    print(f"torch {torch.__version__}, onnxruntime {onnxruntime.__version__}; CPU, {args.threads} thread(s), batch 1, "
          f"median of {args.runs} runs after {args.warmup} warm-up, first {args.latency_examples} windows")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for line in [header, *rows]:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(line, widths,
                                                                                                 strict=True))))


if __name__ == "__main__":
    main()
