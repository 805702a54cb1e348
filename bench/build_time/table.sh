#!/usr/bin/env bash
# Tables of a tu_time.sh log (<wall> <user> <sys> <output> per line): the totals per target
# (CMakeFiles/<target>.dir; links under their output), then the N translation units of most CPU.
#   bench/build_time/table.sh <log> [N]
set -euo pipefail
log=$1
top=${2:-25}
awk '
  { t = $4; if (t ~ /cmTC_/) { t = "configure (try_compile)" } else if (match(t, /CMakeFiles\/[^\/]*\.dir\//)) { t = substr(t, RSTART + 11, RLENGTH - 16) } else { sub(/.*\//, "", t); t = "link " t }
    n[t]++; w[t] += $1; c[t] += $2 + $3; W += $1; C += $2 + $3; N++ }
  END { printf "| target | files | wall s (sum) | CPU s |\n|---|---:|---:|---:|\n"
        for (t in n) printf "| %s | %d | %.1f | %.1f |\n", t, n[t], w[t], c[t] | "sort -t\"|\" -k5 -gr"
        close("sort -t\"|\" -k5 -gr")
        printf "| all | %d | %.1f | %.1f |\n\n", N, W, C }' "$log"
echo "| translation unit | wall s | CPU s |"
echo "|---|---:|---:|"
sort -k2,2 -gr <(awk '{ printf "%s %.2f %s\n", $1, $2 + $3, $4 }' "$log") | head -"$top" |
  awk '{ o = $3; sub(/.*CMakeFiles\//, "", o); sub(/\.dir\//, ": ", o); printf "| %s | %.1f | %.1f |\n", o, $1, $2 }'
