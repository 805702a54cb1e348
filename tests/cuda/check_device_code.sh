#!/usr/bin/env bash
# The CUDA backend's host code hands kernels device pointers (dptr, dptr_or_null in common.cuh):
# Tensor::raw_data() and data_ptr<T>() refuse cuda tensors (they are for cpu tensors), so a call in
# a .cu or .cuh file is a bug that only a GPU would show. Comments are not code.
#   tests/cuda/check_device_code.sh DIR...      (exit 1 and the lines, if any)
set -u
bad=0
for dir in "$@"; do
  while IFS= read -r file; do
    if hits=$(sed 's|//.*||' "$file" | grep -nE '(\.|->)(raw_data|data_ptr)\b'); then
      sed "s|^|$file:|" <<< "$hits"
      bad=1
    fi
  done < <(find "$dir" -type f \( -name '*.cu' -o -name '*.cuh' \) | sort)
done
[ $bad = 0 ] && echo "no raw_data() or data_ptr() in the device code of: $*"
exit $bad
