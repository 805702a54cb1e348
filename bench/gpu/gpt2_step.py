"""The GPT-2-124M-shaped training step of gpt2_step.cpp in PyTorch: the same model, the same
explicit masked-softmax attention, forward + backward + SGD update, in float32 (TF32 optional).
Runs eager and torch.compile; prints ms/step, tokens/s and torch.cuda.max_memory_allocated.
--sdpa uses F.scaled_dot_product_attention (is_causal) instead, as --fused-attention does there.
    python3 gpt2_step.py [--batch 8] [--seq 1024] [--steps 10] [--tf32] [--no-compile] [--sdpa]
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

L, H, D, V, CTX = 12, 12, 768, 50257, 1024
SDPA = False


def make_params(dev):
    g = torch.Generator(device="cpu").manual_seed(0)

    def p(*shape, std):
        if std == "ones":
            t = torch.ones(*shape)
        elif std == 0:
            t = torch.zeros(*shape)
        else:
            t = torch.randn(*shape, generator=g) * std
        return t.to(dev).requires_grad_()

    proj = 0.02 / math.sqrt(2 * L)
    P = {"wte": p(V, D, std=0.02), "wpe": p(CTX, D, std=0.01), "lnf_w": p(D, std="ones"), "lnf_b": p(D, std=0)}
    for l in range(L):
        P.update({f"{l}.ln1_w": p(D, std="ones"), f"{l}.ln1_b": p(D, std=0), f"{l}.attn_w": p(3 * D, D, std=0.02),
                  f"{l}.attn_b": p(3 * D, std=0), f"{l}.proj_w": p(D, D, std=proj), f"{l}.proj_b": p(D, std=0),
                  f"{l}.ln2_w": p(D, std="ones"), f"{l}.ln2_b": p(D, std=0), f"{l}.fc_w": p(4 * D, D, std=0.02),
                  f"{l}.fc_b": p(4 * D, std=0), f"{l}.out_w": p(D, 4 * D, std=proj), f"{l}.out_b": p(D, std=0)})
    return P


def forward(P, idx, targets, mask):
    B, T = idx.shape
    hd = D // H
    x = F.embedding(idx, P["wte"]) + F.embedding(torch.arange(T, device=idx.device), P["wpe"])
    for l in range(L):
        h = F.layer_norm(x, (D,), P[f"{l}.ln1_w"], P[f"{l}.ln1_b"])
        q, k, v = F.linear(h, P[f"{l}.attn_w"], P[f"{l}.attn_b"]).split(D, 2)
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
        if SDPA:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        y = y.transpose(1, 2).reshape(B, T, D)
        x = x + F.linear(y, P[f"{l}.proj_w"], P[f"{l}.proj_b"])
        h = F.gelu(F.linear(F.layer_norm(x, (D,), P[f"{l}.ln2_w"], P[f"{l}.ln2_b"]), P[f"{l}.fc_w"], P[f"{l}.fc_b"]),
                   approximate="tanh")
        x = x + F.linear(h, P[f"{l}.out_w"], P[f"{l}.out_b"])
    logits = F.linear(F.layer_norm(x, (D,), P["lnf_w"], P["lnf_b"]), P["wte"])
    return F.cross_entropy(logits.view(B * T, V), targets.view(B * T))


def run(name, fwd, P, idx, targets, mask, steps, lr=1e-4):
    torch.cuda.reset_peak_memory_stats()
    times = []
    for s in range(steps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = fwd(P, idx, targets, mask)
        loss.backward()
        with torch.no_grad():
            for p in P.values():
                p.add_(p.grad, alpha=-lr)
                p.grad = None
        loss = loss.item()
        if s > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    ms = sum(times) / len(times)
    B, T = idx.shape
    print(f"pytorch {name}: {ms:.1f} ms/step, {B * T / ms * 1e3:.0f} tokens/s, "
          f"peak {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB, loss {loss:.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--sdpa", action="store_true")
    a = ap.parse_args()
    global SDPA
    SDPA = a.sdpa
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, tf32 {'on' if a.tf32 else 'off'}, "
          f"{'sdpa' if a.sdpa else 'explicit'} attention")
    P = make_params(dev)
    idx = torch.randint(0, V, (a.batch, a.seq), device=dev)
    targets = torch.randint(0, V, (a.batch, a.seq), device=dev)
    r = torch.arange(a.seq, device=dev)
    mask = r[None, :] > r[:, None]
    run("eager", forward, P, idx, targets, mask, a.steps)
    if not a.no_compile:
        run("torch.compile", torch.compile(forward), P, idx, targets, mask, a.steps)


if __name__ == "__main__":
    main()
