#!/usr/bin/env bash
# Layers only point down: each folder may include memgrad headers from the folders listed for it
# and nothing above. The op entry points (core/ops/, and Tensor's methods in core/tensor.cpp) sit
# above autograd, which records their history; the rest of core sits below everything. data/ (the
# DataLoader) only makes, fills and copies tensors: it uses core alone (tensors, their factories, the
# cuda runtime), and no library layer uses it (a plan counts a loader through the program it runs,
# with data::plan_buffers); the memgrad command and user code do.
#   tests/layering/check_layers.sh [source root]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
declare -A allowed=(
  [core]="core"
  [core/ops]="core kernels autograd"
  [kernels]="core kernels"
  [autograd]="core kernels autograd"
  [nn]="core kernels autograd nn"
  [optim]="core kernels autograd optim"
  [amp]="core kernels autograd optim amp"
  [distributed]="core kernels autograd nn optim amp distributed"
  [plan]="core kernels autograd nn optim amp distributed plan"
  [data]="core data"
)
bad=0
cd "$root" || exit 2
while IFS= read -r file; do
  layer=${file%%/*}
  [[ $file == core/ops/* || $file == core/tensor.cpp ]] && layer=core/ops
  while IFS= read -r target; do
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "$file includes <memgrad/$target/...>, above its layer ($layer may use: ${allowed[$layer]})"
      bad=1
    fi
  done < <(sed -n 's|^#include <memgrad/\([a-z_]*\)/.*|\1|p' "$file" | sort -u)
done < <(find core kernels autograd nn optim amp distributed plan data -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
[ $bad -eq 0 ] && echo "layers point down: every include is at or below its folder's layer"
exit $bad
