#!/usr/bin/env bash
# Preemption: a signal stops the run cleanly after the step it arrived in, saves, exits 0, and
# --resume then continues bit for bit.
#   - SIGTERM to one process, and SIGUSR1 to `mpirun -np 2` (it forwards it to both ranks; ZeRO-3),
#     each at a random step. The job is frozen (SIGSTOP) while the signal is sent, so the step it
#     arrived in is known exactly: the last step the log holds is k0, the process is in step
#     k0+1 (or past its end-of-step agreement), and it must stop after k0+1 or k0+2, exit 0, and
#     leave `latest` naming that step.
#   - The resumed run's losses (every step after the stop) and final weights equal an
#     uninterrupted run's, and so do its samples (one per step here: the stopped step skips its
#     sample but must leave the sampler's generator where the sample would have).
#   - A second Ctrl-C (SIGINT) ends the process at once (killed by SIGINT, mid-step).
# run.sh: alone (it signals runs at chosen moments: another test beside it could stretch them)
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
make -s train_gpt_cpu || exit 1
new_scratch preempt
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
$PYTHON test/zero_check.py shard $d/val.bin 2000 512 2
# The uninterrupted and the resumed runs end at step N; an interrupted run is given many more
# steps (a constant learning rate: --steps changes nothing else), so that however slow this
# machine, it is still training when the test freezes it.
N=80 M=1000000
shape="--layers 3 --channels 128 --heads 2 --vocab-size 512 --max-seq-len 16"
args="--train-data $d/train.bin --val-data $d/val.bin --seq-len 16 --total-batch 256 --lr 2e-3 --lr-schedule constant
      --warmup 3 --val-every 10 --val-steps 2 --sample-every 1 --sample-len 4 --seed 9"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' -v from=$2 '$2 >= from {print $2, $4}'; }
last_step() { grep -o '"step":[0-9]*,"loss"' "$1" 2>/dev/null | tail -1 | grep -o '[0-9]*'; }
# pending(pid, signal number): the signal is pending at the process (sent, not yet handled)
# (any thread's: a signal to the process may wait on the thread the kernel picked for it)
pending() { local m; m=$(cat /proc/$1/task/*/status 2>/dev/null | awk '/^ShdPnd:|^SigPnd:/ {print $2}' | tr '\n' ' ');
            for x in $m; do (( 16#$x >> ($2 - 1) & 1 )) && return 0; done; return 1; }
stopped() { [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" = T ]; }

# interrupted NAME NP SIGNAL TARGET: runs the job, freezes its ranks at a random step, sends
# SIGNAL to TARGET (rank: the trainer itself; mpirun: the launcher), thaws, checks the stop.
interrupted() {
  local name=$1 np=$2 sig=$3 target=$4 k=$((5 + RANDOM % 40)) job ranks k0 s rc t0
  rm -rf $d/$name
  OMP_NUM_THREADS=1 mpirun -np $np --oversubscribe ./train_gpt_cpu $shape $args --steps $M --batch $((8 / np)) \
    --zero-stage $((np == 1 ? 0 : 3)) --out $d/$name --save-every 10 --log $d/$name.jsonl > $d/$name.out 2>&1 &
  job=$!
  for _ in $(seq 600); do [ "$(last_step $d/$name.jsonl)" -ge $k ] 2>/dev/null && break; sleep 0.05; done
  ranks=$(pgrep -f "^./train_gpt_cpu .*--out $d/$name " | tr '\n' ' ')
  [ "$(echo $ranks | wc -w)" -eq $np ] || { fail "$name: $np ranks wanted, found '$ranks'"; kill $job; return; }
  kill -STOP $ranks
  # SIGSTOP takes effect asynchronously: until a rank is stopped it could run the handler of the
  # signal sent next, and then the signal is never seen pending
  for p in $ranks; do for _ in $(seq 400); do stopped $p && break; sleep 0.05; done; done
  k0=$(last_step $d/$name.jsonl)
  if [ $target = mpirun ]; then kill -$sig $job; else kill -$sig $ranks; fi
  local signo; signo=$(kill -l $sig)
  for p in $ranks; do for _ in $(seq 400); do pending $p $signo && break; sleep 0.05; done
    pending $p $signo || fail "$name: rank $p never got $sig"; done
  t0=$(date +%s.%N)
  kill -CONT $ranks
  for _ in $(seq 1200); do kill -0 $job 2>/dev/null || break; sleep 0.05; done
  kill -0 $job 2>/dev/null && { fail "$name: still running a minute after $sig"; kill -9 $job $ranks; }
  wait $job; rc=$?
  s=$(sed 's/step_0*//' $d/$name/latest 2>/dev/null)
  echo "$name: $sig at step $k0 (+1 in progress), stopped after step $s, exit $rc, $(echo "$(date +%s.%N) - $t0" | bc | cut -c1-5) s after thawing"
  grep "stopping after" $d/$name.out
  [ $rc -eq 0 ] || { tail -5 $d/$name.out; fail "$name: exit code $rc"; }
  [ "$s" = $((k0 + 1)) ] || [ "$s" = $((k0 + 2)) ] || fail "$name: stopped after step '$s', not $((k0 + 1)) or $((k0 + 2))"
  [ "$(last_step $d/$name.jsonl)" = "$s" ] || fail "$name: the log goes on to step $(last_step $d/$name.jsonl)"
  grep -q "^stopping after step $s of $M: SIG$sig received; continue with --resume $d/$name$" $d/$name.out \
    || fail "$name: no stop line naming $sig and the step"
  grep -q tmp <<<"$(ls $d/$name)" && fail "$name: temporary files left"
  # resume with the same options, same ranks
  OMP_NUM_THREADS=1 mpirun -np $np --oversubscribe ./train_gpt_cpu $args --steps $N --batch $((8 / np)) \
    --zero-stage $((np == 1 ? 0 : 3)) --resume $d/$name --out $d/$name --log $d/${name}_resumed.jsonl \
    > $d/${name}_resumed.out 2>&1 || { tail -5 $d/${name}_resumed.out; fail "$name: resume failed"; return; }
  [ "$(losses $d/${name}_resumed.jsonl 0)" = "$(losses $d/ref$np.jsonl $((s + 1)))" ] && [ -n "$(losses $d/${name}_resumed.jsonl 0)" ] \
    || fail "$name: resumed losses differ from the uninterrupted run's"
  local want got
  got=$(grep '^sample: ' $d/${name}_resumed.out); want=$(grep '^sample: ' $d/ref$np.out | tail -n $((N - s)))
  [ "$(echo "$got" | wc -l)" = $((N - s)) ] && [ "$got" = "$want" ] || fail "$name: resumed samples differ from the uninterrupted run's"
  cmp -s $d/$name/model_$(printf %08d $N).bin $d/ref$np/model_$(printf %08d $N).bin || fail "$name: final weights differ"
  echo "$name: resumed at step $((s + 1)): $((N - s)) losses, samples and the final weights equal the uninterrupted run's"
}

for np in 1 2; do
  OMP_NUM_THREADS=1 mpirun -np $np --oversubscribe ./train_gpt_cpu $shape $args --steps $N --batch $((8 / np)) \
    --zero-stage $((np == 1 ? 0 : 3)) --out $d/ref$np \
    --log $d/ref$np.jsonl > $d/ref$np.out 2>&1 || { tail $d/ref$np.out; fail "uninterrupted run on $np ranks"; }
done
interrupted term1 1 TERM rank
interrupted usr1_np2 2 USR1 mpirun

echo "== a second SIGINT ends the process at once"
# (steps of 256 micro-steps, about a second here; the second SIGINT follows as soon as the first
# has been handled, no longer pending, so that the two cannot merge into one)
./train_gpt_cpu $shape ${args/--total-batch 256/--total-batch 32768} --steps $M --batch 8 --out $d/int --log $d/int.jsonl > $d/int.out 2>&1 &
job=$!
for _ in $(seq 600); do [ -n "$(last_step $d/int.jsonl)" ] && break; sleep 0.05; done
kill -INT $job
for _ in $(seq 200); do pending $job 2 || break; sleep 0.01; done
sleep 0.02; kill -INT $job
wait $job; rc=$?
echo "two SIGINTs: exit code $rc"
[ $rc -eq 130 ] || fail "two SIGINTs: exit code $rc, not 130 (killed by SIGINT)"
grep -q "stopping after" $d/int.out && fail "two SIGINTs: it finished the step instead of ending at once"
echo "== the Slurm script passes Slurm's warning signal to mpirun, requeues, and resumes (stand-in mpirun, scontrol)"
mkdir -p $d/stub $d/submit
cat > $d/stub/mpirun <<STUB
#!/bin/bash
echo "\$@" > $PWD/$d/stub/mpirun.args
trap 'echo USR1 > $PWD/$d/stub/mpirun.got; exit 0' USR1
touch $PWD/$d/stub/started
for i in \$(seq \${STUB_TENTHS:-300}); do sleep 0.1; done
STUB
printf '#!/bin/bash\necho "$@" > %s\n' "$PWD/$d/stub/scontrol.args" > $d/stub/scontrol
chmod +x $d/stub/mpirun $d/stub/scontrol
export SLURM_JOB_ID=123 SLURM_NNODES=1 SLURM_NTASKS_PER_NODE=2 SLURM_SUBMIT_DIR=$PWD/$d/submit
PATH=$PWD/$d/stub:$PATH bash scripts/slurm_train_gpt.sh --steps 7 > $d/slurm.out 2>&1 & job=$!
for _ in $(seq 100); do [ -f $d/stub/started ] && break; sleep 0.05; done
kill -USR1 $job; wait $job; rc=$?
[ $rc -eq 0 ] && [ -f $d/stub/mpirun.got ] && [ "$(cat $d/stub/scontrol.args 2>/dev/null)" = "requeue 123" ] \
  && grep -q -- "--model d12 .*--out runs/123 .*--steps 7$" $d/stub/mpirun.args \
  || { cat $d/slurm.out $d/stub/mpirun.args; fail "slurm script: SIGUSR1 not passed on, or no requeue (exit $rc)"; }
mkdir -p $d/submit/runs/123 && echo step_00000042 > $d/submit/runs/123/latest && rm -f $d/stub/scontrol.args
STUB_TENTHS=1 PATH=$PWD/$d/stub:$PATH bash scripts/slurm_train_gpt.sh > $d/slurm.out 2>&1; rc=$?
[ $rc -eq 0 ] && [ ! -f $d/stub/scontrol.args ] && grep -q -- "--resume runs/123 " $d/stub/mpirun.args && ! grep -q -- --model $d/stub/mpirun.args \
  || { cat $d/slurm.out $d/stub/mpirun.args; fail "slurm script: the requeued job does not resume, or requeues without a signal"; }
echo "slurm script: SIGUSR1 reached mpirun, the job was requeued, and the next one ran with --resume runs/123"

echo "$fails failures"
[ $fails -eq 0 ]
