#!/usr/bin/env bash
# Issue 42's measurement in one command: bench/build_time/run.sh for each commit, one after the other
# (fresh clone, no compiler cache, scripts/train.sh --steps 1; with --test, scripts/test.sh after it),
# then one line per commit: the seconds to the first training step, to rebuild after touching one CPU
# kernel file, and the build's CPU seconds. The
# default commits are ea0741d (the build the issue measured) and HEAD. Each commit's full output, its
# per-target and per-translation-unit tables included, is kept in <work>/<commit>.txt.
#   bench/build_time/compare.sh [--test] [--work DIR] [REV...]     (default work: ${TMPDIR:-/tmp}/mg-build-time)
# Run it on a quiet machine for wall times (the load at the start and end of each phase is printed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${TMPDIR:-/tmp}/mg-build-time
args=()
revs=()
while [ $# -gt 0 ]; do
  case $1 in
    --test) args+=(--test); shift ;;
    --work) work=$2; shift 2 ;;
    -*) echo "usage: $0 [--test] [--work DIR] [REV...]" >&2; exit 2 ;;
    *) revs+=("$1"); shift ;;
  esac
done
[ ${#revs[@]} -gt 0 ] || revs=(ea0741d HEAD)
mkdir -p "$work"
summary=()
for rev in "${revs[@]}"; do
  sha=$(git -C "$repo" rev-parse --short "$rev")
  echo "== $rev ($sha): $work/$sha.txt"
  "$here/run.sh" --rev "$sha" --work "$work/$sha" --top 40 ${args[@]+"${args[@]}"} | tee "$work/$sha.txt"
  # run.sh's phase lines ("train: N s wall, ...") and each table's total row ("| all | files | wall | CPU |")
  line="$rev ($sha):"
  while read -r phase secs; do
    line+=" $phase ${secs} s wall,"
  done < <(sed -nE 's/^(train|rebuild|test): ([0-9]+) s wall.*/\1 \2/p' "$work/$sha.txt")
  cpu=$(sed -nE 's/^\| all \| [0-9]+ \| [0-9.]+ \| ([0-9.]+) \|$/\1/p' "$work/$sha.txt" | paste -sd+ | bc)
  summary+=("$line compiles and links ${cpu} s CPU (user+sys)")
done
echo
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores; load now: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${summary[@]}"
