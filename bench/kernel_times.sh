#!/usr/bin/env bash
# GPU machine: Nsight Compute durations of the attention kernel and the merge of the 32 x 8k batch, one
# profiled launch per config (ncu --clock-control none: the clocks bench runs at), with the bytes each
# read from DRAM and its grid. A quick split of a batch's time between the two kernels (merge vs
# attention), where the per-CTA timeline cannot time the merge (its device printf serialises thousands
# of merge CTAs: run abd). A config with `--context N` runs the seed scenario's one sequence at N keys
# instead of the batch.
#   usage: bench/kernel_times.sh PAGEDATTN_BINARY OUT_DIR 'KV T [bench flags] [VAR=V]...; ...'
#   e.g.   bench/kernel_times.sh build/pagedattn out 'u8 1 --deterministic; u8 1 --deterministic PAGEDATTN_MERGE_ROWWISE=0'
#          bench/kernel_times.sh build/pagedattn out 'f16 8 --context 8192 --deterministic'
# Prints one line per kernel: config, kernel, us, MB read, MB written, GB/s (DRAM both ways), grid; logs
# OUT_DIR/ncu_*.log.
set -uo pipefail
bin=$1
out=$2
mkdir -p "$out"
IFS=';' read -ra cfgs <<< "$3"
for cfg in "${cfgs[@]}"; do
  read -ra words <<< "$cfg"
  [ "${#words[@]}" -ge 2 ] || continue
  kv=${words[0]} T=${words[1]}
  envs=() flags=()
  for w in "${words[@]:2}"; do
    if [[ $w == *=* && $w != -* ]]; then envs+=("$w"); else flags+=("$w"); fi
  done
  tag=$(echo "$cfg" | tr -c 'a-zA-Z0-9_\n' '_' | tr -s '_')
  scenario=(--scenario batch --batch-tokens "$T")
  [[ " ${flags[*]} " == *" --context "* ]] && scenario=(--scenario seed --tokens "$T")
  env "${envs[@]}" timeout 60 ncu --clock-control none -k regex:"fwd_kernel|wg_kernel|merge" -c 2 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size \
    "$bin" bench --backend cuda "${scenario[@]}" --kv "$kv" "${flags[@]}" \
    --layers 1 --warmup 0 --repeats 1 --fill random > "$out/ncu_$tag.log" 2>&1
  python3 - "$out/ncu_$tag.log" "$cfg" <<'PY'
import re, sys
unit = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
name, vals = None, {}
def emit():
    if name:
        try:  # DRAM bytes both ways over the kernel's time
            gbs = "%7.0f" % ((float(vals["dram__bytes_read.sum"]) + float(vals["dram__bytes_write.sum"])) * 1e3 /
                             float(vals["gpu__time_duration.sum"]))
        except (KeyError, ValueError, ZeroDivisionError):
            gbs = "      -"
        print("%-60s %-22s %8s us %8s MB read %8s MB written %s GB/s  grid %s" % (sys.argv[2].strip()[:60], name,
              vals.get("gpu__time_duration.sum", "-"), vals.get("dram__bytes_read.sum", "-"),
              vals.get("dram__bytes_write.sum", "-"), gbs, vals.get("launch__grid_size", "-")))
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*(?:void )?(?:pagedattn::cuda::)?(\w+)<([^>]*)>\(", line)
    if m and "(" in line and ("kernel" in m.group(1)):
        emit()
        name, vals = "%s<%s>" % (m.group(1), m.group(2).replace(" ", "")), {}
        continue
    f = line.split()
    if len(f) >= 2 and f[0] in ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "launch__grid_size"):
        v = f[-1].replace(",", "")
        if f[0].startswith("dram") and f[1] in unit:
            v = "%.1f" % (float(v) * unit[f[1]])
        vals[f[0]] = v
emit()
if name is None:
    print("%-60s no kernel profiled (see %s)" % (sys.argv[2].strip()[:60], sys.argv[1]))
PY
done
