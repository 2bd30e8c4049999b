#!/usr/bin/env bash
# Builds pagedattn (installing missing Debian packages when run as root) and runs `pagedattn bench`:
# on the GPU when one is visible (nvidia-smi -L) and nvcc built the CUDA backend, else on the CPU with
# the CPU defaults (issue 22's rows: 8k and 32k, T = 1..8, 8 x 4k at T=4; under a minute on 2 cores). Extra arguments go to `pagedattn bench`,
# e.g. scripts/bench.sh --json bench.json
set -euo pipefail
source "$(dirname "$0")/setup.sh"

pagedattn_install_packages
pagedattn_build

if pagedattn_gpu_visible; then
  say "GPU visible: $(nvidia-smi -L | head -n 1)"
  run "$BUILD_DIR/pagedattn" bench --backend cuda "$@"
else
  say "no GPU visible (or no CUDA backend in this build): benchmarking the CPU backend"
  run "$BUILD_DIR/pagedattn" bench --backend cpu "$@"
fi
