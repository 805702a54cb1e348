#!/usr/bin/env python3
"""bench/gemm_shapes.txt's GEMM shapes in PyTorch (as bench_gemm and bench_gemm_libs run them): the
float32 products of the compare workloads' training steps, with the same transposed views. Prints
JSON: GFLOP/s per shape (2*batch*M*N*K a second of wall time) in 7 blocks of calls: "gflops" the
best block, "median" [median, min, max]; at torch's thread count (OMP_NUM_THREADS), and torch's BLAS.   gemm.py [regex: only the shapes it matches]"""
import json
import os
import re
import statistics
import sys
import time

import torch

import timing



def block_seconds(fn, repeats=7, min_seconds=0.08):
    """timing.block_seconds in wall time, or with MG_GEMM_CLOCK=cpu in the process's CPU time over its
    threads (as bench_gemm_libs --clock cpu: steadier on a loaded machine)."""
    cpu = os.environ.get("MG_GEMM_CLOCK") == "cpu"
    clock = (lambda: time.process_time() / torch.get_num_threads()) if cpu else time.perf_counter
    return timing.block_seconds(fn, repeats, min_seconds, clock)


def shapes(path=os.environ.get("MG_GEMM_SHAPES") or os.path.join(os.path.dirname(__file__), "..", "gemm_shapes.txt")):
    """bench/gemm_shapes.txt as (name, batch, m, k, n, left transposed, right transposed, count a step),
    as bench/gemm_shapes.h reads it."""
    out = []
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        tag = f"{f[1]} {f[2]}"
        if f[0] == "linear":
            rows, i, o, count = int(f[3]), int(f[4]), int(f[5]), int(f[6][1:])
            name = f"{tag} {i}->{o}"
            out += [(f"{name} fwd", 1, rows, i, o, False, True, count),
                    (f"{name} dx", 1, rows, o, i, False, False, 0 if "nodx" in f else count),
                    (f"{name} dW", 1, o, rows, i, True, False, count)]
        else:
            batch, m, k, n, ta, tb = map(int, f[3:9])
            out.append((tag, batch, m, k, n, bool(ta), bool(tb), int(f[9][1:])))
    return out


def operand(batch, r, c, t):
    return torch.randn(batch, c, r).transpose(1, 2) if t else torch.randn(batch, r, c)


def main():
    pattern = sys.argv[1] if len(sys.argv) > 1 else ""
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "gflops": {}, "median": {},
           "clock": os.environ.get("MG_GEMM_CLOCK") or "wall"}
    config = torch.__config__.show()
    out["blas"] = "MKL" if "USE_MKL=ON" in config or "BLAS_INFO=mkl" in config else "other"
    with torch.no_grad():
        for name, batch, m, k, n, ta, tb, _ in shapes():
            if not re.search(pattern, name):
                continue
            a, b = operand(batch, m, k, ta), operand(batch, k, n, tb)
            rates = [2.0 * batch * m * k * n / s * 1e-9 for s in block_seconds(lambda: torch.matmul(a, b))]
            out["gflops"][name] = max(rates)
            out["median"][name] = [statistics.median(rates), min(rates), max(rates)]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
