#!/usr/bin/env bash
# One call on the GPU machine: build from source (sm_90a + sm_80), GPU tests, a compute-sanitizer
# subset, the benchmark. Logs and JSON go under $OUT; a short table is printed last.
#   usage: bench/gpu.sh [all|test|bench]
# Here, before the call: bench/prepare_deps.sh, and
#   echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty)" > .commit
# then carry .deps and .commit.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
what=${1:-all}
build=${BUILD_DIR:-/tmp/pagedattn-build}
log() { echo "== $(date -u +%H:%M:%S) $*"; }

# the copy of the tree on the GPU machine has no .git: take the commit from .commit (carried)
if [ -z "${PAGEDATTN_COMMIT:-}" ]; then
  if git -C "$root" rev-parse --short HEAD >/dev/null 2>&1; then
    PAGEDATTN_COMMIT="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo +dirty)"
  elif [ -f "$root/.commit" ]; then
    PAGEDATTN_COMMIT=$(cat "$root/.commit")
  else
    PAGEDATTN_COMMIT=unknown
  fi
fi
export PAGEDATTN_COMMIT
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $PAGEDATTN_COMMIT"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader 2>&1
  nvcc --version | tail -1
} | tee "$OUT/device.txt"

log "build"
prefix=()
[ -d "$root/.deps" ] && prefix=(-DCMAKE_PREFIX_PATH="$root/.deps")
if ! { cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
         -DCMAKE_CUDA_ARCHITECTURES="90a-real;80-real" "${prefix[@]}" &&
       ninja -C "$build" -j "$(nproc)"; } > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  exit 1
fi
grep -E "spill|local memory" "$OUT/build.log" | grep -v " 0 bytes" | head -5

status=0
if [ "$what" = all ] || [ "$what" = test ]; then
  log "GPU tests"
  timeout 300 "$build/tests/test_cuda" > "$OUT/test_cuda.log" 2>&1 || { status=1; echo "test_cuda failed or timed out (exit $?)"; tail -5 "$OUT/test_cuda.log"; }
  grep -E "^\[ *(PASSED|FAILED|OK|SKIPPED) |worst|cases$" "$OUT/test_cuda.log" | head -40
  log "CPU tests (ctest -L cpu)"
  (cd "$build" && ctest -L cpu -j 8 --timeout 120 > "$OUT/ctest_cpu.log" 2>&1) || status=1
  tail -3 "$OUT/ctest_cpu.log"
  log "compute-sanitizer memcheck subset"
  PAGEDATTN_GPU_CASES=12 timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/test_cuda" \
    --gtest_filter='Cuda.FewQueryRandom:Cuda.TileAndMixedRandom:Cuda.GraphReplayMatchesDirectRun' \
    > "$OUT/sanitizer.log" 2>&1
  echo "sanitizer exit code: $? ($(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$OUT/sanitizer.log") error lines)"
  grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/sanitizer.log" | head -5
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
  log "benchmark"
  timeout 300 "$build/pagedattn" bench --backend cuda ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1 || status=1
  cat "$OUT/bench.log"
fi
exit $status
