#!/usr/bin/env bash
# The one command of the gpu-quick run on the GPU machine (profiles/gpu-quick.yaml, bench/device/gpu_quick.py): pre-train the
# profile's small BERT for at most --pretrain-seconds, then fine-tune it and the same model from scratch on sentiment,
# NER and QA; $OUT/gpu_quick.json holds tokens/s, MFU, held-out MLM accuracy and the gains, $OUT/gpu_quick.log the log.
#
# Here, on CPU, once (minutes; nothing of it needs a GPU):
#   python -m stages.cli profile gpu-quick -n gpu-quick -- create_pretraining_data prepare_tasks
#   python bench/device/gpu_quick.py pack --exp gpu-quick --out .gpu_quick      # 23 MiB, refused over 50
#   # the GPU machine lacks datasets (+ dill, multiprocess) and seqeval; it cannot reach a registry, so carry them
#   # (python 3.12 there; the versions of requirements.lock):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl \
#       datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
#   python3 -m pip wheel --no-deps -w .whl seqeval==1.2.2     # PyPI has only its sdist: a pure-Python wheel built here
#   # (run here: four wheels, 0.9 MB)
# (.gpu_quick/ and .whl/ are git-ignored; both travel only when named in carry.) The machine's pyarrow must be >= 24
# for datasets 5.2 (its version is logged first); if it is older, download pyarrow==25.0.1 into .whl as well (~42 MB).
#
# Then the device call (the run tool), one try of about 8 minutes of the 15 a task gets:
#   run(command="bash bench/device/gpu_quick.sh", carry=[".gpu_quick", ".whl"], timeout_s=540)
# Arguments after the script go to `bench/device/gpu_quick.py run` (e.g. --pretrain-seconds 200, --tasks sentiment ner).
# Defaults here: the loop gets --pretrain-seconds 270 (steps cut to fit after timing a few), fine-tuning pairs start
# only while they fit in --budget-seconds 450 of the script's own clock, MFU also against --peak-tflops 790 (the
# H200's measured dense bf16 matmul rate, device README). Environment: OUT (default /tmp/gpu_quick_out),
# GPU_QUICK_DATA (.gpu_quick), GPU_QUICK_WHEELS (.whl), PYTHON (python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/gpu_quick_out}"
DATA="${GPU_QUICK_DATA:-.gpu_quick}"
WHEELS="${GPU_QUICK_WHEELS:-.whl}"
PYTHON="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
started=$(date +%s)
. bench/device/device_setup.sh
{
  device_setup gpu_quick.sh
  "$PYTHON" bench/device/gpu_quick.py run --data "$DATA" --out "$OUT" --pretrain-seconds 270 --budget-seconds 450 \
      --peak-tflops 790 "$@"
  echo "gpu_quick.sh: done in $(( $(date +%s) - started )) s"
} 2>&1 | tee "$OUT/gpu_quick.log"
