#!/usr/bin/env bash
# A save onto a full disk: each run below writes its checkpoints to a small tmpfs (mounted in a
# private mount namespace, so it vanishes with this script whatever happens) sized to fill up in
# the middle of the second save: in the ranks' shard files, in the llm.c model file, or in the
# `latest` pointer itself; and once during the very first save. Every time:
#   - exactly one line says which file failed and why, that `latest` still names the previous
#     checkpoint, and that the run stops; exit code 1, in bounded time (no hang, no crash);
#   - `latest` and the previous checkpoint are untouched, nothing of the failed save is left;
#   - resuming from that checkpoint gives the uninterrupted run's losses, bit for bit.
# On one process and on 2 ranks (ZeRO-3), and with --on-save-error continue (warns, trains on).
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${ZEROC_IN_MOUNT_NS:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then ns=(unshare --mount); else ns=(unshare --user --map-root-user --mount); fi
  "${ns[@]}" true 2>/dev/null || { echo "skip: no private mount namespace (unshare --mount needs root or user namespaces)"; exit 77; }
  make -s train_gpt_cpu || exit 1
  ZEROC_IN_MOUNT_NS=1 exec "${ns[@]}" bash "$0" "$@"
fi
. test/lib.sh
new_scratch save_full
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
shape="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
args="--train-data $d/train.bin --seq-len 16 --steps 8 --lr 2e-3 --warmup 2 --val-every 0 --sample-every 0 --seed 4"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() { # ranks, options: one process alone (its stderr is then the trainer's only), or under mpirun
  local n=$1 launch=(); shift
  [ $n -gt 1 ] && launch=(mpirun -np $n --oversubscribe)
  OMP_NUM_THREADS=1 timeout 120 "${launch[@]}" ./train_gpt_cpu $args --batch $((2 / n)) --zero-stage $((n == 1 ? 0 : 3)) "$@"
}
losses() { grep -o '"step":[0-9]*,"loss":[^,]*' "$1" | awk -F'[:,]' -v from=$2 '$2 >= from {print $2, $4}'; }
disk() { mkdir -p $d/$1 && mount -t tmpfs -o size=$2 tmpfs $d/$1; }
for n in 1 2; do run $n $shape --log $d/ref$n.jsonl > $d/ref$n.out 2>&1 || fail "uninterrupted run, $n ranks"; done

# U[n]: the bytes one save of n ranks takes (a checkpoint and its model file) on a roomy tmpfs
declare -A U
for n in 1 2; do
  disk roomy 16m
  run $n $shape --steps 2 --out $d/roomy/ck > /dev/null 2>&1 || fail "save on a roomy disk"
  U[$n]=$(df -B1 --output=used $d/roomy | tail -1)
  umount $d/roomy
  echo "one save of $n ranks takes ${U[$n]} bytes on tmpfs"
done

# full NAME RANKS BYTES [options]: trains 8 steps saving every 2 onto a tmpfs of BYTES; the save
# at step 4 (or, below U, at step 2) fails.
full() {
  local name=$1 n=$2 bytes=$3 prev=step_00000002 failed=4; shift 3
  [ $bytes -lt ${U[$n]} ] && { prev=; failed=2; }
  disk $name $bytes
  run $n $shape --save-every 2 --out $d/$name/ck --log $d/$name.jsonl "$@" > $d/$name.out 2> $d/$name.err; local rc=$?
  local errs; errs=$(grep '^error:' $d/$name.err)
  echo "$name ($n ranks, $bytes bytes): exit $rc: $errs"
  [ $rc -eq 1 ] || fail "$name: exit code $rc, not 1"
  [ "$(echo "$errs" | grep -c .)" -eq 1 ] || fail "$name: $(echo "$errs" | grep -c .) error lines"
  [ $n -gt 1 ] || [ "$(grep -c . $d/$name.err)" -eq 1 ] || fail "$name: stderr has more than the error line"
  local latest_says="$d/$name/ck/latest still names $prev"; [ -z "$prev" ] && latest_says="$d/$name/ck holds no checkpoint yet"
  echo "$errs" | grep -Eq "^error: checkpoint of step $failed not saved: $d/$name/ck/[a-z_0-9./]+: No space left on device; $latest_says; stopping \(--on-save-error continue would go on\)$" \
    || fail "$name: the line does not name the file, the reason, latest and what happens"
  [ "$(cat $d/$name/ck/latest 2>/dev/null)" = "$prev" ] || fail "$name: latest is '$(cat $d/$name/ck/latest 2>/dev/null)', not '$prev'"
  local left; left=$(cd $d/$name/ck && ls -d *$failed* *tmp* 2>/dev/null | grep -v "^${prev:-none}$" | tr '\n' ' ')
  [ -z "$left" ] || fail "$name: the failed save left $left"
  if [ -n "$prev" ]; then
    run $n --resume $d/$name/ck --log $d/$name.resumed.jsonl > $d/$name.resumed.out 2>&1 || fail "$name: resume failed"
    [ -n "$(losses $d/$name.resumed.jsonl 0)" ] && [ "$(losses $d/$name.resumed.jsonl 0)" = "$(losses $d/ref$n.jsonl 3)" ] \
      || fail "$name: resumed losses differ from the uninterrupted run's"
  fi
  umount $d/$name
}
for n in 1 2; do
  u=${U[$n]}
  full shards_n$n $n $((u + u / 5))       # in the shard files (each rank's weights and moments)
  full model_n$n $n $((u + u * 17 / 20))  # in the llm.c model file
  full latest_n$n $n $((2 * u - 4096))    # everything fits but the new `latest`
  full first_n$n $n $((u / 2))            # the first save: nothing to keep
done
echo "(resumed from the checkpoint each failed save left named: losses equal the uninterrupted run's)"

echo "== --on-save-error continue: every later save fails and says so; the run trains on, the last save fails it"
disk cont 1200k
run 1 $shape --save-every 2 --out $d/cont/ck --log $d/cont.jsonl --on-save-error continue > $d/cont.out 2> $d/cont.err; rc=$?
cat $d/cont.err
[ $rc -eq 1 ] || fail "continue: exit code $rc, not 1 (the final save failed)"
[ "$(grep -c 'training goes on without it (--on-save-error continue)$' $d/cont.err)" -eq 2 ] || fail "continue: want 2 warnings (steps 4, 6)"
grep -q "^error: checkpoint of step 8 not saved: .*; stopping$" $d/cont.err || fail "continue: the final failure does not stop"
[ "$(losses $d/cont.jsonl 0)" = "$(losses $d/ref1.jsonl 0)" ] || fail "continue: did not train on to step 8 as uninterrupted"
[ "$(cat $d/cont/ck/latest)" = step_00000002 ] || fail "continue: latest moved"
umount $d/cont
echo "$fails failures"
[ $fails -eq 0 ]
