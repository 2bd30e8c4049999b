#!/usr/bin/env bash
# GPU machine: where the fixed per-layer cost goes (seed shape, small and 8k contexts, T = 1 and 8).
#   usage: bench/overhead.sh        (after bench/gpu.sh build; BUILD_DIR as there; logs under $OUT/run)
# Rows: the default; --no-pdl (each launch waits for the previous grid); --partition 131072 (one
# partition per kv head: no merge kernel, 4 CTAs); then Nsight Compute's duration of each kernel of one
# layer run alone (no graph, no overlap with its neighbours).
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
for t in 1 8; do
  echo "== ncu, one layer alone: context 1024 and 8192, T=$t, f16 (gpu__time_duration, us)"
  for c in 1024 8192; do
    timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -c 4 -k regex:"fwd_kernel|merge_kernel|wg_kernel|write_kernel" \
      "$bin" bench --backend cuda --scenario seed --context $c --tokens $t --kv f16 --layers 1 --repeats 1 --warmup 0 2>&1 |
      awk -v c=$c '/_kernel</ {match($0, /[a-z_]+_kernel<[^>]*>/); name = substr($0, RSTART, RLENGTH)}
                   /gpu__time_duration.sum/ {printf "  ctx %s %-34s %s %s\n", c, name, $NF, $(NF-1)}'
  done
done | tee -a "$run_dir/overhead.log"
