#!/usr/bin/env bash
# GPU machine: issue 27's two figures. (1) The cost of returning lse: the seed rows (f16/u8, T = 1, 3, 8)
# and the 32 x 8k batch rows (T = 1, 4) without and with --lse, alternating ROUNDS times in the same call;
# the table gives each row's median over rounds and the ratio with/without. (2) The split scenario: a
# 64k context in 2 shards of 32k, T = 1, 4, 8 (merge_states per layer, split-and-merge against the whole).
#   usage: bench/lse_cost.sh PAGEDATTN_BINARY OUT_DIR      (env ROUNDS, default 3)
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
status=0
for r in $(seq 1 "${ROUNDS:-3}"); do
  for mode in plain lse; do
    flag=()
    [ "$mode" = lse ] && flag=(--lse)
    "$bin" bench --backend cuda --scenario seed --kv f16,u8 --tokens 1,3,8 "${flag[@]}" \
      --json "$out/seed_${mode}_$r.json" > "$out/seed_${mode}_$r.log" 2>&1 || status=1
    "$bin" bench --backend cuda --scenario seed --batch 32 --context 8192 --tokens 1,4 --kv f16,u8 --fill random \
      "${flag[@]}" --json "$out/batch_${mode}_$r.json" > "$out/batch_${mode}_$r.log" 2>&1 || status=1
  done
done
python3 - "$out" <<'PY'
import glob, json, statistics, sys
d = sys.argv[1]
rows = {}
for f in glob.glob(d + "/*_*_*.json"):
    mode = "lse" if "_lse_" in f else "plain"
    for r in json.load(open(f))["rows"]:
        rows.setdefault((r["kv"], r["seqs"], r["context"], r["T"]), {}).setdefault(mode, []).append(r["us"])
print("lse cost: median over rounds of us per 8 layers (each a median of CUDA-graph replays)")
print("%-4s %5s %7s %3s %10s %10s %8s" % ("kv", "seqs", "context", "T", "plain", "lse", "lse/plain"))
for k in sorted(rows):
    p, l = statistics.median(rows[k].get("plain", [0])), statistics.median(rows[k].get("lse", [0]))
    print("%-4s %5d %7d %3d %10.1f %10.1f %8.3f" % (k + (p, l, l / p if p else 0)))
PY
"$bin" bench --backend cuda --scenario split --context 65536 --tokens 1,4,8 --kv f16,u8 --split-shards 2 \
  --json "$out/split.json" > "$out/split.log" 2>&1 || status=1
tail -9 "$out/split.log"
exit $status
