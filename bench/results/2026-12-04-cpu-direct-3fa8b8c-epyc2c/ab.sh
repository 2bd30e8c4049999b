#!/bin/bash
# alternating rounds: the base (7d21e77) and the change (3fa8b8c), same arguments
cd /tmp/cpurun
for i in 1 2 3; do
  for b in pa_7d21e77 pa_3fa8b8c; do
    echo "== round $i $b"
    ./$b bench --backend cpu --kv f16,u8,bf16,fp8 --json ${b}_r$i.json 2>&1 | tee ${b}_r$i.log | grep -E "^(u8|f16|bf16|fp8) " 
  done
done
