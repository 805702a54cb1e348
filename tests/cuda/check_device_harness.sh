#!/usr/bin/env bash
# A dry run of bench/gpu/device_check.sh (DRY_RUN=1: no GPU, no programs): every stage reports, the
# script exits 0, and what it leaves in $OUT fits what the device tool returns: at most 4 plain files
# (the tool's own limit is 8), no folders, names of letters, digits, '.', '_' and '-'.
#   tests/cuda/check_device_harness.sh [source root]
set -u
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if ! OUT=$out DRY_RUN=1 bash "$root/bench/gpu/device_check.sh" > "$out.log" 2>&1; then
  cat "$out.log"
  echo "device_check.sh failed its dry run"
  rm -f "$out.log"
  exit 1
fi
rm -f "$out.log"
bad=0
files=$(find "$out" -mindepth 1 -type f | wc -l)
others=$(find "$out" -mindepth 1 ! -type f | wc -l)
echo "device_check.sh (dry run) wrote $files files: $(cd "$out" && ls | tr '\n' ' ')"
[ "$files" -ge 1 ] && [ "$files" -le 4 ] || { echo "expected 1 to 4 files in \$OUT, got $files"; bad=1; }
[ "$others" = 0 ] || { echo "expected only plain files in \$OUT, got $others folders or others"; bad=1; }
find "$out" -mindepth 1 | sed "s|^$out/||" | grep -vE '^[A-Za-z0-9._-]+$' && { echo "names the tool would not return"; bad=1; }
for stage in "0 env" "1 test_gpu" "2 sanitize" "3 step" "4 kernels" "5 extras" "done"; do
  grep -q "^== $stage" "$out/summary.txt" || { echo "the summary lacks stage \"$stage\""; bad=1; }
done
grep -q "SKIPPED" "$out/summary.txt" && { echo "a stage was skipped for lack of time in a dry run"; bad=1; }
tar -tzf "$out/results.tar.gz" > /dev/null || { echo "results.tar.gz is not a readable archive"; bad=1; }
exit $bad
