#!/usr/bin/env bash
# ZeRO stage 3 and parameter offload, with `memgrad train`.
#   memory  every rank's step peaks and reserved peak, measured and planned on meta, and the bytes it holds
#           after a step beside ZeRO's formula, at stages 0-3 on 2 and 4 ranks, for the default GPT and a
#           larger one (LARGE flags) whose parameters outweigh its activations
#   time    per step of the larger GPT: rank 0's time blocked on communication, of it waiting for units to
#           arrive (all-gathers, copies to the device) and for their gradients to leave (reduce-scatters,
#           copies to host memory), with the next unit prefetched and not (--no-unit-prefetch), for
#           --zero 3 on 2 ranks and --offload params in one process, and the copies' own time; rounds
#           alternate the configurations, medians shown
#   bench/run_zero3.sh memory|time          build directory: $MG_BUILD_DIR (default build-bench)
#   ROUNDS=3 STEPS=5 LARGE="--model custom --n-layer 8 --n-head 8 --n-embd 512 --seq 64 --batch 2"
# Each rank gets OMP_NUM_THREADS = nproc / ranks (at least 1).
set -euo pipefail
mode=${1:?memory or time}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${MG_BUILD_DIR:-$root/build-bench}
rounds=${ROUNDS:-3}
steps=${STEPS:-5}
read -r -a large <<<"${LARGE:---model custom --n-layer 8 --n-head 8 --n-embd 512 --seq 64 --batch 2}"
command -v mpirun >/dev/null || { echo "mpirun not found: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMG_NATIVE=ON -DMG_CUDA=OFF -DMG_MPI=ON -DMG_BUILD_TESTS=OFF \
  -DMG_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target memgrad_cli >/dev/null
bin=$build/bin/memgrad
cores=$(nproc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# train RANKS [flags]: memgrad train under mpirun (or alone for 1), its report in $out/log.
train() {
  local ranks=$1
  shift
  local threads=$((cores / ranks > 0 ? cores / ranks : 1))
  local flags=(--sample 0 --timeline '' --quiet "$@")
  if [ "$ranks" -eq 1 ]; then
    OMP_NUM_THREADS=$threads "$bin" train "${flags[@]}" >"$out/log"
  else
    OMP_NUM_THREADS=$threads mpirun -np "$ranks" --allow-run-as-root --oversubscribe "$bin" train "${flags[@]}" >"$out/log"
  fi
}

echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$mode" = memory ]; then
  echo "| model | ranks | stage | rank | first step peak | later steps peak | reserved peak | held after a step (P + G + O) | ZeRO's formula |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for model in default large; do
    flags=(--steps 3)
    [ "$model" = large ] && flags+=("${large[@]}")
    for n in 2 4; do
      for stage in 0 1 2 3; do
        train "$n" "${flags[@]}" --zero "$stage"
        # "rank 0: first step A B, planned A B: exact; later steps ...; reserved ...; Parameter p B + Gradient g B
        #  + OptimizerState o B = t B (formula f B); ..."
        awk -v model="$model" -v n="$n" -v stage="$stage" '
          function cell(measured, planned) { return measured (measured == planned ? " (= plan)" : " (plan " planned ")") }
          $1 == "rank" && $3 == "first" {
            r = $2; sub(/:$/, "", r)
            for (i = 1; i <= NF; ++i) {
              if ($i == "first") { f = $(i + 2); fp = $(i + 5) }
              if ($i == "later") { l = $(i + 2); lp = $(i + 5) }
              if ($i == "reserved") { v = $(i + 1); vp = $(i + 4) }
              if ($i == "=") t = $(i + 1)
              if ($i == "(formula") z = $(i + 1)
            }
            printf "| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", model, n, stage, r, cell(f, fp), cell(l, lp),
                   cell(v, vp), t, z
          }' "$out/log"
      done
    done
  done
  exit 0
fi

# time: the step from "trained N steps in T"; rank 0's time blocked on all communication from
# "communication: ... X of Y"; from "units: ... blocked X waiting for units to arrive, Y for their gradients to
# leave" and "the copies ... took Z per step".
record() {
  awk -v steps="$steps" '
    function ms(v, u) { return u ~ /^s/ ? v * 1000 : v }
    /^trained/ { t = ms($5, $6) / steps }
    /^communication:/ { for (i = 1; i <= NF; ++i) if ($i == "gathers") b = ms($(i + 1), $(i + 2)) / steps }
    /^units:/ {
      for (i = 1; i <= NF; ++i) {
        if ($i == "blocked") g = ms($(i + 1), $(i + 2))
        if ($i == "for" && $(i + 2) == "gradients") r = ms($(i - 2), $(i - 1))
      }
    }
    /copies between host and device took/ { for (i = 1; i <= NF; ++i) if ($i == "took") k = ms($(i + 1), $(i + 2)) }
    END { printf "%.1f %.1f %.1f %.1f %.1f\n", t, b, g, r, k }' "$out/log" >>"$out/$1"
}
for ((round = 1; round <= rounds; ++round)); do
  for prefetch in on off; do
    extra=()
    [ "$prefetch" = off ] && extra=(--no-unit-prefetch)
    train 2 "${large[@]}" --steps "$steps" --zero 3 "${extra[@]}" && record "zero3_$prefetch"
    train 1 "${large[@]}" --steps "$steps" --offload params "${extra[@]}" && record "offload_$prefetch"
  done
  train 2 "${large[@]}" --steps "$steps" --zero 2 && record zero2
  train 1 "${large[@]}" --steps "$steps" && record alone
done
median() { sort -n -k"$2" "$1" | awk -v k="$2" '{ v[NR] = $k } END { print v[int((NR + 1) / 2)] }'; }
echo "memgrad train ${large[*]} --steps $steps; $rounds rounds, medians of ms per step (rank 0)"
echo "| run | step | blocked on communication | of it: units arriving | gradients leaving | copies took (copy thread) |"
echo "|---|---|---|---|---|---|"
row() { echo "| $1 | $(median "$out/$2" 1) | $(median "$out/$2" 2) | $(median "$out/$2" 3) | $(median "$out/$2" 4) | $(median "$out/$2" 5) |"; }
row "2 ranks, --zero 2 (for reference)" zero2
row "2 ranks, --zero 3, prefetch" zero3_on
row "2 ranks, --zero 3, --no-unit-prefetch" zero3_off
row "1 process (for reference)" alone
row "1 process, --offload params, prefetch" offload_on
row "1 process, --offload params, --no-unit-prefetch" offload_off
