#!/usr/bin/env python3
"""bench/gemm.cpp's GEMM shapes in PyTorch: the float32 products of the compare workloads' training
steps, with the same transposed views. Prints JSON: GFLOP/s per shape (2*batch*M*N*K over the best
wall time of 7 runs), at torch's thread count (OMP_NUM_THREADS), and torch's BLAS."""
import json

import torch

from op_overhead import best_seconds

LINEAR = [("mlp 784->1024", 256, 784, 1024), ("mlp 1024->1024", 256, 1024, 1024), ("mlp 1024->10", 256, 1024, 10),
          ("gpt qkv 256->768", 1024, 256, 768), ("gpt proj 256->256", 1024, 256, 256),
          ("gpt fc 256->1024", 1024, 256, 1024), ("gpt fc2 1024->256", 1024, 1024, 256),
          ("gpt head 256->4096", 1024, 256, 4096)]
# name, batch, m, k, n, left transposed, right transposed (as in bench/gemm.cpp)
SHAPES = [s for tag, rows, i, o in LINEAR for s in (
    (f"{tag} fwd", 1, rows, i, o, False, True), (f"{tag} dx", 1, rows, o, i, False, False),
    (f"{tag} dW", 1, o, rows, i, True, False))] + [
    ("gpt att q@k^T", 32, 128, 64, 128, False, True), ("gpt att p@v", 32, 128, 128, 64, False, False),
    ("gpt att dp^T@v", 32, 128, 128, 64, True, False), ("square 2048", 1, 2048, 2048, 2048, False, False)]


def operand(batch, r, c, t):
    return torch.randn(batch, c, r).transpose(1, 2) if t else torch.randn(batch, r, c)


def main():
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "gflops": {}}
    config = torch.__config__.show()
    out["blas"] = "MKL" if "USE_MKL=ON" in config or "BLAS_INFO=mkl" in config else "other"
    with torch.no_grad():
        for name, batch, m, k, n, ta, tb in SHAPES:
            a, b = operand(batch, m, k, ta), operand(batch, k, n, tb)
            s = best_seconds(lambda: torch.matmul(a, b))
            out["gflops"][name] = 2.0 * batch * m * k * n / s * 1e-9
    print(json.dumps(out))


if __name__ == "__main__":
    main()
