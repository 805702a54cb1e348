#!/usr/bin/env bash
# Build time of a fresh clone, as a newcomer meets it (issue 42): clones a commit, builds with no
# compiler cache (CCACHE_DISABLE=1) through scripts/train.sh, and prints the seconds to the first
# training step, then each target's and each translation unit's wall and CPU (user+sys) seconds.
#   bench/build_time/run.sh [--rev REV] [--repo DIR|URL] [--work DIR] [--test] [--top N]
# --rev: the commit to clone (default HEAD of this checkout); --test: then scripts/test.sh in the same
# clone (its build, ctest, the fuzz build), timed and tabled apart. Between them, phase `rebuild`: the
# rebuild after touching one CPU kernel file. Run it on a quiet machine for wall times; CPU seconds move
# much less with load. Needs the packages installed (scripts/setup_deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
rev=HEAD
work=${TMPDIR:-/tmp}/mg-build-time
test=0
top=25
kernel=kernels/cpu/elementwise.cpp
while [ $# -gt 0 ]; do
  case $1 in
    --rev) rev=$2; shift 2 ;;
    --repo) repo=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --test) test=1; shift ;;
    --top) top=$2; shift 2 ;;
    *) echo "usage: $0 [--rev REV] [--repo DIR|URL] [--work DIR] [--test] [--top N]" >&2; exit 2 ;;
  esac
done
sha=$(git -C "$repo" rev-parse "$rev" 2>/dev/null || echo "$rev")
rm -rf "$work"
mkdir -p "$work"
git clone -q "$repo" "$work/src"
git -C "$work/src" checkout -q "$sha"
cp "$here/tu_time.sh" "$here/table.sh" "$work/"  # the launcher works for commits that predate it

export CCACHE_DISABLE=1
export CMAKE_CXX_COMPILER_LAUNCHER=$work/tu_time.sh CMAKE_CUDA_COMPILER_LAUNCHER=$work/tu_time.sh
export CMAKE_CXX_LINKER_LAUNCHER=$work/tu_time.sh
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
fam=$(grep -m1 '^cpu family' /proc/cpuinfo | sed 's/.*: //')
model=$(grep -m1 '^model\s*:' /proc/cpuinfo | sed 's/.*: //')
echo "commit $(git -C "$work/src" log --oneline -1)"
echo "cpu: $cpu (family $fam model $model), $(nproc) cores; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"

# phase <name> <command...>: runs the command in the clone, its output in $work/<name>.out; prints its wall
# seconds and the times of its compiles and links ($work/<name>.tu).
phase() {
  local name=$1
  shift
  export MG_TU_LOG=$work/$name.tu
  : >"$MG_TU_LOG"
  local t0 t1
  t0=$(date +%s.%N)
  if ! (cd "$work/src" && "$@") >"$work/$name.out" 2>&1; then
    echo "$name: failed; the last lines of $work/$name.out:" >&2
    tail -20 "$work/$name.out" >&2
    return 1
  fi
  t1=$(date +%s.%N)
  printf '%s: %.0f s wall, load at end %s\n' "$name" "$(echo "$t1 - $t0" | bc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
}

phase train scripts/train.sh --steps 1
grep -m1 -E '^NOTE|CUDA' "$work/train.out" || true
"$work/table.sh" "$work/train.tu" "$top"
# A developer's rebuild after touching one CPU kernel file (its copies at each level built, the links):
# kernels/cpu/elementwise.cpp, the largest baseline unit, in every commit since ea0741d.
touch "$work/src/$kernel"
phase rebuild cmake --build build -j"$(nproc)" --target memgrad_cli
awk -v f="$kernel" '{ c += $2 + $3; n++ } END { printf "rebuild after touching %s: %d compiles and links, %.1f s CPU\n\n", f, n, c }' \
  "$work/rebuild.tu"
if [ "$test" = 1 ]; then
  phase test scripts/test.sh
  grep -E 'tests passed|tests failed|Total Test time' "$work/test.out" || true
  "$work/table.sh" "$work/test.tu" "$top"
fi
