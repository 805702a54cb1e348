#!/usr/bin/env bash
# `memgrad train --data`, one case per ctest entry:  test_data_cli.sh <memgrad binary> <case>
#   shard     an llm.c shard written here from known tokens trains, and its first batch is those tokens
#   learns    a folder of text: the loss falls and the held-out loss is reported
#   errors    bad files and flags: a message naming the flag and what was wrong, exit code 2
#   workers   --num-workers 0, 1, 3 and any --prefetch: the same losses to every digit; planned == measured
#   resume    stop, save, resume (with other workers): the losses of an uninterrupted run
#   data_parallel  mpirun -np 2 over --data: the losses of one process with --accum 2
set -uo pipefail
# shellcheck source=../cli/lib.sh
source "$(dirname "$0")/../cli/lib.sh"
small=(--model custom --n-layer 1 --n-head 2 --n-embd 32 --sample 0 --timeline '')

# write_shard FILE COUNT [MAGIC VERSION HEADER_COUNT]: llm.c's format, little-endian; token i is
# (7919 i + 13) mod 50257, spread over GPT-2's vocabulary
write_shard() {
  perl -e 'my ($n, $magic, $version, $said) = @ARGV;
           print pack("l<256", $magic, $version, $said, (0) x 253);
           print pack("S<", ($_ * 7919 + 13) % 50257) for 0 .. $n - 1;' "$2" "${3:-20240520}" "${4:-1}" "${5:-$2}" >"$1"
}
# write_text FOLDER: three files of simple sentences
write_text() {
  mkdir -p "$1/more"
  for i in $(seq 1 120); do echo "the cat $((i % 7)) sat on the mat and the dog ran to the hill $((i % 5))."; done >"$1/a.txt"
  for i in $(seq 1 120); do echo "a bird $((i % 3)) sang in the tree while the sun rose over the sea."; done >"$1/b.txt"
  for i in $(seq 1 60); do echo "the dog and the cat ran to the sea $((i % 4)) times."; done >"$1/more/c.txt"
}

case $case_name in
  shard)
    write_shard shard.bin 3000
    expect_exit 0 "$bin" train "${small[@]}" --data shard.bin --seq 8 --batch 3 --steps 2 --show-batch
    expect_output "vocab 50257"
    expect_output "data: shard.bin: 3000 llm.c GPT-2 tokens, vocabulary 50257; held out: its last 300 tokens"
    expect_output "^first batch: 3 examples"
    # Every row: the 8 tokens written at its window's position, and the 8 after them.
    awk -v seq=8 '
      function tok(i) { return (i * 7919 + 13) % 50257 }
      /^  example [0-9]+: tokens \[/ { split($0, f, /[][,)]/); start = f[2] + 0; rows++; next }
      /^    input: / { for (j = 2; j <= NF; j++) if ($j != tok(start + j - 2)) bad = 1; n += NF - 1; next }
      /^    target:/ { for (j = 2; j <= NF; j++) if ($j != tok(start + j - 1)) bad = 1; n += NF - 1; next }
      END { exit bad || rows != 3 || n != 2 * 3 * seq }' out.txt || fail "the first batch is not the tokens written"
    expect_output "held-out loss [0-9.]+ over [0-9]+ windows of 8 tokens \(the last 300 tokens of --data shard.bin\)"
    # A folder of shards is one stream; --vocab must cover the shard's.
    mkdir shards && write_shard shards/train_000.bin 500 && write_shard shards/train_001.bin 500
    expect_exit 0 "$bin" train "${small[@]}" --data 'shards/train_*.bin' --seq 8 --batch 2 --steps 1 --vocab 50304
    expect_output "shards/train_\*.bin \(2 files\): 1000 llm.c GPT-2 tokens"
    expect_output "vocab 50304"
    ;;
  learns)
    write_text corpus
    expect_exit 0 "$bin" train --data corpus --steps 40 --batch 8 --seq 32 --sample 40 --log loss.csv --timeline '' \
      --num-workers 2
    expect_output "data: corpus \(3 files\): [0-9]+ bytes of text, vocabulary 256"
    expect_output "held-out loss [0-9.]+ over [0-9]+ windows of 32 tokens \(the last [0-9]+ tokens of --data corpus\)"
    awk -F, 'NR == 2 { first = $2 } NR > 1 { l[NR] = $2 }
      END { s = 0; for (i = NR - 4; i <= NR; i++) s += l[i]; exit !(s / 5 < 0.6 * first) }' loss.csv ||
      fail "the loss did not fall below 0.6 of its first value"
    # --val-data: its own file
    echo "the cat sat on the mat and the dog ran to the hill over the sea." >val.txt
    expect_exit 0 "$bin" train "${small[@]}" --data corpus --val-data val.txt --seq 16 --batch 4 --steps 2
    expect_output "held out: val.txt: 65 bytes of text"
    expect_output "held-out loss [0-9.]+ over 4 windows of 16 tokens \(--val-data val.txt\)"
    ;;
  errors)
    write_shard good.bin 100
    write_shard magic.bin 100 12345
    write_shard version.bin 100 20240520 2
    write_shard truncated.bin 100 20240520 1 150
    perl -e 'print pack("l<256", 20240520, 1, 3, (0) x 253), pack("S<3", 5, 65535, 7)' >big_id.bin
    : >empty.txt
    printf 'short text' >short.txt
    bad() {  # bad FLAGS... -- MESSAGE
      local args=()
      while [ "$1" != -- ]; do args+=("$1"); shift; done
      expect_exit 2 "$bin" train "${small[@]}" --seq 8 --batch 2 --steps 1 "${args[@]}"
      expect_output "$2"
      grep -q "^step" out.txt && fail "trained before the error"
    }
    bad --data nope.txt -- "^memgrad: --data nope.txt: no such file or folder"
    bad --data empty.txt -- "--data empty.txt: empty, no tokens"
    bad --data magic.bin -- "--data magic.bin: bad magic number 12345 in the shard's header, expected 20240520"
    bad --data version.bin -- "of version 2, expected version 1"
    bad --data truncated.bin -- "its header says 150 tokens \(300 bytes after the 1024-byte header\), the file holds 200 \(truncated\)"
    bad --data big_id.bin -- "big_id.bin: token 1 is 65535, not below the vocabulary of 50257"
    bad --data short.txt --seq 64 -- "--seq 64 is too long for --data short.txt \(10 tokens\)"
    bad --seq 5000 -- "--seq 5000 is too long for the [0-9]+-byte corpus"
    bad --data good.bin --vocab 1000 -- "--vocab 1000: the GPT needs a vocabulary of at least 50257 to read good.bin"
    bad --data good.bin --batch 200 -- "--batch 200: the training part of --data good.bin \(100 tokens\) holds 82 windows"
    bad --data good.bin --val-data short.txt -- "--val-data short.txt: 10 bytes of text, vocabulary 256 is not of the kind"
    bad --model mlp --data good.bin -- "--data and --val-data feed the GPT"
    bad --pin-memory -- "--pin-memory page-locks host memory for copies to a GPU"
    bad --num-workers -1 -- "--num-workers"
    bad --prefetch 0 -- "--prefetch"
    expect_exit 2 "$bin" plan --pin-memory
    expect_output "--pin-memory page-locks host memory"
    ;;
  workers)
    write_text corpus
    run() { expect_exit 0 "$bin" train "${small[@]}" --data corpus --seq 16 --batch 4 --steps 6 --dropout 0.1 "$@"; }
    run --log w0.csv
    for w in "--num-workers 1" "--num-workers 3 --prefetch 1" "--num-workers 2 --prefetch 4 --accum 1"; do
      # shellcheck disable=SC2086
      run $w --log w.csv
      same_losses w0.csv w.csv 0
      [ "$(grep -c ': exact$' out.txt)" -eq 3 ] || fail "$w: planned != measured"
    done
    expect_output "host, in the cpu ledger \(Input, data.loader\) +8192 B"  # 2 workers x 4 batches x 2 x [4, 16] int64 (512 B each)
    expect_output "waited for batches .* read ahead by 2 workers"
    expect_exit 0 "$bin" train --model mlp --layers 2 --width 32 --batch 8 --steps 3 --timeline '' --log m0.csv
    expect_exit 0 "$bin" train --model mlp --layers 2 --width 32 --batch 8 --steps 3 --timeline '' --log m2.csv \
      --num-workers 2
    same_losses m0.csv m2.csv 0
    [ "$(grep -c ': exact$' out.txt)" -eq 3 ] || fail "mlp: planned != measured"
    # The plan counts the buffers; a --memory-limit of its reserved peak runs, one granule less does not.
    flags=(--model custom --n-layer 2 --n-head 2 --n-embd 32 --seq 32 --batch 4 --num-workers 3 --prefetch 2)
    expect_exit 0 "$bin" plan --no-compare "${flags[@]}"
    expect_output "^  host, in the cpu ledger \(Input, data.loader\) +12288 B"
    expect_output "^  pinned: page-locked host memory, outside every ledger +0 B"
    n=$(grep reserved out.txt | sed -E 's/.*\(([0-9]+) B\).*/\1/')
    expect_exit 0 "$bin" train "${flags[@]}" --steps 3 --timeline '' --sample 0 --memory-limit "$n"
    expect_output "reserved peak under this --memory-limit: .*: exact$"
    expect_exit 3 "$bin" train "${flags[@]}" --steps 3 --timeline '' --sample 0 --memory-limit $((n - 512))
    expect_exit 0 "$bin" plan --no-compare "${flags[@]}" --pin-memory --device cuda
    expect_output "^  pinned: page-locked host memory, outside every ledger +12288 B"
    expect_output "^  staging on cuda:0 for the side stream's copies \(Input, data.loader\) +4096 B"
    ;;
  resume)
    write_text corpus
    run() { expect_exit 0 "$bin" train "${small[@]}" --data corpus --seq 16 --batch 4 --dropout 0.1 "$@"; }
    run --steps 8 --log whole.csv
    run --steps 4 --save state.safetensors --num-workers 2
    run --steps 8 --resume state.safetensors --log resumed.csv
    expect_output "resumed at step 4"
    diff <(losses_from whole.csv 5) <(losses_from resumed.csv 5) || fail "resumed losses differ"
    [ "$(wc -l <resumed.csv)" -eq 5 ] || fail "expected the losses of steps 5-8"
    cp corpus/a.txt other.txt
    expect_exit 2 "$bin" train "${small[@]}" --data other.txt --seq 16 --batch 4 --dropout 0.1 --steps 8 \
      --resume state.safetensors
    expect_output "was saved by a run on other data"
    ;;
  data_parallel)
    [ -n "${MG_MPIEXEC:-}" ] || { echo "SKIPPED: memgrad was built without MPI"; exit 77; }
    write_text corpus
    expect_exit 0 "$bin" train "${small[@]}" --data corpus --seq 16 --batch 4 --steps 4 --accum 2 --log one.csv
    expect_exit 0 mpi2 "$bin" train "${small[@]}" --data corpus --seq 16 --batch 4 --steps 4 --zero 1 --num-workers 1 \
      --log two.csv
    same_losses two.csv one.csv 1e-6  # clipping sums the squares slice by slice
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "PASS: $case_name"
