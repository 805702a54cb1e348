#!/usr/bin/env bash
# The decision table of docs/memory.md ("From out of memory to the fix"): each technique's flags, the
# peak it leaves on the default GPT of `memgrad train` (measured: 3 steps, the later steps' allocated
# peak and the smallest --memory-limit they run under) and on GPT-2 124M at batch 8 x 1024 (planned on
# meta), with the step's FLOPs and the share of them recomputed. Bytes and FLOPs are exact and
# deterministic; the time a technique costs is measured apart (docs/memory.md says how).
#   scripts/techniques.sh            (memgrad on PATH; scripts/update_docs.py runs it)
set -euo pipefail
techniques=(
  "|none"
  "--checkpoint selective|recompute the attention core"
  "--checkpoint sqrt|sqrt(n) checkpoint segments"
  "--checkpoint every-1|checkpoint every block"
  "--attention fused|fused attention"
  "--precision bf16|bf16 autocast"
  "--precision bf16-storage|bf16 storage + fp32 masters"
  "--batch-half|half the batch"
  "--batch-half --accum 2|half the batch, accumulate 2"
  "--optimizer adamw8bit|8-bit AdamW"
  "--step-in-backward|step inside backward"
)
field() { sed -n "s/.*$1.*(\([0-9]*\) B).*/\1/p" | head -1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
gib() { awk -v b="$1" 'BEGIN { printf "%.2f GiB", b / 1073741824 }'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.0f%%", 100 * (a - b) / b }'; }

printf '%-30s %-29s | %-22s %-9s | %-22s %-9s %-8s %s\n' technique flags "default GPT: peak" saving \
  "GPT-2 124M: peak" saving FLOPs recomputed
base_small='' base_gpt2=''
for t in "${techniques[@]}"; do
  flags=${t%%|*} name=${t#*|}
  small=${flags//--batch-half/--batch 8}  # the default GPT's batch is 16, GPT-2's here 8
  large=${flags//--batch-half/--batch 4}
  # shellcheck disable=SC2086
  peak=$(memgrad train --steps 3 --sample 0 --timeline '' --quiet $small | field "later steps' allocated peak")
  # shellcheck disable=SC2086
  plan=$(memgrad plan --model gpt2-124m --seq 1024 --batch 8 --no-compare $large)
  planned=$(field "allocated peak" <<<"$plan")
  flops=$(sed -n 's/.*FLOPs in the step: \([^,]*\), of them recomputed: [^ ]* (\([0-9.]*%\)).*/\1 \2/p' <<<"$plan")
  base_small=${base_small:-$peak} base_gpt2=${base_gpt2:-$planned}
  printf '%-30s %-29s | %-22s %-9s | %-22s %-9s %-8s %s\n' "$name" "${small:--}" "$(mib "$peak")" \
    "$(pct "$peak" "$base_small")" "$(gib "$planned")" "$(pct "$planned" "$base_gpt2")" ${flops}
done
