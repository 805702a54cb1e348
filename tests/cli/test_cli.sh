#!/usr/bin/env bash
# Checks of the memgrad command, one case per ctest entry:  test_cli.sh <memgrad binary> <case>
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
small=(--n-layer 2 --n-head 2 --n-embd 32 --seq 16 --batch 4 --sample 0 --timeline '')
# resume_across MICRO SAVE SAVE_FLAGS RESUME RESUME_FLAGS: steps of MICRO micro-batches each; steps 1-2 by
# the launcher SAVE (mpi2, mpi4) with SAVE_FLAGS, saved in one file; steps 3-4 by one process resumed from
# it; step 5 by RESUME with RESUME_FLAGS from that: every loss as in one uninterrupted process.
resume_across() {
  local micro=$1
  expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 --steps 5 --accum "$micro" --log whole.csv
  # shellcheck disable=SC2086  # the flags are words
  expect_exit 0 "$2" "$bin" train "${small[@]}" --dropout 0.1 --steps 2 $3 --save first.safetensors
  expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 --steps 4 --accum "$micro" --resume first.safetensors \
    --save one.safetensors --log alone.csv
  expect_output "resumed at step 2"
  expect_output "resuming the state saved by [0-9]+ processes, ZeRO stage [0-9] at step 2"
  # shellcheck disable=SC2086
  expect_exit 0 "$4" "$bin" train "${small[@]}" --dropout 0.1 --steps 5 $5 --resume one.safetensors --log ranks.csv
  same_losses alone.csv whole.csv 1e-6 3
  same_losses ranks.csv whole.csv 1e-6 5
}

case $case_name in
  help)
    expect_exit 0 "$bin" --help
    expect_output "train"
    expect_exit 0 "$bin" train --help
    expect_output "--checkpoint"
    expect_output "--memory-limit"
    expect_exit 0 "$bin" plan --help
    expect_output "--budget"
    ;;
  usage)  # a bad flag or value: a message naming it and exit code 2
    expect_exit 2 "$bin"
    expect_exit 2 "$bin" train --no-such-flag
    expect_output "no-such-flag"
    expect_exit 2 "$bin" train --optimizer adagrad
    expect_output "adagrad"
    expect_exit 2 "$bin" plan --checkpoint every-0
    expect_output "every-K"
    expect_exit 2 "$bin" plan --model custom --n-embd 100 --n-head 3
    expect_output "multiple of --n-head"
    expect_exit 2 "$bin" plan --checkpoint auto
    expect_output "needs --budget"
    expect_exit 2 "$bin" plan --model gpt2-124m --seq 2048
    expect_output "1024 positions"
    expect_exit 2 "$bin" train --resume does-not-exist.safetensors
    expect_exit 2 "$bin" train --batch 0
    expect_exit 2 "$bin" train --batch 4 --batch 0  # a repeated flag: the last one counts
    expect_exit 2 "$bin" plan --checkpoint every-99999999999999999999
    expect_exit 2 "$bin" train --vocab 64
    expect_output "at least 256"
    # GPT-2's 1024 positions fit the 8 KB corpus (its held-out end grows to one window); 5000 do not.
    expect_exit 0 "$bin" train --n-layer 1 --n-head 1 --n-embd 16 --batch 1 --seq 1024 --steps 1 --sample 0 \
      --timeline '' --quiet
    expect_output "held-out loss [0-9.]+ over 1 window of 1024 tokens \(the corpus's last 1025 bytes\)"
    expect_exit 2 "$bin" train --seq 5000 --steps 1
    expect_output "too long for the [0-9]+-byte corpus"
    expect_exit 2 "$bin" train --device gpu
    expect_output "--device"
    expect_exit 2 "$bin" train --device cuda:7
    expect_output "CUDA devices"
    ;;
  plan)  # GPT-2 sizes on meta: exact parameter counts, no real memory
    expect_exit 0 "$bin" plan --model gpt2-124m --no-compare
    expect_output "124,439,808 parameters"
    expect_exit 0 "$bin" plan --model gpt2-1.5b --batch 8 --seq 1024 --budget 80GB --no-compare
    expect_output "1,557,611,200 parameters"
    expect_output "allocated peak"
    expect_output "largest batch whose steps run under"
    expect_exit 0 "$bin" plan --model tiny --seq 64 --batch 4 --budget 20MiB --device cuda
    expect_output "every block"
    expect_output "bf16-storage"
    expect_output "cuBLAS"
    [ "$(grep -c reserved out.txt)" -eq 1 ] || fail "expected the reserved peak on one line"
    expect_exit 0 "$bin" plan --model mlp --layers 16 --width 256 --batch 1024 --checkpoint auto --budget 28MiB
    expect_output "^DP .* yes"
    ;;
  planned_equals_measured)  # allocated (steps 1 and 2) and reserved peaks: planned == measured, to the byte
    exact() { [ "$(grep -c ': exact$' out.txt)" -eq 3 ] || fail "$1: planned != measured"; }
    for policy in none sqrt selective every-1 every-2; do
      expect_exit 0 "$bin" train "${small[@]}" --steps 3 --clip 0 --checkpoint "$policy"
      exact "--checkpoint $policy"
    done
    for policy in none selective; do  # the fused attention core, with dropout (its mask comes from the RNG)
      expect_exit 0 "$bin" train "${small[@]}" --steps 3 --clip 0 --checkpoint "$policy" --attention fused --dropout 0.1
      exact "--attention fused --checkpoint $policy"
    done
    for precision in bf16 fp16 bf16-storage fp16-storage; do  # the CPU's float32 scratch for half products
      expect_exit 0 "$bin" train "${small[@]}" --steps 3 --precision "$precision" --accum 2 --checkpoint sqrt
      exact "--precision $precision"
    done
    expect_exit 0 "$bin" train --model mlp --layers 4 --width 64 --batch 8 --steps 3 --clip 0 --optimizer sgd \
      --momentum 0.9 --timeline ''
    exact "mlp"
    ;;
  profile)  # --profile: time by kernel over the steps after the first; the ledger and the plan unchanged
    expect_exit 0 "$bin" train "${small[@]}" --steps 3 --clip 0 --profile
    expect_output "^time by kernel, steps 2-3 on cpu:"
    expect_output "^  matmul +[0-9]+\.0 +[0-9.]+ ms"
    expect_output "^  adam_update +1\.0 "  # AdamW steps every parameter in one multi-tensor kernel
    expect_output "^  \(outside kernels\) "
    [ "$(grep -c ': exact$' out.txt)" -eq 3 ] || fail "--profile: planned != measured"
    expect_exit 0 "$bin" train --model mlp --layers 2 --width 32 --batch 8 --steps 1 --timeline '' --profile
    expect_output "^time by kernel, steps 1-1 on cpu:"
    ;;
  promise)  # a --memory-limit of the planned reserved peak runs; one 512 B granule less runs out of memory
    promise() {
      expect_exit 0 "$bin" plan --no-compare "$@"
      local n
      n=$(grep reserved out.txt | sed -E 's/.*\(([0-9]+) B\).*/\1/')
      [ -n "$n" ] || fail "no reserved figure in the plan"
      local steps  # enough to reach the step that runs out of memory one granule below
      steps=$(grep reserved out.txt | sed -E 's/.*in step ([0-9]+).*/\1/')
      steps=$((steps > 3 ? steps : 3))
      expect_exit 0 "$bin" train "$@" --steps "$steps" --timeline '' --sample 0 --memory-limit "$n"
      expect_output "reserved peak under this --memory-limit: .*: exact$"
      expect_exit 3 "$bin" train "$@" --steps "$steps" --timeline '' --sample 0 --memory-limit $((n - 512))
      expect_output "needs a --memory-limit of at least .*\($n B"
      expect_output "Why the cache could not serve it: "  # the allocator's forensics
    }
    promise --model tiny --seq 64 --batch 4
    promise --model custom --n-layer 2 --n-head 2 --n-embd 32 --seq 16 --batch 3 --precision bf16 --checkpoint sqrt
    promise --model custom --n-layer 3 --n-head 2 --n-embd 48 --seq 24 --batch 2 --attention fused --dropout 0.1 \
      --checkpoint selective --optimizer sgd --momentum 0.9 --clip 0.5
    promise --model mlp --layers 5 --width 96 --batch 32 --precision bf16-storage --accum 2 --optimizer adam
    promise --model mlp --layers 3 --width 64 --batch 16 --precision fp16-storage --checkpoint every-1
    # expandable segments: meta maps the same 2 MiB pages, so the promise holds to the byte there too
    promise --model tiny --seq 64 --batch 4 --expandable-segments
    promise --model mlp --layers 5 --width 300 --batch 256 --optimizer adam --expandable-segments
    ;;
  checkpoint_auto)  # --checkpoint auto runs the least-recompute plan that runs under the budget, or says none does
    gpt=(--model custom --n-layer 2 --n-head 8 --n-embd 96 --vocab 744 --seq 48 --batch 2 --dropout 0.1 --optimizer sgd
      --momentum 0.5 --accum 3 --clip 0 --steps 2 --timeline '' --sample 0)
    expect_exit 0 "$bin" train "${gpt[@]}" --checkpoint auto --budget 6291456 --memory-limit 6291456
    expect_output "reserved peak under this --memory-limit: .*: exact$"
    expect_exit 3 "$bin" train "${gpt[@]}" --checkpoint auto --budget 6019765
    expect_output "no plan runs under the budget"
    expect_output "Where it runs out of memory under the budget, planned on meta:"
    expect_output "Why the cache could not serve it: "
    mlp=(--model mlp --layers 5 --width 282 --batch 288 --optimizer sgd --momentum 0.9 --precision bf16 --clip 1)
    expect_exit 3 "$bin" train "${mlp[@]}" --steps 2 --timeline '' --checkpoint auto --budget 6539875
    expect_exit 0 "$bin" plan --no-compare "${mlp[@]}" --checkpoint every-1
    n=$(grep reserved out.txt | sed -E 's/.*\(([0-9]+) B\).*/\1/')
    expect_exit 0 "$bin" train "${mlp[@]}" --steps 2 --timeline '' --checkpoint auto --budget "$n" --memory-limit "$n"
    expect_output "reserved peak under this --memory-limit: .*: exact$"
    ;;
  resume)  # stop, save, resume: the same losses as one uninterrupted run (dropout and fp16 loss scaling on)
    for run in "--precision fp32 --optimizer adamw" "--precision fp16 --optimizer sgd --momentum 0.9"; do
      # shellcheck disable=SC2086
      expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 $run --steps 6 --log whole.csv
      # shellcheck disable=SC2086
      expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 $run --steps 3 --save state.safetensors
      # shellcheck disable=SC2086
      expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 $run --steps 6 --resume state.safetensors \
        --log resumed.csv
      expect_output "resumed at step 3"
      diff <(losses_from whole.csv 4) <(losses_from resumed.csv 4) || fail "$run: resumed losses differ"
      [ "$(losses_from resumed.csv 4 | wc -l)" -eq 3 ] || fail "$run: expected the losses of steps 4-6"
    done
    expect_exit 2 "$bin" train "${small[@]}" --batch 8 --steps 6 --resume state.safetensors
    expect_output "saved by a different run"
    expect_exit 2 "$bin" train "${small[@]}" --dropout 0.2 --steps 6 --resume state.safetensors
    expect_output "saved by a different run"
    ;;
  report)  # the report adds up: categories and owners each sum to the peak, a resumed run included (issue 35)
    hundred() {  # the share column between the lines matching $1 and $2 sums to 100%, to its rounding
      sed -n "/$1/,/$2/p" out.txt |
        awk '$NF ~ /%$/ { s += substr($NF, 1, length($NF) - 1); n++ } END { exit !(n && s - 100 <= 0.05 * n && 100 - s <= 0.05 * n) }'
    }
    adds_up() {
      hundred '^  category' '^  total' || fail "$1: the categories' shares do not sum to 100%"
      hundred 'largest owners at the peak' 'reserved by the caching' || fail "$1: the owners' shares do not sum to 100%"
      # each parameter's gradient at the peak: together, the Gradient category at the peak
      local grad
      grad=$(awk '$1 == "Gradient" { print $2 }' out.txt)
      awk -v g="${grad:-0}" '/^optimizer state per parameter/ { on = 1 } on && $1 == "total" { found = 1; exit $3 != g }
        END { exit !found }' out.txt || fail "$1: the gradients' column does not sum to the Gradient at the peak"
    }
    mlp=(--model mlp --layers 2 --width 64 --batch 8 --timeline '')
    expect_exit 0 "$bin" train "${mlp[@]}" --steps 6 --log whole.csv
    adds_up "mlp"
    expect_output "^  Gradient +[1-9]"  # this MLP's peak is in backward: the column is not all zeros
    expect_exit 0 "$bin" train "${mlp[@]}" --steps 3 --save state.safetensors
    expect_exit 0 "$bin" train "${mlp[@]}" --steps 6 --resume state.safetensors --log resumed.csv
    adds_up "mlp, resumed"
    # the file's tensors are freed once loaded: each step ends with the bytes of the uninterrupted run
    diff <(awk -F, '$1 >= 4 { print $1, $4 }' whole.csv) <(awk -F, '$1 >= 4 { print $1, $4 }' resumed.csv) ||
      fail "a resumed run holds more bytes than the uninterrupted one"
    expect_exit 0 "$bin" train "${small[@]}" --steps 3
    adds_up "gpt"
    ;;
  optimizers)  # the 8-bit Adams, Adafactor and --step-in-backward: planned == measured, their state table, resume
    exact() { [ "$(grep -c ': exact$' out.txt)" -eq 3 ] || fail "$1: planned != measured"; }
    for opt in adam8bit adamw8bit adafactor; do
      for flags in "" "--step-in-backward" "--step-in-backward --precision fp16" "--step-in-backward --accum 2"; do
        # shellcheck disable=SC2086
        expect_exit 0 "$bin" train "${small[@]}" --steps 3 --optimizer $opt $flags
        exact "--optimizer $opt $flags"
      done
    done
    expect_output "^wte.weight .*row_var: 1024, col_var: 512"  # Adafactor's factors of the [256, 32] embedding
    expect_exit 0 "$bin" train "${small[@]}" --steps 2 --optimizer adamw8bit
    expect_output "^wte.weight .*exp_avg: 8192, exp_avg_sq: 8192, exp_avg.absmax: 512, exp_avg_sq.absmax: 512"
    expect_output "optimizer state per parameter byte: [0-9.]+x \\([0-9.]+ B per parameter\\)"
    expect_exit 0 "$bin" plan --model gpt2-124m --batch 1 --seq 128 --optimizer adamw8bit --step-in-backward
    expect_output "^  adamw8bit +in bwd .* 2\\.0[0-9]+ "
    expect_output "^  lion +after .* 4\\.000 +12\\.000$"  # one float32 moment per parameter
    for flags in "" "--step-in-backward"; do  # lion: planned == measured too
      # shellcheck disable=SC2086
      expect_exit 0 "$bin" train "${small[@]}" --steps 3 --optimizer lion $flags
      exact "--optimizer lion $flags"
    done
    # resuming continues bit for bit, with or without stepping inside backward (the same updates)
    for run in "--optimizer adamw8bit" "--optimizer adafactor --step-in-backward" "--optimizer lion"; do
      # shellcheck disable=SC2086
      expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 $run --steps 6 --log whole.csv
      # shellcheck disable=SC2086
      expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 $run --steps 3 --save state.safetensors
      for resume in "" "--step-in-backward"; do
        # shellcheck disable=SC2086
        expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 $run $resume --steps 6 --resume state.safetensors \
          --log resumed.csv
        diff <(losses_from whole.csv 4) <(losses_from resumed.csv 4) || fail "$run $resume: resumed losses differ"
      done
    done
    expect_exit 2 "$bin" train "${small[@]}" --optimizer adam8bit --steps 6 --resume state.safetensors
    expect_output "saved by a different run"
    expect_exit 2 "$bin" train "${small[@]}" --step-in-backward --zero 1
    expect_output "data parallelism"
    expect_exit 2 "$bin" train "${small[@]}" --optimizer adafactor --zero 1
    expect_output "flat slices"
    ;;
  out_of_memory)  # a limit below the step's peak: the ledger's report, the planner's advice, exit code 3
    expect_exit 3 "$bin" train "${small[@]}" --steps 2 --memory-limit 256KiB
    expect_output "out of memory"
    expect_output "the largest --batch whose steps run under it: 0"
    ;;
  budget)  # --remat dynamic under 65% of the peak: the same losses, evictions reported and drawn
    args=(--n-layer 4 --n-head 2 --n-embd 64 --seq 64 --batch 16 --dropout 0.1 --steps 3 --sample 0)
    expect_exit 0 "$bin" train "${args[@]}" --timeline '' --log free.csv
    peak=$(sed -n "s/.*later steps' allocated peak: measured .* (\([0-9]*\) B).*/\1/p" out.txt)
    [ -n "$peak" ] || fail "no measured peak in the output"
    expect_exit 0 "$bin" train "${args[@]}" --memory-limit $((peak * 65 / 100)) --remat dynamic --log dtr.csv \
      --timeline t.html
    expect_output "memory budget .*--remat dynamic"
    expect_output "evicted [0-9.]+ [KM]iB in [1-9][0-9]* evictions"
    same_losses free.csv dtr.csv 0
    grep -q '"evict"' t.html || fail "the timeline lacks the budget's marks"
    expect_exit 0 "$bin" train "${args[@]}" --timeline '' --memory-limit $((peak * 65 / 100)) --offload activations \
      --log off.csv
    expect_output "offloaded [0-9.]+ [KM]iB in [1-9][0-9]* copies"
    same_losses free.csv off.csv 0
    # --budget-cost modeled: two runs make the same evictions, recomputes and copies
    for run in 1 2; do
      expect_exit 0 "$bin" train "${args[@]}" --timeline '' --memory-limit $((peak * 50 / 100)) --remat dynamic \
        --offload activations --budget-cost modeled --log modeled.csv
      grep -oE "(evicted|rematerialized|offloaded) [0-9.]+ [KMG]?i?B in [0-9]+ [a-z]+|fetched back [0-9]+ \([0-9]+" out.txt \
        >decisions.$run
      [ "$(wc -l <decisions.$run)" = 4 ] || fail "no budget report"
    done
    cmp -s decisions.1 decisions.2 || fail "--budget-cost modeled: the runs decided differently"
    same_losses free.csv modeled.csv 0
    expect_exit 2 "$bin" train "${args[@]}" --remat dynamic
    expect_output "--memory-limit"
    expect_exit 3 "$bin" train "${args[@]}" --memory-limit 64KiB --remat dynamic
    expect_output "needs at least"
    ;;
  view)  # memgrad view: a snapshot's page, two compared, the steps up to an OOM; a bad file in one line
    expect_exit 0 "$bin" train "${small[@]}" --steps 2 --snapshot none.json
    expect_output "memory snapshot: none.json"
    peak=$(sed -n "s/.*later steps' allocated peak: measured .* (\([0-9]*\) B).*/\1/p" out.txt)
    expect_exit 0 "$bin" train "${small[@]}" --steps 2 --snapshot sqrt.json --checkpoint sqrt
    expect_exit 0 "$bin" view none.json
    expect_output "memory timeline: none.html"
    grep -q '<canvas\|id="mg-data"' none.html || fail "none.html is not a timeline page"
    expect_exit 0 "$bin" view none.json sqrt.json -o compared.html
    grep -q "compared: none.json vs sqrt.json</title>" compared.html || fail "not a comparison"
    grep -q "checkpoint sqrt" compared.html || fail "the runs' titles lack their checkpoint policies"
    # Out of memory in the second step: the page shows the steps up to it, the failure marked.
    expect_exit 3 "$bin" train "${small[@]}" --steps 2 --memory-limit $((peak * 9 / 10)) --timeline oom.html
    expect_output "memory timeline up to the out-of-memory error: oom.html"
    grep -q '"oom"' oom.html || fail "the page lacks the out-of-memory mark"
    # Not a snapshot, cut short, another version, edited: exit 1, one line naming the file, no page.
    printf 'hello' >bad.json
    head -c 3000 none.json >cut.json
    sed 's/"version": 3/"version": 1/' none.json >old.json
    sed '0,/"bytes": \([1-9][0-9]*\)/s//"bytes": -\1/' none.json >negative.json
    for f in bad.json:"not a memgrad memory snapshot" cut.json:truncated old.json:"a version 1 snapshot" \
      negative.json:"expected a size >= 0"; do
      expect_exit 1 "$bin" view "${f%%:*}"
      expect_output "^memgrad: ${f%%:*}: .*${f#*:}"
      [ "$(wc -l <out.txt)" -eq 1 ] || fail "${f%%:*}: the error is not one line"
      [ -e "${f%%.*}.html" ] && fail "${f%%:*}: a page was written"
    done
    expect_exit 2 "$bin" view
    expect_exit 2 "$bin" view none.json sqrt.json none.json
    expect_exit 2 "$bin" view missing.json
    ;;
  learns)  # the default GPT and the MLP: the loss falls
    expect_exit 0 "$bin" train --steps 40 --batch 8 --seq 32 --sample 20 --log gpt.csv --timeline t.html
    [ "$(stat -c %s t.html)" -gt 10000 ] || fail "the timeline page is missing or empty"  # 40 steps > 3 recorded
    grep -q "step 3" t.html || fail "the timeline lacks the step annotations"
    expect_output "optimizer state per parameter byte: 2.00x"
    expect_exit 0 "$bin" train --model mlp --steps 60 --batch 64 --log mlp.csv
    # The mean of the last 5 losses against the first (single mini-batch losses are noisy).
    for f in gpt.csv:0.8 mlp.csv:0.85; do
      awk -F, -v r="${f#*:}" 'NR == 2 { first = $2 } NR > 1 { l[NR] = $2 }
        END { s = 0; for (i = NR - 4; i <= NR; i++) s += l[i]; exit !(s / 5 < r * first) }' "${f%%:*}" ||
        fail "${f%%:*}: the loss did not fall below ${f#*:} of its first value"
    done
    ;;
  hostile)  # values out of range exit 2 (never clamped), files checked before any work, lying states refused
    # Each would clamp or wrap and then train (99999999999999999999 steps: for ever); the timeout says so.
    for flags in "--steps 99999999999999999999" "--seed -1" "--seed 18446744073709551616" "--lr nan" "--lr inf" \
      "--lr 0" "--clip -1" "--dropout nan" "--batch -5" "--warmup 1e3" "--memory-limit -1" \
      "--memory-limit 99999999999999999999" "--memory-limit 10EB" "--budget 0x10" "--n-embd 010x"; do
      # shellcheck disable=SC2086
      expect_exit 2 timeout 60 "$bin" train "${small[@]}" --steps 1 $flags
      expect_output "^--"
    done
    expect_exit 2 "$bin" plan --top 2147483648
    expect_output "expected an integer in \[0, 2147483647\], got 2147483648"
    # Range errors print their bounds readably (CLI11 printed DBL_MAX with 309 digits).
    expect_exit 2 "$bin" train --clip -1
    expect_output "expected a number >= 0, got -1"
    grep -qE '[0-9]{25}' out.txt && fail "a number of 25 digits or more in the message"
    # A leading zero is decimal, not octal.
    expect_exit 0 "$bin" train "${small[@]}" --steps 010 --log steps.csv --quiet
    [ "$(tail -n 1 steps.csv | cut -d, -f1)" = 10 ] || fail "--steps 010 did not run 10 steps"
    # Files written at the end are checked before anything runs.
    mkdir folder
    for save in /nonexistent/dir/x.safetensors folder; do
      expect_exit 2 "$bin" train "${small[@]}" --steps 2 --save "$save"
      expect_output "^memgrad: --save"
      grep -q "^step" out.txt && fail "--save $save was checked only after training"
    done
    expect_exit 2 "$bin" train "${small[@]}" --steps 2 --timeline /nonexistent/t.html
    # The data loader's buffers (and the MLP's teacher) are in the ledger: a limit stops them at once, as out of
    # memory (64 workers each reading 1024 batches of 4096 x 64 ahead would hold 256 GiB).
    expect_exit 3 timeout 60 "$bin" train --batch 4096 --num-workers 64 --prefetch 1024 --memory-limit 1GiB --timeline ''
    expect_output "for \"data.loader\" \(Input\)"
    expect_exit 3 timeout 60 "$bin" train --model mlp --width 1000000 --memory-limit 1GiB --timeline ''
    expect_output "for \"data.teacher\" \(Input\)"
    # A state whose metadata lies (same-length edits keep the header valid).
    expect_exit 0 "$bin" train "${small[@]}" --steps 17 --save state.safetensors
    rm -f state.safetensors.tmp.*  # none is left; a stale one of a dead saver is removed by the next save
    ( exit 0 ) &
    dead=$!
    wait "$dead"
    touch "state.safetensors.tmp.$dead"
    expect_exit 0 "$bin" train "${small[@]}" --steps 17 --save state.safetensors
    [ -e "state.safetensors.tmp.$dead" ] && fail "the temporary file of a dead saver was left"
    edit() { cp state.safetensors edited.safetensors && perl -0777 -pi -e "$1" edited.safetensors; }
    edit 's/"memgrad.step":"17"/"memgrad.step":"-7"/'
    expect_exit 2 "$bin" train "${small[@]}" --steps 20 --resume edited.safetensors
    expect_output "memgrad.step is '-7', expected an integer in"
    edit 's/"memgrad.rng_seed":"1337"/"memgrad.rng_seed":"abcd"/'
    expect_exit 2 "$bin" train "${small[@]}" --steps 20 --resume edited.safetensors
    expect_output "memgrad.rng_seed is 'abcd'"
    edit 's/"memgrad.step":"17"/"memgrad.step":"99"/'
    expect_exit 2 "$bin" train "${small[@]}" --steps 20 --resume edited.safetensors
    expect_output "already at step 99"
    head -c 100 state.safetensors >edited.safetensors
    expect_exit 2 "$bin" train "${small[@]}" --steps 20 --resume edited.safetensors
    expect_output "^memgrad: --resume edited.safetensors: load_safetensors"
    expect_exit 0 "$bin" train "${small[@]}" --steps 18 --resume state.safetensors
    expect_output "resumed at step 17"
    ;;
  plan_zero)  # one simulated rank of 8 on meta: ZeRO's bytes per parameter, no MPI needed
    expect_exit 0 "$bin" plan --model gpt2-124m --world-size 8 --zero 2 --no-compare
    expect_output "rank 0 of 8 processes, ZeRO stage 2"
    expect_output "^  2 .* <- --zero"
    expect_output "fp32 \\(4\\+4\\+8\\) +16.00 / 16.00 +9.00 / 9.00 +5.50 / 5.50 +2.00 / 2.00"
    expect_output "fp16 \\+ fp32 masters \\(2\\+2\\+12\\) +16.00 / 16.00 +5.50 / 5.50 +3.75 / 3.75 +2.00 / 2.00"
    expect_output "^  ranks 0-7: .* reserved"  # every rank's planned peaks: one class (every slice the same size)
    expect_output "8 ranks in 1 class"
    # Any world size: ranks whose slices or pieces have the same sizes are planned once (a class), ranks
    # past every parameter's last element included (700 ranks of the tiny GPT: "AdamW: got an empty
    # parameter list" before; 2^20 ranks).
    for zero in 1 2 3; do
      for world in 700 1048576; do
        expect_exit 0 "$bin" plan --model tiny --batch 1 --seq 64 --world-size $world --zero $zero --no-compare
        expect_output "^every rank's planned peaks .*: $world ranks in [0-9]+ class"
      done
    done
    expect_exit 2 "$bin" plan --world-size 8 --rank 8
    expect_output "below --world-size"
    expect_exit 2 "$bin" plan --zero 4
    expect_exit 2 "$bin" plan --zero 2 --offload params
    expect_output "--zero 0 or 3"
    # GPT-2 124M with its parameters, gradients and AdamW state in host memory: on the device at the peak
    # only the root unit (embeddings, tied head) and a block or two, gathered, with their gradients.
    expect_exit 0 "$bin" plan --model gpt2-124m --batch 1 --offload params --no-compare
    expect_output "ZeRO stage 3 with the parameters in host memory"
    expect_output "host memory \\(parameters, gradients and optimizer state off the device\\): peak"
    grep -q "OptimizerState" <(sed -n '/^  category/,/^  total/p' out.txt) && fail "optimizer state on the device"
    # What fits: the largest GPT of the family under --budget per stage and with --offload params, beside
    # ZeRO's formula. The tiny GPT at 8 x 64 under 24 MiB: 3 blocks at stages 0-2 (and the formula's 7,
    # model states alone), 2 at stage 3 (a gathered unit beside the shards), 4 with the states in host memory.
    expect_exit 0 "$bin" plan --model tiny -t 64 --budget 24MiB --what-fits layers
    expect_output "on each of 1 rank: the largest GPT by blocks \\(n_embd 128\\)"
    expect_output "^  ZeRO stage 0 +3 +636,032 +7: 1,429,120$"
    expect_output "^  ZeRO stage 3 +2 +437,760 +7: 1,429,120$"
    expect_output "^  --offload params +4 +834,304 +- "
    expect_exit 0 "$bin" plan --model tiny --budget 1KiB --what-fits width
    expect_output "^  ZeRO stage 3 +none +- +none$"
    expect_exit 2 "$bin" plan --model tiny --what-fits layers
    expect_output "--what-fits needs --budget"
    expect_exit 2 "$bin" plan --model mlp --budget 1GiB --what-fits layers
    expect_output "not with --model mlp"
    expect_exit 2 "$bin" plan --model tiny --budget 1GiB --what-fits depth
    expect_output "--what-fits"
    ;;
  data_parallel)  # mpirun -np 2: the losses of one process with --accum 2, every rank's planned peak exact
    [ -n "${MG_MPIEXEC:-}" ] || { echo "SKIPPED: memgrad was built without MPI"; exit 77; }
    expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 --steps 3 --accum 2 --log one.csv
    for zero in 0 1 2; do
      expect_exit 0 mpi2 "$bin" train "${small[@]}" --dropout 0.1 --steps 3 --zero $zero --bucket-cap 8KiB \
        --log zero$zero.csv
      expect_output "data parallel: 2 processes \\(mpi\\), ZeRO stage $zero"
      for r in 0 1; do
        expect_output "rank $r: first step [0-9]+ B, planned [0-9]+ B: exact; later steps [0-9]+ B, planned [0-9]+ B: exact;"
      done
      expect_output "rank 1: elements"
    done
    same_losses zero0.csv one.csv 0      # the same sums in the same order: every printed digit
    same_losses zero1.csv one.csv 1e-6   # clipping sums the squares slice by slice
    same_losses zero2.csv one.csv 1e-6
    # Save from 2 ranks (ZeRO-2, shards gathered into one file), resume in one process, and back.
    resume_across 2 mpi2 "--zero 2" mpi2 "--zero 1"
    expect_exit 2 mpi2 "$bin" train "${small[@]}" --dropout 0.1 --steps 5 --accum 2 --resume one.safetensors
    expect_output "saved by a different run"  # 2 ranks x accum 2 is not 1 x accum 2
    ;;
  zero3)  # ZeRO-3 under mpirun: the losses of one process with N x --accum, every rank's peaks exact
    [ -n "${MG_MPIEXEC:-}" ] || { echo "SKIPPED: memgrad was built without MPI"; exit 77; }
    for n in 2 4; do
      expect_exit 0 "$bin" train "${small[@]}" --dropout 0.1 --steps 3 --accum $n --log one$n.csv
      expect_exit 0 mpi$n "$bin" train "${small[@]}" --dropout 0.1 --steps 3 --zero 3 --log zero$n.csv
      expect_output "data parallel: $n processes \\(mpi\\), ZeRO stage 3, 3 units \\(h.0 .. h.1 and the root\\)"
      for ((r = 0; r < n; ++r)); do
        expect_output "rank $r: first step [0-9]+ B, planned [0-9]+ B: exact; later steps [0-9]+ B, planned [0-9]+ B: exact; reserved [0-9]+ B, planned [0-9]+ B: exact;"
      done
      expect_output "h.0 \\(gathered\\)"  # the gathered units are owners of their own at the peak
      # Clipping sums the squares piece by piece, then across ranks: float32's rounding, far below the
      # 4 printed decimals.
      same_losses zero$n.csv one$n.csv 1e-6
    done
    # bf16-storage, checkpoint segments (a recompute gathers its units again): two ranks sum in the order
    # one process accumulates, so every printed digit agrees.
    half=(--precision bf16-storage --checkpoint sqrt)
    expect_exit 0 "$bin" train "${small[@]}" "${half[@]}" --dropout 0.1 --steps 3 --accum 2 --log half1.csv
    expect_exit 0 mpi2 "$bin" train "${small[@]}" "${half[@]}" --dropout 0.1 --steps 3 --zero 3 --log half2.csv
    same_losses half2.csv half1.csv 0
    # With the shards in host memory, at 2 ranks.
    expect_exit 0 mpi2 "$bin" train "${small[@]}" --dropout 0.1 --steps 3 --zero 3 --offload params --log host2.csv
    expect_output "in host memory"
    same_losses host2.csv one2.csv 1e-6
    # Saved from 4 ranks (one file, gathered), resumed in one process, and from that at 2 ranks.
    resume_across 4 mpi4 "--zero 3" mpi2 "--accum 2 --zero 3"
    ;;
  offload_params)  # parameters, gradients and AdamW state in host memory, under a limit below their bytes
    plain=(--steps 4 --batch 4 --checkpoint every-1 --sample 0 --timeline '')
    expect_exit 0 "$bin" train "${plain[@]}" --log plain.csv
    # 834,304 parameters x 16 B = 12.7 MiB; the device holds a unit or two and activations: 8 MiB
    expect_exit 0 "$bin" train "${plain[@]}" --offload params --memory-limit 8MiB --log host.csv
    [ "$(grep -c ': exact$' out.txt)" -eq 4 ] || fail "planned != measured (device peaks, reserved, host peak)"
    expect_output "host memory \\(--offload params: .*\\): after a step Parameter 3.18 MiB, Gradient 3.18 MiB, OptimizerState 6.37 MiB"
    same_losses host.csv plain.csv 0  # the same arithmetic, where the values live aside
    expect_exit 3 "$bin" train "${plain[@]}" --memory-limit 8MiB  # without offload it does not fit
    expect_exit 2 "$bin" train "${plain[@]}" --offload params --zero 2
    expect_output "--zero 0 or 3"
    expect_exit 2 "$bin" train "${plain[@]}" --offload params --remat dynamic --memory-limit 8MiB
    expect_exit 2 "$bin" train "${plain[@]}" --zero 3 --remat dynamic --memory-limit 8MiB
    expect_output "plain --memory-limit"
    expect_exit 2 "$bin" train "${plain[@]}" --zero 3 --optimizer adamw8bit  # state that needs whole parameters
    expect_output "use sgd, adam, adamw or lion"
    expect_exit 2 "$bin" train "${plain[@]}" --offload params --optimizer adafactor
    expect_output "use sgd, adam, adamw or lion"
    expect_exit 2 "$bin" train "${plain[@]}" --offload params --step-in-backward
    expect_output "--offload params"
    ;;
  train_plan)  # memgrad train carries out a mixed plan (chosen now, or saved by memgrad plan): the losses of the run without a budget
    run=(train -b 8 -t 64 --dropout 0.1 --steps 4 --sample 0 --timeline '')
    expect_exit 0 "$bin" "${run[@]}" --log plain.csv
    expect_exit 0 "$bin" "${run[@]}" --budget 18MiB --plan mixed --cost-model fixed --log mixed.csv
    expect_output "the plan carried out \\(the [A-Za-z ()]+ candidate, chosen now\\)"
    expect_output "each step's allocated peak .*: exact in every step"
    same_losses mixed.csv plain.csv 0  # the same arithmetic: only where the saved tensors wait differs
    expect_exit 0 "$bin" plan --model tiny -b 8 -t 64 --dropout 0.1 --budget 18MiB --plan mixed --cost-model fixed \
      --save-plan tiny.plan --no-compare
    expect_output "memgrad train --plan tiny.plan carries it out"
    expect_output "predicted [0-9.]+ ms a step \\(measured once on the cpu: [0-9.]+ ms\\)"  # --measure auto: steps of ms
    # --measure: a plan whose 4 steps the cost model puts over 10 s is not run unless asked (6.5 s a step,
    # planned on meta in well under a second); --measure no runs none.
    expect_exit 0 "$bin" plan --model tiny -b 1024 -t 64 --budget 64GiB --plan mixed --cost-model fixed --no-compare
    expect_output "predicted [0-9.]+ ms a step \\(not measured: its 4 steps on the cpu would take about 26 s; --measure yes"
    expect_exit 0 "$bin" plan --model tiny -b 8 -t 64 --budget 18MiB --plan mixed --cost-model fixed --no-compare \
      --measure no
    expect_output "\\(not measured: --measure no\\)"
    expect_exit 2 "$bin" plan --model tiny -b 8 -t 64 --budget 18MiB --plan mixed --cost-model fixed --no-compare \
      --measure yes --device cuda
    expect_output "--measure yes runs steps on the cpu"
    expect_exit 0 "$bin" "${run[@]}" --plan tiny.plan --log file.csv
    expect_output "from tiny.plan"
    expect_output "exact in every step"
    same_losses file.csv plain.csv 0
    expect_exit 2 "$bin" train -b 4 -t 64 --steps 2 --sample 0 --timeline '' --plan tiny.plan
    expect_output "planned for another run"
    expect_exit 2 "$bin" "${run[@]}" --plan mixed
    expect_output "needs --budget"
    expect_exit 2 "$bin" "${run[@]}" --plan tiny.plan --checkpoint sqrt
    ;;
  ranks_fail)  # ranks that disagree, a rank stuck, a rank killed: an error on the others, never a hang
    [ -n "${MG_MPIEXEC:-}" ] || { echo "SKIPPED: memgrad was built without MPI"; exit 77; }
    run=("$bin" train "${small[@]}" --steps 2)
    expect_exit 2 env OMP_NUM_THREADS=1 "$MG_MPIEXEC" --allow-run-as-root --oversubscribe -np 1 "${run[@]}" --zero 3 \
      : -np 1 "${run[@]}" --zero 2
    # (the first rank to abort ends the other, which may not have said it too)
    expect_output "memgrad \\(rank [01]\\): the ranks do not run the same configuration .*: rank 1 differs from rank 0"
    # Rank 1 stopped (SIGSTOP) or killed in the middle of the run; rank 0 waits in a collective. (The
    # timeout is 8 s: with 2 s, a rank slowed by a loaded machine made the other time out first.)
    for signal in STOP KILL; do
      env OMP_NUM_THREADS=1 MG_COLLECTIVE_TIMEOUT=8 timeout 120 "$MG_MPIEXEC" --allow-run-as-root --oversubscribe \
        -x MG_COLLECTIVE_TIMEOUT -np 2 "$bin" train "${small[@]}" --steps 1000000 --zero 3 --save state.safetensors \
        >out.txt 2>&1 &
      launcher=$!
      target=
      for _ in $(seq 100); do  # rank 1, once both ranks train
        sleep 0.2
        grep -q "data parallel" out.txt || continue
        for p in $(pgrep -P "$(pgrep -P $launcher)"); do  # timeout's child mpirun's children: the ranks
          tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && target=$p
        done
        [ -n "$target" ] && break
      done
      [ -n "$target" ] || fail "rank 1 never started"
      sleep 1
      kill -$signal "$target"
      wait $launcher
      got=$?
      cat out.txt
      [ $got -ne 0 ] && [ $got -ne 124 ] || fail "SIG$signal on rank 1: the run exited $got (124: it hung)"
      [ "$signal" = STOP ] && expect_output "memgrad \\(rank 0\\): (an )?MPI .* \\(rank 0 of 2\\) did not complete within 8 s"
      [ "$signal" = KILL ] && expect_output "rank 1 .*exited on signal 9"
      ls state.safetensors* 2>/dev/null && fail "a state file was written"
    done
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "PASS: $case_name"
