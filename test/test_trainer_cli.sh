#!/usr/bin/env bash
# Bad input to the trainer: every case exits non-zero with ONE line on stderr that names the
# culprit (file or option), never a crash. Also --help lists every option the parser knows.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch trainer_cli
$PYTHON test/zero_check.py shard $d/train.bin 5000 512 1
small="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2 --steps 1
       --val-every 0 --sample-every 0 --train-data $d/train.bin"
# a good checkpoint to corrupt
./train_gpt_cpu $small --out $d/ok >/dev/null 2>&1 || { echo "could not make a checkpoint"; exit 1; }
good=$d/ok/model_00000001.bin
head -c 1000 $good > $d/short_header.bin
head -c 5000 $good > $d/truncated.bin
$PYTHON - "$good" "$d" <<'PY'
import sys, struct
good, d = sys.argv[1], sys.argv[2]
b = bytearray(open(good, "rb").read())
def put(name, idx, val):
    c = bytearray(b); c[4*idx:4*idx+4] = struct.pack("<i", val); open(f"{d}/{name}.bin", "wb").write(c)
put("bad_magic", 0, 12345); put("bad_version", 1, 7); put("bad_heads", 5, 5); put("bad_vocab", 7, 100)
PY
fails=0
# expect NAME PATTERN ARGS...: non-zero exit, one stderr line matching PATTERN, no sanitizer/signal
expect() {
  local name=$1 pattern=$2; shift 2
  ./train_gpt_cpu "$@" > $d/$name.out 2> $d/$name.err; local rc=$?
  local lines=$(grep -c . $d/$name.err)
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && grep -Eq -- "$pattern" $d/$name.err; then
    echo "ok   $name: $(cat $d/$name.err)"
  else
    echo "FAIL $name: rc=$rc lines=$lines"; cat $d/$name.err; fails=$((fails+1))
  fi
}
expect missing_ckpt   "nope.bin: cannot open"                     --init $d/nope.bin --train-data $d/train.bin
expect short_header   "short_header.bin: too short"               --init $d/short_header.bin
expect truncated      "truncated.bin: file has 5000 bytes"        --init $d/truncated.bin
expect bad_magic      "bad_magic.bin: bad magic 12345"            --init $d/bad_magic.bin
expect bad_version    "bad_version.bin: unsupported version 7"    --init $d/bad_version.bin
expect bad_heads      "bad_heads.bin: bad model shape.*multiple of heads" --init $d/bad_heads.bin
expect bad_vocab      "bad_vocab.bin: bad model shape.*padded_vocab_size" --init $d/bad_vocab.bin
expect heads_channels "channels must be a multiple of heads"      $small --heads 5
expect seq_len        "--seq-len 32 exceeds the model's max_seq_len 16" $small --seq-len 32
expect total_batch    "--total-batch 100 is not a multiple"       $small --total-batch 100
expect two_models     "give only one of them"                     --model d12 --layers 2
expect unknown_model  "--model: unknown model 'd7'"               --model d7
expect unknown_opt    "--frobnicate: unknown option"              --frobnicate 3
expect bad_number     "--batch: 'four' is not a whole number"     --batch four
expect bad_float      "--lr: '1e-3x' is not a number"             --lr 1e-3x
expect bad_schedule   "--lr-schedule: 'step' is not"              --lr-schedule step
expect bad_stage      "--zero-stage: '4' is not a whole number in \[0, 3\]" --zero-stage 4
expect no_data        "nothing.bin"                               $small --train-data $d/nothing.bin
expect save_no_out    "--save-every needs --out"                  $small --save-every 5
expect stray_arg      "stray: unexpected argument"                $small stray
expect bad_recompute  "--recompute: 'most' is not none, full or selective" $small --recompute most
expect every_no_full  "--recompute-every 2 needs --recompute full" $small --recompute selective --recompute-every 2
expect every_too_big  "--recompute-every 3 exceeds the model's 2 layers" $small --recompute full --recompute-every 3
expect cpu_ck_no_full "--cpu-checkpointing .* needs --recompute full" $small --cpu-checkpointing
echo '{"activation_checkpointing": {"number_checkpoints": 1}}' > $d/ac.json
expect ds_checkpoints "--recompute-every 1 conflicts with .*number_checkpoints 1" $small --deepspeed $d/ac.json --recompute-every 1
# a shard with a token outside the model's vocabulary: named, at training time
$PYTHON test/zero_check.py shard $d/big_vocab.bin 5000 1000 2
expect token_range    "big_vocab.bin.*token"                      $small --train-data $d/big_vocab.bin
# --help names every long option the parser accepts
./train_gpt_cpu --help > $d/help.txt || { echo "FAIL --help exit code"; fails=$((fails+1)); }
# (the option table's rows: `CO_KIND("name", ...` or `{"name", OT_...`)
opts=$(grep -oE '^\s+(CO_[A-Z]+\("[a-z0-9-]+"|\{"[a-z0-9-]+", OT_)' run/config.h | grep -oE '"[a-z0-9-]+"' | tr -d '"')
[ "$(echo "$opts" | wc -w)" -ge 50 ] || { echo "FAIL: found only $(echo "$opts" | wc -w) options in run/config.h"; fails=$((fails+1)); }
for opt in $opts; do
  grep -q -- "--$opt" $d/help.txt || { echo "FAIL --help does not mention --$opt"; fails=$((fails+1)); }
done
# mpirun binds each of one or two ranks to a core: the trainer says so when cores sit idle, and
# uses all of them when unbound
cores=$(nproc)
threads_of() { sed -n 's/^| threads per rank *| \([0-9]*\).*/\1/p' "$1"; }
if [ "$cores" -ge 2 ]; then
  # shellcheck disable=SC2086
  mpirun -np 1 ./train_gpt_cpu $small > $d/bound.out 2>&1
  # shellcheck disable=SC2086
  mpirun -np 1 --bind-to none ./train_gpt_cpu $small > $d/unbound.out 2>&1
  if ! grep -q "^note: mpirun bound each rank to 1 of this machine's $cores cores" $d/bound.out || [ "$(threads_of $d/bound.out)" != 1 ]; then
    echo "FAIL bound rank: no note, or not 1 thread"; head -3 $d/bound.out; fails=$((fails+1))
  fi
  if grep -q "^note: mpirun bound" $d/unbound.out || [ "$(threads_of $d/unbound.out)" != "$cores" ]; then
    echo "FAIL unbound rank: a note, or not $cores threads"; head -3 $d/unbound.out; fails=$((fails+1))
  fi
else
  echo "(one core: no binding note to check)"
fi
echo "$fails failures"
[ $fails -eq 0 ]
