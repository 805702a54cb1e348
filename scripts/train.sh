#!/usr/bin/env bash
# The main job: installs missing Debian packages, builds memgrad (Release) in build/ and trains
# a small MLP on synthetic data, printing the loss as it falls and the memory ledger at the end.
#   scripts/train.sh [steps] [hidden]      build directory: $MG_BUILD_DIR (default build)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build}
source "$root/scripts/setup_deps.sh"
mg_install_packages "${MG_PACKAGES[@]}"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j"$(nproc)" --target train_mlp
"$build/examples/train_mlp" "$@"
