#!/usr/bin/env bash
# The optimizer seam (optimizer.h: an optimizer is its state arrays and its element update;
# zero.h partitions arrays it does not interpret), proven with Lion (one state array) beside
# AdamW (two) and SGD (none). test_reference checks Lion's and SGD's arithmetic against the
# independent reference; this checks what ZeRO, checkpoints, the planner and the DeepSpeed
# reader do with them:
#   - Lion at ZeRO stages 0-3 on 2 ranks follows the stage-0 loss trajectory (fp32; sums in
#     another order only), and bf16 at stages 0-3 on 2 ranks allocates what the planner predicts
#     (K = 8 bytes/param: master + one moment), kind by kind, with no adam_v in the memory log;
#   - plain SGD allocates no optimizer state at all, as planned;
#   - a Lion checkpoint resumes bit for bit (2 ranks, ZeRO-3) and reshards (1 rank ZeRO-0, 4
#     ranks ZeRO-2) onto the same trajectory; resuming it under --optimizer adamw is refused
#     with one line;
#   - a DeepSpeed file with "type": "Lion" trains with Lion, the log naming the file as the source.
#   - DeepSpeed's Adam with "bias_correction": false (and true) makes the update numpy's formula.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
model="--layers 3 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
base="--train-data $d/train.bin --seq-len 16 --batch 2 --total-batch 128 --val-every 0 --sample-every 0 --lr 2e-3
      --warmup 2 --seed 5 --optimizer lion --beta1 0.9 --beta2 0.99 --weight-decay 0.1"
run() { local n=$1; shift; OMP_NUM_THREADS=1 mpirun -np $n --oversubscribe ./train_gpt_cpu "$@"; }
losses() { grep '"loss"' $1 | grep -o '"step":[0-9]*,"loss":[^,]*' | awk -F'[:,]' -v from=$2 '$2 >= from {print $4}'; }
worst_diff() { paste <(echo "$1") <(echo "$2") | awk '{d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%.2e", m}'; }

echo "== Lion at ZeRO stages 0-3 on 2 ranks: one loss trajectory"
for s in 0 1 2 3; do
  run 2 $base $model --steps 12 --zero-stage $s --log $d/s$s.jsonl > $d/s$s.out 2>&1 || { tail -5 $d/s$s.out; fail "stage $s run"; }
done
ref=$(losses $d/s0.jsonl 1)
[ "$(echo "$ref" | wc -l)" = 12 ] || fail "stage 0: $(echo "$ref" | wc -l) steps"
awk -v a="$(echo "$ref" | head -1)" -v b="$(echo "$ref" | tail -1)" 'BEGIN {exit !(b < a - 0.1)}' || fail "Lion did not learn: $ref"
for s in 1 2 3; do
  w=$(worst_diff "$ref" "$(losses $d/s$s.jsonl 1)")
  echo "stage $s: worst |loss - stage 0| $w"
  awk -v w=$w 'BEGIN {exit !(w < 2e-5)}' || fail "Lion stage $s departs from stage 0 by $w"
done

echo "== memory: what each rank allocates is what the planner predicts"
for opt in lion sgd; do
  for s in 0 1 2 3; do
    name=$d/mem_${opt}_s$s
    run 2 $base $model --optimizer $opt --precision bf16 --steps 1 --zero-stage $s --log $name.jsonl > $name.out 2>&1 \
      || { tail -5 $name.out; fail "bf16 $opt stage $s run"; continue; }
    ./train_gpt_cpu --plan $model --seq-len 16 --batch 2 --precision bf16 --optimizer $opt --zero-stage $s --world 2 \
      --threads 1 --json > $name.plan.json
    $PYTHON test/planner_check.py agree $name.jsonl $name.plan.json || fail "$opt stage $s: plan != allocated"
    $PYTHON - $name.jsonl $name.plan.json $opt $s <<'PY' || fail "$opt stage $s: optimizer state bytes"
import json, sys
log, plan, opt, S = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mem = [json.loads(l) for l in open(log) if '"event":"memory"' in l][0]
p = json.load(open(plan))
padded, N = mem["padded_params"], 2
elems = padded if S == 0 else padded // N
state = {"lion": ["lion_m"], "sgd": []}[opt]
assert "adam_v" not in mem and "adam_m" not in mem, f"AdamW's arrays in a {opt} run: {mem}"
assert all(mem[k] == 4 * elems for k in state), f"{state}: {[mem[k] for k in state]} != 4 x {elems}"
assert mem["master"] == 4 * elems, f"master {mem['master']}"
assert p["bytes_per_param"]["K"] == 4 + 4 * len(state), p["bytes_per_param"]
print(f"{opt} bf16 stage {S}: K = {p['bytes_per_param']['K']:g} bytes/param, state arrays {state or 'none'}, "
      f"{mem['master'] + sum(mem[k] for k in state)} optimizer bytes on this rank, as planned")
PY
  done
done

echo "== Lion checkpoints: exact resume, resharding, and no resuming into another optimizer"
run 2 $base $model --steps 8 --zero-stage 3 --out $d/ck --save-every 4 --log $d/a.jsonl > $d/a.out 2>&1 || { tail -5 $d/a.out; fail "run A"; }
run 2 $base --steps 8 --zero-stage 3 --resume $d/ck/step_00000004 --log $d/b.jsonl > $d/b.out 2>&1 || { tail -5 $d/b.out; fail "resume"; }
a=$(losses $d/a.jsonl 5 | tr '\n' ' '); b=$(losses $d/b.jsonl 5 | tr '\n' ' ')
echo "2 ranks ZeRO-3 steps 5-8: uninterrupted $a | resumed $b"
[ -n "$a" ] && [ "$a" = "$b" ] || fail "Lion resume is not bitwise"
grep -q '"optimizer": "lion"' $d/ck/step_00000004/manifest.json || fail "the manifest does not name the optimizer"
for cfg in "1 0" "4 2"; do
  set -- $cfg
  run $1 $base --steps 8 --zero-stage $2 --resume $d/ck/step_00000004 --log $d/r.jsonl > $d/r.out 2>&1 \
    || { tail -5 $d/r.out; fail "reshard to N=$1 S=$2"; continue; }
  w=$(worst_diff "$(losses $d/a.jsonl 5)" "$(losses $d/r.jsonl 5)")
  echo "resumed on $1 ranks at ZeRO-$2: worst |loss difference| $w"
  awk -v w=$w 'BEGIN {exit !(w < 2e-5)}' || fail "resharded Lion trajectory differs by $w"
done
run 1 ${base/lion/adamw} --steps 8 --resume $d/ck > $d/wrong.out 2> $d/wrong.err; rc=$?
n=$(grep -c "^error" $d/wrong.err)
if [ $rc -ne 0 ] && [ "$n" = 1 ] && grep -q "holds the state of optimizer lion; this run's is adamw" $d/wrong.err; then
  echo "ok   resuming into AdamW refused: $(grep ^error $d/wrong.err)"
else fail "resume into another optimizer: rc $rc, stderr: $(cat $d/wrong.err)"; fi

echo "== DeepSpeed: \"type\": \"Lion\""
printf '{"optimizer": {"type": "Lion", "params": {"lr": 0.002, "betas": [0.9, 0.99], "weight_decay": 0.1}}}\n' > $d/lion.json
run 1 --train-data $d/train.bin --seq-len 16 --batch 2 --val-every 0 --sample-every 0 --warmup 2 --seed 5 $model \
  --steps 3 --deepspeed $d/lion.json --log $d/ds.jsonl > $d/ds.out 2> $d/ds.err || { cat $d/ds.err; fail "DeepSpeed Lion run"; }
$PYTHON - $d/ds.jsonl <<'PY' || fail "DeepSpeed Lion: the resolved optimizer"
import json, sys
cfg = [json.loads(l) for l in open(sys.argv[1]) if '"event":"config"' in l][0]["settings"]
o, b2 = cfg["optimizer"], cfg["beta2"]
assert o["value"] == "lion" and o["source"] == "file" and o["file_key"] == "optimizer.type", o
assert abs(b2["value"] - 0.99) < 1e-9 and b2["source"] == "file", b2
print(f"ok   optimizer {o['value']} from {o['file_key']}, beta2 {b2['value']} from the file")
PY
grep -q "optimizer (lion)" $d/ds.out || fail "the header does not name Lion"
printf '{"optimizer": {"type": "Lion", "params": {"eps": 1e-8}}}\n' > $d/lion_eps.json
run 1 --train-data $d/train.bin --seq-len 16 --batch 2 --val-every 0 --sample-every 0 $model --steps 1 \
  --deepspeed $d/lion_eps.json --strict > /dev/null 2> $d/eps.err
grep -q "optimizer.params.eps: unknown key" $d/eps.err && echo "ok   Lion takes no eps: $(head -1 $d/eps.err)" \
  || fail "Lion's eps not refused under --strict: $(cat $d/eps.err)"

echo "== DeepSpeed Adam with \"bias_correction\": false (BERT's configs) against the formula"
# One update from the same weights and gradients, with and without bias correction, against
# Adam written out in numpy (DeepSpeed's FusedAdam / CPUAdam with bias_correction false use
# bias_correction1 = bias_correction2 = 1: p -= lr m / (sqrt(v) + eps)); weight decay 0 and no
# clipping, so every element follows the same formula.
tiny="--train-data $d/train.bin --seq-len 16 --batch 2 --val-every 0 --sample-every 0 --seed 5"
run 1 $tiny $model --steps 1 --lr 0 --out $d/bc0 > $d/bc0.out 2>&1 || { tail -5 $d/bc0.out; fail "initial weights"; }
for bc in false true; do
  printf '{"optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0, "bias_correction": %s}},
 "gradient_clipping": 0, "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_num_steps": 0}}}\n' $bc > $d/bc_$bc.json
  run 1 $tiny --init $d/bc0/model_00000001.bin --steps 1 --deepspeed $d/bc_$bc.json --dump-grads $d/bc_$bc.grads \
    --out $d/bc_$bc --log $d/bc_$bc.jsonl > $d/bc_$bc.out 2> $d/bc_$bc.err || { cat $d/bc_$bc.err; fail "bias_correction $bc run"; continue; }
  [ -s $d/bc_$bc.err ] && fail "bias_correction $bc: warnings: $(cat $d/bc_$bc.err)"
  $PYTHON - $d/bc0/model_00000001.bin $d/bc_$bc.grads $d/bc_$bc/model_00000001.bin $bc $d/bc_$bc.jsonl <<'PY' || fail "bias_correction $bc: the update"
import json, sys
import numpy as np
init, grads, final, bc, log = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "true", sys.argv[5]
load = lambda f: np.fromfile(f, dtype=np.float32, offset=256 * 4).astype(np.float64)
p0, g, p1 = load(init), load(grads), load(final)
lr, b1, b2, eps, t = 1e-3, 0.9, 0.999, 1e-6, 1
lrs = [json.loads(l)["lr"] for l in open(log) if '"loss"' in l]
assert abs(lrs[0] - lr) < 1e-9, f"lr {lrs}"
m = (1 - b1) * g
v = (1 - b2) * g * g
def adam(correct):
    c1, c2 = (1 - b1 ** t, 1 - b2 ** t) if correct else (1.0, 1.0)
    return p0 - lr * (m / c1) / (np.sqrt(v / c2) + eps)
want, other = adam(bc), adam(not bc)
err = np.abs(p1 - want).max() / lr
far = np.abs(p1 - other).max() / lr
cfg = [json.loads(l) for l in open(log) if '"event":"config"' in l][0]["settings"]["bias-correction"]
assert cfg["value"] == ("on" if bc else "off") and cfg["source"] == "file", cfg
print(f"bias_correction {str(bc).lower()}: {p0.size} parameters, worst |p - formula| = {err:.2e} lr, "
      f"{far:.2f} lr from the other formula")
assert err < 1e-3 and far > 0.5, (err, far)
PY
done

echo "$fails failures"
[ $fails -eq 0 ]
