#!/usr/bin/env bash
# LAMB (optimizer.h; DeepSpeed's "type": "Lamb"): an optimizer whose update needs per-tensor norms
# across ZeRO's shards (zero.h's reduction pass and one all-reduce of a small vector per step).
#   1. Equal to an independent PyTorch LAMB (test/lamb_reference.py, float64, from the paper with
#      DeepSpeed FusedLamb's choices) over 5 steps, 2 ranks, fp32 and bf16: at ZeRO-0 each step is
#      its own run resumed from the last (--dump-grads gives that step's gradient; resume is exact,
#      below), and the reference replays those gradients; at ZeRO 1-3 one 5-step run each against
#      the same replay. Compared per tensor: |update C - update ref| / |update ref| (the update
#      since the initial weights, 2-norm), at most 1e-5 in fp32 and in bf16 alike (bf16 changes the
#      gradients, which both sides take from the dump, not the fp32 master weights and state the
#      update computes in). The replay must exercise the clamps (max_coeff 1: LayerNorm weights;
#      min_coeff: small biases) and the zero norm (attprojb is zeroed in the initial weights).
#      (--dump-grads FILE%d: every step's gradient; ZeRO-0 keeps the whole gradient on each rank.)
#   2. Resume bit for bit (2 ranks, ZeRO-3); resharding (1 rank ZeRO-0, 4 ranks ZeRO-2) continues
#      the trajectory (losses within 2e-5: the sums run in another order).
#   3. NVMe offload = memory, bit for bit (losses, norms, checkpoint files): ZeRO-3 bf16 with the
#      parameters on NVMe and ZeRO-2 fp32, pieces of 2048 elements (the reduction pass streams the
#      pieces too, and its sums must not depend on where the pieces are cut).
#   4. The planner equals each rank's allocation (bf16, stages 0-3): K = 12 bytes/param, and the
#      buffers include the per-tensor sums (2 doubles per tensor).
#   5. DeepSpeed's "Lamb" with max_coeff, min_coeff, bias_correction; eps_inside_sqrt true refused.
#   6. The GPU trainer (emulator build, when present) refuses --optimizer lamb in one line.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "skip: $PY has no torch/numpy"; exit 77; }
make -s train_gpt_cpu || exit 1
new_scratch lamb
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { local n=$1; shift; mpirun -np $n --oversubscribe ./train_gpt_cpu "$@"; }
losses() { grep '"loss"' $1 | grep -o '"step":[0-9]*,"loss":[^,]*' | awk -F'[:,]' -v from=$2 '$2 >= from {print $4}'; }
worst_diff() { paste <(echo "$1") <(echo "$2") | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%.2e", m}'; }

# the initial weights: random, LayerNorm and biases perturbed, attprojb zero (a tensor of norm 0),
# fcb scaled by 1e-4 (a trust ratio below min_coeff)
"$PY" test/reference_gpt2.py init --out $d/init0.bin --V 512 --Vp 512 --maxT 16 --L 2 --H 2 --C 32 --seed 3 --perturb || exit 1
"$PY" - $d/init0.bin $d/init.bin <<'PY' || exit 1
import sys, numpy as np
sys.path.insert(0, "test")
from reference_gpt2 import read_checkpoint, param_shapes
cfg, P = read_checkpoint(sys.argv[1])
off = 0
for n, s in param_shapes(cfg):
    k = int(np.prod(s))
    if n == "attprojb": zero = (off, off + k)
    if n == "fcb": tiny = (off, off + k)
    off += k
raw = bytearray(open(sys.argv[1], "rb").read())
a = np.frombuffer(raw, dtype="<f4", offset=1024).copy()
a[zero[0]:zero[1]] = 0
a[tiny[0]:tiny[1]] *= 1e-4
open(sys.argv[2], "wb").write(bytes(raw[:1024]) + a.tobytes())
PY
"$PY" test/zero_check.py shard $d/tok.bin 20000 512 1 || exit 1
H=(--lr 0.05 --grad-clip 0.5 --beta1 0.9 --beta2 0.99 --eps 1e-6 --weight-decay 0.1 --max-coeff 1.0 --min-coeff 0.01)
init=(--init $d/init.bin)
base=(--train-data $d/tok.bin --val-every 0 --sample-every 0 --no-shuffle --batch 2 --seq-len 16
      --lr-schedule constant --warmup 0 --optimizer lamb "${H[@]}" --seed 1)

echo "== 1. against the PyTorch LAMB, 5 steps, 2 ranks"
# fp32 with 2 micro-steps a step; bf16 with 1, so that every stage's bf16 gradient is the same sum
# rounded once (with 2, stages 2-3 round each micro-step's reduce-scatter into the shard, stages 0-1
# the sum of the micro-steps: another gradient, 2^-8 apart, that the reference does not see)
for prec in fp32 bf16; do
  c=$d/chain_$prec; mkdir -p $c
  tb=(--total-batch 128); [ $prec = bf16 ] && tb=(--total-batch 64)
  run 2 "${base[@]}" "${tb[@]}" "${init[@]}" --precision $prec --zero-stage 0 --steps 5 --dump-grads $c/g%d.bin \
    --out $c/ck --save-every 1 --log $c/l.jsonl > $c/o.out 2>&1 || { tail -3 $c/o.out; fail "$prec ZeRO-0 run"; }
  "$PY" test/lamb_reference.py replay $d/init.bin 0.05 0.5 0.9 0.99 1e-6 0.1 1.0 0.01 $c/g{1,2,3,4,5}.bin > $c/ref.json \
    || { fail "$prec: the reference replay"; continue; }
  "$PY" - $c/ref.json <<'PY' || fail "$prec: the replay does not reach the clamps and the zero norm"
import json, sys
r = json.load(open(sys.argv[1]))
s1 = r[0]
print(f"replay: {s1['tensors']} tensors; step 1: {s1['clamped_max']} at max_coeff, {s1['clamped_min']} at min_coeff, "
      f"{s1['zero_norm']} of norm 0; steps 2-5 at max/min: {[(x['clamped_max'], x['clamped_min']) for x in r[1:]]}")
assert s1["clamped_max"] > 0 and s1["clamped_min"] > 0 and s1["zero_norm"] > 0 and s1["clip_scale"] < 1
assert all(x["zero_norm"] == 0 for x in r[1:])
PY
  # (the fp32 master weights, from the checkpoint: in bf16 the model file holds the bf16 parameters)
  checks=()
  for k in 1 2 3 4 5; do checks+=("$prec ZeRO-0 step $k" $c/ck/step_0000000$k $c/ref_$k.bin); done
  for s in 1 2 3; do
    run 2 "${base[@]}" "${tb[@]}" "${init[@]}" --precision $prec --zero-stage $s --steps 5 --out $d/s${s}_$prec --save-every 2 --log $d/s${s}_$prec.jsonl \
      > $d/s${s}_$prec.out 2>&1 || { tail -3 $d/s${s}_$prec.out; fail "$prec stage $s"; continue; }
    checks+=("$prec ZeRO-$s after 5 steps" $d/s${s}_$prec/step_00000005 $c/ref_5.bin)
  done
  # every checkpoint against the replay in one process (it prints a FAIL line for each that differs)
  "$PY" test/lamb_reference.py check $d/init.bin 1e-5 "${checks[@]}" > $c/check.txt 2>&1; rc=$?
  grep -v '^FAIL ' $c/check.txt
  while read -r line; do fail "${line#FAIL }"; done < <(grep '^FAIL ' $c/check.txt)
  [ $rc -eq 0 ] || grep -q '^FAIL ' $c/check.txt || fail "$prec: the comparison exited $rc"
done

echo "== 2. resume and resharding (from the fp32 ZeRO-3 run's step 2)"
fp=("${base[@]}" --total-batch 128)
run 2 "${fp[@]}" --zero-stage 3 --steps 5 --resume $d/s3_fp32/step_00000002 --log $d/b.jsonl > $d/b.out 2>&1 || { tail -3 $d/b.out; fail "resume"; }
a=$(losses $d/s3_fp32.jsonl 3 | tr '\n' ' '); b=$(losses $d/b.jsonl 3 | tr '\n' ' ')
echo "2 ranks ZeRO-3 steps 3-5: uninterrupted $a | resumed $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "LAMB resume is not bitwise"
for cfg in "1 0" "4 2"; do
  set -- $cfg
  run $1 "${fp[@]}" --zero-stage $2 --steps 5 --resume $d/s3_fp32/step_00000002 --log $d/r.jsonl > $d/r.out 2>&1 \
    || { tail -3 $d/r.out; fail "reshard to N=$1 S=$2"; continue; }
  w=$(worst_diff "$(losses $d/s3_fp32.jsonl 3)" "$(losses $d/r.jsonl 3)")
  echo "resumed on $1 ranks at ZeRO-$2: worst |loss difference| $w over $(losses $d/r.jsonl 3 | wc -l) steps"
  [ "$(losses $d/r.jsonl 3 | wc -l)" = 3 ] && awk -v w=$w 'BEGIN {exit !(w < 2e-5)}' || fail "resharded LAMB trajectory differs by $w"
done

echo "== 3. NVMe offload = memory, bit for bit (against section 1's runs)"
for cfg in "3 bf16 64 --offload-param nvme" "2 fp32 128"; do # (at stage 3 the parameters too)
  set -- $cfg; s=$1; p=$2; t=$3; shift 3
  mkdir -p $d/nv_$s
  run 2 "${base[@]}" --total-batch $t "${init[@]}" --precision $p --zero-stage $s --steps 5 --out $d/o_$s --save-every 2 \
    --offload-optimizer nvme "$@" --nvme-path $d/nv_$s --nvme-buffer-size 2048 --nvme-buffers 3 --log $d/o_$s.jsonl \
    > $d/o_$s.out 2>&1 || { tail -3 $d/o_$s.out; fail "stage $s NVMe"; continue; }
  same=1
  [ -n "$(log_steps $d/o_$s.jsonl)" ] && [ "$(log_steps $d/s${s}_$p.jsonl)" = "$(log_steps $d/o_$s.jsonl)" ] || { same=0; echo "  the logs differ"; }
  for f in $(cd $d/s${s}_$p && ls model_*.bin step_*/*.bin); do cmp -s $d/s${s}_$p/$f $d/o_$s/$f || { same=0; echo "  differs: $f"; }; done
  [ $same = 1 ] && echo "ok   ZeRO-$s $p, the optimizer state $* on NVMe (pieces of 2048): logs and checkpoint files equal to memory's" \
    || fail "ZeRO-$s $p NVMe differs from memory"
done

echo "== 4. the planner = the allocation (bf16, section 1's runs)"
model=(--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16)
for s in 0 1 2 3; do
  log=$d/s${s}_bf16.jsonl; [ $s = 0 ] && log=$d/chain_bf16/l.jsonl
  ./train_gpt_cpu --plan "${model[@]}" --seq-len 16 --batch 2 --precision bf16 --optimizer lamb --zero-stage $s --world 2 \
    --threads 1 --json > $d/plan_s$s.json
  "$PY" test/planner_check.py agree $log $d/plan_s$s.json || fail "stage $s: plan != allocated"
  "$PY" - $log $d/plan_s$s.json $s <<'PY' || fail "stage $s: LAMB's state and sums"
import json, sys
mem = [json.loads(l) for l in open(sys.argv[1]) if '"event":"memory"' in l][0]
p, S = json.load(open(sys.argv[2])), int(sys.argv[3])
elems = mem["padded_params"] if S == 0 else mem["padded_params"] // 2
assert mem["lamb_m"] == mem["lamb_v"] == mem["master"] == 4 * elems and "adam_m" not in mem, mem
assert p["bytes_per_param"]["K"] == 12, p["bytes_per_param"]
sums = 2 * 8 * (12 * 2 + 4)  # 2 doubles per tensor, L = 2
if S < 2: assert mem["buffers"] == sums, (mem["buffers"], sums)
print(f"stage {S}: K = 12 bytes/param, buffers {mem['buffers']} B (the per-tensor sums: {sums} B), as planned")
PY
done

echo "== 5. DeepSpeed \"Lamb\""
printf '{"optimizer": {"type": "Lamb", "params": {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.01, "bias_correction": false, "max_coeff": 0.3, "min_coeff": 0.02}}}\n' > $d/lamb.json
run 1 --train-data $d/tok.bin --init $d/init.bin --batch 2 --seq-len 16 --val-every 0 --sample-every 0 --steps 2 \
  --deepspeed $d/lamb.json --log $d/ds.jsonl > $d/ds.out 2> $d/ds.err || { cat $d/ds.err; fail "DeepSpeed Lamb run"; }
"$PY" - $d/ds.jsonl <<'PY' || fail "DeepSpeed Lamb: the resolved settings"
import json, sys
cfg = [json.loads(l) for l in open(sys.argv[1]) if '"event":"config"' in l][0]["settings"]
want = {"optimizer": "lamb", "max-coeff": 0.3, "min-coeff": 0.02, "bias-correction": "off", "eps": 1e-6}
for k, v in want.items():
    got = cfg[k]
    ok = got["source"] == "file" and (got["value"] == v if isinstance(v, str) else abs(got["value"] - v) < 1e-9 * max(1, v))
    assert ok, (k, got)
print("ok   " + ", ".join(f"{k} {cfg[k]['value']}" for k in want) + " from the file")
PY
printf '{"optimizer": {"type": "Lamb", "params": {"eps_inside_sqrt": true}}}\n' > $d/bad.json
run 1 --train-data $d/tok.bin --init $d/init.bin --batch 2 --seq-len 16 --steps 1 --deepspeed $d/bad.json > /dev/null 2> $d/bad.err
[ "$(grep -c . $d/bad.err)" -ge 1 ] && grep -q "optimizer.params.eps_inside_sqrt: true is not implemented" $d/bad.err \
  && echo "ok   $(grep -m1 eps_inside_sqrt $d/bad.err)" || fail "eps_inside_sqrt true: $(cat $d/bad.err)"

echo "== 6. the GPU trainer refuses LAMB"
if [ -x test/bin/train_gpt_emu_fp32 ]; then
  test/bin/train_gpt_emu_fp32 --train-data $d/tok.bin --init $d/init.bin --batch 2 --seq-len 16 --steps 1 --optimizer lamb \
    --precision fp32 > $d/gpu.out 2> $d/gpu.err; rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c '^error' $d/gpu.err)" = 1 ] && grep -q "optimizer lamb needs a per-tensor reduction pass" $d/gpu.err; then
    echo "ok   $(grep ^error $d/gpu.err)"
  else fail "the GPU trainer and --optimizer lamb: rc $rc: $(cat $d/gpu.err)"; fi
else echo "(no test/bin/train_gpt_emu_fp32 built: make test/bin/train_gpt_emu_fp32 to check the GPU trainer's refusal)"; fi

echo "$fails failures"
[ $fails -eq 0 ]
