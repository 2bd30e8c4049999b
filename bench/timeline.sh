#!/usr/bin/env bash
# GPU machine: per-CTA phase timeline of the attention kernels, fwd_kernel and the Hopper wg_kernel (diagnostic build -DPAGEDATTN_TIMELINE=1,
# separate build tree; the default build is unaffected). One layer per replay; the last replay is read.
#   usage: bench/timeline.sh [contexts] [tokens] [kv]     (default 1024,8192 1,8 f16; carry .deps)
#   TIMELINE_FLAGS adds CUDA flags (an experiment's -D macro); BUILD_SUFFIX names the build tree (and the
#   logs); TIMELINE_SRC builds another source tree, e.g. TIMELINE_SRC=.abref/85510c2 BUILD_SUFFIX=-ref
#   (bench/prepare_abref.sh; the phases of two commits side by side).
#   TIMELINE_SCENARIO=batch times the 32 x 8k batch (tokens -> --batch-tokens; contexts ignored);
#   TIMELINE_ARGS adds bench flags (e.g. --deterministic). The batch's merge phase is not timed right:
#   each CTA prints from the device, and thousands of merge CTAs printing spread the merge over 5-18 ms
#   per layer and the calls past their limit (run abd); bench/kernel_times.sh times the two kernels.
#   The device tool returns files of limited size: timeline.txt is the summary; the raw logs stay there.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
run_dir=$OUT/run
mkdir -p "$run_dir"
b=${BUILD_DIR:-/tmp/pagedattn-build}-timeline${BUILD_SUFFIX:-}
prefix=()
[ -d "$root/.deps" ] && prefix=(-DCMAKE_PREFIX_PATH="$root/.deps")
src=${TIMELINE_SRC:-$root}
case $src in /*) ;; *) src=$root/$src ;; esac
{ cmake -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON -DPAGEDATTN_BUILD_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real "-DCMAKE_CUDA_FLAGS=-DPAGEDATTN_TIMELINE=1 ${TIMELINE_FLAGS:-}" "${prefix[@]}" &&
  ninja -C "$b" -j "$(nproc)" pagedattn; } > "$run_dir/build_timeline.log" 2>&1 || { tail -30 "$run_dir/build_timeline.log"; exit 1; }
mhz=$(nvidia-smi --query-gpu=clocks.max.sm --format=csv,noheader,nounits | head -1)
ctxs=${1:-1024,8192} toks=${2:-1,8} kvs=${3:-f16}
for ctx in ${ctxs//,/ }; do
  for t in ${toks//,/ }; do
    for kv in ${kvs//,/ }; do
      scen=${TIMELINE_SCENARIO:-seed}
      tag=$scen${TIMELINE_ARGS:+$(echo "$TIMELINE_ARGS" | tr -dc 'a-z0-9')}
      log=$run_dir/timeline${BUILD_SUFFIX:-}_${tag}_${ctx}_T${t}_${kv}.log
      if [ "$scen" = batch ]; then shape=(--scenario batch --batch-tokens "$t"); else shape=(--scenario "$scen" --context "$ctx" --tokens "$t"); fi
      # shellcheck disable=SC2086
      timeout 120 "$b/pagedattn" bench --backend cuda "${shape[@]}" --kv "$kv" ${TIMELINE_ARGS:-} \
        --layers 1 --warmup 2 --repeats 3 > "$log" 2>&1
      echo "== $scen ${TIMELINE_ARGS:-} context $ctx T=$t kv=$kv ($(grep -E "^(f16|u8|fp8) " "$log" | awk '{print $5 " us per layer, timeline build"}'); SM clock $mhz MHz)"
      python3 "$root/bench/timeline.py" "$log" "$mhz"
    done
  done
done | tee "$run_dir/timeline${BUILD_SUFFIX:-}.txt"
