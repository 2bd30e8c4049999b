#!/usr/bin/env bash
# Run HERE before a GPU call whose stages include `abref`: exports COMMIT's source tree (default HEAD~1)
# into .abref/ (git-ignored; add .abref to the device call's `carry`), so bench/gpu.sh builds it beside
# the working tree and prints same-run ratios of the seed rows against it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$root" rev-parse --short "${1:-HEAD~1}")
rm -rf "$root/.abref"
mkdir -p "$root/.abref"
git -C "$root" archive "$commit" | tar x -C "$root/.abref"
echo "$commit" > "$root/.abref/.commit"
echo "$root/.abref: $commit ($(du -sh "$root/.abref" | cut -f1))"
