#!/usr/bin/env bash
# `train_gpt_cpu --plan --partitions` (run/planner.h): zero.h's partition map, the picture of which
# rank holds which slice at each stage, checked against what it depicts, computed elsewhere
# (test/partitions_check.py):
#   - every offset, slice, padding and byte of the printout against the GPT-2 tensor shapes, the
#     padding rule of zero.h's contract and the ZeRO paper's stage rules, for shapes with padding
#     and without, N from 1 to 1024, fp32 and bf16;
#   - its bytes per kind at each stage against what every rank of real 2-rank runs allocated;
#   - its slice offsets against what the ranks really held: a 2-rank checkpoint's rank files,
#     read at the table's offsets, give back the model of a one-rank run of the same step;
#   - a table with one number moved fails the check.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
. test/lib.sh; new_scratch partitions
PY=${PYTHON:-/usr/bin/python3}
check=test/partitions_check.py

echo "== the printout against the formulas"
# L C NH V maxT N precision; the first shape pads every unit at N = 2 and some at N = 3
for args in "2 24 2 500 10 2 fp32" "2 24 2 500 10 3 bf16" "2 24 2 50257 10 1 fp32" "12 768 12 50257 1024 4 bf16" \
            "12 768 12 50257 1024 64 fp32" "48 1600 25 50257 1024 1024 bf16"; do
  read -r L C NH V T N P <<<"$args"
  ./train_gpt_cpu --plan --partitions --layers "$L" --channels "$C" --heads "$NH" --vocab-size "$V" --max-seq-len "$T" \
    --seq-len "$T" --world "$N" --precision "$P" > "$d/t.txt"
  $PY $check table "$d/t.txt" "$L" "$C" "$NH" "$V" "$T" "$N" "$P"
done
cmp <(./train_gpt_cpu --plan --partitions --model d12 --world 4) \
    <(./train_gpt_cpu --plan --partitions --layers 12 --channels 768 --heads 12 --max-seq-len 1024 --world 4) \
  || { echo "FAIL: --model d12 and its shape print different maps"; exit 1; }

echo "== a moved number fails the check"
./train_gpt_cpu --plan --partitions --layers 2 --channels 24 --heads 2 --vocab-size 500 --max-seq-len 10 --seq-len 10 \
  --world 2 > "$d/t.txt"
sed -E '0,/^ +1 layer 0 /s/^( +1 layer 0 .* )([0-9,]+)$/\1999/' "$d/t.txt" > "$d/moved.txt"
! cmp -s "$d/t.txt" "$d/moved.txt" || { echo "FAIL: the test's edit changed nothing"; exit 1; }
if $PY $check table "$d/moved.txt" 2 24 2 500 10 2 fp32 > "$d/moved.out"; then
  echo "FAIL: a table with rank 1's slice of layer 0 moved passed"; exit 1
fi
grep FAIL "$d/moved.out"

echo "== the table against what 2 ranks allocated, stage by stage"
export OMP_NUM_THREADS=1
shape="--layers 2 --channels 24 --heads 2 --max-seq-len 10 --seq-len 10 --batch 2"
run="--steps 1 --val-every 0 --sample-every 0"
for p in bf16 fp32; do
  # shellcheck disable=SC2086
  ./train_gpt_cpu --plan --partitions $shape --precision $p --world 2 > "$d/$p.txt"
  for s in 0 1 2 3; do
    # shellcheck disable=SC2086
    mpirun -np 2 --oversubscribe ./train_gpt_cpu $shape $run --precision $p --zero-stage $s --log "$d/$p$s.jsonl" \
      > "$d/$p$s.out" 2>&1 || { tail -5 "$d/$p$s.out"; exit 1; }
    $PY $check memory "$d/$p.txt" $s "$d/$p$s.jsonl"
  done
done

echo "== the slices the ranks held (a 2-rank checkpoint) against a one-rank run's model"
# shellcheck disable=SC2086
mpirun -np 2 --oversubscribe ./train_gpt_cpu $shape $run --zero-stage 3 --out "$d/ck2" --save-every 1 > "$d/ck2.out" 2>&1 \
  || { tail -5 "$d/ck2.out"; exit 1; }
# shellcheck disable=SC2086
./train_gpt_cpu $shape $run --total-batch 40 --out "$d/ck1" --save-every 1 > "$d/ck1.out" 2>&1 || { tail -5 "$d/ck1.out"; exit 1; }
$PY $check shards "$d/fp32.txt" "$d/ck2/$(cat "$d/ck2/latest")" "$d/ck1/model_00000001.bin"
echo "PASS"
