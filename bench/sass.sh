#!/usr/bin/env bash
# SASS of the attention kernels, here (no GPU needed): compiles one instantiation unit for one arch,
# disassembles it with cuobjdump (from PyPI: nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, cached under
# $SASS_TOOLS) and prints,
# per kernel whose name contains PATTERN, its instruction count, its loops (backward branches) and the
# instruction mix of its largest loop. It found the copy issue's address arithmetic that v14 removed.
#   usage: bench/sass.sh [UNIT] [PATTERN] [ARCH]
#     UNIT    src/cuda/fwd/inst_d256.cu (default) | inst_d128.cu | inst_d64.cu
#     PATTERN substring of the demangled name, e.g. "fwd_kernel<256, 2, 1," (default "fwd_kernel<")
#     ARCH    90a (default) | 80
#   SASS_FLAGS="-DMACRO=1" adds nvcc flags (an experiment build); SASS_DUMP=1 also writes each matching kernel's listing to /tmp/sass_<n>.txt
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
unit=${1:-src/cuda/fwd/inst_d256.cu}
[ -f "$unit" ] || unit=$root/src/cuda/fwd/$unit
pattern=${2:-fwd_kernel<}
arch=${3:-90a}
source "$root/bench/sass_tools.sh"
cubin=/tmp/pagedattn_sass_$(basename "$unit" .cu)_$arch.cubin
nvcc -std=c++17 -O3 --expt-relaxed-constexpr -I"$root/include" -I"$root/src" ${SASS_FLAGS:-} \
  -gencode=arch=compute_$arch,code=sm_$arch -cubin "$unit" -o "$cubin"
cuobjdump -sass "$cubin" | python3 -c '
import collections, os, re, subprocess, sys
pattern = sys.argv[1]
parts = re.split(r"\n\s*Function : ", sys.stdin.read())[1:]
names = subprocess.run(["c++filt"], input="\n".join(p.split("\n", 1)[0] for p in parts),
                       capture_output=True, text=True).stdout.split("\n")
n = 0
for p, name in zip(parts, names):
    if pattern not in name:
        continue
    ins = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s*([^;]*);", p)]
    addr = [a for a, _ in ins]
    loops = []
    for a, t in ins:
        m = re.search(r"BRA\s.*?0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a:
            lo = int(m.group(1), 16)
            loops.append((sum(1 for x in addr if lo <= x <= a), lo, a))
    def mix(lo, hi):
        c = collections.Counter()
        for a, t in ins:
            if lo <= a <= hi:
                w = t.split()
                op = w[1] if w[0].startswith("@") and len(w) > 1 else w[0]
                c[op.split(".")[0]] += 1
        return c
    print("%s: %d instructions" % (name.replace("pagedattn::cuda::", ""), len(ins)))
    for size, lo, hi in sorted(loops, reverse=True)[:5]:
        c = mix(lo, hi)
        print("  loop %05x..%05x: %5d instructions, %3d HMMA, %3d LDSM, %3d LDGSTS" %
              (lo, hi, size, c["HMMA"], c["LDSM"], c["LDGSTS"]))
    # the key loop: the smallest loop holding the most MMAs (outer loops span several regions)
    best = max((mix(lo, hi)["HMMA"], -size, lo, hi) for size, lo, hi in loops) if loops else None
    if best and best[0] > 0:
        c = mix(best[2], best[3])
        print("  key loop %05x..%05x mix: %s" % (best[2], best[3], ", ".join("%s %d" % kv for kv in c.most_common(16))))
    if os.environ.get("SASS_DUMP") == "1":
        n += 1
        with open("/tmp/sass_%d.txt" % n, "w") as f:
            f.write(name + "\n" + "\n".join("%05x %s" % x for x in ins) + "\n")
' "$pattern"
