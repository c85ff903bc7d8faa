#!/usr/bin/env bash
# Save, load, continue: a checkpoint written after step k, loaded with --init, gives bitwise
# the loss that the uninterrupted run computed at step k+1 on the same batch.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
. test/lib.sh; new_scratch trainer_resume
# exactly one batch of B*T+1 tokens, so every step trains on the same batch
$PYTHON test/zero_check.py shard $d/one_batch.bin $((4 * 16 + 1)) 512 3
args="--train-data $d/one_batch.bin --no-shuffle --batch 4 --seq-len 16 --val-every 0 --sample-every 0
      --lr 1e-3 --lr-schedule constant --warmup 0"
for stage_np in "0 1" "3 2"; do
  set -- $stage_np; s=$1; n=$2
  rm -rf $d/ck; 
  mpirun -np $n --oversubscribe ./train_gpt_cpu $args --batch $((4 / n)) --layers 2 --channels 32 --heads 2 \
    --vocab-size 512 --max-seq-len 16 --steps 6 --zero-stage $s --out $d/ck --save-every 5 --log $d/a.jsonl > $d/a.out
  mpirun -np $n --oversubscribe ./train_gpt_cpu $args --batch $((4 / n)) --init $d/ck/model_00000005.bin --steps 1 \
    --zero-stage $s --log $d/b.jsonl > $d/b.out
  a6=$(grep '"step":6,' $d/a.jsonl | grep -o '"loss":[^,]*')
  b1=$(grep '"step":1,' $d/b.jsonl | grep -o '"loss":[^,]*')
  echo "ZeRO-$s on $n ranks: uninterrupted step 6 $a6, resumed step 1 $b1"
  [ "$a6" = "$b1" ] || { echo "FAIL: not bitwise equal"; exit 1; }
  # the checkpoint written at the end is the one after step 6, and differs from step 5's
  cmp -s $d/ck/model_00000005.bin $d/ck/model_00000006.bin && { echo "FAIL: step 6 checkpoint equals step 5"; exit 1; }
  grep -q tmp <<<"$(ls $d/ck)" && { echo "FAIL: temporary file left behind"; exit 1; }
done
echo ok
