#!/usr/bin/env bash
# The step-time model (run/timemodel.h, `--plan --time`):
#   1. test/bin/test_timemodel: the ring model against hand-worked values; zero.h's byte counts
#      under the simulated backend against the layout; recompute and offload against their
#      formulas; a description written and read back; the calibration recovering the
#      efficiencies and bandwidth behind a log the model itself wrote.
#   2. the schedule: a real run's collectives (4 layers: stage 3 gathers some again for the backward;
#      2 ranks, 2 micro-steps, stages 0-3, from --trace)
#      are the model's, one by one, in the same order with the same units and bytes.
#   3. the command line: llm.c's 8xA100 figure within 30%, --json, ZeRO-3's 1.5x bytes, Ethernet
#      against InfiniBand, one clear line for each bad option.
#   4. --calibrate on a real run's log (the default model, 2 ranks, ZeRO-3) reproduces that run.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu test/bin/test_timemodel || exit 1
fails=0
test/bin/test_timemodel || fails=$((fails+1))
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
export OMP_NUM_THREADS=1
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
shape="--layers 4 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2"
for s in 0 1 2 3; do
  mpirun -np 2 --oversubscribe ./train_gpt_cpu $shape --train-data $d/train.bin --steps 4 --grad-accum 2 --zero-stage $s \
    --val-every 0 --sample-every 0 --log $d/s$s.jsonl --trace $d/real$s.json > $d/s$s.out 2>&1 \
    || { echo "FAIL the run at stage $s"; tail -3 $d/s$s.out; fails=$((fails+1)); continue; }
  ./train_gpt_cpu --plan --time $shape --world 2 --grad-accum 2 --zero-stage $s --trace $d/pred$s.json > /dev/null \
    || { echo "FAIL --plan --time --trace at stage $s"; fails=$((fails+1)); continue; }
  echo -n "stage $s: "; $PYTHON test/timemodel_check.py schedule $d/real$s.json $d/pred$s.json 3 || fails=$((fails+1))
done
$PYTHON test/timemodel_check.py cli ./train_gpt_cpu --plan || fails=$((fails+1))
# calibrating on a run of the default model (16M parameters; a tiny one is all overhead) reproduces
# its step: its forward + backward + optimizer exactly up to the loss's all-reduce, the whole step
# up to what lies outside them (data, bookkeeping)
shape="--seq-len 64 --batch 4"
mpirun -np 2 --oversubscribe ./train_gpt_cpu $shape --steps 4 --zero-stage 3 --val-every 0 --sample-every 0 \
  --log $d/cal.jsonl > $d/cal.out 2>&1 || { echo "FAIL the calibration run"; tail -3 $d/cal.out; fails=$((fails+1)); }
if ./train_gpt_cpu --plan --calibrate $d/cal.jsonl > $d/hw.json 2> $d/fit.txt; then
  $PYTHON - "$d" "$shape" <<'PY' || fails=$((fails+1))
import json, subprocess, sys
d, shape = sys.argv[1], sys.argv[2].split()
steps = [json.loads(l) for l in open(f"{d}/cal.jsonl") if '"loss"' in l][1:]
meas = sum(s["ms"] for s in steps) / len(steps)
p = json.loads(subprocess.run(["./train_gpt_cpu", "--plan", "--time", "--json", "--hardware", f"{d}/hw.json", *shape,
                               "--world", "2", "--zero-stage", "3"], capture_output=True, text=True,
                              check=True).stdout)
parts = sum(s["fwd_ms"] + s["bwd_ms"] + s["optim_ms"] for s in steps) / len(steps)
pparts = p["fwd_ms"] + p["bwd_ms"] + p["optim_ms"]
ok = abs(pparts - parts) <= 0.02 * parts + 0.05 and abs(p["step_ms"] - meas) <= 0.25 * meas + 0.5
print(f"{'ok' if ok else 'FAIL'}: calibrated on its own run: fwd+bwd+optim measured {parts:.2f} ms, predicted {pparts:.2f}; "
      f"step measured {meas:.2f} ms, predicted {p['step_ms']:.2f}")
sys.exit(0 if ok else 1)
PY
else echo "FAIL --calibrate:"; cat $d/fit.txt; fails=$((fails+1)); fi
echo "$fails failure(s)"
[ $fails -eq 0 ]
