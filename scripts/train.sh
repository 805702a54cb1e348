#!/usr/bin/env bash
# The main job: installs missing Debian packages, builds memgrad (Release) in build/ and runs
# `memgrad train`: a small GPT on the embedded sonnets, with a live line of loss, throughput and
# memory, then the memory report (categories, owners, planned vs measured peak, optimizer state).
#   scripts/train.sh [memgrad train flags]      build directory: $MG_BUILD_DIR (default build)
# A new build directory gets the CUDA backend only where a GPU is visible (nvidia-smi -L), for that
# GPU's architecture; scripts/test.sh builds it wherever nvcc is (for sm_90) and checks it. Its CPU
# kernels are compiled for the baseline and this CPU's ISA level only (MG_CPU_LEVELS=host; test.sh
# adds the others).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build}
source "$root/scripts/setup_deps.sh"
mg_install_packages "${MG_PACKAGES[@]}"

config=()
if [ -f "$build/CMakeCache.txt" ]; then
  :  # configured before (by test.sh, say): its CUDA and CPU-level choices stand, so nothing is rebuilt for them
elif nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  config=(-DMG_CPU_LEVELS=host -DCMAKE_CUDA_ARCHITECTURES=native)  # the CUDA backend (where nvcc is) for this GPU only
else
  config=(-DMG_CPU_LEVELS=host -DMG_CUDA=OFF)
  echo "note: no GPU visible (nvidia-smi -L): building without the CUDA backend (scripts/test.sh builds it)" >&2
fi
cmake -S "$root" -B "$build" $(mg_generator "$build") -DCMAKE_BUILD_TYPE=Release ${config[@]+"${config[@]}"}
cmake --build "$build" -j"$(nproc)" --target memgrad_cli
"$build/bin/memgrad" train "$@"
