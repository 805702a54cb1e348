#!/usr/bin/env python3
"""The op_overhead chain in PyTorch: 1000 tiny ops (add, mul, relu in turn) on a 16-element
float32 tensor, timed with and without autograd recording. Prints JSON: seconds per op."""
import json
import time

import torch

import timing

CHAIN = 1000


def chain(x, c):
    for _ in range((CHAIN + 2) // 3):
        x = torch.add(x, c)
        x = torch.mul(x, c)
        x = torch.relu(x)
    return x


def best_seconds(fn, repeats=7, min_seconds=0.2):
    """Best of `repeats` timings of one call (timing.block_seconds)."""
    return min(timing.block_seconds(fn, repeats, min_seconds))


def per_op(fn):
    return best_seconds(fn) / ((CHAIN + 2) // 3 * 3)


def main():
    torch.manual_seed(0)
    x, c = torch.randn(16), torch.full((16,), 0.999)
    xg = x.clone().requires_grad_()

    def no_grad():
        with torch.no_grad():
            chain(x, c)

    def record():
        chain(xg, c)

    def record_backward():
        chain(xg, c).sum().backward()
        xg.grad = None

    result = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    for name, fn in [("NoGrad", no_grad), ("Record", record), ("RecordBackward", record_backward)]:
        result[name] = per_op(fn)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
