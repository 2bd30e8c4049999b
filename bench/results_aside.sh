#!/usr/bin/env bash
# Here, around a device call whose carry would pass the device tool's 64 MiB: the tracked tree travels whole
# (bench/results is ~21 MB of its ~22), and .prebuilt (19 MB) beside .wheels (29 MB) leaves no room for it.
# The GPU machine needs none of bench/results, so such a call moves it aside first and back after. Run dg1
# went this way (.deps, .wheels and .commit carried; refused with bench/results in place).
#   bench/results_aside.sh out    bench/results -> .results-aside/results (git-ignored)
#   bench/results_aside.sh back   and back (until then `git status` lists bench/results as deleted)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
aside=$root/.results-aside
case "${1:-}" in
  out)
    [ -d "$root/bench/results" ] || { echo "results_aside: bench/results is not there (aside already?)" >&2; exit 1; }
    [ ! -e "$aside/results" ] || { echo "results_aside: $aside/results exists: run 'back' first" >&2; exit 1; }
    mkdir -p "$aside"
    mv "$root/bench/results" "$aside/results"
    echo "results_aside: bench/results moved to .results-aside/; run '$0 back' after the call"
    ;;
  back)
    [ -d "$aside/results" ] || { echo "results_aside: nothing aside" >&2; exit 1; }
    [ ! -e "$root/bench/results" ] || rmdir "$root/bench/results" 2>/dev/null ||
      { echo "results_aside: bench/results exists and is not empty: merge by hand" >&2; exit 1; }
    mv "$aside/results" "$root/bench/results"
    rmdir "$aside"
    echo "results_aside: bench/results is back"
    ;;
  *) echo "usage: $0 out|back" >&2; exit 2 ;;
esac
