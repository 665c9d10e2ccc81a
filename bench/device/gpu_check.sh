#!/usr/bin/env bash
# The one GPU check (issue 36): one command of at most 9 minutes on one H200, start-up included, that
#   1. runs the `gpu` tests (tests/test_gpu.py; the flow's device assignment in tests/test_flow_pipeline.py too
#      where Prefect is importable),
#   2. runs the gpu-quick run (bench/device/gpu_quick.py run) once per size of GPU_CHECK_SIZES (small, then base-shaped):
#      pre-training for a fixed time, then fine-tuning pre-trained vs scratch on sentiment, NER and QA,
#   3. times BERT-Base seq-128 training steps, ours against HF's BertForPreTraining with the stock collator, both in
#      the same bf16 autocast in one process (bench/pretrain.py --json),
#   4. writes one summary, $OUT/gpu_check.json (bench/device/gpu_check.py summarize), and prints its lines.
# Every part runs even when an earlier one failed; the summary records each part's exit code and is rewritten after
# each part (a call cut short by its time limit still brings back what finished). The script's exit code is the
# summary's: 0 when every part exited 0 and no test failed.
#
# Prepare here, on CPU: the packed data in .gpu_quick/ (bench/device/gpu_quick.sh's header: `stages.cli profile gpu-quick`
# then `bench/device/gpu_quick.py pack`) and the wheels the GPU machine lacks in .whl/ (python 3.12 there; the versions of
# requirements.lock; the variants test needs pydantic, the rest gpu_quick.sh's four):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#       datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 pydantic==2.14.4 pydantic_core==2.50.5 \
#       annotated-types==0.8.0 typing-inspection==0.4.5
#   python3 -m pip wheel --no-deps -w .whl seqeval==1.2.2
# (ONNX Runtime is not carried: the export parity test skips itself without it.) The machine's pyarrow must be >= 24
# for datasets 5.2 (gpu_quick.sh logs its version); if it is older, download pyarrow==25.0.1 into .whl as well
# (~42 MB). Then the device call, about 7.5 minutes of the 15 a task gets:
#   run(command="bash bench/device/gpu_check.sh", carry=[".gpu_quick", ".whl"], timeout_s=540)
#
# Environment (the CPU stand-in in tests/test_gpu_quick.py scales everything down with these):
#   OUT (default /tmp/gpu_check_out), GPU_QUICK_DATA (.gpu_quick), GPU_QUICK_WHEELS (.whl), PYTHON (python3),
#   GPU_CHECK_SIZES ("small base"), GPU_CHECK_PRETRAIN_SECONDS ("40 60": per size), GPU_CHECK_BUDGET_SECONDS
#   ("110 150": per size, the gpu-quick run's own clock), GPU_CHECK_QUICK_ARGS (more `gpu_quick.py run` arguments),
#   GPU_CHECK_BENCH_ARGS ("--size base --batch 64 --seq 128 --steps 20 --warmup 5"), GPU_CHECK_TESTS
#   ("tests/test_gpu.py"), GPU_CHECK_TEST_SECONDS (120), GPU_CHECK_PEAK_TFLOPS (790: the H200's measured dense bf16
#   matmul rate, device README). Budget: ~15 s set-up, tests <= 120 s, gpu-quick 110 + 150 s, bench ~40 s: ~440 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-/tmp/gpu_check_out}"
DATA="${GPU_QUICK_DATA:-.gpu_quick}"
WHEELS="${GPU_QUICK_WHEELS:-.whl}"
PYTHON="${PYTHON:-python3}"
SIZES=(${GPU_CHECK_SIZES-small base})  # "" runs no gpu-quick
PRETRAIN_SECONDS=(${GPU_CHECK_PRETRAIN_SECONDS:-40 60})
BUDGET_SECONDS=(${GPU_CHECK_BUDGET_SECONDS:-110 150})
read -r -a QUICK_ARGS <<< "${GPU_CHECK_QUICK_ARGS:-}"
read -r -a BENCH_ARGS <<< "${GPU_CHECK_BENCH_ARGS:---size base --batch 64 --seq 128 --steps 20 --warmup 5}"
read -r -a TESTS <<< "${GPU_CHECK_TESTS:-tests/test_gpu.py}"
TEST_SECONDS="${GPU_CHECK_TEST_SECONDS:-120}"
PEAK="${GPU_CHECK_PEAK_TFLOPS:-790}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
mkdir -p "$OUT"
started=$(date +%s)
. bench/device/device_setup.sh
declare -A CODES

summarize() {  # the summary of what has finished so far; its exit code is the summary's verdict
  local codes=""
  for part in "${!CODES[@]}"; do codes+="$part=${CODES[$part]} "; done
  "$PYTHON" bench/device/gpu_check.py summarize --out "$OUT" --codes $codes --seconds $(( $(date +%s) - started )) "$@"
}

{
  device_setup gpu_check.sh

  # 1. the gpu tests (no xdist on the GPU machine: the project's addopts are dropped)
  if "$PYTHON" -c "import prefect" 2>/dev/null; then TESTS+=(tests/test_flow_pipeline.py); fi
  timeout "$TEST_SECONDS" "$PYTHON" -m pytest -o addopts="" -p no:cacheprovider -q -rA -m gpu \
      --junitxml "$OUT/gpu_tests.xml" "${TESTS[@]}"
  CODES[tests]=$?
  echo "gpu_check.sh: tests exit ${CODES[tests]} at $(( $(date +%s) - started )) s"
  summarize --quiet

  # 2. gpu-quick per size
  for i in "${!SIZES[@]}"; do
    size="${SIZES[$i]}"
    "$PYTHON" bench/device/gpu_quick.py run --data "$DATA" --out "$OUT/quick-$size" --work "$OUT/quick-$size/work" \
        --size "$size" --pretrain-seconds "${PRETRAIN_SECONDS[$i]:-60}" --budget-seconds "${BUDGET_SECONDS[$i]:-150}" \
        --peak-tflops "$PEAK" "${QUICK_ARGS[@]}"
    CODES[quick_$size]=$?
    rm -rf "$OUT/quick-$size/work"  # the saved model: only the record comes back
    echo "gpu_check.sh: gpu-quick $size exit ${CODES[quick_$size]} at $(( $(date +%s) - started )) s"
    summarize --quiet
  done

  # 3. our step against the stock one, same precision, same process
  "$PYTHON" bench/pretrain.py "${BENCH_ARGS[@]}" --json "$OUT/pretrain_bench.json"
  CODES[pretrain_bench]=$?
  echo "gpu_check.sh: pretrain bench exit ${CODES[pretrain_bench]} at $(( $(date +%s) - started )) s"

  # 4. the summary
  summarize
  verdict=$?
  echo "gpu_check.sh: done in $(( $(date +%s) - started )) s"
  exit "$verdict"
} 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
