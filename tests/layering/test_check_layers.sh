#!/usr/bin/env bash
# check_layers.sh must fail where the layering breaks: on an autograd -> ops include (an include above
# its layer, and a cycle, reported even when the table is widened to allow it), on an nn/ file that
# runs a kernel itself, on tools/ or bench/ reaching private headers or the library reaching them,
# and inside core/ on a unit including one of a higher inner layer, on an include loop, and on a unit
# the table of inner layers does not place. Each fault is injected into a scratch copy of the
# library's folders.
#   tests/layering/test_check_layers.sh [source root]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
check=$root/tests/layering/check_layers.sh
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail=0
expect() {  # expect NAME PATTERN: the check fails on the scratch copy and says PATTERN
  local out
  out=$(bash "$scratch/check_layers.sh" "$scratch/tree")
  if [ $? -eq 0 ] || ! grep -q -- "$2" <<<"$out"; then
    echo "FAIL: $1: expected a failure saying '$2', got:"
    echo "$out"
    fail=1
  else
    echo "ok: $1"
  fi
}
fresh() {  # a clean copy of the tree and of the check
  rm -rf "$scratch/tree"
  mkdir -p "$scratch/tree"
  (cd "$root" && cp -r core kernels autograd ops nn optim amp distributed train plan data report tools bench "$scratch/tree/")
  cp "$check" "$root/tests/layering/core_graph.py" "$scratch/"
}

fresh
bash "$scratch/check_layers.sh" "$scratch/tree" >/dev/null || { echo "FAIL: the clean tree does not pass"; fail=1; }

fresh
sed -i '1i #include <memgrad/ops/ops.h>' "$scratch/tree/autograd/engine.cpp"
expect "autograd includes ops" "autograd/engine.cpp includes <memgrad/ops/...>, above its layer"
expect "autograd -> ops -> autograd is a cycle" "cycle: autograd -> ops -> autograd"

fresh  # the same include with the table widened to allow it: the cycle is still found
sed -i '1i #include <memgrad/ops/ops.h>' "$scratch/tree/autograd/engine.cpp"
sed -i 's/^  \[autograd\]="core autograd"/  [autograd]="core autograd ops"/' "$scratch/check_layers.sh"
expect "a widened table still finds the cycle" "cycle: autograd -> ops -> autograd"

fresh
printf 'void f(const mg::Tensor& t) { mg::kernels::run(t.device(), &mg::kernels::Backend::fill, t, 0.0); }\n' \
  >>"$scratch/tree/nn/init.cpp"
expect "nn runs a kernel" "nn/init.cpp calls kernels::run"

fresh
sed -i '1i #include <memgrad/kernels/backend.h>' "$scratch/tree/tools/memgrad/main.cpp"
expect "the command includes a private kernel header" "tools/memgrad/main.cpp includes <memgrad/kernels/...>, above its layer"

fresh
sed -i '1i #include <memgrad/core/budget/runtime_impl.h>' "$scratch/tree/bench/budget.cpp"
expect "a benchmark includes a private header" "bench/budget.cpp includes a private \*_impl.h header"

fresh
sed -i '1i #include <memgrad/tools/memgrad/options.h>' "$scratch/tree/plan/planner.cpp"
expect "the library includes the command" "plan/planner.cpp includes <memgrad/tools/...>, above its layer"

fresh  # core's memory layer (the ledger) includes the tensor layer
sed -i '1i #include <memgrad/core/tensor.h>' "$scratch/tree/core/memory/ledger.cpp"
expect "core/memory includes core/tensor.h" \
  "core/memory/ledger.cpp includes <memgrad/core/tensor.h>, above its inner layer (core/memory/ledger is in memory"

fresh  # ... and memory.h doing the same closes a loop: memory -> tensor -> storage -> allocator -> memory
sed -i '1i #include <memgrad/core/tensor.h>' "$scratch/tree/core/memory.h"
expect "an include loop in core" "core include loop: allocator host_memory memory storage tensor"

fresh
printf '#include <memgrad/core/tensor.h>\n' >"$scratch/tree/core/new_unit.cpp"
expect "a core unit no inner layer places" "core/new_unit is in no inner layer of core"

exit $fail
