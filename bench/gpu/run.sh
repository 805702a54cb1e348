#!/usr/bin/env bash
# Builds memgrad with CUDA, checks it and measures it against PyTorch on the same GPU: what issue
# #13 asks for, in stages that fit the device tool's 10-minute calls. Run from anywhere:
#   bench/gpu/run.sh [--quick] [--sanitize] [--arch 90] [--build DIR] [--out DIR [--pack]] [STAGE...]
# Stages (the default: build check kernels train step recompute; --sanitize adds sanitize):
#   build      configure and build test_gpu, the CPU suites, memgrad, bench_gpu_kernels, bench_train_step
#   check      the gpu suite, then the CPU suite (ctest -LE gpu)
#   sanitize   compute-sanitizer memcheck over the gpu suite; racecheck and synccheck over its cases
#              whose kernels use shared memory
#   kernels    bench_gpu_kernels (each kernel against the copy bandwidth and bf16 GEMM rate measured in
#              the same run) and kernels.py (PyTorch on the same rows)
#   train      memgrad train --device cuda: the default job (also under a 24 MiB budget: offload and
#              remat), and GPT-2-124M (batch 8 x 1024) in fp32, bf16 and fp16, reports with planned ==
#              measured and the bytes outside the ledger; then --profile
#   step       the GPT-2-124M AdamW step, fused attention: memgrad, torch eager and torch.compile, in
#              fp32, tf32 and bf16 (bench_train_step and bench/compare/train_step.py)
#   recompute  memgrad's bf16 step under no, every-block and sqrt(n) checkpointing (fused attention),
#              and selective recompute (composed attention)
# PRECISIONS="bf16" (say) limits the step stage to those precisions, to fit a call.
# Every stage writes its logs and JSON to the results folder (DIR/gpu-results unless --out) and
# summarize.py prints the tables for bench/gpu/RESULTS.md at the end. A program that fails is
# reported and the stages after it still run. --pack leaves two files in the results folder,
# summary.md and results.tar.gz (the rest), as the device tool returns at most 8.
# For a first call on a GPU, bench/gpu/device_check.sh is the one to run (it fits one call).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-gpu-bench" arch=90 quick="" out="" stages=() with_sanitize="" pack=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=--quick ;;
    --sanitize) with_sanitize=1 ;;
    --pack) pack=1 ;;
    --arch) arch="$2"; shift ;;
    --build) build="$2"; shift ;;
    --out) out="$2"; shift ;;
    build | check | sanitize | kernels | train | step | recompute) stages+=("$1") ;;
    *) echo "unknown option or stage $1" >&2; exit 2 ;;
  esac
  shift
done
# No stage named: all but sanitize (which --sanitize adds); `run.sh sanitize` runs that stage alone.
want() {
  [ "$1" = sanitize ] && [ -n "$with_sanitize" ] && return 0
  [ ${#stages[@]} -eq 0 ] && [ "$1" != sanitize ] && return 0
  [[ " ${stages[*]-} " == *" $1 "* ]]
}
export PATH="/usr/local/cuda/bin:$PATH" PYTHONUNBUFFERED=1
out="${out:-$build/gpu-results}"
mkdir -p "$out"
py=python3
steps=10 seq=1024
[ -n "$quick" ] && steps=3
stage() { echo "== $1 ($(date -u +%H:%M:%S))"; }

# Always configure and build (quick when nothing changed): every later stage needs the programs.
stage "build ($build, sm_$arch)"
cmake -S "$root" -B "$build" -DMG_NATIVE=ON -DMG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DMG_BUILD_BENCH=ON \
  -DMG_BUILD_TESTS=ON -DMG_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release > "$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
targets=(test_gpu memgrad_cli bench_gpu_kernels bench_train_step)
want check && targets=(all)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt" || true
bin="$build/bin"

# A failing suite is reported, not fatal: the measurements after it still run in the same call.
if want check; then
  stage "check: gpu suite"
  "$build/tests/test_gpu" > "$out/test_gpu.log" 2>&1 || echo "gpu suite FAILED (exit $?): see test_gpu.log"
  tail -4 "$out/test_gpu.log"
  stage "check: CPU suite (ctest -LE gpu)"
  (cd "$build" && ctest -LE gpu -j "$(nproc)" --output-on-failure) > "$out/ctest.log" 2>&1 ||
    echo "CPU suite FAILED (exit $?): see ctest.log"
  grep -E "tests passed|tests failed|\(Failed\)" "$out/ctest.log" || tail -5 "$out/ctest.log"
fi

if want sanitize && ! command -v compute-sanitizer > /dev/null; then
  echo "compute-sanitizer not found (CUDA toolkit bin/): the sanitize stage is skipped" >&2
elif want sanitize; then
  # memcheck over every case; racecheck and synccheck (slower) over the ops whose kernels share memory
  # within a block: attention, loss, norm, reduce and softmax. Each tool stops after SANITIZE_SECONDS
  # (170: the three fit one call; exit 124 says it was cut short, and a call of its own may give more).
  shared='*attention*,*entropy*,*nll*,*norm*,*softmax*,*sum*,*mean*,*max*,*min*,*var*,*std*,*prod*'
  for tool in memcheck racecheck synccheck; do
    stage "sanitize: $tool"
    filter=()
    [ "$tool" = memcheck ] || filter=(-tc="$shared")
    if timeout "${SANITIZE_SECONDS:-170}" compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/tests/test_gpu" "${filter[@]}" \
      > "$out/$tool.log" 2>&1; then
      echo "$tool clean"
    else
      echo "$tool: FAILED or timed out (exit $?)"
      tail -30 "$out/$tool.log"
    fi
  done
fi

if want kernels; then
  stage "kernels: memgrad"
  "$build/bench/gpu/bench_gpu_kernels" $quick --json "$out/kernels.json" > "$out/kernels.txt" 2>&1 ||
    echo "bench_gpu_kernels FAILED (exit $?): see kernels.txt"
  head -3 "$out/kernels.txt"
  stage "kernels: PyTorch"
  $py "$root/bench/gpu/kernels.py" $quick --json "$out/kernels_torch.json" > "$out/kernels_torch.txt" ||
    echo "PyTorch with CUDA did not run: see $out/kernels_torch.txt"
fi

gpt2=(gpt2-124m --batch 8 --seq "$seq" --attention fused --device cuda --timeline '' --sample 0 --log-every 1)
if want train; then
  stage "train: the default job on cuda"
  "$bin/memgrad" train --device cuda --timeline '' > "$out/train_default.txt" 2>&1 || { echo "FAILED (exit $?)"; tail -30 "$out/train_default.txt"; }
  # The budget runtime: offload copies on a side stream (record_stream), eviction and recompute.
  stage "train: the default job under a 24 MiB budget (--offload all --remat dynamic)"
  "$bin/memgrad" train --device cuda --timeline '' --sample 0 --steps 20 --offload all --remat dynamic \
    --memory-limit 24MiB > "$out/train_budget.txt" 2>&1 || { echo "FAILED (exit $?)"; tail -30 "$out/train_budget.txt"; }
  grep -E "evicted|planned on meta" "$out/train_budget.txt" || true
  # fp16 scales the loss: the GradScaler's fused inf check and unscale run on every step.
  for precision in fp32 bf16 fp16; do
    stage "train: GPT-2-124M, $precision"
    "$bin/memgrad" train --model "${gpt2[@]}" --precision "$precision" --steps 4 > "$out/train_gpt2_$precision.txt" 2>&1 ||
      { echo "FAILED (exit $?)"; tail -30 "$out/train_gpt2_$precision.txt"; }
    grep -E "planned on meta|outside|tokens/s" "$out/train_gpt2_$precision.txt" || true
  done
  stage "train: GPT-2-124M bf16 --profile"
  "$bin/memgrad" train --model "${gpt2[@]}" --precision bf16 --steps 3 --profile > "$out/train_gpt2_profile.txt" 2>&1 ||
    { echo "FAILED (exit $?)"; tail -30 "$out/train_gpt2_profile.txt"; }
fi

# GPT-2-124M's shape for bench_train_step and train_step.py: n_layer n_head n_embd vocab batch seq.
shape=(12 12 768 50257 8 "$seq")
if want step; then
  for precision in ${PRECISIONS:-fp32 tf32 bf16}; do
    stage "step: $precision"
    MG_DEVICE=cuda MG_PRECISION=$precision "$build/bench/bench_train_step" gpt-fused "$steps" "${shape[@]}" \
      > "$out/step.$precision.mg.json" || echo "bench_train_step FAILED (exit $?)"
    MG_DEVICE=cuda MG_PRECISION=$precision $py "$root/bench/compare/train_step.py" gpt-fused "$steps" "${shape[@]}" \
      > "$out/step.$precision.eager.json" 2> "$out/step.$precision.eager.log" || echo "torch eager failed: see its log"
    TORCH_COMPILE=1 MG_DEVICE=cuda MG_PRECISION=$precision $py "$root/bench/compare/train_step.py" gpt-fused "$steps" \
      "${shape[@]}" > "$out/step.$precision.compile.json" 2> "$out/step.$precision.compile.log" ||
      echo "torch.compile failed: see its log"
  done
fi

# Block checkpointing on the fused-attention step; selective recompute (the attention core) where it
# has something to drop, the composed attention's [T, T] probabilities.
if want recompute; then
  for run in "gpt-fused none" "gpt-fused every-1" "gpt-fused sqrt" "gpt none" "gpt selective"; do
    read -r workload policy <<< "$run"
    stage "recompute: $workload $policy"
    MG_DEVICE=cuda MG_PRECISION=bf16 MG_CHECKPOINT=$policy "$build/bench/bench_train_step" "$workload" "$steps" \
      "${shape[@]}" > "$out/recompute.$workload.$policy.json" || echo "bench_train_step FAILED (exit $?)"
  done
fi

$py "$root/bench/gpu/summarize.py" "$out" | tee "$out/summary.md"
if [ -n "$pack" ]; then
  (cd "$out" && find . -mindepth 1 -maxdepth 1 ! -name summary.md ! -name results.tar.gz -printf '%P\n' |
    tar -czf results.tar.gz -T - --remove-files)
fi
echo "results in $out"
