#!/usr/bin/env bash
# Checks of a CUDA build that need no GPU, over the objects nvcc compiled:
#   - every object holds sm_90 machine code (SASS) and compute_90 PTX (fatbin_images reads them);
#   - no kernel spills registers to local memory, nor keeps a stack frame (an array indexed at run
#     time), unless the allowlist names it: ptxas's report, which cmake/cuda_report.sh keeps beside
#     each object as <object>.ptxas.
#   tests/cuda/check_cuda_build.sh FATBIN_IMAGES ALLOWLIST OBJECT_LIST_FILE
# The allowlist holds one extended regular expression per line, matched against the demangled
# kernel name, with a comment saying why; blank lines and lines starting with # are skipped.
set -u
tool=$1 allowlist=$2 objects=$3
bad=0
patterns=$(grep -vE '^\s*(#|$)' "$allowlist" | sed 's/\s\+#.*//')
mapfile -t files < "$objects"
[ ${#files[@]} -gt 0 ] || { echo "no objects listed in $objects"; exit 1; }
for obj in "${files[@]}"; do
  [ -n "$obj" ] || continue
  name=${obj##*/}
  if [ ! -f "$obj" ]; then
    echo "$name: not built"
    bad=1
    continue
  fi
  images=$("$tool" "$obj") || { bad=1; continue; }
  for want in sm_90 compute_90; do
    grep -qx "$want" <<< "$images" || { echo "$name: no $want image (it has: $(echo $images))"; bad=1; }
  done
  if [ ! -f "$obj.ptxas" ] || [ "$obj.ptxas" -ot "$obj" ]; then
    echo "$name: no ptxas report beside it (built without cmake/cuda_report.sh? rebuild it)"
    bad=1
    continue
  fi
  # "Function properties for F" is followed by "N bytes stack frame, S bytes spill stores, L bytes spill loads".
  while read -r frame stores loads fn; do
    kernel=$(c++filt "$fn")
    if [ -n "$patterns" ] && grep -qE -- "$patterns" <<< "$kernel"; then
      echo "allowed: $name: $kernel: ${frame} B stack frame, ${stores}/${loads} B spilled (stores/loads)"
      continue
    fi
    echo "$name: $kernel: ${frame} B stack frame, ${stores} B spill stores, ${loads} B spill loads"
    bad=1
  done < <(awk '/Function properties for/ { fn = $NF }
                /bytes stack frame/ { if ($1 + $5 + $9 > 0) print $1, $5, $9, fn }' "$obj.ptxas")
done
[ $bad = 0 ] && echo "${#files[@]} objects: sm_90 and compute_90 in each, no spills or stack frames outside the allowlist"
exit $bad
