#!/usr/bin/env bash
# A distributed job never hangs: a rank that dies ends the whole job within seconds, a killed
# mpirun takes its ranks with it, and a rank that stops answering (SIGSTOP: alive, but silent,
# like a stuck GPU) trips the --comm-timeout watchdog, which names the collective, the unit, the
# step and the rank.
# run.sh: alone (it kills and stops ranks and waits on --comm-timeout clocks: another test beside it could stretch them)
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch zero_failures
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
args="--train-data $d/train.bin --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16
      --seq-len 16 --batch 2 --steps 1000000 --val-every 0 --sample-every 0"

# Starts a 2-rank ZeRO-3 job in the background; sets $job and $ranks once it is training.
start_job() {
  rm -f $d/log.jsonl
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu $args --zero-stage 3 "$@" \
    --log $d/log.jsonl > $d/out.txt 2> $d/err.txt &
  job=$!
  for _ in $(seq 100); do grep -q '"step":3,' $d/log.jsonl 2>/dev/null && break; sleep 0.2; done
  ranks=$(pgrep -f "^./train_gpt_cpu .*--log $d/log.jsonl" | tr "\n" " ")
  [ "$(echo $ranks | wc -w)" -ge 2 ] || { echo "job did not start: $ranks"; cat $d/err.txt; kill $job; exit 1; }
}
# Waits up to $1 seconds for the job to end; prints how long it took; fails on timeout.
wait_job() {
  local t0=$(date +%s.%N)
  for _ in $(seq $(($1 * 10))); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then echo "FAIL: job still running after $1 s"; kill -9 $job $ranks; exit 1; fi
  wait $job; rc=$?
  echo "job ended $(echo "$(date +%s.%N) - $t0" | bc) s later with exit code $rc"
  [ $rc -ne 0 ] || { echo "FAIL: exit code 0"; exit 1; }
}

echo "--- kill -9 one rank"
start_job --layers 2
victim=$(echo $ranks | awk '{print $2}')
kill -9 $victim
wait_job 20

echo "--- kill -9 of mpirun itself: its ranks end with it (OpenMPI's doing: none trains on, orphaned)"
start_job --layers 2
kill -9 $job; wait $job 2>/dev/null
for _ in $(seq 200); do left=$(for p in $ranks; do kill -0 $p 2>/dev/null && echo -n "$p "; done); [ -z "$left" ] && break; sleep 0.1; done
[ -z "$left" ] || { echo "FAIL: ranks $left still running 20 s after mpirun was killed"; kill -9 $ranks; exit 1; }
echo "no rank left"

echo "--- SIGSTOP one rank: the watchdog fires after --comm-timeout 2"
# With 16 micro-steps per step nearly every collective is a unit's gather or reduce-scatter,
# so the rank left waiting names one; a few tries in case it waited on the loss instead.
named=0
for try in 1 2 3; do
  start_job --comm-timeout 2 --layers 4 --total-batch 1024
  victim=$(echo $ranks | awk '{print $2}')
  kill -STOP $victim
  wait_job 30
  kill -9 $victim 2>/dev/null
  grep "did not complete" $d/err.txt | head -1
  grep -Eq "error: rank [01]: (all_reduce|reduce_scatter|all_gather)[a-z ]*( of unit [0-9]+ \([a-z0-9 ]+\)| \([a-z, ]+\)) did not complete within 2 s at step [0-9]+; a peer is stuck or gone" $d/err.txt \
    || { echo "FAIL: no watchdog message naming the collective, the step and the rank"; cat $d/err.txt; exit 1; }
  grep -Eq "of unit [0-9]+ \((embeddings|layer [0-9]+|final layernorm)\) did not complete" $d/err.txt && { named=1; break; }
done
[ $named -eq 1 ] || { echo "FAIL: in 3 tries the watchdog never named a unit"; exit 1; }
echo ok
