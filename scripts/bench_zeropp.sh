#!/usr/bin/env bash
# make bench-zeropp: ZeRO-3 against ZeRO++ over two simulated hosts (as test_multihost does: two
# network namespaces with their own hostnames, a veth pair, mpirun reaching the second through
# test/netns_rsh.py), the link throttled to 1 Gbit/s on both ends (tc tbf). GPT-2 d12, bf16,
# ZeRO-3, 2 hosts x 2 ranks (the CPU trainer), one run each of ZeRO-3, qwZ, hpZ (groups of 2),
# qgZ (int4) and all three, side by side. The bytes crossing the link are the veth's own counters
# (ip -s link, both directions, both ends: what the kernel sent, independent of the trainer's
# count), over the whole run divided by its steps (start-up's few KB included); the step time is
# the trainer's mean after the first step. Needs root (network namespaces). Prints a table.
#   STEPS (default 4), BATCH (1), SEQ (32, as the README's figures), RATE (1gbit), MODEL ("--model d12"; a smoke test: a tiny
#   shape), CONFIGS (a subset of: zero3 qwz hpz qgz all)
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "bench-zeropp: network namespaces need root"; exit 1; }
PY=${PYTHON:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS=${STEPS:-4} BATCH=${BATCH:-1} SEQ=${SEQ:-32} RATE=${RATE:-1gbit} MODEL=${MODEL:-"--model d12"}
CONFIGS=${CONFIGS:-"zero3 qwz hpz qgz all"}
make -s train_gpt_cpu || exit 1
d=$(mktemp -d "${TMPDIR:-/tmp}/bench_zeropp.XXXXXX")
id=$$$RANDOM; A=zb$id-a; B=zb$id-b
cleanup() {
  for ns in $A $B; do ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  sleep 0.2
  for ns in $A $B; do ip netns del $ns 2>/dev/null; done
  rm -rf /tmp/ompi.$A.* /tmp/ompi.$B.* "${TMPDIR:-/tmp}"/ompi.$A.* "${TMPDIR:-/tmp}"/ompi.$B.*; [ -n "${KEEP:-}" ] || rm -rf "$d"
}
trap cleanup EXIT
ip netns add $A && ip netns add $B || { echo "bench-zeropp: cannot create network namespaces"; exit 1; }
ip link add zva netns $A type veth peer name zvb netns $B || exit 1
ip -n $A addr add 10.16.0.1/24 dev zva && ip -n $B addr add 10.16.0.2/24 dev zvb || exit 1
for ns in $A $B; do ip -n $ns link set lo up; done
ip -n $A link set zva up && ip -n $B link set zvb up || exit 1
# 1 Gbit/s each way: a token bucket on each end's egress
ip netns exec $A tc qdisc add dev zva root tbf rate $RATE burst 256kb latency 100ms || exit 1
ip netns exec $B tc qdisc add dev zvb root tbf rate $RATE burst 256kb latency 100ms || exit 1
(ip netns exec $B unshare --uts sh -c "hostname $B; exec $PY test/netns_rsh.py server 10.16.0.2 2222" > $d/rshd.out 2>&1 &)
printf '#!/bin/sh\nhost=$1; shift\nexec %s %s client "$host" 2222 "$*"\n' "$PY" "$PWD/test/netns_rsh.py" > $d/agent.sh
chmod +x $d/agent.sh
printf '10.16.0.1 slots=2\n10.16.0.2 slots=2\n' > $d/hosts
for _ in $(seq 50); do grep -q listening $d/rshd.out && break; sleep 0.1; done
link_bytes() { # tx of both ends: every byte that crossed, either way
  echo $(( $(ip -n $A -s -j link show zva | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])') +
           $(ip -n $B -s -j link show zvb | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])') ))
}
args="$MODEL --precision bf16 --zero-stage 3 --train-data '$PWD/data/brown_train_*.bin' --batch $BATCH --seq-len $SEQ
      --steps $STEPS --val-every 0 --sample-every 0 --lr 1e-4 --warmup 0 --seed 5 --comm-timeout 900"
args=${args//$'\n'/ } # one line: it goes into sh -c
keepalive="--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 182"
declare -A opts=([zero3]="" [qwz]="--zeropp-qwz 1" [hpz]="--zeropp-hpz 2" [qgz]="--zeropp-qgz 4"
                 [all]="--zeropp-qwz 1 --zeropp-hpz 2 --zeropp-qgz 4")
echo "bench-zeropp: GPT-2 ($MODEL) bf16 ZeRO-3, 2 hosts x 2 ranks (CPU trainer, 1 thread each), link $RATE each way (tc tbf),"
echo "  B=$BATCH T=$SEQ, $STEPS steps per run; commit $(git rev-parse --short HEAD), $(nproc) cores, $(uname -n)"
printf "  %-6s %-44s %16s %10s %14s %12s %10s\n" config options "link bytes/step" "x ZeRO-3" "step (ms)" "x faster" "last loss"
base_b= base_t=
for c in $CONFIGS; do
  b0=$(link_bytes)
  ip netns exec $A unshare --uts sh -c "hostname $A; exec mpirun -np 4 --hostfile $d/hosts --mca plm_rsh_agent $d/agent.sh \
    --mca btl_tcp_if_include 10.16.0.0/24 --mca oob_tcp_if_include 10.16.0.0/24 $keepalive -x OMP_NUM_THREADS=1 \
    $PWD/train_gpt_cpu $args ${opts[$c]} --log $d/$c.jsonl" > $d/$c.out 2>&1 || { grep -m3 "^error" $d/$c.out; tail -3 $d/$c.out; echo "bench-zeropp: $c failed"; exit 1; }
  b1=$(link_bytes)
  per=$(( (b1 - b0) / STEPS ))
  ms=$(sed -n 's/^average step (after the first): \([0-9.]*\) ms.*/\1/p' $d/$c.out)
  loss=$(grep -o '"step":'$STEPS',"loss":[^,]*' $d/$c.jsonl | cut -d: -f3)
  [ -z "$base_b" ] && { base_b=$per; base_t=$ms; }
  printf "  %-6s %-44s %16d %10.3f %14.1f %12.2f %10s\n" $c "${opts[$c]:-(none)}" $per "$(echo "$per / $base_b" | bc -l)" "$ms" \
    "$(echo "$base_t / $ms" | bc -l)" "$loss"
  grep -m1 "of which inside the host" $d/$c.out | sed 's/^ */    trainer: /'
done
