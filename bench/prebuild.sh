#!/usr/bin/env bash
# Run HERE (nvcc compiles without a GPU) before a GPU call, so that the call spends its device time
# running, not compiling: builds the working tree's CUDA CLI and GPU tests (and the CLI of every
# .abref/<commit>/ that bench/prepare_abref.sh exported) and packs them into .prebuilt/bin.tar.xz
# (git-ignored; name .prebuilt and .commit in the device call's `carry`). bench/gpu.sh's build stage and
# its abref refs then unpack these binaries instead of building. The binaries' id is written to .commit
# too, and each binary carries the sha1 of the sources it was built from: gpu.sh refuses an archive whose
# id differs from the carried .commit or whose sources differ from the carried tree's. Packed (xz -9),
# the CLI takes 18.6 MB and one ref's CLI 13 MB more (run in1's calls); the CLI with test_cuda built in one
# tree packed to 19.2 MB at 75f065e (run hp1; xz shares their library code), where in1's pair took 32.9 MB.
# Beside .wheels (31 MB) none fits: the sum printed last decides.
#   usage: bench/prebuild.sh          (PREBUILD_DIR: the build tree, default build-cu; CUDA_ARCHS: default
#                                      90a-real, the GPU machine's H100 / H200; PREBUILD_TARGETS: default
#                                      "pagedattn test_cuda"; mma_rounding packs bench/mma_rounding.cu too)
# A build from scratch takes ~20 minutes on a 2-core VM; later builds recompile what changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${PREBUILD_DIR:-$root/build-cu}
archs=${CUDA_ARCHS:-90a-real}
id="$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo +dirty)"
# configure_build SRC DIR TARGETS...: the Release CUDA tree bench/gpu.sh's configure() makes (this
# machine's own gtest, CLI11 and nlohmann-json: the ones .deps copies)
configure_build() {
  local src=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGEDATTN_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$archs" -DCMAKE_CUDA_FLAGS= > "$dir/prebuild_configure.log" 2>&1 ||
    { tail -20 "$dir/prebuild_configure.log"; return 1; }
  ninja -C "$dir" "$@" > "$dir/prebuild_build.log" 2>&1 ||
    { grep -E "error|FAILED" "$dir/prebuild_build.log" | head -20; echo "prebuild: $dir failed (prebuild_build.log)"; return 1; }
}
# sources_sha1 DIR: the sha1 of each file a build of DIR compiles, as paths from the repository root
# (gpu.sh checks them there with sha1sum -c: a tree edited after its build is refused)
sources_sha1() {
  local start=.
  [ "$1" = "$root" ] || start=${1#"$root"/}
  (cd "$root" && find "$start" -type d \( -name bench -o -name .abref -o -name "build*" -o -name ".git" -o -name .deps \
     -o -name .prebuilt -o -name python \) -prune -o -type f \( -path "*/src/*" -o -path "*/include/*" -o -path "*/tools/*" \
     -o -path "*/tests/*" -o -path "*/cmake/*" -o -name CMakeLists.txt \) -print0 | sort -z | xargs -0 sha1sum)
}
# a failed build leaves no archive that gpu.sh could take for this tree
rm -f "$root/.prebuilt/bin.tar.xz"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
targets=${PREBUILD_TARGETS:-pagedattn test_cuda}
# the Debian packages the configure step needs (CLI11, nlohmann-json, gtest), installed when root: a fresh
# machine has them only after scripts/test.sh
(source "$root/scripts/setup.sh" && pagedattn_install_packages)
# shellcheck disable=SC2086
configure_build "$root" "$build" $targets
mkdir -p "$stage/main/tests"
cp "$build/pagedattn" "$stage/main/"
[[ " $targets " != *" test_cuda "* ]] || cp "$build/tests/test_cuda" "$stage/main/tests/"
[[ " $targets " != *" mma_rounding "* ]] || cp "$build/mma_rounding" "$stage/main/"
echo "$id" > "$stage/main/.commit"
sources_sha1 "$root" > "$stage/main/sources.sha1"
for src in "$root"/.abref/*/; do
  [ -f "$src/.commit" ] || continue
  ref=$(cat "$src/.commit")
  echo "prebuild: ref $ref"
  configure_build "$src" "$build-ref-$ref" pagedattn
  mkdir -p "$stage/ref-$ref"
  cp "$build-ref-$ref/pagedattn" "$stage/ref-$ref/"
  sources_sha1 "${src%/}" > "$stage/ref-$ref/sources.sha1"
done
mkdir -p "$root/.prebuilt"
tar cf - -C "$stage" . | xz -T1 -9 > "$root/.prebuilt/bin.tar.xz.tmp"
mv "$root/.prebuilt/bin.tar.xz.tmp" "$root/.prebuilt/bin.tar.xz"
echo "$id" > "$root/.commit"
echo "prebuild: $id ($archs), $(ls "$stage" | tr '\n' ' ')-> .prebuilt/bin.tar.xz ($(du -h "$root/.prebuilt/bin.tar.xz" | cut -f1)); carry .prebuilt .commit (.deps, .abref)"
# What a call carries travels with the tracked files, under the device tool's 64 MiB (the calls of runs
# in1 and f8h2: 67.9 and 78.9 MB refused, 53.6 and 63.8 MB passed): say what this archive makes of it.
bytes() { (cd "$root" && xargs -0 stat -c %s) | awk '{ s += $1 } END { print s + 0 }'; }
tracked=$(git -C "$root" ls-files -z | bytes)
carry=()
for f in .prebuilt .commit .deps .abref; do [ ! -e "$root/$f" ] || carry+=("$f"); done
carried=$(cd "$root" && find "${carry[@]}" -type f -print0 | bytes)
total=$((tracked + carried))
echo "prebuild: with .deps and .abref the call carries $((total >> 20)) MiB (tracked files $((tracked >> 20)) MiB)"
[ "$total" -le $((64 << 20)) ] || echo "prebuild: over the device tool's 64 MiB: carry less (PREBUILD_TARGETS=pagedattn, fewer refs)" >&2
