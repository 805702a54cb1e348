#!/usr/bin/env bash
# Builds memgrad with CUDA, checks it (the gpu test suite, optionally under compute-sanitizer),
# times every kernel variant and the GPT-2-shaped step, and runs the PyTorch comparison when
# torch with CUDA is importable. Run from anywhere on a machine with a GPU:
#   bench/gpu/run.sh [--quick] [--sanitize] [--arch 90] [--build DIR]
# Results go to DIR/gpu-results/ (text logs and kernels.json); copy the tables to bench/RESULTS.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-gpu-bench" arch=90 quick="" sanitize=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=--quick ;;
    --sanitize) sanitize=1 ;;
    --arch) arch="$2"; shift ;;
    --build) build="$2"; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
export PATH="/usr/local/cuda/bin:$PATH"
out="$build/gpu-results"
mkdir -p "$out"
jobs=$(nproc)

echo "== build ($build, sm_$arch)"
cmake -S "$root" -B "$build" -DMG_NATIVE=ON -DMG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMG_BUILD_BENCH=ON \
  -DMG_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release > "$out/configure.log"
cmake --build "$build" -j "$jobs" --target test_gpu bench_gpu_kernels bench_gpu_gpt2 > "$out/build.log" 2>&1 ||
  { tail -50 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt" || true

echo "== check: gpu suite"
"$build/tests/test_gpu" | tee "$out/test_gpu.log"
if [ "$sanitize" = 1 ]; then
  echo "== check: compute-sanitizer memcheck"
  command -v compute-sanitizer > /dev/null || { echo "compute-sanitizer not found (CUDA toolkit bin/)" >&2; exit 1; }
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/test_gpu" > "$out/memcheck.log" 2>&1 &&
    echo "memcheck clean" || { tail -40 "$out/memcheck.log"; exit 1; }
fi

echo "== time: kernels"
"$build/bench/gpu/bench_gpu_kernels" $quick --json "$out/kernels.json" | tee "$out/kernels.txt"

echo "== time: GPT-2-124M step (batch 8, seq 1024)"
steps=10
[ -n "$quick" ] && steps=3
for attn in "" --fused-attention; do
  for tf in "" --tf32; do
    "$build/bench/gpu/bench_gpu_gpt2" --steps "$steps" $tf $attn | tee -a "$out/gpt2.txt"
  done
done
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  for attn in "" --sdpa; do
    for tf in "" --tf32; do
      python3 "$root/bench/gpu/gpt2_step.py" --steps "$steps" $tf $attn | tee -a "$out/gpt2.txt"
    done
  done
else
  echo "PyTorch with CUDA not importable: the PyTorch comparison did not run" | tee -a "$out/gpt2.txt"
fi
echo "results in $out"
