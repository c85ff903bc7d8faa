#!/usr/bin/env bash
# Two hosts on one machine (../shared/DESIGN.md section 12): two network namespaces, each with its
# own hostname (UTS namespace), joined by a veth pair; mpirun starts in the first, and reaches
# the second through a stand-in for ssh that carries the command over that link
# (test/netns_rsh.py). Then:
#   - 2 hosts x 2 ranks at ZeRO-3 train with losses identical to 4 ranks on one host;
#   - the link is cut mid-run (checkpoints every 20 steps): every process of the job, on both
#     hosts, is gone within --comm-timeout + 30 s without any kill from outside, and the watchdog's
#     line names the collective (mpirun given the keepalive the trainer asks for: run/job.h);
#   - a rank stopped (SIGSTOP) on the second host, the network fine: the same bound;
#   - the hang's verdicts (run/verdict.h, over each rank's side channel, bound to the job's
#     subnet): after the cut each side names the other host unreachable; the stopped rank is
#     named with the collective, as not answering;
#   - the last checkpoint resumes on one host with 2 ranks at ZeRO-1 and follows the
#     uninterrupted trajectory (resharded: within 2e-5);
#   - without those keepalive options the trainer warns, naming them;
#   - ZeRO++ (qwZ, hpZ groups of 2, qgZ int4) over the two hosts: the ranks find 2 hosts x 2 from
#     MPI (no ZERO_HOST_ID), the run equals the same run posed as two hosts with ZERO_HOST_ID bit
#     for bit, and every rank's comm log (bytes inside the host, across hosts) equals the step-time
#     model's count for 2 nodes x 2 (run/timemodel.h: zero.h's schedule on a simulated backend).
# Skips where network namespaces cannot be made (not root). Removes the namespaces and every
# process in them whatever happens.
# run.sh: alone (it throttles a link and waits on --comm-timeout clocks: another test beside it could stretch them)
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
[ "$(id -u)" -eq 0 ] || { echo "skip: network namespaces need root"; exit 77; }
for c in ip unshare timeout; do command -v $c >/dev/null || { echo "skip: no $c (apt-get install iproute2 util-linux)"; exit 77; }; done
make -s train_gpt_cpu || exit 1
new_scratch multihost
id=$$$RANDOM; A=zc$id-a; B=zc$id-b
cleanup() {
  local rc=$?
  for ns in $A $B; do ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  sleep 0.2
  for ns in $A $B; do ip netns del $ns 2>/dev/null; done
  rm -rf /tmp/ompi.$A.* /tmp/ompi.$B.*
  scratch_cleanup $rc
}
trap cleanup EXIT
ip netns add $A && ip netns add $B || { echo "skip: cannot create network namespaces here"; exit 77; }
ip link add zva netns $A type veth peer name zvb netns $B || { echo "skip: cannot create a veth pair"; exit 77; }
ip -n $A addr add 10.15.0.1/24 dev zva && ip -n $B addr add 10.15.0.2/24 dev zvb || exit 1
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set zva up && ip -n $B link set zvb up || exit 1
# the second host's "sshd", and the agent mpirun runs instead of ssh
(ip netns exec $B unshare --uts sh -c "hostname $B; exec $PYTHON test/netns_rsh.py server 10.15.0.2 2222" > $d/rshd.out 2>&1 &)
printf '#!/bin/sh\nhost=$1; shift\nexec %s %s client "$host" 2222 "$*"\n' "$PYTHON" "$PWD/test/netns_rsh.py" > $d/agent.sh
chmod +x $d/agent.sh
printf '10.15.0.1 slots=2\n10.15.0.2 slots=2\n' > $d/hosts
for _ in $(seq 50); do grep -q listening $d/rshd.out && break; sleep 0.1; done
T=10 # --comm-timeout
keepalive="--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes $(( (T + 10 + 4) / 5 ))"
# on2hosts MPIRUN_OPTIONS -- TRAINER_OPTIONS: mpirun in the first host's namespace, 2 ranks per host
on2hosts() {
  local mpi=() ; while [ "$1" != -- ]; do mpi+=("$1"); shift; done; shift
  ip netns exec $A unshare --uts sh -c "hostname $A; exec mpirun -np 4 --hostfile $d/hosts --mca plm_rsh_agent $d/agent.sh \
    --mca btl_tcp_if_include 10.15.0.0/24 --mca oob_tcp_if_include 10.15.0.0/24 ${mpi[*]} -x OMP_NUM_THREADS=1 \
    $PWD/train_gpt_cpu $*"
}
$PYTHON test/zero_check.py shard $d/train.bin 40000 512 1
args="--train-data $PWD/$d/train.bin --layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16
      --batch 1 --total-batch 64 --lr 2e-3 --lr-schedule constant --warmup 0 --val-every 0 --sample-every 0 --seed 3"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
losses() { grep -so '"step":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' -v from=$2 -v to=${3:-999999} '$2 >= from && $2 <= to {print $4}'; }
jobprocs() { for ns in $A $B; do ip netns pids $ns; done | xargs -r ps -o pid=,args= -p 2>/dev/null | grep -v "netns_rsh.py server" ; }

echo "== 2 hosts x 2 ranks vs 4 ranks on one host, ZeRO-3, 30 steps"
on2hosts $keepalive -- $args --steps 30 --zero-stage 3 --comm-timeout $T --log $PWD/$d/two_hosts.jsonl > $d/two_hosts.out 2>&1 || { tail $d/two_hosts.out; fail "2x2 run"; }
OMP_NUM_THREADS=1 mpirun -np 4 --oversubscribe ./train_gpt_cpu $args --steps 120 --zero-stage 3 --log $d/one_host.jsonl > $d/one_host.out 2>&1 \
  || fail "1x4 run"
grep -q "^| train data" $d/two_hosts.out && [ "$(grep -c . <(losses $d/two_hosts.jsonl 1))" -eq 30 ] || fail "2x2 run did not train 30 steps"
[ "$(losses $d/two_hosts.jsonl 1)" = "$(losses $d/one_host.jsonl 1 30)" ] || fail "2x2 losses differ from 1x4"
echo "losses of the 30 steps identical (last: $(losses $d/two_hosts.jsonl 30))"
grep -q "^warning: this job spans" $d/two_hosts.out && fail "a keepalive warning although mpirun has the options"

# break_job NAME ACTION: a long 2x2 run saving every 20 steps; ACTION at step >= 60; every job process must be gone
# within T + 30 s of it
break_job() {
  local name=$1 action=$2 t0 gone=
  on2hosts $keepalive -- $args --steps 1000000 --zero-stage 3 --comm-timeout $T --out $PWD/$d/$name --save-every 20 \
    --log $PWD/$d/$name.jsonl > $d/$name.out 2>&1 &
  local job=$!
  for _ in $(seq 600); do [ "$(losses $d/$name.jsonl 60 | head -1)" ] && break; sleep 0.1; done
  eval "$action"; t0=$(date +%s.%N)
  for _ in $(seq $(( (T + 30) * 5 ))); do [ -z "$(jobprocs)" ] && ! kill -0 $job 2>/dev/null && { gone=1; break; }; sleep 0.2; done
  local secs; secs=$(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5)
  if [ -n "$gone" ]; then wait $job; echo "$name: every process of the job gone $secs s later; mpirun's exit code $?"
  else fail "$name: after $secs s still running: $(jobprocs | tr '\n' ';')"; fi
  grep -E "^error: rank [0-9]: .* did not complete within $T s at step [0-9]+; a peer is stuck or gone" $d/$name.out | head -2
  grep -Eq "^error: rank [0-9]: .* did not complete within $T s at step [0-9]+; a peer is stuck or gone" $d/$name.out \
    || fail "$name: no watchdog line"
}
echo "== the link cut mid-run (--comm-timeout $T)"
break_job partition "ip -n $A link set zva down"
ip -n $A link set zva up
# the verdict (run/verdict.h) of each side names the other host as unreachable (ranks 0, 1 on $A, 2, 3 on $B)
grep -E "^hang: host" $d/partition.out
grep -Eq "^hang: host ($B \(ranks 2, 3\) is unreachable from $A|$A \(ranks 0, 1\) is unreachable from $B):" $d/partition.out \
  || fail "partition: no verdict naming the unreachable host"
echo "== a rank stopped on the second host, the network fine"
break_job stopped 'kill -STOP $(ip netns pids $B | xargs -r ps -o pid=,comm= -p | awk "\$2 == \"train_gpt_cpu\" {print \$1; exit}")'
grep -E "^hang: rank [23] \($B\) has not" $d/stopped.out
# (the collective the others wait in is a unit's, or the step's sum of scalars: where the stop lands)
grep -Eq "^hang: rank [23] \($B\) has not completed its part of [a-z_]+ #[0-9]+ \((unit [0-9]+ = .*|scalars), step [0-9]+\).*it does not answer: stopped or hung" $d/stopped.out \
  || fail "stopped: no verdict naming the stopped rank on $B"

echo "== the last checkpoint before the cut, resumed on one host: 2 ranks, ZeRO-1"
k=$(sed 's/step_0*//' $d/partition/latest)
OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu ${args/--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16/} \
  --steps $((k + 10)) --zero-stage 1 --resume $d/partition --log $d/resumed.jsonl > $d/resumed.out 2>&1 || { tail $d/resumed.out; fail "resume"; }
worst=$(paste <(losses $d/resumed.jsonl 1) <(losses $d/one_host.jsonl $((k + 1)) $((k + 10))) \
        | awk 'NF == 2 {n++; d=$1-$2; if (d<0) d=-d; if (d>m) m=d} END {printf "%d %.2e", n, m}')
echo "resumed from step $k: steps $((k + 1))-$((k + 10)), worst |loss difference| from the uninterrupted run: ${worst#* }"
[ "${worst% *}" = 10 ] && awk -v w=${worst#* } 'BEGIN {exit !(w < 2e-5)}' || fail "resumed trajectory: $worst"

echo "== without keepalive options the trainer warns"
on2hosts -- $args --steps 2 --comm-timeout $T > $d/warn.out 2>&1 || fail "run without keepalive options"
grep "^warning: this job spans 2 hosts" $d/warn.out
grep -q "^warning: this job spans 2 hosts and mpirun notices a lost one after 180-480 s .*--mca oob_tcp_keepalive_probes 4\` to mpirun$" $d/warn.out \
  || fail "no warning naming the keepalive options"
echo "== ZeRO++ over the two hosts: hosts from MPI, as ZERO_HOST_ID poses them"
pp="--zero-stage 3 --zeropp-qwz 1 --zeropp-hpz 2 --zeropp-qgz 4 --zeropp-block 64"
ppargs="$args $pp --steps 3"
on2hosts $keepalive -- $ppargs --comm-timeout $T --log $PWD/$d/pp_hosts.jsonl > $d/pp_hosts.out 2>&1 || { tail $d/pp_hosts.out; fail "ZeRO++ 2x2 run"; }
grep "^ZeRO++:" $d/pp_hosts.out
grep -q "^ZeRO++: qwZ int8, hpZ groups of 2, qgZ int4; blocks of 64; 2 hosts x 2 ranks$" $d/pp_hosts.out \
  || fail "ZeRO++ over the namespaces did not find 2 hosts x 2 ranks"
OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 -x ZERO_HOST_ID=0 ./train_gpt_cpu $ppargs --log $d/pp_ids.jsonl : \
  -np 2 -x ZERO_HOST_ID=1 ./train_gpt_cpu $ppargs --log $d/pp_ids.jsonl > $d/pp_ids.out 2>&1 || { tail $d/pp_ids.out; fail "ZeRO++ ZERO_HOST_ID run"; }
[ "$(grep -c . <(log_steps $d/pp_hosts.jsonl))" -eq 3 ] && cmp -s <(log_steps $d/pp_hosts.jsonl) <(log_steps $d/pp_ids.jsonl) \
  && echo "the 3 steps bit for bit equal to the ZERO_HOST_ID run's" || fail "ZeRO++ over the namespaces differs from ZERO_HOST_ID's run"
./train_gpt_cpu --plan --time --json --world 4 --gpus-per-node 2 --layers 2 --channels 32 --heads 2 --vocab-size 512 \
  --max-seq-len 16 --seq-len 16 --batch 1 --total-batch 64 $pp > $d/pp_plan.json 2>&1 || { cat $d/pp_plan.json; fail "ZeRO++ plan"; }
$PYTHON test/zeropp_comm_check.py "bytes inside/across per rank, steps 2-3, the namespaces' run against the model and ZERO_HOST_ID's" \
  $d/pp_plan.json $d/pp_hosts.jsonl $d/pp_ids.jsonl || fail "ZeRO++ comm bytes"

echo "$fails failures"
[ $fails -eq 0 ]
