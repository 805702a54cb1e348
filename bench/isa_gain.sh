#!/usr/bin/env bash
# What each ISA copy of the CPU kernels buys, per kernel family (kernels/cpu/<family>.cpp): the
# training steps of bench/compare/run.sh's workloads run at every level (MG_CPU_ISA=baseline, avx2,
# and the CPU's own), one OpenMP thread, under `perf record -e task-clock`, which samples this
# process's CPU time only, so other processes' load moves it little. Each sample is charged to the
# object file that defines its function (nm), and the table gives each family's CPU milliseconds per
# run at each level and the higher levels' speedups. (MG_CPU_ISA also lowers oneDNN's and OpenBLAS's
# ISA: the GEMM libraries are listed apart.) Rounds alternate the levels.
#   bench/isa_gain.sh [rounds=3]       build directory: $MG_BUILD_DIR (default build-bench), with
#                                      MG_BUILD_BENCH=ON and MG_CPU_DISPATCH on (the default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
rounds=${1:-3}
steps=${STEPS:-10}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
command -v perf >/dev/null || { echo "isa_gain.sh needs perf (Debian's linux-perf)" >&2; exit 1; }
[ -x "$build/bench/bench_train_step" ] || { echo "no $build/bench/bench_train_step (MG_BUILD_BENCH=ON)" >&2; exit 1; }
workloads=("mlp mlp $steps 256 784 1024 2 10" "gpt gpt $steps 4 4 128 2048 8 128" "gpt-256 gpt $steps 4 4 256 4096 8 128"
  "gpt-512f gpt-fused $steps 4 4 256 4096 4 512")
export OMP_NUM_THREADS=1
for r in $(seq "$rounds"); do
  for w in "${workloads[@]}"; do
    set -- $w
    name=$1
    shift
    for level in baseline avx2 cpu; do
      isa=$level
      [ "$level" = cpu ] && isa=
      MG_CPU_ISA=$isa perf record -q -e task-clock -F 1000 -o "$out/$name.$level.$r.data" -- \
        "$build/bench/bench_train_step" "$@" >/dev/null 2>&1
      perf report -q -i "$out/$name.$level.$r.data" --no-demangle --sort dso,sym --stdio -F sample,dso,sym -t '|' \
        2>/dev/null >"$out/$name.$level.$r.txt"
    done
  done
done
# symbol -> family, from the objects of every level
for o in "$build"/CMakeFiles/{memgrad,mg_cpu_avx2,mg_cpu_avx512}.dir/kernels/cpu/*.o; do
  nm --defined-only "$o" | awk -v f="$(basename "$o" .cpp.o)" '$2 ~ /^[TtWw]$/ { print $3, f }'
done >"$out/families"
python3 - "$out" "$rounds" "${workloads[@]}" <<'PY'
import collections, glob, os, re, statistics, sys
out, rounds, workloads = sys.argv[1], int(sys.argv[2]), [w.split()[0] for w in sys.argv[3:]]
family = {}
for line in open(f"{out}/families"):
    sym, fam = line.split()
    family.setdefault(sym, fam)
def charge(path):  # family -> CPU ms (1000 Hz: one sample per ms)
    ms = collections.Counter()
    for line in open(path):
        parts = [x.strip() for x in line.split("|")]
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        n, dso, sym = int(parts[0]), parts[1], parts[2].split()[-1]
        if sym in family:
            ms[family[sym]] += n
        elif "dnnl" in dso or "openblas" in dso or "JIT" in dso:
            ms["(GEMM libraries, JIT code)"] += n
        else:
            ms["(other: framework, libc, kernel)"] += n
    return ms
levels = ["baseline", "avx2", "cpu"]
print(f"load average {' '.join(open('/proc/loadavg').read().split()[:3])}; CPU ms per run (median of {rounds} rounds), "
      "one thread; speedup = lower level's ms / higher level's")
for w in workloads:
    runs = {lv: [charge(f"{out}/{w}.{lv}.{r}.txt") for r in range(1, rounds + 1)] for lv in levels}
    fams = sorted({f for lv in levels for c in runs[lv] for f in c}, key=lambda f: -statistics.median(c[f] for c in runs["cpu"]))
    print(f"\n{w}\n| family | baseline ms | avx2 ms | cpu's level ms | avx2/baseline | cpu/avx2 |\n|---|---:|---:|---:|---:|---:|")
    for f in fams:
        med = {lv: statistics.median(c[f] for c in runs[lv]) for lv in levels}
        sp = lambda a, b: f"{med[a] / med[b]:.2f}" if med[b] >= 5 and med[a] >= 5 else "-"
        print(f"| {f} | {med['baseline']:.0f} | {med['avx2']:.0f} | {med['cpu']:.0f} | {sp('baseline', 'avx2')} | {sp('avx2', 'cpu')} |")
    tot = {lv: statistics.median(sum(c.values()) for c in runs[lv]) for lv in levels}
    print(f"| all | {tot['baseline']:.0f} | {tot['avx2']:.0f} | {tot['cpu']:.0f} | | |")
PY
