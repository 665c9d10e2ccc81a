# Sourced by the device scripts (bench/device/gpu_quick.sh, bench/device/gpu_check.sh): `device_setup NAME` prints the machine's
# GPU and installs the carried wheels ($WHEELS/*.whl, none needed) into /tmp/site, on PYTHONPATH for the rest of
# the script. Reads PYTHON, WHEELS, DATA, OUT and started (the script's start, epoch seconds).
device_setup() {
  echo "$1: $(date -u +%FT%TZ) on $(hostname), data $DATA, out $OUT"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  if compgen -G "$WHEELS/*.whl" >/dev/null; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEELS"/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    echo "$1: $(ls "$WHEELS"/*.whl | wc -l) carried wheels in /tmp/site ($(( $(date +%s) - started )) s)"
  fi
  return 0
}
