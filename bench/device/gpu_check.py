"""The summary of ``bench/device/gpu_check.sh``: one JSON file from what its parts wrote into its output folder.

    python bench/device/gpu_check.py summarize --out DIR --codes tests=0 quick_small=0 ... --seconds 480 [--quiet]

Reads ``DIR/gpu_tests.xml`` (pytest's JUnit XML of the ``gpu`` tests), ``DIR/quick-{size}/gpu_quick.json``
(``bench/device/gpu_quick.py run`` per size) and ``DIR/pretrain_bench.json`` (``bench/pretrain.py --json``), each optional
(a part that failed leaves its file out; its exit code says so), and writes ``DIR/gpu_check.json``:

- ``tests``: ``passed``, ``failed``, ``skipped`` (test ids) and their counts;
- ``gpu_quick``: per size the pre-training figures (steps, tokens/s, MFU against the measured peak and against
  ``--peak-tflops``, held-out MLM accuracy against the unigram baseline) and the pre-trained minus scratch test gain
  per task, with the tasks the budget skipped;
- ``pretrain_bench``: our step's and HF's step's tokens/s and MFU in the same precision, the speed-up, and the
  issue's goals (``mfu >= 0.40`` against the measured bf16 peak, ``speedup >= 1.5``) as booleans;
- ``exit_codes`` per part, ``seconds`` (the script's wall clock), ``ok`` (every part exited 0 and no test failed).

Only the standard library: it runs wherever the script does.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

MFU_GOAL = 0.40
SPEEDUP_GOAL = 1.5


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when the file is missing or unreadable (a failed part)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def test_results(xml_path: Path) -> dict[str, Any] | None:
    """``{"passed", "failed", "skipped": [test ids], "counts"}`` from pytest's JUnit XML (None when absent)."""
    try:
        root = ElementTree.parse(xml_path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    out: dict[str, list[str]] = {"passed": [], "failed": [], "skipped": []}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out["failed"].append(name)
        elif case.find("skipped") is not None:
            out["skipped"].append(name)
        else:
            out["passed"].append(name)
    return {**out, "counts": {k: len(v) for k, v in out.items()}}


def quick_summary(record: dict[str, Any]) -> dict[str, Any]:
    """The figures of one ``gpu_quick.json`` the note needs."""
    p = record["pretrain"]
    return {
        "device_name": record.get("device_name"), "size": p["size"], "parameters": p["parameters"],
        "steps": p["steps"], "planned_steps": p["planned_steps"], "tokens_seen": p["tokens_seen"],
        "tokens_per_second": p["tokens_per_second"], "mfu": p["mfu"], "mfu_vs_peak": p["mfu_vs_peak"],
        "precision": p["precision"], "mlm_accuracy": p["mlm_accuracy"], "unigram_accuracy": p["unigram_accuracy"],
        "gain": {task: r["gain"] for task, r in record["finetune"].items()},
        "average_gain": record.get("average_gain"), "skipped": record.get("skipped", []),
        "complete": record.get("complete"), "seconds": record.get("phase_seconds", {}).get("total"),
    }


def bench_summary(record: dict[str, Any]) -> dict[str, Any]:
    """Ours vs HF's step and the issue's goals (MFU against the measured bf16 peak, the speed-up)."""
    peak = record["matmul_peak_tflops"]
    ours_tflops = record["ours"]["mfu"] * max(peak.values())
    mfu_bf16 = ours_tflops / peak["bf16"] if peak.get("bf16") else None
    return {**record, "ours_mfu_vs_bf16_peak": None if mfu_bf16 is None else round(mfu_bf16, 4),
            "goals": {f"mfu>={MFU_GOAL}": mfu_bf16 is not None and mfu_bf16 >= MFU_GOAL,
                      f"speedup>={SPEEDUP_GOAL}": record["speedup"] >= SPEEDUP_GOAL}}


def summarize(out: Path, codes: dict[str, int], seconds: float | None) -> dict[str, Any]:
    """Build ``out/gpu_check.json`` (module docstring) and return it."""
    tests = test_results(out / "gpu_tests.xml")
    quick = {}
    for folder in sorted(out.glob("quick-*")):
        record = read_json(folder / "gpu_quick.json")
        quick[folder.name.removeprefix("quick-")] = quick_summary(record) if record else None
    bench = read_json(out / "pretrain_bench.json")
    summary = {
        "tests": tests, "gpu_quick": quick, "pretrain_bench": bench_summary(bench) if bench else None,
        "exit_codes": dict(sorted(codes.items())), "seconds": seconds,
        "ok": all(code == 0 for code in codes.values()) and bool(tests) and not tests["failed"],
    }
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


def lines(summary: dict[str, Any]) -> list[str]:
    """The summary as a few printed lines."""
    out = []
    tests = summary["tests"]
    out.append("tests: " + (", ".join(f"{k} {v}" for k, v in tests["counts"].items()) if tests else "no results")
               + ("; failed: " + ", ".join(tests["failed"]) if tests and tests["failed"] else ""))
    for size, q in summary["gpu_quick"].items():
        if q is None:
            out.append(f"gpu-quick {size}: no record")
            continue
        gains = " ".join(f"{t} {g:+.4f}" for t, g in q["gain"].items()) or "none"
        out.append(f"gpu-quick {size}: {q['steps']} steps, {q['tokens_per_second']:.0f} tokens/s, MFU {q['mfu']:.3f}"
                   f", MLM acc {q['mlm_accuracy']:.4f} (unigram {q['unigram_accuracy']:.4f}); gain {gains}"
                   + (f"; skipped {', '.join(q['skipped'])}" if q["skipped"] else ""))
    b = summary["pretrain_bench"]
    if b:
        out.append(f"pretrain bench {b['size']} seq {b['seq']} batch {b['batch']} ({b['precision']}): ours "
                   f"{b['ours']['tokens_per_second']:.0f} tokens/s (MFU vs bf16 peak {b['ours_mfu_vs_bf16_peak']}), "
                   f"HF {b['ref']['tokens_per_second']:.0f} tokens/s, {b['speedup']:.2f}x; goals {b['goals']}")
    out.append(f"exit codes {summary['exit_codes']}; {summary['seconds']} s; ok {summary['ok']}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sm = sub.add_parser("summarize", help="write DIR/gpu_check.json from the parts' files")
    sm.add_argument("--out", type=Path, required=True)
    sm.add_argument("--codes", nargs="*", default=[], metavar="PART=CODE")
    sm.add_argument("--seconds", type=float)
    sm.add_argument("--quiet", action="store_true", help="write the file only (the script's summaries between parts)")
    args = parser.parse_args(argv)
    codes = {}
    for item in args.codes:
        part, _, code = item.partition("=")
        codes[part] = int(code)
    summary = summarize(args.out, codes, args.seconds)
    if args.quiet:
        return 0
    sys.stdout.write("\n".join(lines(summary)) + "\n")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
