#!/usr/bin/env python3
"""bench_train_step's workloads in PyTorch: one training step (zero_grad, forward, loss, backward,
AdamW step) of an MLP or a GPT-2 style model with the same config as memgrad's nn::GPT. Prints one
JSON object: the median step time after warm-up and the peak memory of one steady-state step.

    train_step.py mlp [steps=20] [batch=256] [in=784] [hidden=1024] [layers=2] [classes=10]
    train_step.py gpt [steps=10] [n_layer=4] [n_head=4] [n_embd=128] [vocab=2048] [batch=8] [seq=128]

TORCH_COMPILE=1 runs the loss (forward; backward through AOTAutograd) under torch.compile
(torch >= 2.0). Where torch has a fused AdamW (cuda; cpu >= 2.4) it is used: its fastest step.
As bench_train_step, MG_DEVICE=cpu|cuda|cuda:N says where the step runs and MG_PRECISION=fp32|tf32|
bf16|fp16 its precision (tf32: float32 matmuls on TF32 tensor cores; bf16, fp16: torch.autocast over
forward and loss, float32 parameters and AdamW state, no loss scaler).

Peak memory on cuda: torch.cuda.max_memory_allocated over one steady-state step (grads set to None
before it), which counts what memgrad's ledger does: every tensor, parameters and state included.
On cpu: PyTorch's CPU allocator keeps no statistics, so the step runs once under the legacy
autograd profiler with profile_memory=True, which reports every allocation and free made through
c10's CPU allocator (every tensor, kernel scratch included; not BLAS-internal buffers) in order.
peak = bytes live when the step starts (parameters, AdamW state, the batch: unique storages) +
the highest running sum of those events during the step. Grads are set to None before the step.

Beside each timed step, as bench_train_step: page faults, voluntary and involuntary context switches
of the whole process, its threads, and the machine's steal time (medians over the steps).
"""
import contextlib
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FUSED = False  # set by main() for gpt-fused


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer("mask", torch.triu(torch.ones(block_size, block_size), 1) > 0, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if FUSED and hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            y = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """memgrad's nn::GPT: pre-norm blocks, tanh GELU, lm head tied to wte, dropout 0."""

    def __init__(self, vocab, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList(Block(n_embd, n_head, block_size) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        for name, p in self.named_parameters():  # GPT-2's init, as memgrad's nn::init::gpt2_init_
            if name.endswith("bias") or "ln_" in name:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer) if name.endswith("c_proj.weight") else 0.02)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_mlp(batch=256, d_in=784, hidden=1024, layers=2, classes=10):
    mods, width = [], d_in
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    net = nn.Sequential(*mods, nn.Linear(width, classes))
    x, y = torch.randn(batch, d_in), torch.randint(0, classes, (batch,))
    cfg = f"batch {batch}, {d_in} -> {layers} x {hidden} (ReLU) -> {classes}"
    return cfg, net, (x, y), lambda: F.cross_entropy(net(x), y)


def make_gpt(n_layer=4, n_head=4, n_embd=128, vocab=2048, batch=8, seq=128):
    model = GPT(vocab, seq, n_layer, n_head, n_embd)
    idx, targets = torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch, seq))
    cfg = f"n_layer {n_layer}, n_head {n_head}, n_embd {n_embd}, vocab {vocab}, batch {batch} x {seq}"
    return cfg, model, (idx, targets), lambda: model(idx, targets)


def live_bytes(tensors):
    """Bytes of the distinct storages behind `tensors`."""
    seen = {}
    for t in tensors:
        if t is not None:
            s = t.storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def profiled_peak(step, start_bytes):
    """start_bytes + the highest running sum of c10 CPU allocations and frees during step()."""
    from torch.autograd import ProfilerConfig, ProfilerState

    cfg = ProfilerConfig(ProfilerState.CPU, False, True, False, False, False,
                         torch._C._profiler._ExperimentalConfig())
    torch.autograd._enable_profiler_legacy(cfg)
    try:
        step()
    finally:
        records = torch.autograd._disable_profiler_legacy()
    flat = [r for thread in records for r in thread]
    start = next(r for r in flat if r.name() == "__start_profile")
    events = sorted((start.cpu_elapsed_us(r), r.cpu_memory_usage()) for r in flat if r.kind() == "memory_alloc")
    live = peak = 0
    for _, b in events:
        live += b
        peak = max(peak, live)
    return start_bytes + peak


def cuda_peak(step):
    """torch.cuda.max_memory_allocated over one step, grads None before it (as memgrad's peak)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def counters():
    """Page faults, voluntary and involuntary context switches (whole process), threads, steal ms."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    with open("/proc/stat") as f:
        steal = float(f.readline().split()[8]) * 1e3 / os.sysconf("SC_CLK_TCK")
    return u.ru_minflt + u.ru_majflt, u.ru_nvcsw, u.ru_nivcsw, len(os.listdir("/proc/self/task")), steal


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    if kind not in ("mlp", "gpt", "gpt-fused"):
        sys.exit("usage: train_step.py mlp|gpt|gpt-fused [steps] [sizes...]")
    global FUSED
    FUSED = kind == "gpt-fused"  # F.scaled_dot_product_attention where this torch has it
    kind = "gpt" if FUSED else kind
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else (10 if kind == "gpt" else 20)
    sizes = [int(a) for a in sys.argv[3:]]
    threads = int(os.environ.get("OMP_NUM_THREADS", "2"))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    device = torch.device(os.environ.get("MG_DEVICE") or "cpu")
    precision = os.environ.get("MG_PRECISION") or "fp32"
    if precision not in ("fp32", "tf32", "bf16", "fp16"):
        sys.exit(f"MG_PRECISION: expected fp32, tf32, bf16 or fp16, got {precision}")
    if precision == "tf32" and device.type != "cuda":
        sys.exit(f"MG_PRECISION=tf32: TF32 matmuls are cuda's, got MG_DEVICE={device}")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    made_on = contextlib.nullcontext() if device.type == "cpu" else torch.device(device)  # torch >= 2.0
    with made_on:  # parameters and the batch are made there
        cfg, model, batch, loss_fn = (make_gpt if kind == "gpt" else make_mlp)(*sizes)
    compiled = os.environ.get("TORCH_COMPILE") == "1"
    if compiled:
        loss_fn = torch.compile(loss_fn)
    try:  # weight_decay 0.01 as memgrad's AdamWOptions
        opt, adamw = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True), "fused AdamW"
    except (TypeError, RuntimeError):  # torch < 2.4: no fused CPU AdamW
        opt, adamw = torch.optim.AdamW(model.parameters(), lr=1e-3), "AdamW"
    last = [0.0]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=half or torch.bfloat16, enabled=half is not None):
            loss = loss_fn()
        loss.backward()
        opt.step()
        last[0] = loss.item()

    for _ in range(3):  # warm-up; the first step creates the AdamW state
        step()
    opt.zero_grad(set_to_none=True)
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]
    start = live_bytes(list(model.parameters()) + list(model.buffers()) + state + list(batch))
    try:
        peak = cuda_peak(step) if device.type == "cuda" else profiled_peak(step, start)
    except Exception:  # the legacy profiler's API differs in newer torch: no peak then
        peak = None
    ms, cpu_ms, per_step, threads = [], [], [], 0
    for _ in range(steps):
        k0 = counters()
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        ms.append(1e3 * (time.perf_counter() - t0))
        cpu_ms.append(1e3 * (time.process_time() - c0))
        k1 = counters()
        per_step.append([b - a for a, b in zip(k0, k1)])
        threads = max(threads, k0[3], k1[3])
    med = lambda i: sorted(x[i] for x in per_step)[len(per_step) // 2]
    attention = "sdpa" if FUSED and hasattr(F, "scaled_dot_product_attention") else "explicit"
    mode = ", torch.compile" if compiled else ""
    print(json.dumps({"workload": kind, "config": cfg + f", {attention} attention, {adamw}{mode}", "torch": torch.__version__,
                      "device": str(device), "precision": precision,
                      "threads": torch.get_num_threads(), "steps": steps, "step_ms": sorted(ms)[len(ms) // 2],
                      "min_ms": min(ms), "cpu_ms": sorted(cpu_ms)[len(cpu_ms) // 2], "peak_bytes": peak, "start_bytes": start, "loss": last[0],
                      "ms": [round(m, 3) for m in ms], "cpu_ms_all": [round(c, 3) for c in cpu_ms],
                      "faults": med(0), "csw_voluntary": med(1), "csw_involuntary": med(2),
                      "steal_ms": round(med(4), 1), "process_threads": threads}))


if __name__ == "__main__":
    main()
