#!/usr/bin/python3
"""PyTorch reference values for memgrad's nn/ and optim/ tests (run with Debian's python3-torch).

Writes, into tests/reference/fixtures/:
  nn_layers.safetensors      per layer <case>: parameters, input x, upstream weights r, output out,
                             and grad.<name> of loss = (out * r).sum() w.r.t. the input and parameters
  nn_gpt_weights.safetensors a tiny GPT's weights, named as memgrad's GPT (nn.Linear [out, in] layout,
                             no separate lm_head entry: it is tied to wte.weight)
  nn_gpt_io.safetensors      its input idx, targets, logits, loss and every parameter's gradient
  nn_optim.safetensors       two parameters, 20 steps of gradients, and the parameters after 20
                             torch.optim steps for each configuration in OPTIM_CONFIGS
  nn_batchnorm.safetensors   per BatchNorm case <case>: weight, bias, x, r, out, grad.<name> of
                             (out * r).sum() in training mode, the running statistics after that
                             step (after.running_mean, after.running_var), and the same again in
                             eval mode (eval.x, eval.r, eval.out, eval.grad.<name>)

safetensors is written and read by hand (struct + json), so no extra package is needed.
`make_nn_fixtures.py --check FILE` loads a file written by memgrad and checks it against the
tensors memgrad's test wrote (see tests/nn/test_safetensors.cpp).
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
          torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        raw = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    inverse = {v: k for k, v in DTYPES.items()}
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out, body = {}, data[8 + n:]
    for name, e in header.items():
        b, end = e["data_offsets"]
        dt = inverse[e["dtype"]]
        if dt == torch.bfloat16:
            t = torch.frombuffer(bytearray(body[b:end]), dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(bytearray(body[b:end]), dtype=dt) if end > b else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"])
    return out, meta


def layer_case(out, name, module, x, grad_input=True):
    """Stores parameters, x, r, out and gradients of (out * r).sum()."""
    x = x.clone().requires_grad_(grad_input)
    y = module(x)
    r = torch.randn(y.shape)
    (y * r).sum().backward()
    for pname, p in module.named_parameters():
        out[f"{name}.{pname}"] = p.detach().clone()
        out[f"{name}.grad.{pname}"] = p.grad.clone()
    out[f"{name}.x"] = x.detach()
    out[f"{name}.r"] = r
    out[f"{name}.out"] = y.detach()
    if grad_input:
        out[f"{name}.grad.x"] = x.grad.clone()


class MLP(nn.Module):
    def __init__(self, n, hidden):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(n, hidden), nn.Linear(hidden, n)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class CausalSelfAttention(nn.Module):
    def __init__(self, n, heads, block):
        super().__init__()
        self.n, self.heads = n, heads
        self.c_attn, self.c_proj = nn.Linear(n, 3 * n), nn.Linear(n, n)
        self.register_buffer("mask", torch.triu(torch.ones(block, block, dtype=torch.bool), 1), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n, heads, block):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n), CausalSelfAttention(n, heads, block)
        self.ln_2, self.mlp = nn.LayerNorm(n), MLP(n, 4 * n)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab, block, layers, heads, n):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n), nn.Embedding(block, n)
        self.h = nn.ModuleList(Block(n, heads, block) for _ in range(layers))
        self.ln_f = nn.LayerNorm(n)
        for name, p in self.named_parameters():  # GPT-2's scheme, with non-trivial LayerNorm values
            if name.endswith("bias"):
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln" in name:
                nn.init.normal_(p, 1.0, 0.1)
            else:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


def make_layers():
    out = {}
    layer_case(out, "linear", nn.Linear(5, 3), torch.randn(4, 5))
    layer_case(out, "linear_nobias", nn.Linear(6, 2, bias=False), torch.randn(2, 3, 6))
    layer_case(out, "conv", nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), torch.randn(2, 4, 7, 6))
    layer_case(out, "conv_dilated", nn.Conv2d(3, 2, (3, 2), padding=(2, 1), dilation=2), torch.randn(1, 3, 6, 5))
    layer_case(out, "depthwise", nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False), torch.randn(2, 4, 5, 5))
    layer_case(out, "relu", nn.ReLU(), torch.randn(3, 7))
    layer_case(out, "gelu", nn.GELU(), torch.randn(3, 7))
    layer_case(out, "gelu_tanh", nn.GELU(approximate="tanh"), torch.randn(3, 7))
    layer_case(out, "silu", nn.SiLU(), torch.randn(3, 7))
    ln = nn.LayerNorm(6)
    nn.init.normal_(ln.weight, 1.0, 0.2), nn.init.normal_(ln.bias, 0.0, 0.2)
    layer_case(out, "layernorm", ln, torch.randn(2, 3, 6) * 2 + 0.5)
    layer_case(out, "embedding", nn.Embedding(10, 4), torch.tensor([[1, 3, 3, 9, 0], [2, 2, 7, 1, 5]]), False)
    layer_case(out, "maxpool", nn.MaxPool2d(2), torch.randn(2, 3, 6, 6))
    layer_case(out, "maxpool_pad", nn.MaxPool2d(3, stride=2, padding=1), torch.randn(1, 2, 7, 7))
    layer_case(out, "avgpool", nn.AvgPool2d(3, stride=2, padding=1), torch.randn(2, 2, 7, 6))
    layer_case(out, "flatten", nn.Flatten(), torch.randn(2, 3, 2, 2))
    layer_case(out, "sequential", nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)), torch.randn(5, 4))
    layer_case(out, "mlp", MLP(8, 32), torch.randn(2, 3, 8))
    layer_case(out, "attn", CausalSelfAttention(8, 2, 6), torch.randn(2, 5, 8))
    layer_case(out, "block", Block(8, 2, 6), torch.randn(2, 5, 8))
    # Losses: the input's gradient of the mean loss.
    logits, target = torch.randn(6, 5, requires_grad=True), torch.tensor([0, 4, 2, 2, 1, 3])
    loss = F.cross_entropy(logits, target)
    loss.backward()
    out.update({"ce.x": logits.detach(), "ce.target": target, "ce.out": loss.detach(), "ce.grad.x": logits.grad})
    a, b = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    loss = F.mse_loss(a, b)
    loss.backward()
    out.update({"mse.x": a.detach(), "mse.target": b, "mse.out": loss.detach(), "mse.grad.x": a.grad})
    write_safetensors(os.path.join(FIXTURES, "nn_layers.safetensors"), out)


def make_gpt():
    vocab, block, layers, heads, n = 65, 16, 2, 2, 32
    model = GPT(vocab, block, layers, heads, n)
    weights = {k: v for k, v in model.state_dict().items()}
    write_safetensors(os.path.join(FIXTURES, "nn_gpt_weights.safetensors"), weights,
                      {"config": json.dumps({"vocab_size": vocab, "block_size": block, "n_layer": layers,
                                             "n_head": heads, "n_embd": n})})
    idx = torch.randint(0, vocab, (2, block))
    targets = torch.randint(0, vocab, (2, block))
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, vocab), targets.view(-1))
    loss.backward()
    io = {"idx": idx, "targets": targets, "logits": logits.detach(), "loss": loss.detach()}
    for k, p in model.named_parameters():
        io["grad." + k] = p.grad
    write_safetensors(os.path.join(FIXTURES, "nn_gpt_io.safetensors"), io)


# name -> (optimizer class, keyword arguments); memgrad's test builds the same configurations.
OPTIM_CONFIGS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd_momentum": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam_amsgrad": (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.01, amsgrad=True)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
}


def make_optim(steps=20):
    init = [torch.randn(4, 3), torch.randn(5)]
    grads = [[torch.randn(p.shape) * (0.5 + s / 10) for p in init] for s in range(steps)]
    out = {f"init.{k}": p for k, p in enumerate(init)}
    for s in range(steps):
        for k, g in enumerate(grads[s]):
            out[f"grad.{s}.{k}"] = g
    for name, (cls, kw) in OPTIM_CONFIGS.items():
        params = [p.clone().requires_grad_() for p in init]
        opt = cls(params, **kw)
        for s in range(steps):
            for p, g in zip(params, grads[s]):
                p.grad = g.clone()
            opt.step()
        for k, p in enumerate(params):
            out[f"final.{name}.{k}"] = p.detach()
    write_safetensors(os.path.join(FIXTURES, "nn_optim.safetensors"), out)


def make_batchnorm():
    torch.manual_seed(4321)  # its own seed: the files above stay byte-identical
    out = {}
    cases = [("bn2d", nn.BatchNorm2d(3), (4, 3, 5, 6)),
             ("bn1d", nn.BatchNorm1d(4, momentum=0.3), (6, 4)),
             ("bn1d_seq", nn.BatchNorm1d(4, eps=1e-3), (3, 4, 5)),
             ("bn2d_noaffine", nn.BatchNorm2d(2, affine=False), (2, 2, 3, 3))]
    for name, bn, shape in cases:
        if bn.affine:
            nn.init.normal_(bn.weight, 1.0, 0.3), nn.init.normal_(bn.bias, 0.0, 0.3)
        for p in bn.parameters():
            out[f"{name}.{'weight' if p is bn.weight else 'bias'}"] = p.detach().clone()
        for mode in ("", "eval."):
            bn.train(mode == "")
            bn.zero_grad()
            x = (torch.randn(shape) * 2 + 0.5).requires_grad_()
            y = bn(x)
            r = torch.randn(y.shape)
            (y * r).sum().backward()
            out.update({f"{name}.{mode}x": x.detach(), f"{name}.{mode}r": r, f"{name}.{mode}out": y.detach(),
                        f"{name}.{mode}grad.x": x.grad})
            for pname, p in bn.named_parameters():
                out[f"{name}.{mode}grad.{pname}"] = p.grad.clone()
            if mode == "":
                out[f"{name}.after.running_mean"] = bn.running_mean.clone()
                out[f"{name}.after.running_var"] = bn.running_var.clone()
    write_safetensors(os.path.join(FIXTURES, "nn_batchnorm.safetensors"), out)


def check(path):
    """Loads a memgrad-written file; memgrad's test wrote the same values: 0..n-1 patterns."""
    tensors, meta = read_safetensors(path)
    expect = {"f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) / 4,
              "f64": torch.arange(3, dtype=torch.float64) - 1.5,
              "f16": torch.tensor([0.5, -2.0, 65504.0], dtype=torch.float16),
              "bf16": torch.tensor([1.0, -3.0], dtype=torch.bfloat16),
              "i32": torch.tensor([[7, -8]], dtype=torch.int32),
              "i64": torch.tensor([1 << 40, -5], dtype=torch.int64),
              "bool": torch.tensor([True, False, True]),
              "empty": torch.zeros(0, 4)}
    assert set(tensors) == set(expect), sorted(tensors)
    for k, v in expect.items():
        assert tensors[k].dtype == v.dtype and tensors[k].shape == v.shape and torch.equal(tensors[k], v), k
    assert meta == {"format": "pt", "written_by": "memgrad"}, meta
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
        sys.exit(0)
    torch.manual_seed(1234)
    make_layers()
    make_gpt()
    make_optim()
    make_batchnorm()
    for f in sorted(os.listdir(FIXTURES)):
        if f.startswith("nn_"):
            print(f, os.path.getsize(os.path.join(FIXTURES, f)), "bytes")
