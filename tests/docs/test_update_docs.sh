#!/usr/bin/env bash
# scripts/update_docs.py on fixtures: it passes what matches (timings masked), fails on a changed byte
# count, value or exit code, and rewrites a stale region so that the check then passes.
#   test_update_docs.sh <python3> <build dir>
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
update=("$1" "$here/../../scripts/update_docs.py" --build "$2")
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"${update[@]}" --check "$here/fresh.md" || fail "fresh.md: expected every region to match"
"${update[@]}" --check "$here/stale.md" >"$work/out.txt" 2>&1 && fail "stale.md: expected the check to fail"
cat "$work/out.txt"
grep -q "3 failed" "$work/out.txt" || fail "stale.md: expected 3 failures (a byte count, a value, an exit code)"
grep -q "^+peak 48.66 MiB (51018752 B)" "$work/out.txt" || fail "stale.md: expected the diff of the byte count"

sed '/<!-- runs/d' "$here/stale.md" >"$work/stale.md"  # what a rewrite can fix: not an exit code
"${update[@]}" "$work/stale.md" || fail "the rewrite failed"
"${update[@]}" --check "$work/stale.md" || fail "after the rewrite the check still fails"
grep -q "(51018752 B)" "$work/stale.md" && grep -q -- "-->2.4036<" "$work/stale.md" || fail "not rewritten"
echo "ok"
