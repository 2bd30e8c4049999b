#!/usr/bin/env bash
# The aarch64 build of the cpu backend: cross-compiled (Debian's g++-aarch64-linux-gnu; the inner loops
# take GCC's NEON vectorisation and ARM's __fp16 conversions), then `pagedattn check --backend cpu` run
# under qemu-user against the oracle, so the port is tested, not only compiled.
#   tests/aarch64.sh [CASES (default 20)]
# As root on Debian it installs g++-aarch64-linux-gnu and qemu-user when missing. Environment:
# AARCH64_BUILD_DIR (default $BUILD_DIR/aarch64), JOBS, AARCH64_OPTIONAL=1 (no cross compiler or qemu:
# say so and exit 0, as scripts/test.sh runs it).
set -euo pipefail
source "$(dirname "$0")/../scripts/setup.sh"
cases="${1:-20}"
dir="${AARCH64_BUILD_DIR:-$BUILD_DIR/aarch64}"
case "$dir" in /*) ;; *) dir="$PWD/$dir" ;; esac
need=()
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
[ ${#need[@]} -eq 0 ] || pagedattn_apt_install "${need[@]}" || true
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || pagedattn_unavailable "${AARCH64_OPTIONAL:-0}" tests/aarch64.sh "no aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)"

say "aarch64: cross build of the library and the CLI (cpu backend) into $dir"
run cmake -S "$PAGEDATTN_ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=OFF \
  -DPAGEDATTN_BUILD_TESTS=OFF -DPAGEDATTN_INSTALL=OFF -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
  -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc --log-level=WARNING
run cmake --build "$dir" -j "$JOBS"
command -v qemu-aarch64 >/dev/null 2>&1 || pagedattn_unavailable "${AARCH64_OPTIONAL:-0}" tests/aarch64.sh "built, but no qemu-aarch64 to run it (apt-get install qemu-user)"
say "aarch64: the oracle comparison under qemu-aarch64 ($cases cases)"
run env QEMU_LD_PREFIX=/usr/aarch64-linux-gnu qemu-aarch64 "$dir/pagedattn" check --backend cpu --cases "$cases" \
  --config full --seed 0
