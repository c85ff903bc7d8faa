#!/usr/bin/env bash
# ZeRO stages 0-3 on 1, 2 and 4 processes (and 0, 3 on 8) at the same global batch: the loss trajectories
# agree, and each rank's allocated model-state bytes and communicated bytes per step equal
# what the layout and the schedule imply (test/zero_check.py recomputes them independently),
# with activation recompute too (ZeRO-3 on 4 ranks: the same losses, the recompute's gathers).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
. test/lib.sh; new_scratch zero
L=4 C=32 NH=2 V=512 MAXT=16 T=16 B=2 TOTAL=128 STEPS=20
$PYTHON test/zero_check.py shard $d/train.bin 20000 $V 1
args="--train-data $d/train.bin --layers $L --channels $C --heads $NH --vocab-size $V --max-seq-len $MAXT
      --seq-len $T --total-batch $TOTAL --steps $STEPS --lr 3e-3 --warmup 2 --val-every 0
      --sample-every 0 --seed 7"
for n in 1 2 4 8; do
  stages="0 1 2 3"; b=$B
  [ $n -eq 8 ] && { stages="0 3"; b=1; } # 8 ranks on 2 cores: the two ends suffice; 1 sequence each
  for s in $stages; do
    OMP_NUM_THREADS=1 mpirun -np $n --oversubscribe ./train_gpt_cpu $args --batch $b --zero-stage $s --log $d/n${n}_s${s}.jsonl \
      > $d/n${n}_s${s}.out 2>&1 || { echo "run N=$n S=$s failed:"; tail -5 $d/n${n}_s${s}.out; exit 1; }
  done
done
# activation recompute at ZeRO-3: segments of 3 layers re-gather for the recompute; of 2, the next
# segment's first layer is prefetched beside the layer in use (the same buffer parity)
for r in "full3 --recompute full --recompute-every 3" "full2 --recompute full --recompute-every 2"; do
  set -- $r; tag=$1; shift
  OMP_NUM_THREADS=1 mpirun -np 4 --oversubscribe ./train_gpt_cpu $args --batch $B --zero-stage 3 "$@" --log $d/n4_s3_$tag.jsonl \
    > $d/n4_s3_$tag.out 2>&1 || { echo "run N=4 S=3 $tag failed:"; tail -5 $d/n4_s3_$tag.out; exit 1; }
done
$PYTHON test/zero_check.py check $d $L $C $NH $V $MAXT $T $B $TOTAL
