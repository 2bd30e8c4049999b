# Sourced by bench/sass.sh and bench/sass_same.sh: puts cuobjdump on PATH, from PyPI
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm; no GPU needed) cached under $SASS_TOOLS when the
# system has none.
tools=${SASS_TOOLS:-/tmp/pagedattn-sass-tools}
if ! command -v cuobjdump >/dev/null; then
  if [ ! -x "$tools/nvidia/cu13/bin/cuobjdump" ]; then
    mkdir -p "$tools"
    python3 -m pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$tools/whl"
    for w in "$tools"/whl/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
    chmod +x "$tools"/nvidia/cu13/bin/*
  fi
  PATH=$tools/nvidia/cu13/bin:$PATH
fi
