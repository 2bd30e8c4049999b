#!/usr/bin/env bash
# Same-call A/B of the sweep and prefill scenarios, for bench/gpu.sh's extra stage:
#   bench/prepare_abref.sh REF...   (here, before the call; carry .abref)
#   GPU_SH_EXTRA='bash bench/sweep_ab.sh' bash bench/gpu.sh build abref extra
# Runs `pagedattn bench --scenario sweep` (and `--scenario prefill`) on the main build ($build/pagedattn:
# "new"), on each abref build ($build-ref-NAME/pagedattn: "ref-NAME"), on the main build under each
# SWEEP_CONFIGS entry, then the main build's sweep once more ("new2": the noise floor of the ratios).
# Prints bench/sweep_ratio.py's summaries (new / each ref, each config / new) and the prefill rows; the
# JSON, logs and full ratio tables stay in $run_dir (results.tgz).
#   SWEEP_ARGS     the sweep's bench arguments (default: --backend cuda --kv f16 --sweep-groups 4,8,16
#                  --fill random --layers 4)
#   PREFILL_ARGS   the prefill's (default: --backend cuda --prefill-kv bf16 --layers 1 --prefill-shapes
#                  32/8/64,32/8/128,16/4/256); PREFILL=0 skips the prefill rows
#   SWEEP_CONFIGS  space-separated NAME:VAR=V[,VAR=V...]: runs of the main build with those variables
#                  (e.g. one:PAGEDATTN_WG_SHARED=0)
# (The runs mb1-mb4 used a one-off version of this; bench/results/2026-12-02-mb*/README.txt.)
set -u
R=${run_dir:?run_dir: run from the extra stage of bench/gpu.sh}
B=${build:?build: run from the extra stage of bench/gpu.sh}
here=$(cd "$(dirname "$0")" && pwd)
read -ra sweep_args <<< "${SWEEP_ARGS:---backend cuda --kv f16 --sweep-groups 4,8,16 --fill random --layers 4}"
read -ra prefill_args <<< "${PREFILL_ARGS:---backend cuda --prefill-kv bf16 --layers 1 --prefill-shapes 32/8/64,32/8/128,16/4/256}"
t0=$(date +%s)
log() { echo "== +$(( $(date +%s) - t0 ))s $*"; }
status=0

# run TAG BINARY PREFILL(0/1) [VAR=V...]
run() {
  local tag=$1 bin=$2 pf=$3
  shift 3
  log "sweep $tag $*"
  env "$@" "$bin" bench --scenario sweep "${sweep_args[@]}" --json "$R/sweep_$tag.json" > "$R/sweep_$tag.log" 2>&1 ||
    { echo "sweep $tag failed: $R/sweep_$tag.log"; status=1; }
  if [ "$pf" = 1 ] && [ "${PREFILL:-1}" = 1 ]; then
    log "prefill $tag $*"
    env "$@" "$bin" bench --scenario prefill "${prefill_args[@]}" > "$R/prefill_$tag.log" 2>&1 ||
      { echo "prefill $tag failed: $R/prefill_$tag.log"; status=1; }
  fi
}

# the working tree's CLI: the build stage's, else the one the abref stage built beside the refs ($B-cli;
# run x4f lost its sweep to this check without the fallback)
bin=$B/pagedattn
[ -x "$bin" ] || bin=$B-cli/pagedattn
[ -x "$bin" ] || { echo "no $B/pagedattn or $B-cli/pagedattn (the build or abref stage)"; exit 1; }
run new "$bin" 1
refs=()
for d in "$B"-ref-*/; do
  [ -x "$d/pagedattn" ] || continue
  name=$(basename "$d")
  tag=ref-${name#"$(basename "$B")-ref-"}
  run "$tag" "$d/pagedattn" 1
  refs+=("$tag")
done
configs=()
for spec in ${SWEEP_CONFIGS:-}; do
  [[ $spec == *:* ]] || { echo "SWEEP_CONFIGS entry '$spec' skipped: not NAME:VAR=V[,VAR=V]"; continue; }
  IFS=, read -ra vars <<< "${spec#*:}"
  run "${spec%%:*}" "$bin" 1 "${vars[@]}"
  configs+=("${spec%%:*}")
done
run new2 "$bin" 0
log done

# summaries (every row is in sweep_ratio_*.txt)
ratio() {  # NEW REF [AGAIN]
  local out=$R/sweep_ratio_$1_$2.txt
  python3 "$here/sweep_ratio.py" "$R/sweep_$1.json" "$R/sweep_$2.json" ${3:+"$R/sweep_$3.json"} > "$out" 2>&1 ||
    { echo "sweep_ratio.py $1 $2 failed: $out"; status=1; }
  echo "#### $1 / $2"
  grep -v "^  (" "$out"
}
noise=new2
for t in "${refs[@]}"; do ratio new "$t" $noise; noise=; done
for c in "${configs[@]}"; do ratio "$c" new; done
if [ "${PREFILL:-1}" = 1 ]; then
  for f in "$R"/prefill_*.log; do
    [ -f "$f" ] || continue
    echo "## $(basename "$f" .log)"
    grep -E "^(H/|[0-9]+/)" "$f"
  done
fi
exit $status
