#!/usr/bin/env bash
# A short, reproducible fuzz run:  run.sh <fuzz binary> <seed corpus> [runs]
# Fixed seed and run count; new inputs go to a scratch folder, never into the committed corpus.
set -euo pipefail
bin=$1 seeds=$2 runs=${3:-2000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/new"
cd "$work"  # crash-* files land here and are shown below
TMPDIR=$work "$bin" -seed=1 -runs="$runs" -max_len=4096 -timeout=20 -rss_limit_mb=2048 \
  -print_final_stats=1 "$work/new" "$seeds" || {
  status=$?
  for f in crash-* leak-* timeout-* oom-*; do [ -e "$f" ] && { echo "== $f"; od -c "$f" | head -20; }; done
  exit "$status"
}
