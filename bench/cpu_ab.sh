#!/usr/bin/env bash
# CPU A/B of two pagedattn binaries (e.g. CPU-only builds of a commit and its parent): ROUNDS (default 3)
# alternating rounds of `pagedattn bench --backend cpu` with the same arguments, each round's log and JSON
# under OUT, then the per-row table (bench/cpu_ab_table.py: each build's median over the rounds, new /
# base and the per-round ratios) in OUT/table.txt. This VM's figures move 10-30% between processes, so
# compare builds only within one such run.
#   usage: bench/cpu_ab.sh BASE_BIN NEW_BIN OUT [bench args...]   (default args: --kv f16,u8,bf16,fp8)
set -euo pipefail
base=$1 new=$2 out=$3
shift 3
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--kv f16,u8,bf16,fp8)
mkdir -p "$out/logs"
for i in $(seq 1 "${ROUNDS:-3}"); do
  for side in base new; do
    bin=${!side}
    echo "== round $i $side ($bin)"
    "$bin" bench --backend cpu "${args[@]}" --json "$out/logs/${side}_r$i.json" 2>&1 | tee "$out/logs/${side}_r$i.log" |
      grep -E "^(u8|f16|bf16|fp8) "
  done
done | tee "$out/ab.txt"
python3 "$(dirname "$0")/cpu_ab_table.py" "$out/logs" > "$out/table.txt"
cat "$out/table.txt"
