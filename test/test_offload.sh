#!/usr/bin/env bash
# ZeRO-Offload in the GPU trainer, run on the CUDA emulator (test/cuda_emu/; no GPU needed):
#   1. offload on = offload off, bit for bit (losses, gradient norms, the final weights and the
#      optimizer state in the checkpoint), 2 ranks: bf16 at ZeRO-2 with the optimizer on the host;
#      fp16 at ZeRO-3 with optimizer and parameters on the host, through overflow-skipped steps and
#      updates after them (an initial loss scale of 2^20 overflows until it has halved enough); fp32 at ZeRO-1 (an offloaded fp32 update keeps fp32
#      master weights on the host);
#   1b. offload_param alone (the optimizer and its update on the device, the updated shard written
#      back): parameters on the host or on NVMe = no offload, bit for bit, bf16 and fp32 at ZeRO-3,
#      planned to the byte;
#   2. a step skipped for overflow leaves the host state as it was: the checkpoint after one
#      skipped step holds exactly the initial weights;
#   3. save with offload and resume without, and the reverse: the resumed steps equal the
#      uninterrupted run's, bit for bit;
#   4. the emulator catches a missing wait between a gradient's copy to the host and the host
#      update (a variant built with that wait defined away must die with the emulator's message);
#   5. the DeepSpeed examples run as given, their offload honoured (the memory log says where
#      each kind lives, and what the planner predicted per location was allocated).
#   6. Twin-Flow (--offload-ratio R, offload_optimizer.ratio): R = 0, 0.5 and 1 equal no offload bit
#      for bit (losses, norms, weights, optimizer state) on 2 ranks, bf16 at stages 1-3 (0.5 at each,
#      0 and 1 at two of them), fp16 and fp32 at one stage each (0.5); each rank's memory entry equals the plan (--plan --json) per kind and
#      per location, with R's share of the optimizer state on the host and the rest on the device;
#      R outside [0, 1], R without cpu offload and R with offloaded parameters get one line each.
#   7. the delayed parameter update (--offload-delayed-update after --offload-delay-warmup 2):
#      the rule itself, on the CPU trainer (fp32, 2 ranks): its steps 3 and 4 equal, bit for bit,
#      an exact run saved after step 2 and resumed with --lr 0 (both compute with the weights of
#      step 2), and it leaves the exact run from step 4 on; the GPU trainer's (emulated, fp32)
#      equals the CPU trainer's within float rounding over 6 steps; with Twin-Flow (bf16, R = 0.5)
#      it equals itself at R = 1 bit for bit; planned to the byte (the held gradient shard); and
#      without --offload-optimizer cpu it is one line.
#   7b. its host part on a helper thread during the next forward and backward equals the synchronous
#      update (ZEROC_DELAYED_SYNC=1) bit for bit (losses, norms, weights, optimizer state), planned to
#      the byte, on 2 ranks: CPU trainer at stages 1-3 (LAMB at 1), GPU trainer (emulated) at
#      stages 1-3 (Twin-Flow with R = 0.5 at 2, parameters on the host at 3); with parameters on
#      NVMe it is synchronous and says so.
#   7c. kill -9 during a step with a held update, then --resume: the rest equals the uninterrupted
#      run bit for bit.
#   7d. with the optimizer state on NVMe (--offload-optimizer nvme, parameters not on NVMe) the
#      helper thread streams the update through the NVMe store too: on 2 ranks of the CPU trainer,
#      pieces of 2048 elements, threaded = ZEROC_DELAYED_SYNC=1 bit for bit (losses, norms, weights,
#      optimizer state) and planned to the byte: bf16 ZeRO-1 (also = the same run with the optimizer
#      in host memory), fp32 ZeRO-2 (--nvme-readahead: a note, no area), bf16 ZeRO-3 with a host tier;
#      in the trace each step's NVMe spans' bytes = the log's, and writes of the update a step applies
#      were submitted before its backward ended (on the helper, during the forward and backward) in
#      the threaded run, none in the synchronous one; kill -9 while the helper streams, then --resume:
#      the rest equals the uninterrupted run; a stop signal (SIGUSR1, validation and samples beside
#      the helper): exit 0, its checkpoint = a run of as many steps; the GPU trainer (emulated) at
#      ZeRO-1, bf16, pinned: threaded = synchronous; with the parameters on NVMe too it stays
#      synchronous and says so.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo; then
  export OPENBLAS_CORETYPE=SkylakeX # see test_gpu_emu.sh
fi
make -s test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_fp16 test/bin/train_gpt_emu_fp32 train_gpt_cpu || { echo "FAIL: build"; exit 1; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
emu() { local p=$1; shift; timeout 600 mpirun -np 2 --oversubscribe test/bin/train_gpt_emu_$p "$@"; }
model="--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16"
run="--seq-len 16 --batch 2 --val-every 0 --sample-every 0 --train-data $d/train.bin --seed 3"
common="$model $run"
. test/lib.sh
steps() { log_steps "$1"; } # loss, lr, grad_norm (and the fp16 scaler's state)

echo "== 1. offload on = off, bit for bit"
for cfg in "bf16 2 cpu none" "fp16 3 cpu cpu --initial-scale-power 20 --hysteresis 1" "fp32 1 cpu none"; do
  set -- $cfg; p=$1; s=$2; oo=$3; op=$4; shift 4
  for off in 0 1; do
    o=(--offload-optimizer none --offload-param none); [ $off = 1 ] && o=(--offload-optimizer $oo --offload-param $op --pin-memory)
    emu $p $common --steps 5 --zero-stage $s "${o[@]}" "$@" --out $d/o_${p}_$off --log $d/l_${p}_$off.jsonl \
      > $d/r_${p}_$off.out 2>&1 || { tail -5 $d/r_${p}_$off.out; fail "$p stage $s offload=$off run"; }
  done
  a=$(steps $d/l_${p}_0.jsonl); b=$(steps $d/l_${p}_1.jsonl)
  [ -n "$a" ] && [ "$a" = "$b" ] || { fail "$p stage $s: logs differ with offload"; diff <(echo "$a") <(echo "$b") | head -5; }
  same=1
  for f in $(cd $d/o_${p}_0 && ls model_*.bin step_*/*_rank*.bin); do cmp -s $d/o_${p}_0/$f $d/o_${p}_1/$f || { same=0; echo "differs: $f"; }; done
  sk=$(grep -c '"skipped":true' $d/l_${p}_1.jsonl)
  grep -q '"master":"host"' $d/l_${p}_1.jsonl || fail "$p: the memory log does not put the master weights on the host"
  [ $same = 1 ] && echo "ok   $p ZeRO-$s (optimizer $oo, parameters $op): losses, norms, weights and optimizer state identical ($sk skipped steps)" \
    || fail "$p ZeRO-$s: checkpoints differ with offload"
done
sk=$(grep -c '"skipped":true' $d/l_fp16_1.jsonl)
[ "$sk" -ge 1 ] && [ "$sk" -lt 5 ] || fail "fp16: $sk of 5 steps skipped: the skip path and the update after it were not both exercised"

echo "== 1b. offload_param alone: the optimizer on the device, the parameter shard on the host or NVMe"
mkdir -p $d/nvme
for p in bf16 fp32; do
  for op in none cpu nvme; do
    emu $p $common --steps 3 --zero-stage 3 --offload-param $op --nvme-path $d/nvme --nvme-buffer-size 2048 --pin-memory \
      --out $d/p_${p}_$op --log $d/p_${p}_$op.jsonl > $d/p_${p}_$op.out 2>&1 || { tail -5 $d/p_${p}_$op.out; fail "$p parameters on $op"; }
  done
  for op in cpu nvme; do
    want=host; [ $op = nvme ] && want=nvme
    grep -q "plan vs allocated: every kind on every rank matches exactly" $d/p_${p}_$op.out || fail "$p $op: plan and allocation differ"
    grep -q "\"params\":\"$want\"" $d/p_${p}_$op.jsonl && grep -q '"master":"device"' $d/p_${p}_$op.jsonl \
      || fail "$p $op: the memory log does not put the parameters on $want and the optimizer on the device"
    a=$(steps $d/p_${p}_none.jsonl); b=$(steps $d/p_${p}_$op.jsonl); same=1
    for f in $(cd $d/p_${p}_none && ls model_*.bin step_*/*_rank*.bin); do cmp -s $d/p_${p}_none/$f $d/p_${p}_$op/$f || { same=0; echo "differs: $f"; }; done
    [ -n "$a" ] && [ "$a" = "$b" ] && [ $same = 1 ] \
      && echo "ok   $p ZeRO-3, parameters alone on $want: losses, norms, weights and optimizer state identical to no offload" \
      || { fail "$p ZeRO-3: parameters alone on $want differ"; diff <(echo "$a") <(echo "$b") | head -5; }
  done
done

echo "== 2. a skipped step changes nothing on the host"
# the initial weights as an fp32 model file (the CPU trainer writes it), then one step that overflows
OMP_NUM_THREADS=1 ./train_gpt_cpu $common --steps 1 --lr 0 --out $d/init > /dev/null 2>&1 || fail "making the initial weights"
emu fp16 --init $d/init/model_00000001.bin $run \
  --steps 1 --zero-stage 3 --offload-optimizer cpu --offload-param cpu --pin-memory --initial-scale-power 32 \
  --out $d/skip --log $d/skip.jsonl > $d/skip.out 2>&1 || { tail -5 $d/skip.out; fail "skip run"; }
grep -q '"skipped":true' $d/skip.jsonl || fail "the step did not overflow"
./train_gpt_cpu --export $d/skip/step_00000001 $d/skip_master.bin > /dev/null || fail "export"
cmp -s $d/skip_master.bin $d/init/model_00000001.bin && echo "ok   after a skipped step the host's master weights are the initial weights, bit for bit" \
  || fail "a skipped step changed the host's master weights"
$PYTHON - $d/skip/step_00000001 <<'PY' || fail "a skipped step changed the host's optimizer state"
import glob, sys, numpy as np
for f in sorted(glob.glob(sys.argv[1] + "/optim_rank*.bin")):
    x = np.fromfile(f, dtype="<f4")[256:]
    assert (x == 0).all(), f"{f}: {int((x != 0).sum())} nonzero moments after a skipped step"
print("ok   and Adam's moments on the host are still all zero")
PY

echo "== 3. save with offload, resume without (and the reverse)"
for first in 0 1; do
  o1=(); o2=(--offload-optimizer cpu --pin-memory); [ $first = 1 ] && { o1=(--offload-optimizer cpu --pin-memory); o2=(); }
  emu bf16 $common --steps 4 --zero-stage 2 "${o1[@]}" --out $d/ck$first --save-every 2 --log $d/a$first.jsonl > $d/a$first.out 2>&1 \
    || { tail -5 $d/a$first.out; fail "run A ($first)"; continue; }
  emu bf16 $run --steps 4 --zero-stage 2 "${o2[@]}" --resume $d/ck$first/step_00000002 --log $d/b$first.jsonl > $d/b$first.out 2>&1 \
    || { tail -5 $d/b$first.out; fail "resume ($first)"; continue; }
  a=$(steps $d/a$first.jsonl | tail -2); b=$(steps $d/b$first.jsonl)
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   saved with offload $([ $first = 1 ] && echo on || echo off), resumed with it $([ $first = 1 ] && echo off || echo on): steps 3-4 bit for bit" \
    || { fail "resume across offload ($first)"; echo "$a"; echo "$b"; }
done

echo "== 4. the emulator catches a missing wait before the host update"
src=$d/broken.cpp
{ echo '#line 1 "train_gpt.cu"'; sed -E 's/([A-Za-z_][A-Za-z_0-9]*)<<<(.*)>>>\(/emu_launch(\1, "\1", \2)(/' train_gpt.cu; } > $src
# (-O0: the quickest build, 7 CPU-s against -O1's 12; it runs one step)
# shellcheck disable=SC2046
g++ -std=c++17 -D_GNU_SOURCE -O0 -fopenmp -ffp-contract=off -Wno-unknown-pragmas -Itest/cuda_emu -Itest/bin/emu -I. \
  $(mpicc -showme:compile) -DGPU_PRECISION_BF16 '-DZERO_HOST_WAIT(z,h,what)=((void)(h))' -x c++ $src -o $d/broken \
  -L/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lcjson -lm $(mpicc -showme:link) || fail "building the broken variant"
timeout 300 mpirun -np 1 $d/broken $common --steps 1 --zero-stage 1 --offload-optimizer cpu --pin-memory > $d/broken.out 2>&1; rc=$?
if [ $rc -ne 0 ] && grep -q "cuda_emu: the host touched pinned memory at .* that an asynchronous copy still in flight writes" $d/broken.out; then
  echo "ok   without the wait: $(grep -m1 'cuda_emu:' $d/broken.out)"
else fail "the missing wait went unnoticed (rc $rc)"; tail -5 $d/broken.out; fi

echo "== 5. the DeepSpeed examples run as given, offload honoured"
for z in 2 3; do
  ex=examples/ds_config_zero$z.json
  emu bf16 $common --steps 2 --deepspeed $ex --log $d/ds$z.jsonl > $d/ds$z.out 2> $d/ds$z.err || { tail -5 $d/ds$z.err; fail "example zero$z"; continue; }
  grep -q "plan vs allocated: every kind on every rank matches exactly" $d/ds$z.out || fail "zero$z: plan != allocated"
  $PYTHON - $d/ds$z.jsonl $z <<'PY' || fail "example zero$z: where the model states live"
import json, sys
z = int(sys.argv[2])
m = [json.loads(l) for l in open(sys.argv[1]) if '"event":"memory"' in l][0]
w = m["where"]
assert w["master"] == w["adam_m"] == w["adam_v"] == "host", w
assert w["params"] == ("host" if z == 3 else "device"), w
assert m["host"] == m["master"] + m["adam_m"] + m["adam_v"] + m["staging"] + (m["params"] if z == 3 else 0), m
print(f"ok   ds_config_zero{z}.json: optimizer state{' and parameters' if z == 3 else ''} on the host "
      f"({m['host']} bytes), the device keeps {m['device']} bytes")
PY
  grep -q "offloading is not implemented" $d/ds$z.err && fail "zero$z: still warns that offload is not implemented"
done

echo "== 6. Twin-Flow: part of the optimizer state on the host, the rest on the GPU"
# (each R at two stages or more, 0.5 at every stage and precision: the suite's time)
for cfg in "bf16 1 0,0.5" "bf16 2 0.5,1" "bf16 3 0,0.5,1" "fp16 2 0.5 --initial-scale-power 20 --hysteresis 1" "fp32 3 0.5"; do
  set -- $cfg; p=$1; s=$2; Rs=$3; shift 3
  for R in none ${Rs//,/ }; do
    # no offload at ZeRO-3: 1b's run of it (3 steps, its parameters offloaded to none) serves
    if [ $R = none ] && [ $s = 3 ] && [ -z "$*" ] && [ -d $d/p_${p}_none ]; then
      ln -s p_${p}_none $d/tw_${p}_${s}_none; ln -s p_${p}_none.jsonl $d/tw_${p}_${s}_none.jsonl; continue
    fi
    o=(); [ $R != none ] && o=(--offload-optimizer cpu --offload-ratio $R)
    pin=(); [ $R = 0.5 ] && pin=(--pin-memory)
    tag=tw_${p}_${s}_$R
    emu $p $common --steps 3 --zero-stage $s "${o[@]}" "${pin[@]}" "$@" --out $d/$tag --log $d/$tag.jsonl > $d/$tag.out 2>&1 \
      || { tail -5 $d/$tag.out; fail "$tag run"; continue; }
    [ $R = none ] && continue
    grep -q "plan vs allocated: every kind on every rank matches exactly" $d/$tag.out || fail "$tag: plan != allocated"
    a=$(steps $d/tw_${p}_${s}_none.jsonl); b=$(steps $d/$tag.jsonl)
    [ -n "$a" ] && [ "$a" = "$b" ] || { fail "$tag: logs differ from no offload"; diff <(echo "$a") <(echo "$b") | head -5; }
    same=1
    for f in $(cd $d/tw_${p}_${s}_none && ls model_*.bin step_*/*_rank*.bin); do cmp -s $d/tw_${p}_${s}_none/$f $d/$tag/$f || { same=0; echo "differs: $f"; }; done
    [ $same = 1 ] || fail "$tag: checkpoints differ from no offload"
    test/bin/train_gpt_emu_$p --plan $model --seq-len 16 --batch 2 --world 2 --zero-stage $s "${o[@]}" --json > $d/$tag.plan 2> $d/$tag.plan.err \
      || { cat $d/$tag.plan.err; fail "$tag: --plan"; continue; }
    $PYTHON - $d/$tag.jsonl $d/$tag.plan $R <<'PY' || fail "$tag: memory against the plan"
import json, sys
mem = [json.loads(l) for l in open(sys.argv[1]) if '"event":"memory"' in l]
plan = json.load(open(sys.argv[2])); R = float(sys.argv[3])
assert len(mem) == 2, mem
opt = ["master"] + [k for k in ("adam_m", "adam_v") if k in plan["kinds"]]
for m in mem:
    for k in plan["kinds"] + ["device", "host", "optimizer_on_device"]:
        assert m[k] == plan[k], f"rank {m['rank']}: {k} allocated {m[k]} != planned {plan[k]}"
    state = sum(m[k] for k in opt)
    dev = m["optimizer_on_device"]
    assert m["host"] == state - dev + m["staging"], m
    # the split is whole units: the host holds the shard's first units, nearest to R of it
    assert (dev == 0) == (R == 1) and (dev == state) == (R == 0), (R, dev, state)
    assert abs((state - dev) / state - R) < 0.35, (R, dev, state)
print(f"ok   memory = plan per kind and location at R = {R}: {state - dev} bytes of optimizer state on the host, {dev} on the device")
PY
  done
  [ $fails -eq 0 ] && echo "ok   $p ZeRO-$s: offload ratio ${Rs//,/, } = no offload, bit for bit (losses, norms, weights, optimizer state)"
done
for bad in "--offload-optimizer cpu --offload-ratio 1.5|--offload-ratio" "--offload-optimizer cpu --offload-ratio -0.1|--offload-ratio" \
           "--offload-ratio 0.5|needs --offload-optimizer cpu" "--offload-optimizer nvme --nvme-path $d --offload-ratio 0.5|needs --offload-optimizer cpu" \
           "--offload-optimizer cpu --offload-param cpu --offload-ratio 0.5|needs the parameters on the GPU"; do
  args=${bad%%|*}; want=${bad#*|}
  # shellcheck disable=SC2086
  test/bin/train_gpt_emu_bf16 $common --steps 1 --zero-stage 3 $args > $d/bad.out 2> $d/bad.err; rc=$?
  n=$(grep -c . $d/bad.err)
  [ $rc -ne 0 ] && [ "$n" = 1 ] && grep -q -- "$want" $d/bad.err && echo "ok   $args: $(cat $d/bad.err)" \
    || { fail "bad input $args: rc $rc, $n lines"; cat $d/bad.err; }
done

echo "== 7. the delayed parameter update"
dl=(--lr 1e-2 --warmup 0 --lr-schedule constant --zero-stage 2)
dpu=(--offload-optimizer cpu --offload-delayed-update --offload-delay-warmup 2)
cpu() { timeout 300 mpirun -np 2 --oversubscribe ./train_gpt_cpu "$@"; }
cpu $common "${dl[@]}" --steps 6 "${dpu[@]}" --log $d/dc.jsonl > $d/dc.out 2>&1 || { tail -5 $d/dc.out; fail "CPU delayed run"; }
cpu $common "${dl[@]}" --steps 6 --offload-optimizer cpu --log $d/ec.jsonl > $d/ec.out 2>&1 || fail "CPU exact run"
cpu $common "${dl[@]}" --steps 2 --out $d/e2 > $d/e2.out 2>&1 || fail "CPU exact run, 2 steps"
cpu $run "${dl[@]}" --steps 4 --lr 0 --resume $d/e2/step_00000002 --log $d/e2r.jsonl > $d/e2r.out 2>&1 || fail "CPU resume at lr 0"
emu fp32 $common "${dl[@]}" --steps 6 "${dpu[@]}" --log $d/dg.jsonl > $d/dg.out 2>&1 || { tail -5 $d/dg.out; fail "GPU delayed run"; }
for f in dc dg; do grep -q "plan vs allocated: every kind on every rank matches exactly" $d/$f.out || fail "$f: plan != allocated"; done
a=$(steps $d/dc.jsonl | grep -E '"step":(3|4),' | sed 's/"step":[0-9]*,//'); b=$(steps $d/e2r.jsonl | sed 's/"step":[0-9]*,//; s/"lr":[0-9.e-]*,//')
a=$(echo "$a" | sed 's/"lr":[0-9.e-]*,//')
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   CPU: delayed steps 3-4 = the weights of step 2 on batches 3-4, bit for bit" \
  || { fail "the delayed rule: steps 3-4"; echo "$a"; echo "$b"; }
$PYTHON - $d/dc.jsonl $d/dg.jsonl $d/ec.jsonl <<'PY' || fail "delayed update: GPU against CPU"
import json, sys
load = lambda f: {e["step"]: e for e in map(json.loads, open(f)) if "loss" in e and "step" in e}
c, g, e = map(load, sys.argv[1:])
assert sorted(c) == sorted(g) == list(range(1, 7)), (sorted(c), sorted(g))
for s in c:  # float rounding apart (the GPU's sums run in another order): 1e-5
    assert abs(c[s]["loss"] - g[s]["loss"]) <= 1e-5 * abs(c[s]["loss"]), (s, c[s], g[s])
    assert abs(c[s]["grad_norm"] - g[s]["grad_norm"]) <= 1e-5 * c[s]["grad_norm"], (s, c[s], g[s])
assert all(c[s]["loss"] == e[s]["loss"] for s in (1, 2, 3)), "the warmup steps and the first delayed one are exact"
gap = abs(c[4]["loss"] - e[4]["loss"])
assert gap > 1e-3, f"step 4: delayed {c[4]['loss']} vs exact {e[4]['loss']}: the delay changed nothing"
print(f"ok   GPU (emulated) delayed update = CPU's within 1e-5 over 6 steps; exact until step 3, then apart ({gap:.4f} at step 4)")
PY
tw=(--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 $run --zero-stage 2 --steps 4 --offload-optimizer cpu
    --offload-delayed-update --offload-delay-warmup 1)
emu bf16 "${tw[@]}" --out $d/dt1 --log $d/dt1.jsonl > $d/dt1.out 2>&1 || fail "bf16 delayed, R = 1"
emu bf16 "${tw[@]}" --offload-ratio 0.5 --out $d/dt5 --log $d/dt5.jsonl > $d/dt5.out 2>&1 || fail "bf16 delayed, R = 0.5"
[ "$(steps $d/dt1.jsonl)" = "$(steps $d/dt5.jsonl)" ] && cmp -s $d/dt1/model_00000004.bin $d/dt5/model_00000004.bin \
  && echo "ok   bf16 delayed update with Twin-Flow (R = 0.5) = without (R = 1), bit for bit" || fail "delayed update with Twin-Flow differs"
./train_gpt_cpu $common --steps 1 --zero-stage 2 --offload-delayed-update > $d/bad.out 2> $d/bad.err; rc=$?
[ $rc -ne 0 ] && [ "$(grep -c . $d/bad.err)" = 1 ] && grep -q "needs --offload-optimizer cpu" $d/bad.err \
  && echo "ok   without offload: $(cat $d/bad.err)" || { fail "delayed update without offload: rc $rc"; cat $d/bad.err; }

echo "== 7b. the delayed update's host part on a helper thread = the synchronous update, bit for bit"
# ZEROC_DELAYED_SYNC=1 (a test's switch) keeps the update on the step's thread after the backward.
# The threaded runs above at stage 2 (dc, dt5: Twin-Flow) get their synchronous twins; stages 1 and 3
# get a pair each in both trainers (the CPU's at stage 1 with LAMB's per-tensor sums, the GPU's at
# stage 3 with the parameters on the host).
ds=(--lr 1e-2 --warmup 0 --lr-schedule constant --offload-optimizer cpu --offload-delayed-update --offload-delay-warmup 1 --steps 4)
ZEROC_DELAYED_SYNC=1 cpu $common "${dl[@]}" --steps 6 "${dpu[@]}" --log $d/dc_s.jsonl > $d/dc_s.out 2>&1 || fail "CPU delayed run, synchronous"
ZEROC_DELAYED_SYNC=1 emu bf16 "${tw[@]}" --offload-ratio 0.5 --out $d/dt5_s --log $d/dt5_s.jsonl > $d/dt5_s.out 2>&1 || fail "bf16 delayed, R = 0.5, synchronous"
for cfg in "cpu bf16 1 --optimizer lamb" "cpu bf16 3" "emu bf16 1" "emu fp32 3 --offload-param cpu --pin-memory"; do
  set -- $cfg; tr=$1; p=$2; s=$3; shift 3
  for sync in 0 1; do
    x=(emu $p); [ $tr = cpu ] && x=(cpu --precision $p)
    [ $tr$s = emu3 ] && x+=(--trace $d/th_trace_$sync.json) # (the async held copy, the GPU's idle span: below)
    ZEROC_DELAYED_SYNC=$sync "${x[@]}" $common "${ds[@]}" --zero-stage $s "$@" --out $d/th_${tr}_${s}_$sync \
      --log $d/th_${tr}_${s}_$sync.jsonl > $d/th_${tr}_${s}_$sync.out 2>&1 || { tail -5 $d/th_${tr}_${s}_$sync.out; fail "$tr $p stage $s sync=$sync"; }
  done
done
for pair in "dc dc_s" "dt5 dt5_s" "th_cpu_1_0 th_cpu_1_1" "th_cpu_3_0 th_cpu_3_1" "th_emu_1_0 th_emu_1_1" "th_emu_3_0 th_emu_3_1"; do
  set -- $pair; a=$d/$1; b=$d/$2; same=1
  grep -q "delayed update: the host's update runs on a helper thread" $a.out && grep -q "delayed update: synchronous.*ZEROC_DELAYED_SYNC=1" $b.out \
    || { same=0; echo "$1: the log does not say which path ran"; }
  [ -n "$(steps $a.jsonl)" ] && [ "$(steps $a.jsonl)" = "$(steps $b.jsonl)" ] || { same=0; echo "logs differ: $1"; }
  if [ -d $a ]; then for f in $(cd $a && ls model_*.bin step_*/*_rank*.bin); do cmp -s $a/$f $b/$f || { same=0; echo "differs: $1 $f"; }; done; fi
  grep -q "plan vs allocated: every kind on every rank matches exactly" $a.out || { same=0; echo "$1: plan != allocated"; }
  [ $same = 1 ] && echo "ok   $1: helper thread = synchronous, bit for bit ($(steps $a.jsonl | wc -l) steps$([ -d $a ] && echo ', weights and optimizer state'))" \
    || fail "$1: the threaded delayed update differs from the synchronous one"
done
# The held gradients' copy to the host: asynchronous into pinned memory (th_emu_3: the emulator
# faults a helper that reads them before the copy's event), synchronous into pageable (th_emu_1).
# The trace's "gpu idle" spans (device_idle: the GPU drained, nothing queued on its compute stream
# while the host updates): on each rank one per host update in steps 1, 3 and 4 (step 2's is held;
# step 4 applies step 3's and its own), each either the step's thread's "wait update" for the
# helper (threaded, after the held gradients' copy landed) or the streamed host update's "update"
# spans from first to last; the step log's device_idle_flight_ms is their sum, from the trace.
grep -q "held gradients' copy to the host is asynchronous (pinned" $d/th_emu_3_0.out \
  && grep -q "held gradients' copy to the host is synchronous (pageable" $d/th_emu_1_0.out \
  || fail "the held copy's path is not logged"
$PYTHON - $d/th_trace_0.json $d/th_emu_3_0.jsonl $d/th_trace_1.json $d/th_emu_3_1.jsonl <<'PY' \
  && echo "ok   the held copy overlaps the forward; the GPU's idle spans = the log's device_idle" || fail "GPU idle spans"
import json, sys
bad = []
for trace, logf, threaded in ((sys.argv[1], sys.argv[2], 1), (sys.argv[3], sys.argv[4], 0)):
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    near = lambda x, y: abs(x - y) <= 2e-3  # (microseconds, written to 3 decimals)
    for pid in (0, 1):
        sp = lambda name, lane=None: [e for e in ev if e["name"] == name and e["pid"] == pid and lane in (None, e["tid"])]
        idle, wait, held, upd = sp("gpu idle"), sp("wait update", 0), sp("held gradients"), sp("update", 0)
        if sorted(e["args"]["step"] for e in idle) != [1, 3, 4, 4] or any(e["cat"] != "device_idle" for e in idle):
            bad.append(f"{trace} rank {pid}: idle spans {idle}")
        if sorted(e["args"]["step"] for e in held) != ([3, 4] if threaded else []) or len(wait) != len(held):
            bad.append(f"{trace} rank {pid}: held copies {held}, waits {wait}")
        for i in idle:
            st, a, b = i["args"]["step"], i["ts"], i["ts"] + i["dur"]
            inwait = [w for w in wait if w["ts"] - 2e-3 <= a and b <= w["ts"] + w["dur"] + 2e-3]
            streamed = any(near(u["ts"], a) for u in upd) and any(near(u["ts"] + u["dur"], b) for u in upd)
            if not (inwait or streamed): bad.append(f"{trace}: {i} neither a wait nor a streamed update")
            if inwait and not any(h["args"]["step"] == st and h["ts"] + h["dur"] <= a for h in held):
                bad.append(f"{trace}: {i} before its copy landed")
    log = {o["step"]: o for o in map(json.loads, open(logf)) if "loss" in o and "step" in o}
    for st, o in log.items():
        want = sum(e["dur"] for e in ev if e["name"] == "gpu idle" and e["pid"] == 0 and e["args"]["step"] == st) / 1e3
        got = o.get("device_idle_flight_ms", 0.0)
        if abs(got - want) > 2e-3 or (st != 2) != (want > 0):
            bad.append(f"{logf} step {st}: device_idle_flight_ms {got}, the spans sum to {want}")
for b in bad: print(b)
sys.exit(1 if bad else 0)
PY
cpu $common "${ds[@]}" --steps 2 --zero-stage 3 --offload-param nvme --nvme-path $d/nvme > $d/dn.out 2>&1 || { tail -3 $d/dn.out; fail "delayed update, parameters on NVMe"; }
grep -q "delayed update: synchronous, after the next step's backward (the parameters on NVMe" $d/dn.out \
  && echo "ok   parameters on NVMe: $(grep 'delayed update:' $d/dn.out)" || fail "the NVMe fallback is not logged"

echo "== 7c. kill -9 during a step with a held update, then --resume"
kr=(--lr 1e-2 --warmup 0 --lr-schedule constant --zero-stage 3 --offload-optimizer cpu --offload-delayed-update
    --offload-delay-warmup 1 --steps 60 --save-every 3)
cpu $common "${kr[@]}" --out $d/kfull --log $d/kfull.jsonl > $d/kfull.out 2>&1 || fail "uninterrupted run (7c)"
cpu $common "${kr[@]}" --out $d/killed --log $d/k1.jsonl > $d/k1.out 2>&1 &
pid=$!
n1() { local n; n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
for i in $(seq 600); do [ "$(n1 $d/k1.jsonl)" -ge 8 ] && break; sleep 0.05; done
pkill -9 -f "train_gpt_cpu.*$d/killed" ; wait $pid 2>/dev/null
for i in $(seq 200); do pgrep -f "train_gpt_cpu.*$d/killed" > /dev/null || break; sleep 0.05; done
k=$(n1 $d/k1.jsonl)
cpu $run "${kr[@]}" --resume $d/killed --out $d/resumed --log $d/k2.jsonl > $d/k2.out 2>&1 || { tail -3 $d/k2.out; fail "resume after kill -9"; }
step=$(grep -o 'resuming from .*: step [0-9]*' $d/k2.out | grep -o '[0-9]*$')
a=$(steps $d/kfull.jsonl | tail -n +$((${step:-0} + 1))); b=$(steps $d/k2.jsonl)
[ "$k" -lt 60 ] && [ -n "$step" ] && [ "$step" -gt 1 ] && [ -n "$b" ] && [ "$a" = "$b" ] \
  && cmp -s $d/kfull/model_00000060.bin $d/resumed/model_00000060.bin \
  && echo "ok   killed after step $k ($([ $((k % 3)) != 0 ] && echo "step $k's update held, not yet applied" || echo "just after a save, which applied the held update")), resumed from step $step: the rest and the final weights bit for bit" \
  || fail "resume after kill -9 with a held update (killed after ${k} steps, resumed from ${step:-?})"

echo "== 7d. the delayed update's helper thread with the optimizer state on NVMe"
mkdir -p $d/nv
nd=(--lr 1e-2 --warmup 0 --lr-schedule constant --offload-delayed-update --offload-delay-warmup 1 --nvme-path $d/nv
    --nvme-buffer-size 2048)
ok7d() { grep -q "plan vs allocated: every kind on every rank matches exactly" $1.out || { echo "$1: plan"; false; }; }
helper7d="delayed update: the host's update runs on a helper thread .*, its NVMe reads and writes too"
# (the fp32 pair: 6 steps of batch 8 traced, each NVMe write slowed by 2 ms: the helper outlives the forward)
for cfg in "bf16 1 5" "fp32 2 6 --nvme-readahead 60000" "bf16 3 5 --nvme-host-cache 100000"; do
  set -- $cfg; p=$1; s=$2; n=$3; shift 3; k=nv_${p}_$s
  for sync in 0 1; do
    x=(--batch 2); [ $s = 2 ] && x=(--batch 8 --trace $d/${k}_$sync.json)
    ZEROC_NVME_WRITE_DELAY_MS=$([ $s = 2 ] && echo 2 || echo 0) ZEROC_DELAYED_SYNC=$sync cpu $model ${run/--batch 2/} \
      "${nd[@]}" --steps $n --precision $p --zero-stage $s --offload-optimizer nvme "$@" "${x[@]}" --out $d/${k}_$sync \
      --log $d/${k}_$sync.jsonl > $d/${k}_$sync.out 2>&1 || { tail -5 $d/${k}_$sync.out; fail "$k sync=$sync"; }
  done
  a=$d/${k}_0; b=$d/${k}_1; same=1
  grep -q "$helper7d" $a.out && grep -q "delayed update: synchronous.*ZEROC_DELAYED_SYNC=1" $b.out \
    || { same=0; echo "$k: the log does not say which path ran"; }
  [ -n "$(steps $a.jsonl)" ] && [ "$(steps $a.jsonl)" = "$(steps $b.jsonl)" ] || { same=0; echo "logs differ: $k"; }
  for f in $(cd $a && ls model_*.bin step_*/*_rank*.bin); do cmp -s $a/$f $b/$f || { same=0; echo "differs: $f"; }; done
  ok7d $a && ok7d $b || same=0
  grep -q '"master":"nvme"' $a.jsonl && grep -q '"nvme_read":[1-9]' $a.jsonl || { same=0; echo "$k: not on NVMe"; }
  if [ $s = 2 ]; then grep -q "^note: --nvme-readahead 60000: no read-ahead area with the delayed update on its" \
    $a.out || { same=0; echo "$k: no note that the read-ahead area is off"; }; fi
  [ $same = 1 ] && echo "ok   $p ZeRO-$s, optimizer on NVMe $*: helper thread = synchronous, bit for bit ($n steps," \
    "weights and optimizer state)" || fail "$k: the threaded delayed update on NVMe differs from the synchronous one"
done
cpu $common "${nd[@]}" --steps 5 --precision bf16 --zero-stage 1 --offload-optimizer cpu --out $d/nv_host \
  --log $d/nv_host.jsonl > $d/nv_host.out 2>&1 || fail "bf16 ZeRO-1 delayed, optimizer in host memory"
[ "$(steps $d/nv_host.jsonl)" = "$(steps $d/nv_bf16_1_0.jsonl)" ] \
  && cmp -s $d/nv_host/model_00000005.bin $d/nv_bf16_1_0/model_00000005.bin \
  && echo "ok   bf16 ZeRO-1: the threaded delayed update on NVMe = with the optimizer in host memory, bit for bit" \
  || fail "the threaded delayed update on NVMe differs from the one in host memory"
# The trace of the fp32 pair: per step, the threaded run's NVMe spans' bytes = the log's (but the
# last step's: its final save reads the state through the stores too, counted in no step; the
# synchronous run draws a read ahead during the held step 2 there and counts it in step 3, as
# before); the writes of the update
# step n applies (the trace's step n) submitted before step n's backward ended: the threaded run's
# helper wrote some during the forward and backward (its writes are slowed, so it outlives them),
# the synchronous run none (it writes after the backward); only the helper draws "update" spans off
# the compute lane.
$PYTHON - $d/nv_fp32_2_0.json $d/nv_fp32_2_0.jsonl $d/nv_fp32_2_1.json $d/nv_fp32_2_1.jsonl <<'PY' \
  || fail "7d: the NVMe trace"
import json, sys
bad, hidden = [], {}
for tr, lg, threaded in ((sys.argv[1], sys.argv[2], 1), (sys.argv[3], sys.argv[4], 0)):
    X = [e for e in json.load(open(tr))["traceEvents"] if e.get("ph") == "X"]
    log = [o for o in map(json.loads, open(lg)) if "loss" in o and "step" in o]
    of = lambda pid, name, n: [e for e in X if e["pid"] == pid and e["name"] == name and e["args"]["step"] == n]
    hidden[threaded] = 0
    for o in log:
        n = o["step"]
        r = sum(e["args"].get("bytes", 0) for e in of(0, "nvme read", n))
        w = sum(e["args"].get("bytes", 0) for e in of(0, "nvme write", n))
        if threaded and n != log[-1]["step"] and (r != o["nvme_read"] or w != o["nvme_write"]):
            bad.append(f"{tr} step {n}: spans read {r} written {w}, the log {o['nvme_read']} {o['nvme_write']}")
        for pid in (0, 1):
            end = max(e["ts"] + e["dur"] for e in of(pid, "backward_pass", n) if e["tid"] == 0)
            hidden[threaded] += sum(1 for e in of(pid, "nvme write", n) if e["ts"] < end)
    helper = [e for e in X if e["name"] == "update" and e["tid"] != 0]
    if threaded != (len(helper) > 0): bad.append(f"{tr}: {len(helper)} update spans off the compute lane")
if not hidden[1] or hidden[0]:
    bad.append(f"writes submitted before the backward's end: threaded {hidden[1]}, synchronous {hidden[0]}")
for b in bad: print(b)
if not bad: print(f"ok   the trace: NVMe spans = the log per step; {hidden[1]} writes of the helper's updates before "
                  "the backward's end, none synchronous")
sys.exit(1 if bad else 0)
PY
# kill -9 while the helper streams (its writes slowed: it outlives each forward and backward), --resume
kn=(--lr 1e-2 --warmup 0 --lr-schedule constant --zero-stage 2 --offload-optimizer nvme --nvme-path $d/nv
    --nvme-buffer-size 2048 --offload-delayed-update --offload-delay-warmup 1 --steps 40 --save-every 3)
cpu $common "${kn[@]}" --out $d/nkfull --log $d/nkfull.jsonl > $d/nkfull.out 2>&1 || fail "uninterrupted run (7d)"
ZEROC_NVME_WRITE_DELAY_MS=1 cpu $common "${kn[@]}" --out $d/nkilled --log $d/nk1.jsonl > $d/nk1.out 2>&1 &
pid=$!
for i in $(seq 600); do [ "$(n1 $d/nk1.jsonl)" -ge 8 ] && break; sleep 0.05; done
pkill -9 -f "train_gpt_cpu.*$d/nkilled" ; wait $pid 2>/dev/null
for i in $(seq 200); do pgrep -f "train_gpt_cpu.*$d/nkilled" > /dev/null || break; sleep 0.05; done
k=$(n1 $d/nk1.jsonl)
cpu $run "${kn[@]}" --resume $d/nkilled --out $d/nresumed --log $d/nk2.jsonl > $d/nk2.out 2>&1 \
  || { tail -3 $d/nk2.out; fail "resume after kill -9 (7d)"; }
step=$(grep -o 'resuming from .*: step [0-9]*' $d/nk2.out | grep -o '[0-9]*$')
a=$(steps $d/nkfull.jsonl | tail -n +$((${step:-0} + 1))); b=$(steps $d/nk2.jsonl)
[ "$k" -lt 40 ] && [ -n "$step" ] && [ "$step" -gt 1 ] && [ -n "$b" ] && [ "$a" = "$b" ] \
  && cmp -s $d/nkfull/model_00000040.bin $d/nresumed/model_00000040.bin && [ -z "$(ls $d/nv)" ] \
  && echo "ok   optimizer on NVMe: killed after step $k, resumed from step $step: the rest and the final weights" \
          "bit for bit" \
  || fail "resume after kill -9 with the helper streaming from NVMe (killed after ${k}, resumed from ${step:-?})"
# a stop signal while the helper streams (validation and samples between steps run beside it): exit
# 0 after a save that joined it; that checkpoint = the one of a run of as many steps (whose last
# update is exact: the same math), file for file
$PYTHON test/zero_check.py shard $d/val.bin 2000 512 2
ks=("${kn[@]/--steps 40/--val-data $d/val.bin --val-every 3 --val-steps 2 --sample-every 1 --sample-len 4}")
ZEROC_NVME_WRITE_DELAY_MS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu $common "${ks[@]}" --steps 100000 \
  --out $d/nstop --log $d/nstop.jsonl > $d/nstop.out 2>&1 &
job=$!
for i in $(seq 600); do [ "$(n1 $d/nstop.jsonl)" -ge 8 ] && break; sleep 0.05; done
kill -USR1 $job; wait $job; rc=$?
s=$(sed 's/step_0*//' $d/nstop/latest 2>/dev/null)
cpu $common "${ks[@]}" --steps ${s:-1} --out $d/nstop_ref > $d/nstop_ref.out 2>&1 || fail "the stop's reference run"
same=0; sd=step_$(printf %08d ${s:-0})
for f in $(cd $d/nstop_ref/$sd && ls *.bin); do
  cmp -s $d/nstop/$sd/$f $d/nstop_ref/$sd/$f && same=1 || { same=0; break; }
done
[ $rc = 0 ] && [ -n "$s" ] && [ $same = 1 ] && grep -q "^stopping after step $s of 100000: SIGUSR1 received" \
  $d/nstop.out && echo "ok   SIGUSR1 while the helper streams from NVMe: exit 0, saved at step $s = a run of" \
  "$s steps, file for file" \
  || fail "a stop signal with the helper streaming from NVMe: exit $rc, stopped at step ${s:-?}, checkpoint same: $same"
# the GPU trainer (emulated), ZeRO-1, bf16, pinned (the held gradients' copy asynchronous)
for sync in 0 1; do
  ZEROC_DELAYED_SYNC=$sync emu bf16 $common "${nd[@]}" --steps 5 --zero-stage 1 --offload-optimizer nvme --pin-memory \
    --out $d/nvg_$sync --log $d/nvg_$sync.jsonl > $d/nvg_$sync.out 2>&1 \
    || { tail -5 $d/nvg_$sync.out; fail "emu bf16 NVMe delayed sync=$sync"; }
done
same=1
grep -q "$helper7d" $d/nvg_0.out && grep -q "copy to the host is asynchronous" $d/nvg_0.out || same=0
[ -n "$(steps $d/nvg_0.jsonl)" ] && [ "$(steps $d/nvg_0.jsonl)" = "$(steps $d/nvg_1.jsonl)" ] || same=0
for f in $(cd $d/nvg_0 && ls model_*.bin step_*/*_rank*.bin); do
  cmp -s $d/nvg_0/$f $d/nvg_1/$f || { same=0; echo "differs: $f"; }
done
ok7d $d/nvg_0 && ok7d $d/nvg_1 || same=0
[ $same = 1 ] && echo "ok   GPU (emulated) bf16 ZeRO-1, optimizer on NVMe: helper thread = synchronous, bit for bit," \
  "planned to the byte" || fail "GPU (emulated): the threaded delayed update on NVMe differs"
cpu $common "${nd[@]}" --steps 2 --zero-stage 3 --offload-optimizer nvme --offload-param nvme > $d/nvp.out 2>&1 \
  || fail "optimizer and parameters on NVMe"
grep -q "delayed update: synchronous, after the next step's backward (the parameters on NVMe" $d/nvp.out \
  && echo "ok   optimizer and parameters on NVMe: $(grep 'delayed update:' $d/nvp.out | cut -c1-80)" \
  || fail "optimizer and parameters on NVMe: not synchronous"

echo "$fails failures"
[ $fails -eq 0 ]
