#!/usr/bin/env bash
# Data-parallel step time: the same training (global batch of 2 micro-batches per step) run by one
# process with --accum 2 and by 2 processes under mpirun (ZeRO stages 0, 1, 2), with the share of
# each run's time that rank 0 spent blocked waiting for reductions and gathers. All runs use
# `memgrad train` and all the machine's cores (one process: OMP_NUM_THREADS = nproc; N ranks:
# nproc / N threads each). Rounds alternate the configurations; the table shows medians.
#   bench/run_data_parallel.sh [memgrad train flags...]     build directory: $MG_BUILD_DIR (default build-bench)
#   ROUNDS=3 STEPS=30
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
rounds=${ROUNDS:-3}
steps=${STEPS:-30}
command -v mpirun >/dev/null || { echo "mpirun not found: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_CUDA=OFF -DMG_MPI=ON -DMG_BUILD_TESTS=OFF \
  -DMG_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target memgrad_cli >/dev/null
bin=$build/bin/memgrad
cores=$(nproc)
flags=(--steps "$steps" --sample 0 --timeline '' --log-every 1000000 "$@")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME RANKS [train flags]: appends "ms_per_step comm_percent" to $out/NAME.
run() {
  local name=$1 ranks=$2
  shift 2
  if [ "$ranks" -eq 1 ]; then
    OMP_NUM_THREADS=$cores "$bin" train "${flags[@]}" "$@" >"$out/log"
  else
    OMP_NUM_THREADS=$((cores / ranks > 0 ? cores / ranks : 1)) mpirun -np "$ranks" --allow-run-as-root \
      --oversubscribe "$bin" train "${flags[@]}" "$@" >"$out/log"
  fi
  awk -v steps="$steps" '
    /^trained/ { t = $5; unit = $6; sub(/:$/, "", unit); ms = unit == "s" ? t * 1000 : t }
    /^communication:/ { c = $(NF); gsub(/[()%]/, "", c) }
    END { printf "%.2f %s\n", ms / steps, c == "" ? "-" : c }' "$out/log" >>"$out/$name"
}

for ((r = 1; r <= rounds; ++r)); do
  run one 1 --accum 2
  run zero0 2 --zero 0
  run zero1 2 --zero 1
  run zero2 2 --zero 2
done

median() { sort -n -k"$2" "$1" | awk -v k="$2" '{ v[NR] = $k } END { print v[int((NR + 1) / 2)] }'; }
echo "memgrad train ${flags[*]}; $rounds rounds, medians; $cores cores, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-28s %12s %22s\n" "run" "ms / step" "blocked on comm (%)"
printf "%-28s %12s %22s\n" "1 process, --accum 2" "$(median "$out/one" 1)" "-"
for z in 0 1 2; do
  printf "%-28s %12s %22s\n" "2 processes, --zero $z" "$(median "$out/zero$z" 1)" "$(median "$out/zero$z" 2)"
done
