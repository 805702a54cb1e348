#!/usr/bin/env bash
# The default job (`memgrad train`: the tiny GPT on the embedded sonnets, 400 steps, lr 3e-3 with 20
# warmup steps, clip 1.0) with each optimizer and three seeds: the final training loss (the mean of
# the last 20 steps' losses, a single step's being noisy), the held-out loss, and both against
# AdamW's with the same seed; then the step time of each. Prints one line per run, then the table.
#   bench/run_optimizer_quality.sh [memgrad binary (build/bin/memgrad)] [steps (400)] [seeds (1 2 3)]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/bin/memgrad}
steps=${2:-400}
seeds=${3:-1 2 3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# name | flags: SGD at the default job's lr is meant to show where it stands, not to be tuned;
# Adafactor's lr is its largest relative step (torch's default 1e-2), so it runs at both.
runs=("adamw|--optimizer adamw" "adam|--optimizer adam" "adamw8bit|--optimizer adamw8bit"
  "adam8bit|--optimizer adam8bit" "adafactor|--optimizer adafactor" "adafactor lr 1e-2|--optimizer adafactor --lr 1e-2"
  "sgd+momentum|--optimizer sgd --momentum 0.9" "sgd|--optimizer sgd"
  "adamw8bit in bwd|--optimizer adamw8bit --step-in-backward")
printf "%-20s %5s %10s %10s %10s\n" run seed train held-out "ms/step"
for run in "${runs[@]}"; do
  name=${run%%|*} flags=${run#*|}
  for seed in $seeds; do
    # shellcheck disable=SC2086
    "$bin" train --steps "$steps" --seed "$seed" --timeline '' --sample 0 -q --log "$work/log.csv" $flags \
      >"$work/out.txt"
    train=$(awk -F, -v n="$steps" 'NR > 1 && $1 > n - 20 { s += $2; k++ } END { printf "%.4f", s / k }' "$work/log.csv")
    held=$(sed -nE 's/^held-out loss ([0-9.]+).*/\1/p' "$work/out.txt")
    ms=$(sed -nE 's/^trained [0-9]+ steps in ([0-9.]+) (m?s).*/\1 \2/p' "$work/out.txt" |
      awk -v n="$steps" '{ printf "%.1f", ($2 == "s" ? $1 * 1000 : $1) / n }')
    printf "%-20s %5s %10s %10s %10s\n" "$name" "$seed" "$train" "$held" "$ms" | tee -a "$work/rows.txt"
  done
done
echo
echo "mean over seeds, and against adamw (ratio of the means):"
awk '{ name = $1; for (i = 2; i <= NF - 4; ++i) name = name " " $i
       tr[name] += $(NF - 2); ho[name] += $(NF - 1); ms[name] += $NF; n[name]++; if (!(name in order)) order[name] = ++k }
     END { for (m in order) names[order[m]] = m
           printf "%-20s %10s %10s %10s %9s %9s %9s\n", "optimizer", "train", "held-out", "ms/step", "train/aw", "held/aw", "time/aw"
           a = "adamw"
           for (i = 1; i <= k; ++i) { m = names[i]
             printf "%-20s %10.4f %10.4f %10.1f %9.4f %9.4f %9.2f\n", m, tr[m] / n[m], ho[m] / n[m], ms[m] / n[m],
               (tr[m] / n[m]) / (tr[a] / n[a]), (ho[m] / n[m]) / (ho[a] / n[a]), (ms[m] / n[m]) / (ms[a] / n[a]) } }' \
  "$work/rows.txt"
