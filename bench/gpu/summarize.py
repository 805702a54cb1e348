"""The tables of bench/gpu/RESULTS.md from what run.sh left in its results folder:
  kernels.json, kernels_torch.json      bench_gpu_kernels and kernels.py: each kernel's share of the
                                        measured peaks, and memgrad's time over PyTorch's
  step.<precision>.<side>.json          the GPT-2-124M step: memgrad (mg), torch eager, torch.compile
  recompute.<workload>.<policy>.json    memgrad's bf16 step under each checkpoint policy
Prints markdown; a table whose files are missing is left out.
    python3 summarize.py DIR
"""
import glob
import json
import os
import re
import sys


def load(path):
    """The JSON object in path, or None (with a note) where the run that writes it failed."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        print(f"(no result in {os.path.basename(path)}: its run failed; see the log beside it)\n")
        return None


def kernels(out):
    path = os.path.join(out, "kernels.json")
    if not os.path.exists(path):
        return
    mg = load(path)
    torch_rows = {}
    if os.path.exists(os.path.join(out, "kernels_torch.json")):
        torch_rows = {(r["op"], r["variant"]): r["ms"] for r in load(os.path.join(out, "kernels_torch.json"))["kernels"]}
    print(f"## Kernels on {mg['device']}: copy {mg['copy_gbs']:.0f} GB/s, bf16 GEMM {mg['gemm_tflops']:.1f} TFLOP/s\n")
    print("| op | variant | ms | rate | of peak | torch ms | memgrad / torch |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in mg["kernels"]:
        key = (r["op"], r["variant"])
        # bench_gpu_kernels' bias_gelu "fused" and layer_norm variants stand against torch's one way.
        t = torch_rows.get(key) or torch_rows.get((r["op"], "add, then gelu" if r["op"] == "bias_gelu" else "torch"))
        vs = f"{t:.4f} | {r['ms'] / t:.2f}" if t else " | "
        print(f"| {r['op']} | {r['variant']} | {r['ms']:.4f} | {r['rate']:.1f} {r['unit']} | {100 * r['fraction']:.1f}% | {vs} |")
    print()


def tokens_per_step(r):
    batch, seq = re.search(r"batch (\d+) x (\d+)", r["config"]).groups()
    return int(batch) * int(seq)


def steps(out):
    files = sorted(glob.glob(os.path.join(out, "step.*.json")))
    if not files:
        return
    runs = {"fp32": {}, "tf32": {}, "bf16": {}}
    for path in files:
        _, precision, side, _ = os.path.basename(path).split(".")
        r = load(path)
        if r:
            runs.setdefault(precision, {})[side] = r
    print("## The GPT training step (AdamW), median of the timed steps\n")
    first = next((s["mg"] for s in runs.values() if "mg" in s), None)
    if first:
        print(f"{first['config']}\n")
    print("| precision | side | ms/step | tokens/s | peak MiB | memgrad tokens/s over it | memgrad peak over it |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for precision, sides in runs.items():
        mg = sides.get("mg")
        for side in ("mg", "eager", "compile"):
            r = sides.get(side)
            if not r:
                continue
            tokens = tokens_per_step(r) / (r["step_ms"] / 1e3)
            peak = r.get("peak_bytes") or 0
            rel = " | "
            if mg and side != "mg":  # memgrad's tokens/s over this side's is its step time over memgrad's
                rel = f"{r['step_ms'] / mg['step_ms']:.2f} | " + (f"{mg['peak_bytes'] / peak:.2f}" if peak else "")
            print(f"| {precision} | {side} | {r['step_ms']:.1f} | {tokens:,.0f} | {peak / 2**20:,.0f} | {rel} |")
    print()


def recompute(out):
    runs = {tuple(os.path.basename(p).split(".")[1:3]): load(p) for p in glob.glob(os.path.join(out, "recompute.*.json"))}
    runs = {key: r for key, r in runs.items() if r}
    if not runs:
        return
    print("## Recompute on the bf16 step: time over the same attention without checkpointing, peak saved\n")
    print("| attention | checkpoint | ms/step | overhead | peak MiB | saved MiB | GEMM GFLOP |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for (workload, policy), r in sorted(runs.items(), key=lambda kv: (kv[0][0], kv[0][1] != "none", kv[0][1])):
        base = runs.get((workload, "none"))
        if not base:
            continue
        print(f"| {'fused' if workload == 'gpt-fused' else 'composed'} | {policy} | {r['step_ms']:.1f} | "
              f"{100 * (r['step_ms'] / base['step_ms'] - 1):+.1f}% | {r['peak_bytes'] / 2**20:,.0f} | "
              f"{(base['peak_bytes'] - r['peak_bytes']) / 2**20:,.0f} | {r['gemm_gflop']:.1f} |")
    print()


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    kernels(out)
    steps(out)
    recompute(out)
