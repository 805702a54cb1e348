#!/usr/bin/env bash
# The test suite: installs missing Debian packages, builds everything in build/ (Release; the
# CUDA backend when nvcc is found), then runs ctest. Labels: unit, gpu (skip without a GPU), slow.
#   scripts/test.sh [ctest args, e.g. -L unit]      build directory: $MG_BUILD_DIR (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build}
source "$root/scripts/setup_deps.sh"
mg_install_packages "${MG_PACKAGES[@]}"

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cuda=${MG_CUDA:-$(command -v nvcc >/dev/null && echo ON || echo OFF)}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=ON -DMG_CUDA="$cuda" -DMG_BUILD_TESTS=ON \
  -DMG_BUILD_EXAMPLES=ON
cmake --build "$build" -j"$(nproc)"
cd "$build"
exec ctest --output-on-failure -j"$(nproc)" "$@"
