# What the command's test scripts share (tests/cli/test_cli.sh, tests/data/test_data_cli.sh), sourced
# by them: the binary and case from the arguments, a fresh working folder, and the checks.
#   source lib.sh <memgrad binary> <case>
bin=$1
case_name=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
# expect_exit CODE CMD...: runs CMD, shows its output, and checks its exit code.
expect_exit() {
  local want=$1
  shift
  "$@" >out.txt 2>&1
  local got=$?
  cat out.txt
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want"
}
expect_output() { grep -qE -- "$1" out.txt || fail "expected output matching '$1'"; }
# The loss column of a --log CSV from step $2 on.
losses_from() { awk -F, -v s="$2" 'NR > 1 && $1 >= s { print $1, $2 }' "$1"; }
# same_losses A B TOL [FROM]: every step of A (from FROM on) is in B with the same loss, to a relative
# TOL (0: to every printed digit).
same_losses() {
  awk -F, -v tol="$3" -v from="${4:-0}" '
    FNR == 1 { file++; next }
    file == 1 && $1 >= from { want[$1] = $2; n++ }
    file == 2 && ($1 in want) { d = $2 - want[$1]; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2
                                if (d > tol * (m > 1 ? m : 1)) bad = 1; seen++ }
    END { exit bad || n == 0 || seen != n }' "$1" "$2" || fail "$1 and $2: losses differ beyond $3"
}
# Two (four) processes under mpirun (as root, on shared cores), each with one OpenMP thread.
mpi2() { OMP_NUM_THREADS=1 "$MG_MPIEXEC" -np 2 --allow-run-as-root --oversubscribe "$@"; }
mpi4() { OMP_NUM_THREADS=1 "$MG_MPIEXEC" -np 4 --allow-run-as-root --oversubscribe "$@"; }

