#!/usr/bin/env bash
# GPU machine: one bench command under several environment overrides (tuning.h's PAGEDATTN_* A/B
# switches), in ROUNDS alternating rounds (default 2) so that clock drift falls on every config alike;
# prints each row's us per config and round, then each config's median ratio to the first config.
#   usage: bench/knob_sweep.sh PAGEDATTN_BINARY "BENCH ARGS" CONFIG...
#   CONFIG: "-" (no override) or space-separated VAR=VALUE pairs, e.g. "PAGEDATTN_MIN_PARTITION=2048"
set -uo pipefail
bin=$1
args=$2
shift 2
rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
for ((r = 0; r < rounds; ++r)); do
  i=0
  for cfg in "$@"; do
    envs=()
    [ "$cfg" = "-" ] || read -r -a envs <<< "$cfg"
    # the table rows: "kv seqs context T us ..." (bench's seed/batch tables)
    env "${envs[@]}" "$bin" bench $args 2>&1 | awk '$1 ~ /^(f16|bf16|u8|fp8)$/ && NF >= 5 {print $1, $2, $3, $4, $5}' \
      > "$tmp/$i.$r"
    i=$((i + 1))
  done
done
python3 - "$tmp" "$rounds" "$@" <<'PY'
import statistics, sys
d, rounds, cfgs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = {}
for i in range(len(cfgs)):
    for r in range(rounds):
        for line in open(f"{d}/{i}.{r}"):
            p = line.split()
            rows.setdefault(tuple(p[:4]), {}).setdefault(i, []).append(float(p[4]))
print("row (kv seqs context T): us per config (rounds), config / config 0")
for k, by in rows.items():
    base = statistics.median(by.get(0, [float("nan")]))
    cells = []
    for i, c in enumerate(cfgs):
        v = by.get(i, [])
        m = statistics.median(v) if v else float("nan")
        cells.append(f"[{c}] {'/'.join(f'{x:.1f}' for x in v)} ({m / base:.3f})")
    print(" ".join(k) + ": " + "  ".join(cells))
PY
rm -rf "$tmp"
