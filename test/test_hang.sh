#!/usr/bin/env bash
# When a job hangs, the verdict says which rank and which collective (issue 44; run/verdict.h).
# 4 ranks on one host, --comm-timeout 2, each fault within --comm-timeout + 10 s and no process
# left afterwards:
#   - one rank stopped (SIGSTOP): the verdict names it, that it does not answer, and the
#     collective (operation, number, unit) the others wait in; the operation and unit are the
#     ones the watchdogs' own lines name (the backend's words, not the recorder's);
#   - one rank skips collective #300 (ZERO_TEST_SKIP, the test-only fault hook): the verdict
#     names that rank and the divergence at #300; with --check-collectives the job stops at #300
#     itself, before any timeout, naming the same collectives (a second mechanism: fingerprints
#     all-reduced on a communicator of their own);
#   - one rank killed (kill -9): the verdict, if the watchdog fires before mpirun ends the job on
#     its own, names the rank as gone.
# And the side channel: connections without the job's token (garbage, a wrong token, nothing,
# a slow partial query) get nothing back, are counted, and change nothing (the losses are those
# of a run without them); its parsers take a fuzzer's inputs (test/fuzz_side.c, under ASan/UBSan).
# run.sh: alone (it stops ranks and waits on --comm-timeout clocks: another test beside it could stretch them)
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch hang
host=$(hostname)
fail() { echo "FAIL: $*"; exit 1; }

echo "--- the side channel's parsers under a fuzzer (ASan, UBSan)"
mpicc -std=c11 -D_GNU_SOURCE -g -O1 -I. -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wall -Wextra -Werror \
  test/fuzz_side.c -o $d/fuzz_side || fail "fuzz_side does not build"
$d/fuzz_side || fail "fuzz_side"

$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
args="--train-data $d/train.bin --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16
      --seq-len 16 --batch 2 --val-every 0 --sample-every 0 --zero-stage 3 --layers 4"

# start_job NP ENV... -- OPTIONS: a job in the background; sets $job and $ranks once it trains
start_job() {
  local np=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("-x" "$1"); shift; done; shift
  rm -f $d/log.jsonl $d/hang.json
  OMP_NUM_THREADS=1 mpirun -np $np --oversubscribe "${envs[@]}" ./train_gpt_cpu $args "$@" --log $d/log.jsonl \
    > $d/out.txt 2> $d/err.txt &
  job=$!
  for _ in $(seq 150); do grep -q '"step":2,' $d/log.jsonl 2>/dev/null && break; kill -0 $job 2>/dev/null || break; sleep 0.2; done
  ranks=$(pgrep -f "^./train_gpt_cpu .*--log $d/log.jsonl" | tr "\n" " ")
}
# the pid of rank $1 of the job
rank_pid() { for p in $ranks; do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo $p; done; }
# wait_job SECONDS: the job must end within them, with every rank gone; prints how long it took
wait_job() {
  local t0=$(date +%s.%N)
  for _ in $(seq $(($1 * 10))); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  if kill -0 $job 2>/dev/null; then kill -9 $job $ranks 2>/dev/null; fail "job still running after $1 s"; fi
  wait $job; rc=$?
  echo "job ended $(echo "$(date +%s.%N) - $t0" | bc) s later with exit code $rc"
  local left
  for _ in $(seq 50); do left=$(for p in $ranks; do kill -0 $p 2>/dev/null && echo -n "$p "; done); [ -z "$left" ] && break; sleep 0.1; done
  [ -z "$left" ] || { kill -9 $ranks 2>/dev/null; fail "rank processes $left left 5 s after the job ended"; }
  [ $rc -ne 0 ] || fail "exit code 0"
}
verdicts() { grep -c "^hang: verdict of rank" $d/err.txt; }

echo "--- SIGSTOP rank 2 of 4: the verdict names it and the collective the others wait in"
start_job 4 -- --steps 1000000 --comm-timeout 2 --total-batch 1024
victim=$(rank_pid 2); [ -n "$victim" ] || fail "no rank 2 among $ranks"
kill -STOP $victim
wait_job 12
kill -9 $victim 2>/dev/null
grep "^hang" $d/err.txt
[ "$(verdicts)" -eq 1 ] || fail "$(verdicts) verdicts, not one"
# (a unit's collective, or the step's sum of scalars when rank 2 stopped between a step's last
# collective and that sum: the others then wait there, hang.json's unit -1)
line=$(grep -E "^hang: rank 2 \($host\) has not completed its part of [a-z_]+ #[0-9]+ \((unit [0-9]+ = [a-z0-9 ]+|scalars), step [0-9]+" $d/err.txt) \
  || fail "the verdict does not name rank 2 and a collective"
echo "$line" | grep -q "it does not answer: stopped or hung" || fail "the verdict does not say rank 2 does not answer"
op=$(echo "$line" | sed -E 's/.*part of ([a-z_]+) #.*/\1/'); seq=$(echo "$line" | sed -E 's/.*part of [a-z_]+ #([0-9]+) .*/\1/')
if echo "$line" | grep -q "#$seq (scalars,"; then unit=-1; what="scalars"; watch="$op of scalars"
else unit=$(echo "$line" | sed -E 's/.*#[0-9]+ \(unit ([0-9]+) .*/\1/'); what="unit $unit "; watch="$op of unit $unit \(.*\)"; fi
# independent: the backend's watchdog line names the collective it waited in by operation and unit
grep -Eq "^error: rank [013]: $watch.* did not complete within 2 s" $d/err.txt \
  || fail "no watchdog line names $op of $what"
grep -Eq "^hang:   rank [013] \($host\): (waiting|stopping) in $op #$seq \($what" $d/err.txt || fail "no rank waits in #$seq"
$PYTHON - $d/hang.json $seq $unit <<'PY' || fail "hang.json"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["stuck"]["seq"] == int(sys.argv[2]) and j["stuck"]["unit"] == int(sys.argv[3]), j["stuck"]
r2 = [r for r in j["ranks"] if r["rank"] == 2][0]
assert r2["status"] == "no answer", r2
assert all(r["status"] in ("answered", "self") and len(r["recorder"]) > 0 for r in j["ranks"] if r["rank"] != 2)
print("hang.json: stuck in #%d, rank 2 %s" % (j["stuck"]["seq"], r2["status"]))
PY

echo "--- rank 1 skips collective #300 (ZERO_TEST_SKIP): the verdict names the divergence"
start_job 4 ZERO_TEST_SKIP=1:300 -- --steps 30 --comm-timeout 2 --total-batch 1024
wait_job 30
grep "^hang" $d/err.txt
# The ranks 0, 2, 3 issued the other collective. Mismatched collectives are undefined in MPI: the
# one rank 1 started may be matched with another rank's and corrupt its memory (OpenMPI's libnbc
# has aborted rank 0 so, malloc_consolidate): a rank that died is left out of the list, and then
# the verdict must say it is gone.
divs=$(grep -E "^hang: rank 1 issued [a-z_]+ of unit [0-9]+ = [a-z0-9 ]+ \([0-9]+ bytes\) where ranks? [0-9, ]+ issued [a-z_]+ of unit [0-9]+ = [a-z0-9 ]+ \([0-9]+ bytes\): the ranks' schedules diverged at #300$" $d/err.txt) \
  || fail "the verdict does not name rank 1's divergence at #300"
while read -r div; do
  listed=$(echo "$div" | sed -E 's/.* where ranks? ([0-9, ]+) issued .*/\1/')
  for r in 0 2 3; do
    echo ", $listed," | grep -q ", $r," || grep -qE "^hang:   rank $r \(.*\): gone" $d/err.txt \
      || fail "rank $r is neither among those that issued the other collective ($listed) nor gone"
  done
done <<< "$divs"
# one verdict; or two when MPI itself failed on a rank first (its own verdict, then it died, and the
# watchdog of another rank gave the second), each naming the same divergence
nv=$(verdicts)
[ "$nv" -eq 1 ] || { [ "$nv" -eq 2 ] && grep -q "^hang: verdict of rank [0-9]* (.*), on which MPI failed" $d/err.txt; } \
  || fail "$nv verdicts, not one (or two where MPI failed on a rank first)"
what=$(echo "$divs" | head -1 | sed -E 's/^hang: rank 1 issued (.*): the ranks.*/\1/; s/ where ranks? [0-9, ]+ issued / where X /')

echo "--- the same with --check-collectives: stopped at #300 itself, before any timeout"
start_job 4 ZERO_TEST_SKIP=1:300 -- --steps 30 --comm-timeout 2 --total-batch 1024 --check-collectives
wait_job 30
grep "^error" $d/err.txt
[ $rc -eq 4 ] || fail "exit code $rc, not 4"
chk=$(grep -E "^error: rank 1 is about to start .* where ranks 0, 2, 3 are about to start .*: the ranks' schedules diverged at #300; the job stops before any rank starts it$" $d/err.txt) \
  || fail "--check-collectives does not name rank 1's divergence at #300"
[ "$(echo "$chk" | sed -E 's/^error: rank 1 is about to start (.*): the ranks.*/\1/; s/ where ranks? [0-9, ]+ are about to start / where X /')" = "$what" ] \
  || fail "the check and the verdict name different collectives: '$chk' / '$what'"
grep -q "did not complete\|^hang: verdict" $d/err.txt && fail "a timeout or a verdict although the check stopped the job"

echo "--- kill -9 rank 3 of 4"
start_job 4 -- --steps 1000000 --comm-timeout 1 --total-batch 1024
victim=$(rank_pid 3); [ -n "$victim" ] || fail "no rank 3 among $ranks"
kill -9 $victim
wait_job 11
grep "^hang" $d/err.txt
if [ "$(verdicts)" -gt 0 ]; then
  # (the kill lands in whichever collective the ranks are in: a unit's, or the step's sum of scalars)
  grep -Eq "^hang: rank 3 \($host\) has not completed its part of [a-z_]+ #[0-9]+ \((unit |scalars).*it does not answer: gone" $d/err.txt \
    || fail "the verdict does not name rank 3 as gone"
else
  echo "(mpirun ended the job before a watchdog fired: no verdict)"
fi

echo "--- junk on the side channel: dropped, counted, nothing changed"
junk_run() { # $1: junk (the job runs until the junk is sent, then SIGUSR1 stops it after a step) or clean (as many
             # steps); the job's step lines into $d/steps.$1
  local steps=1000000
  [ "$1" = clean ] && steps=$(grep -c '"loss"' $d/steps.junk)
  start_job 2 -- --steps $steps --lr-schedule constant --total-batch 512 --layers 2 --comm-timeout 20
  if [ "$1" = junk ]; then
    # (the side channel of a job on one host listens on 127.0.0.1; OpenMPI's own listeners elsewhere)
    ports=$(ss -ltnpH | grep -E "pid=($(echo $ranks | tr ' ' '|'))," | awk '{print $4}' | grep '^127\.0\.0\.1:' | sed 's/.*://')
    [ "$(echo $ports | wc -w)" -eq 2 ] || fail "the side channel ports of $ranks: '$ports'"
    $PYTHON - $ports <<'PY' || fail "junk"
import os, socket, sys, time
for port in map(int, sys.argv[1:]):
    def send(payload, hold=0.0):
        s = socket.create_connection(("127.0.0.1", port), timeout=3)
        if payload: s.sendall(payload)
        time.sleep(hold)
        try:
            s.shutdown(socket.SHUT_WR)
            got = s.recv(65536)
        except OSError:  # closed with our bytes unread (a reset), or already (the slow one): nothing sent back
            got = b""
        s.close()
        assert got == b"", "a reply to junk: %r" % got[:40]
    send(os.urandom(32))                                          # garbage of a query's size
    send(os.urandom(5000))                                        # more
    send(b"zc-hangQ" + bytes(16) + bytes(8))                      # the magic, a wrong token
    send(b"")                                                     # nothing
    send(b"zc-hangQ" + bytes(4), hold=1.0)                        # a slow partial query
    send(b"GET / HTTP/1.0\r\n\r\n" + b"x" * 14)                   # something else that talks TCP
print("6 connections to each of ports", sys.argv[1:], "got nothing back")
PY
    kill -USR1 $job
  fi
  for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  wait $job || fail "the job failed: $(tail -3 $d/err.txt)"
  log_steps $d/log.jsonl > $d/steps.$1
  cp $d/err.txt $d/err.$1
}
junk_run junk
junk_run clean
grep "side channel dropped" $d/err.junk
[ "$(grep -c "^note: rank [01]: the side channel dropped 6 connections that did not carry the job's query$" $d/err.junk)" -eq 2 ] \
  || fail "the dropped connections were not counted on both ranks"
[ -s $d/steps.clean ] && cmp $d/steps.clean $d/steps.junk || fail "the losses changed with junk on the side channel"
echo "losses identical over $(wc -l < $d/steps.junk) steps"
echo ok
