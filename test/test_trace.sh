#!/usr/bin/env bash
# --trace and the step log's times (core/trace.h), checked by test/trace_check.py from the raw
# events: valid Chrome-trace JSON, one process per rank, the compute lane nested, comm lanes
# without overlaps, every collective ending before its wait returns, a forward and a backward
# span per unit and micro-step, the collectives' bytes per step and kind equal to the comm log's
# to the byte, and the log's fwd/bwd/optim/data/comm/exposed ms equal to what the spans add up to.
#   CPU trainer: 1 rank; 2 ranks at stages 0-3 with 2 micro-steps per step; bf16 at stage 3.
#   GPU trainer on the CUDA emulator: 2 ranks at stage 2 with --trace (the host then waits for
#   the device, so its times are the device's); without --trace its log says comm_ms null.
#   Full recompute with the optimizer and parameters on NVMe: recompute spans, and NVMe spans
#   whose bytes the step log's nvme_write equals (reads: its nvme_read).
# Tracing changes no number: the losses with and without it are identical. A trace file that
# cannot be opened is one line naming it, and a non-zero exit. Under ASan/UBSan: a traced run
# (the gather and the writer) and the step-time model's predicted trace (its simulated backend).
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu train_gpt_cpu_asan || exit 1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
export OMP_NUM_THREADS=1
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
args="--train-data $d/train.bin --layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16
      --batch 2 --steps 3 --val-every 0 --sample-every 0 --lr 1e-3"
fails=0
check() { # name world accum log trace
  if $PYTHON test/trace_check.py "$5" "$4" "$2" 4 "$3" > $d/check.out 2>&1; then echo "ok   $1: $(cat $d/check.out)"
  else echo "FAIL $1:"; cat $d/check.out; fails=$((fails+1)); fi
}
run() { # name np extra...
  local name=$1 np=$2; shift 2
  mpirun -np $np --oversubscribe ./train_gpt_cpu $args "$@" --log $d/$name.jsonl --trace $d/$name.json > $d/$name.out 2>&1 \
    || { echo "FAIL $name: the run failed"; tail -5 $d/$name.out; fails=$((fails+1)); return 1; }
}
run n1 1 --zero-stage 0 && check n1 1 1 $d/n1.jsonl $d/n1.json
for s in 0 1 2 3; do
  run n2s$s 2 --zero-stage $s --grad-accum 2 && check "2 ranks, stage $s, 2 micro-steps" 2 2 $d/n2s$s.jsonl $d/n2s$s.json
done
run bf16 2 --zero-stage 3 --precision bf16 && check "2 ranks, stage 3, bf16" 2 1 $d/bf16.jsonl $d/bf16.json

# recompute and NVMe in the timeline: stage 3, full recompute, optimizer and parameters on NVMe
# in pieces of 2048 elements. Besides the checks above: one "recompute" span per layer and
# micro-step; the "nvme write" spans' bytes add up to the step log's nvme_write (a transfer is
# the step's that submitted it, even when it drains behind the next forward) and the reads' to
# its nvme_read (a read ahead is the step's whose update uses it, wherever it started; the last
# step's may still be in flight when the trace is written: no more than), each wait for NVMe on the compute lane, and the log's exposed_io_ms (core/nvme.h's own timing of its
# waits, inside those spans) not above rank 0's "wait nvme" spans.
mkdir -p $d/nvme
if run nvme 2 --zero-stage 3 --recompute full --offload-optimizer nvme --offload-param nvme --nvme-path $d/nvme \
       --nvme-buffer-size 2048 --nvme-buffers 3; then
  check "2 ranks, stage 3, recompute, NVMe" 2 1 $d/nvme.jsonl $d/nvme.json
  if $PYTHON - $d/nvme.json $d/nvme.jsonl > $d/nvme_check.out 2>&1 <<'PY'; then echo "ok   $(cat $d/nvme_check.out)"
import json, sys
from collections import defaultdict
t = json.load(open(sys.argv[1]))["traceEvents"]
log = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"step"') and '"loss"' in l]
bad = []
X = [e for e in t if e.get("ph") == "X" and e["pid"] == 0]
rec = defaultdict(int)
for e in X:
    if e["name"] == "recompute": rec[(e["args"]["step"], e["args"]["micro"])] += 1
if sorted(rec.values()) != [2] * len(log): bad.append(f"recompute spans per micro-step {dict(rec)}, want 2 (layers) each")
for s in log:
    n = s["step"]
    w = sum(e["args"].get("bytes", 0) for e in X if e["name"] == "nvme write" and e["args"]["step"] == n)
    r = sum(e["args"].get("bytes", 0) for e in X if e["name"] == "nvme read" and e["args"]["step"] == n)
    waits = sum(e["dur"] for e in X if e["name"] == "wait nvme" and e["args"]["step"] == n) / 1e3
    if w != s["nvme_write"] or w <= 0: bad.append(f"step {n}: nvme write spans {w} bytes, log {s['nvme_write']}")
    # a read ahead is the step's whose update uses it; only the last step's may still be in flight
    if not 0 < r <= s["nvme_read"] or (r != s["nvme_read"] and n != log[-1]["step"]):
        bad.append(f"step {n}: nvme read spans {r} bytes, log {s['nvme_read']}")
    if s["exposed_io_ms"] > waits + 0.5:
        bad.append(f"step {n}: exposed_io_ms {s['exposed_io_ms']} vs wait nvme spans {waits:.3f} ms")
if any(e["tid"] != 0 for e in X if e["name"] == "wait nvme"): bad.append("a wait nvme span off the compute lane")
print("; ".join(bad) if bad else f"NVMe and recompute in the trace: writes = the log's nvme_write, reads = its nvme_read, "
      f"2 recompute spans per micro-step ({len(log)} steps)")
sys.exit(1 if bad else 0)
PY
  else echo "FAIL NVMe/recompute trace: $(cat $d/nvme_check.out)"; fails=$((fails+1)); fi
fi

# the same losses without --trace
mpirun -np 2 --oversubscribe ./train_gpt_cpu $args --zero-stage 3 --grad-accum 2 --log $d/plain.jsonl > $d/plain.out 2>&1
losses() { $PYTHON -c "import json,sys; print([json.loads(l)['loss'] for l in open(sys.argv[1]) if '\"loss\"' in l])" "$1"; }
if [ "$(losses $d/plain.jsonl)" = "$(losses $d/n2s3.jsonl)" ] && [ -n "$(losses $d/plain.jsonl)" ]; then
  echo "ok   losses with and without --trace identical: $(losses $d/plain.jsonl)"
else echo "FAIL losses differ with --trace: $(losses $d/plain.jsonl) vs $(losses $d/n2s3.jsonl)"; fails=$((fails+1)); fi

# a trace file that cannot be written: one line naming it, before training
mpirun -np 2 --oversubscribe ./train_gpt_cpu $args --trace $d/no/such/dir/t.json > $d/bad.out 2> $d/bad.err; rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c . $d/bad.err)" -ge 1 ] && grep -q "^error: $d/no/such/dir/t.json: cannot open trace file$" $d/bad.err \
   && ! grep -q "^step" $d/bad.out; then echo "ok   unwritable --trace: $(head -1 $d/bad.err)"
else echo "FAIL unwritable --trace (rc $rc):"; cat $d/bad.err; fails=$((fails+1)); fi

# under the sanitizers: a traced run, and the model's predicted trace
export ASAN_OPTIONS=detect_leaks=0
if mpirun -np 2 --oversubscribe ./train_gpt_cpu_asan $args --zero-stage 3 --log $d/asan.jsonl --trace $d/asan.json > $d/asan.out 2>&1 \
   && ! grep -q "runtime error\|AddressSanitizer" $d/asan.out; then check "ASan/UBSan, 2 ranks, stage 3" 2 1 $d/asan.jsonl $d/asan.json
else echo "FAIL the ASan/UBSan run:"; grep -m5 "runtime error\|AddressSanitizer\|error" $d/asan.out; fails=$((fails+1)); fi
if ./train_gpt_cpu_asan --plan --time --hardware h100-80gb-sxm --model d48 --precision bf16 --zero-stage 3 --world 1024 \
     --batch 8 --seq-len 1024 --trace $d/pred.json > $d/pred.out 2>&1 && ! grep -q "runtime error\|AddressSanitizer" $d/pred.out \
   && $PYTHON -c "import json,sys; t=json.load(open(sys.argv[1])); assert t['otherData']['predicted']" $d/pred.json; then
  echo "ok   ASan/UBSan: --plan --time --trace (d48, 1,024 ranks)"
else echo "FAIL ASan/UBSan --plan --time:"; tail -5 $d/pred.out; fails=$((fails+1)); fi

# the GPU trainer on the emulator (built by test_gpu_emu too)
if make -s test/bin/train_gpt_emu_fp32 > $d/emu_build.out 2>&1; then
  gargs="--train-data $d/train.bin --layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16
         --batch 2 --steps 2 --val-every 0 --sample-every 0 --zero-stage 2"
  if mpirun -np 2 --oversubscribe test/bin/train_gpt_emu_fp32 $gargs --log $d/gpu.jsonl --trace $d/gpu.json > $d/gpu.out 2>&1; then
    check "GPU trainer (emulated), 2 ranks, stage 2" 2 1 $d/gpu.jsonl $d/gpu.json
  else echo "FAIL the emulated GPU run failed"; tail -5 $d/gpu.out; fails=$((fails+1)); fi
  mpirun -np 2 --oversubscribe test/bin/train_gpt_emu_fp32 $gargs --log $d/gpu_plain.jsonl > $d/gpu_plain.out 2>&1
  if grep '"step"' $d/gpu_plain.jsonl | grep '"comm_ms":null,"exposed_comm_ms":null' > /dev/null \
     && [ "$(losses $d/gpu_plain.jsonl)" = "$(losses $d/gpu.jsonl)" ]; then
    echo "ok   GPU trainer without --trace: comm_ms null (its host does not wait for collectives), same losses"
  else echo "FAIL GPU trainer without --trace:"; grep '"step"' $d/gpu_plain.jsonl | head -2; fails=$((fails+1)); fi
else
  echo "FAIL building the emulated GPU trainer"; tail -5 $d/emu_build.out; fails=$((fails+1))
fi
echo "$fails failure(s)"
[ $fails -eq 0 ]
