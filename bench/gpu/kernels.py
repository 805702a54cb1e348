"""PyTorch on the rows of bench_gpu_kernels that have a direct counterpart, same shapes and dtypes,
timed the same way (CUDA events, median of `reps` after 3 warm-ups). Writes one JSON object whose
rows carry bench_gpu_kernels' (op, variant) names, so summarize.py can print memgrad/PyTorch.
    python3 kernels.py [--quick] --json FILE
"""
import argparse
import json

import torch
import torch.nn.functional as F


def time_ms(f, reps):
    for _ in range(3):
        f()
    ms = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return sorted(ms)[len(ms) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    reps = 5 if args.quick else 20
    dev = torch.device("cuda")
    rows = []

    def row(op, variant, f):
        rows.append({"op": op, "variant": variant, "ms": time_ms(f, reps)})

    with torch.no_grad():
        R, C, V = (2048 if args.quick else 8192), 768, 50257
        x, y = torch.randn(R, C, device=dev), torch.randn(R, C, device=dev)
        w, b = torch.randn(C, device=dev), torch.randn(C, device=dev)
        xh = x.bfloat16()
        row("copy", "cast f32->bf16", lambda: x.bfloat16())
        row("unary", "gelu", lambda: F.gelu(x))
        row("unary", "gelu bf16", lambda: F.gelu(xh))
        row("binary", "add", lambda: x + y)
        row("binary", "add bias (broadcast)", lambda: x + b)
        row("bias_gelu", "add, then gelu", lambda: F.gelu(x + b, approximate="tanh"))
        row("reduce", "sum rows", lambda: x.sum(1))
        row("reduce", "sum cols", lambda: x.sum(0))
        row("softmax", "rows", lambda: x.softmax(-1))
        row("dropout", "philox", lambda: F.dropout(x, 0.1))
        row("layer_norm", "torch", lambda: F.layer_norm(x, (C,), w, b))
        N = 1024 if args.quick else 8192
        logits, target = torch.randn(N, V, device=dev), torch.randint(0, V, (N,), device=dev)
        row("cross_entropy", "fused", lambda: F.cross_entropy(logits, target))
        idx, wte = torch.randint(0, V, (R,), device=dev), torch.randn(V, C, device=dev)
        row("index_select", "embedding", lambda: F.embedding(idx, wte))
        for t, name in [(torch.float32, "float32"), (torch.bfloat16, "bfloat16"), (torch.float16, "float16")]:
            a, m = torch.randn(R, C, device=dev, dtype=t), torch.randn(C, 4 * C, device=dev, dtype=t)
            row(f"matmul {name}", "cublas", lambda: a @ m)
        torch.backends.cuda.matmul.allow_tf32 = True
        a, m = torch.randn(R, C, device=dev), torch.randn(C, 4 * C, device=dev)
        row("matmul tf32", "cublas", lambda: a @ m)
        torch.backends.cuda.matmul.allow_tf32 = False

    # The fused optimizer steps over GPT-2-124M's parameter shapes, as bench_gpu_kernels.
    shapes = [(V, C), (1024, C), (C,), (C,)]
    for _ in range(2 if args.quick else 12):
        shapes += [(C,), (C,), (C, 3 * C), (3 * C,), (C, C), (C,), (C,), (C,), (C, 4 * C), (4 * C,), (4 * C, C), (C,)]
    params = [torch.randn(s, device=dev, requires_grad=True) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    adamw = torch.optim.AdamW(params, lr=1e-3, fused=True)
    row("optimizer", "adamw fused", adamw.step)
    try:
        sgd = torch.optim.SGD(params, lr=1e-3, momentum=0.9, fused=True)
        row("optimizer", "sgd momentum fused", sgd.step)
    except (TypeError, RuntimeError):  # torch < 2.3: no fused SGD
        pass

    # Causal attention on GPT-2 small's heads: F.scaled_dot_product_attention (flash on Hopper).
    Bn, Hn, T, D = (2 if args.quick else 8), 12, 1024, 64
    for t, name in [(torch.float32, "float32"), (torch.bfloat16, "bfloat16")]:
        q, k, v, up = (torch.randn(Bn, Hn, T, D, device=dev, dtype=t) for _ in range(4))

        def fwd_bwd():
            a, b_, c = (z.detach().requires_grad_() for z in (q, k, v))
            F.scaled_dot_product_attention(a, b_, c, is_causal=True).backward(up)

        with torch.no_grad():
            row(f"attention {name}", "fused fwd", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        row(f"attention {name}", "fused fwd+bwd", fwd_bwd)

    with open(args.json, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "kernels": rows}, f)
    for r in rows:
        print(f"{r['op']:18} {r['variant']:22} {r['ms']:9.4f} ms")


if __name__ == "__main__":
    main()
