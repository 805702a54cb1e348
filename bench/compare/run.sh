#!/usr/bin/env bash
# memgrad against PyTorch on the CPU, in one run with the same thread count: per-op overhead
# (bench_op_overhead vs op_overhead.py) and one training step of an MLP and of a small GPT
# (bench_train_step vs train_step.py: median step time, peak memory). Prints memgrad/PyTorch ratios.
#   bench/compare/run.sh            environment: MG_BUILD_DIR (default build-bench), THREADS (2),
#                                   STEPS (training steps timed per side, default 10), ROUNDS (2),
#                                   PEER_PYTHON (default <repo>/build-peers/venv/bin/python when it exists),
#                                   OUT (a folder to keep the runs' JSON in; default a temporary one)
# PEER_PYTHON is the venv of bench/compare/setup_peers.sh (newest torch from PyPI, JAX): with it, each
# workload also runs torch 2.x eager, torch 2.x with torch.compile and JAX jit, and a last table gives
# memgrad's step time over the fastest peer's.
# Each training workload runs ROUNDS times, the two sides alternating, so that a burst of load on a
# shared machine hits both; the table reports the median of the per-round medians and the best
# single step of all rounds (the figure least inflated by other processes).
# WORKLOADS (default all six: mlp gpt gpt-256 gpt-512 gpt-512f gpt2) picks some; gpt2 (GPT-2 124M,
# batch 4 x 64) runs GPT2_STEPS steps (default 5: a step takes seconds).
# AVX2=1: every program on its AVX2 code, on an AVX-512 machine the proxy for an AVX2-only CPU (said
# as such wherever it is reported): memgrad MG_CPU_ISA=avx2 (its kernels, and the oneDNN and OpenBLAS
# paths it sets: core/openblas_defaults.cpp); torch ATEN_CPU_CAPABILITY=avx2 (ATen's kernels and
# torch.compile's generated code), MKL_ENABLE_INSTRUCTIONS=AVX2, ONEDNN_MAX_CPU_ISA=AVX2 and, for
# Debian's torch 1.13, OPENBLAS_CORETYPE=Haswell; JAX XLA_FLAGS=--xla_cpu_max_isa=AVX2.
# AVX2=both: the whole run twice, at the CPU's own ISA and then as the AVX2 proxy (issue 46's two tables
# in one command).
# After the tables, a steadiness table per workload and side: the spread of the steps and what a step
# costs in counts that load on a shared machine hardly changes (page faults, context switches, threads,
# and the steal time the host took from the virtual CPUs during the step). Last, each workload's goal
# against floors of its step: its matrix FLOPs at the best GEMM rate and at the FMA peak, plus AdamW's
# bytes at the memory bandwidth (bench_roofline).
set -euo pipefail
if [ "${AVX2:-0}" = both ]; then
  AVX2=0 OUT=${OUT:+$OUT/own} "$BASH" "$0"
  echo
  AVX2=1 OUT=${OUT:+$OUT/avx2} exec "$BASH" "$0"
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
if [ -n "${OUT:-}" ]; then  # the runs' JSON kept there (with AVX2=both, in OUT/own and OUT/avx2)
  out=$OUT
  mkdir -p "$out"
else
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
fi

# Debian's torch needs Debian's python; a pyenv/venv python3 first on PATH may lack it.
py=${PYTHON:-python3}
"$py" -c "import torch" 2>/dev/null || py=/usr/bin/python3
"$py" -c "import torch" || { echo "PyTorch not importable: apt-get install python3-torch libopenblas0-openmp" >&2; exit 1; }

peer=${PEER_PYTHON:-$root/build-peers/venv/bin/python}
[ -x "$peer" ] || peer=""
# XLA's CPU client uses every core the process may run on: pin JAX to THREADS cores.
jax_run=("$peer")
[ "$threads" -lt "$(nproc)" ] && jax_run=(taskset -c "0-$((threads - 1))" "$peer")

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=OFF -DMG_CUDA=OFF -DMG_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_op_overhead bench_train_step bench_gemm bench_roofline >/dev/null

# One thread count for every library on both sides (OpenMP for memgrad and ATen, OpenBLAS's own pool).
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
if [ "${AVX2:-0}" = 1 ]; then
  export MG_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2 \
    OPENBLAS_CORETYPE=Haswell XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_cpu_max_isa=AVX2"
fi

# Workloads: name, then the arguments both programs take after the workload kind and step count.
# gpt-512f: memgrad's fused attention against torch's F.scaled_dot_product_attention, or against
# its explicit attention where torch (Debian's 1.13) has none; the config column says which.
# gpt2: GPT-2 124M (12 layers, 12 heads, n_embd 768, vocab 50257) on batch 4 x 64 (position table of
# 64 rows, not GPT-2's 1024: the models build it for the sequence they run).
all=("mlp mlp 256 784 1024 2 10" "gpt gpt 4 4 128 2048 8 128" "gpt-256 gpt 4 4 256 4096 8 128"
  "gpt-512 gpt 4 4 256 4096 4 512" "gpt-512f gpt-fused 4 4 256 4096 4 512" "gpt2 gpt 12 12 768 50257 4 64")
workloads=()
for w in "${all[@]}"; do
  [[ " ${WORKLOADS:-mlp gpt gpt-256 gpt-512 gpt-512f gpt2} " == *" ${w%% *} "* ]] && workloads+=("$w")
done
# A peer that crashes (torch.compile once aborted in glibc's malloc on GPT-2, one round of three) runs
# once more; failing twice, its round is left out, said on stderr, and the tables use the others.
peer_step() {  # output file, then the command
  local f=$1
  shift
  "$@" >"$f" || "$@" >"$f" || {
    echo "bench/compare: failed twice, its round left out: $*" >&2
    rm -f "$f"
  }
}
for r in $(seq "$rounds"); do
  for w in "${workloads[@]}"; do
    set -- $w
    name=$1 kind=$2
    shift 2
    steps=${STEPS:-10}
    [ "$name" != gpt2 ] || steps=${GPT2_STEPS:-5}
    "$build/bench/bench_train_step" "$kind" "$steps" "$@" >"$out/mg.$name.$r.json"
    "$py" "$root/bench/compare/train_step.py" "$kind" "$steps" "$@" >"$out/pt.$name.$r.json"
    if [ -n "$peer" ]; then
      peer_step "$out/t2.$name.$r.json" "$peer" "$root/bench/compare/train_step.py" "$kind" "$steps" "$@"
      peer_step "$out/tc.$name.$r.json" env TORCH_COMPILE=1 "$peer" "$root/bench/compare/train_step.py" "$kind" \
        "$steps" "$@"
      peer_step "$out/jx.$name.$r.json" "${jax_run[@]}" "$root/bench/compare/train_step_jax.py" "$kind" "$steps" "$@"
    fi
  done
done
"$build/bench/bench_op_overhead" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_format=json --benchmark_out="$out/op_mg.json" --benchmark_out_format=json >/dev/null
"$py" "$root/bench/compare/op_overhead.py" >"$out/op_pt.json"
[ -z "$peer" ] || "$peer" "$root/bench/compare/op_overhead.py" >"$out/op_t2.json"
# GEMM on the steps' shapes: memgrad's default variant against torch's BLAS, wall time, same threads.
"$build/bench/bench_gemm" --benchmark_filter='/auto$' --benchmark_min_time=0.2 --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_format=json >"$out/gemm_mg.json"
"$py" "$root/bench/compare/gemm.py" >"$out/gemm_pt.json"
[ -z "$peer" ] || "$peer" "$root/bench/compare/gemm.py" >"$out/gemm_t2.json"
# The machine's FMA peak and memory bandwidth (best of 5): the floor table at the end.
"$build/bench/bench_roofline" --benchmark_repetitions=5 --benchmark_format=json >"$out/roofline.json"

"$py" - "$out" "$rounds" "${workloads[@]}" <<'PY'
import json, os, statistics, sys
out, rounds, workloads = sys.argv[1], int(sys.argv[2]), [w.split()[0] for w in sys.argv[3:]]
# A side's rounds of a workload that ran (run.sh leaves out a peer's round that failed twice).
def runs_of(p, name):
    return [json.load(open(f)) for r in range(1, rounds + 1) if os.path.exists(f := f"{out}/{p}.{name}.{r}.json")]
load = open("/proc/loadavg").read().split()[:3]
pt_version = json.load(open(f"{out}/pt.{workloads[0]}.1.json"))["torch"]
print(f"threads {os.environ['OMP_NUM_THREADS']}, torch {pt_version}, load average after the run {' '.join(load)}"
      + (", AVX2 proxy (MG_CPU_ISA=avx2 and the peers' AVX2 paths)" if os.environ.get("MG_CPU_ISA") == "avx2" else ""))
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

# GFLOP/s from the median wall time (bench_gemm's counter divides by one thread's CPU time).
gemm_mg = {}
for b in json.load(open(f"{out}/gemm_mg.json"))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        gemm_mg[b["run_name"].rsplit("/", 1)[0]] = b["GFLOPs"] * b["cpu_time"] / b["real_time"]
gemm_peers = [json.load(open(f"{out}/{f}.json")) for f in ("gemm_pt", "gemm_t2") if os.path.exists(f"{out}/{f}.json")]
print(f"\nGEMM GFLOP/s, wall time, {os.environ['OMP_NUM_THREADS']} threads (memgrad: median of 3; torch: best of 7)")
print(f"{'shape':24} {'memgrad':>8} " + " ".join(f"{'torch ' + p['torch'][:6]:>13} {'ratio':>6}" for p in gemm_peers))
for name, g in gemm_mg.items():
    print(f"{name:24} {g:8.1f} " + " ".join(f"{p['gflops'][name]:13.1f} {g / p['gflops'][name]:6.2f}" for p in gemm_peers))

# Steadiness: each side's steps over all rounds (min-max, and max/min), then medians per step of CPU
# time, page faults, voluntary/involuntary context switches, the machine's steal time, and the most
# threads the process had (JAX's program reports no counters).
sides = [("mg", "memgrad"), ("pt", "torch 1.13"), ("t2", "torch 2 eager"), ("tc", "torch 2 compile"), ("jx", "JAX jit")]
print(f"\nsteadiness: every step of all {rounds} rounds; counters per step, median of the steps, median of the rounds")
print(f"{'workload':9} {'side':15} {'min ms':>8} {'max ms':>8} {'max/min':>7} {'CPU ms':>8} {'faults':>7} "
      f"{'vol csw':>7} {'invol csw':>9} {'steal ms':>8} {'threads':>7}")
for name in workloads:
    for p, label in sides:
        runs = runs_of(p, name)
        if not runs:
            continue
        steps = [m for x in runs for m in x["ms"]]
        cnt = lambda key: (f"{statistics.median(x[key] for x in runs):.0f}" if key in runs[0] else "-")
        steal = f"{statistics.median(x['steal_ms'] for x in runs):.1f}" if "steal_ms" in runs[0] else "-"
        threads = str(max(x["process_threads"] for x in runs)) if "process_threads" in runs[0] else "-"
        cpu = f"{statistics.median(x['cpu_ms'] for x in runs):.1f}" if "cpu_ms" in runs[0] else "-"
        print(f"{name:9} {label:15} {min(steps):8.1f} {max(steps):8.1f} {max(steps) / min(steps):7.2f} {cpu:>8} "
              f"{cnt('faults'):>7} {cnt('csw_voluntary'):>7} {cnt('csw_involuntary'):>9} {steal:>8} {threads:>7}")

if not any(runs_of("t2", name) for name in workloads):
    sys.exit(0)
# Every peer: median of the per-round median steps, and memgrad's over the fastest peer's; a peer
# with rounds left out: over the rounds it ran (the count after its time), "-" with none.
peers = [("pt", "torch 1.13"), ("t2", "torch 2 eager"), ("tc", "torch 2 compile"), ("jx", "JAX jit")]
t2 = next(r[0] for r in (runs_of("t2", name) for name in workloads) if r)
jx = next((r[0] for r in (runs_of("jx", name) for name in workloads) if r), {"jax": "-"})
print(f"\nstep ms, median of {rounds} rounds (torch {pt_version}; torch {t2['torch']}; jax {jx['jax']})")
print(f"{'workload':9} {'memgrad':>8} " + " ".join(f"{label:>15}" for _, label in peers) + f" {'mg/fastest':>10}")
# The best single step of all rounds too: on a machine whose speed drifts, the steadier figure.
for stat, key, pick in [("median", "step_ms", statistics.median), ("best", "min_ms", min)]:
    if stat == "best":
        print(f"step ms, best single step of all {rounds} rounds")
    for name in workloads:
        of = lambda p: (lambda runs: (pick(x[key] for x in runs), len(runs)) if runs else (None, 0))(runs_of(p, name))
        mg, times = of("mg")[0], [of(p) for p, _ in peers]
        cell = lambda t, n: "-" if t is None else f"{t:.1f}" + ("" if n == rounds else f" ({n})")
        print(f"{name:9} {mg:8.1f} " + " ".join(f"{cell(t, n):>15}" for t, n in times)
              + f" {mg / min(t for t, _ in times if t is not None):10.2f}")
# What the goal asks (0.8 x the fastest peer's median; GPT-2 0.6 x) against floors no schedule of the
# same work beats: memgrad's matrix FLOPs per step (FlopCounter) at the machine's best GEMM rate (square
# 2048, the faster library; the step's own shapes run slower) or at the FMA peak (bench_roofline: at the
# AVX2 proxy the 256-bit peak), plus AdamW's 28 bytes a parameter at the best stream bandwidth measured,
# every other kernel taking no time. (Fused causal attention counts the visible pairs only, fewer than
# the tiles the cpu kernel computes.) Then what the step's own matmul kernels took (KernelProfile,
# median of the profiled steps of every round) and the rest of the step beside it (all other kernels
# and the framework's own time).
ceiling = max([gemm_mg["square 2048"]] + [p["gflops"]["square 2048"] for p in gemm_peers])
roof = [b for b in json.load(open(f"{out}/roofline.json"))["benchmarks"] if b.get("run_type") == "iteration"]
best = lambda name, key: max((b[key] for b in roof if b["run_name"].startswith(name)), default=0)
peak = best("fma/avx2", "GFLOPs") if os.environ.get("MG_CPU_ISA") == "avx2" else best("fma/", "GFLOPs")
bandwidth = best("stream/adamw", "GBs")
print(f"floors: GEMM at {ceiling:.0f} GFLOP/s (square 2048, fastest library) or at the FMA peak {peak:.0f}, "
      f"AdamW's bytes at {bandwidth:.1f} GB/s; the goal 0.8 x the fastest peer's median (gpt2 0.6 x)")
print(f"{'workload':9} {'GFLOP':>7} {'params M':>9} {'AdamW ms':>9} {'lib floor':>10} {'FMA floor':>10} {'goal ms':>8} "
      f"{'lib/goal':>9} {'FMA/goal':>9} {'matmul ms':>10} {'rest ms':>8}")
for name in workloads:
    mgs = [json.load(open(f"{out}/mg.{name}.{r}.json")) for r in range(1, rounds + 1)]
    gflop, params = mgs[0]["gemm_gflop"], mgs[0].get("params", 0)
    fastest = min(statistics.median(x["step_ms"] for x in runs) for p, _ in peers if (runs := runs_of(p, name)))
    goal = (0.6 if name == "gpt2" else 0.8) * fastest
    adamw = 28 * params / bandwidth * 1e-6
    lib, fma = gflop / ceiling * 1e3 + adamw, gflop / peak * 1e3 + adamw
    matmul = statistics.median(x["matmul_ms"] for x in mgs)
    rest = statistics.median(x["profiled_step_ms"] - x["matmul_ms"] for x in mgs)
    print(f"{name:9} {gflop:7.2f} {params / 1e6:9.2f} {adamw:9.1f} {lib:10.1f} {fma:10.1f} {goal:8.1f} {lib / goal:9.2f} "
          f"{fma / goal:9.2f} {matmul:10.1f} {rest:8.1f}")
op_t2 = json.load(open(f"{out}/op_t2.json"))
print(f"per-op ns, memgrad / torch {t2['torch']} eager: " +
      ", ".join(f"{c} {op_mg[c] * 1e9:.0f} / {op_t2[c] * 1e9:.0f} = {op_mg[c] / op_t2[c]:.2f}"
                for c in ["NoGrad", "Record", "RecordBackward"]))
print(f"load average after the run {' '.join(open('/proc/loadavg').read().split()[:3])}")
PY
