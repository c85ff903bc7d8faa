#!/usr/bin/env bash
# The step-time model runs the NVMe store's own schedule (run/timemodel.h: zero/nvme_store.h over
# a simulated device): the bytes it reads and writes in a step equal the CPU trainer's log
# (nvme_read, nvme_write) for the same run, and both equal the count worked out here: every piece
# of the master weights and Adam's two moments read and written once (each transfer padded to
# 4096 bytes); at stage 3 with the parameters on NVMe too, every parameter piece written, and
# read back for the gathers except what the update left in the gather slots (test_nvme's count).
# 2 ranks, 3 steps; the model's step is a run's second and later (reads ahead across the step
# boundary, kept slots), so it is checked against those.
set -uo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
make -s train_gpt_cpu || { echo "FAIL: build"; exit 1; }
d=$(mktemp -d "${TMPDIR:-/tmp}/test_timemodel_nvme.XXXXXX"); trap 'rm -rf "$d"' EXIT
mkdir -p $d/nvme
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
fails=0
run="--seq-len 16 --batch 2 --precision bf16 --nvme-buffer-size 2048"
for cfg in "2 1 none 2 0" "4 3 nvme 3 60000"; do
  set -- $cfg; L=$1; s=$2; op=$3; nb=$4; ra=$5
  model="--layers $L --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
  opts="$model $run --zero-stage $s --offload-optimizer nvme --offload-param $op --nvme-buffers $nb"
  opts="$opts --nvme-readahead $ra"
  timeout 300 mpirun -np 2 --oversubscribe ./train_gpt_cpu $opts --train-data $d/train.bin --steps 3 --val-every 0 \
    --sample-every 0 --nvme-path $d/nvme --log $d/log$s.jsonl > $d/run$s.out 2>&1 \
    || { tail -3 $d/run$s.out; echo "FAIL the run at stage $s"; fails=$((fails+1)); continue; }
  ./train_gpt_cpu --plan --time --json --hardware this-machine --world 2 $opts > $d/model$s.json 2> $d/model$s.err \
    || { cat $d/model$s.err; echo "FAIL --plan --time at stage $s"; fails=$((fails+1)); continue; }
  $PYTHON - $d/log$s.jsonl $d/model$s.json $L $s $op <<'PY' || fails=$((fails+1))
import json, sys
log, model, L, stage, op = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
C, V, T, W, piece = 32, 512, 16, 2, 2048
pad = lambda b: (b + 4095) // 4096 * 4096
units = [(V * C + T * C) // W] + [(12 * C * C + 13 * C) // W] * L + [2 * C // W]  # a rank's slices
pieces = [min(piece, n - lo) for n in units for lo in range(0, n, piece)]
read = written = 3 * sum(pad(n * 4) for n in pieces)  # master weights, m, v (fp32)
if op == "nvme":  # bf16 parameters: every piece written; the gathers read whole slices, less the kept ones
    written += sum(pad(n * 2) for n in pieces)
    read += (L - 2 + L - 2) * pad(units[1] * 2)
steps = [r for r in map(json.loads, open(log)) if "loss" in r]
got = [(r["nvme_read"], r["nvme_write"]) for r in steps[1:]]
m = json.load(open(model))
ok = got and all(g == (read, written) for g in got) and (m["nvme_read"], m["nvme_write"]) == (read, written)
print(f"{'ok' if ok else 'FAIL'}   stage {stage}, parameters on {op}: NVMe bytes per step read/written: model "
      f"{m['nvme_read']:.0f}/{m['nvme_write']:.0f}, trainer {got}, counted {read}/{written}")
sys.exit(0 if ok else 1)
PY
done
echo "$fails failure(s)"
[ $fails -eq 0 ]
