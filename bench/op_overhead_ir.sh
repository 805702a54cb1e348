#!/usr/bin/env bash
# Instructions per op of bench_op_overhead's chain (NoGrad and Record), counted by callgrind: a
# figure the machine's load does not change, for before/after comparisons of the dispatch path.
#   bench/op_overhead_ir.sh [build directory, default build]   (configured with -DMG_BUILD_BENCH=ON)
set -euo pipefail
build=${1:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for case in NoGrad Record; do
  OMP_NUM_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$out/$case" --toggle-collect='*chain*' \
    "$build/bench/bench_op_overhead" --benchmark_filter="BM_Chain_$case\$" --benchmark_min_time=0.5 >/dev/null 2>&1
  # Ops counted from the calls to mg::relu: one in three ops of the chain.
  python3 - "$out/$case" "$case" <<'PY'
import re, sys
total = relu = 0
names, callee = {}, None
for line in open(sys.argv[1]):
    if line.startswith(("summary:", "totals:")):
        total = int(line.split()[1])
    m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
    if m:
        if m.group(2):
            names[m.group(1)] = m.group(2)
        callee = names.get(m.group(1), "") if line.startswith("cfn") else None
    elif line.startswith("calls=") and callee and callee.startswith("mg::relu("):
        relu += int(line.split()[0][6:])
print(f"{sys.argv[2]}: {total / (3 * relu):.0f} instructions per op ({3 * relu} ops)")
PY
done
