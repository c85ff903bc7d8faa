#!/usr/bin/env bash
# Sharded checkpoints: exact resume (bitwise losses), resharding to other world sizes and
# stages, export to an llm.c model file, crash safety under kill -9, and damaged checkpoints
# refused with one line while nothing on disk changes.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch checkpoint
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
base="--train-data $d/train.bin --seq-len 16 --batch 2 --total-batch 128 --steps 8 --val-every 0 --sample-every 0
      --lr 2e-3 --warmup 2 --seed 5"
model="--layers 3 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
run() { local n=$1; shift; OMP_NUM_THREADS=1 mpirun -np $n --oversubscribe ./train_gpt_cpu "$@"; }
losses() { grep '"loss"' $1 | grep -o '"step":[0-9]*,"loss":[^,]*' | awk -F'[:,]' -v from=$2 '$2 >= from {print $4}'; }
fail() { echo "FAIL: $*"; exit 1; }

echo "--- exact resume: the resumed steps' losses equal the uninterrupted run's, bit for bit"
for cfg in "2 0" "2 3" "1 1"; do
  set -- $cfg; n=$1; s=$2
  rm -rf $d/ck
  run $n $base $model --zero-stage $s --out $d/ck --save-every 4 --log $d/a.jsonl > $d/a.out 2>&1 || { cat $d/a.out; fail "run A"; }
  run $n $base --zero-stage $s --resume $d/ck/step_00000004 --log $d/b.jsonl > $d/b.out 2>&1 || { cat $d/b.out; fail "run B"; }
  a=$(losses $d/a.jsonl 5 | tr '\n' ' '); b=$(losses $d/b.jsonl 5 | tr '\n' ' ')
  echo "N=$n ZeRO-$s steps 5-8: uninterrupted $a | resumed $b"
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "N=$n S=$s not bitwise identical"
done
cp -r $d/ck $d/ck_n1s1   # saved by 1 rank at stage 1: resharded below

echo "--- resharding: other world sizes and stages continue the same trajectory"
rm -rf $d/ck; run 2 $base $model --zero-stage 3 --out $d/ck --save-every 4 --log $d/a.jsonl > $d/a.out 2>&1 || fail "run A"
ref=$(losses $d/a.jsonl 5)
for cfg in "1 0" "4 2" "4 3"; do
  set -- $cfg; n=$1; s=$2
  run $n $base --zero-stage $s --resume $d/ck/step_00000004 --log $d/r.jsonl > $d/r.out 2>&1 || { cat $d/r.out; fail "reshard to N=$n S=$s"; }
  worst=$(paste <(echo "$ref") <(losses $d/r.jsonl 5) | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%.2e", m}')
  echo "saved by 2 ranks at ZeRO-3, resumed on $n ranks at ZeRO-$s: worst |loss difference| $worst"
  awk -v w=$worst 'BEGIN {exit !(w < 2e-5)}' || fail "resharded trajectory differs by $worst"
  [ $(losses $d/r.jsonl 5 | wc -l) -eq 4 ] || fail "resharded run did not do steps 5-8"
done

echo "--- export: the consolidated llm.c file equals the one the trainer wrote at that step"
./train_gpt_cpu --export $d/ck $d/exported.bin > /dev/null || fail "export"
cmp $d/exported.bin $d/ck/model_00000008.bin || fail "export differs from model_00000008.bin"
./train_gpt_cpu --export $d/ck_n1s1/step_00000004 $d/exported4.bin > /dev/null || fail "export of a step dir"
cmp $d/exported4.bin $d/ck_n1s1/model_00000004.bin || fail "export of step 4 differs"
echo "exported files are byte-identical"
./train_gpt_cpu --export $d/ck $d/exported_bf16.bin --bf16 > /dev/null || fail "bf16 export"
$PYTHON - $d/exported.bin $d/exported_bf16.bin <<'PY' || fail "bf16 export is not the fp32 model rounded to nearest-even"
import sys, numpy as np
f32 = np.fromfile(sys.argv[1], dtype="<u4")
b16 = np.fromfile(sys.argv[2], dtype="<u2")
h32, h16 = f32[:256].view("<i4"), b16[:512].view("<i4")
assert h32[0] == h16[0] == 20240326 and h32[1] == 3 and h16[1] == 5 and (h32[2:8] == h16[2:8]).all()
x = f32[256:].astype(np.uint64)
want = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest, ties to even (no NaNs here)
assert (b16[512:] == want).all(), "bf16 values differ"
print(f"bf16 export: {want.size} values, each the fp32 value rounded to nearest-even")
PY
# the bf16 model file loads (--init) and gives nearly the fp32 model's loss on the same batch
for f in exported exported_bf16; do
  ./train_gpt_cpu --init $d/$f.bin --train-data $d/train.bin --seq-len 16 --batch 2 --steps 1 --val-every 0 \
    --sample-every 0 --no-shuffle --log $d/$f.jsonl > /dev/null || fail "--init $f.bin"
done
l32=$(losses $d/exported.jsonl 1); l16=$(losses $d/exported_bf16.jsonl 1)
echo "loss of the fp32 file $l32, of the bf16 file $l16"
awk -v a=$l32 -v b=$l16 'BEGIN {d=a-b; if (d<0) d=-d; exit !(d < 0.02 && d > 0)}' || fail "bf16 model loss too far from fp32"

echo "--- crash safety: kill -9 at random moments while saving every step"
rm -rf $d/crash
from="--layers 4 --channels 128 --heads 4 --vocab-size 512 --max-seq-len 16"  # then: --resume $d/crash
for i in 1 2 3 4 5 6; do
  run 2 $base $from --steps 1000 --zero-stage 2 --out $d/crash --save-every 1 > $d/crash.out 2>&1 &
  job=$!
  sleep $(awk -v s=$RANDOM 'BEGIN {printf "%.2f", 1.5 + (s % 150) / 100}')
  pkill -9 -f "train_gpt_cpu .*--out $d/crash" ; wait $job 2>/dev/null
  [ -f $d/crash/latest ] || { [ $i -eq 1 ] && continue; fail "no latest after kill $i"; }
  from="--resume $d/crash"
  # the checkpoint `latest` names must be complete: one more step from it succeeds
  run 1 $base --steps $(( $(sed 's/step_0*//' $d/crash/latest) + 1 )) $from > $d/check.out 2>&1 \
    || { cat $d/check.out; fail "latest after kill $i ($(cat $d/crash/latest)) does not load"; }
  echo "kill $i: latest = $(cat $d/crash/latest), loads"
done

echo "--- damaged checkpoints: one line naming the file, exit 1, nothing on disk changed"
c=$d/ck/step_00000008
before=$(find $d/ck -type f -exec md5sum {} + | sort)
expect() {
  local name=$1 pattern=$2; shift 2
  ./train_gpt_cpu $base "$@" > $d/$name.out 2> $d/$name.err; rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ $(grep -c . $d/$name.err) -eq 1 ] && grep -Eq -- "$pattern" $d/$name.err; then
    echo "ok   $name: $(cat $d/$name.err)"
  else echo "FAIL $name: rc=$rc"; cat $d/$name.err; exit 1; fi
}
cp -r $c $d/bad_trunc; truncate -s -100 $d/bad_trunc/optim_rank00001.bin
cp -r $c $d/bad_missing; rm $d/bad_missing/model_rank00000.bin
cp -r $c $d/bad_flip; printf '\x55' | dd of=$d/bad_flip/model_rank00001.bin bs=1 seek=2000 conv=notrunc 2>/dev/null
cp -r $c $d/bad_state; printf '\x01' | dd of=$d/bad_state/state.bin bs=1 seek=20 conv=notrunc 2>/dev/null
cp -r $c $d/bad_shape; printf '\x40' | dd of=$d/bad_shape/model_rank00001.bin bs=1 seek=24 conv=notrunc 2>/dev/null
expect truncated "optim_rank00001.bin: .* bytes, the manifest says"  --resume $d/bad_trunc
expect shape_file "model_rank00001.bin: holds a model of another shape" --resume $d/bad_shape
expect missing   "model_rank00000.bin: missing"                     --resume $d/bad_missing
expect flipped   "model_rank00001.bin: checksum mismatch"           --resume $d/bad_flip
expect state     "state.bin: missing, truncated or damaged"         --resume $d/bad_state
expect nothing   "no checkpoint here"                               --resume $d/nothing
expect shape     "give only one of them"                            --resume $d/ck --layers 2
after=$(find $d/ck -type f -exec md5sum {} + | sort)
[ "$before" = "$after" ] || fail "a failed resume changed files on disk"
echo ok
