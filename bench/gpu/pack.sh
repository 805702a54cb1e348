#!/usr/bin/env bash
# Prepares this checkout, on the CPU machine, for one call of bench/gpu/device_check.sh on the GPU
# machine (which has no network, no OpenBLAS, no MPI and no Debian -dev packages):
#   .prebuilt/mg.tar.gz   libmemgrad and the programs a device call runs (test_gpu, bench_gpu_kernels,
#                         bench_train_step, memgrad), built here for sm_90 with MG_NATIVE=OFF,
#                         MG_OPENBLAS=OFF, MG_ONEDNN=OFF, MG_MPI=OFF and MG_GLPK=OFF,
#                         stripped, with BUILD_INFO (commit, flags)
#   .device/debs/         the build dependencies as .deb files, for a build there when the prebuilt
#                         programs do not start (bench/gpu/device_env.sh unpacks them)
# Both are ignored by git (info/exclude) and travel as carry=[".prebuilt", ".device"]; it ends by
# checking that they fit what a call may send (MAX_MIB, default 60 of the tool's 64 MiB, with the tree).
#   bench/gpu/pack.sh [--no-debs]      build folder: $BUILD (default build-prebuilt)
# Needs the CUDA toolkit (nvcc) and, for the debs, apt-get (run `apt-get update` once if it fails).
# What the prebuilt needs there: libcudart and libcublas(Lt) 13 (the toolkit), libcudnn.so.9 and
# libnccl.so.2 (PyTorch's nvidia-* wheels), libgomp1, glibc >= 2.34 and GLIBCXX_3.4.30.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
debs=1
[ "${1:-}" = --no-debs ] && debs=0
build=${BUILD:-build-prebuilt} max_mib=${MAX_MIB:-60}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for p in /.prebuilt/ /.device/ "/$build/"; do grep -qxF "$p" "$exclude" 2> /dev/null || echo "$p" >> "$exclude"; done
export PATH="/usr/local/cuda/bin:$PATH"

gen=()
command -v ninja > /dev/null && gen=(-G Ninja)
flags=(-DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DMG_NATIVE=OFF -DMG_OPENBLAS=OFF
  -DMG_MPI=OFF -DMG_ONEDNN=OFF -DMG_GLPK=OFF -DMG_BUILD_BENCH=ON -DMG_BUILD_TESTS=ON -DMG_BUILD_EXAMPLES=OFF)
cmake -S . -B "$build" "${gen[@]}" "${flags[@]}" > /dev/null
cmake --build "$build" -j "$(nproc)" --target test_gpu bench_gpu_kernels bench_train_step memgrad_cli
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib"
cp -L "$build"/libmemgrad.so "$build"/libmemgrad_omp_defaults.so "$stage/lib/"
cp "$build"/tests/test_gpu "$build"/bench/gpu/bench_gpu_kernels "$build"/bench/bench_train_step "$build"/bin/memgrad "$stage/bin/"
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*
# The GPU machine has no Debian libraries: each library a packed file needs must be one it has (the
# CUDA toolkit's, cuDNN and NCCL from PyTorch's wheels, the C/C++ runtime), else the prebuilt does not
# start there and the call spends its minutes building.
have='^(libcudart|libcublas|libcublasLt|libcudnn|libnccl|libcuda|libgomp|libmemgrad|libmemgrad_omp_defaults|libstdc\+\+|libm|libgcc_s|libc|libdl|libpthread|librt|ld-linux-x86-64)\.so'
for f in "$stage"/bin/* "$stage"/lib/*; do
  for lib in $(readelf -d "$f" | awk '/NEEDED/ { gsub(/[][]/, "", $5); print $5 }'); do
    [[ $lib =~ $have ]] || { echo "pack.sh: $(basename "$f") needs $lib, which the GPU machine lacks: configure its option OFF" >&2; exit 1; }
  done
done
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +changes), built $(date -u +%F) with ${flags[*]}" \
  > "$stage/BUILD_INFO"
rm -rf .prebuilt && mkdir -p .prebuilt
tar -czf .prebuilt/mg.tar.gz -C "$stage" .
rm -rf "$stage"

if [ $debs = 1 ]; then
  rm -rf .device && mkdir -p .device/debs
  sandbox=()  # as root, apt's download user cannot write here: download as root, without its warning
  [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
  (cd .device/debs && apt-get "${sandbox[@]}" download libeigen3-dev doctest-dev nlohmann-json3-dev libbenchmark-dev \
    libbenchmark1debian libcli11-dev > /dev/null) || { echo "apt-get download failed: run apt-get update once" >&2; exit 1; }
fi

# What a call sends: tracked files, untracked files git does not ignore, and the carried folders.
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2> /dev/null | tail -1 | cut -f1)
carried=$(du -cb .prebuilt $([ -d .device ] && echo .device) | tail -1 | cut -f1)
total_mib=$(((tree + carried + 1048575) / 1048576))
echo "packed: .prebuilt $(du -h .prebuilt/mg.tar.gz | cut -f1)$([ -d .device ] && echo ", .device $(du -sh .device | cut -f1)");" \
  "a call sends about $total_mib MiB (tree $((tree / 1048576)) MiB)"
[ $total_mib -le "$max_mib" ] || { echo "over $max_mib MiB: too much to send in one call" >&2; exit 1; }
echo 'then: run(command="bash bench/gpu/device_check.sh", carry=[".prebuilt", ".device"], timeout_s=540)'
