#!/usr/bin/env bash
# The memgrad command against hostile input, round 3 (issue 40), one case per ctest entry:
#   test_hostile.sh <memgrad binary> <case>
#   paths        writes follow links and never replace a FIFO, a device or a folder; reads never block
#                on a FIFO; empty paths are usage errors; output paths are checked before any work
#   ranks        8-bit and Adafactor state saved and resumed at any world size and ZeRO stage they train
#                at (mpirun -np 1, 2, 3): 6 steps == 3 + save + resume 3, the gathered state exact
#   sizes        a size whose bytes no device can hold, or int64 count, is a usage error naming its flags
#   address      expandable segments under ulimit -v and under --memory-limit
#   non_finite   a NaN in a state file is refused naming the tensor; a diverging run stops at the step
#   environment  every MG_* variable checked the same way, in one short line; range errors stay short
set -uo pipefail
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
small=(--n-layer 2 --n-head 2 --n-embd 32 --seq 16 --batch 4 --sample 0 --timeline '')
# no_training: the command stopped before its first step.
no_training() { grep -q "^step" out.txt && fail "trained before the error"; return 0; }
# tensor_op FILE PYTHON: runs PYTHON with `tensors` (name -> [dtype, shape, offset, bytes]), `data`
# (the file's bytes after the header) and `raw` (the whole file) from a safetensors FILE.
tensor_op() {
  python3 - "$1" "$2" <<'EOF'
import json, struct, sys
raw = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
tensors = {k: v for k, v in header.items() if k != '__metadata__'}
base = 8 + n
exec(sys.argv[2])
EOF
}

case $case_name in
  paths)
    mkfifo fifo
    mkdir folder other
    # A symbolic link is followed: the file at its end replaced whole, the link kept, the temporary file
    # beside the target (in its own folder), none left.
    ln -s other/state.safetensors link
    expect_exit 0 "$bin" train "${small[@]}" --steps 2 --save link
    [ -L link ] && [ -f other/state.safetensors ] || fail "--save through a link: the link was replaced"
    [ "$(ls -A other)" = state.safetensors ] || fail "a temporary file was left: $(ls -A other)"
    expect_exit 0 "$bin" train "${small[@]}" --steps 3 --resume link --save link --log link.csv
    expect_output "resumed at step 2"
    [ -L link ] || fail "the second save replaced the link"
    ln -s link.csv log_link
    expect_exit 0 "$bin" train "${small[@]}" --steps 1 --log log_link --snapshot snap_link
    [ -L log_link ] && [ "$(wc -l <link.csv)" -eq 2 ] || fail "--log through a link"
    # Anything that is not a regular file (or a link to one) is refused before training, and stays.
    ln -s fifo to_fifo
    ln -s loop_b loop_a && ln -s loop_a loop_b
    for target in fifo to_fifo /dev/null folder loop_a; do
      for flag in --save --log --snapshot --timeline; do
        expect_exit 2 timeout 60 "$bin" train "${small[@]}" --steps 1 "$flag" "$target"
        expect_output "^memgrad: $flag '$target'"
        no_training
      done
      expect_exit 2 timeout 60 "$bin" plan --model mlp --layers 2 --width 64 --batch 8 --pareto "$target"
      expect_output "^memgrad: --pareto '$target'"
      grep -q "cost model" out.txt && fail "--pareto $target was checked after the work"
    done
    [ -p fifo ] || fail "the FIFO was replaced"
    # Reading: a FIFO (alone, through a link, inside a --data folder) is refused at once, never waited on.
    expect_exit 0 "$bin" train "${small[@]}" --steps 1 --snapshot good.json
    printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 40) >folder/a.txt
    for flags in "--data fifo" "--data to_fifo" "--val-data fifo" "--data folder --val-data to_fifo" \
      "--resume fifo" "--resume /dev/null"; do
      # shellcheck disable=SC2086
      expect_exit 2 timeout 20 "$bin" train "${small[@]}" --steps 1 $flags
      expect_output "FIFO|character device"
    done
    for args in "fifo" "good.json to_fifo"; do
      # shellcheck disable=SC2086
      expect_exit 2 timeout 20 "$bin" view $args
      expect_output "is a FIFO"
    done
    mkfifo folder/b.txt
    expect_exit 2 timeout 20 "$bin" train "${small[@]}" --steps 1 --data folder
    expect_output "^memgrad: --data folder/b.txt: is a FIFO"
    rm folder/b.txt
    ln -s loop folder/loop
    expect_exit 2 timeout 20 "$bin" train "${small[@]}" --steps 1 --data folder
    expect_output "^memgrad: --data folder/loop: a loop of symbolic links"
    rm folder/loop
    # Empty paths are usage errors ('' used to mean the sonnets, or nothing saved).
    for flag in --data --val-data --save --log --snapshot --resume; do
      expect_exit 2 "$bin" train "${small[@]}" --steps 1 "$flag" ''
      expect_output "expected .*, got an empty value"
      no_training
    done
    expect_exit 2 "$bin" view ''
    expect_exit 2 "$bin" view good.json -o ''
    expect_output "got an empty value"
    expect_exit 2 "$bin" plan --pareto ''
    # --timeline '' still means no page.
    expect_exit 0 "$bin" train "${small[@]}" --steps 1 --timeline ''
    # Outputs apart from each other and from the inputs: --log over a --data file truncated the mapped
    # data (SIGBUS); two outputs that are one file lost one of them.
    expect_exit 2 "$bin" train "${small[@]}" --steps 1 --data folder/a.txt --log folder/a.txt
    expect_output "^memgrad: --log folder/a.txt is --data folder/a.txt, a file this run reads"
    [ "$(wc -c <folder/a.txt)" -gt 1000 ] || fail "the data file was truncated"
    expect_exit 2 "$bin" train "${small[@]}" --steps 1 --timeline t.html --snapshot link.csv --log log_link
    expect_output "are one file"
    # A name with no room for its temporary file's suffix is refused before training, not after it.
    expect_exit 2 "$bin" train "${small[@]}" --steps 1 --save "$(printf 'x%.0s' $(seq 250))"
    expect_output "leaves no room for its temporary file"
    no_training
    # A pattern that matches a FIFO, and view -o FIFO: refused, not waited on.
    mkfifo folder/c.txt
    expect_exit 2 timeout 20 "$bin" train "${small[@]}" --steps 1 --data 'folder/*.txt'
    expect_output "folder/c.txt: is a FIFO"
    expect_exit 2 timeout 20 "$bin" view good.json -o folder/c.txt
    [ -p folder/c.txt ] || fail "view -o replaced the FIFO"
    # Round 4 (tests/cli/hostile_rounds.md). train --plan FILE is read as every input is: a FIFO, a device
    # or a folder refused at once (a FIFO was waited on for ever, /dev/zero read for ever); '' is a usage
    # error (it trained with no plan).
    plan_run=("$bin" train --model mlp --layers 2 --width 64 --batch 8 --seq 1024 --timeline '' --steps 1
      --budget 200KiB)
    expect_exit 0 "$bin" plan --model mlp --layers 2 --width 64 --batch 8 --no-compare --plan mixed --budget 200KiB \
      --save-plan p.plan
    for target in fifo /dev/zero folder ''; do
      expect_exit 2 timeout 20 "${plan_run[@]}" --plan "$target"
      expect_output "^--plan: expected mixed or a file name, got an empty value|^memgrad: --plan '$target': is"
      no_training
    done
    # ... and it is an input: --log or --save over it replaced the plan the run carried out.
    for flag in --log --save; do
      expect_exit 2 "${plan_run[@]}" --plan p.plan "$flag" p.plan
      expect_output "^memgrad: $flag p.plan is --plan p.plan, a file this run reads"
    done
    head -1 p.plan | grep -q "^memgrad plan" || fail "the plan was replaced"
    expect_exit 0 "${plan_run[@]}" --plan p.plan
    # view's page is never one of its snapshots (snap.html's page was snap.html by default, and replaced it).
    cp good.json snap.html
    expect_exit 2 "$bin" view snap.html
    expect_output "^memgrad: --out snap.html is the snapshot snap.html"
    expect_exit 2 "$bin" view good.json snap.html -o ./good.json
    expect_output "is the snapshot good.json"
    [ "$(head -c 1 snap.html)$(head -c 1 good.json)" = "{{" ] || fail "view replaced a snapshot"
    # A write that fails (a file size limit here; a full disk alike) fails the command: --log and --save-plan
    # left an empty file and exit 0.
    limited_files() { bash -c 'trap "" XFSZ; ulimit -f 0; exec "$@"' _ "$@" 2>&1 | cat; return "${PIPESTATUS[0]}"; }
    expect_exit 1 limited_files "$bin" train "${small[@]}" --steps 2 --log full.csv
    expect_output "^memgrad: --log 'full.csv': writing failed: File too large"
    expect_exit 1 limited_files "$bin" plan --model mlp --layers 2 --width 64 --batch 8 --no-compare --plan mixed \
      --budget 200KiB --save-plan full.plan
    expect_output "^memgrad: --save-plan 'full.plan.tmp.[0-9]+': writing failed: File too large"
    [ -e full.plan ] && fail "--save-plan left a file"
    # memgrad plan: --save-plan without --plan mixed was ignored (exit 0, no file); over --pareto's page one
    # of the two was lost.
    expect_exit 2 "$bin" plan --model mlp --layers 2 --width 64 --no-compare --save-plan alone.plan
    expect_output "^memgrad: --save-plan writes the plan of --plan mixed"
    expect_exit 2 "$bin" plan --model mlp --layers 2 --width 64 --no-compare --plan mixed --budget 200KiB \
      --save-plan both.html --pareto ./both.html
    expect_output "are one file"
    grep -q "cost model" out.txt && fail "--pareto and --save-plan were checked after the work"
    # A folder that refuses new files though access() allows them (sysfs, to root) stops the run before it
    # trains (it failed after the run, at the save).
    if [ -d /sys/kernel ]; then
      for flag in --save --log; do
        expect_exit 2 "$bin" train "${small[@]}" --steps 1 "$flag" /sys/kernel/memgrad.out
        no_training
      done
    fi
    ;;
  ranks)
    [ -n "${MG_MPIEXEC:-}" ] || { echo "SKIPPED: memgrad was built without MPI"; exit 77; }
    mpi() { local n=$1; shift; OMP_NUM_THREADS=1 "$MG_MPIEXEC" -np "$n" --allow-run-as-root --oversubscribe "$@"; }
    # The embedding [256, 32] is 8192 elements: 8-bit state, whose blocks 3 ranks' slices of 2731 would cut.
    run=("$bin" train "${small[@]}" --dropout 0.1 --clip 0)
    # 6 steps == 3 + save + resume 3, at the same world size and stage: every digit (OPT:ZERO:RANKS).
    for config in adamw8bit:0:1 adamw8bit:0:3 adamw8bit:1:2 adamw8bit:2:3 adafactor:0:1 adafactor:0:2; do
      IFS=: read -r opt zero n <<<"$config"
      flags=(--optimizer "$opt" --accum $((6 / n)) --zero "$zero")
      expect_exit 0 mpi "$n" "${run[@]}" "${flags[@]}" --steps 6 --log whole.csv
      expect_exit 0 mpi "$n" "${run[@]}" "${flags[@]}" --steps 3 --save "s$n-$opt.st"
      expect_exit 0 mpi "$n" "${run[@]}" "${flags[@]}" --steps 6 --resume "s$n-$opt.st" --log resumed.csv
      same_losses resumed.csv whole.csv 0 4
      cp whole.csv "whole-$opt.csv"
    done
    # The state 2 ranks gather (one micro-batch each: the same sums) is one process's, bit for bit.
    expect_exit 0 "${run[@]}" --optimizer adamw8bit --accum 2 --steps 3 --save one.st
    tensor_op one.st "ref = {k: raw[base + v['data_offsets'][0]:base + v['data_offsets'][1]] for k, v in tensors.items()}
import pickle; pickle.dump(ref, open('ref.pkl', 'wb'))"
    for zero in 1 2; do
      expect_exit 0 mpi 2 "${run[@]}" --optimizer adamw8bit --zero $zero --steps 3 --save two.st
      tensor_op two.st "import pickle; ref = pickle.load(open('ref.pkl', 'rb'))
mine = {k: raw[base + v['data_offsets'][0]:base + v['data_offsets'][1]] for k, v in tensors.items()}
bad = [k for k in ref if mine.get(k) != ref[k]] + [k for k in mine if k not in ref]
sys.exit('differ: %s' % bad[:5] if bad else 0)" || fail "--zero $zero: the state of 2 ranks is not one process's"
    done
    # Resumed at another world size and stage: one process's state on 3 ranks (ZeRO-2; Adafactor: 0),
    # continuing 3 ranks' losses (whole-*.csv: the last run of each optimizer above, on 3 or 2 ranks).
    expect_exit 0 mpi 3 "${run[@]}" --optimizer adamw8bit --accum 2 --zero 2 --steps 6 --resume s1-adamw8bit.st \
      --log across.csv
    same_losses across.csv whole-adamw8bit.csv 1e-5 4
    expect_exit 0 mpi 2 "${run[@]}" --optimizer adafactor --accum 3 --steps 6 --resume s1-adafactor.st --log across.csv
    same_losses across.csv whole-adafactor.csv 1e-5 4
    # Half parameters: the float32 masters are saved by name whoever stepped them, and resumed anywhere
    # (a state saved by ranks was refused by one process; one process's lost its masters on ranks).
    half=(--precision bf16-storage)
    expect_exit 0 "${run[@]}" "${half[@]}" --accum 2 --steps 4 --log half.csv
    expect_exit 0 mpi 2 "${run[@]}" "${half[@]}" --zero 2 --steps 2 --save h2.st
    expect_exit 0 "${run[@]}" "${half[@]}" --accum 2 --steps 4 --resume h2.st --log from2.csv
    same_losses from2.csv half.csv 0 3
    expect_exit 0 "${run[@]}" "${half[@]}" --accum 2 --steps 2 --save h1.st
    expect_exit 0 mpi 2 "${run[@]}" "${half[@]}" --zero 1 --steps 4 --resume h1.st --log from1.csv
    same_losses from1.csv half.csv 1e-6 3
    # What does not train is refused when the run starts, with the reason, resumed or not.
    for flags in "adafactor --zero 1" "adafactor --zero 2" "adamw8bit --zero 3" "adafactor --zero 3"; do
      # shellcheck disable=SC2086
      expect_exit 2 mpi 2 "${run[@]}" --optimizer $flags --accum 3 --steps 6 --resume s1-${flags%% *}.st
      expect_output "does not run under --zero"
      no_training
    done
    # Ranks that differ in what decides their collectives stop at once, whatever the flag (round 4): --save
    # on one rank hung the other in the gather, another --bucket-cap crashed both, another --data trained.
    printf 'the quick brown fox jumps over the lazy dog. %.0s' $(seq 40) >text.txt
    for flags in "--save odd.st" "--bucket-cap 1b" "--data text.txt" "--checkpoint every-1" "--sample 5"; do
      # shellcheck disable=SC2086
      expect_exit 2 timeout 120 "$MG_MPIEXEC" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 \
        -np 1 "${run[@]}" --steps 2 : -np 1 "${run[@]}" --steps 2 $flags
      expect_output "the ranks do not run the same configuration"
      no_training
    done
    # Only rank 0 writes: the names of its files may differ.
    expect_exit 0 timeout 120 "$MG_MPIEXEC" --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 \
      -np 1 "${run[@]}" --steps 2 --save a.st : -np 1 "${run[@]}" --steps 2 --save b.st
    [ -f a.st ] || fail "rank 0 saved nothing"
    ;;
  sizes)
    # Each size alone: no device holds one tensor of it (more than 2^57 B), or no int64 counts it.
    for flags in "--batch 1000000000:--batch 1000000000 x --seq 1024 x --vocab 50257" \
      "--model custom --seq 4611686018427387904:--seq 4611686018427387904" \
      "--model custom --n-embd 4294967296 --n-head 1:--n-embd 4294967296" \
      "--vocab 4611686018427387904:--vocab 4611686018427387904" \
      "--model custom --n-layer 4611686018427387904:--n-layer 4611686018427387904" \
      "--model mlp --width 4294967296:--width 4294967296" \
      "--model mlp --layers 4611686018427387904 --width 2048:--layers 4611686018427387904" \
      "--batch 4194304 --accum 4611686018427387904:--accum 4611686018427387904" \
      "--batch 1099511627776 --world-size 1048576:1048576 \\(processes\\)"; do
      # shellcheck disable=SC2086
      expect_exit 2 timeout 60 "$bin" plan ${flags%%:*} --no-compare
      expect_output "${flags#*:}"
      expect_output "is more than"
      grep -q "allocated peak" out.txt && fail "${flags%%:*}: planned anyway"
    done
    expect_exit 2 timeout 60 "$bin" train "${small[@]}" --steps 1 --accum 4611686018427387904
    expect_output "tokens per step: --batch 4 x --seq 16 x --accum 4611686018427387904"
    # The largest world size plans in a moment (its last rank holds no piece of a block), as one of 8 does:
    # every rank's peaks, by class, its last rank in the table's last line ("ranks a-1048575").
    expect_exit 0 timeout 60 "$bin" plan --world-size 1048576 --zero 3 --no-compare
    expect_output "^every rank's planned peaks .*: 1048576 ranks in [0-9]+ classes"
    expect_output "^  ranks? (.*[ -])?1048575: [0-9.]+ GiB .*, reserved "
    grep -q "peak  *0 B" out.txt && fail "a peak of 0 B"
    # Sizes that fit one by one but not together: an error, not a plan of 0 bytes.
    expect_exit 3 timeout 120 "$bin" plan --model mlp --layers 100 --width 134217728 --batch 1 --no-compare
    expect_output "no device can run this step"
    grep -q "peak" out.txt && fail "a plan was printed"
    ;;
  address)
    # A ulimit far below the machine's memory: expandable segments reserve smaller ranges (they reserved
    # 1.125 x the machine's memory per pool, and the first parameter ran out of memory).
    limited() { bash -c "ulimit -v 2000000 && exec $(printf '%q ' "$@")"; }
    expect_exit 0 "$bin" train "${small[@]}" --steps 2 --expandable-segments --log free.csv
    expect_exit 0 limited "$bin" train "${small[@]}" --steps 2 --expandable-segments --log limited.csv
    same_losses limited.csv free.csv 0
    expect_exit 0 limited "$bin" train "${small[@]}" --steps 2 --expandable-segments --memory-limit 64MiB
    # A refusal of address space says so, and how much.
    expect_exit 3 limited "$bin" train --model mlp --width 24000 --layers 2 --batch 8 --steps 1 --timeline '' \
      --expandable-segments
    expect_output "the system refused [0-9.]+ [MG]iB of address space for a new expandable segment"
    ;;
  non_finite)
    expect_exit 0 "$bin" train "${small[@]}" --steps 3 --save state.safetensors
    # one NaN (float32) into a weight, an inf into the optimizer's state: each refused, named
    for edit in "model.wte.weight:nan:7" "optim.state.0.exp_avg_sq:inf:0"; do
      IFS=: read -r name value at <<<"$edit"
      cp state.safetensors bad.safetensors
      tensor_op bad.safetensors "o = base + tensors['$name']['data_offsets'][0] + 4 * $at
raw[o:o + 4] = struct.pack('<f', float('$value')); open(sys.argv[1], 'wb').write(raw)"
      expect_exit 2 "$bin" train "${small[@]}" --steps 6 --resume bad.safetensors
      expect_output "^memgrad: --resume bad.safetensors: '$name' holds $value at element $at of [0-9]+"
      no_training
    done
    # A run that diverges stops at the step whose loss is not finite (exit 1), and saves nothing.
    expect_exit 1 "$bin" train "${small[@]}" --steps 20 --optimizer sgd --lr 1e30 --clip 0 --save never.safetensors
    expect_output "^memgrad: step [0-9]+: the loss is (nan|inf): training diverged"
    [ -e never.safetensors ] && fail "a diverged state was saved"
    # fp16's loss scaler skips steps with inf/NaN gradients: those do not stop the run; a loss that stays
    # NaN through the skips does (the parameters blew up in the one step taken before).
    expect_exit 0 "$bin" train "${small[@]}" --steps 3 --precision fp16
    expect_exit 1 "$bin" train "${small[@]}" --steps 30 --precision fp16 --optimizer sgd --lr 1e30 --clip 0 --warmup 0
    expect_output "^memgrad: step 9: the loss is nan \(8 steps in a row\)"
    ;;
  environment)
    long=$(head -c 100000 /dev/zero | tr '\0' x)
    for var in "MG_COLLECTIVE_TIMEOUT=abc|expected seconds" "MG_COLLECTIVE_TIMEOUT=-5|expected seconds" \
      "MG_KERNEL_VARIANTS=garbage|not device:op=variant" "MG_KERNEL_VARIANTS=cpu:matmul=fast|has no variant 'fast'" \
      "MG_KERNEL_VARIANTS=cpu:nosuch=x|has no kernel 'nosuch'" "MG_CPU_ISA=bogus|expected baseline, avx2 or avx512" \
      "MG_MEMORY_LIMIT=lots|expected a byte count" "MG_ALLOC_CONF=garbage|unknown key" \
      "MG_ALLOC_CONF=$long|unknown key"; do
      expect_exit 2 env "${var%%|*}" "$bin" train "${small[@]}" --steps 1
      expect_output "^memgrad: ${var%%=*}=.{1,80}: .*${var#*|}"
      no_training
      [ "$(wc -c <out.txt)" -lt 600 ] || fail "${var%%=*}: a message of $(wc -c <out.txt) bytes"
      expect_exit 2 env "${var%%|*}" "$bin" plan --no-compare
    done
    expect_exit 0 env MG_KERNEL_VARIANTS=cpu:matmul=eigen MG_COLLECTIVE_TIMEOUT=30 "$bin" train "${small[@]}" --steps 1
    # Range errors print their bounds readably (CLI11 printed DBL_MAX with 309 digits).
    for flags in "train --bucket-cap 0" "plan --rank -1" "plan --world-size 0" "plan --zero 9" "train --bucket-cap -3"; do
      # shellcheck disable=SC2086
      expect_exit 2 "$bin" $flags
      grep -qE '[0-9]{20}' out.txt && fail "$flags: a number of 20 digits or more in the message"
    done
    expect_exit 2 "$bin" train --bucket-cap 0
    expect_output "expected a byte count > 0, got 0"
    # Round 4: 0 bytes is refused by every size flag however written (--memory-limit 0 and --budget 0
    # meant none; --bucket-cap 00 passed).
    for flags in "train --memory-limit 0" "train --memory-limit 0MiB" "plan --budget 0 --checkpoint auto" \
      "train --bucket-cap 00"; do
      # shellcheck disable=SC2086
      expect_exit 2 "$bin" $flags
      expect_output "expected a byte count > 0, got 0"
    done
    # Numbers in decimal notation only, as the integer flags take them (round 4: strtod read 0x10 as 16 and
    # skipped leading spaces, for --lr, --clip, --dropout, --momentum and MG_COLLECTIVE_TIMEOUT).
    for flags in "--lr 0x10" "--lr  0.1" "--clip 0x1p-2" "--dropout 0x0"; do
      expect_exit 2 "$bin" train "${small[@]}" --steps 1 "${flags%% *}" "${flags#* }"
      expect_output "expected a finite number"
      no_training
    done
    expect_exit 2 env MG_COLLECTIVE_TIMEOUT=0x10 "$bin" train "${small[@]}" --steps 1
    expect_output "^memgrad: MG_COLLECTIVE_TIMEOUT=0x10: expected seconds"
    expect_exit 0 "$bin" train "${small[@]}" --steps 1 --lr 3e-3 --clip .5 --dropout 0.1
    # An empty variable is no variable, for each of them (MG_MEMORY_LIMIT= failed with exit 1 at the first
    # allocation).
    for var in MG_MEMORY_LIMIT MG_ALLOC_CONF MG_CPU_ISA MG_KERNEL_VARIANTS MG_COLLECTIVE_TIMEOUT; do
      expect_exit 0 env "$var=" "$bin" train "${small[@]}" --steps 1
    done
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "PASS: $case_name"
