#!/usr/bin/env bash
# Run HERE before a GPU call whose stages include `abref`: exports each COMMIT's source tree (default
# HEAD~1) into .abref/<commit>/ (git-ignored; add .abref to the device call's `carry`), so bench/gpu.sh
# builds each beside the working tree and prints same-run ratios of the seed rows against them.
# COMMIT+PATCH exports COMMIT with PATCH (a file of this checkout, e.g. one written out of git history:
# git show COMMIT:bench/experiments/x.patch > x.patch; bench/NOTES.md lists them)
# applied: .abref/<commit>_<patch name>/, so experiments kept as patches run in the same call.
#   usage: bench/prepare_abref.sh [COMMIT[+PATCH]...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$root/.abref"
for arg in "${@:-HEAD~1}"; do
  c=${arg%%+*}
  patch=
  [ "$c" = "$arg" ] || patch=${arg#*+}
  commit=$(git -C "$root" rev-parse --short "$c")
  name=$commit
  [ -z "$patch" ] || name=${commit}_$(basename "$patch" .patch)
  d=$root/.abref/$name
  mkdir -p "$d"
  git -C "$root" archive "$commit" -- . ':!bench/results' | tar x -C "$d"
  # NOTE: from the repository root with --directory: git apply run inside .abref/ (a git-ignored folder
  # of this repository) skips every path silently, and the export ran without its patch
  [ -z "$patch" ] || git -C "$root" apply --directory=".abref/$name" "$root/$patch"
  echo "$name" > "$d/.commit"
  echo "$d ($(du -sh "$d" | cut -f1))"
done
