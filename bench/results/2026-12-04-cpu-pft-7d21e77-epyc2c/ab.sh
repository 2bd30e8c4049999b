#!/bin/bash
# alternating rounds: the base (ffd710b) and the change (7d21e77), same arguments
cd /tmp/cpurun
for i in 1 2 3; do
  for b in pa_ffd710b pa_7d21e77; do
    echo "== round $i $b"
    ./$b bench --backend cpu --kv f16,u8,bf16,fp8 --json ${b}_r$i.json 2>&1 | tee ${b}_r$i.log | grep -E "^(u8|f16|bf16|fp8) " 
  done
done
