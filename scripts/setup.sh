# Sourced by scripts/bench.sh and scripts/test.sh: installs missing Debian packages (when root) and
# builds pagedattn into build/ (Release, Ninja; the CUDA backend when nvcc is present).
# Environment: BUILD_DIR (default build, relative to the checkout), JOBS (default: all cores), PAGEDATTN_CUDA (ON|OFF to force).

PAGEDATTN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-build}"
case "$BUILD_DIR" in /*) ;; *) BUILD_DIR="$PAGEDATTN_ROOT/$BUILD_DIR" ;; esac
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
PAGEDATTN_DEB_PACKAGES=(cmake ninja-build g++ libgtest-dev libcli11-dev nlohmann-json3-dev)

say() { echo "==> $*"; }
run() { echo "+ $*"; "$@"; }

pagedattn_install_packages() {
  command -v dpkg >/dev/null 2>&1 || { say "not a Debian system: install ${PAGEDATTN_DEB_PACKAGES[*]} (or equivalents) yourself"; return 0; }
  local missing=() p
  for p in "${PAGEDATTN_DEB_PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "Debian packages present: ${PAGEDATTN_DEB_PACKAGES[*]}"
  elif [ "$(id -u)" = 0 ]; then
    say "installing missing Debian packages: ${missing[*]}"
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    say "missing Debian packages: ${missing[*]}; not root, so not installing them (sudo apt-get install ${missing[*]})"
  fi
}

# Installs Debian packages when root on a Debian system (apt-get); returns 1 elsewhere, so callers can
# say what is missing (tests/fuzz/run.sh, tests/tsan.sh, tests/aarch64.sh).
pagedattn_apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    run apt-get update -qq
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
  else
    return 1
  fi
}

# For the optional test stages (tests/fuzz/run.sh, tests/tsan.sh, tests/aarch64.sh): a tool they need is
# missing. pagedattn_unavailable OPTIONAL SCRIPT MESSAGE: with OPTIONAL=1 say that the stage is skipped
# and exit 0 (scripts/test.sh runs them so), else print the message and exit 1.
pagedattn_unavailable() {
  if [ "$1" = 1 ]; then
    say "$2 skipped: $3"
    exit 0
  fi
  echo "$2: $3" >&2
  exit 1
}

# Sets PAGEDATTN_HAS_NVCC=1 when a CUDA compiler is found (also in /usr/local/cuda/bin, added to PATH).
pagedattn_find_nvcc() {
  PAGEDATTN_HAS_NVCC=0
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  command -v nvcc >/dev/null 2>&1 && PAGEDATTN_HAS_NVCC=1
  return 0
}

pagedattn_build() {
  pagedattn_find_nvcc
  local cuda="${PAGEDATTN_CUDA:-}"
  if [ -z "$cuda" ]; then
    if [ "$PAGEDATTN_HAS_NVCC" = 1 ]; then cuda=ON; else cuda=OFF; fi
  fi
  PAGEDATTN_BUILT_CUDA=0
  if [ "$cuda" = ON ] || { [ "$cuda" = AUTO ] && [ "$PAGEDATTN_HAS_NVCC" = 1 ]; }; then PAGEDATTN_BUILT_CUDA=1; fi
  if [ "$PAGEDATTN_BUILT_CUDA" = 1 ]; then
    say "building with the CUDA backend ($(command -v nvcc)); on few cores this takes a while"
  else
    say "building without the CUDA backend (no nvcc found, or PAGEDATTN_CUDA=$cuda)"
  fi
  run cmake -S "$PAGEDATTN_ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA="$cuda"
  run cmake --build "$BUILD_DIR" -j "$JOBS"
}

# True when a GPU is visible to nvidia-smi and the build has the CUDA backend (after pagedattn_build).
pagedattn_gpu_visible() {
  [ "${PAGEDATTN_BUILT_CUDA:-0}" = 1 ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}
