#!/usr/bin/env bash
# Whether a change of the CUDA sources changes any kernel's machine code, here (no GPU needed): compiles
# the instantiation units and backend.cu of REF (a commit, via git worktree) and of the working tree for
# sm_90a, disassembles both (cuobjdump, fetched from PyPI as bench/sass.sh does) and compares each kernel's
# SASS with addresses and encodings stripped. For refactors that move code (files split, dead variants
# removed): identical SASS means the GPU suites and benchmarks of REF still hold. Kernels whose name
# exists on one side only are listed (a removed or renamed template); NAME_MAP (a sed expression applied
# to REF's mangled names) maps renames, e.g. a removed template argument.
# Kernels new in the tree (a new instantiation, e.g. another head-size width) are listed and do not
# count against it; a kernel compiled in several units (the scores kernel at 80/112 and 128) must match
# REF in every copy.
#   usage: bench/sass_same.sh [REF (default HEAD)]      exit 0: every kernel of REF's is in the tree, identical
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:-HEAD}
source "$root/bench/sass_tools.sh"
command -v nvcc >/dev/null || PATH=/usr/local/cuda/bin:$PATH
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/ref" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$root" worktree add -q --detach "$work/ref" "$ref"
units="src/cuda/fwd/inst_d64.cu src/cuda/fwd/inst_d80.cu src/cuda/fwd/inst_d96.cu src/cuda/fwd/inst_d112.cu src/cuda/fwd/inst_d128.cu
  src/cuda/fwd/inst_d192.cu src/cuda/fwd/inst_d256.cu src/cuda/backend.cu"
for side in ref tree; do
  src=$root
  [ "$side" = ref ] && src=$work/ref
  for u in $units; do
    [ -f "$src/$u" ] || continue
    nvcc -std=c++17 -O3 -DNDEBUG -DPAGEDATTN_HAS_SM90A=1 -DPAGEDATTN_WITH_CUDA=1 --expt-relaxed-constexpr \
      -I"$src/include" -I"$src/src" -gencode=arch=compute_90a,code=sm_90a -cubin "$src/$u" \
      -o "$work/$side-$(basename "$u" .cu).cubin" &
  done
  wait
  for c in "$work/$side"-*.cubin; do cuobjdump -sass "$c"; done > "$work/$side.sass"
done
NAME_MAP=${NAME_MAP:-} python3 - "$work/ref.sass" "$work/tree.sass" <<'PY'
import os, re, subprocess, sys
def parse(path, name_map=""):
    funcs, name, body = {}, None, []  # name -> the bodies of its copies
    for line in open(path):
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name: funcs.setdefault(name, []).append(body)
            # (an anonymous namespace's name carries a hash of its file: backend.cu's kernels)
            name, body = re.sub(r"_GLOBAL__N__[0-9a-f]+_", "_GLOBAL__N__", m.group(1)), []
            if name_map:
                name = subprocess.run(["sed", name_map], input=name, capture_output=True, text=True).stdout.strip()
            continue
        if name:
            # addresses out; spaces collapsed (cuobjdump pads each line to the widest address of the whole
            # cubin, so a unit whose code grew past a hex digit shifted every kernel's columns)
            t = " ".join(re.sub(r"/\*[0-9a-fx]+\*/", "", line).split())
            if t: body.append(t)
    if name: funcs.setdefault(name, []).append(body)
    return funcs
ref, tree = parse(sys.argv[1], os.environ.get("NAME_MAP", "")), parse(sys.argv[2])
same = [n for n in tree if n in ref and all(b in ref[n] for b in tree[n])]
diff = [n for n in tree if n in ref and n not in same]
for n in diff: print("different:", n)
for n in sorted(set(tree) - set(ref)): print("only in the tree:", n)
for n in sorted(set(ref) - set(tree)): print("only in the ref:", n)
print("%d of %d kernels of the tree identical to the ref's (%d in the ref)" % (len(same), len(tree), len(ref)))
sys.exit(0 if not diff and set(ref) <= set(tree) else 1)
PY
