#!/usr/bin/env bash
# One device call for memgrad's CUDA backend (issue #28): correctness first, then the numbers, all
# within BUDGET seconds (default 450), so the call fits a 15-minute lease with time to rerun it.
# After bench/gpu/pack.sh here, in the device tool:
#   run(command="bash bench/gpu/device_check.sh", carry=[".prebuilt", ".device"], timeout_s=540)
# Every stage runs under its own timeout and reports its exit status: a failure or a hang costs that
# stage, never the call. Stages:
#   0 env       the device, driver, toolkit and torch; the carried programs (.prebuilt/mg.tar.gz: built
#               here for sm_90), else a build of them there (.device/debs: the -dev packages)
#   1 test_gpu  every case of the gpu suite against the cpu, with durations
#   2 sanitize  racecheck over attention (the mma kernels' shared tiles), memcheck over a subset
#   3 step      GPT-2-124M, batch 8 x 1024, bf16, fused attention: memgrad against torch eager
#   4 kernels   bench_gpu_kernels (against the copy and GEMM peaks measured in the run), kernels.py
#   5 extras    while time is left: torch.compile on the same step; `memgrad train` on GPT-2-124M
#               (planned == measured, bytes outside the ledger)
# What comes back in $OUT (at most 4 files; the tool returns 8): summary.txt (each stage's status,
# the step and kernel tables of bench/gpu/summarize.py; printed at the end), failures.txt (the
# gpu suite's failed checks, the sanitizers' errors), results.tar.gz (every log and JSON). The
# summary grows line by line and the archive is rewritten after every stage, so a call cut short
# keeps what ran.
# DRY_RUN=1: on a machine without a GPU or programs, each stage says what it would run (CI checks
# this: tests/cuda/check_device_harness.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS BUDGET=${BUDGET:-450} OUT=${OUT:-/tmp/mg-out} DRY_RUN=${DRY_RUN:-0}
W=$(mktemp -d /tmp/mg-check.XXXXXX)  # logs and JSON; archived into $OUT/results.tar.gz
mkdir -p "$OUT"
: > "$OUT/summary.txt"
: > "$OUT/failures.txt"
left() { echo $((BUDGET - (SECONDS - T0))); }
note() { echo "$*" >> "$OUT/summary.txt"; }  # the whole summary is printed at the end
stage() {
  note "== $* (t=$((SECONDS - T0)) s, $(left) s left)"
  echo "== $* (t=$((SECONDS - T0)) s)"  # progress, in case the call is cut short
}
archive() { tar -czf "$OUT/results.tar.gz" -C "$W" . 2> /dev/null; }
# run NAME SECONDS CMD...: stdout and stderr to NAME.log; never fatal. The stage gets at most what is
# left, less 15 s for the rest to report; with 20 s or less left it is skipped.
run() { run_into "" "$@"; }
# run_json NAME SECONDS CMD...: as run, but stdout (one JSON object) to NAME.json, for summarize.py.
run_json() { run_into "$W/$1.json" "$@"; }
run_into() {
  local json=$1 name=$2 t=$3 start=$SECONDS rc
  shift 3
  if [ "$(left)" -le 20 ]; then note "$name: SKIPPED (budget spent)"; return 0; fi
  [ "$t" -gt "$(($(left) - 15))" ] && t=$(($(left) - 15))
  if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: timeout $t $*" > "$W/$name.log"
    note "$name: dry run (timeout ${t} s): $*"
    return 0
  fi
  if [ -n "$json" ]; then
    timeout -k 5 "$t" "$@" > "$json" 2> "$W/$name.log"
  else
    timeout -k 5 "$t" "$@" > "$W/$name.log" 2>&1
  fi
  rc=$?
  note "$name: rc=$rc in $((SECONDS - start)) s$([ $rc = 124 ] && echo " (TIMED OUT after $t s)")"
}

export PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
stage "0 env"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1
  compute-sanitizer --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  uname -r
  nproc
} > "$W/env.log" 2>&1
cat "$W/env.log" >> "$OUT/summary.txt"
. bench/gpu/device_env.sh > "$W/device_env.log" 2>&1

B=/tmp/mg
if [ "$DRY_RUN" = 1 ] && [ -f .prebuilt/mg.tar.gz ]; then
  note "programs: dry run: the carried .prebuilt/mg.tar.gz would be unpacked into $B"
elif [ "$DRY_RUN" = 0 ] && [ -f .prebuilt/mg.tar.gz ] && mkdir -p $B && tar -xzf .prebuilt/mg.tar.gz -C $B &&
  LD_LIBRARY_PATH="$B/lib:$LD_LIBRARY_PATH" "$B/bin/test_gpu" -ltc > /dev/null 2> "$W/prebuilt.log"; then
  export LD_LIBRARY_PATH="$B/lib:$LD_LIBRARY_PATH"
  note "programs: the carried .prebuilt ($(cat $B/BUILD_INFO 2> /dev/null))"
else
  note "programs: no usable .prebuilt ($(head -c 300 "$W/prebuilt.log" 2> /dev/null)); building them here"
  B=/tmp/mgb
  run configure 120 cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DMG_NATIVE=ON -DMG_BUILD_BENCH=ON -DMG_BUILD_TESTS=ON -DMG_BUILD_EXAMPLES=OFF
  run build 420 cmake --build $B -j "$(nproc)" --target test_gpu bench_gpu_kernels bench_train_step memgrad_cli
  mkdir -p $B/bin
  ln -sf $B/tests/test_gpu $B/bench/gpu/bench_gpu_kernels $B/bench/bench_train_step $B/bin/ 2> /dev/null
fi
archive
[ "$DRY_RUN" = 1 ] || [ -x "$B/bin/test_gpu" ] || { note "no test_gpu: nothing more to run"; archive; exit 1; }

stage "1 test_gpu: every case against the cpu"
run test_gpu 150 "$B/bin/test_gpu" -d
tail -n 4 "$W/test_gpu.log" >> "$OUT/summary.txt" 2> /dev/null
grep -E "ERROR|FATAL|TEST CASE|SUBCASE" "$W/test_gpu.log" 2> /dev/null | head -200 >> "$OUT/failures.txt"
archive

stage "2 sanitize: racecheck over attention, memcheck over a subset"
run racecheck 70 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/bin/test_gpu" -tc='*attention*'
# The kernels and runtime added after the first audit (8-bit Adam, Adafactor, rms_norm, expandable
# segments) are in the subset too; the tall Adafactor case (16M rows) is left to the plain run.
run memcheck 100 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/bin/test_gpu" \
  -tc='*attention*,*layer_norm*,*rms_norm*,*softmax*,*entropy*,*index*,*SGD*,*Adam*,*Adafactor*,*GradScaler*,*streams*,*threads*,*budget*,*expandable*' \
  -tce='*taller than*'
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$W/racecheck.log" "$W/memcheck.log" >> "$OUT/summary.txt" 2> /dev/null
grep -hE -A6 "^========= (Invalid|Race|Error|Program hit)" "$W/racecheck.log" "$W/memcheck.log" 2> /dev/null |
  head -150 >> "$OUT/failures.txt"
archive

shape=(12 12 768 50257 8 1024)  # GPT-2-124M: n_layer n_head n_embd vocab batch seq
stage "3 step: GPT-2-124M bf16, memgrad against torch eager"
MG_DEVICE=cuda MG_PRECISION=bf16 run_json step.bf16.mg 90 "$B/bin/bench_train_step" gpt-fused 5 "${shape[@]}"
MG_DEVICE=cuda MG_PRECISION=bf16 run_json step.bf16.eager 90 python3 bench/compare/train_step.py gpt-fused 5 "${shape[@]}"
archive

stage "4 kernels: bench_gpu_kernels and kernels.py"
run kernels_mg 100 "$B/bin/bench_gpu_kernels" --json "$W/kernels.json"
run kernels_torch 70 python3 bench/gpu/kernels.py --json "$W/kernels_torch.json"
archive

stage "5 extras while time is left: torch.compile, memgrad train"
if [ "$(left)" -gt 150 ]; then
  TORCH_COMPILE=1 MG_DEVICE=cuda MG_PRECISION=bf16 run_json step.bf16.compile $(($(left) - 75)) \
    python3 bench/compare/train_step.py gpt-fused 5 "${shape[@]}"
fi
run train_gpt2 60 "$B/bin/memgrad" train --model gpt2-124m --batch 8 --seq 1024 --attention fused --device cuda \
  --timeline '' --sample 0 --log-every 1 --precision bf16 --steps 3
grep -hE "planned on meta|outside|tokens/s" "$W/train_gpt2.log" >> "$OUT/summary.txt" 2> /dev/null

stage "done"
[ "$DRY_RUN" = 1 ] || python3 bench/gpu/summarize.py "$W" >> "$OUT/summary.txt" 2>&1
archive
rm -rf "$W"
cat "$OUT/summary.txt"
