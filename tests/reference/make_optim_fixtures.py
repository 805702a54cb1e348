#!/usr/bin/env python3
"""Reference values for memgrad's 8-bit Adams and Adafactor, from bitsandbytes and PyTorch 2.5+.

Debian's torch 1.13 has neither torch.optim.Adafactor nor a bitsandbytes to run, so this runs with
the newer torch of bench/compare (a venv from PyPI; bitsandbytes' wheel runs on the CPU):

    bench/compare/setup_peers.sh                                  # prints the venv's python
    build-peers/venv/bin/python -m pip install --no-deps bitsandbytes packaging
    build-peers/venv/bin/python tests/reference/make_optim_fixtures.py

Writes, into tests/reference/fixtures/:
  optim_dynamic_map.safetensors  bitsandbytes.functional.create_dynamic_map(signed=True) as `signed`
                                 and (signed=False) as `unsigned`: memgrad's maps must equal them bitwise
  optim_adafactor.safetensors    per case <case>: the initial <case>.param, <case>.grads ([steps, ...]),
                                 and after the steps <case>.final and <case>.state.<name> (torch's state)
  optim_adam8bit_bnb.safetensors per case <case>: <case>.param, <case>.grads, and after the steps
                                 bitsandbytes' <case>.final and <case>.state.{state1,state2,absmax1,absmax2}
Each case's options are a JSON object in the metadata under its name. Inputs come from a seeded
generator, so rerunning writes the same files (for the same torch and bitsandbytes).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_nn_fixtures as nnf  # noqa: E402  (its safetensors writer)

nnf.DTYPES[torch.uint8] = "U8"

ADAFACTOR_CASES = {  # name: (shape, dtype, options, steps)
    "matrix": ([7, 5], torch.float32, {}, 6),
    "batched": ([2, 3, 4], torch.float32, {"lr": 0.05, "weight_decay": 0.1}, 6),
    "vector": ([9], torch.float32, {}, 6),
    "clipped": ([6, 8], torch.float32, {"lr": 0.1, "d": 1.5, "beta2_decay": -0.5}, 8),
    "maximize": ([4, 4], torch.float32, {"eps": [1e-3, 1e-3], "maximize": True}, 5),
    "float64": ([5, 3], torch.float64, {"lr": 0.02}, 5),
    "small_lr": ([3, 6], torch.float32, {"lr": 1e-4, "eps": [None, 0.5]}, 5),
}

# bitsandbytes on the CPU. min_8bit_size 16 quantizes the small tensors; "full" stays in 32 bits.
ADAM8BIT_CASES = {  # name: (shape, optimizer, options, steps)
    "adamw": ([4100], "AdamW8bit", {"lr": 1e-2}, 3),
    "adam": ([40, 30], "Adam8bit", {"lr": 1e-3, "min_8bit_size": 16}, 5),
    "full": ([300], "AdamW8bit", {"lr": 1e-2, "weight_decay": 0.1}, 5),
}


def adafactor(out, meta):
    g = torch.Generator().manual_seed(30)
    for name, (shape, dtype, options, steps) in ADAFACTOR_CASES.items():
        p = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        grads = torch.randn([steps] + shape, generator=g, dtype=torch.float64).to(dtype)
        out[f"{name}.param"] = p.detach().clone()
        out[f"{name}.grads"] = grads
        kwargs = dict(options)
        if "eps" in kwargs:
            kwargs["eps"] = tuple(kwargs["eps"])
        opt = torch.optim.Adafactor([p], foreach=False, **kwargs)
        for k in range(steps):
            p.grad = grads[k].clone()
            opt.step()
        out[f"{name}.final"] = p.detach().clone()
        for key, t in opt.state[p].items():
            if key != "step":
                out[f"{name}.state.{key}"] = t.clone()
        meta[name] = json.dumps({"steps": steps, **options})


def adam8bit(out, meta):
    import bitsandbytes as bnb

    g = torch.Generator().manual_seed(8)
    for name, (shape, kind, options, steps) in ADAM8BIT_CASES.items():
        p = torch.randn(shape, generator=g).requires_grad_()
        grads = torch.randn([steps] + shape, generator=g) * 0.1
        out[f"{name}.param"] = p.detach().clone()
        out[f"{name}.grads"] = grads
        opt = getattr(bnb.optim, kind)([p], **options)
        for k in range(steps):
            p.grad = grads[k].clone()
            opt.step()
        out[f"{name}.final"] = p.detach().clone()
        for key in ["state1", "state2", "absmax1", "absmax2"]:
            if key in opt.state[p]:
                out[f"{name}.state.{key}"] = opt.state[p][key].clone()
        meta[name] = json.dumps({"optimizer": kind, "steps": steps, **options})
    meta["bitsandbytes"] = bnb.__version__


def main():
    import bitsandbytes.functional as F

    version = {"torch": torch.__version__}
    maps = {"signed": F.create_dynamic_map(signed=True), "unsigned": F.create_dynamic_map(signed=False)}
    nnf.write_safetensors(os.path.join(nnf.FIXTURES, "optim_dynamic_map.safetensors"), maps, version)
    for stem, make in [("optim_adafactor", adafactor), ("optim_adam8bit_bnb", adam8bit)]:
        out, meta = {}, dict(version)
        make(out, meta)
        nnf.write_safetensors(os.path.join(nnf.FIXTURES, stem + ".safetensors"), out, meta)
        print(f"wrote tests/reference/fixtures/{stem}.safetensors: {len(out)} tensors")


if __name__ == "__main__":
    main()
