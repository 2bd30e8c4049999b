#!/usr/bin/env bash
# GPU machine: rows for bench/fixed_cost.py, which splits a row's time into a per-layer fixed cost and a
# per-token rate. The seed scenario (one sequence, 16/4/256) at FC_CONTEXTS (default 32k, 64k, 128k: run fc1)
# for T = 1, 3, 8 with f16, fp8 and u8 caches; the 32-sequence batch at FC_BATCH_CONTEXTS (4k, 8k, 16k)
# for T = 1, 4 with f16 and fp8; with FC_PEERS=1 FlashInfer's rows of the same shapes (f16 and fp8 caches)
# in the same call. Then the tables: each row's line, fp8 over f16, pagedattn over FlashInfer.
#   usage: bench/fixed_cost.sh PAGEDATTN_BINARY OUT_DIR
set -uo pipefail
bin=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
status=0
ctx=${FC_CONTEXTS:-32768,65536,131072}
bctx=${FC_BATCH_CONTEXTS:-4096,8192,16384}
"$bin" bench --backend cuda --scenario seed --context "$ctx" --tokens 1,3,8 --kv f16,fp8,u8 \
  --json "$out/seed.json" > "$out/seed.log" 2>&1 || status=1
"$bin" bench --backend cuda --scenario seed --batch 32 --context "$bctx" --tokens 1,4 --kv f16,fp8 --fill random \
  --json "$out/batch.json" > "$out/batch.log" 2>&1 || status=1
files=("$out/seed.json" "$out/batch.json")
if [ "${FC_PEERS:-0}" = 1 ]; then
  timeout 150 python3 "$here/peers/run_peers.py" --only flashinfer --scenario seed --contexts "$ctx" --tokens 1,3,8 \
    --no-kernel-names --max-seconds 130 --json "$out/peers_seed.json" > "$out/peers_seed.log" 2>&1 || status=1
  files+=("$out/peers_seed.json")
  for c in ${bctx//,/ }; do
    timeout 90 python3 "$here/peers/run_peers.py" --only flashinfer --scenario batch --batch-context "$c" \
      --batch-tokens 1,4 --no-kernel-names --max-seconds 70 --json "$out/peers_batch_$c.json" \
      > "$out/peers_batch_$c.log" 2>&1 || status=1
    files+=("$out/peers_batch_$c.json")
  done
fi
existing=()
for f in "${files[@]}"; do [ -s "$f" ] && existing+=("$f"); done
python3 "$here/fixed_cost.py" "${existing[@]}" --min-context 4096 --pair fp8:f16:0.55 \
  --pair pagedattn-fp8:flashinfer-fp8 --pair pagedattn-f16:flashinfer || status=1
exit $status
