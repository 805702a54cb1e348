#!/usr/bin/python3
"""Writes the PyTorch fixtures of memgrad's op case list (tests/reference/fixtures/ops_<family>.json)
and the type promotion table (core_promotion.json).

The cases are not written here: they live in tests/ops/cases_*.cpp, and the test binary dumps them
with their inputs. Build it, then run with Debian's python3-torch:

    /usr/bin/python3 tests/reference/make_fixtures.py            # runs build/tests/test_ops --dump-cases
    /usr/bin/python3 tests/reference/make_fixtures.py --test-ops path/to/test_ops
    /usr/bin/python3 tests/reference/make_fixtures.py --cases cases.json

Each dumped case holds its op, arguments, float32 inputs (base tensors plus view steps, which make
them non-contiguous), a random upstream gradient per differentiable output and its tolerance.
This script adds, per case, PyTorch's outputs and the gradient of every input that requires grad,
keyed by the case name, with the digest of the inputs they were computed from. References are
computed in float64 from the float32 inputs and rounded to float32, so a C++ mismatch measures
memgrad's error alone; the script also reruns each case in float32 and refuses to write a case
where PyTorch's own float32 result misses its reference by more than half the case's tolerance.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT_DIR = os.path.join(HERE, "fixtures")

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int32": torch.int32, "int64": torch.int64,
    "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
# Result dtypes memgrad lacks, in the promotion table: uint8 with int8 is int16 in PyTorch.
DTYPE_NAMES_EXTRA = {torch.int16: "int16"}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
DTYPE_NAMES.update(DTYPE_NAMES_EXTRA)


# ---------------------------------------------------------------- the ops, in PyTorch

def a_slice(x, dim, start, end, step):
    return x[(slice(None),) * dim + (slice(start, end, step),)]


def attention(x, a):
    """softmax(scale q k^T + mask) v, composed (torch 1.13 has no scaled_dot_product_attention)."""
    q, k, v = x[:3]
    scale = a["scale"] if a["scale"] is not None else 1 / q.shape[-1] ** 0.5
    s = q @ k.transpose(-2, -1) * scale
    if a["is_causal"]:
        tq, tk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), float("-inf"))
    if len(x) > 3:  # bool: true where the query sees the key; else added to the scores
        m = x[3]
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m
    return torch.softmax(s, -1) @ v


def scaled_masked_softmax(x, a):
    """softmax(scale x + mask) over the last dim, composed; a row that sees no key is NaN."""
    s = x[0] * a["scale"]
    if a["is_causal"]:
        tq, tk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), float("-inf"))
    if len(x) > 1:
        m = x[1]
        s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m
    return torch.softmax(s, -1)


def add_layer_norm(x, a):
    s = x[0] + x[1]
    return s, F.layer_norm(s, a["normalized_shape"], *x[2:], eps=a["eps"])


def rms_norm(x, a):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing dims, by formula (torch 1.13 has no rms_norm)."""
    dims = tuple(range(-len(a["normalized_shape"]), 0))
    y = x[0] * torch.rsqrt(x[0].pow(2).mean(dims, keepdim=True) + a["eps"])
    return y * x[1] if len(x) > 1 else y


def scan(f):
    return lambda x, a: f(x[0], a["dim"], dtype=DTYPES[a["dtype"]] if a.get("dtype") else None)


def reduce_dims(f):
    return lambda x, a: f(x[0], a["dims"], a["keepdim"]) if a["dims"] else f(x[0])


TORCH_OPS = {
    "add": lambda x, a: torch.add(x[0], x[1], alpha=a.get("alpha", 1)),
    "sub": lambda x, a: torch.sub(x[0], x[1], alpha=a.get("alpha", 1)),
    "mul": lambda x, a: x[0] * x[1],
    "div": lambda x, a: x[0] / x[1],
    "pow": lambda x, a: torch.pow(x[0], x[1]),
    "maximum": lambda x, a: torch.maximum(x[0], x[1]),
    "minimum": lambda x, a: torch.minimum(x[0], x[1]),
    "add_scalar": lambda x, a: x[0] + a["scalar"],
    "sub_scalar": lambda x, a: x[0] - a["scalar"],
    "mul_scalar": lambda x, a: x[0] * a["scalar"],
    "div_scalar": lambda x, a: x[0] / a["scalar"],
    "rdiv_scalar": lambda x, a: a["scalar"] / x[0],
    "pow_scalar": lambda x, a: torch.pow(x[0], a["scalar"]),
    "rsub_scalar": lambda x, a: a["scalar"] - x[0],
    "neg": lambda x, a: -x[0],
    "exp": lambda x, a: torch.exp(x[0]),
    "log": lambda x, a: torch.log(x[0]),
    "sqrt": lambda x, a: torch.sqrt(x[0]),
    "rsqrt": lambda x, a: torch.rsqrt(x[0]),
    "abs": lambda x, a: torch.abs(x[0]),
    "tanh": lambda x, a: torch.tanh(x[0]),
    "erf": lambda x, a: torch.erf(x[0]),
    "sigmoid": lambda x, a: torch.sigmoid(x[0]),
    "relu": lambda x, a: torch.relu(x[0]),
    "gelu": lambda x, a: F.gelu(x[0], approximate=a["approximate"]),
    "bias_gelu": lambda x, a: F.gelu(x[0] + x[1], approximate=a["approximate"]),
    "silu": lambda x, a: F.silu(x[0]),
    "clamp": lambda x, a: torch.clamp(x[0], a["lo"], a["hi"]),
    "clamp_": lambda x, a: x[0].clone().clamp_(a["lo"], a["hi"]),
    "where": lambda x, a: torch.where(x[0], x[1], x[2]),
    "masked_fill": lambda x, a: x[0].masked_fill(x[1], a["value"]),
    "sum": reduce_dims(torch.sum),
    "mean": reduce_dims(torch.mean),
    "amax": lambda x, a: torch.amax(x[0], a["dims"], a["keepdim"]),
    "amin": lambda x, a: torch.amin(x[0], a["dims"], a["keepdim"]),
    "var": lambda x, a: torch.var(x[0], a["dims"] or None, correction=a["correction"], keepdim=a["keepdim"]),
    "std": lambda x, a: torch.std(x[0], a["dims"] or None, correction=a["correction"], keepdim=a["keepdim"]),
    "logsumexp": lambda x, a: torch.logsumexp(x[0], a["dims"] or list(range(x[0].dim())), a["keepdim"]),
    "cumsum": scan(torch.cumsum),
    "cumprod": scan(torch.cumprod),
    "sort": lambda x, a: tuple(torch.sort(x[0], dim=a["dim"], descending=a["descending"], stable=True)),
    "argsort": lambda x, a: torch.sort(x[0], dim=a["dim"], descending=a["descending"], stable=True)[1],
    "topk": lambda x, a: tuple(torch.topk(x[0], a["k"], a["dim"], a["largest"], True)),
    "max_dim": lambda x, a: tuple(torch.max(x[0], a["dim"], a["keepdim"])),
    "min_dim": lambda x, a: tuple(torch.min(x[0], a["dim"], a["keepdim"])),
    "max_all": lambda x, a: torch.max(x[0]),
    "min_all": lambda x, a: torch.min(x[0]),
    "argmax": lambda x, a: torch.argmax(x[0], a["dim"], a["keepdim"]),
    "argmin": lambda x, a: torch.argmin(x[0], a["dim"], a["keepdim"]),
    "sum_to": lambda x, a: x[0].sum_to_size(a["shape"]),
    "softmax": lambda x, a: torch.softmax(x[0], a["dim"]),
    "log_softmax": lambda x, a: torch.log_softmax(x[0], a["dim"]),
    "matmul": lambda x, a: torch.matmul(x[0], x[1]),
    "linear": lambda x, a: F.linear(*x),
    "scaled_dot_product_attention": attention,
    "cat": lambda x, a: torch.cat(x, a["dim"]),
    "stack": lambda x, a: torch.stack(x, a["dim"]),
    "split": lambda x, a: torch.split(x[0], a["size"], a["dim"]),
    "split_with_sizes": lambda x, a: torch.split(x[0], a["sizes"], a["dim"]),
    "chunk": lambda x, a: torch.chunk(x[0], a["chunks"], a["dim"]),
    "gather": lambda x, a: torch.gather(x[0], a["dim"], x[1]),
    "index_select": lambda x, a: torch.index_select(x[0], a["dim"], x[1]),
    "scatter": lambda x, a: torch.scatter(x[0], a["dim"], x[1], x[2]),
    "scatter_value": lambda x, a: torch.scatter(x[0], a["dim"], x[1], a["value"]),
    "scatter_add": lambda x, a: torch.scatter_add(x[0], a["dim"], x[1], x[2]),
    "index_add": lambda x, a: torch.index_add(x[0], a["dim"], x[1], x[2], alpha=a["alpha"]),
    "one_hot": lambda x, a: F.one_hot(x[0], a["num_classes"]),
    "flip": lambda x, a: torch.flip(x[0], a["dims"]),
    "repeat": lambda x, a: x[0].repeat(*a["repeats"]),
    "embedding": lambda x, a: F.embedding(x[1], x[0]),
    "tril": lambda x, a: torch.tril(x[0], a["diagonal"]),
    "triu": lambda x, a: torch.triu(x[0], a["diagonal"]),
    "scaled_masked_softmax": scaled_masked_softmax,
    "add_layer_norm": add_layer_norm,
    "bias_dropout_add": lambda x, a: x[2] + (x[0] + x[1]) * (0.0 if a["p"] == 1 and a["training"] else 1.0),
    "layer_norm": lambda x, a: F.layer_norm(x[0], a["normalized_shape"], *x[1:], eps=a["eps"]),
    "rms_norm": rms_norm,
    "group_norm": lambda x, a: F.group_norm(x[0], a["num_groups"], *x[1:], eps=a["eps"]),
    "cross_entropy": lambda x, a: F.cross_entropy(x[0], x[1], weight=x[2] if len(x) > 2 else None,
                                                  ignore_index=a["ignore_index"], label_smoothing=a["label_smoothing"],
                                                  reduction=a["reduction"]),
    "nll_loss": lambda x, a: F.nll_loss(x[0], x[1], weight=x[2] if len(x) > 2 else None,
                                        ignore_index=a["ignore_index"], reduction=a["reduction"]),
    "mse_loss": lambda x, a: F.mse_loss(x[0], x[1], reduction=a["reduction"]),
    "conv2d": lambda x, a: F.conv2d(*x, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                                    groups=a["groups"]),
    "max_pool2d": lambda x, a: F.max_pool2d(x[0], a["kernel"], a["stride"] or None, a["padding"]),
    "avg_pool2d": lambda x, a: F.avg_pool2d(x[0], a["kernel"], a["stride"] or None, a["padding"]),
    "view": lambda x, a: x[0].view(a["shape"]),
    "reshape": lambda x, a: x[0].reshape(a["shape"]),
    "transpose": lambda x, a: x[0].transpose(a["dim0"], a["dim1"]),
    "permute": lambda x, a: x[0].permute(a["dims"]),
    "narrow": lambda x, a: x[0].narrow(a["dim"], a["start"], a["length"]),
    "slice": lambda x, a: a_slice(x[0], a["dim"], a["start"], a["end"], a["step"]),
    "select": lambda x, a: x[0].select(a["dim"], a["index"]),
    "expand": lambda x, a: x[0].expand(a["shape"]),
    "squeeze": lambda x, a: x[0].squeeze() if a["dim"] is None else x[0].squeeze(a["dim"]),
    "unsqueeze": lambda x, a: x[0].unsqueeze(a["dim"]),
    "flatten": lambda x, a: x[0].flatten(a["start"], a["end"]),
    "contiguous": lambda x, a: x[0].contiguous(),
    "clone": lambda x, a: x[0].clone(),
    "to": lambda x, a: x[0].to(DTYPES[a["dtype"]]),
}
for _cmp in ["eq", "ne", "lt", "le", "gt", "ge"]:
    TORCH_OPS[_cmp] = (lambda f: lambda x, a: f(x[0], x[1]))(getattr(torch, _cmp))
    TORCH_OPS[_cmp + "_scalar"] = (lambda f: lambda x, a: f(x[0], a["scalar"]))(getattr(torch, _cmp))


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


def optimizer_steps(make):
    """Copies of the parameters (the first half of the inputs) with their gradients (the second
    half), stepped a["steps"] times; returns the parameters."""
    def f(x, a):
        n = len(x) // 2
        params = [p.detach().clone().requires_grad_() for p in x[:n]]
        for p, g in zip(params, x[n:]):
            p.grad = g.detach().clone()
        opt = make(params, a)
        for _ in range(a["steps"]):
            opt.step()
        return tuple(p.detach() for p in params)
    return f


TORCH_OPS["sgd_step"] = optimizer_steps(lambda p, a: torch.optim.SGD(
    p, lr=a["lr"], momentum=a["momentum"], dampening=a["dampening"], weight_decay=a["weight_decay"],
    nesterov=a["nesterov"], maximize=a["maximize"]))
for _name, _cls in [("adam_step", torch.optim.Adam), ("adamw_step", torch.optim.AdamW)]:
    TORCH_OPS[_name] = optimizer_steps((lambda cls: lambda p, a: cls(
        p, lr=a["lr"], betas=(a["beta1"], a["beta2"]), weight_decay=a["weight_decay"], amsgrad=a["amsgrad"],
        maximize=a["maximize"]))(_cls))


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023) as lucidrains' lion-pytorch steps it, in plain torch (torch 1.13 has
    none): the decoupled weight decay, then a step of lr against the sign of the interpolation of the
    momentum and the gradient, then the momentum moves towards the gradient. `maximize` negates the
    gradient, as in torch.optim."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, maximize=False):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay, maximize=maximize))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, (beta1, beta2), wd = group["lr"], group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = -p.grad if group["maximize"] else p.grad
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


def lion_steps(x, a):
    """Lion's case: as optimizer_steps, with the gradients scaled by a["flip"] at every second step."""
    n = len(x) // 2
    params = [p.detach().clone().requires_grad_() for p in x[:n]]
    opt = Lion(params, lr=a["lr"], betas=(a["beta1"], a["beta2"]), weight_decay=a["weight_decay"],
               maximize=a["maximize"])
    for s in range(a["steps"]):
        for p, g in zip(params, x[n:]):
            p.grad = g.detach() * a["flip"] if s % 2 else g.detach().clone()
        opt.step()
    return tuple(p.detach() for p in params)


TORCH_OPS["lion_step"] = lion_steps


# ---------------------------------------------------------------- running a case

def apply_view(t, steps):
    for kind, arg in steps:
        if kind == "transpose":
            t = t.transpose(arg[0], arg[1])
        elif kind == "permute":
            t = t.permute(*arg)
        elif kind == "slice":  # dim, start, end, step
            t = a_slice(t, *arg)
        elif kind == "select":
            t = t.select(arg[0], arg[1])
        elif kind == "expand":  # stride-0 dims: the gradient must be summed back
            t = t.expand(*arg)
        else:
            raise ValueError(kind)
    return t


def from_json(j):
    dtype = DTYPES[j["dtype"]]
    data = [float(v) if dtype.is_floating_point else v for v in j["data"]]  # float("nan") reads the strings
    return torch.tensor(data, dtype=torch.float64 if dtype.is_floating_point else dtype).reshape(j["shape"]).to(dtype)


def run(case, float_dtype):
    leaves, views = [], []
    for inp in case["inputs"]:
        t = from_json(inp)
        if inp["follows"]:
            t = t.to(float_dtype)
        leaf = t.requires_grad_(inp["requires_grad"])
        leaves.append(leaf)
        views.append(apply_view(leaf, inp["view"]))
    outs = TORCH_OPS[case["op"]](views, case["args"])
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    pairs = [(o, from_json(g).to(o.dtype)) for o, g in zip(outs, case["grad_outputs"]) if g is not None]
    if pairs:
        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    return outs, [leaf.grad if inp["requires_grad"] else None for leaf, inp in zip(leaves, case["inputs"])]


def worst_ratio(got, ref, rtol, atol):
    """max |got - ref| / (atol + rtol |ref|): at most 1 passes; NaN and infinities must match exactly."""
    got, ref = got.detach().double(), ref.detach().double()
    if got.numel() == 0:
        return 0.0
    same = (got == ref) | (got.isnan() & ref.isnan())
    ratio = ((got - ref).abs() / (atol + rtol * ref.abs())).nan_to_num(nan=float("inf"))
    return float(torch.where(same, torch.zeros_like(ratio), ratio).max())


def make_case(c):
    """Runs the case in float64 (reference) and float32 (dtype and conditioning check); returns the fixture."""
    name, tol = c["name"], c["tolerance"]
    outs64, grads64 = run(c, torch.float64)
    outs32, grads32 = run(c, torch.float32)
    worst = 0.0
    for got, ref in list(zip(outs32, outs64)) + list(zip(grads32, grads64)):
        if ref is None:
            continue
        if not ref.dtype.is_floating_point:
            assert torch.equal(got, ref), f"{name}: float32 and float64 runs disagree on {ref.dtype} output"
            continue
        worst = max(worst, worst_ratio(got, ref.to(got.dtype), tol["rtol"], tol["atol"]))
    if os.environ.get("MG_FIXTURE_VERBOSE"):
        print(f"  {name}: torch float32 error is {worst:.2f}x the tolerance")
    # PyTorch's own float32 result must pass with margin, or memgrad could not be expected to.
    assert worst <= 0.5, f"{name}: PyTorch float32 is {worst:.2f}x the tolerance from its float64 reference"
    return {
        "digest": c["digest"],
        "outputs": [Data(o64, o32.dtype) for o64, o32 in zip(outs64, outs32)],
        "grads": [None if g is None else Data(g, g32.dtype) for g, g32 in zip(grads64, grads32)],
    }


# ---------------------------------------------------------------- writing compact JSON

class Data:
    """A tensor rounded to `dtype`, written with floats as the shortest decimal that reads back as the
    same float32 (NaN and infinities as strings)."""

    def __init__(self, t, dtype):
        self.t = t.detach().to(dtype)

    def json(self):
        t = self.t
        if t.dtype.is_floating_point:
            values = [number(v) for v in t.to(torch.float32).reshape(-1).numpy()]
        elif t.dtype == torch.bool:
            values = ["true" if v else "false" for v in t.reshape(-1).tolist()]
        else:
            values = [str(int(v)) for v in t.reshape(-1).tolist()]
        return ('{"shape":%s,"dtype":"%s","data":[%s]}' %
                (json.dumps(list(t.shape)).replace(" ", ""), DTYPE_NAMES[t.dtype], ",".join(values)))


def number(v):
    if np.isnan(v):
        return '"nan"'
    if np.isinf(v):
        return '"inf"' if v > 0 else '"-inf"'
    s = repr(np.float32(v))
    assert np.float32(float(s)) == v, f"{s} does not read back as {v!r}"  # as the C++ test reads it
    return s


def to_json(x):
    if isinstance(x, Data):
        return x.json()
    if isinstance(x, dict):
        return "{" + ",".join(json.dumps(k) + ":" + to_json(v) for k, v in x.items()) + "}"
    if isinstance(x, list):
        return "[" + ",".join(to_json(v) for v in x) + "]"
    return json.dumps(x)


def write(name, header, cases):
    """One case per line, so a regenerated file diffs by case."""
    path = os.path.join(OUT_DIR, name)
    with open(path, "w") as f:
        f.write("{" + ",".join(json.dumps(k) + ":" + json.dumps(v) for k, v in header.items()) + ',"cases":{\n')
        f.write(",\n".join(json.dumps(k) + ":" + to_json(v) for k, v in cases.items()))
        f.write("\n}}\n")
    print(f"wrote {os.path.relpath(path, ROOT)}: {len(cases)} cases, {os.path.getsize(path)} bytes")


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


def load_cases(args):
    if args.cases:
        with open(args.cases) as f:
            return json.load(f)["cases"]
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        subprocess.run([args.test_ops, "--dump-cases", tmp.name], check=True)
        return json.load(open(tmp.name))["cases"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--test-ops", default=os.path.join(os.environ.get("MG_BUILD_DIR", os.path.join(ROOT, "build")),
                                                      "tests", "test_ops"), help="the test binary that dumps the cases")
    p.add_argument("--cases", help="a file written by `test_ops --dump-cases` (instead of running it)")
    p.add_argument("--promotion-only", action="store_true", help="write core_promotion.json alone (no build needed)")
    args = p.parse_args()
    torch.manual_seed(0)
    os.makedirs(OUT_DIR, exist_ok=True)
    if args.promotion_only:
        return write_promotion({"torch": torch.__version__})
    families = defaultdict(dict)
    for c in load_cases(args):
        missing = c["op"] not in TORCH_OPS
        if missing:
            sys.exit(f"case {c['name']}: op {c['op']} has no entry in TORCH_OPS (or mark the case not_torch)")
        families[c["family"]][c["name"]] = make_case(c)
    header = {"torch": torch.__version__}
    stale = {f for f in os.listdir(OUT_DIR) if f.startswith("ops_") and f.endswith(".json")}
    for family, cases in sorted(families.items()):
        write(f"ops_{family}.json", header, cases)
        stale.discard(f"ops_{family}.json")
    for f in sorted(stale):  # a family whose cases are all gone
        os.remove(os.path.join(OUT_DIR, f))
        print(f"removed {f}")
    write_promotion(header)


def write_promotion(header):
    table = promotion_table()
    with open(os.path.join(OUT_DIR, "core_promotion.json"), "w") as f:
        json.dump(dict(header, **table), f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote tests/reference/fixtures/core_promotion.json: {sum(len(v) for v in table.values())} entries")


if __name__ == "__main__":
    main()
