#!/usr/bin/env bash
# Per-shape GEMM rates of every library at hand beside torch's, on the compare workloads' products
# (bench/gemm_shapes.txt): bench_gemm_libs (oneDNN, OpenBLAS, BLIS, libxsmm, Eigen, called directly:
# memgrad's split over threads and, at more than one thread, each library's own threading) and
# bench/compare/gemm.py under Debian's torch 1.13 and PEER_PYTHON's torch 2.x, same shapes and threads.
#   bench/run_gemm_libs.sh [--avx2] [shape regex]
#   environment: MG_BUILD_DIR (default build-bench), THREADS ("1 2"), CLOCK (cpu: the process's CPU
#   time over its threads, steadier on a loaded machine; wall), REPS (7), PEER_PYTHON, SHARE_OF (N:
#   time one thread's share of each product as N threads split it, bench_gemm_libs --share-of; torch
#   still runs whole products), OUT (a folder to keep the JSON in)
# --avx2: every library on its AVX2 code, on an AVX-512 machine the proxy for an AVX2-only CPU:
#   ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN, and torch 2.x's), OPENBLAS_CORETYPE=Haswell (OpenBLAS, and torch
#   1.13's), LIBXSMM_TARGET=hsw, MKL_ENABLE_INSTRUCTIONS=AVX2 (torch 2.x's MKL), MG_CPU_ISA=avx2 (what
#   skips eigen-avx512). Debian's BLIS 0.9 picks its zen3 (AVX2) configuration on AMD Zen 3, 4 and 5
#   anyway; its BLIS_ARCH_TYPE aborts in 0.9.0, so it cannot be forced elsewhere.
# Prints one markdown table per thread count: median GFLOP/s (min-max of the blocks); then per
# workload the milliseconds a training step's products take at those rates (bench/gemm_shapes.txt's
# counts), each library alone and the fastest per shape.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
avx2=0
if [ "${1:-}" = "--avx2" ]; then
  avx2=1
  shift
fi
filter=${1:-.}
clock=${CLOCK:-cpu}
if [ -n "${OUT:-}" ]; then
  out=$OUT
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=OFF -DMG_CUDA=OFF -DMG_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_gemm_libs >/dev/null
# This sandbox and some shells export OPENBLAS_CORETYPE: each library picks its own unless --avx2.
unset OPENBLAS_CORETYPE ONEDNN_MAX_CPU_ISA DNNL_MAX_CPU_ISA MKL_ENABLE_INSTRUCTIONS LIBXSMM_TARGET MG_CPU_ISA
if [ $avx2 = 1 ]; then
  export ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell LIBXSMM_TARGET=hsw MKL_ENABLE_INSTRUCTIONS=AVX2 \
    MG_CPU_ISA=avx2
fi
py=/usr/bin/python3
peer=${PEER_PYTHON:-$root/build-peers/venv/bin/python}
[ -x "$peer" ] || peer=""
echo "$(date -u '+%F %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n \
  's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p'), avx2 proxy $avx2, load $(cut -d' ' -f1-3 /proc/loadavg)"
for t in ${THREADS:-1 2}; do
  export OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t MKL_NUM_THREADS=$t MG_GEMM_CLOCK=$clock
  "$build/bench/bench_gemm_libs" --filter "$filter" --reps "${REPS:-7}" --clock "$clock" --json "$out/libs.$t.json" \
    --share-of "${SHARE_OF:-1}" | sed -n '1,/^$/p'
  (cd "$root/bench/compare" && "$py" gemm.py "$filter" >"$out/pt.$t.json")
  [ -z "$peer" ] || (cd "$root/bench/compare" && "$peer" gemm.py "$filter" >"$out/t2.$t.json")
  "$py" - "$out" "$t" <<'PY'
import json, os, sys
out, t = sys.argv[1], sys.argv[2]
run = json.load(open(f"{out}/libs.{t}.json"))
libs, share_of = run["rates"], run["share_of"]
torches = [json.load(open(f"{out}/{p}.{t}.json")) for p in ("pt", "t2") if os.path.exists(f"{out}/{p}.{t}.json")]
shapes = list(dict.fromkeys(k.split("|")[0] for k in libs))
cols = list(dict.fromkeys(k.split("|")[1] for k in libs))
cell = lambda r: f"{r[0]:.0f} ({r[1]:.0f}-{r[2]:.0f})"
share = f", libraries: one thread's share of {share_of} (torch: whole products)" if share_of > 1 else ""
print(f"\n{t} thread(s), GFLOP/s median (min-max), clock {os.environ['MG_GEMM_CLOCK']}{share}\n")
print("| shape | " + " | ".join(cols + [f"torch {p['torch'][:6]}" for p in torches]) + " | fastest library |")
print("|---|" + "---:|" * (len(cols) + len(torches)) + "---|")
for s in shapes:
    row = {c: libs.get(f"{s}|{c}") for c in cols}
    best = max((r[0], c) for c, r in row.items() if r)
    print(f"| {s} | " + " | ".join(cell(r) if r else "-" for r in row.values()) + " | "
          + " | ".join(cell(p["median"][s]) if s in p["median"] else "-" for p in torches) + f" | {best[1]} |")
# A step's products at these rates: the fused GPT runs gpt512's linear layers and its own tiles.
sizes = run["shapes"]
loads = {"mlp": ["mlp "], "gpt": ["gpt "], "gpt256": ["gpt256 "], "gpt512": ["gpt512 "],
         "gpt512f": ["gpt512 qkv", "gpt512 proj", "gpt512 fc", "gpt512 head", "gpt512f "], "gpt2": ["gpt2 "]}
how = f"{share_of} threads' shares in parallel" if share_of > 1 else f"whole products on {t} thread(s)"
print(f"\nms a step in these products at these rates ({how})\n")
print("| workload | " + " | ".join(cols) + " | fastest per shape |")
print("|---|" + "---:|" * (len(cols) + 1))
for w, prefixes in loads.items():
    names = [s for s in shapes if any(s.startswith(p) for p in prefixes) and sizes[s][1] > 0]
    if not names:
        continue
    ms = lambda rate: sum(sizes[s][0] * sizes[s][1] / rate(s) for s in names) * 1e3 / share_of
    got = lambda c: all(libs.get(f"{s}|{c}") for s in names)
    per_col = [f"{ms(lambda s: libs[f'{s}|{c}'][0]):.1f}" if got(c) else "-" for c in cols]
    fastest = ms(lambda s: max(libs[f"{s}|{c}"][0] for c in cols if f"{s}|{c}" in libs))
    print(f"| {w} | " + " | ".join(per_col) + f" | {fastest:.1f} |")
PY
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
