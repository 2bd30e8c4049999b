#!/usr/bin/env bash
# Downloads flashinfer-python and the dependency wheels the H200 machine lacks into <repo>/.wheels/
# (run here, where PyPI is reachable; the GPU machine has no network). run_peers.py installs them from
# there with `pip install --no-index --no-deps --target /tmp/pagedattn-flashinfer` when `import flashinfer`
# fails. The GPU machine already has torch 2.11 (+cu130, with jinja2, filelock, typing_extensions), numpy,
# triton and torch's nvidia-* CUDA packages, so those are not fetched.
#
# Not fetched, on purpose: flashinfer-jit-cache / flashinfer-cubin (hundreds of MB; the JIT compiles what
# is needed with the machine's nvcc), nvidia-cutlass-dsl, nvidia-cudnn-frontend, cuda-tile, cuda-python,
# nccl4py (only FlashInfer's CuTe-DSL, cuDNN, tile and communication paths import them, lazily; the paged
# decode and prefill used here do not, and `import flashinfer` works without them).
#
#   bench/peers/fetch_flashinfer.sh            # FI_VERSION, PY_VERSION (3.12), ARCH (x86_64) override
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${WHEELS_DIR:-$ROOT/.wheels}
FI_VERSION=${FI_VERSION:-0.6.18.post1}
PY_VERSION=${PY_VERSION:-3.12}
ARCH=${ARCH:-x86_64}
PY=${PYTHON:-python3}
LIMIT_MIB=${LIMIT_MIB:-40}

# Pinned to the set checked together (import flashinfer with torch 2.11.0+cu130, python 3.12).
# flashinfer-python 0.6.18.post1 needs apache-tvm-ffi >=0.1.6,<0.2 (not 0.1.8*), packaging >=24.2.
PKGS=(
  "flashinfer-python==$FI_VERSION"
  "apache-tvm-ffi==0.1.15.post2"   # FlashInfer's JIT modules are tvm-ffi modules (compiled C++ side too)
  "einops==0.8.2"
  "click==8.5.1"
  "tabulate==0.10.0"
  "tqdm==4.70.1"
  "nvidia-ml-py==13.615.71"
  "ninja==1.13.2"                  # only used if the machine has no ninja on PATH
  "packaging==26.4"
  "requests==2.34.2" "urllib3==2.8.0" "idna==3.20" "charset-normalizer==3.5.3" "certifi==2026.10.19.post1"
)

mkdir -p "$DEST"
rm -f "$DEST"/*.whl
for f in "$DEST"/flashinfer-aot-*.tar.gz; do  # prebuilt modules of another FlashInfer version
  case $f in *"-$FI_VERSION-"*) ;; *) rm -f "$f" ;; esac
done
pyv=${PY_VERSION/./}
for spec in "${PKGS[@]}"; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$DEST" \
    --python-version "$PY_VERSION" --implementation cp --abi "cp$pyv" --abi abi3 --abi none \
    --platform "manylinux_2_28_$ARCH" --platform "manylinux_2_17_$ARCH" --platform "manylinux2014_$ARCH" \
    --platform "linux_$ARCH" \
    "$spec"
done

# PREBUILD=1: also compile the FlashInfer modules the benchmark loads, for sm_90a, with this machine's nvcc (must
# be CUDA 13 like the GPU machine's), and pack them as flashinfer-aot-<version>-sm90a.tar.gz (a few MB).
# Which modules: run_peers.py dry-runs its wrappers' plan() on the CPU and records the get_batch_prefill_module
# arguments each asks for (tensor-core decode, T=1 and q_len_per_req>1; paged prefill with fa2 and fa3;
# tensor-core decode over an e4m3 cache): with f16 and D=256 the FA2 module (decode and fa2 prefill share it),
# the FA3 one, and the FA2 one with e4m3 KV (flashinfer-fp8). run_peers.py unpacks the
# archive where FlashInfer looks for prebuilt modules, so the GPU run compiles nothing; a module that does not
# load there is compiled as usual. Needs torch in $PYTHON (PYTHON=/path/to/venv/bin/python); takes minutes
# (about 8 on 2 cores). Check it: $PYTHON bench/peers/run_peers.py --flashinfer-check-aot --flashinfer-target /tmp/x
# FI_HEAD_SIZES (e.g. 64,128,256: the sweep's rows) and FI_BACKENDS (e.g. fa2: no FA3 module, which only
# backend auto on Hopper asks for) pass on to the prebuild (defaults: run_peers.py's, D = 256, fa2,fa3).
# The venv with torch may be another Python than the GPU machine's 3.12: prebuild from that version's
# wheels, then copy the archive beside the 3.12 wheels (2026-12-04: a Python 3.11 venv with torch
# 2.11.0+cu130 from PyPI; WHEELS_DIR=/tmp/w311 PY_VERSION=3.11 PREBUILD=1 FI_HEAD_SIZES=64,128,256
# FI_BACKENDS=fa2 PYTHON=/tmp/fi311/bin/python, then this script with the defaults and
# cp /tmp/w311/flashinfer-aot-*.tar.gz .wheels/: 6 modules, 7.5 MB, ~10 min on 2 cores).
if [ "${PREBUILD:-0}" = 1 ]; then
  extra=()
  [ -z "${FI_HEAD_SIZES:-}" ] || extra+=(--flashinfer-prebuild-head-sizes "$FI_HEAD_SIZES")
  [ -z "${FI_BACKENDS:-}" ] || extra+=(--flashinfer-prebuild-backends "$FI_BACKENDS")
  "$PY" "$ROOT/bench/peers/run_peers.py" --flashinfer-prebuild --flashinfer-wheels "$DEST" \
    --flashinfer-arch "${FI_ARCH:-9.0a}" "${extra[@]}"
fi

shopt -s nullglob
files=("$DEST"/*.whl "$DEST"/flashinfer-aot-*.tar.gz)
echo "in $DEST:"
ls -l "${files[@]}" | awk '{printf "  %8.2f MiB  %s\n", $5 / 1048576, $NF}'
total=$(du -cb "${files[@]}" | tail -1 | cut -f1)
awk -v t="$total" -v l="$LIMIT_MIB" 'BEGIN { printf "total %.2f MiB (limit %s MiB)\n", t / 1048576, l }'
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "fetch_flashinfer.sh: more than $LIMIT_MIB MiB" >&2
  exit 1
fi
