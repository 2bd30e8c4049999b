#!/usr/bin/env bash
# GPU machine: issue 24's cost rows. The seed scenario (one sequence, H = 16, Hk = 4, D = 256) at 32k and
# 128k for T = 1..8 and at 8k for T = 1, 4, 8, and the 32 x 8k batch at T = 1, 4, 8, f16 and u8 caches,
# in three calls: the default mode, Options::deterministic (--deterministic), the default again (its
# drift). Then a table: each row's time in deterministic mode over the default's (targets: <= 1.10 at
# 32k and 128k, <= 1.20 at 8k and on the batch) and the default's drift.
# INV_PARTITIONS="256 1024": also deterministic mode with those fixed partition sizes (--partition; the
# mode's 512 is not tuned per context, and no one size suits 8k and 128k: docs/design.md), one column each.
# INV_SPLIT_AB=1: also the mode's f16 rows on fwd_kernel's WKV = 4 layout (PAGEDATTN_DETERMINISTIC_SPLIT=0),
# column "fwd": the key-split kernel's own partials (tuning::deterministic_split) against it, same call.
#   usage: bench/invariant_cost.sh PAGEDATTN_BINARY OUT_DIR   (INV_TABLE_ONLY=1: reprint OUT_DIR's table)
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
status=0
run() {  # TAG [bench args...]
  local tag=$1
  shift
  "$bin" bench --backend cuda --scenario seed --context 32768,131072 --tokens 1,2,3,4,5,6,7,8 "$@" \
    --kv "${KV:-f16,u8}" --json "$out/${tag}_long.json" > "$out/${tag}_long.log" 2>&1 || status=1
  "$bin" bench --backend cuda --scenario seed --context 8192 --tokens 1,4,8 --kv "${KV:-f16,u8}" "$@" \
    --json "$out/${tag}_8k.json" > "$out/${tag}_8k.log" 2>&1 || status=1
  for T in 1 4 8; do
    "$bin" bench --backend cuda --scenario batch --batch-tokens "$T" --kv "${KV:-f16,u8}" "$@" \
      --json "$out/${tag}_batch$T.json" > "$out/${tag}_batch$T.log" 2>&1 || status=1
  done
}
# INV_TABLE_ONLY=1: the table again from OUT_DIR's JSON (no runs)
if [ "${INV_TABLE_ONLY:-0}" != 1 ]; then
  run default
  run deterministic --deterministic
  for p in ${INV_PARTITIONS:-}; do run "deterministic_p$p" --deterministic --partition "$p"; done
  [ "${INV_SPLIT_AB:-0}" = 1 ] && KV=f16 PAGEDATTN_DETERMINISTIC_SPLIT=0 run deterministic_fwd --deterministic
  run default_again
fi
extra=""
for p in ${INV_PARTITIONS:-}; do extra="$extra deterministic_p$p"; done
[ -e "$out/deterministic_fwd_long.json" ] && extra="$extra deterministic_fwd"
python3 - "$out" $extra <<'PY'
import glob, gzip, json, os, sys
d = sys.argv[1]
extra = sys.argv[2:]
def load(tag):  # the tag's own files only ("default_*" would also match "default_again_*"); committed runs: .json.gz
    rows = {}
    for f in [f"{d}/{tag}_{part}.json" for part in ("long", "8k", "batch1", "batch4", "batch8")]:
        if not os.path.exists(f) and os.path.exists(f + ".gz"):
            f += ".gz"
        if not os.path.exists(f):
            continue
        with (gzip.open(f, "rt") if f.endswith(".gz") else open(f)) as fh:
            j = json.load(fh)
        for r in j["rows"]:
            rows[(r["seqs"], r["context"], r["kv"], r["T"])] = r
    return rows
a, b, c = load("default"), load("deterministic"), load("default_again")
x = {t: load(t) for t in extra}
print("deterministic (invariant rows) against the default: us per 8 layers, ratio (targets: <= 1.10 at 32k/128k,"
      " <= 1.20 at 8k and the 32 x 8k batch); drift = default_again / default")
for k in sorted(a):
    seqs, ctx, kv, T = k
    if k not in b:
        continue
    drift = c[k]["us"] / a[k]["us"] if k in c else float("nan")
    target = 1.10 if seqs == 1 and ctx >= 32768 else 1.20
    ratio = b[k]["us"] / a[k]["us"]
    more = "".join(f"  {t[len('deterministic_'):]} {x[t][k]['us'] / a[k]['us']:.3f}" for t in extra if k in x[t])
    print(f"  seqs={seqs:2d} ctx={ctx:6d} {kv:3s} T={T}: default {a[k]['us']:8.1f}  deterministic {b[k]['us']:8.1f}"
          f"  ratio {ratio:.3f} {'ok ' if ratio <= target else 'MISS'} (<= {target:.2f})  drift {drift:.3f}{more}")
PY
exit $status
