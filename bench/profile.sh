#!/usr/bin/env bash
# GPU machine: Nsight Compute profile of the attention and merge kernels on one seed-scenario config.
#   usage: bench/profile.sh [context] [T[,T...]] [kv]     (carry .deps; logs under $OUT)
#   Run-time switches pass through the environment (e.g. PAGEDATTN_WG_SPLIT=0: 33-64-row chunks back on fwd_kernel).
#   PROFILE_ARGS adds bench arguments (e.g. "--heads 32 --kv-heads 4 --head-size 128": another shape).
#   PROFILE_FILL=op fills the cache as the seed rows do (default random: the timing of a plan can depend on
#   it, runs mw2-mw6 in bench/NOTES.md).
#   SKIP_BUILD=1 reuses an existing build in $BUILD_DIR (e.g. the one bench/gpu.sh made).
#   PROFILE_SOURCE=1 adds per-SASS-instruction stall samples (src_*.top.txt; report src_*.ncu-rep).
#   PROFILE_SRC builds another source tree (e.g. .abref/X from bench/prepare_abref.sh) with BUILD_DIR set
#   to its own build tree; PROFILE_TAG then names its logs (ncu_TAG_..., build_TAG.log), so two trees side by side.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
build=${BUILD_DIR:-/tmp/pagedattn-build}
ctx=${1:-131072} T=${2:-1} kv=${3:-f16}
prefix=()
[ -d "$root/.deps" ] && prefix=(-DCMAKE_PREFIX_PATH="$root/.deps")
src=${PROFILE_SRC:-$root}
case $src in /*) ;; *) src=$root/$src ;; esac
[ "${SKIP_BUILD:-0}" = 1 ] && [ -x "$build/pagedattn" ] ||
{ cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON -DPAGEDATTN_BUILD_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real "${prefix[@]}" && ninja -C "$build" -j "$(nproc)" pagedattn; } > "$OUT/build${PROFILE_TAG:+_$PROFILE_TAG}.log" 2>&1 ||
  { tail -30 "$OUT/build${PROFILE_TAG:+_$PROFILE_TAG}.log"; exit 1; }
for t in ${T//,/ }; do
  args=(bench --backend cuda --context "$ctx" --tokens "$t" --kv "$kv" --layers 1 --repeats 3 --warmup 1 --fill "${PROFILE_FILL:-random}" --scenario seed ${PROFILE_ARGS:-})
  echo "== context $ctx T=$t kv=$kv"
  PAGEDATTN_PRINT_PLAN=1 timeout 120 "$build/pagedattn" "${args[@]}" 2>&1 | grep -E "plan|us/8|^(u8|f16|bf16|fp8)" | head -5
  timeout 300 ncu --clock-control none -k regex:"fwd_kernel|wg_kernel|merge_kernel" -c 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats --section InstructionStats --section ComputeWorkloadAnalysis \
    --metrics regex:'smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    "$build/pagedattn" "${args[@]}" > "$OUT/ncu${PROFILE_TAG:+_$PROFILE_TAG}_${ctx}_T${t}_${kv}.txt" 2>&1
  grep -E "fwd_kernel|wg_kernel|merge_kernel|Duration|DRAM Throughput|Achieved Occupancy|Warp Cycles Per Issued|Registers|Theoretical Occ|No Eligible|Executed Instructions |Issue Slots Busy|Executed Ipc A" \
    "$OUT/ncu${PROFILE_TAG:+_$PROFILE_TAG}_${ctx}_T${t}_${kv}.txt" | head -30
  # stall reasons above 0.3 cycles per issued instruction, per kernel
  awk '/fwd_kernel|wg_kernel|merge_kernel/{print "  " $1, $2} /issue_stalled/{ if ($NF+0 > 0.3) print "    " $1, $NF }' \
    "$OUT/ncu${PROFILE_TAG:+_$PROFILE_TAG}_${ctx}_T${t}_${kv}.txt" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' 
  # PROFILE_SOURCE=1: per-SASS-instruction warp stall samples of the first attention kernel (where the
  # stalls sit: copy issue, ldmatrix, MMA chains, softmax), the top 40 by samples, with their stall reasons
  if [ "${PROFILE_SOURCE:-0}" = 1 ]; then
    rep="$OUT/src${PROFILE_TAG:+_$PROFILE_TAG}_${ctx}_T${t}_${kv}"
    timeout 300 ncu --clock-control none -k regex:"fwd_kernel|wg_kernel" -c 1 --section SourceCounters \
      --section WarpStateStats -f -o "$rep" "$build/pagedattn" "${args[@]}" > "$rep.log" 2>&1 ||
      { echo "ncu failed:"; tail -5 "$rep.log"; }
    ncu -i "$rep.ncu-rep" --page source --csv --print-source sass > "$rep.csv" 2> "$rep.err"
    python3 - "$rep.csv" <<'PY' | tee "$rep.top.txt"
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if any("Source" == c.strip() or "Address" in c for c in r)), None)
if hdr is None:
    print("no source table in", sys.argv[1]); print("\n".join(",".join(r) for r in rows[:5])); sys.exit(0)
h = [c.strip() for c in rows[hdr]]
col = next((i for i, c in enumerate(h) if "Stall Sampling (All" in c), None)
src = next((i for i, c in enumerate(h) if c == "Source"), 1)
reasons = [i for i, c in enumerate(h) if c.startswith("stall_") or "Stall Reason" in c]
if col is None or not reasons:
    print("columns:", h)
if col is None:
    sys.exit(0)
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
total = sum(num(r[col]) for r in body) or 1.0
print("samples %d over %d SASS lines; top 40 (share, instruction):" % (total, len(body)))
for r in sorted(body, key=lambda r: -num(r[col]))[:40]:
    top = sorted(((num(r[i]), h[i]) for i in reasons), reverse=True)[:2]
    print("%5.1f%%  %-60s %s" % (100 * num(r[col]) / total, r[src].strip()[:60],
                                 " ".join("%s=%d" % (n, v) for v, n in top if v > 0)))
# by opcode: a warp's samples sit on the instruction it waits to issue, so DEPBAR is the cp.async waits,
# BAR the barriers, HMMA mostly its operands (conversions, ldmatrix) or the previous MMA of its chain
by_op = {}
for r in body:
    w = r[src].strip().split()
    op = (w[1] if w and w[0].startswith("@") and len(w) > 1 else w[0] if w else "?").split(".")[0]
    by_op[op] = by_op.get(op, 0.0) + num(r[col])
print("by opcode (share of samples):")
print("  " + "  ".join("%s %.1f%%" % (k, 100 * v / total) for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:16]))
PY
  fi
done
