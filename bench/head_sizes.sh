#!/usr/bin/env bash
# GPU machine: issue 26's rows. Seed-like calls (one sequence, H = 16, Hk = 4, 32k cached tokens, T = 1,
# 4, 8, f16 and u8 caches) at D = 128 and the issue's head sizes 80, 96, 112, 192 and Dk/Dv = 192/128
# (and 160, padded to 192 at every KV kind, and 256), one call each; then a table: each row's time
# against the bytes-proportional time of the D = 128 row of the same call (target <= 1.10) and its T/T1.
#   usage: [HEAD_SIZES="80 96 ..."] bench/head_sizes.sh PAGEDATTN_BINARY OUT_DIR
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
status=0
for spec in 128 ${HEAD_SIZES:-80 96 112 192 192/128 160 256}; do
  D=${spec%/*}
  Dv=${spec#*/}
  "$bin" bench --backend cuda --scenario seed --context 32768 --tokens 1,4,8 --kv f16,u8 --head-size "$D" \
    --value-head-size "$Dv" --json "$out/d${D}_${Dv}.json" > "$out/d${D}_${Dv}.log" 2>&1 || status=1
done
python3 - "$out" <<'PY'
import glob, json, sys
d = sys.argv[1]
rows = {}
for f in glob.glob(d + "/d*_*.json"):
    for r in json.load(open(f))["rows"]:
        rows[(r["head_size"], r.get("value_head_size", r["head_size"]), r["kv"], r["T"])] = r
print("head sizes at 32k: us per 8 layers; time / (time(D=128) x bytes / bytes(D=128)) (target <= 1.10); T/T1")
for (D, Dv, kv, T), r in sorted(rows.items()):
    base = rows.get((128, 128, kv, T))
    t1 = rows.get((D, Dv, kv, 1))
    rel = r["us"] / (base["us"] * r["bytes"] / base["bytes"]) if base else float("nan")
    print(f"  D={D:3d} Dv={Dv:3d} {kv:4s} T={T}: {r['us']:8.1f} us  {r.get('pct_ceiling', 0):5.1f}% ceil  "
          f"vs bytes-proportional {rel:.3f}  T/T1 {r['us'] / t1['us']:.2f}")
PY
exit $status
