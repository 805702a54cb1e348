#!/usr/bin/env python3
"""bench_train_step's workloads in JAX (CPU, float32, one jitted step: forward, loss, backward,
optax.adamw update), the same models and sizes as train_step.py. Prints one JSON object like
train_step.py's, without peak memory (JAX reports none on the CPU): peak_bytes is null.

    train_step_jax.py mlp|gpt|gpt-fused [steps] [sizes...]   (the sizes of train_step.py)

gpt-fused uses jax.nn.dot_product_attention(is_causal=True), gpt the explicit
q k^T -> mask -> softmax -> @ v. Threads: XLA's CPU client uses every core it sees, so run.sh
pins the process to OMP_NUM_THREADS cores with taskset.
"""
import json
import math
import sys
import time

import jax
import jax.numpy as jnp
import optax


def linear(key, d_in, d_out, std=None):
    w = (std or 1.0 / math.sqrt(d_in)) * jax.random.normal(key, (d_out, d_in), jnp.float32)
    return {"w": w, "b": jnp.zeros((d_out,), jnp.float32)}


def apply_linear(p, x):
    return x @ p["w"].T + p["b"]


def cross_entropy(logits, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_mlp(key, batch=256, d_in=784, hidden=1024, layers=2, classes=10):
    keys = jax.random.split(key, layers + 3)
    widths = [d_in] + [hidden] * layers + [classes]
    params = [linear(keys[i], widths[i], widths[i + 1]) for i in range(layers + 1)]
    x = jax.random.normal(keys[-2], (batch, d_in), jnp.float32)
    y = jax.random.randint(keys[-1], (batch,), 0, classes)

    def loss(params, x, y):
        for p in params[:-1]:
            x = jax.nn.relu(apply_linear(p, x))
        return cross_entropy(apply_linear(params[-1], x), y)

    return f"batch {batch}, {d_in} -> {layers} x {hidden} (ReLU) -> {classes}", params, (x, y), loss


def layer_norm(p, x, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * p["g"] + p["b"]


def make_gpt(key, fused, n_layer=4, n_head=4, n_embd=128, vocab=2048, batch=8, seq=128):
    keys = iter(jax.random.split(key, 4 * n_layer + 4))
    ln = lambda: {"g": jnp.ones((n_embd,), jnp.float32), "b": jnp.zeros((n_embd,), jnp.float32)}
    proj_std = 0.02 / math.sqrt(2 * n_layer)
    params = {
        "wte": 0.02 * jax.random.normal(next(keys), (vocab, n_embd), jnp.float32),
        "wpe": 0.02 * jax.random.normal(next(keys), (seq, n_embd), jnp.float32),
        "ln_f": ln(),
        "h": [{"ln_1": ln(), "ln_2": ln(), "attn": linear(next(keys), n_embd, 3 * n_embd, 0.02),
               "attn_proj": linear(next(keys), n_embd, n_embd, proj_std), "fc": linear(next(keys), n_embd, 4 * n_embd, 0.02),
               "proj": linear(next(keys), 4 * n_embd, n_embd, proj_std)} for _ in range(n_layer)],
    }
    idx = jax.random.randint(next(keys), (batch, seq), 0, vocab)
    targets = jax.random.randint(next(keys), (batch, seq), 0, vocab)
    mask = jnp.tril(jnp.ones((seq, seq), bool))
    hs = n_embd // n_head

    def attention(p, x):
        B, T, C = x.shape
        q, k, v = jnp.split(apply_linear(p, x), 3, axis=-1)
        if fused:  # [B, T, H, D] layout
            q, k, v = (t.reshape(B, T, n_head, hs) for t in (q, k, v))
            return jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(B, T, C)
        q, k, v = (t.reshape(B, T, n_head, hs).transpose(0, 2, 1, 3) for t in (q, k, v))
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(hs))
        att = jax.nn.softmax(jnp.where(mask[:T, :T], att, -jnp.inf), axis=-1)
        return (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)

    def loss(params, idx, targets):
        x = params["wte"][idx] + params["wpe"][: idx.shape[1]]
        for b in params["h"]:
            x = x + apply_linear(b["attn_proj"], attention(b["attn"], layer_norm(b["ln_1"], x)))
            x = x + apply_linear(b["proj"], jax.nn.gelu(apply_linear(b["fc"], layer_norm(b["ln_2"], x)), approximate=True))
        logits = layer_norm(params["ln_f"], x) @ params["wte"].T
        return cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    cfg = f"n_layer {n_layer}, n_head {n_head}, n_embd {n_embd}, vocab {vocab}, batch {batch} x {seq}"
    return cfg, params, (idx, targets), loss


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    if kind not in ("mlp", "gpt", "gpt-fused"):
        sys.exit("usage: train_step_jax.py mlp|gpt|gpt-fused [steps] [sizes...]")
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    sizes = [int(a) for a in sys.argv[3:]]
    key = jax.random.PRNGKey(0)
    if kind == "mlp":
        cfg, params, batch, loss = make_mlp(key, *sizes)
    else:
        cfg, params, batch, loss = make_gpt(key, kind == "gpt-fused", *sizes)
    opt = optax.adamw(1e-3, weight_decay=0.01)  # as torch.optim.AdamW's and memgrad's defaults
    state = opt.init(params)

    @jax.jit
    def step(params, state, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    for _ in range(3):  # warm-up: compiles, then the steady state
        params, state, value = step(params, state, *batch)
        value.block_until_ready()
    ms, cpu_ms = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        params, state, value = step(params, state, *batch)
        value.block_until_ready()
        ms.append(1e3 * (time.perf_counter() - t0))
        cpu_ms.append(1e3 * (time.process_time() - c0))
    attention = "" if kind == "mlp" else (", dot_product_attention" if kind == "gpt-fused" else ", explicit attention")
    print(json.dumps({"workload": kind, "config": cfg + attention, "jax": jax.__version__, "steps": steps,
                      "step_ms": sorted(ms)[len(ms) // 2], "min_ms": min(ms), "cpu_ms": sorted(cpu_ms)[len(cpu_ms) // 2],
                      "peak_bytes": None, "loss": float(value), "ms": [round(m, 3) for m in ms]}))


if __name__ == "__main__":
    main()
