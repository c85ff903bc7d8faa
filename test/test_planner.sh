#!/usr/bin/env bash
# The memory planner (planner.h): the textbook numbers exactly (7B in bf16 + AdamW = 112 GB,
# the ZeRO stage formulas at N up to 1024, the per-layer activation estimate), agreement with
# zero_init's allocations at any N, and with what train_gpt_cpu really allocates on 1, 2 and 4
# ranks for every ZeRO stage and every precision the trainer accepts, kind by kind, and with
# activation recompute (full, every 2, selective).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu test/bin/test_planner
. test/lib.sh; new_scratch planner

echo "== unit checks (test/test_planner.c)"
test/bin/test_planner

# The planner's command line: the trainer's --plan once it is wired, else the test program's.
PLAN=(test/bin/test_planner plan)
if grep -q -- --offload-optimizer <<<"$(./train_gpt_cpu --plan --help 2>/dev/null)"; then
  echo "== train_gpt_cpu --plan is wired: it must print what planner_main prints"
  for a in "--model d12" "--params 7e9 --precision bf16 --zero-stage 3 --world 1024 --json" \
           "--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --zero-stage 2 --world 4"; do
    # shellcheck disable=SC2086
    cmp <(./train_gpt_cpu --plan $a) <("${PLAN[@]}" $a) || { echo "FAIL: --plan $a differs"; exit 1; }
  done
  PLAN=(./train_gpt_cpu --plan)
else
  echo "(train_gpt_cpu --plan not wired yet: testing planner_main through test/bin/test_planner)"
fi
echo "== command line: ${PLAN[*]}"
$PYTHON test/planner_check.py cli "${PLAN[@]}"

echo "== plan vs the trainer's allocations"
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
shape="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2"
precisions=(fp32)
for p in bf16 fp16; do # the trainer accepts them once mixed precision lands
  if OMP_NUM_THREADS=1 mpirun -np 1 ./train_gpt_cpu --precision $p --help >/dev/null 2>&1; then precisions+=($p); fi
done
echo "precisions the trainer accepts: ${precisions[*]}"
for p in "${precisions[@]}"; do
  popt=(); [ "$p" != fp32 ] && popt=(--precision "$p")
  for n in 1 2 4; do
    for s in 0 1 2 3; do
      name=$d/${p}_n${n}_s${s}
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=1 mpirun -np $n --oversubscribe ./train_gpt_cpu $shape "${popt[@]}" --steps 1 --val-every 0 \
        --sample-every 0 --train-data $d/train.bin --zero-stage $s --log $name.jsonl > $name.out 2>&1 \
        || { echo "FAIL: trainer $p N=$n S=$s:"; tail -5 $name.out; exit 1; }
      # shellcheck disable=SC2086
      "${PLAN[@]}" $shape --precision $p --zero-stage $s --world $n --json > $name.plan.json
      $PYTHON test/planner_check.py agree $name.jsonl $name.plan.json
      if grep -q "memory plan per rank" $name.out; then # the trainer prints the plan beside its allocations
        grep -q "plan vs allocated: every kind on every rank matches exactly" $name.out \
          || { echo "FAIL: $p N=$n S=$s: the trainer's table shows a mismatch"; cat $name.out; exit 1; }
      fi
      echo "$p N=$n S=$s: plan = allocated ($(grep -o '"model_states":[0-9]*' $name.plan.json))"
    done
  done
done
echo "== plan vs the trainer's allocations with activation recompute (2 ranks, ZeRO-3)"
for p in fp32 bf16; do
  for r in "full" "full --recompute-every 2" "selective"; do
    name=$d/${p}_rc_$(echo "$r" | tr -d ' -')
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu $shape --precision $p --steps 1 --val-every 0 \
      --sample-every 0 --train-data $d/train.bin --zero-stage 3 --recompute $r --log $name.jsonl > $name.out 2>&1 \
      || { echo "FAIL: trainer $p --recompute $r:"; tail -5 $name.out; exit 1; }
    # shellcheck disable=SC2086
    "${PLAN[@]}" $shape --precision $p --zero-stage 3 --world 2 --recompute $r --json > $name.plan.json
    $PYTHON test/planner_check.py agree $name.jsonl $name.plan.json
    grep -q "plan vs allocated: every kind on every rank matches exactly" $name.out \
      || { echo "FAIL: $p --recompute $r: the trainer's table shows a mismatch"; cat $name.out; exit 1; }
    echo "$p --recompute $r: plan = allocated ($(grep -o '"activations":[0-9]*' $name.plan.json | head -1))"
  done
done
echo "== the CPU trainer's bf16 matmul scratch follows its threads per rank (products big enough to run on several)"
wide="--layers 1 --channels 256 --heads 4 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2"
ws() { $PYTHON -c 'import json, sys; print(json.load(open(sys.argv[1]))["workspace"])' "$1"; }
# shellcheck disable=SC2086
"${PLAN[@]}" $wide --precision bf16 --threads 1 --json > $d/t1.plan.json
# shellcheck disable=SC2086
"${PLAN[@]}" $wide --precision bf16 --threads 2 --json > $d/t2.plan.json
[ "$(ws $d/t1.plan.json)" != "$(ws $d/t2.plan.json)" ] \
  || { echo "FAIL: the workspace does not depend on --threads: this check would prove nothing"; exit 1; }
for run in "1 1" "1 2" "2 "; do # N, OMP_NUM_THREADS (empty: the trainer's own choice, cores / N)
  read -r n t <<<"$run"
  name=$d/threads_n${n}_t${t:-auto}
  topt=(); [ -n "$t" ] && topt=(--threads "$t")
  # shellcheck disable=SC2086
  env ${t:+OMP_NUM_THREADS=$t} mpirun -np "$n" --oversubscribe ./train_gpt_cpu $wide --precision bf16 --steps 1 --val-every 0 \
    --sample-every 0 --train-data $d/train.bin --log $name.jsonl > $name.out 2>&1 || { echo "FAIL: trainer $name:"; tail -5 $name.out; exit 1; }
  # shellcheck disable=SC2086
  "${PLAN[@]}" $wide --precision bf16 --world "$n" "${topt[@]}" --json > $name.plan.json
  $PYTHON test/planner_check.py agree $name.jsonl $name.plan.json
  echo "bf16 N=$n threads ${t:-auto}: plan = allocated (workspace $(ws $name.plan.json))"
done
echo "PASS"
