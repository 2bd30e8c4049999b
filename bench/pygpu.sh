#!/usr/bin/env bash
# GPU machine: build the Python package with the CUDA backend and run its GPU test (tests/python/test_gpu.py);
# on a crash, rerun under cuda-gdb for a host backtrace. Logs under $OUT.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
pyt=/tmp/pagedattn-py
echo "commit: $(cat "$root/.commit" 2>/dev/null || echo unknown)" | tee "$OUT/python_device.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/python_device.txt"
PAGEDATTN_CUDA=ON timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target "$pyt" \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a-real -C build-dir=/tmp/pagedattn-wheel "$root" \
  > "$OUT/python_build.log" 2>&1 || { tail -20 "$OUT/python_build.log"; exit 1; }
cd "$root/tests/python"
PYTHONPATH="$pyt" timeout 120 python3 -m pytest test_gpu.py -q -rA -s -x -p no:cacheprovider > "$OUT/python_gpu.log" 2>&1
rc=$?
grep -E "WORST|worst|graph|passed|failed|error|Segmentation" "$OUT/python_gpu.log" | tail -15
if [ $rc -ne 0 ] && grep -q "Segmentation\|Fatal Python" "$OUT/python_gpu.log"; then
  PYTHONPATH="$pyt" timeout 120 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt -ex "info sharedlibrary" \
    --args python3 -m pytest test_gpu.py -q -x -p no:cacheprovider > "$OUT/python_gdb.log" 2>&1
  grep -E "^#[0-9]+" "$OUT/python_gdb.log" | head -30
fi
exit $rc
