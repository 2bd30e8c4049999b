#!/usr/bin/env bash
# AddressSanitizer and UndefinedBehaviorSanitizer on the cpu backend, its oracle and the planner: a
# CPU-only build with -fsanitize=address,undefined and libstdc++'s assertions (bounds of operator[]), by
# the build's own compiler, every report fatal; then the C++ tests labelled cpu (ctest -L cpu: the unit
# tests and the CLI's oracle checks). A planted out-of-bounds read and a planted negative left shift run
# first and must both be reported, so the stage cannot pass by seeing nothing.
#   tests/sanitize.sh [extra ctest arguments, e.g. -R Numeric]
# Environment: SANITIZE_BUILD_DIR (default $BUILD_DIR/sanitize), JOBS, SANITIZE_OPTIONAL=1 (the compiler
# cannot link the sanitizers: say so and exit 0, as scripts/test.sh runs it).
set -euo pipefail
source "$(dirname "$0")/../scripts/setup.sh"
dir="${SANITIZE_BUILD_DIR:-$BUILD_DIR/sanitize}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
cxx="${CXX:-c++}"
flags="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -D_GLIBCXX_ASSERTIONS"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" UBSAN_OPTIONS="print_stacktrace=1"

mkdir -p "$dir"
printf '%s\n' '#include <cstdio>' '#include <cstdlib>' 'int main(int argc, char**) {' \
  '  if (argc > 1) { int* p = static_cast<int*>(std::malloc(4 * sizeof(int))); int x = p[argc + 2];' \
  '                  std::free(p); std::printf("%d\n", x); return 0; }' \
  '  volatile int k = -3; std::printf("%d\n", k << 23); }' > "$dir/planted.cpp"
# shellcheck disable=SC2086
"$cxx" $flags -g "$dir/planted.cpp" -o "$dir/planted" > "$dir/planted.log" 2>&1 ||
  pagedattn_unavailable "${SANITIZE_OPTIONAL:-0}" tests/sanitize.sh "$cxx cannot link -fsanitize=address,undefined (see $dir/planted.log)"
say "sanitizers: a planted negative left shift and a planted heap overflow must be reported ($cxx $("$cxx" -dumpversion))"
if "$dir/planted" > "$dir/shift.log" 2>&1 || ! grep -q "runtime error: left shift of negative value" "$dir/shift.log"; then
  echo "tests/sanitize.sh: the planted shift was not reported; see $dir/shift.log" >&2
  exit 1
fi
if "$dir/planted" x > "$dir/overflow.log" 2>&1 || ! grep -q "AddressSanitizer: heap-buffer-overflow" "$dir/overflow.log"; then
  echo "tests/sanitize.sh: the planted overflow was not reported; see $dir/overflow.log" >&2
  exit 1
fi

say "sanitizers: the cpu-labelled tests, build in $dir"
run cmake -S "$PAGEDATTN_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEDATTN_CUDA=OFF \
  -DPAGEDATTN_INSTALL=OFF -DCMAKE_CXX_COMPILER="$cxx" "-DCMAKE_CXX_FLAGS=$flags" \
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" --log-level=WARNING
run cmake --build "$dir" -j "$JOBS"
run ctest --test-dir "$dir" -L cpu --output-on-failure -j "$JOBS" "$@"
