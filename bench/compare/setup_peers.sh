#!/usr/bin/env bash
# The newer peers of bench/compare (a benchmark dependency only; never needed to build or test):
# a venv with the newest torch from PyPI and jax, jaxlib, optax. torch's wheel is installed with
# --no-deps, plus the pure-Python packages its CPU import and torch.compile need and the few CUDA
# wheels its import loads even without a GPU (its other CUDA libraries are loaded lazily).
#   bench/compare/setup_peers.sh     environment: MG_PEER_VENV (default <repo>/build-peers/venv)
# Prints the venv's python, which run.sh takes as PEER_PYTHON.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${MG_PEER_VENV:-$root/build-peers/venv}
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" --no-deps torch
# The CUDA wheels torch's import loads (NCCL, cuSPARSELt, NVSHMEM, cuFile), at the versions it pins.
mapfile -t cuda_wheels < <("$venv/bin/python" - <<'PY'
import importlib.metadata as md, re
for r in md.requires("torch") or []:
    name = re.split(r"[ ;=<>!\[]", r, maxsplit=1)[0]
    if re.match(r"nvidia-(nccl|cusparselt|nvshmem|cufile)", name):
        print(r.split(";")[0].replace(" ", ""))
    # Newer torch pins cuFile through the cuda-toolkit meta-package's extras instead.
    pin = re.search(r"==\s*([0-9.]+)", r.split(";")[0])
    if name == "cuda-toolkit" and "cufile" in r and pin:
        print(f"cuda-toolkit[cufile]=={pin.group(1)}")
PY
)
# cuda-toolkit[cufile] brings exactly the cuFile wheel (its only dependency), so it goes with its deps.
plain=() meta=()
for w in "${cuda_wheels[@]}"; do [[ $w == cuda-toolkit* ]] && meta+=("$w") || plain+=("$w"); done
[ ${#plain[@]} -eq 0 ] || "${pip[@]}" --no-deps "${plain[@]}"
[ ${#meta[@]} -eq 0 ] || "${pip[@]}" "${meta[@]}"
"${pip[@]}" filelock typing_extensions sympy networkx jinja2 fsspec numpy "setuptools>=77"
"${pip[@]}" jax jaxlib optax
"$venv/bin/python" - <<'PY' >&2
import torch, jax, optax
print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), jax {jax.__version__}, optax {optax.__version__}")
PY
echo "$venv/bin/python"
