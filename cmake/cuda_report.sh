#!/usr/bin/env bash
# The CUDA compiler launcher (CMAKE_CUDA_COMPILER_LAUNCHER): runs the compile, which has nvcc's
# --resource-usage on, passes its messages through, and keeps them beside the object as
# <object>.ptxas: ptxas's per-kernel registers, stack frame and spills, which the build check
# tests/cuda/check_cuda_build.sh reads (a spill outside its allowlist fails the suite).
obj=
prev=
for arg in "$@"; do
  [ "$prev" = -o ] && obj=$arg
  prev=$arg
done
[ -n "$obj" ] || exec "$@"
"$@" 2> "$obj.ptxas.part"
rc=$?
grep -vE '^ptxas info|^    [0-9]+ bytes stack frame' "$obj.ptxas.part" >&2
mv -f "$obj.ptxas.part" "$obj.ptxas"
touch "$obj.ptxas"  # newer than the object (nvcc writes it after ptxas): the check knows a stale report
exit $rc
