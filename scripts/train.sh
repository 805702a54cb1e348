#!/usr/bin/env bash
# The main job: installs missing Debian packages, builds memgrad (Release) in build/ and runs
# `memgrad train`: a small GPT on the embedded sonnets, with a live line of loss, throughput and
# memory, then the memory report (categories, owners, planned vs measured peak, optimizer state).
#   scripts/train.sh [memgrad train flags]      build directory: $MG_BUILD_DIR (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build}
source "$root/scripts/setup_deps.sh"
mg_install_packages "${MG_PACKAGES[@]}"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target memgrad_cli
"$build/bin/memgrad" train "$@"
