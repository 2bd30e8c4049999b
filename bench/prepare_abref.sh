#!/usr/bin/env bash
# Run HERE before a GPU call whose stages include `abref`: exports each COMMIT's source tree (default
# HEAD~1) into .abref/<commit>/ (git-ignored; add .abref to the device call's `carry`), so bench/gpu.sh
# builds each beside the working tree and prints same-run ratios of the seed rows against them.
#   usage: bench/prepare_abref.sh [COMMIT...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$root/.abref"
for c in "${@:-HEAD~1}"; do
  commit=$(git -C "$root" rev-parse --short "$c")
  d=$root/.abref/$commit
  mkdir -p "$d"
  git -C "$root" archive "$commit" -- . ':!bench/results' | tar x -C "$d"
  echo "$commit" > "$d/.commit"
  echo "$d ($(du -sh "$d" | cut -f1))"
done
