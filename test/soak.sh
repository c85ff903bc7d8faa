#!/usr/bin/env bash
# Soak (make soak; not in the default suite): 2 ranks, ZeRO-3, fp16 (dynamic loss scale), a few
# thousand small steps saving every 50, through random faults until the run completes:
#   kill -9 of one rank (a crash), kill -9 of the whole job (the machine lost), SIGTERM of one rank
#   (the scheduler's stop), SIGUSR1 to mpirun (preemption warning), SIGTERM to mpirun (it kills the
#   ranks a second later: a save may be cut short) — each at a random moment, saves included.
# After each: the job ended (exit 0 after a clean stop, which must also have saved the step it
# stopped at; no process left behind), and the next run resumes from `latest`. At the end the
# weights (the llm.c model file, each rank's fp32 master weights and Adam moments) must be
# identical, bit for bit, to an uninterrupted run's. Prints the number of faults survived.
#   SOAK_STEPS (3000), SOAK_SEED (random), SOAK_MAX_FAULTS (200)
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PYTHON=${PYTHON:-/usr/bin/python3}
make -s train_gpt_cpu || exit 1
new_scratch soak
STEPS=${SOAK_STEPS:-3000} MAX_FAULTS=${SOAK_MAX_FAULTS:-200}
RANDOM=${SOAK_SEED:-$$}
$PYTHON test/zero_check.py shard $d/train.bin 200000 512 1 || exit 1
model="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
# (a loss scale that starts too high and grows back every 100 steps: overflows keep being skipped
# throughout, so that restarts land in every state of the scaler)
args="--train-data $d/train.bin --seq-len 16 --batch 4 --steps $STEPS --precision fp16 --zero-stage 3 --lr 3e-3 --warmup 50
      --initial-scale-power 24 --loss-scale-window 100 --val-every 0 --sample-every 0 --print-every 100000 --save-every 50 --seed 11"
mpi=(env OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu) # (env execs mpirun: $! is mpirun's pid)

echo "== the uninterrupted run, $STEPS steps"
t0=$(date +%s)
"${mpi[@]}" $model $args --out $d/ref > $d/ref.out 2>&1 || { tail $d/ref.out; exit 1; }
echo "$(( $(date +%s) - t0 )) s; $(grep -c "(this one: overflow)" $d/ref.out) overflowed steps skipped"
echo "== with faults"
faults=0 cycles=0 lost=0
declare -A kinds
ranks_of() { pgrep -f "^./train_gpt_cpu .*--out $d/ck( |$)" | tr '\n' ' '; }
latest() { sed 's/step_0*//' $d/ck/latest 2>/dev/null || echo 0; }
while :; do
  cycles=$((cycles + 1))
  [ $faults -le $MAX_FAULTS ] || { echo "FAIL: $MAX_FAULTS faults and not done"; exit 1; }
  from=$(latest)
  if [ "$from" = 0 ]; then start=($model); else start=(--resume $d/ck); fi
  [ "$from" = "$STEPS" ] && break
  "${mpi[@]}" "${start[@]}" $args --out $d/ck > $d/run.out 2>&1 &
  pid=$!
  for _ in $(seq 100); do [ "$(ranks_of | wc -w)" -eq 2 ] && break; sleep 0.1; done # (both started)
  sleep $(awk -v r=$RANDOM 'BEGIN {printf "%.2f", 0.1 + (r % 150) / 100}')
  ranks=$(ranks_of)
  if ! kill -0 $pid 2>/dev/null; then # it finished before the fault
    { wait $pid; } 2>/dev/null; rc=$?
    [ $rc -eq 0 ] && [ "$(latest)" = "$STEPS" ] && break
    tail -5 $d/run.out; echo "FAIL: the run ended by itself with exit $rc at $(latest)"; exit 1
  fi
  kind=$((RANDOM % 5)); victim=$(echo $ranks | awk -v i=$((RANDOM % 2 + 1)) '{print $i}')
  [ -z "$victim" ] && kind=1 # (not started yet: a crash of everything)
  case $kind in
    0) name="kill -9 of a rank"; kill -9 $victim ;;
    1) name="kill -9 of the job"; kill -9 $pid $ranks 2>/dev/null ;;
    2) name="SIGTERM to a rank"; kill -TERM $victim ;;
    3) name="SIGUSR1 to mpirun"; kill -USR1 $pid ;;
    4) name="SIGTERM to mpirun"; kill -TERM $pid ;;
  esac
  for _ in $(seq 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -0 $pid 2>/dev/null && { echo "FAIL: the job did not end within 60 s of a $name"; kill -9 $pid $(ranks_of); exit 1; }
  { wait $pid; } 2>/dev/null; rc=$?
  for _ in $(seq 50); do [ -z "$(ranks_of)" ] && break; sleep 0.1; done
  [ -z "$(ranks_of)" ] || { echo "FAIL: ranks left behind after a $name: $(ranks_of)"; kill -9 $(ranks_of); exit 1; }
  now=$(latest)
  stopped=$(sed -n 's/^stopping after step \([0-9]*\) of.*/\1/p' $d/run.out)
  [ $rc -eq 0 ] && [ "$now" = "$STEPS" ] && [ -z "$stopped" ] && break # (it finished as the fault came)
  if [ $kind -eq 2 ] || [ $kind -eq 3 ]; then # a clean stop: exit 0, saved where it stopped
    if [ $rc -ne 0 ] || [ -z "$stopped" ] || [ "$now" != "$stopped" ]; then
      tail -5 $d/run.out; echo "FAIL: $name: exit $rc, stopped after '$stopped', latest $now"; exit 1
    fi
  fi
  faults=$((faults + 1)); kinds[$name]=$(( ${kinds[$name]:-0} + 1 ))
  echo "fault $faults: $name (exit $rc); latest $from -> $now"
done 2>> $d/shell.err # (the shell's "Killed" notices)
echo "== $faults faults survived in $cycles runs: $(for k in "${!kinds[@]}"; do printf '%s %d, ' "$k" "${kinds[$k]}"; done)"
fails=0
cmp $d/ck/model_$(printf %08d $STEPS).bin $d/ref/model_$(printf %08d $STEPS).bin || fails=1
for f in model_rank00000 model_rank00001 optim_rank00000 optim_rank00001 state; do
  cmp $d/ck/step_$(printf %08d $STEPS)/$f.bin $d/ref/step_$(printf %08d $STEPS)/$f.bin || fails=1
done
[ $fails -eq 0 ] || { echo "FAIL: the final weights differ from the uninterrupted run's"; exit 1; }
echo "final weights, master weights, Adam moments and trainer state identical to the uninterrupted run's"
