#!/usr/bin/env bash
# Builds pagedattn (installing missing Debian packages when run as root) and runs the tests. The GPU
# tests skip with a message when no GPU is visible.
set -euo pipefail
source "$(dirname "$0")/setup.sh"

pagedattn_install_packages
pagedattn_build

say "C++ tests (ctest)"
run ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

# ---- Python tests --------------------------------------------------------------------------------
# (appended by the Python bindings' work: install the package and run pytest here)
# ---- end of Python tests -------------------------------------------------------------------------

say "all tests passed"
