#!/usr/bin/env bash
# memgrad against PyTorch on the CPU, in one run with the same thread count: per-op overhead
# (bench_op_overhead vs op_overhead.py) and one training step of an MLP and of a small GPT
# (bench_train_step vs train_step.py: median step time, peak memory). Prints memgrad/PyTorch ratios.
#   bench/compare/run.sh            environment: MG_BUILD_DIR (default build-bench), THREADS (2),
#                                   STEPS (training steps timed per side, default 10), ROUNDS (2)
# Each training workload runs ROUNDS times, the two sides alternating, so that a burst of load on a
# shared machine hits both; the table reports the median of the per-round medians and the best
# single step of all rounds (the figure least inflated by other processes).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
threads=${THREADS:-2}
steps=${STEPS:-10}
rounds=${ROUNDS:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Debian's torch needs Debian's python; a pyenv/venv python3 first on PATH may lack it.
py=${PYTHON:-python3}
"$py" -c "import torch" 2>/dev/null || py=/usr/bin/python3
"$py" -c "import torch" || { echo "PyTorch not importable: apt-get install python3-torch libopenblas0-pthread" >&2; exit 1; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=ON -DMG_CUDA=OFF -DMG_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_op_overhead bench_train_step >/dev/null

# One thread count for every library on both sides (OpenMP for memgrad and ATen, OpenBLAS's own pool).
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads

# Workloads: name, then the arguments both programs take after the workload kind and step count.
# gpt-512f: memgrad's fused attention against torch's F.scaled_dot_product_attention, or against
# its explicit attention where torch (Debian's 1.13) has none; the config column says which.
workloads=("mlp mlp 256 784 1024 2 10" "gpt gpt 4 4 128 2048 8 128" "gpt-256 gpt 4 4 256 4096 8 128"
  "gpt-512 gpt 4 4 256 4096 4 512" "gpt-512f gpt-fused 4 4 256 4096 4 512")
for r in $(seq "$rounds"); do
  for w in "${workloads[@]}"; do
    set -- $w
    name=$1 kind=$2
    shift 2
    "$build/bench/bench_train_step" "$kind" "$steps" "$@" >"$out/mg.$name.$r.json"
    "$py" "$root/bench/compare/train_step.py" "$kind" "$steps" "$@" >"$out/pt.$name.$r.json"
  done
done
"$build/bench/bench_op_overhead" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$out/op_mg.json" --benchmark_out_format=json >/dev/null
"$py" "$root/bench/compare/op_overhead.py" >"$out/op_pt.json"

"$py" - "$out" "$rounds" "${workloads[@]}" <<'PY'
import json, os, statistics, sys
out, rounds, workloads = sys.argv[1], int(sys.argv[2]), [w.split()[0] for w in sys.argv[3:]]
load = open("/proc/loadavg").read().split()[:3]
pt_version = json.load(open(f"{out}/pt.{workloads[0]}.1.json"))["torch"]
print(f"threads {os.environ['OMP_NUM_THREADS']}, torch {pt_version}, load average after the run {' '.join(load)}")
print(f"{'workload':9} {'config':55} {'memgrad ms':>10} {'torch ms':>9} {'ratio':>6} {'mg best':>8} {'pt best':>8} "
      f"{'ratio':>6} {'mg CPU ms':>9} {'pt CPU ms':>9} {'memgrad MiB':>11} {'torch MiB':>9} {'ratio':>6}")
for name in workloads:
    mg = [json.load(open(f"{out}/mg.{name}.{r}.json")) for r in range(1, rounds + 1)]
    pt = [json.load(open(f"{out}/pt.{name}.{r}.json")) for r in range(1, rounds + 1)]
    med = lambda runs, key: statistics.median(x[key] for x in runs)
    ms_mg, ms_pt = med(mg, "step_ms"), med(pt, "step_ms")
    mb_mg, mb_pt = mg[0]["peak_bytes"] / 2**20, pt[0]["peak_bytes"] / 2**20
    best_mg, best_pt = min(x["min_ms"] for x in mg), min(x["min_ms"] for x in pt)
    print(f"{name:9} {mg[0]['config']:55} {ms_mg:10.1f} {ms_pt:9.1f} {ms_mg / ms_pt:6.2f} "
          f"{best_mg:8.1f} {best_pt:8.1f} {best_mg / best_pt:6.2f} "
          f"{med(mg, 'cpu_ms'):9.1f} {med(pt, 'cpu_ms'):9.1f} {mb_mg:11.2f} {mb_pt:9.2f} {mb_mg / mb_pt:6.2f}")
    print(f"{'':9} per-round step ms: memgrad {[round(x['step_ms'], 1) for x in mg]}, "
          f"torch {[round(x['step_ms'], 1) for x in pt]}"
          + (f"; torch: {pt[0]['config'].split(', ')[-1]}" if "attention" in pt[0]["config"] else ""))
op_mg = {b["run_name"].split("_", 2)[2]: b["per_op"] for b in json.load(open(f"{out}/op_mg.json"))["benchmarks"]
         if b.get("aggregate_name") == "median"}
op_pt = json.load(open(f"{out}/op_pt.json"))
print(f"\nper-op overhead, chain of 1000 ops on 16 floats (memgrad median of 5, torch best of 7)")
print(f"{'case':16} {'memgrad ns':>11} {'torch ns':>9} {'ratio':>6}")
for case in ["NoGrad", "Record", "RecordBackward"]:
    print(f"{case:16} {op_mg[case] * 1e9:11.0f} {op_pt[case] * 1e9:9.0f} {op_mg[case] / op_pt[case]:6.2f}")
PY
