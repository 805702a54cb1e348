#!/usr/bin/env bash
# The step time with the batches read by the training thread (--num-workers 0) and by background
# threads (--num-workers 2), on data that costs real time to read: a text file of SIZE_MIB written
# once and dropped from the page cache before every run (dd iflag=nocache), so that each window the
# shuffled sampler picks is read from the disk (a page fault on the mapped file). Rounds alternate
# the runs; the table shows medians of the per-step times of steps 2..STEPS (from --log) and of the
# time the training thread spent getting batches.
#   bench/run_data_loader.sh [memgrad train flags...]     build directory: $MG_BUILD_DIR (default build-bench)
#   ROUNDS=3 STEPS=30 SIZE_MIB=4096 DATA=/tmp/memgrad-bench-data.txt
#   COLD=0: the file stays in the page cache (read once before the runs): what reading costs without the disk
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
rounds=${ROUNDS:-3}
steps=${STEPS:-30}
data=${DATA:-/tmp/memgrad-bench-data.txt}
size_mib=${SIZE_MIB:-4096}
if [ ! -x "$build/bin/memgrad" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=ON -DMG_CUDA=OFF -DMG_BUILD_TESTS=OFF \
    -DMG_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target memgrad_cli >/dev/null
fi
bin=$build/bin/memgrad
if [ "$(stat -c %s "$data" 2>/dev/null || echo 0)" -ne $((size_mib << 20)) ]; then
  echo "writing $size_mib MiB of text to $data" >&2
  (base64 -w 100 /dev/urandom || true) | head -c $((size_mib << 20)) >"$data"  # base64 ends on SIGPIPE
fi
[ "${COLD:-1}" = 0 ] && cat "$data" >/dev/null
flags=(--data "$data" --steps "$steps" --sample 0 --timeline '' --log-every 1000000 "$@")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run NAME [train flags]: appends "median ms per step, ms per step getting batches" to $out/NAME.
run() {
  local name=$1
  shift
  [ "${COLD:-1}" = 0 ] || dd if="$data" iflag=nocache count=0 status=none  # out of the page cache: reads go to the disk
  "$bin" train "${flags[@]}" --log "$out/log.csv" "$@" >"$out/log"
  local tokens
  tokens=$(awk '/^  batch/ { n = $2; if ($3 == "x") n *= $4 } /^  batch/ && /accum/ { for (i = 1; i <= NF; ++i)
           if ($i == "accum") a = $(i + 1) + 0 } END { print n * a }' "$out/log")
  local wait
  wait=$(sed -n 's/^data: the training thread [a-z ]* \([0-9.]*\) ms per step.*/\1/p' "$out/log")
  local ms
  ms=$(awk -F, -v tokens="$tokens" 'NR > 2 { print 1000 * tokens / $3 }' "$out/log.csv" | sort -n |
    awk '{ v[NR] = $1 } END { printf "%.1f", v[int((NR + 1) / 2)] }')
  echo "$ms $wait" >>"$out/$name"
}

for ((r = 1; r <= rounds; ++r)); do
  run w0 --num-workers 0
  run w2 --num-workers 2
done

median() { sort -n -k"$2" "$1" | awk -v k="$2" '{ v[NR] = $k } END { print v[int((NR + 1) / 2)] }'; }
echo "memgrad train ${flags[*]}; $rounds rounds, medians; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-18s %12s %30s   %s\n" "run" "ms / step" "ms / step getting batches" "each round's ms / step"
for w in 0 2; do
  printf "%-18s %12s %30s   %s\n" "--num-workers $w" "$(median "$out/w$w" 1)" "$(median "$out/w$w" 2)" \
    "$(cut -d' ' -f1 "$out/w$w" | tr '\n' ' ')"
done
