#!/usr/bin/env bash
# GPU machine: issue 21's many-row rows, one sequence, D=128, Hk=4, G = 8 and 16 (H = 32, 64), T = 1, 4,
# 8, 16 (rows per kv head = G*T), 32k and 128k, f16 and u8, under each configuration given: "default",
# an environment assignment (PAGEDATTN_WG_SPLIT=0) or bench arguments (--partition=2048).
# Logs and JSON in $MR_LOG_DIR; prints each configuration's rows (us per 8 layers, T/T1).
#   usage: bench/many_rows.sh BINARY CONFIG...     e.g. bench/many_rows.sh build/pagedattn default --partition=2048
set -uo pipefail
bin=$1
shift
logs=${MR_LOG_DIR:-/tmp/many_rows}
mkdir -p "$logs"
for cfg in "$@"; do
  envs=() args=()
  case $cfg in
    default) ;;
    --*) args=("${cfg%%=*}" "${cfg#*=}") ;;
    *=*) envs=("$cfg") ;;
  esac
  for h in ${MR_HEADS:-32 64}; do
    tag=$(echo "${cfg}_H$h" | tr -c 'A-Za-z0-9_\n' '_')
    echo "== $cfg H=$h Hk=4 D=128 (G=$((h / 4)))"
    env "${envs[@]}" "$bin" bench --backend cuda --scenario seed --heads "$h" --kv-heads 4 --head-size 128 \
      --context ${MR_CONTEXT:-32768,131072} --tokens 1,4,8,16 --kv f16,u8 "${args[@]}" --json "$logs/$tag.json" \
      > "$logs/$tag.log" 2>&1
    grep -E "^(f16|u8) " "$logs/$tag.log" | awk '{printf "%-4s %7s T=%-3s rows=%-4s %9s us  T/T1 %s\n", $1, $3, $4, $4 * '"$((h / 4))"', $5, $6}'
  done
done
