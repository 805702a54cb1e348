#!/usr/bin/env bash
# Layers only point down, with no exception. A file's layer is its top folder; it may include memgrad
# headers from the folders listed for that layer and nothing above. Besides the table, the graph of
# folders the includes actually draw must have no cycle (a cycle is reported even if someone widened
# the table to allow it), and kernels are entered only through ops/: no other folder of the library
# calls kernels::run or kernels::try_run.
# data/ (the DataLoader) makes, fills and copies tensors through ops and no library layer uses it (a
# plan counts a loader through the program it runs, with data::plan_buffers); the memgrad command
# and user code do. report/ (the timeline page and the snapshot reader) reads what core/memory
# records and writes; no library layer uses it either.
# core/ has inner layers of its own, checked file by file (tests/layering/core_graph.py): a unit (X.h,
# X.cpp, X.cu and X_impl.h beside X.h) includes units of its own layer or below, and core's units
# draw no include loop. Where a lower unit must reach a higher one, the higher registers a hook
# (Storage's door to the budget runtime: core/storage_impl.h) or the lower only declares what a
# higher file defines (check_environment; the Tensor methods ops/ defines): link-time, not includes.
# tools/ (the memgrad command) and bench/ sit on top and use the library as its users do: any folder
# but kernels/ (private, as every *_impl.h is: neither is installed), and no library folder includes
# them.
#   tests/layering/check_layers.sh [source root]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
layers=(core kernels autograd ops nn optim amp distributed train plan data report)
declare -A allowed=(
  [core]="core"
  [kernels]="core kernels"
  [autograd]="core autograd"
  [ops]="core kernels autograd ops"
  [nn]="core autograd ops nn"
  [optim]="core autograd ops nn optim"
  [amp]="core autograd ops nn optim amp"
  [distributed]="core autograd ops nn optim amp distributed"
  [train]="core autograd ops nn optim amp distributed train"
  [plan]="core autograd ops nn optim amp distributed train plan"
  [data]="core ops data"
  [report]="core report"
)
library="core autograd ops nn optim amp distributed train plan data report"
allowed[tools]="$library tools"
allowed[bench]="$library bench"
layers+=(tools bench)
bad=0
cd "$root" || exit 2
declare -A edges=()  # "from to" -> a file that draws the edge
while IFS= read -r file; do
  layer=${file%%/*}
  while IFS= read -r target; do
    [[ $target != "$layer" && -z ${edges["$layer $target"]:-} ]] && edges["$layer $target"]=$file
    if [[ " ${allowed[$layer]} " != *" $target "* ]]; then
      echo "$file includes <memgrad/$target/...>, above its layer ($layer may use: ${allowed[$layer]})"
      bad=1
    fi
  done < <(sed -n 's|^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]memgrad/\([a-z_]*\)/.*|\1|p' "$file" | sort -u)
  if [[ $layer == tools || $layer == bench ]] && grep -Eq '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]memgrad/.*_impl\.h[>"]' "$file"; then
    echo "$file includes a private *_impl.h header: $layer uses the library's installed headers"
    bad=1
  fi
  if [[ $layer != ops && $layer != kernels ]] && grep -v '^[[:space:]]*//' "$file" | grep -Eq 'kernels::(try_)?run[[:space:]]*\('; then
    echo "$file calls kernels::run: kernels are entered through an op (ops/), not from $layer"
    bad=1
  fi
done < <(find "${layers[@]}" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)

# Cycles in the folder graph: a depth-first search from every folder, reporting each back edge's loop.
declare -A state=()  # unvisited, 1 on the current path, 2 done
path=()
visit() {
  local from=$1 to
  state[$from]=1
  path+=("$from")
  for to in "${layers[@]}"; do
    [[ -z ${edges["$from $to"]:-} ]] && continue
    if [[ ${state[$to]:-0} == 1 ]]; then
      local cycle="" i seen=0
      for i in "${path[@]}"; do
        [[ $i == "$to" ]] && seen=1
        [[ $seen == 1 ]] && cycle+="$i -> "
      done
      echo "cycle: ${cycle}$to (the edge $from -> $to: ${edges["$from $to"]})"
      bad=1
    elif [[ ${state[$to]:-0} == 0 ]]; then
      visit "$to"
    fi
  done
  unset 'path[${#path[@]}-1]'
  state[$from]=2
}
for layer in "${layers[@]}"; do
  [[ ${state[$layer]:-0} == 0 ]] && visit "$layer"
done

# core's inner layers, lowest first. base: the vocabulary (errors, dtypes, shapes, environment
# variables, op names); device: what a device is and what its runtime offers, declared (cuda/stream.h,
# cuda/runtime_impl.h), and the kernel-variant registry; memory: the ledger, the caching allocator,
# history, traces, the snapshot writer and a device's host memory; tensor: storage and tensors, and
# what takes them (cuda.h's pinned tensors and copies, autocast, profiling); cuda_runtime: the CUDA
# runtime's definitions (they make tensors) and the environment check, which asks every layer
# below; budget: the memory budget runtime, which replays kernels on tensors and hooks into Storage
# and the allocator.
core_layers='
base:         error dtype scalar small_vector shape dispatch files random env cpu_isa op_list op grad_mode flops
              omp_defaults openblas_defaults
device:       device variants cuda/stream cuda/runtime_impl
memory:       memory allocator memory/ host_memory
tensor:       storage tensor cuda autocast profile
cuda_runtime: cuda/ check_environment
budget:       budget/
'
python3 "$(dirname "$0")/core_graph.py" "$root" --layers - <<<"$core_layers" || bad=1

[ $bad -eq 0 ] && echo "layers point down: every include is at or below its folder's layer, the folders draw no cycle," \
  "core's units keep to its inner layers and draw no loop, and only ops/ runs kernels"
exit $bad
