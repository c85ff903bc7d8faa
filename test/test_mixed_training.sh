#!/usr/bin/env bash
# Mixed precision in the trainer (--precision bf16|fp16): 16-bit runs follow the fp32 loss curve
# at every ZeRO stage on 1 and 2 ranks; 1 and 2 OpenMP threads give the same bits; each rank's memory log shows 2 + 2 + 12 bytes per
# parameter split by stage (the bf16 matmuls' sgemm fallback too); an injected fp16 overflow (start scale 2^32) is skipped on every
# rank by DeepSpeed's rules (test/mixed_check.py replays them independently) without touching
# parameters or optimizer state or advancing the LR schedule; overflow at the minimum scale
# aborts (or skips, if asked); and a 16-bit run resumes from its checkpoint bit for bit,
# loss scale included.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
. test/lib.sh; new_scratch mixed_training
$PYTHON test/zero_check.py shard $d/train.bin 40000 512 5
shape="--layers 2 --channels 64 --heads 4 --vocab-size 512 --max-seq-len 32"
common="--seq-len 32 --train-data $d/train.bin --total-batch 256 --lr 3e-3 --warmup 5 --val-every 0 --sample-every 0 --seed 3"
run() { # name ranks args...: one run, its log in $d/name.jsonl (MODEL= : the model comes from --resume)
  local name=$1 n=$2; shift 2
  OMP_NUM_THREADS=${THREADS:-1} mpirun -np "$n" --oversubscribe ./train_gpt_cpu ${MODEL-$shape} $common --log "$d/$name.jsonl" "$@" > "$d/$name.out" 2>&1 \
    || { echo "FAIL: run $name failed:"; tail -5 "$d/$name.out"; exit 1; }
}

echo "== 50 steps: fp32 on one rank, then bf16 and fp16 at every stage on 1 and 2 ranks"
run fp32 1 --batch 4 --steps 50
for p in bf16 fp16; do
  for n in 1 2; do
    for s in 0 1 2 3; do run ${p}_n${n}_s${s} $n --batch $((4 / n)) --steps 50 --precision $p --zero-stage $s; done
  done
done
# bf16 without AMX / AVX512-BF16: the sgemm fallback, forced here
for s in 0 3; do ZEROC_BF16_MATMUL=sgemm run bf16_sgemm_n2_s$s 2 --batch 2 --steps 50 --precision bf16 --zero-stage $s; done
grep -q "bf16 matmuls: sgemm on bf16-rounded operands" $d/bf16_sgemm_n2_s0.out || { echo "FAIL: fallback not taken"; exit 1; }
$PYTHON test/mixed_check.py curves $d

echo "== threads: 1 and 2 OpenMP threads give the same bits (fp32, bf16, fp16; 2 ranks at ZeRO-3 in bf16)"
# every sum has one order whatever the thread count: gemm_bf16 (each C element on one thread),
# the gradient norm (blocks summed in order), the kernels' per-row and per-column loops.
# 128 channels: units over 64K elements, so that the norm's blocks run on both threads.
wide="--layers 2 --channels 128 --heads 4 --vocab-size 512 --max-seq-len 32"
for p in fp32 bf16 fp16; do
  for t in 1 2; do MODEL=$wide THREADS=$t run thr_${p}_t$t 1 --batch 4 --steps 6 --precision $p; done
done
for t in 1 2; do MODEL=$wide THREADS=$t run thr_z3_t$t 2 --batch 2 --steps 6 --precision bf16 --zero-stage 3; done
$PYTHON - "$d" <<'PY'
import json, sys
rows = lambda f: [(r['step'], r['loss'], r['grad_norm']) for r in map(json.loads, open(f)) if 'loss' in r]
for name in ['fp32', 'bf16', 'fp16', 'z3']:
    a, b = rows(f'{sys.argv[1]}/thr_{name}_t1.jsonl'), rows(f'{sys.argv[1]}/thr_{name}_t2.jsonl')
    if len(a) != 6 or a != b:
        sys.exit(f'FAIL: {name}: 1 and 2 threads differ: {[x for x in zip(a, b) if x[0] != x[1]][:2]}')
print('1 and 2 threads: losses and norms identical (fp32, bf16, fp16, bf16 ZeRO-3 on 2 ranks)')
PY

echo "== fp16 overflow injected: --initial-scale-power 32, on 2 ranks (ZeRO-1 and ZeRO-3)"
for s in 1 3; do
  run ov_s$s 2 --batch 2 --steps 30 --precision fp16 --zero-stage $s --initial-scale-power 32 --out $d/ck_ov_s$s --save-every 1
done
# the parameters before any update: the same run at learning rate 0 (fp16-rounded, like the rest)
run lr0 2 --batch 2 --steps 1 --precision fp16 --zero-stage 1 --lr 0 --out $d/ck_lr0
$PYTHON test/mixed_check.py overflow $d ov_s1 ov_s3

echo "== overflow at the minimum scale: abort by default (naming what to try), or skip when asked"
if OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu $shape $common --batch 2 --steps 5 --precision fp16 \
     --initial-scale-power 32 --min-loss-scale 1e12 > $d/abort.out 2>&1; then
  echo "FAIL: overflow at the minimum scale did not abort"; exit 1
fi
grep -q "error: step 3: gradients overflowed at loss scale 1e+12.*bf16" $d/abort.out \
  || { echo "FAIL: no clear abort line:"; tail -3 $d/abort.out; exit 1; }
run minskip 2 --batch 2 --steps 5 --precision fp16 --initial-scale-power 32 --min-loss-scale 1e12 --on-min-scale skip
grep -c '"skipped":true' $d/minskip.jsonl | grep -qx 5 || { echo "FAIL: --on-min-scale skip did not skip all 5 steps"; exit 1; }
echo "abort: $(grep -o 'error: step 3: gradients overflowed at loss scale 1e+12' $d/abort.out); skip: 5 of 5 skipped"

echo "== resume: a 16-bit run continues from its checkpoint bit for bit (fp16: the scale too)"
for p in bf16 fp16; do
  run res_${p}_a 2 --batch 2 --steps 8 --precision $p --zero-stage 2 --initial-scale-power 20 --loss-scale-window 3 \
    --out $d/ck_res_$p --save-every 4
  MODEL= run res_${p}_b 2 --batch 2 --steps 8 --precision $p --zero-stage 2 --initial-scale-power 20 --loss-scale-window 3 \
    --resume $d/ck_res_$p/step_00000004
  $PYTHON test/mixed_check.py resume $d/res_${p}_a.jsonl $d/res_${p}_b.jsonl 4
done
echo PASS
