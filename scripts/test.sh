#!/usr/bin/env bash
# Builds pagedattn (installing missing Debian packages when run as root) and runs the tests. The GPU
# tests skip with a message when no GPU is visible.
set -euo pipefail
source "$(dirname "$0")/setup.sh"

pagedattn_install_packages
pagedattn_build

say "C++ tests (ctest)"
run ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

say "CMake package: install, then examples/consumer with find_package and with FetchContent"
run env BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" bash "$PAGEDATTN_ROOT/scripts/consumer.sh"

# libFuzzer on validate() and plan() (cpu backend) for FUZZ_SECONDS (default 60): clang and libFuzzer are
# installed when root; skipped with a message where neither is there nor can be installed.
say "fuzzing: tests/fuzz/run.sh ${FUZZ_SECONDS:-60}"
run env BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" FUZZ_OPTIONAL=1 bash "$PAGEDATTN_ROOT/tests/fuzz/run.sh" "${FUZZ_SECONDS:-60}"

# ThreadSanitizer on the cpu backend's OpenMP threads (clang, libomp with Archer) and the aarch64 build
# (cross-compiled, its oracle comparison run under qemu-user): packages installed when root, else skipped
# with a message.
say "ThreadSanitizer: tests/tsan.sh"
run env BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" TSAN_OPTIONAL=1 bash "$PAGEDATTN_ROOT/tests/tsan.sh"
# AddressSanitizer and UndefinedBehaviorSanitizer over the cpu-labelled tests (the build's compiler; planted
# errors must be reported first)
say "AddressSanitizer + UndefinedBehaviorSanitizer: tests/sanitize.sh"
run env BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" SANITIZE_OPTIONAL=1 bash "$PAGEDATTN_ROOT/tests/sanitize.sh"
say "aarch64: tests/aarch64.sh"
run env BUILD_DIR="$BUILD_DIR" JOBS="$JOBS" AARCH64_OPTIONAL=1 bash "$PAGEDATTN_ROOT/tests/aarch64.sh"

# ---- Python tests --------------------------------------------------------------------------------
# The package is built into a venv under the build dir (it sees the system's packages, e.g. PyTorch
# where installed, so the torch and GPU tests run there and skip with a message elsewhere), with the
# same CUDA choice as the C++ build; build-dir under $BUILD_DIR keeps rebuilds incremental.
say "Python package (pip install .) and its tests (pytest)"
PY="${PYTHON:-python3}"
if "$PY" -m venv --system-site-packages "$BUILD_DIR/pyenv" >/dev/null 2>&1; then
  PY="$BUILD_DIR/pyenv/bin/python"
else
  say "no venv module for $PY: installing the package into it directly"
fi
PY_CUDA=OFF
if [ "${PAGEDATTN_BUILT_CUDA:-0}" = 1 ]; then PY_CUDA=ON; fi
run "$PY" -m pip install -q scikit-build-core nanobind numpy pytest openvino
# PyTorch for tests/python/test_torch.py (the custom op, opcheck, torch.compile on the CPU). Only PyPI is
# reachable, whose Linux torch is the CUDA build: ~5.4 GB installed with its nvidia-* wheels, ~1 min here.
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  run "$PY" -m pip install -q torch
fi
run "$PY" -c "import torch; print('torch', torch.__version__)"
run env CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" PAGEDATTN_CUDA="$PY_CUDA" "$PY" -m pip install -q --no-build-isolation \
  -C build-dir="$BUILD_DIR/wheel" "$PAGEDATTN_ROOT"
(cd "$BUILD_DIR" && run "$PY" -m pytest "$PAGEDATTN_ROOT/tests/python" -q -rs -p no:cacheprovider)
# ---- end of Python tests -------------------------------------------------------------------------

say "all tests passed"
