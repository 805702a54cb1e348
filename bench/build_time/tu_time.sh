#!/usr/bin/env bash
# A compiler (and linker) launcher that logs each command's output file with its wall, user and sys
# seconds, one line each, to $MG_TU_LOG:  <wall> <user> <sys> <output>
# CMake: -DCMAKE_CXX_COMPILER_LAUNCHER=.../tu_time.sh (also _CUDA_COMPILER_ and _CXX_LINKER_LAUNCHER).
# User+sys CPU seconds are what a shared machine's load distorts least; bench/build_time/run.sh sums them.
log=${MG_TU_LOG:?MG_TU_LOG: the file to append to}
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
t=$(mktemp)
/usr/bin/time -q -f "%e %U %S" -o "$t" "$@"
rc=$?
echo "$(tail -1 "$t") ${out:-?}" >>"$log"
rm -f "$t"
exit $rc
