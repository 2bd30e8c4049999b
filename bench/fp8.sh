#!/usr/bin/env bash
# GPU machine: issue 23's rows, fp8 (e4m3) caches beside f16 in the same call. The seed scenario (8k,
# 32k, 128k; T = 1, 3, 8), the 32 x 8k batch (T = 1, 4), prefill from zero and the 1024-token chunk over
# 32k (f16 and bf16 queries, D = 128 and 256); then a table: fp8 / f16 time per row, % of the read ceiling.
# FP8_LONG=0 skips prefill and the chunk; FP8_PEERS=1 adds FlashInfer's rows (bench/peers/run_peers.py
# --only flashinfer: f16 and fp8 caches) beside the seed and batch rows of the same call (peers.json).
#   usage: bench/fp8.sh PAGEDATTN_BINARY OUT_DIR
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
status=0
"$bin" bench --backend cuda --scenario seed --kv f16,fp8 --tokens 1,3,8 --json "$out/seed.json" \
  > "$out/seed.log" 2>&1 || status=1
"$bin" bench --backend cuda --scenario seed --batch 32 --context 8192 --tokens 1,4 --kv f16,fp8 --fill random \
  --json "$out/batch.json" > "$out/batch.log" 2>&1 || status=1
if [ "${FP8_LONG:-1}" = 1 ]; then
  for q in f16 bf16; do
    "$bin" bench --backend cuda --scenario prefill --prefill-kv f16,fp8 --prefill-query "$q" --prefill-context 8192 \
      --json "$out/prefill_$q.json" > "$out/prefill_$q.log" 2>&1 || status=1
  done
  "$bin" bench --backend cuda --scenario chunk --kv f16,fp8 --json "$out/chunk.json" > "$out/chunk.log" 2>&1 || status=1
fi
if [ "${FP8_PEERS:-0}" = 1 ]; then
  timeout "${FP8_PEERS_SECONDS:-240}" python3 "$(dirname "$0")/peers/run_peers.py" --json "$out/peers.json" \
    --only flashinfer --pagedattn-json "$out/seed.json" "$out/batch.json" \
    --max-seconds $(( ${FP8_PEERS_SECONDS:-240} - 20 )) > "$out/peers.log" 2>&1 || status=1
  grep -E "flashinfer-fp8|pagedattn-fp8" "$out/peers.log" | tail -24
fi
python3 - "$out" <<'PY'
import glob, json, sys
d = sys.argv[1]
measured = {"us", "us_min", "us_max", "gbs", "pct_ceiling", "t_over_t1", "bytes", "bytes_terms", "tflops", "kv",
            "spread", "sets", "layers"}
for f in sorted(glob.glob(d + "/*.json")):
    keyed = {}
    doc = json.load(open(f))
    rows = doc["rows"] + [r for v in doc.values() if isinstance(v, dict) for r in v.get("rows", [])]
    for r in rows:
        if "kv" not in r:  # (peers.json: run_peers.py's rows, printed by it)
            continue
        k = tuple((x, r[x]) for x in sorted(r) if x not in measured and isinstance(r[x], (int, str, bool)))
        keyed.setdefault(k, {})[r["kv"]] = r
    print(f"== {f.split('/')[-1]}: fp8 us per call, % of the read ceiling or TFLOP/s, fp8 / f16 time")
    for k, by in keyed.items():
        if "fp8" not in by:
            continue
        a, b = by["fp8"], by.get("f16")
        desc = " ".join(f"{x}={v}" for x, v in k)
        extra = "".join(f" {x} {a[x]:.1f}" for x in ("pct_ceiling", "tflops") if isinstance(a.get(x), (int, float)))
        ratio = f" fp8/f16 {a['us'] / b['us']:.3f}" if b else ""
        print(f"  {desc}: fp8 {a['us']:.1f} us{extra}{ratio}")
PY
exit $status
