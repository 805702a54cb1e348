#!/usr/bin/env bash
# The test suite: installs missing Debian packages, builds everything in build/ (Release; the
# CUDA backend when nvcc is found), then runs ctest. Labels: unit, gpu (skip without a GPU), browser
# (the memory timeline page in headless chromium; skips without chromium), slow.
# Without ctest arguments it then builds the fuzz targets with clang in <build>-fuzz and runs each
# briefly (label fuzz; MG_FUZZ=OFF skips them).
#   scripts/test.sh [ctest args, e.g. -L unit]      build directory: $MG_BUILD_DIR (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build}
source "$root/scripts/setup_deps.sh"
fuzz=${MG_FUZZ:-$([ $# -eq 0 ] && echo ON || echo OFF)}
if [ "$fuzz" = ON ]; then
  mg_install_packages "${MG_PACKAGES[@]}" "${MG_FUZZ_PACKAGES[@]}"
else
  mg_install_packages "${MG_PACKAGES[@]}"
fi
mg_try_install_packages "${MG_BROWSER_PACKAGES[@]}"  # the browser test; it skips without chromium

if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
cuda=${MG_CUDA:-$(command -v nvcc >/dev/null && echo ON || echo OFF)}
# With nvcc the suite builds the CUDA backend and checks it without a GPU (tests/cuda: the objects'
# architectures and spills, the mma kernels emulated on the host); the gpu suite itself skips.
if [ "$cuda" = OFF ]; then
  echo "NOTE: no nvcc (CUDA toolkit): the CUDA backend is not built, and its checks (tests/cuda) are skipped" >&2
fi

config=(-DMG_CUDA="$cuda" -DMG_CPU_LEVELS=all)  # every ISA level's CPU kernels, which tests/ checks (train.sh: host)
if [ "$cuda" = ON ] && [ "$(mg_cached "$build" CMAKE_CUDA_ARCHITECTURES)" = native ]; then
  config+=(-DCMAKE_CUDA_ARCHITECTURES=90)  # train.sh's GPU-only build: tests/cuda checks sm_90 and compute_90
fi
cmake -S "$root" -B "$build" $(mg_generator "$build") -DCMAKE_BUILD_TYPE=Release "${config[@]}" -DMG_BUILD_TESTS=ON \
  -DMG_BUILD_EXAMPLES=ON
cmake --build "$build" -j"$(nproc)"
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@")
# How many of the CUDA kernels the emulated suite ran (tests/cuda), which ctest shows only on failure.
grep -h "^emulated kernels:" "$build/Testing/Temporary/LastTest.log" 2>/dev/null || true
if [ "$cuda" = OFF ]; then
  echo "NOTE: the CUDA checks of tests/cuda were skipped: no nvcc" >&2
fi

# A second build for libFuzzer: clang, the code the targets drive instrumented with ASan and UBSan (-O1
# keeps it quick), the CPU kernels (not instrumented) compiled once, for the baseline; the emulated CUDA
# kernels (tests/cuda) run there too.
if [ "$fuzz" = ON ]; then
  cmake -S "$root" -B "$build-fuzz" $(mg_generator "$build-fuzz") -DCMAKE_CXX_COMPILER=clang++ -DMG_FUZZ=ON \
    -DMG_CUDA=OFF -DMG_CPU_DISPATCH=OFF -DMG_BUILD_TESTS=OFF -DMG_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE=-O1
  cmake --build "$build-fuzz" -j"$(nproc)" --target fuzz_suite
  cd "$build-fuzz"
  exec ctest --output-on-failure -L fuzz
fi
