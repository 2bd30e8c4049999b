#!/usr/bin/env bash
# ThreadSanitizer on the cpu backend's threads: a CPU-only build with clang -fsanitize=thread and LLVM's
# OpenMP runtime, whose Archer tool (libarcher.so) tells TSan about OpenMP's own synchronisation (GCC's
# libgomp is not instrumented: every parallel region would be reported), then `pagedattn check --backend
# cpu` on 2 threads over random cases (prefill chunks, partitions merged, the write-in). A planted race
# runs first and must be reported, so the stage cannot pass by seeing nothing.
#   tests/tsan.sh [CASES (default 60)]
# As root on Debian it installs clang and libomp-dev when missing. Environment: TSAN_BUILD_DIR (default
# $BUILD_DIR/tsan), JOBS, TSAN_OPTIONAL=1 (no clang/libomp: say so and exit 0, as scripts/test.sh runs it).
set -euo pipefail
source "$(dirname "$0")/../scripts/setup.sh"
cases="${1:-60}"
dir="${TSAN_BUILD_DIR:-$BUILD_DIR/tsan}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac

command -v clang++ >/dev/null 2>&1 || pagedattn_apt_install clang || true
command -v clang++ >/dev/null 2>&1 || pagedattn_unavailable "${TSAN_OPTIONAL:-0}" tests/tsan.sh "no clang++ (apt-get install clang libomp-dev)"
archer="$(clang++ -print-resource-dir 2>/dev/null)/../../libarcher.so"
[ -f "$archer" ] || pagedattn_apt_install libomp-dev || true
[ -f "$archer" ] || archer="$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | head -1)"
[ -n "$archer" ] && [ -f "$archer" ] || pagedattn_unavailable "${TSAN_OPTIONAL:-0}" tests/tsan.sh "no libarcher.so (apt-get install libomp-dev)"
export OMP_TOOL_LIBRARIES="$archer" TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1"

say "ThreadSanitizer: a planted race must be reported (clang++ $(clang++ -dumpversion), $archer)"
mkdir -p "$dir"
printf '%s\n' '#include <cstdio>' 'int main() { int x = 0;' '#pragma omp parallel for num_threads(2)' \
  '  for (int i = 0; i < 1000; ++i) x += i;' '  std::printf("%d\n", x); }' > "$dir/race.cpp"
run clang++ -fopenmp=libomp -fsanitize=thread -g "$dir/race.cpp" -o "$dir/race"
if "$dir/race" > "$dir/race.log" 2>&1 || ! grep -q "ThreadSanitizer: data race" "$dir/race.log"; then
  echo "tests/tsan.sh: the planted race was not reported; see $dir/race.log" >&2
  exit 1
fi
say "ThreadSanitizer: the cpu backend ($cases cases, 2 threads), build in $dir"
run cmake -S "$PAGEDATTN_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEDATTN_CUDA=OFF \
  -DPAGEDATTN_BUILD_TESTS=OFF -DPAGEDATTN_INSTALL=OFF -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_FLAGS=-fsanitize=thread -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread --log-level=WARNING
run cmake --build "$dir" -j "$JOBS" --target pagedattn
run env PAGEDATTN_CPU_THREADS=2 "$dir/pagedattn" check --backend cpu --cases "$cases" --config full --seed 0
