#!/usr/bin/env bash
# ZeRO++ (zero.h, zero/pp.h) on the CPU trainer over MPI, 4 ranks as 1 host x 4, 2 hosts x 2 or
# 4 hosts x 1 (ZERO_HOST_ID per rank, mpirun's MPMD form: cpu/mpi_backend.h):
#   - the collectives on known data (test/bin/zeropp_cli) against numpy (test/zeropp_check.py):
#     qwZ's gathered weights within half a quantization step of the exact ones (the owner's slice
#     exact), qgZ's reduced gradient within its two levels' bound of the exact sum, hpZ's gathers exact;
#   - hpZ alone is bit-identical to ZeRO-3 (groups of 2 on one host of 4 and on two hosts of 2), and
#     qwZ on 2 hosts x 2 bit-identical to qwZ on 1 host x 4 (its math does not depend on hosts);
#     qgZ at stage 2 bit-identical to qgZ at stage 3 on 2 hosts x 2 (bf16), and not to the exact run;
#   - a checkpoint saved with ZeRO++ resumes with it bit for bit and without it, and one saved
#     without resumes with hpZ bit for bit;
#   - the memory plan (run/planner.h) equals what every rank allocated, ZeRO++'s buffers and hpZ's
#     shard included;
#   - qgZ's level-2 all-to-all across hosts is numbered in the flight recorder (core/flight.h): a
#     rank skipping it (ZERO_TEST_SKIP) gets a verdict naming it, with its bytes H q(s);
#   - bad settings: one line naming the culprit, a non-zero exit.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu test/bin/zeropp_cli
. test/lib.sh; new_scratch zeropp
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1

# mpirun over H hosts of L ranks: mpmd H L PROGRAM ARGS...
mpmd() {
  local H=$1 L=$2; shift 2
  local app=() h
  for ((h = 0; h < H; h++)); do app+=(${app:+:} -np $L -x ZERO_HOST_ID=$h "$@"); done
  mpirun --oversubscribe "${app[@]}"
}

echo "--- the collectives against numpy"
for c in "1 4 fp32 3 1 1 0 64" "2 2 bf16 3 1 2 4 64" "2 2 fp16 3 0 1 8 2048" "4 1 fp32 2 0 1 4 32" \
         "1 4 bf16 2 0 1 4 128" "2 2 fp32 3 0 2 0 64"; do
  set -- $c; H=$1; L=$2; shift 2
  out=$d/cli_${H}_${L}_$(echo "$*" | tr ' ' _); mkdir -p $out
  mpmd $H $L test/bin/zeropp_cli $out "$@" > $out/log 2>&1 || { cat $out/log; fail "zeropp_cli $c"; }
  $PYTHON test/zeropp_check.py $out "$@" $((H * L)) $L || fail "zeropp_check $c"
done

echo "--- the trainer"
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
common="--train-data $d/train.bin --seq-len 16 --batch 2 --lr 3e-3 --warmup 2 --val-every 0 --sample-every 0 --seed 7
        --zero-stage 3"
args="$common --layers 3 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
run() { # run TAG HOSTS RANKS_PER_HOST ARGS... (a --resume run: the checkpoint has the model)
  local tag=$1 H=$2 L=$3 a=$args; shift 3
  [[ " $* " == *" --resume "* ]] && a=$common
  mpmd $H $L ./train_gpt_cpu $a --log $d/$tag.jsonl "$@" > $d/$tag.out 2>&1 || { tail -5 $d/$tag.out; fail "run $tag"; }
}
same() { log_steps $d/$1.jsonl > $d/$1.steps; log_steps $d/$2.jsonl > $d/$2.steps
  cmp -s $d/$1.steps $d/$2.steps || { diff $d/$1.steps $d/$2.steps | head -4; fail "$1 and $2 differ"; }
  echo "$1 = $2 bit for bit ($(wc -l < $d/$1.steps) steps)"; }
run base 1 4 --steps 4
run hpz2 1 4 --steps 4 --zeropp-hpz 2
run h2_hpz2 2 2 --steps 4 --zeropp-hpz 2
same base hpz2; same base h2_hpz2
grep -q "ZeRO++: qwZ off, hpZ groups of 2, qgZ off; blocks of 2048; 2 hosts x 2 ranks" $d/h2_hpz2.out ||
  fail "the run does not say it runs hpZ on 2 hosts x 2 ranks"
run qwz 1 4 --steps 4 --zeropp-qwz 1
run h2_qwz 2 2 --steps 4 --zeropp-qwz 1
same qwz h2_qwz
# qgZ at stage 2 runs the same hierarchical reduce-scatter as at stage 3 and the stages update the
# same shards: bit for bit in bf16; and it is on (its int4 gradients leave the exact run's losses)
run h2_qgz 2 2 --steps 4 --zeropp-qgz 4 --precision bf16
run h2_qgz_s2 2 2 --steps 4 --zeropp-qgz 4 --precision bf16 --zero-stage 2
same h2_qgz h2_qgz_s2
grep -q "ZeRO++: qwZ off, hpZ off, qgZ int4; blocks of 2048; 2 hosts x 2 ranks" $d/h2_qgz_s2.out ||
  fail "the stage-2 run does not say it runs qgZ on 2 hosts x 2 ranks"
run h2_exact 2 2 --steps 4 --precision bf16
cmp -s <(log_steps $d/h2_qgz.jsonl) <(log_steps $d/h2_exact.jsonl) && fail "qgZ's run equals the exact one: qgZ is not on"
# the bytes across hosts: hpZ keeps the backward's re-gathers inside the host
across() { grep '"event":"comm","step":2,"rank":0' $d/$1.jsonl | grep -o '"across_hosts":[0-9]*' | cut -d: -f2; }
run h2_base 2 2 --steps 2
[ "$(across h2_hpz2)" -lt "$(across h2_base)" ] || fail "hpZ did not lower the bytes across hosts"
[ "$(across h2_qwz)" -lt "$(across h2_base)" ] || fail "qwZ did not lower the bytes across hosts"
echo "bytes across hosts per rank, step 2: ZeRO-3 $(across h2_base), hpZ $(across h2_hpz2), qwZ $(across h2_qwz)"

echo "--- checkpoints"
pp="--zeropp-qwz 1 --zeropp-hpz 2 --zeropp-qgz 4"
run all 2 2 --steps 4 $pp --out $d/ck_pp --save-every 2
for t in all h2_hpz2 qwz; do # ZeRO++'s buffers and hpZ's shard: the plan equals what each rank allocated
  grep -q "plan vs allocated: every kind on every rank matches exactly" $d/$t.out || { grep -A3 "plan vs" $d/$t.out; fail "$t: plan != allocation"; }
done
echo "plan = allocation to the byte on every rank (all three on 2 hosts x 2; hpZ; qwZ)"
run all_resumed 2 2 --steps 4 $pp --resume $d/ck_pp/step_00000002
tail_steps() { log_steps $d/$1.jsonl | grep -v '"step":[12],'; }
cmp -s <(tail_steps all) <(tail_steps all_resumed) || fail "resumed with ZeRO++: steps 3-4 differ from the uninterrupted run's"
echo "saved with ZeRO++, resumed with it: steps 3-4 bit for bit"
run all_plain 2 2 --steps 4 --resume $d/ck_pp/step_00000002
$PYTHON - $d/all.jsonl $d/all_plain.jsonl <<'EOF' || fail "resumed without ZeRO++: the loss left the ZeRO++ run's"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if l.startswith('{"step":4,')] for p in sys.argv[1:])
print(f"saved with ZeRO++, resumed without: step 4's loss {b[0]:.6f} against {a[0]:.6f}")
sys.exit(abs(a[0] - b[0]) > 0.02 * a[0])
EOF
run plain 2 2 --steps 4 --out $d/ck --save-every 2
run plain_hpz 2 2 --steps 4 --resume $d/ck/step_00000002 --zeropp-hpz 2
cmp -s <(tail_steps plain) <(tail_steps plain_hpz) || fail "saved without, resumed with hpZ: steps 3-4 differ"
echo "saved without, resumed with hpZ: steps 3-4 bit for bit"

echo "--- qgZ's level 2 in the flight recorder"
# Layer 2's slice: (12 C^2 + 13 C = 12,704 parameters, padded to 12,736) / 4 = 3,184 elements; its
# int4 message is 2 scales (8 bytes) + 1,592 code bytes = 1,600 (a multiple of 8); H = 2 of them.
# Collective #12 of step 1 is that all-to-all (the schedule of this 3-layer shape); rank 1 skips it.
skipargs="$args --steps 1 --zeropp-qgz 4 --comm-timeout 2"
mpirun --oversubscribe -np 2 -x ZERO_HOST_ID=0 -x ZERO_TEST_SKIP=1:12 ./train_gpt_cpu $skipargs : \
  -np 2 -x ZERO_HOST_ID=1 -x ZERO_TEST_SKIP=1:12 ./train_gpt_cpu $skipargs > $d/skip.out 2>&1 && fail "a skipped level 2 did not stop the job"
grep -m1 "diverged at #12" $d/skip.out || true
grep -Eq "^hang: .*reduce_scatter of unit 3 = layer 2 \(3200 bytes\).*diverged at #12" $d/skip.out \
  || { grep -E "^(hang|error)" $d/skip.out | head -6; fail "no verdict naming level 2's all-to-all (3200 bytes) as #12"; }

echo "--- bad settings"
bad() { # bad "EXPECTED TEXT" HOSTS RANKS_PER_HOST ARGS...
  local want=$1 H=$2 L=$3; shift 3
  local launch=(mpmd $H $L)
  [ $H -eq 1 ] && [ $L -eq 1 ] && launch=() # one rank: no mpirun
  if "${launch[@]}" ./train_gpt_cpu $args --steps 1 "$@" > $d/bad.out 2>&1; then fail "accepted: $*"; fi
  local lines; lines=$(grep -c '^error' $d/bad.out || true)
  grep -q -- "$want" $d/bad.out && [ "$lines" -eq 1 ] || { cat $d/bad.out | grep -v '^note' | head -8; fail "bad $*: want one line with '$want'"; }
  echo "refused: $* -> $(grep '^error' $d/bad.out | cut -c1-110)"
}
bad "needs --zero-stage 3" 1 1 --zero-stage 2 --zeropp-qwz 1
bad "needs --zero-stage 3" 1 1 --zero-stage 1 --zeropp-hpz 2
bad "needs --zero-stage 2 or 3" 1 1 --zero-stage 1 --zeropp-qgz 4
bad "expected 0 (off), 4 or 8" 1 1 --zeropp-qgz 2
bad "--zeropp-block 7 is odd" 1 1 --zeropp-block 7
bad "--zeropp-block" 1 1 --zeropp-block 1
bad "does not divide the 2 ranks per host" 2 2 --zeropp-hpz 4
bad "does not divide the 3 ranks" 1 3 --zeropp-hpz 2
# hosts of unequal size: ranks 0-2 on one, rank 3 on another
if mpirun --oversubscribe -np 3 -x ZERO_HOST_ID=0 ./train_gpt_cpu $args --steps 1 --zeropp-qgz 4 : \
     -np 1 -x ZERO_HOST_ID=1 ./train_gpt_cpu $args --steps 1 --zeropp-qgz 4 > $d/bad.out 2>&1; then fail "uneven hosts accepted"; fi
[ "$(grep -c '^error' $d/bad.out)" -eq 1 ] && grep -q "needs every host to run as many ranks" $d/bad.out || { cat $d/bad.out; fail "uneven hosts"; }
echo "refused: hosts of 3 and 1 ranks with qgZ"
echo '{"zero_optimization": {"stage": 3, "zero_quantized_gradients": true}}' > $d/ds.json
if ./train_gpt_cpu $args --steps 1 --deepspeed $d/ds.json --zeropp-qgz 0 > $d/bad.out 2>&1; then fail "file and command line conflict accepted"; fi
grep -q "zero_quantized_gradients.*conflict" $d/bad.out || { cat $d/bad.out; fail "no conflict named"; }
echo "refused: zero_quantized_gradients true against --zeropp-qgz 0"
echo ok
