#!/usr/bin/env bash
# GPU machine: FlashInfer's rows for the sweep scenario (issue 21; `pagedattn bench --scenario sweep`):
# one sequence, Hk = 4, head sizes x groups G (H = 4G), chains of T new tokens (its tensor-core decode
# with q_len_per_req = T, and its paged prefill wrapper, causal), and draft trees of SWEEP_TREES nodes
# (node i's parent (i - 1) / 2, as pagedattn's sweep: its paged prefill wrapper, fa2, the tree as a custom
# mask; rows with "tree": true), contexts as given; one run_peers.py call per (D, G), JSON per call in
# $SWEEP_PEERS_DIR. FlashInfer's f16 cache only (the sweep's rows are f16 and u8; its fp8 rows are
# bench/peers' seed scenario).
#   usage: bench/sweep_peers.sh [run_peers.py options...]    e.g. --cpu-smoke --systems sdpa-flash
#   env:   SWEEP_HEAD_SIZES (64 128 256), SWEEP_GROUPS (1 2 4 8 16), SWEEP_CONTEXTS (8192,32768,131072),
#          SWEEP_TOKENS (1,2,4,8,16), SWEEP_TREES (16,32; empty: no trees), SWEEP_LAYERS (4),
#          SWEEP_PEERS_DIR (/tmp/sweep_peers)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${SWEEP_PEERS_DIR:-/tmp/sweep_peers}
mkdir -p "$out"
status=0
for d in ${SWEEP_HEAD_SIZES:-64 128 256}; do
  for g in ${SWEEP_GROUPS:-1 2 4 8 16}; do
    echo "== D=$d G=$g (H=$((4 * g)) Hk=4)"
    python3 "$here/peers/run_peers.py" --scenario seed --heads $((4 * g)) --kv-heads 4 --head-size "$d" \
      --contexts "${SWEEP_CONTEXTS:-8192,32768,131072}" --tokens "${SWEEP_TOKENS:-1,2,4,8,16}" \
      --flashinfer-trees "${SWEEP_TREES-16,32}" \
      --layers "${SWEEP_LAYERS:-4}" --systems flashinfer --flashinfer-multitoken both --no-flashinfer-fp8 \
      --json "$out/fi_D${d}_G${g}.json" "$@" || status=1
  done
done
exit $status
