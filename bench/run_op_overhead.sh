#!/usr/bin/env bash
# Builds bench_op_overhead (Release, CPU), runs it and the same chain in PyTorch, and prints
# memgrad's time per op over PyTorch's. Build directory: $MG_BUILD_DIR (default build-bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Debian's torch needs Debian's python; a pyenv/venv python3 first on PATH may lack it.
py=${PYTHON:-python3}
"$py" -c "import torch" 2>/dev/null || py=/usr/bin/python3
"$py" -c "import torch" || { echo "PyTorch not importable: apt-get install python3-torch libopenblas0-openmp" >&2; exit 1; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=OFF -DMG_CUDA=OFF -DMG_BUILD_BENCH=ON -DMG_BUILD_TESTS=OFF \
  -DMG_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_op_overhead >/dev/null

"$build/bench/bench_op_overhead" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$out/memgrad.json" --benchmark_out_format=json >/dev/null
"$py" "$root/bench/compare/op_overhead.py" >"$out/torch.json"

"$py" - "$out/memgrad.json" "$out/torch.json" <<'PY'
import json, sys
mg = {b["run_name"].split("_", 2)[2]: b["per_op"] for b in json.load(open(sys.argv[1]))["benchmarks"]
      if b.get("aggregate_name") == "median"}
pt = json.load(open(sys.argv[2]))
print(f"per-op time, chain of 1000 ops on 16 floats (memgrad median of 5; torch {pt['torch']} best of 7, "
      f"{pt['threads']} threads)")
print(f"{'case':16} {'memgrad ns':>11} {'torch ns':>9} {'ratio':>6}")
for case in ["NoGrad", "Record", "RecordBackward"]:
    print(f"{case:16} {mg[case] * 1e9:11.0f} {pt[case] * 1e9:9.0f} {mg[case] / pt[case]:6.2f}")
PY
