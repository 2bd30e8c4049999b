#!/usr/bin/env bash
# Installs the built tree (BUILD_DIR, as scripts/test.sh builds it) into a temporary prefix, then builds
# and runs examples/consumer against it with find_package(pagedattn CONFIG); then builds the same
# example with pagedattn pulled in through FetchContent (CPU only). Run by scripts/test.sh; standalone:
#   BUILD_DIR=build scripts/consumer.sh
set -euo pipefail
source "$(dirname "$0")/setup.sh"
pagedattn_find_nvcc   # the installed package's find_dependency(CUDAToolkit) looks for nvcc on PATH

tmp="$(mktemp -d "${TMPDIR:-/tmp}/pagedattn-consumer.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
example="$PAGEDATTN_ROOT/examples/consumer"

say "install $BUILD_DIR into $tmp/prefix; examples/consumer against it (find_package)"
run cmake --install "$BUILD_DIR" --prefix "$tmp/prefix"
run cmake -S "$example" -B "$tmp/find" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$tmp/prefix"
run cmake --build "$tmp/find" -j "$JOBS"
run "$tmp/find/pagedattn_consumer"

say "examples/consumer with pagedattn through FetchContent (PAGEDATTN_CUDA=OFF)"
run cmake -S "$example" -B "$tmp/fetch" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_SOURCE_DIR="$PAGEDATTN_ROOT" \
  -DPAGEDATTN_CUDA=OFF
run cmake --build "$tmp/fetch" -j "$JOBS" --target pagedattn_consumer
run "$tmp/fetch/pagedattn_consumer"
