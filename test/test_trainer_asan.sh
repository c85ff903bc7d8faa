#!/usr/bin/env bash
# The trainer under AddressSanitizer + UndefinedBehaviorSanitizer: a few steps of every
# code path (training, accumulation, validation, sampling, checkpoint) single-process and
# under ZeRO-3 on two ranks, in fp32, bf16 and fp16 (with skipped overflow steps). Leak checking is off here: OpenMPI's plugins allocate at start
# and are unloaded before LeakSanitizer looks, so their blocks cannot be told from ours. The
# model's own allocations are leak-checked in test_kernels (built with ASan, no MPI).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu_asan
. test/lib.sh; new_scratch trainer_asan
$PYTHON test/zero_check.py shard $d/train.bin 5000 512 1
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
args="--train-data $d/train.bin --val-data $d/train.bin --layers 2 --channels 32 --heads 2 --vocab-size 512
      --max-seq-len 16 --seq-len 16 --batch 2 --total-batch 64 --steps 3 --val-every 2 --val-steps 3
      --sample-every 3 --sample-len 5"
./train_gpt_cpu_asan $args --out $d/ck1 > $d/single.out 2>&1 || { tail -30 $d/single.out; exit 1; }
echo "single process: ok"
mpirun -np 2 --oversubscribe ./train_gpt_cpu_asan $args --zero-stage 3 --out $d/ck3 > $d/zero3.out 2>&1 \
  || { tail -30 $d/zero3.out; exit 1; }
echo "ZeRO-3 on 2 ranks: ok"
grep -q "val loss" $d/zero3.out && grep -q "sample:" $d/zero3.out
for p in bf16 fp16; do
  for s in 1 3; do
    mpirun -np 2 --oversubscribe ./train_gpt_cpu_asan $args --precision $p --zero-stage $s --initial-scale-power 30 \
      --out $d/ck_${p}_$s > $d/${p}_$s.out 2>&1 || { tail -30 $d/${p}_$s.out; exit 1; }
  done
  echo "$p, ZeRO-1 and ZeRO-3 on 2 ranks: ok"
done
grep -q "overflow" $d/fp16_3.out
