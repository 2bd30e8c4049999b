#!/usr/bin/env bash
# One call on the GPU machine: build from source (sm_90a + sm_80), GPU tests, a compute-sanitizer
# subset, the benchmark, the Python package's GPU test and the peers. Logs go under $OUT/run and come
# back as $OUT/results.tgz (the device tool returns at most 8 files); a short table is printed last.
#   usage: bench/gpu.sh [stages...]    stages: build test cputest sanitizer bench ab abbuild abref python peers prefill
#   extra (GPU_SH_EXTRA, a shell command run last; its output run/extra.log comes back in results.tgz)
#   (prefill: the prefill scenario alone, default, PAGEDATTN_WGMMA=64 and =0; abbuild: build-time
#   experiments against the default build, AB_BUILDS; BUILD_CUDA_FLAGS puts one in the main build, so
#   that `build test` tests it; abref: earlier commits' sources (optionally with a patch) in .abref,
#   bench/prepare_abref.sh; BUILD_PYTHON=1: the Python module from the main build tree, no wheel; CUDA_ARCHS, BUILD_TARGETS and
#   TEST_FILTER narrow the build and the GPU tests for quick runs; an A/B config is skipped with less than
#   AB_MIN_LEFT (40) seconds of the budget left, an A/B build or ref with less than AB_BUILD_MIN_LEFT (120);
#   the default rows run once more at the end, column default_again: the drift, AB_DRIFT=0 skips it)
#                                       (default: all but cputest; CI runs the CPU tests)
# Here, before the call: bench/prepare_deps.sh, bench/peers/fetch_flashinfer.sh (FlashInfer wheels and
# prebuilt modules into .wheels; optional), and
#   echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +dirty)" > .commit
# then carry .deps, .commit and .wheels (bench/prebuild.sh instead of the .commit line: the binaries
# built here, carried in .prebuilt, and no compile there). A full run (all stages) no longer fits one 10-minute call: the
# GPU tests alone take ~8 minutes (run fx8t); run `build test` in two shards, then the other stages.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
run_dir=$OUT/run
# a clean run folder: the device machine's output folder held other runs' logs (the s8 runs found
# 2026-11-29 files in it), and a stale ab_default.json would become the base of this call's ratios
# (GPU_SH_KEEP_RUN=1 keeps it, for a follow-up call that adds to the same folder)
[ "${GPU_SH_KEEP_RUN:-0}" = 1 ] || rm -rf "$run_dir"
mkdir -p "$run_dir"
stages=${*:-build test sanitizer bench ab python peers}
build=${BUILD_DIR:-/tmp/pagedattn-build}
budget=${GPU_SH_BUDGET:-540}  # seconds; later stages are skipped (and say so) past this
t_start=$(date +%s)
log() { echo "== $(date -u +%H:%M:%S) (+$(( $(date +%s) - t_start ))s) $*"; }
has() { [[ " $stages " == *" $1 "* ]]; }
left() { echo $(( budget - ($(date +%s) - t_start) )); }
# results.tgz must stay under the device tool's 16 MiB per file: run s9b lost its whole archive (test log,
# A/B table) to the raw timeline logs. Over 15 MiB, the largest logs are cut to their first and last
# 256 KiB (marked in place) until it fits.
pack() {
  local tgz=$OUT/results.tgz f
  clocks_summary
  tar czf "$tgz" -C "$OUT" run 2>/dev/null
  while [ "$(stat -c %s "$tgz")" -gt $((15 << 20)) ]; do
    f=$(find "$run_dir" -type f -size +1M -printf '%s %p\n' | sort -rn | awk 'NR == 1 {print $2}')
    [ -n "$f" ] || break
    { head -c 262144 "$f"; printf '\n[... cut by gpu.sh pack(): results.tgz over 15 MiB ...]\n'; tail -c 262144 "$f"; } > "$f.cut"
    mv "$f.cut" "$f"
    tar czf "$tgz" -C "$OUT" run 2>/dev/null
  done
  # The device tool returns at most 8 files from $OUT: a run folder of many logs left results.tgz out
  # by count (run abd). On the device the folder moves out of $OUT once packed (to GPU_SH_RUN_OUT,
  # default /tmp/gpu-sh-run), so results.tgz, device.txt and bench.log come back; GPU_SH_KEEP_RUN=1
  # keeps it in place (and so does a local run, OUT=gpu-out).
  if [ "${GPU_SH_KEEP_RUN:-0}" != 1 ] && [ "$OUT" != "$root/gpu-out" ] && [ -s "$tgz" ]; then
    rm -rf "${GPU_SH_RUN_OUT:-/tmp/gpu-sh-run}" && mv "$run_dir" "${GPU_SH_RUN_OUT:-/tmp/gpu-sh-run}"
  fi
}
trap pack EXIT

# the copy of the tree on the GPU machine has no .git: take the commit from .commit (carried)
# NOTE: .commit first: the GPU machine's copy may carry a stale .git
if [ -z "${PAGEDATTN_COMMIT:-}" ]; then
  if [ -f "$root/.commit" ]; then
    PAGEDATTN_COMMIT=$(cat "$root/.commit")
  elif git -C "$root" rev-parse --short HEAD >/dev/null 2>&1; then
    PAGEDATTN_COMMIT="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo +dirty)"
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
} | tee "$OUT/device.txt" "$run_dir/device.txt"

# The SM clock, power and clock-event reasons every 100 ms through the call (run/clocks.csv; GPU_SH_CLOCKS=0:
# none). The H200 here runs at its 700 W cap under u8 and fp8 rows at 128k: the software power cap
# (reason 0x4) took the SM clock from 1980 to 1560-1965 MHz, and a row's time grows with how long the GPU
# has been busy before and during it (run pw1: u8 128k T = 8 at 828-840 us over 10 replays, 896-921 over
# 300; the same row measured again in one process up to 1.17x slower). The summary at the end says how far
# the clock fell.
clock_pid=
if [ "${GPU_SH_CLOCKS:-1}" = 1 ] && command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms 100 > "$run_dir/clocks.csv" 2>/dev/null &
  clock_pid=$!
fi
clocks_summary() {
  [ -n "$clock_pid" ] || return 0
  kill "$clock_pid" 2>/dev/null
  clock_pid=
  # busy samples only (SM clock above 1000 MHz: the idle clock is 345 MHz); reasons are a hex bitmask,
  # 0x4 the software power cap (POSIX awk and sort: the GPU machine's awk may be mawk)
  awk -F', ' '{split($2, c, " "); split($3, w, " "); r = substr($5, length($5), 1)}
    c[1] > 1000 {cap += (index("4567cdefCDEF", r) > 0); print c[1], w[1], cap}' "$run_dir/clocks.csv" |
    sort -n | awk '{c[NR] = $1; if ($2 > pw) pw = $2; if ($3 > cap) cap = $3}
      END {if (NR) printf "clocks (busy samples %d): SM %d-%d MHz, median %d; software power cap in %d; peak %.0f W\n",
           NR, c[1], c[NR], c[int((NR + 1) / 2)], cap, pw}' | tee "$run_dir/clocks_summary.txt"
}

# Binaries built on the CPU machine (bench/prebuild.sh; carried .prebuilt and .commit): the build stage
# and the abref refs take them instead of compiling here (a build took 80-110 s of each call's device
# time). PREBUILT=0 builds from source anyway.
pbdir=
if [ "${PREBUILT:-1}" = 1 ] && [ -f "$root/.prebuilt/bin.tar.xz" ]; then
  pbdir=${GPU_SH_PREBUILT_DIR:-/tmp/pagedattn-prebuilt}
  rm -rf "$pbdir" && mkdir -p "$pbdir" && tar xJf "$root/.prebuilt/bin.tar.xz" -C "$pbdir" ||
    { echo "prebuilt: .prebuilt/bin.tar.xz does not unpack"; exit 1; }
  if [ "$(cat "$pbdir/main/.commit" 2>/dev/null)" != "$PAGEDATTN_COMMIT" ]; then
    echo "prebuilt: the binaries are of $(cat "$pbdir/main/.commit" 2>/dev/null || echo '?'), the tree is" \
      "$PAGEDATTN_COMMIT: run bench/prebuild.sh again (it writes .commit), or PREBUILT=0"
    exit 1
  fi
  # each binary's sources as the carried tree has them (a tree edited after bench/prebuild.sh keeps its id)
  for d in "$pbdir"/*/; do
    (cd "$root" && sha1sum -c --quiet "$d/sources.sha1" > /dev/null 2>&1) || {
      echo "prebuilt: $(basename "$d")'s sources differ from the carried tree's (or are missing): run" \
        "bench/prebuild.sh again, or PREBUILT=0"
      (cd "$root" && sha1sum -c --quiet "$d/sources.sha1" 2>&1 | head -5)
      exit 1
    }
  done
  # the refs where the abref stage keeps the ones it builds ($build-ref-<commit>, $build = $pbdir/main),
  # marked built, so that every later use (AB_REF_AGAIN, bench/sweep_ab.sh) finds them
  for d in "$pbdir"/ref-*/; do
    [ -d "$d" ] || continue
    n=$(basename "$d")
    mv "$d" "$pbdir/main-$n" && touch "$run_dir/.built_$n"
  done
  echo "prebuilt binaries of $PAGEDATTN_COMMIT: $(cd "$pbdir" && echo *)" | tee -a "$run_dir/device.txt" "$OUT/device.txt"
  if has cputest || [ "${BUILD_PYTHON:-0}" = 1 ] || [ -n "${BUILD_CUDA_FLAGS:-}" ]; then
    echo "prebuilt: cputest, BUILD_PYTHON and BUILD_CUDA_FLAGS need a build tree here (PREBUILT=0)"
    exit 1
  fi
fi
prebuilt_ref() { [ -n "$pbdir" ] && [ -x "$pbdir/main-ref-$1/pagedattn" ]; }
have_main() { has build || [ -n "$pbdir" ]; }

status=0
prefix=()
[ -d "$root/.deps" ] && prefix=(-DCMAKE_PREFIX_PATH="$root/.deps")
# configure DIR ARCHS [cmake args...]: a Release CUDA build tree (of CONFIGURE_SRC, default the working tree)
configure() {
  local dir=$1 archs=$2
  shift 2
  cmake -S "${CONFIGURE_SRC:-$root}" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$archs" "${prefix[@]}" "$@"
}
# ab_bench BINARY TAG [VAR=V...]: the A/B rows (seed scenario, f16/u8, T = 1, 3, 8) -> ab_TAG.json
# (AB_BATCH=1 adds the batch rows, 32 x 8k at T=1/4 (AB_BATCH_TOKENS), to each: ab_TAG.batch.json, same table; AB_ARGS adds
# bench arguments to the seed rows, e.g. AB_ARGS="--block-size 16 --context 32768"; AB_BATCH_ARGS to the
# batch rows, e.g. AB_BATCH_ARGS="--partition 1024")
# AB_SCENARIO=prefill: the prefill scenario's rows instead (bf16 prefill from zero, 8k and 32k tokens, two
# shapes; keyed by shape in the table), for kernels only prefill chunks run (the Hopper wg_kernel);
# AB_SCENARIO=sweep: issue 21's sweep (D x G x T, chains and trees, 4 layers; keyed by D, G and tree too).
# AB_KV: the KV precisions of the seed, sweep and batch rows (default f16,u8)
ab_bench() {
  local bin=$1 tag=$2
  shift 2
  local rows=(--scenario seed --kv "${AB_KV:-f16,u8}" --tokens "${AB_TOKENS:-1,3,8}")
  [ "${AB_SCENARIO:-seed}" = prefill ] && rows=(--scenario prefill)
  [ "${AB_SCENARIO:-seed}" = sweep ] && rows=(--scenario sweep --kv "${AB_KV:-f16,u8}" --fill random --layers 4)
  env "$@" timeout 120 "$bin" bench --backend cuda "${rows[@]}" ${AB_ARGS:-} \
    --json "$run_dir/ab_$tag.json" > "$run_dir/ab_$tag.log" 2>&1 || return 1
  [ "${AB_BATCH:-0}" = 1 ] || return 0
  env "$@" timeout 120 "$bin" bench --backend cuda --scenario seed --batch 32 --context 8192 --tokens "${AB_BATCH_TOKENS:-1,4}" \
    --kv "${AB_KV:-f16,u8}" --fill random ${AB_BATCH_ARGS:-} --json "$run_dir/ab_$tag.batch.json" >> "$run_dir/ab_$tag.log" 2>&1
}

# ab_default: the default build's A/B rows, once per call (the base of every ratio)
# (default_bin: the default build's CLI, the main tree's unless abref built it in a tree of its own)
default_bin=$build/pagedattn
if [ -n "$pbdir" ]; then build=$pbdir/main; default_bin=$build/pagedattn; fi
ab_default() {
  [ -s "$run_dir/ab_default.json" ] && return
  [ -n "$default_bin" ] || return
  log "A/B: default"
  ab_bench "$default_bin" default || status=1
}
# ab_variant DIR TAG [cmake args...]: a 90a-only build of the CLI in DIR (of CONFIGURE_SRC, default the
# working tree; 40-70 s on the GPU machine), then its A/B rows as TAG (~15 s)
ab_variant() {
  ab_build "$@" && ab_bench "$1/pagedattn" "$2" || status=1
}
# ab_build DIR TAG [cmake args...]: the build half of ab_variant (log run/build_TAG.log; its tail on failure;
# run/.built_TAG marks a success in this call, so a binary an earlier call left in DIR is never taken for it)
ab_build() {
  local dir=$1 tag=$2
  shift 2
  rm -f "$run_dir/.built_$tag"
  # the build's own limit: what is left of the budget, but at least 60 s (a negative or zero limit is
  # not a limit to timeout(1): run s8c lost its ref build to "timeout: invalid option -- '3'")
  local limit=$(( $(left) - 30 ))
  [ "$limit" -lt 60 ] && limit=60
  { configure "$dir" 90a-real -DPAGEDATTN_BUILD_TESTS=OFF "$@" &&
    timeout "$limit" ninja -C "$dir" -j "${AB_JOBS:-$(nproc)}" pagedattn; } > "$run_dir/build_$tag.log" 2>&1 ||
    { tail -20 "$run_dir/build_$tag.log"; return 1; }
  touch "$run_dir/.built_$tag"
}

if has build && [ -n "$pbdir" ]; then
  log "build: prebuilt (bench/prebuild.sh)"
elif has build; then
  log "build"
  # BUILD_CUDA_FLAGS: a build-time experiment in the main build (its GPU tests and sanitizer run then
  # test it; the A/B stages are skipped, the python stage builds without it); always passed, so a
  # build tree kept from an earlier call does not keep an earlier experiment's flags
  # BUILD_PYTHON=1: the Python module in the same tree (no second compile of the kernels), assembled as
  # a package under $build/py; the python stage then tests that instead of a pip-built wheel
  py_args=()
  [ "${BUILD_PYTHON:-0}" = 1 ] && py_args=(-DPAGEDATTN_BUILD_PYTHON=ON "-DPython_EXECUTABLE=$(command -v python3)")
  if ! { configure "$build" "${CUDA_ARCHS:-90a-real;80-real}" "-DCMAKE_CUDA_FLAGS=${BUILD_CUDA_FLAGS:-}" "${py_args[@]}" &&
         ninja -C "$build" -j "$(nproc)" ${BUILD_TARGETS:-}; } > "$run_dir/build.log" 2>&1; then
    tail -40 "$run_dir/build.log"
    exit 1
  fi
  if [ "${BUILD_PYTHON:-0}" = 1 ]; then
    rm -rf "$build/py" && mkdir -p "$build/py" && cp -r "$root/python/pagedattn" "$build/py/" &&
      cp "$build"/_C*.so "$build/py/pagedattn/" || { echo "BUILD_PYTHON: no module to assemble"; status=1; }
  fi
  grep -E "spill|local memory" "$run_dir/build.log" | grep -v " 0 bytes" | head -5
fi

if has test; then
  # The whole suite (52 tests) takes more than one call's ~440 s since the fp8 and head-size suites (run
  # fx8t needed two calls): split it with googletest's own sharding, GTEST_TOTAL_SHARDS=2 and
  # GTEST_SHARD_INDEX=0 / 1 in two calls (the variables reach test_cuda from this script's environment).
  log "GPU tests${GTEST_TOTAL_SHARDS:+ (shard ${GTEST_SHARD_INDEX:-0} of $GTEST_TOTAL_SHARDS)}"
  timeout "${TEST_TIMEOUT:-360}" "$build/tests/test_cuda" --gtest_filter="${TEST_FILTER:-*}" > "$run_dir/test_cuda.log" 2>&1 ||
    { status=1; echo "test_cuda failed or timed out"; tail -5 "$run_dir/test_cuda.log"; }
  grep -E "^\[ *(PASSED|FAILED|OK|SKIPPED) |worst" "$run_dir/test_cuda.log" | head -40
fi
if has cputest; then
  log "CPU tests (ctest -L cpu)"
  (cd "$build" && ctest -L cpu -j 8 --timeout 120 > "$run_dir/ctest_cpu.log" 2>&1) || status=1
  tail -3 "$run_dir/ctest_cpu.log"
fi
if has sanitizer; then
  # SANITIZER_TOOLS (default memcheck): any of memcheck racecheck synccheck initcheck, each over the same
  # subset (SANITIZER_CASES cases per suite, default 12; racecheck is the slowest: give it fewer);
  # logs run/sanitizer.log (memcheck) and run/sanitizer_<tool>.log; SANITIZER_ARGS: more options for every
  # tool (synccheck tracks too few raw mbarriers per CTA for the key-split producer forms:
  # "--num-cuda-barriers 1024", run wp3)
  for tool in ${SANITIZER_TOOLS:-memcheck}; do
    log "compute-sanitizer $tool subset"
    slog=$run_dir/sanitizer.log
    [ "$tool" = memcheck ] || slog=$run_dir/sanitizer_$tool.log
    PAGEDATTN_GPU_CASES=${SANITIZER_CASES:-12} timeout "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool "$tool" \
      ${SANITIZER_ARGS:-} --error-exitcode 9 "$build/tests/test_cuda" \
      --gtest_filter="${SANITIZER_FILTER:-Cuda.FewQueryRandom:Cuda.TileAndMixedRandom:Cuda.GraphReplayMatchesDirectRun:Cuda.PrefillTwoRowTilesPerWarpRandom:Cuda.HopperPrefillRandom:Cuda.FewQuerySplitRandom:Cuda.HopperU8Random}" \
      > "$slog" 2>&1
    echo "sanitizer $tool exit code: $?"
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$slog" | head -5
  done
fi

if has bench; then
  log "benchmark: seed scenario"
  timeout 300 "$build/pagedattn" bench --backend cuda --scenario seed ${BENCH_ARGS:-} --json "$run_dir/bench.json" \
    > "$run_dir/bench.log" 2>&1 || status=1
  log "benchmark: batch of 32 x 8k at T=1,4"
  timeout 120 "$build/pagedattn" bench --backend cuda --scenario seed --batch 32 --context 8192 --tokens 1,4 \
    --kv f16,u8 --fill random --json "$run_dir/bench_batch.json" > "$run_dir/bench_batch.log" 2>&1 || status=1
fi

if [ -n "${BUILD_CUDA_FLAGS:-}" ] && { has ab || has abbuild || has abref; }; then
  # the main build carries an experiment: its rows would stand in for the default's in every ratio
  log "ab / abbuild / abref skipped: the main build has BUILD_CUDA_FLAGS=$BUILD_CUDA_FLAGS (use it for build + test only)"
  stages=$(echo " $stages " | sed 's/ abref / /; s/ abbuild / /; s/ ab / /')
fi

if has ab; then
  # same-run ratios of the run-time switches (seed rows f16/u8, T = 1, 3, 8): the default, then each
  # experiment on (AB_CONFIGS overrides the list: space-separated configs, each VAR=V[,VAR=V...];
  # measured before: PAGEDATTN_EARLY_READS=0, PAGEDATTN_MERGE_SPLIT=1 (run s3d))
  for cfg in ${AB_CONFIGS:-default PAGEDATTN_WG_SPLIT=2}; do
    tag=$(echo "$cfg" | tr ',=' '_-')
    if [ "$(left)" -lt "${AB_MIN_LEFT:-40}" ]; then log "A/B $cfg skipped: $(left)s of the ${budget}s budget left"; continue; fi
    log "A/B: $cfg"
    if [ "$cfg" = default ]; then envs=(); else IFS=, read -ra envs <<< "$cfg"; fi
    ab_bench "$build/pagedattn" "$tag" "${envs[@]}" || status=1
  done
fi

if has abbuild; then
  # build-time experiments (the macro changes the compiled kernels, so a second build of the 90a code):
  # AB_BUILDS is a space-separated list of name:CUDA_FLAGS (one flag per build: the list splits on spaces);
  # each row set lands in the ab table as build-<name>
  ab_default
  # measured: COPY_NOINLINE (run s6a: 1.02-1.13x slower, removed); DEEP_RING (run s7a:
  # 1.00-1.10x slower, removed); Q_FIRST (run s7a: 0.95-1.00x, made the default, macro removed);
  # Q_ASYNC (run s7b: 1.00-1.17x slower, removed); COL_SPLIT (run s7f: 0.98-1.06x, removed)
  for spec in ${AB_BUILDS:-}; do
    [[ $spec == *:* ]] || { log "A/B build '$spec' skipped: not name:CUDA_FLAGS"; continue; }
    name=${spec%%:*} flags=${spec#*:}
    if [ "$(left)" -lt "${AB_BUILD_MIN_LEFT:-120}" ]; then log "A/B build $name skipped: $(left)s of the ${budget}s budget left"; continue; fi
    log "A/B build: $name ($flags)"
    ab_variant "$build-$name" "build-$name" -DCMAKE_CUDA_FLAGS="$flags"
  done
fi

if has abref; then
  # the same benchmark rows from earlier commits' sources, each built here in the same call (same-run
  # ratios across commits). Here, before the call: bench/prepare_abref.sh COMMIT..., then carry .abref.
  # The refs build concurrently (a build's wall time is its largest translation unit, one head size's
  # kernels; six refs took 116 s, run bi1), then run in turn; AB_REF_SERIAL=1 builds each before its rows.
  # Without the build stage the default (the working tree's CLI) is built with them, in its own tree
  # ($build-cli: the main tree keeps its configuration, tests and flags, for later `build test` calls).
  # A build that fails is reported (its log run/build_TAG.log) and its rows skipped, never replaced by a
  # binary an earlier call left in the same tree.
  refs=()
  for src in "$root"/.abref/*/; do
    [ -f "$src/.commit" ] || { log "A/B ref skipped: no .abref/*/.commit (bench/prepare_abref.sh)"; continue; }
    refs+=("$src")
  done
  built() { [ -f "$run_dir/.built_$1" ]; }
  # build_job DIR TAG [SRC]: ab_build in the background
  pids=()
  build_job() {
    ( CONFIGURE_SRC=${3:-} ab_build "$1" "$2" ) > /dev/null 2>&1 &
    pids+=($!)
  }
  parallel=0
  [ "${AB_REF_SERIAL:-0}" != 1 ] && [ "$(left)" -ge "${AB_BUILD_MIN_LEFT:-120}" ] && parallel=1
  to_build=0
  for src in "${refs[@]}"; do prebuilt_ref "$(cat "$src/.commit")" || to_build=$((to_build + 1)); done
  if [ "$parallel" = 1 ] || ! have_main; then
    n=$to_build
    [ "$parallel" = 1 ] || n=0
    have_main || n=$((n + 1))
    AB_JOBS=$(( 2 * $(nproc) / (n > 0 ? n : 1) ))
    [ "$AB_JOBS" -lt 2 ] && AB_JOBS=2
    export AB_JOBS
    log "A/B: building at once: $([ "$parallel" = 1 ] && echo "$to_build refs; ")$(have_main || echo "the default; ")(ninja -j $AB_JOBS each)"
    if ! have_main; then
      build_job "$build-cli" default
    fi
    if [ "$parallel" = 1 ]; then
      for src in "${refs[@]}"; do
        prebuilt_ref "$(cat "$src/.commit")" || build_job "$build-ref-$(cat "$src/.commit")" "ref-$(cat "$src/.commit")" "$src"
      done
    fi
    # NOTE: only the build jobs: a bare `wait` also waits for the clock logger, which never ends
    [ "${#pids[@]}" -eq 0 ] || wait "${pids[@]}"
    unset AB_JOBS
    if ! have_main; then
      if built default; then
        default_bin=$build-cli/pagedattn
      else
        log "A/B: the default build failed (run/build_default.log): no rows"
        default_bin=
        status=1
      fi
    fi
  fi
  ab_default
  for src in "${refs[@]}"; do
    ref=$(cat "$src/.commit")
    if [ "$parallel" = 1 ] || prebuilt_ref "$ref"; then  # (prebuilt refs are unpacked as built ones)
      if ! built "ref-$ref"; then log "A/B ref $ref: build failed (run/build_ref-$ref.log)"; status=1; continue; fi
      if [ "$(left)" -lt "${AB_MIN_LEFT:-40}" ]; then log "A/B ref $ref skipped: $(left)s of the ${budget}s budget left"; continue; fi
      log "A/B ref: $ref (built)"
      ab_bench "$build-ref-$ref/pagedattn" "ref-$ref" || status=1
      continue
    fi
    if [ "$(left)" -lt "${AB_BUILD_MIN_LEFT:-120}" ]; then log "A/B ref $ref skipped: $(left)s of the ${budget}s budget left"; continue; fi
    log "A/B ref: $ref"
    CONFIGURE_SRC=$src ab_variant "$build-ref-$ref" "ref-$ref"
  done
  # AB_REF_AGAIN=N: N more passes, each over the default and then every built ref (columns default_passP,
  # ref-X_passP, P = 2..N+1), for rows that drift more than the differences sought (u8 128k T = 8:
  # 831-948 us over builds of the same few commits, run bi1; the row is power-bound, run pw1). The
  # table adds each build's median over its passes.
  for ((pass = 2; pass <= ${AB_REF_AGAIN:-0} + 1; ++pass)); do
    if [ -n "$default_bin" ] && [ "$(left)" -ge "${AB_MIN_LEFT:-40}" ]; then
      log "A/B: default pass $pass"
      ab_bench "$default_bin" "default_pass$pass" || status=1
    fi
    for src in "${refs[@]}"; do
      ref=$(cat "$src/.commit")
      built "ref-$ref" && [ "$(left)" -ge "${AB_MIN_LEFT:-40}" ] || continue
      log "A/B ref: $ref pass $pass"
      ab_bench "$build-ref-$ref/pagedattn" "ref-${ref}_pass$pass" || status=1
    done
  done
fi

# The default rows once more, last: the drift of identical code across the call (the noise floor of
# every ratio in the table; u8 rows spread 2-5% between runs of the same code, run s9a). AB_DRIFT=0 skips.
if { has ab || has abbuild || has abref; } && [ "${AB_DRIFT:-1}" = 1 ] && [ -s "$run_dir/ab_default.json" ]; then
  if [ "$(left)" -ge "${AB_MIN_LEFT:-40}" ]; then
    log "A/B: default again (drift)"
    ab_bench "$default_bin" default_again || status=1
  else
    log "A/B: default again skipped: $(left)s of the ${budget}s budget left"
  fi
fi

if has ab || has abbuild || has abref; then
  python3 - "$run_dir" <<'PY' | tee "$run_dir/ab_table.txt"
import json, sys, glob, os
d = sys.argv[1]
runs = {}
for f in sorted(glob.glob(d + "/ab_*.json")):
    name = os.path.basename(f)[3:-5]
    batch = name.endswith(".batch")  # AB_BATCH rows of the same build
    name = name[:-6] if batch else name
    try:
        j = json.load(open(f))
        runs.setdefault(name, []).append(j)
    except (OSError, ValueError) as e:  # a run that failed or timed out leaves an empty file
        print("skipped %s: %s" % (f, e))
def rows(js):  # seed rows by (kv, context, T, seqs); prefill rows (AB_SCENARIO=prefill) by shape for context;
    # sweep rows (AB_SCENARIO=sweep) also by D, G and tree: "kv D=.. G=.. [tree]"
    def kv(r):
        if os.environ.get("AB_SCENARIO", "seed") != "sweep":
            return r.get("kv")
        return "%s D=%s G=%s%s" % (r.get("kv"), r.get("head_size"), r.get("group"), " tree" if r.get("tree") else "")
    out = {}
    for j in js:
        for r in j.get("rows", []) + j.get("prefill", {}).get("rows", []):
            out[(kv(r), r.get("context", r.get("shape")), r.get("T"), r.get("seqs", 1))] = r.get("us")
    return out
tabs = {k: rows(v) for k, v in runs.items()}
base = tabs.get("default", {})
names = ["default"] + [k for k in tabs if k not in ("default", "default_again")] + \
    [k for k in tabs if k == "default_again"]
print("kv ctx T seqs " + " ".join(names) + "   (us per 8 layers, prefill rows us per call; ratios to default in brackets)")
for key in sorted(base, key=lambda k: (k[3] or 1, str(k[0]), (0, k[1], "") if isinstance(k[1], int) else (1, 0, str(k[1])), k[2] or 0)):
    cells = []
    for n in names:
        v = tabs[n].get(key)
        if v is None:
            cells.append("-")
        elif n == "default" or not base.get(key):
            cells.append("%.1f" % v)
        else:
            cells.append("%.1f [%.3f]" % (v, v / base[key]))
    print(key[0], key[1], key[2], key[3], " | ".join(cells))
# With several passes (AB_REF_AGAIN), each build's median over its passes (its columns X, X_passP; the
# drift column default_again counts as one of the default's)
import re, statistics
groups = {}
for n in names:
    groups.setdefault(re.sub(r"_(again|pass)\d*$", "", n), []).append(n)
if any(len(v) > 1 for g, v in groups.items() if g != "default"):
    gnames = list(groups)
    print("medians over passes (passes per build: %s); ratios to default's median" %
          ", ".join("%s %d" % (g, len(groups[g])) for g in gnames))
    print("kv ctx T seqs " + " ".join(gnames))
    def ctx_key(c):
        return (0, c, "") if isinstance(c, int) else (1, 0, str(c))
    for key in sorted(base, key=lambda k: (k[3] or 1, str(k[0]), ctx_key(k[1]), k[2] or 0)):
        med = {}
        for g in gnames:
            vals = [tabs[n][key] for n in groups[g] if tabs[n].get(key)]
            med[g] = statistics.median(vals) if vals else None
        b = med.get("default")
        cells = []
        for g in gnames:
            v = med[g]
            cells.append("-" if v is None else "%.1f" % v if g == "default" or not b else "%.1f [%.3f]" % (v, v / b))
        print(key[0], key[1], key[2], key[3], " | ".join(cells))
PY
fi

if has python && [ "$(left)" -gt 120 ]; then
  log "Python package (pip install --no-build-isolation) and its GPU tests (test_gpu.py, test_context_parallel.py, test_torch.py)"
  # the module from the main build (BUILD_PYTHON=1), else a pip-built wheel
  pyt=/tmp/pagedattn-py
  if [ "${BUILD_PYTHON:-0}" = 1 ] && [ -d "$build/py/pagedattn" ]; then
    pyt=$build/py
  elif ! PAGEDATTN_CUDA=ON timeout $(( $(left) - 60 )) python3 -m pip install -q --no-build-isolation --no-deps --target "$pyt" \
       -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90a-real -C build-dir=/tmp/pagedattn-wheel "$root" \
       > "$run_dir/python_build.log" 2>&1; then
    pyt=
    status=1
    echo "python package build failed"; tail -20 "$run_dir/python_build.log"
  fi
  if [ -n "$pyt" ]; then
    (cd "$root/tests/python" && PYTHONPATH="$pyt" timeout $(( $(left) - 40 )) python3 -m pytest test_gpu.py test_context_parallel.py test_torch.py -q -rA -s \
       -p no:cacheprovider > "$run_dir/python_gpu.log" 2>&1) || status=1
    grep -E "WORST|passed|failed|error" "$run_dir/python_gpu.log" | tail -6
  fi
elif has python; then
  log "Python GPU test skipped: $(left)s of the ${budget}s budget left"
fi

if has peers && [ "$(left)" -gt 90 ]; then
  log "peers"
  extra=()
  [ -f "$run_dir/bench_batch.json" ] && extra=("$run_dir/bench_batch.json")
  # leave ~60 s for the prefill/chunk/mixed scenarios after the peers
  timeout $(( $(left) - 50 )) python3 "$root/bench/peers/run_peers.py" --json "$run_dir/peers.json" \
    --pagedattn-json "$run_dir/bench.json" "${extra[@]}" --max-seconds $(( $(left) - 65 )) \
    --flashinfer-compile-seconds 120 > "$run_dir/peers.log" 2>&1 || status=1
  cp /tmp/pagedattn-flashinfer-jit/warmup-*.log "$run_dir/" 2>/dev/null
  python3 "$root/bench/peers/plot.py" --json "$run_dir/peers.json" --out-dir "$run_dir/peers" > "$run_dir/plot.log" 2>&1 || status=1
  tail -25 "$run_dir/peers.log"
elif has peers; then
  log "peers skipped: $(left)s of the ${budget}s budget left"
fi

if has prefill; then
  for cfg in ${PREFILL_CONFIGS:-default PAGEDATTN_WGMMA=64 PAGEDATTN_WGMMA=0}; do
    if [ "$cfg" = default ]; then envs=(); else envs=("$cfg"); fi
    log "benchmark: prefill ($cfg)"
    env "${envs[@]}" timeout 200 "$build/pagedattn" bench --backend cuda --scenario prefill \
      --json "$run_dir/prefill_${cfg//=/-}.json" > "$run_dir/prefill_${cfg//=/-}.log" 2>&1 || status=1
    tail -8 "$run_dir/prefill_${cfg//=/-}.log"
  done
fi

if has bench; then
  for sc in prefill chunk mixed; do
    if [ "$(left)" -gt 25 ]; then
      log "benchmark: $sc"
      timeout $(( $(left) - 10 )) "$build/pagedattn" bench --backend cuda --scenario "$sc" \
        --json "$run_dir/bench_$sc.json" > "$run_dir/bench_$sc.log" 2>&1 || status=1
    else
      log "benchmark $sc skipped: $(left)s of the ${budget}s budget left"
    fi
  done
  # prefill tiles: 64-row chunks everywhere (the default takes 128-row chunks at D <= 128), for a ratio
  for sc in prefill; do
    if [ "$(left)" -gt 25 ]; then
      log "benchmark: $sc with PAGEDATTN_WIDE_PREFILL=0"
      PAGEDATTN_WIDE_PREFILL=0 timeout $(( $(left) - 10 )) "$build/pagedattn" bench --backend cuda --scenario "$sc" \
        --json "$run_dir/bench_${sc}_narrow.json" > "$run_dir/bench_${sc}_narrow.log" 2>&1 || status=1
    fi
    # the mma.sync 128-row variant (two row tiles per warp) in place of the Hopper kernel, for a ratio
    if [ "$(left)" -gt 25 ]; then
      log "benchmark: $sc with PAGEDATTN_WGMMA=0"
      PAGEDATTN_WGMMA=0 timeout $(( $(left) - 10 )) "$build/pagedattn" bench --backend cuda --scenario "$sc" \
        --json "$run_dir/bench_${sc}_mma.json" > "$run_dir/bench_${sc}_mma.log" 2>&1 || status=1
    fi
  done
  # u8 caches: prefill from zero at 8k (f16 queries), then the u8 rows of every long-query scenario on
  # mma.sync (PAGEDATTN_WGMMA_U8=0) for a ratio to the Hopper kernel, the default
  if [ "$(left)" -gt 25 ]; then
    log "benchmark: prefill with u8 caches"
    timeout $(( $(left) - 10 )) "$build/pagedattn" bench --backend cuda --scenario prefill --prefill-kv u8 \
      --prefill-query f16 --prefill-context 8192 --json "$run_dir/bench_prefill_u8.json" \
      > "$run_dir/bench_prefill_u8.log" 2>&1 || status=1
  fi
  if [ "$(left)" -gt 25 ]; then
    log "benchmark: prefill with u8 caches, PAGEDATTN_WGMMA_U8=0"
    PAGEDATTN_WGMMA_U8=0 timeout $(( $(left) - 10 )) "$build/pagedattn" bench --backend cuda --scenario prefill \
      --prefill-kv u8 --prefill-query f16 --prefill-context 8192 --json "$run_dir/bench_prefill_u8mma.json" \
      > "$run_dir/bench_prefill_u8mma.log" 2>&1 || status=1
  fi
  for sc in chunk mixed; do
    if [ "$(left)" -gt 25 ]; then
      log "benchmark: $sc with PAGEDATTN_WGMMA_U8=0"
      PAGEDATTN_WGMMA_U8=0 timeout $(( $(left) - 10 )) "$build/pagedattn" bench --backend cuda --scenario "$sc" \
        --kv u8 --json "$run_dir/bench_${sc}_u8mma.json" > "$run_dir/bench_${sc}_u8mma.log" 2>&1 || status=1
    fi
  done
  log "summary"
  cat "$run_dir/bench.log"
  for sc in batch prefill chunk mixed prefill_narrow prefill_mma prefill_u8 prefill_u8mma chunk_u8mma mixed_u8mma; do
    [ -f "$run_dir/bench_$sc.log" ] && tail -14 "$run_dir/bench_$sc.log"
  done
fi
if has extra; then
  # GPU_SH_EXTRA: a shell command run last, in the tree's root, with $build and $run_dir exported (e.g. a
  # variant's `pagedattn check`); its output is run/extra.log, so it comes back in results.tgz
  log "extra: ${GPU_SH_EXTRA:-(GPU_SH_EXTRA is empty)}"
  (cd "$root" && build=$build run_dir=$run_dir timeout "$(( $(left) > 30 ? $(left) : 30 ))" bash -c "${GPU_SH_EXTRA:-true}") \
    > "$run_dir/extra.log" 2>&1 || { status=1; echo "extra command failed or timed out"; }
  tail -20 "$run_dir/extra.log"
fi
cp "$run_dir/bench.log" "$OUT/bench.log" 2>/dev/null
exit $status
