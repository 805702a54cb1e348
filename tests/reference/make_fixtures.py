#!/usr/bin/python3
"""Writes the PyTorch parity fixtures for memgrad's core ops (tests/reference/fixtures/core_*.json).

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/make_fixtures.py
Every input comes from a generator seeded by the case name, so reruns write identical files.

Each case stores float32 inputs (as base tensors plus optional view steps, which make them
non-contiguous), PyTorch's outputs, a random upstream gradient per differentiable output and
the resulting gradient of every input that requires grad. References are computed in float64
from the float32 inputs and rounded to float32, so a C++ mismatch measures memgrad's error
alone; the script also reruns each case in float32 and refuses to write a case where PyTorch's
own float32 result misses its reference by more than the tolerance the C++ test will use.
"""
import json
import os
import zlib

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures")
RTOL, ATOL = 1e-5, 1e-6  # the C++ test's default: |mg - ref| <= ATOL + RTOL * |ref|

DTYPES = {
    "bool": torch.bool, "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------- input builders

class Inp:
    """A base array (float32, int64 or bool) plus view steps applied after it becomes a leaf."""

    def __init__(self, data, grad=None, view=None):
        self.data = np.asarray(data)
        self.grad = self.data.dtype == np.float32 if grad is None else grad
        self.view = view or []


class Gen:
    def __init__(self, name):
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))

    def uniform(self, shape, lo=-2.0, hi=2.0, **kw):
        return Inp(self.rng.uniform(lo, hi, size=shape).astype(np.float32), **kw)

    def away(self, shape, lo=0.3, hi=2.0, **kw):
        """Magnitudes in [lo, hi] with random signs: far from the kinks at zero."""
        mag = self.rng.uniform(lo, hi, size=shape)
        sign = np.where(self.rng.random(size=shape) < 0.5, -1.0, 1.0)
        return Inp((mag * sign).astype(np.float32), **kw)

    def ints(self, shape, lo, hi):
        return Inp(self.rng.integers(lo, hi, size=shape).astype(np.int64))

    def bools(self, shape):
        return Inp(self.rng.random(size=shape) < 0.5)

    def grid(self, shape, values):
        """Floats drawn from a few exact values, so comparisons see equal elements."""
        return Inp(self.rng.choice(np.array(values, dtype=np.float32), size=shape))


def apply_view(t, steps):
    for s in steps:
        if s[0] == "transpose":
            t = t.transpose(s[1], s[2])
        elif s[0] == "permute":
            t = t.permute(*s[1])
        elif s[0] == "slice":  # dim, start, end, step
            t = t.narrow(s[1], s[2], s[3] - s[2])[(slice(None),) * s[1] + (slice(None, None, s[4]),)]
        elif s[0] == "expand":  # stride-0 dims: the gradient must be summed back
            t = t.expand(*s[1])
        else:
            raise ValueError(s)
    return t


# ---------------------------------------------------------------- the ops, in PyTorch

def scalar_arg(a):
    return a["scalar"]


def pool_stride(a):
    return a["stride"] or None


TORCH_OPS = {
    "add": lambda x, a: torch.add(x[0], x[1], alpha=a.get("alpha", 1)),
    "sub": lambda x, a: torch.sub(x[0], x[1], alpha=a.get("alpha", 1)),
    "mul": lambda x, a: x[0] * x[1],
    "div": lambda x, a: x[0] / x[1],
    "pow": lambda x, a: torch.pow(x[0], x[1]),
    "maximum": lambda x, a: torch.maximum(x[0], x[1]),
    "minimum": lambda x, a: torch.minimum(x[0], x[1]),
    "add_scalar": lambda x, a: x[0] + scalar_arg(a),
    "sub_scalar": lambda x, a: x[0] - scalar_arg(a),
    "mul_scalar": lambda x, a: x[0] * scalar_arg(a),
    "div_scalar": lambda x, a: x[0] / scalar_arg(a),
    "pow_scalar": lambda x, a: torch.pow(x[0], scalar_arg(a)),
    "rsub_scalar": lambda x, a: scalar_arg(a) - x[0],
    "neg": lambda x, a: -x[0],
    "exp": lambda x, a: torch.exp(x[0]),
    "log": lambda x, a: torch.log(x[0]),
    "sqrt": lambda x, a: torch.sqrt(x[0]),
    "rsqrt": lambda x, a: torch.rsqrt(x[0]),
    "abs": lambda x, a: torch.abs(x[0]),
    "tanh": lambda x, a: torch.tanh(x[0]),
    "sigmoid": lambda x, a: torch.sigmoid(x[0]),
    "relu": lambda x, a: torch.relu(x[0]),
    "gelu": lambda x, a: F.gelu(x[0], approximate=a["approximate"]),
    "silu": lambda x, a: F.silu(x[0]),
    "clamp": lambda x, a: torch.clamp(x[0], a["lo"], a["hi"]),
    "where": lambda x, a: torch.where(x[0], x[1], x[2]),
    "masked_fill": lambda x, a: x[0].masked_fill(x[1], a["value"]),
    "sum": lambda x, a: torch.sum(x[0], a["dims"], a["keepdim"]) if a["dims"] else torch.sum(x[0]),
    "mean": lambda x, a: torch.mean(x[0], a["dims"], a["keepdim"]) if a["dims"] else torch.mean(x[0]),
    "amax": lambda x, a: torch.amax(x[0], a["dims"], a["keepdim"]),
    "amin": lambda x, a: torch.amin(x[0], a["dims"], a["keepdim"]),
    "var": lambda x, a: torch.var(x[0], a["dims"] or None, correction=a["correction"], keepdim=a["keepdim"]),
    "max_dim": lambda x, a: tuple(torch.max(x[0], a["dim"], a["keepdim"])),
    "min_dim": lambda x, a: tuple(torch.min(x[0], a["dim"], a["keepdim"])),
    "max_all": lambda x, a: torch.max(x[0]),
    "min_all": lambda x, a: torch.min(x[0]),
    "argmax": lambda x, a: torch.argmax(x[0], a["dim"], a["keepdim"]),
    "argmin": lambda x, a: torch.argmin(x[0], a["dim"], a["keepdim"]),
    "softmax": lambda x, a: torch.softmax(x[0], a["dim"]),
    "log_softmax": lambda x, a: torch.log_softmax(x[0], a["dim"]),
    "matmul": lambda x, a: torch.matmul(x[0], x[1]),
    "linear": lambda x, a: F.linear(*x),
    "cat": lambda x, a: torch.cat(x, a["dim"]),
    "stack": lambda x, a: torch.stack(x, a["dim"]),
    "split": lambda x, a: torch.split(x[0], a["size"], a["dim"]),
    "split_with_sizes": lambda x, a: torch.split(x[0], a["sizes"], a["dim"]),
    "chunk": lambda x, a: torch.chunk(x[0], a["chunks"], a["dim"]),
    "gather": lambda x, a: torch.gather(x[0], a["dim"], x[1]),
    "index_select": lambda x, a: torch.index_select(x[0], a["dim"], x[1]),
    "embedding": lambda x, a: F.embedding(x[1], x[0]),
    "tril": lambda x, a: torch.tril(x[0], a["diagonal"]),
    "triu": lambda x, a: torch.triu(x[0], a["diagonal"]),
    "layer_norm": lambda x, a: F.layer_norm(x[0], a["normalized_shape"], *x[1:], eps=a["eps"]),
    "cross_entropy": lambda x, a: F.cross_entropy(x[0], x[1], ignore_index=a["ignore_index"],
                                                  label_smoothing=a["label_smoothing"], reduction=a["reduction"]),
    "mse_loss": lambda x, a: F.mse_loss(x[0], x[1], reduction=a["reduction"]),
    "conv2d": lambda x, a: F.conv2d(*x, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                                    groups=a["groups"]),
    "max_pool2d": lambda x, a: F.max_pool2d(x[0], a["kernel"], pool_stride(a), a["padding"]),
    "avg_pool2d": lambda x, a: F.avg_pool2d(x[0], a["kernel"], pool_stride(a), a["padding"]),
}
for _cmp in ["eq", "ne", "lt", "le", "gt", "ge"]:
    TORCH_OPS[_cmp] = (lambda f: lambda x, a: f(x[0], x[1]))(getattr(torch, _cmp))
    TORCH_OPS[_cmp + "_scalar"] = (lambda f: lambda x, a: f(x[0], scalar_arg(a)))(getattr(torch, _cmp))


def mlp(x, a):
    inp, target, w1, b1, w2, b2 = x
    logits = F.linear(torch.relu(F.linear(inp, w1, b1)), w2, b2)
    return logits, F.cross_entropy(logits, target)


def convnet(x, a):
    inp, target, c1w, c1b, c2w, c2b, fw, fb = x
    h = F.max_pool2d(torch.relu(F.conv2d(inp, c1w, c1b, padding=1)), 2)
    h = F.avg_pool2d(torch.relu(F.conv2d(h, c2w, c2b, groups=2)), 2)
    logits = F.linear(h.flatten(1), fw, fb)
    return logits, F.cross_entropy(logits, target)


TORCH_OPS["mlp"] = mlp
TORCH_OPS["convnet"] = convnet


# ---------------------------------------------------------------- running a case

def f32_list(t):
    """float32 values as JSON numbers: the float64 repr of each float32 value (exact)."""
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).numpy()]


def values(t):
    if t.dtype.is_floating_point:
        return f32_list(t)
    if t.dtype == torch.bool:
        return [bool(v) for v in t.reshape(-1).tolist()]
    return [int(v) for v in t.reshape(-1).tolist()]


def tensor_json(t, dtype=None):
    return {"shape": list(t.shape), "dtype": DTYPE_NAMES[dtype or t.dtype], "data": values(t)}


def run(op, inputs, args, float_dtype, grad_outputs):
    leaves, views = [], []
    for inp in inputs:
        t = torch.from_numpy(inp.data.copy())
        if t.dtype.is_floating_point:
            t = t.to(float_dtype)
        leaf = t.requires_grad_(inp.grad)
        leaves.append(leaf)
        views.append(apply_view(leaf, inp.view))
    outs = TORCH_OPS[op](views, args)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    pairs = [(o, g) for o, g in zip(outs, grad_outputs) if g is not None]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [torch.from_numpy(g).to(float_dtype) for _, g in pairs])
    return outs, [leaf.grad if inp.grad else None for leaf, inp in zip(leaves, inputs)]


def worst_ratio(got, ref, rtol, atol):
    """max |got - ref| / (atol + rtol |ref|): at most 1 passes."""
    got, ref = got.detach().double(), ref.detach().to(torch.float32).double()
    if got.numel() == 0:
        return 0.0
    return float(((got - ref).abs() / (atol + rtol * ref.abs())).max())


def make_case(name, op, inputs, args=None, grad=True, rtol=RTOL, atol=ATOL, why=None, grad_outputs=None):
    """Runs `op` in float64 (reference) and float32 (dtype and conditioning check); returns the JSON case."""
    args = args or {}
    gen = np.random.default_rng(zlib.crc32(("grad:" + name).encode()))
    probe, _ = run(op, [Inp(i.data, grad=False, view=i.view) for i in inputs], args, torch.float32, [])
    if grad_outputs is None:
        grad_outputs = [gen.uniform(-1, 1, size=tuple(o.shape)).astype(np.float32)
                        if grad and o.dtype.is_floating_point else None for o in probe]
    if all(g is None for g in grad_outputs):  # nothing differentiable (comparisons, argmax, integer math)
        inputs = [Inp(i.data, grad=False, view=i.view) for i in inputs]
    outs64, grads64 = run(op, inputs, args, torch.float64, grad_outputs)
    outs32, grads32 = run(op, inputs, args, torch.float32, grad_outputs)
    worst = 0.0
    for got, ref in list(zip(outs32, outs64)) + list(zip(grads32, grads64)):
        if ref is None:
            continue
        if not ref.dtype.is_floating_point:
            assert torch.equal(got, ref), f"{name}: float32 and float64 runs disagree on {ref.dtype} output"
            continue
        worst = max(worst, worst_ratio(got, ref, rtol, atol))
    if os.environ.get("MG_FIXTURE_VERBOSE"):
        print(f"  {name}: torch float32 error is {worst:.2f}x the tolerance")
    # PyTorch's own float32 result must pass with margin, or memgrad could not be expected to.
    assert worst <= 0.5, f"{name}: PyTorch float32 is {worst:.2f}x the tolerance from its float64 reference"
    case = {
        "name": name, "op": op, "args": args,
        "inputs": [dict(tensor_json(torch.from_numpy(i.data)), requires_grad=bool(i.grad), view=i.view)
                   for i in inputs],
        "outputs": [tensor_json(o64, o32.dtype) for o64, o32 in zip(outs64, outs32)],
        "grad_outputs": [None if g is None else tensor_json(torch.from_numpy(g)) for g in grad_outputs],
        "grads": [None if g is None else tensor_json(g, torch.float32) for g in grads64],
    }
    if rtol != RTOL or atol != ATOL:
        case["tolerance"] = {"rtol": rtol, "atol": atol, "why": why}
    return case


# ---------------------------------------------------------------- the cases

def elementwise_cases():
    cs = []

    def c(name, op, build, args=None, **kw):
        cs.append(make_case(name, op, build(Gen(name)), args, **kw))

    c("add_broadcast", "add", lambda g: [g.uniform([3, 1, 5]), g.uniform([4, 5])])
    c("add_alpha", "add", lambda g: [g.uniform([4, 3]), g.uniform([3])], {"alpha": 2.5})
    c("add_transposed", "add", lambda g: [g.uniform([5, 3], view=[["transpose", 0, 1]]), g.uniform([3, 5])])
    c("sub_broadcast", "sub", lambda g: [g.uniform([2, 3, 5]), g.uniform([5])])
    c("sub_alpha", "sub", lambda g: [g.uniform([3, 1]), g.uniform([1, 4])], {"alpha": -0.5})
    c("mul_expanded", "mul", lambda g: [g.uniform([3, 1], view=[["expand", [3, 4]]]), g.uniform([3, 4])])
    c("mul_outer", "mul", lambda g: [g.uniform([4, 1]), g.uniform([1, 7])])
    c("mul_sliced", "mul", lambda g: [g.uniform([3, 10], view=[["slice", 1, 1, 10, 2]]), g.uniform([3, 1])])
    c("div_broadcast", "div", lambda g: [g.uniform([3, 5]), g.away([5], 0.5, 2.0)])
    c("div_rank0", "div", lambda g: [g.uniform([2, 3]), g.away([], 0.5, 2.0)])
    c("pow_tensor", "pow", lambda g: [g.uniform([3, 4], 0.5, 2.0), g.uniform([4], -1.5, 2.0)])
    c("maximum", "maximum", lambda g: [g.uniform([3, 5]), g.uniform([5])])
    c("minimum", "minimum", lambda g: [g.uniform([4, 1]), g.uniform([3])])
    c("add_int_scalar", "add_scalar", lambda g: [g.uniform([3, 4])], {"scalar": 2})
    c("sub_float_scalar", "sub_scalar", lambda g: [g.uniform([5])], {"scalar": 1.25})
    c("mul_scalar", "mul_scalar", lambda g: [g.uniform([2, 3])], {"scalar": -1.5})
    c("div_scalar", "div_scalar", lambda g: [g.uniform([7])], {"scalar": 3})
    c("rsub_scalar", "rsub_scalar", lambda g: [g.uniform([2, 5])], {"scalar": 2.0})
    c("pow_scalar_float", "pow_scalar", lambda g: [g.uniform([2, 7], 0.2, 2.0)], {"scalar": 2.5})
    c("pow_scalar_int_signed", "pow_scalar", lambda g: [g.uniform([3, 4])], {"scalar": 3})
    c("pow_scalar_negative", "pow_scalar", lambda g: [g.uniform([5], 0.3, 2.0)], {"scalar": -0.5})
    c("add_int64_int64", "add", lambda g: [g.ints([3, 4], -50, 50), g.ints([4], -50, 50)], grad=False)
    c("mul_int32_float", "mul", lambda g: [Inp(g.ints([5], -9, 9).data.astype(np.int32)), g.uniform([3, 1])])
    c("div_int_int", "div", lambda g: [g.ints([6], -20, 20), Inp(np.array([3, -4, 7, 2, -5, 6], np.int64))],
      grad=False)

    unary = [
        ("neg", {}, lambda g: g.uniform([5, 7])),
        ("exp", {}, lambda g: g.uniform([5, 7])),
        ("log", {}, lambda g: g.uniform([5, 7], 0.1, 3.0)),
        ("sqrt", {}, lambda g: g.uniform([5, 7], 0.1, 3.0)),
        ("rsqrt", {}, lambda g: g.uniform([5, 7], 0.2, 3.0)),
        ("abs", {}, lambda g: g.away([5, 7], 0.05, 2.0)),
        ("tanh", {}, lambda g: g.uniform([5, 7], -3.0, 3.0)),
        ("sigmoid", {}, lambda g: g.uniform([5, 7], -5.0, 5.0)),
        ("relu", {}, lambda g: g.away([5, 7], 0.01, 2.0)),
        ("silu", {}, lambda g: g.uniform([5, 7], -4.0, 4.0)),
    ]
    for op, args, build in unary:
        c(op, op, lambda g: [build(g)], args)
        c(op + "_transposed", op, lambda g: [Inp(build(g).data, view=[["transpose", 0, 1]])], args)
    c("gelu_erf", "gelu", lambda g: [g.uniform([5, 7], -4.0, 4.0)], {"approximate": "none"})
    c("gelu_tanh", "gelu", lambda g: [g.uniform([5, 7], -4.0, 4.0)], {"approximate": "tanh"})
    c("gelu_erf_sliced", "gelu", lambda g: [g.uniform([4, 9], -3.0, 3.0, view=[["slice", 1, 0, 9, 3]])],
      {"approximate": "none"})
    c("sigmoid_saturated", "sigmoid", lambda g: [Inp(np.array([-30, -12, -1e-3, 0.0, 1e-3, 12, 30], np.float32))])
    # Values at 0.1 spacing keep away from the bounds, where the gradient's convention would matter.
    c("clamp_both", "clamp", lambda g: [g.grid([4, 6], np.arange(-2.04, 2.05, 0.1))], {"lo": -0.5, "hi": 1.0})
    c("clamp_lo", "clamp", lambda g: [g.grid([7], np.arange(-2.04, 2.05, 0.1))], {"lo": 0.25, "hi": None})
    c("clamp_hi", "clamp", lambda g: [g.grid([7], np.arange(-2.04, 2.05, 0.1))], {"lo": None, "hi": -0.25})
    c("where_broadcast", "where", lambda g: [g.bools([4, 5]), g.uniform([3, 1, 5]), g.uniform([4, 1])])
    c("where_transposed", "where",
      lambda g: [g.bools([3, 4]), g.uniform([4, 3], view=[["transpose", 0, 1]]), g.uniform([3, 4])])
    c("masked_fill", "masked_fill", lambda g: [g.uniform([4, 6]), g.bools([6])], {"value": -2.5})
    c("masked_fill_full_mask", "masked_fill", lambda g: [g.uniform([3, 5]), g.bools([3, 5])], {"value": 7})
    for op in ["eq", "ne", "lt", "le", "gt", "ge"]:
        c(op, op, lambda g: [g.grid([4, 5], [0, 1, 2]), g.grid([5], [0, 1, 2])])
        c(op + "_scalar", op + "_scalar", lambda g: [g.grid([3, 4], [0, 0.5, 1])], {"scalar": 0.5})
    c("lt_int_float", "lt", lambda g: [g.ints([6], -2, 3), g.grid([6], [-1.5, 0, 1, 2])])
    return cs


def reduce_cases():
    cs = []

    def c(name, op, build, args=None, **kw):
        cs.append(make_case(name, op, build(Gen(name)), args, **kw))

    x345 = lambda g: [g.uniform([3, 4, 5])]
    perm = lambda g: [g.uniform([5, 3, 4], view=[["permute", [1, 2, 0]]])]  # a [3, 4, 5] view
    for op in ["sum", "mean"]:
        c(op + "_all", op, x345, {"dims": [], "keepdim": False})
        c(op + "_dim1_keepdim", op, x345, {"dims": [1], "keepdim": True})
        c(op + "_dims02", op, x345, {"dims": [0, 2], "keepdim": False})
        c(op + "_last_permuted", op, perm, {"dims": [-1], "keepdim": False})
        c(op + "_expanded", op, lambda g: [g.uniform([1, 4], view=[["expand", [3, 4]]])],
          {"dims": [0], "keepdim": False})
    for op in ["amax", "amin"]:
        c(op + "_all", op, x345, {"dims": [], "keepdim": False})
        c(op + "_dim1_keepdim", op, x345, {"dims": [1], "keepdim": True})
        c(op + "_dims02_permuted", op, perm, {"dims": [0, 2], "keepdim": False})
    for op in ["max_dim", "min_dim"]:
        c(op + "_0", op, x345, {"dim": 0, "keepdim": False})
        c(op + "_2_keepdim", op, x345, {"dim": 2, "keepdim": True})
        c(op + "_neg2_permuted", op, perm, {"dim": -2, "keepdim": False})
    c("max_all", "max_all", x345)
    c("min_all", "min_all", x345)
    for op in ["argmax", "argmin"]:
        c(op + "_1", op, x345, {"dim": 1, "keepdim": False})
        c(op + "_last_keepdim_permuted", op, perm, {"dim": -1, "keepdim": True})
    for corr in [0, 1]:
        c(f"var_all_c{corr}", "var", x345, {"dims": [], "correction": corr, "keepdim": False})
        c(f"var_dim1_keepdim_c{corr}", "var", x345, {"dims": [1], "correction": corr, "keepdim": True})
        c(f"var_dims02_c{corr}", "var", perm, {"dims": [0, 2], "correction": corr, "keepdim": False})
    for op in ["softmax", "log_softmax"]:
        c(op + "_dim1", op, lambda g: [g.uniform([3, 4, 5], -3, 3)], {"dim": 1})
        c(op + "_last", op, lambda g: [g.uniform([3, 7], -3, 3)], {"dim": -1})
        c(op + "_transposed", op, lambda g: [g.uniform([6, 4], -3, 3, view=[["transpose", 0, 1]])], {"dim": 1})
        c(op + "_size1", op, lambda g: [g.uniform([3, 1])], {"dim": 1})
        c(op + "_large", op, lambda g: [g.uniform([2, 5], 80, 90)], {"dim": 1})  # exp overflows without max shift
    return cs


def linalg_cases():
    cs = []

    def c(name, op, build, args=None, **kw):
        cs.append(make_case(name, op, build(Gen(name)), args, **kw))

    c("matmul_dot", "matmul", lambda g: [g.uniform([7]), g.uniform([7])])
    c("matmul_vec_mat", "matmul", lambda g: [g.uniform([5]), g.uniform([5, 3])])
    c("matmul_mat_vec", "matmul", lambda g: [g.uniform([3, 5]), g.uniform([5])])
    c("matmul_mat_mat", "matmul", lambda g: [g.uniform([3, 5]), g.uniform([5, 4])])
    c("matmul_transposed", "matmul",
      lambda g: [g.uniform([5, 3], view=[["transpose", 0, 1]]), g.uniform([4, 5], view=[["transpose", 0, 1]])])
    c("matmul_batched", "matmul", lambda g: [g.uniform([2, 3, 5]), g.uniform([2, 5, 4])])
    c("matmul_batched_broadcast", "matmul", lambda g: [g.uniform([2, 1, 3, 5]), g.uniform([3, 5, 4])])
    c("matmul_mat_batched", "matmul", lambda g: [g.uniform([3, 5]), g.uniform([2, 5, 4])])
    c("matmul_vec_batched", "matmul", lambda g: [g.uniform([5]), g.uniform([2, 5, 4])])
    c("matmul_batched_vec", "matmul", lambda g: [g.uniform([2, 3, 5]), g.uniform([5])])
    c("linear_bias", "linear", lambda g: [g.uniform([4, 7]), g.uniform([5, 7]), g.uniform([5])])
    c("linear_no_bias", "linear", lambda g: [g.uniform([4, 7]), g.uniform([5, 7])])
    c("linear_3d", "linear", lambda g: [g.uniform([2, 3, 7]), g.uniform([5, 7]), g.uniform([5])])
    c("linear_transposed_input", "linear",
      lambda g: [g.uniform([7, 4], view=[["transpose", 0, 1]]), g.uniform([5, 7]), g.uniform([5])])
    return cs


def index_cases():
    cs = []

    def c(name, op, build, args=None, **kw):
        cs.append(make_case(name, op, build(Gen(name)), args, **kw))

    c("cat_dim0", "cat", lambda g: [g.uniform([2, 3]), g.uniform([4, 3]), g.uniform([1, 3])], {"dim": 0})
    c("cat_dim1_transposed", "cat",
      lambda g: [g.uniform([3, 2], view=[["transpose", 0, 1]]), g.uniform([2, 5])], {"dim": 1})
    c("cat_neg_dim", "cat", lambda g: [g.uniform([2, 3, 1]), g.uniform([2, 3, 2])], {"dim": -1})
    c("stack_dim0", "stack", lambda g: [g.uniform([3, 4]), g.uniform([3, 4]), g.uniform([3, 4])], {"dim": 0})
    c("stack_last", "stack", lambda g: [g.uniform([3, 4]), g.uniform([4, 3], view=[["transpose", 0, 1]])],
      {"dim": -1})
    c("split_uneven", "split", lambda g: [g.uniform([7, 4])], {"size": 3, "dim": 0})
    c("split_with_sizes", "split_with_sizes", lambda g: [g.uniform([4, 6])], {"sizes": [1, 2, 3], "dim": 1})
    c("chunk_uneven", "chunk", lambda g: [g.uniform([8, 5])], {"chunks": 3, "dim": 0})
    c("chunk_fewer", "chunk", lambda g: [g.uniform([2, 6])], {"chunks": 4, "dim": 1})  # torch gives 3 chunks
    c("gather_dim1", "gather", lambda g: [g.uniform([3, 5]), g.ints([3, 4], 0, 5)], {"dim": 1})
    c("gather_dim0", "gather", lambda g: [g.uniform([4, 3]), g.ints([6, 2], 0, 4)], {"dim": 0})
    c("gather_transposed", "gather",
      lambda g: [g.uniform([5, 3], view=[["transpose", 0, 1]]), g.ints([3, 5], 0, 5)], {"dim": 1})
    c("index_select_dim0", "index_select",
      lambda g: [g.uniform([5, 4]), Inp(np.array([3, 0, 3, 1], np.int64))], {"dim": 0})
    c("index_select_dim1", "index_select",
      lambda g: [g.uniform([3, 6]), Inp(np.array([5, 5, 2], np.int64))], {"dim": 1})
    c("embedding", "embedding", lambda g: [g.uniform([10, 4]), g.ints([2, 3], 0, 10)])
    c("embedding_repeats", "embedding",
      lambda g: [g.uniform([6, 3]), Inp(np.array([[1, 1, 4], [5, 1, 0]], np.int64))])
    for op in ["tril", "triu"]:
        for d in [0, 1, -1]:
            c(f"{op}_{d}", op, lambda g: [g.uniform([4, 5])], {"diagonal": d})
        c(op + "_batched", op, lambda g: [g.uniform([2, 3, 4])], {"diagonal": 0})
        c(op + "_transposed", op, lambda g: [g.uniform([5, 4], view=[["transpose", 0, 1]])], {"diagonal": 1})
    return cs


def nn_cases():
    cs = []

    def c(name, op, build, args=None, **kw):
        cs.append(make_case(name, op, build(Gen(name)), args, **kw))

    ln = {"eps": 1e-5}
    c("layer_norm_affine", "layer_norm", lambda g: [g.uniform([3, 4, 6]), g.uniform([6]), g.uniform([6])],
      dict(ln, normalized_shape=[6]))
    c("layer_norm_plain_2d", "layer_norm", lambda g: [g.uniform([3, 4, 6])], dict(ln, normalized_shape=[4, 6]))
    c("layer_norm_weight_only_eps", "layer_norm", lambda g: [g.uniform([5, 7]), g.uniform([7])],
      {"eps": 1e-3, "normalized_shape": [7]})
    c("layer_norm_transposed", "layer_norm",
      lambda g: [g.uniform([6, 4], view=[["transpose", 0, 1]]), g.uniform([6]), g.uniform([6])],
      dict(ln, normalized_shape=[6]))

    def ce(ignore=-100, smoothing=0.0, reduction="mean"):
        return {"ignore_index": ignore, "label_smoothing": smoothing, "reduction": reduction}

    logits65 = lambda g: g.uniform([6, 5], -3, 3)
    tgt = lambda: Inp(np.array([0, 4, 2, 2, 1, 3], np.int64))
    tgt_ign = lambda v: Inp(np.array([0, v, 2, 4, v, 3], np.int64))
    for red in ["mean", "sum", "none"]:
        c("cross_entropy_" + red, "cross_entropy", lambda g: [logits65(g), tgt()], ce(reduction=red))
        c("cross_entropy_ignore_default_" + red, "cross_entropy", lambda g: [logits65(g), tgt_ign(-100)],
          ce(reduction=red))
        c("cross_entropy_smoothing_" + red, "cross_entropy", lambda g: [logits65(g), tgt()],
          ce(smoothing=0.1, reduction=red))
    c("cross_entropy_ignore_1", "cross_entropy", lambda g: [logits65(g), tgt_ign(1)], ce(ignore=1))
    c("cross_entropy_ignore_smoothing", "cross_entropy", lambda g: [logits65(g), tgt_ign(1)],
      ce(ignore=1, smoothing=0.2))
    c("cross_entropy_ncd", "cross_entropy", lambda g: [g.uniform([3, 5, 4], -3, 3), g.ints([3, 4], 0, 5)], ce())
    c("cross_entropy_ncd_none", "cross_entropy", lambda g: [g.uniform([3, 5, 4], -3, 3), g.ints([3, 4], 0, 5)],
      ce(reduction="none"))
    c("cross_entropy_nchw_smoothing_ignore", "cross_entropy",
      lambda g: [g.uniform([2, 4, 3, 2], -3, 3), Inp(np.array([[[0, 3], [1, -100], [2, 2]],
                                                              [[3, 1], [-100, 0], [1, 3]]], np.int64))],
      ce(smoothing=0.15))
    for red in ["mean", "sum", "none"]:
        c("mse_loss_" + red, "mse_loss", lambda g: [g.uniform([3, 5]), g.uniform([3, 5])], {"reduction": red})

    def conv(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        return {"stride": list(stride), "padding": list(padding), "dilation": list(dilation), "groups": groups}

    def c_conv(name, build, args):
        # Outputs and weight gradients are sums of 10-60 products of magnitude up to 4; where they cancel to
        # near zero, float32 accumulation leaves ~1e-6 absolute error whatever the order (PyTorch's own
        # float32 result reaches 0.66x of the default tolerance), so the absolute floor is 1e-5 here.
        c(name, "conv2d", build, args, atol=1e-5, why="float32 accumulation of cancelling sums of products")

    c_conv("conv2d_basic", lambda g: [g.uniform([2, 3, 5, 6]), g.uniform([4, 3, 3, 2]), g.uniform([4])], conv())
    c_conv("conv2d_stride2_pad1", lambda g: [g.uniform([1, 3, 7, 6]), g.uniform([4, 3, 3, 3]), g.uniform([4])],
      conv((2, 2), (1, 1)))
    c_conv("conv2d_asymmetric_no_bias", lambda g: [g.uniform([1, 2, 6, 7]), g.uniform([3, 2, 3, 2])],
      conv((2, 1), (1, 2)))
    c_conv("conv2d_dilation2", lambda g: [g.uniform([2, 2, 7, 7]), g.uniform([3, 2, 3, 3]), g.uniform([3])],
      conv(dilation=(2, 2)))
    c_conv("conv2d_groups2", lambda g: [g.uniform([1, 4, 6, 5]), g.uniform([6, 2, 3, 3]), g.uniform([6])],
      conv(padding=(1, 1), groups=2))
    c_conv("conv2d_depthwise", lambda g: [g.uniform([2, 3, 5, 5]), g.uniform([3, 1, 3, 3]), g.uniform([3])],
      conv(padding=(1, 1), groups=3))
    c_conv("conv2d_depthwise_multiplier",
      lambda g: [g.uniform([1, 3, 5, 6]), g.uniform([6, 1, 3, 3])], conv(stride=(2, 2), groups=3))
    c_conv("conv2d_permuted_input",
      lambda g: [g.uniform([2, 6, 5, 3], view=[["permute", [0, 3, 1, 2]]]), g.uniform([2, 3, 2, 2]),
                 g.uniform([2])], conv())

    def pool(kernel, stride=(), padding=(0, 0)):
        return {"kernel": list(kernel), "stride": list(stride), "padding": list(padding)}

    for op in ["max_pool2d", "avg_pool2d"]:
        c(op + "_k2", op, lambda g: [g.uniform([2, 2, 7, 5])], pool((2, 2)))
        c(op + "_k3_s2_p1", op, lambda g: [g.uniform([1, 2, 7, 6])], pool((3, 3), (2, 2), (1, 1)))
        c(op + "_rect", op, lambda g: [g.uniform([1, 2, 5, 7])], pool((2, 3), (1, 2), (1, 1)))
        c(op + "_transposed", op, lambda g: [g.uniform([1, 2, 6, 5], view=[["transpose", 2, 3]])], pool((2, 2)))
    return cs


def model_cases():
    def linear_init(g, out_f, in_f):
        bound = 1 / np.sqrt(in_f)
        return [g.uniform([out_f, in_f], -bound, bound), g.uniform([out_f], -bound, bound)]

    def mlp_inputs(g):
        return [g.uniform([6, 7], grad=False), g.ints([6], 0, 5)] + linear_init(g, 13, 7) + linear_init(g, 5, 13)

    def conv_init(g, out_c, in_c, k):
        bound = 1 / np.sqrt(in_c * k * k)
        return [g.uniform([out_c, in_c, k, k], -bound, bound), g.uniform([out_c], -bound, bound)]

    def convnet_inputs(g):
        return ([g.uniform([3, 3, 11, 10], grad=False), g.ints([3], 0, 3)] + conv_init(g, 4, 3, 3) +
                conv_init(g, 6, 2, 3) + linear_init(g, 3, 6))

    cases = []
    for name, build in [("mlp", mlp_inputs), ("convnet", convnet_inputs)]:
        inputs = build(Gen(name))
        case = make_case(name, name, inputs, grad_outputs=[None, np.array(1.0, np.float32)])
        case["input_names"] = (["x", "target", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"] if name == "mlp" else
                               ["x", "target", "conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                "fc.weight", "fc.bias"])
        cases.append(case)
    return cases


def promotion_table():
    """torch's result dtype for tensor-tensor and tensor-scalar arithmetic."""
    names = list(DTYPES)
    pairs = []
    for op in ["add", "mul", "div"]:
        f = getattr(torch, op)
        for a in names:
            for b in names:
                for ra, rb in [(1, 1), (1, 0), (0, 1), (0, 0)]:
                    x = torch.ones([3] if ra else [], dtype=DTYPES[a])
                    y = torch.ones([3] if rb else [], dtype=DTYPES[b])
                    pairs.append({"op": op, "a": a, "b": b, "a_dim": ra, "b_dim": rb,
                                  "result": DTYPE_NAMES[f(x, y).dtype]})
    scalars = []
    for op in ["add", "mul", "div"]:
        f = getattr(torch, op)
        for a in names:
            for kind, s in [("int", 2), ("float", 2.5), ("bool", True)]:
                for ra in [1, 0]:
                    x = torch.ones([3] if ra else [], dtype=DTYPES[a])
                    scalars.append({"op": op, "a": a, "a_dim": ra, "scalar": kind,
                                    "result": DTYPE_NAMES[f(x, s).dtype]})
    return {"tensor_tensor": pairs, "tensor_scalar": scalars}


def write(name, content):
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        json.dump(content, f, separators=(",", ":"))
        f.write("\n")
    n = len(content["cases"]) if "cases" in content else sum(len(v) for v in content.values() if isinstance(v, list))
    print(f"wrote {os.path.relpath(path, os.path.dirname(HERE))}: {n} entries, {os.path.getsize(path)} bytes")


def main():
    torch.manual_seed(0)
    os.makedirs(OUT_DIR, exist_ok=True)
    meta = {"torch": torch.__version__, "rtol": RTOL, "atol": ATOL}
    for name, build in [("core_elementwise.json", elementwise_cases), ("core_reduce.json", reduce_cases),
                        ("core_linalg.json", linalg_cases), ("core_index.json", index_cases),
                        ("core_nn.json", nn_cases), ("core_models.json", model_cases)]:
        write(name, dict(meta, cases=build()))
    write("core_promotion.json", dict(meta, **promotion_table()))


if __name__ == "__main__":
    main()
