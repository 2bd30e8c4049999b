#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/fuzz_plan.cpp (clang, -fsanitize=fuzzer,address,undefined; the
# cpu-only library instrumented too) and runs it:
#   tests/fuzz/run.sh [SECONDS (default 60)] [more libFuzzer options]
# Inputs: the committed seeds tests/fuzz/seeds.b64 (one input a line, base64; unpacked into
# $FUZZ_BUILD_DIR/seeds/, read only) and the working corpus $FUZZ_BUILD_DIR/corpus/ (new inputs land
# there; it persists between runs). To refresh the seeds from a longer run:
#   fuzz_plan -merge=1 NEW_DIR $FUZZ_BUILD_DIR/corpus && for f in NEW_DIR/*; do base64 -w0 "$f"; echo; done \
#     | sort > tests/fuzz/seeds.b64
# A crash, leak, timeout or out-of-memory exits non-zero and leaves its input in
# $FUZZ_BUILD_DIR/artifacts/; replay one with
#   FUZZ_PLAN_DUMP=1 $FUZZ_BUILD_DIR/fuzz_plan FILE       (prints the decoded call, then the report)
# As root on Debian it installs clang and libclang-rt-<version>-dev (libFuzzer) when they are missing.
# Environment: FUZZ_BUILD_DIR (default $BUILD_DIR/fuzz, BUILD_DIR default build), JOBS, FUZZ_OPTIONAL=1
# (no usable clang/libFuzzer: say so and exit 0, as scripts/test.sh runs it). Inputs of bugs the fuzzer
# found (e.g. the cpu plan's partition-bound overflow, fixed) are among the seeds: each run replays them.
set -euo pipefail
source "$(dirname "$0")/../../scripts/setup.sh"
secs="${1:-60}"
shift || true
dir="${FUZZ_BUILD_DIR:-$BUILD_DIR/fuzz}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac

probe_libfuzzer() {  # true when clang++ links a libFuzzer target with the sanitizers
  local tmp
  tmp="$(mktemp -d)"
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$tmp/p.cpp"
  clang++ -fsanitize=fuzzer,address,undefined "$tmp/p.cpp" -o "$tmp/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$tmp"
  return $rc
}

command -v clang++ >/dev/null 2>&1 || pagedattn_apt_install clang || true
command -v clang++ >/dev/null 2>&1 || pagedattn_unavailable "${FUZZ_OPTIONAL:-0}" tests/fuzz/run.sh "no clang++ (apt-get install clang libclang-rt-<version>-dev)"
if ! probe_libfuzzer; then
  major="$(clang++ -dumpversion | cut -d. -f1)"
  pagedattn_apt_install "libclang-rt-$major-dev" || true
  probe_libfuzzer || pagedattn_unavailable "${FUZZ_OPTIONAL:-0}" tests/fuzz/run.sh "clang++ cannot link -fsanitize=fuzzer (apt-get install libclang-rt-$major-dev)"
fi

say "fuzz target: build into $dir (clang++ $(clang++ -dumpversion))"
run cmake -S "$PAGEDATTN_ROOT/tests/fuzz" -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER=clang++ --log-level=WARNING
run cmake --build "$dir" -j "$JOBS"
mkdir -p "$dir/corpus" "$dir/artifacts"
rm -rf "$dir/seeds" && mkdir -p "$dir/seeds"
n=0
while IFS= read -r line; do
  [ -n "$line" ] || continue
  n=$((n + 1))
  printf '%s' "$line" | base64 -d > "$dir/seeds/seed-$n"
done < "$PAGEDATTN_ROOT/tests/fuzz/seeds.b64"

say "fuzz_plan for $secs s (validate() and plan() on the cpu backend; log: $dir/fuzz.log)"
set +e
run "$dir/fuzz_plan" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=4096 -timeout=30 \
  -artifact_prefix="$dir/artifacts/" "$@" "$dir/corpus" "$dir/seeds" > "$dir/fuzz.log" 2>&1
rc=$?
set -e
if [ $rc -ne 0 ]; then
  tail -n 80 "$dir/fuzz.log"
  echo "tests/fuzz/run.sh: fuzz_plan failed (exit $rc); its input is in $dir/artifacts/" >&2
  exit $rc
fi
grep -aE "^#[0-9]+[[:space:]]+(INITED|DONE)" "$dir/fuzz.log" | tail -n 2 || true
grep -aE "^stat::" "$dir/fuzz.log" || true
say "fuzzing: no crash in $secs s"
