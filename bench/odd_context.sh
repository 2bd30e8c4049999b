#!/usr/bin/env bash
# The one-wave partition rule at contexts that are not powers of two: for each context and shape, the
# planner's partition ("rule") against forced partitions (--partition P) whose grids are one, two or
# three CTAs per SM, in one process per partition, the rule timed first and last (its drift).
# For bench/gpu.sh's extra stage (uses $build's CLI, else $build-cli's) or by hand: BIN=... OUT_DIR=...
#   ODD_CONTEXTS (default 12288 20000 40000), ODD_SHAPES (KV:D:H:HK, default f16:128:16:4 u8:128:16:4
#   f16:256:16:4), ODD_PARTS (default 192 256 320 384 512 640 768 1024 1280), ODD_TOKENS (T, default 1)
set -u
R=${OUT_DIR:-${run_dir:?run from bench/gpu.sh extra, or set OUT_DIR}}
bin=${BIN:-${build:+$build/pagedattn}}
[ -x "$bin" ] || bin=${build}-cli/pagedattn
[ -x "$bin" ] || { echo "odd_context.sh: no CLI ($bin)"; exit 1; }
for shape in ${ODD_SHAPES:-f16:128:16:4 u8:128:16:4 f16:256:16:4}; do
  IFS=: read -r kv d h hk <<< "$shape"
  for ctx in ${ODD_CONTEXTS:-12288 20000 40000}; do
    common=(bench --backend cuda --scenario seed --context "$ctx" --tokens "${ODD_TOKENS:-1}" --kv "$kv" --head-size "$d"
            --heads "$h" --kv-heads "$hk" --fill random --layers 8 --repeats 100)
    tag=${kv}_d${d}_${ctx}
    PAGEDATTN_PRINT_PLAN=1 "$bin" "${common[@]}" > "$R/odd_${tag}_rule.log" 2>&1
    for p in ${ODD_PARTS:-192 256 320 384 512 640 768 1024 1280}; do
      ctas=$(( hk * ((ctx + p - 1) / p) ))
      (( ctas >= 100 && ctas <= 420 )) || continue
      "$bin" "${common[@]}" --partition "$p" > "$R/odd_${tag}_p$p.log" 2>&1
    done
    PAGEDATTN_PRINT_PLAN=1 "$bin" "${common[@]}" > "$R/odd_${tag}_rule2.log" 2>&1
  done
done
# the table: per (shape, context), each partition's us per 8 layers, CTAs, ratio to the rule's mean
python3 - "$R" <<'PY' | tee "$R/odd_context.txt"
import glob, os, re, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "odd_*.log"))):
    m = re.match(r"odd_(\w+?)_d(\d+)_(\d+)_(\w+)\.log", os.path.basename(f))
    if not m:
        continue
    text = open(f).read()
    t = re.search(r"^\s*(?:f16|u8|fp8|bf16)\s+\d+\s+\d+\s+\d+\s+([\d.]+)", text, re.M)
    plan = re.search(r"partition_tokens=(\d+) items=\d+ ctas=(\d+)", text)
    rows.setdefault(m.group(1, 2, 3), {})[m.group(4)] = (float(t.group(1)) if t else None,
                                                     plan.group(1, 2) if plan else None)
print("kv   D     ctx  partition  ctas   us/8 layers  / rule")
for (kv, d, ctx), r in sorted(rows.items(), key=lambda x: (x[0][0], int(x[0][1]), int(x[0][2]))):
    base = [v[0] for k, v in r.items() if k.startswith("rule") and v[0]]
    ref = sum(base) / len(base) if base else None
    for k, (us, plan) in sorted(r.items(), key=lambda x: (not x[0].startswith("rule"), int(x[0][1:]) if x[0][0] == "p" else 0)):
        p = plan[0] if plan else (k[1:] if k[0] == "p" else "-")
        ctas = plan[1] if plan else ""
        ratio = f"{us / ref:.3f}" if us and ref else "-"
        print(f"{kv:4} {d:>3} {ctx:>7}  {k:>5} {p:>5}  {ctas:>4}  {us if us else '-':>11}  {ratio}")
PY
# the logs in one archive (the device tool returns at most 8 files)
(cd "$R" && tar czf odd_logs.tgz odd_*.log && rm -f odd_*.log)
