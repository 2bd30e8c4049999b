#!/usr/bin/env bash
# Run HERE (the CPU machine) before a GPU call: the GPU machine cannot install packages, so the
# build dependencies of the tests and CLI (Debian's libgtest-dev, libcli11-dev, nlohmann-json3-dev)
# travel with the working tree in .deps/ (git-ignored; name it in the device call's `carry`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
d=$root/.deps
rm -rf "$d"
mkdir -p "$d/include" "$d/share/cmake" "$d/lib/x86_64-linux-gnu/cmake"
cp -r /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann "$d/include/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$d/share/cmake/"
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a "$d/lib/x86_64-linux-gnu/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/GTest "$d/lib/x86_64-linux-gnu/cmake/"
du -sh "$d"
