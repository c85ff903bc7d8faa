#!/usr/bin/env bash
# When a job of the GPU trainer hangs, the verdict says which rank and which collective (issue 44),
# on the CUDA emulator (test/cuda_emu/), whose NCCL is asynchronous to the host as NCCL is:
#   1. the emulator: an all-reduce that rank 1 joins 1 s late leaves rank 0's event behind it not
#      ready (cudaEventQuery) until then, and then the sum is right (cuda_emu_selftest nccl_async);
#   2. 3 ranks, rank 1 stopped (SIGSTOP) after step 2: within --comm-timeout + 10 s the verdict
#      names it (it does not answer) and the collective the others wait in, every process is gone,
#      and that collective is the one the device is stuck in, not the last one the host queued:
#      - it is the one the backends' watchdogs name (operation and unit: their slots' completion
#        events, a mechanism apart from the recorder);
#      - in hang.json the waiting ranks' recorders have every collective before it complete and
#        none after it (a device completes them in order; the host queues far ahead).
# run.sh: alone (it stops ranks and waits on --comm-timeout clocks: another test beside it could stretch them)
set -uo pipefail
cd "$(dirname "$0")/.."
make -s test/bin/train_gpt_emu_fp32 test/bin/cuda_emu_selftest || exit 1
. test/lib.sh; new_scratch gpu_hang
host=$(hostname)
fail() { echo "FAIL: $*"; exit 1; }

echo "--- the emulator's NCCL is asynchronous"
out=$(mpirun -np 2 --oversubscribe --bind-to none test/bin/cuda_emu_selftest nccl_async 2>&1) || fail "nccl_async: $out"
echo "$out"
echo "$out" | grep -Eq "^nccl_async: first query not ready, complete after (0\.[5-9]|[1-9][0-9.]*) s, sum 3 5 7 9$" \
  || fail "nccl_async: an event behind a collective a peer has not joined was ready, or the sum is wrong"

echo "--- SIGSTOP rank 1 of 3"
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
timeout=4
OMP_NUM_THREADS=1 mpirun -np 3 --oversubscribe --bind-to none test/bin/train_gpt_emu_fp32 --train-data $d/train.bin \
  --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --batch 2 --val-every 0 --sample-every 0 \
  --zero-stage 3 --layers 2 --steps 1000000 --comm-timeout $timeout --log $d/log.jsonl > $d/out.txt 2> $d/err.txt &
job=$!
for _ in $(seq 600); do grep -q '"step":2,' $d/log.jsonl 2>/dev/null && break; kill -0 $job 2>/dev/null || break; sleep 0.1; done
grep -q '"step":2,' $d/log.jsonl || { kill -9 $job; fail "the job did not train 2 steps: $(tail -n 3 $d/err.txt)"; }
ranks=$(pgrep -f "^test/bin/train_gpt_emu_fp32 .*--log $d/log.jsonl" | tr "\n" " ")
victim=$(for p in $ranks; do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && echo $p; done)
[ -n "$victim" ] || { kill -9 $job; fail "no rank 1 among $ranks"; }
kill -STOP $victim
t0=$(date +%s.%N)
limit=$((timeout + 10))
for _ in $(seq $((limit * 10))); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
if kill -0 $job 2>/dev/null; then kill -9 $job $ranks 2>/dev/null; fail "job still running after $limit s"; fi
wait $job; rc=$?
echo "job ended $(echo "$(date +%s.%N) - $t0" | bc) s after the stop, exit code $rc"
[ $rc -ne 0 ] || fail "exit code 0"
for _ in $(seq 50); do left=$(for p in $ranks; do kill -0 $p 2>/dev/null && echo -n "$p "; done); [ -z "$left" ] && break; sleep 0.1; done
[ -z "$left" ] || { kill -9 $ranks 2>/dev/null; fail "rank processes $left left 5 s after the job ended"; }
grep "^hang\|^error" $d/err.txt
[ "$(grep -c "^hang: verdict of rank" $d/err.txt)" -eq 1 ] || fail "not one verdict"
line=$(grep -E "^hang: rank 1 \($host\) has not completed its part of [a-z_]+ #[0-9]+ \((unit [0-9]+ = [a-z0-9 ]+|scalars), step [0-9]+.*it does not answer: stopped or hung" $d/err.txt) \
  || fail "the verdict does not name rank 1, a collective, and that rank 1 does not answer"
op=$(echo "$line" | sed -E 's/.*part of ([a-z_]+) #.*/\1/'); seq=$(echo "$line" | sed -E 's/.*part of [a-z_]+ #([0-9]+) .*/\1/')
if echo "$line" | grep -q "#$seq (scalars,"; then unit=-1; watch="$op of scalars"
else unit=$(echo "$line" | sed -E 's/.*#[0-9]+ \(unit ([0-9]+) .*/\1/'); watch="$op of unit $unit \("; fi
# the watchdogs of ranks 0 and 2 name the oldest collective whose completion event is not ready:
# the verdict's, or, for a rank whose part of it completed (rank 1's data left before the stop),
# the next one the verdict says that rank waits in
for r in 0 2; do
  w=$watch
  next=$(grep -E "^hang: rank $r \($host\) has completed its part of #$seq and waits in [a-z_]+ #[0-9]+ \((unit [0-9]+|scalars)" $d/err.txt)
  if [ -n "$next" ]; then
    nop=$(echo "$next" | sed -E 's/.*waits in ([a-z_]+) #.*/\1/')
    if echo "$next" | grep -q "waits in $nop #[0-9]* (scalars"; then w="$nop of scalars"
    else w="$nop of unit $(echo "$next" | sed -E 's/.*waits in [a-z_]+ #[0-9]+ \(unit ([0-9]+).*/\1/') \("; fi
  fi
  grep -Eq "^error: rank $r: $w.* did not complete within $timeout s" $d/err.txt \
    || fail "rank $r's watchdog does not name $w, the collective the verdict says it waits in: $(grep "^error: rank $r:" $d/err.txt)"
done
$PYTHON - $d/hang.json $seq $unit <<'PY' || fail "hang.json"
import json, sys
j = json.load(open(sys.argv[1]))
seq, unit = int(sys.argv[2]), int(sys.argv[3])
assert j["stuck"]["seq"] == seq and j["stuck"]["unit"] == unit, j["stuck"]
for r in j["ranks"]:
    if r["rank"] == 1:
        assert r["status"] == "no answer", r
        continue
    # it waits in the stuck collective, or (its part of that one done) in a later one
    w = r["wait_seq"]
    assert w >= seq, (r["rank"], w)
    done = {e["seq"]: e["state"] == "done" for e in r["recorder"]}
    assert w in done and not done[w], (r["rank"], "the collective it waits in is complete or missing")
    assert all(d for s, d in done.items() if s < w), (r["rank"], "one before the collective it waits in is not complete")
    assert not any(d for s, d in done.items() if s > w), (r["rank"], "one after the collective it waits in is complete")
    print("rank %d: %d collectives started, those before #%d complete, #%d and the %d after it not" %
          (r["rank"], r["started"], w, w, sum(1 for s in done if s > w)))
PY
echo ok
