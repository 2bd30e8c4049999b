#!/usr/bin/env bash
# GPU machine: where the fixed per-layer cost goes (seed shape, small and 8k contexts, T = 1 and 8).
#   usage: bench/overhead.sh        (after bench/gpu.sh build; BUILD_DIR as there; logs under $OUT/run)
# Rows: the default; --no-pdl (each launch waits for the previous grid); --partition 131072 (one
# partition per kv head: no merge kernel, 4 CTAs). Where the time goes inside a layer: bench/timeline.sh.
# (Run s6c also ran ncu here; it timed the bench's set-up kernels, not the op, and was removed.)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
run_dir=$OUT/run
mkdir -p "$run_dir"
bin=${BUILD_DIR:-/tmp/pagedattn-build}/pagedattn
ctx=${OVERHEAD_CONTEXTS:-1024,8192}
common=(bench --backend cuda --scenario seed --context "$ctx" --tokens 1,8 --kv f16,u8)
for cfg in default --no-pdl "--partition 131072"; do
  echo "== $cfg"
  if [ "$cfg" = default ]; then extra=(); else read -ra extra <<< "$cfg"; fi
  timeout 120 "$bin" "${common[@]}" "${extra[@]}" 2>&1 | grep -E "^(f16|u8) "
done | tee "$run_dir/overhead.log"
