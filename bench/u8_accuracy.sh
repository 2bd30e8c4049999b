#!/usr/bin/env bash
# GPU machine: the u8 accuracy table of issue 20 (H=32, Hk=8, D=128, block 32, u8 cache written by the
# op, chain verifies, no window/ALiBi/sinks/scores): relative L2 error of `out` against the CPU oracle
# (double sums, threaded over sequences) on the same codes, one seeded case per row, with the planner's
# partitions and with one partition per chunk (every CTA sums a whole context).
#   usage: bench/u8_accuracy.sh [PAGEDATTN_BINARY] > table   (default build/pagedattn; prints one row per
#          line: name, rel_l2, pass/FAIL against 3e-3 (f16 queries) / 1e-2 (bf16); logs in $U8ACC_LOG_DIR)
set -uo pipefail
bin=${1:-build/pagedattn}
logs=${U8ACC_LOG_DIR:-/tmp/u8acc}
mkdir -p "$logs"
common=(check --backend cuda --cases 1 --seed "${U8ACC_SEED:-20}" --config full --head-size 128 --block-size 32
        --kv-heads 8 --p-tree 0 --p-window 0 --p-alibi 0 --p-sinks 0 --p-scores 0 -v)
# row NAME SEQS PAST T G KV QUERY [PARTITION]   (U8ACC_ROWS: an extended regex; only matching rows run)
row() {
  local name=$1 seqs=$2 past=$3 t=$4 g=$5 kv=$6 q=$7 part=${8:-0}
  [[ $name =~ ${U8ACC_ROWS:-.} ]] || return 0
  local log=$logs/$(echo "$name" | tr -c 'A-Za-z0-9\n' '_').log
  local lo=$(( past - past / 32 ))  # past in [0.97 past, past]
  "$bin" "${common[@]}" --min-seqs "$seqs" --max-seqs "$seqs" --min-past "$lo" --max-past "$past" \
    --min-tokens "$t" --max-tokens "$t" --group "$g" --kv "$kv" --query "$q" --partition-tokens "$part" \
    > "$log" 2>&1
  local err
  err=$(awk '/^kv=/ {print $5}' "$log" | head -1)
  printf "%-34s %10s  %s\n" "$name" "${err:-error}" "$(grep -qE '^1 passed' "$log" && echo pass || echo FAIL)"
}
printf "%-34s %10s  %s\n" "row (H=32 Hk=8 D=128 bs=32)" "rel_l2" "vs tolerance"
row "8x64k T16 u8"                 8 65536 16 4 u8 f16
row "8x64k T16 u8 whole-partition" 8 65536 16 4 u8 f16 1048576
row "8x64k T16 u8 bf16-query"      8 65536 16 4 u8 bf16
row "8x64k T16 f16 (control)"      8 65536 16 4 f16 f16
row "8x64k T8 u8"                  8 65536 8 4 u8 f16
row "8x64k T4 u8"                  8 65536 4 4 u8 f16
row "8x32k T16 u8"                 8 32768 16 4 u8 f16
row "8x16k T16 u8"                 8 16384 16 4 u8 f16
row "8x8k T16 u8"                  8 8192 16 4 u8 f16
row "1x64k T16 u8"                 1 65536 16 4 u8 f16
row "1x64k T16 u8 whole-partition" 1 65536 16 4 u8 f16 1048576
row "H64 (G8) 8x64k T8 u8"         8 65536 8 8 u8 f16
