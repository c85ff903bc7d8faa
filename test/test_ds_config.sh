#!/usr/bin/env bash
# --deepspeed FILE.json (ds_config.h): the DeepSpeed configs users paste from tutorials run as
# given under mpirun; "auto" takes the command line or the default and the resolved values reach
# the trainer (its JSON log); a file value that disagrees with an option is an error naming both;
# train_batch_size = micro x accumulation x world is checked and any two give the third; unknown
# keys warn (error with --strict); wrong types and bad JSON give one line naming the key path or
# the position; DeepSpeed's three schedulers match an independent Python rewrite of DeepSpeed's
# code step by step; fp16/bf16 enabled trains in that precision.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu || exit 1
. test/lib.sh; new_scratch ds_config
# A process started without mpirun (most runs below) is an MPI singleton; OpenMPI would start an
# orted daemon beside each (0.3 s and 0.2 CPU s of the ~0.7 s such a run takes here): this one
# never spawns processes, so it runs without. (mpirun's ranks ignore the setting.)
export OMPI_MCA_ess_singleton_isolated=1
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
tiny=(--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16
      --val-every 0 --sample-every 0 --train-data $d/train.bin)
np2=(env OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu)
np1=(env OMP_NUM_THREADS=1 ./train_gpt_cpu)
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
# json NAME TEXT: write a config file
json() { printf '%s\n' "$2" > $d/$1.json; }
# setting LOG KEY FIELD: a field of one setting in the log's {"event":"config"} line
setting() {
  $PYTHON - "$@" <<'PY'
import json, sys
log, key, field = sys.argv[1:4]
for line in open(log):
    o = json.loads(line)
    if o.get("event") == "config":
        print(json.dumps(o["settings"][key].get(field)))
PY
}
# expect_setting LOG KEY VALUE SOURCE: the config event says KEY = VALUE from SOURCE
expect_setting() {
  local v s
  v=$(setting "$1" "$2" value); s=$(setting "$1" "$2" source)
  if [ "$v" = "$3" ] && [ "$s" = "\"$4\"" ]; then echo "ok   $2 = $v ($4)"
  else fail "$1: $2 = $v from $s, expected $3 from \"$4\""; fi
}
# expect_error NAME PATTERN ARGS...: non-zero exit, exactly one stderr line, matching PATTERN
expect_error() {
  local name=$1 pattern=$2; shift 2
  "$@" > $d/$name.out 2> $d/$name.err; local rc=$?
  local lines; lines=$(grep -v -e '^-----' -e '^$' -e 'mpirun\|Primary job\|Per user-direction\|Process name\|Exit code\|non-zero exit\|aborted\|terminated' $d/$name.err | grep -c .)
  if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && grep -Eq -- "$pattern" $d/$name.err; then
    echo "ok   $name: $(head -n 1 $d/$name.err)"
  else
    fail "$name: rc=$rc lines=$lines, expected one line matching: $pattern"; cat $d/$name.err
  fi
}
# expect_run NAME ARGS...: exit 0
expect_run() {
  local name=$1; shift
  if "$@" > $d/$name.out 2> $d/$name.err; then echo "ok   $name runs"
  else fail "$name: exit $?"; tail -n 5 $d/$name.err; return 1; fi
}

echo "== the examples (examples/) run as given (2 processes)"
for z in 2 3; do
  ex=examples/ds_config_zero$z.json
  # as given: where the project's seeds are at hand (../shared/examples), the copy is theirs
  seed=../shared/examples/ds_config_zero$z.json
  if [ -f "$seed" ]; then
    cmp -s "$seed" "$ex" && echo "ok   $ex is the seeds' $seed" || fail "$ex differs from $seed"
  fi
  log=$d/zero$z.jsonl
  expect_run zero$z "${np2[@]}" "${tiny[@]}" --steps 3 --deepspeed "$ex" --log $log || continue
  n=$($PYTHON -c "import json,sys; print(sum(1 for l in open('$log') if json.loads(l).get('event') == 'memory' and json.loads(l)['zero_stage'] == $z))")
  [ "$n" = 2 ] && echo "ok   zero_stage $z on both ranks in the memory events" || fail "zero$z: memory events with zero_stage $z: $n"
  expect_setting $log zero-stage $z file
  expect_setting $log lr-schedule '"WarmupLR"' file
  expect_setting $log lr 0.001 default
  expect_setting $log offload-optimizer '"cpu"' file
  expect_setting $log pin-memory true file
  grep -q "^resolved configuration (--deepspeed $ex, 2 processes)" $d/zero$z.out || fail "zero$z: no resolved configuration on stdout"
  grep -Eq -- "--zero-stage +$z +ds_config_zero$z.json" $d/zero$z.out \
    || fail "zero$z: the resolved configuration does not show the stage from the file"
  grep -Eq -- '--lr +0.001 +default +scheduler.params.warmup_max_lr = "auto"' $d/zero$z.out \
    || fail "zero$z: the resolved configuration does not show what \"auto\" became for the lr"
  # offload: honoured by the GPU trainer (test_offload); the CPU trainer keeps everything in host
  # memory already and says so once (only rank 0 speaks), with no warning
  [ "$(grep -c "^note: --offload-optimizer cpu" $d/zero$z.out)" = 1 ] && ! grep -q "offload" $d/zero$z.err \
    && echo "ok   offload: one note, no warning" || fail "zero$z: offload note/warnings: $(grep -i offload $d/zero$z.out $d/zero$z.err)"
  # "auto" everywhere: WarmupLR from 0 to --lr's default 0.001 over --warmup's default 10, log warmup
  $PYTHON test/ds_lr_reference.py check $log WarmupLR warmup_min_lr=0 warmup_max_lr=0.001 warmup_num_steps=10 \
    warmup_type=log || fail "zero$z: lr schedule"
  expect_run zero${z}_strict "${np2[@]}" "${tiny[@]}" --steps 1 --deepspeed "$ex" --strict
done

echo "== \"auto\" takes the command line, and the resolved values reach the trainer"
ex=examples/ds_config_zero2.json
log=$d/auto.jsonl
expect_run auto "${np2[@]}" "${tiny[@]}" --steps 6 --deepspeed $ex --log $log --lr 0.002 --warmup 4 --batch 2 \
  --grad-clip 0.5 --beta2 0.99 && {
  expect_setting $log lr 0.002 "command line"
  [ "$(setting $log lr file_key)" = '"scheduler.params.warmup_max_lr"' ] && [ "$(setting $log lr auto)" = true ] \
    && echo "ok   lr: file said \"auto\"" || fail "auto: lr's file_key/auto"
  expect_setting $log batch 2 "command line"
  expect_setting $log total-batch 64 derived
  expect_setting $log grad-accum 1 derived
  expect_setting $log grad-clip 0.5 "command line"
  expect_setting $log beta2 0.99 "command line"
  expect_setting $log beta1 0.9 default
  expect_setting $log warmup 4 "command line"
  expect_setting $log print-every 20 file
  $PYTHON test/ds_lr_reference.py check $log WarmupLR warmup_min_lr=0 warmup_max_lr=0.002 warmup_num_steps=4 \
    warmup_type=log || fail "auto: lr schedule"
  # steps_per_print 20: the step line at the first and last step only
  n=$(grep -c '^step ' $d/auto.out)
  [ "$n" = 2 ] && echo "ok   steps_per_print 20: 2 step lines in 6 steps" || fail "auto: $n step lines, expected 2"
}
json every2 '{"steps_per_print": 2}'
expect_run every2 "${np1[@]}" "${tiny[@]}" --steps 5 --deepspeed $d/every2.json && {
  got=$(grep -o '^step *[0-9]*' $d/every2.out | tr -s ' ' | cut -d' ' -f2 | tr '\n' ' ')
  [ "$got" = "1 2 4 5 " ] && echo "ok   steps_per_print 2: steps $got" || fail "every2: step lines $got"
}

echo "== a value in the file against a different one on the command line"
json lr '{"optimizer": {"type": "AdamW", "params": {"lr": 0.001}}}'
expect_error conflict_lr "optimizer.params.lr: the file says 0.001 but the command line says --lr 0.002" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/lr.json --lr 0.002
expect_run same_lr "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/lr.json --lr 1e-3 --log $d/same_lr.jsonl \
  && expect_setting $d/same_lr.jsonl lr 0.001 file
json stage '{"zero_optimization": {"stage": 2}}'
expect_error conflict_stage "zero_optimization.stage: the file says 2 but the command line says --zero-stage 3" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/stage.json --zero-stage 3
json sched '{"scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 10}}}'
expect_error conflict_sched 'scheduler.type: the file says "WarmupDecayLR" but the command line says --lr-schedule cosine' \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/sched.json --lr-schedule cosine
json tb '{"train_batch_size": 16}'
expect_error conflict_tb "train_batch_size: the file says 16 sequences .* but the command line says --total-batch 512" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/tb.json --total-batch 512

echo "== train_batch_size = micro x accumulation x world size"
json all_bad '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}'
expect_error batch_all_bad "all_bad.json: train_batch_size 64 != train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 4 x world size 2 = 32" \
  "${np2[@]}" "${tiny[@]}" --deepspeed $d/all_bad.json
json not_whole '{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}'
expect_error batch_not_whole "not_whole.json: train_batch_size 30 is not a multiple of train_micro_batch_size_per_gpu 4 x world size 2 = 8" \
  "${np2[@]}" "${tiny[@]}" --deepspeed $d/not_whole.json
# name | file | batch | grad-accum | total-batch (tokens) | extra options
while IFS='|' read -r name text want_b want_g want_t extra; do
  json $name "$text"
  log=$d/$name.jsonl
  # shellcheck disable=SC2086
  expect_run $name "${np2[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/$name.json --log $log $extra || continue
  for kv in "batch $want_b" "grad-accum $want_g" "total-batch $want_t"; do
    set -- $kv
    v=$(setting $log $1 value)
    [ "$v" = "$2" ] && echo "ok   $name: $1 = $v" || fail "$name: $1 = $v, expected $2"
  done
  # the header's batch line is what the trainer runs with
  grep -q "B=$want_b T=16 x 2 procs x $want_g accum = $want_t tokens/step" $d/$name.out \
    || fail "$name: header batch line: $(grep -o 'B=[^|]*' $d/$name.out)"
done <<'EOF'
all_ok|{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}|4|4|512|
tb_mb|{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}|4|4|512|
tb_ga|{"train_batch_size": 32, "gradient_accumulation_steps": 2}|8|2|512|
mb_ga|{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3}|2|3|192|
tb_only|{"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto"}|8|2|512|
tb_cli_batch|{"train_batch_size": 32}|2|8|512|--batch 2
mb_only|{"train_micro_batch_size_per_gpu": 3}|3|1|96|
tb_alone|{"train_batch_size": 4}|2|1|64|
ga_alone|{"gradient_accumulation_steps": 3}|8|3|768|
ga_cli_tokens|{"gradient_accumulation_steps": 2}|4|2|256|--total-batch 256
EOF

echo "== prescale_gradients / gradient_predivide_factor: where the mean over ranks divides"
# DeepSpeed's engine (allreduce_bucket): prescale_gradients true multiplies each rank's gradient
# by 1/world before the sum; false multiplies by 1/f before and by f/world after. Every choice is
# the plain mean: 2 ranks x 2 sequences against one process with all 4 (no averaging over ranks
# at all), losses and gradient norms within rounding; and those whose arithmetic is today's
# (no key, prescale either way with f = 1, f = world) bit for bit the run without the keys.
pm=(--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --val-every 0 --sample-every 0
    --train-data $d/train.bin --steps 4 --seed 3 --lr 1e-2)
traj() { grep '"loss"' "$1" | grep -o '"loss":[^,]*\|"grad_norm":[^,]*' | cut -d: -f2 | tr '\n' ' '; }
expect_run pm_one "${np1[@]}" "${pm[@]}" --batch 4 --log $d/pm_one.jsonl
expect_run pm_none "${np2[@]}" "${pm[@]}" --batch 2 --log $d/pm_none.jsonl
one=$(traj $d/pm_one.jsonl); none=$(traj $d/pm_none.jsonl)
while IFS='|' read -r name text stage same; do
  json $name "$text"
  expect_run $name "${np2[@]}" "${pm[@]}" --batch 2 --zero-stage $stage --deepspeed $d/$name.json --log $d/$name.jsonl < /dev/null || continue
  [ -s $d/$name.err ] && fail "$name: stderr: $(cat $d/$name.err)"
  got=$(traj $d/$name.jsonl)
  if [ "$same" = same ]; then
    [ "$got" = "$none" ] && echo "ok   $name: bit for bit the run without the keys" || fail "$name: $got != $none"
  fi
  $PYTHON - "$one" "$got" <<'PY' && echo "ok   $name: the mean over ranks (one process: $one)" || fail "$name: not the plain mean: $got vs $one"
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
assert len(a) == len(b) == 8 and all(abs(x - y) <= 2e-5 * abs(x) for x, y in zip(a, b)), (a, b)
PY
done <<'EOF'
pm_false|{"prescale_gradients": false}|0|same
pm_false_f1|{"prescale_gradients": false, "gradient_predivide_factor": 1.0}|0|same
pm_true|{"prescale_gradients": true}|0|same
pm_f_world|{"gradient_predivide_factor": 2}|0|same
pm_f3|{"gradient_predivide_factor": 3}|0|
pm_f8_stage2|{"gradient_predivide_factor": 8.0, "prescale_gradients": false}|2|
pm_true_f3_stage3|{"prescale_gradients": true, "gradient_predivide_factor": 3}|3|same
EOF
expect_setting $d/pm_f3.jsonl gradient_predivide_factor 3 file
expect_setting $d/pm_true.jsonl prescale_gradients true file

echo "== keys that ask for what happens anyway: silent; those asking for something else: one line"
json quiet '{"prescale_gradients": false, "gradient_predivide_factor": 1.0, "zero_allow_untested_optimizer": true,
  "fp16": {"enabled": false, "auto_cast": false}, "bf16": {"enabled": false, "bf16_master_weights_and_grads": false},
  "communication_data_type": "fp32", "aio": {"use_gds": false, "intra_op_parallelism": 1},
  "compression_training": {"weight_quantization": {"shared_parameters": {"enabled": false}}},
  "data_efficiency": {"enabled": false}, "torch_autocast": {"enabled": false}, "sequence_parallel_size": 1,
  "autotuning": {"enabled": false, "fast": true},
  "zero_optimization": {"stage": 1, "gather_16bit_weights_on_model_save": true}}'
expect_run quiet "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/quiet.json --strict \
  && { [ -s $d/quiet.err ] && fail "quiet: $(cat $d/quiet.err)" || echo "ok   quiet: nothing on stderr under --strict"; }
json gds '{"aio": {"use_gds": true}}'
# GPUDirect Storage: NVMe straight into the memory that computes. The CPU trainer's direct I/O is
# that already (silent); the GPU trainer's goes through host buffers (a warning from its training
# runs: its --plan describes the CPU build, so it is not checked here)
./train_gpt_cpu --plan --layers 2 --channels 32 --heads 2 --deepspeed $d/gds.json --strict > $d/gds.out 2> $d/gds.err \
  && [ ! -s $d/gds.err ] && echo "ok   aio.use_gds true: silent in the CPU trainer" || fail "gds (CPU): $(cat $d/gds.err)"
json comm16 '{"communication_data_type": "bf16"}'
expect_run comm16 "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/comm16.json \
  && grep -q 'communication_data_type: "bf16": not implemented; the collectives run in the training precision, fp32' $d/comm16.err \
  && echo "ok   communication_data_type bf16 in an fp32 run warns" || fail "comm16: $(cat $d/comm16.err)"
expect_run comm16_bf16 "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/comm16.json --precision bf16 --strict
while IFS='|' read -r name text pattern; do
  json $name "$text"
  expect_error $name "$d/$name.json: $pattern" "${np1[@]}" "${tiny[@]}" --deepspeed $d/$name.json
done <<'EOF'
compress|{"compression_training": {"weight_quantization": {"shared_parameters": {"enabled": true}}}}|compression_training: DeepSpeed Compression .*not implemented
ltd|{"data_efficiency": {"enabled": true}}|data_efficiency: data efficiency .*not implemented
b16master|{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}}|bf16.bf16_master_weights_and_grads: true is not implemented
autotune|{"train_micro_batch_size_per_gpu": "auto", "autotuning": {"enabled": true, "max_train_batch_size": 64}}|autotuning: DeepSpeed's autotuner .*autotuning.enabled false trains the file as written.*not implemented
predivide0|{"gradient_predivide_factor": 0}|gradient_predivide_factor: expected a number > 0
EOF

echo "== unknown keys: a warning naming each; an error with --strict"
# at the top level: a key DeepSpeed reads but this trainer does not (flops_profiler) and a likely
# typo of one (within two edits: train_batch_sise) warn; a key DeepSpeed does not read either
# (foo, a program's own) is a note, as DeepSpeed passes over it without a word
json unknown '{"foo": 1, "flops_profiler": {"enabled": true}, "train_batch_sise": 8, "zero_optimization": {"stage": 1, "bar": true}, "optimizer": {"type": "adamw", "params": {"lr": "auto", "nesterov": 1}}}'
expect_run unknown "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/unknown.json && {
  for k in "train_batch_sise: unknown key (did you mean train_batch_size?)" "flops_profiler: a DeepSpeed setting this trainer does not implement" \
           "zero_optimization.bar: unknown key" "optimizer.params.nesterov: unknown key"; do
    grep -qF "warning: $d/unknown.json: $k" $d/unknown.err && echo "ok   warns: $k" || fail "no warning: $k"
  done
  grep -qF "note: $d/unknown.json: foo: not a DeepSpeed key; ignored (as DeepSpeed ignores it)" $d/unknown.err \
    && echo "ok   foo: a note" || fail "no note for foo"
  [ "$(grep -c . $d/unknown.err)" = 5 ] || fail "unknown: expected 4 warning lines and a note: $(cat $d/unknown.err)"; }
expect_error unknown_strict "^error: $d/unknown.json: foo: not a DeepSpeed key.*--strict" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/unknown.json --strict

echo "== wrong types and values: one line naming the key path"
while IFS='|' read -r name text pattern; do
  json $name "$text"
  expect_error $name "$d/$name.json: $pattern" "${np1[@]}" "${tiny[@]}" --deepspeed $d/$name.json
done <<'EOF'
stage5|{"zero_optimization": {"stage": 5}}|zero_optimization.stage: expected 0, 1, 2 or 3, got 5
lr_string|{"optimizer": {"params": {"lr": "fast"}}}|optimizer.params.lr: expected a number in \[0, 1000\] or "auto", got "fast"
betas_one|{"optimizer": {"params": {"betas": [0.9]}}}|optimizer.params.betas: expected \[beta1, beta2\]
beta_range|{"optimizer": {"params": {"betas": [0.9, 1.5]}}}|optimizer.params.betas\[1\]: expected a number in \[0,
fp16_yes|{"fp16": {"enabled": "yes"}}|fp16.enabled: expected true, false or "auto", got "yes"
sched_type|{"scheduler": {"type": "OneCycle"}}|scheduler.type: expected "WarmupLR", "WarmupDecayLR" or "WarmupCosineLR"
opt_type|{"optimizer": {"type": "OneBitLamb"}}|optimizer.type: expected "AdamW", "Adam", "Lion", "SGD" or "Lamb"
zero_num|{"zero_optimization": 3}|zero_optimization: expected an object, got 3
tb_half|{"train_batch_size": 2.5}|train_batch_size: expected a whole number in \[1,
device|{"zero_optimization": {"offload_optimizer": {"device": "gpu"}}}|zero_optimization.offload_optimizer.device: expected "none", "cpu" or "nvme", got "gpu"
clip_neg|{"gradient_clipping": -1}|gradient_clipping: expected a number in \[0,
print0|{"steps_per_print": 0}|steps_per_print: expected a whole number in \[1,
bucket_str|{"zero_optimization": {"reduce_bucket_size": "big"}}|zero_optimization.reduce_bucket_size: expected a whole number
overlap_int|{"zero_optimization": {"overlap_comm": 1}}|zero_optimization.overlap_comm: expected true, false or "auto", got 1
cos_param|{"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_max_lr": 0.1}}}|scheduler.params.warmup_max_lr: not a parameter of WarmupCosineLR
wtype|{"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "exp"}}}|scheduler.params.warmup_type: expected "log" or "linear", got "exp"
both16|{"fp16": {"enabled": true}, "bf16": {"enabled": true}}|bf16.enabled: fp16.enabled and bf16.enabled are both true
amsgrad|{"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}}|optimizer.params.amsgrad: true is not implemented
l2|{"optimizer": {"type": "Adam", "params": {"adam_w_mode": false, "weight_decay": 0.01}}}|optimizer.params.adam_w_mode: false \(Adam with L2
dup|{"zero_optimization": {"stage": 1, "stage": 2}}|zero_optimization.stage: duplicate key
top_array|[{"train_batch_size": 8}]|expected a JSON object at the top level, got an array
resume_sched|{"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 5}}}|scheduler.params.last_batch_iteration: expected -1
ac_obj|{"activation_checkpointing": true}|activation_checkpointing: expected an object, got true
ac_part|{"activation_checkpointing": {"partition_activations": 1}}|activation_checkpointing.partition_activations: expected true, false or "auto", got 1
ac_num|{"activation_checkpointing": {"number_checkpoints": "many"}}|activation_checkpointing.number_checkpoints: expected a whole number
ac_zero|{"activation_checkpointing": {"number_checkpoints": 0}}|activation_checkpointing.number_checkpoints: expected a whole number >= 1, null
ac_cpu|{"activation_checkpointing": {"cpu_checkpointing": "yes"}}|activation_checkpointing.cpu_checkpointing: expected true, false or "auto"
EOF

echo "== activation_checkpointing: turns full recompute on, number_checkpoints sets every K; the same numbers"
json ac '{"activation_checkpointing": {"partition_activations": true, "cpu_checkpointing": false, "contiguous_memory_optimization": true, "number_checkpoints": 1, "synchronize_checkpoint_boundary": false, "profile": false}}'
expect_run ac_plain "${np1[@]}" "${tiny[@]}" --steps 3 --log $d/ac_plain.jsonl
expect_run ac "${np1[@]}" "${tiny[@]}" --steps 3 --deepspeed $d/ac.json --log $d/ac.jsonl && {
  expect_setting $d/ac.jsonl recompute '"full"' derived
  expect_setting $d/ac.jsonl recompute-every 2 derived
  expect_setting $d/ac.jsonl cpu-checkpointing false file
  expect_setting $d/ac.jsonl activation_checkpointing.partition_activations true file
  grep -Eq "activation_checkpointing.partition_activations +true +ac.json +nothing to partition: .*data parallelism alone" \
    $d/ac.out && echo "ok   the resolved configuration says why there is nothing to partition" \
    || fail "ac: the resolved configuration does not explain partition_activations"
  grep -q "activation recompute full, every 2 layers" $d/ac.out && echo "ok   the plan says: full, every 2 layers" \
    || fail "ac: the memory plan does not show the recompute"
  a=$(grep '"loss"' $d/ac_plain.jsonl | grep -v event | sed -E 's/,"ms".*//') b=$(grep '"loss"' $d/ac.jsonl | grep -v event | sed -E 's/,"ms".*//')
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   the losses of the run without it, bit for bit" || fail "ac: losses differ"; }
expect_run ac_none "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/ac.json --recompute none --log $d/ac_none.jsonl &&
  expect_setting $d/ac_none.jsonl recompute '"none"' "command line"
json ac_null '{"activation_checkpointing": {"number_checkpoints": null, "profile": true}}'
expect_run ac_null "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/ac_null.json --log $d/ac_null.jsonl && {
  expect_setting $d/ac_null.jsonl recompute-every 1 default
  grep -q "activation_checkpointing.profile: true: not implemented in this trainer; ignored" $d/ac_null.err \
    && echo "ok   profile: true warns" || fail "ac_null: no warning for profile"; }

echo "== the file itself"
printf '{\n  "train_batch_size": 8,\n  "gradient_clipping" 1.0\n}\n' > $d/malformed.json
expect_error malformed "malformed.json: not valid JSON at line 3, column 23, near '1.0'" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/malformed.json
printf '{"fp16": {"enabled": ' > $d/truncated.json
expect_error truncated "truncated.json: not valid JSON: unexpected end at line 1, column 22" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/truncated.json
expect_error missing "nope.json: cannot open \(No such file or directory\)" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/nope.json
expect_error missing_np2 "nope.json: cannot open" "${np2[@]}" "${tiny[@]}" --deepspeed $d/nope.json

echo "== DeepSpeed's schedulers, step by step, against test/ds_lr_reference.py"
# name steps file-scheduler reference-params
while IFS='|' read -r name steps sched ref; do
  json $name "{\"scheduler\": $sched}"
  log=$d/$name.jsonl
  # shellcheck disable=SC2086
  expect_run $name "${np1[@]}" "${tiny[@]}" --steps $steps --deepspeed $d/$name.json --log $log || continue
  # shellcheck disable=SC2086
  $PYTHON test/ds_lr_reference.py check $log $ref || fail "$name: lr schedule"
done <<'EOF'
warm_log|12|{"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 5}}|WarmupLR warmup_min_lr=1e-4 warmup_max_lr=2e-3 warmup_num_steps=5 warmup_type=log
warm_lin|12|{"type": "WarmupLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 2e-3, "warmup_num_steps": 5, "warmup_type": "linear"}}|WarmupLR warmup_min_lr=1e-4 warmup_max_lr=2e-3 warmup_num_steps=5 warmup_type=linear
warm_one|6|{"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 1}}|WarmupLR warmup_min_lr=0 warmup_max_lr=0.01 warmup_num_steps=1 warmup_type=log
decay_lin|25|{"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-4, "warmup_max_lr": 3e-3, "warmup_num_steps": 6, "warmup_type": "linear", "total_num_steps": 20}}|WarmupDecayLR warmup_min_lr=1e-4 warmup_max_lr=3e-3 warmup_num_steps=6 warmup_type=linear total_num_steps=20
decay_log|15|{"type": "WarmupDecayLR", "params": {"warmup_num_steps": 4, "total_num_steps": 12}}|WarmupDecayLR warmup_min_lr=0 warmup_max_lr=0.001 warmup_num_steps=4 warmup_type=log total_num_steps=12
cos_log|32|{"type": "WarmupCosineLR", "params": {"total_num_steps": 25, "warmup_min_ratio": 0.1, "warmup_num_steps": 5, "cos_min_ratio": 0.01}}|WarmupCosineLR lr=0.001 total_num_steps=25 warmup_min_ratio=0.1 warmup_num_steps=5 cos_min_ratio=0.01 warmup_type=log
cos_lin|20|{"type": "WarmupCosineLR", "params": {"total_num_steps": 20, "warmup_num_steps": 8, "warmup_type": "linear", "cos_min_ratio": "auto"}}|WarmupCosineLR lr=0.001 total_num_steps=20 warmup_min_ratio=0 warmup_num_steps=8 cos_min_ratio=0.1 warmup_type=linear
cos_short|12|{"type": "WarmupCosineLR", "params": {"total_num_steps": 3, "warmup_num_steps": 6}}|WarmupCosineLR lr=0.001 total_num_steps=3 warmup_min_ratio=0 warmup_num_steps=6 cos_min_ratio=0.1 warmup_type=log
EOF
# the checker must see a wrong schedule: a warmup one step longer, a decay ending one step later
for wrong in "warm_log WarmupLR warmup_min_lr=1e-4 warmup_max_lr=2e-3 warmup_num_steps=6 warmup_type=log" \
             "decay_lin WarmupDecayLR warmup_min_lr=1e-4 warmup_max_lr=3e-3 warmup_num_steps=6 warmup_type=linear total_num_steps=21" \
             "cos_log WarmupLR warmup_min_lr=1e-4 warmup_max_lr=1e-3 warmup_num_steps=5 warmup_type=log"; do
  set -- $wrong
  name=$1; shift
  if [ -f $d/$name.jsonl ] && $PYTHON test/ds_lr_reference.py check $d/$name.jsonl "$@" > $d/wrong_$name.txt; then
    fail "the reference check accepts a wrong schedule for $name: $*"
  else echo "ok   the reference check refuses $name against $*"; fi
done
# the same schedules from the command line alone
log=$d/cli_cos.jsonl
expect_run cli_cos "${np1[@]}" "${tiny[@]}" --steps 14 --lr 0.003 --lr-schedule WarmupCosineLR --warmup 3 \
  --lr-total-steps 10 --warmup-type linear --warmup-min-ratio 0.2 --min-lr-frac 0.05 --log $log \
  && { $PYTHON test/ds_lr_reference.py check $log WarmupCosineLR lr=0.003 total_num_steps=10 warmup_min_ratio=0.2 \
       warmup_num_steps=3 cos_min_ratio=0.05 warmup_type=linear || fail "cli_cos: lr schedule"; }
log=$d/cli_decay.jsonl
expect_run cli_decay "${np1[@]}" "${tiny[@]}" --steps 9 --lr 0.003 --lr-schedule WarmupDecayLR --warmup 3 \
  --warmup-min-lr 0.0005 --log $log \
  && { $PYTHON test/ds_lr_reference.py check $log WarmupDecayLR warmup_min_lr=0.0005 warmup_max_lr=0.003 \
       total_num_steps=9 warmup_num_steps=3 warmup_type=log || fail "cli_decay: lr schedule"; }
json cos_equal '{"scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 5, "warmup_num_steps": 5}}}'
expect_error cos_equal "WarmupCosineLR: total_num_steps 5 equals warmup_num_steps 5" \
  "${np1[@]}" "${tiny[@]}" --deepspeed $d/cos_equal.json

echo "== fp16 / bf16 enabled: the run trains in that precision, with the file's loss-scaler settings"
json bf16 '{"bf16": {"enabled": true}}'
expect_run bf16_on "${np1[@]}" "${tiny[@]}" --steps 2 --deepspeed $d/bf16.json --log $d/bf16.jsonl \
  && expect_setting $d/bf16.jsonl precision '"bf16"' file
json fp16 '{"fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 3}}'
expect_run fp16_on "${np1[@]}" "${tiny[@]}" --steps 2 --deepspeed $d/fp16.json --log $d/fp16.jsonl \
  && expect_setting $d/fp16.jsonl precision '"fp16"' file && expect_setting $d/fp16.jsonl hysteresis 3 file \
  && { grep -q '"step":1,.*"loss_scale":256,"skipped":false' $d/fp16.jsonl || fail "fp16_on: step 1 not at scale 2^8"; }
json fp16_off '{"fp16": {"enabled": false}, "bf16": {"enabled": false}}'
expect_run fp16_off "${np1[@]}" "${tiny[@]}" --steps 1 --deepspeed $d/fp16_off.json --log $d/fp16_off.jsonl \
  && expect_setting $d/fp16_off.jsonl precision '"fp32"' file

echo "== under AddressSanitizer + UBSan (the trainer on 2 ranks; parsing alone is leak-checked by the fuzz replay)"
if make -s train_gpt_cpu_asan; then
  ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe ./train_gpt_cpu_asan "${tiny[@]}" --steps 2 \
    --deepspeed examples/ds_config_zero3.json --log $d/asan.jsonl > $d/asan.out 2>&1 \
    && echo "ok   ds_config_zero3 under ASan" || { fail "ds_config_zero3 under ASan"; tail -n 20 $d/asan.out; }
  for f in test/ds_configs/*.json examples/*.json; do
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      OMP_NUM_THREADS=1 ./train_gpt_cpu_asan "${tiny[@]}" --steps 1 --deepspeed $f > $d/asan1.out 2>&1
    rc=$?
    if [ $rc -ge 128 ] || grep -q "runtime error\|AddressSanitizer" $d/asan1.out; then
      fail "$f under ASan: rc=$rc"; tail -n 20 $d/asan1.out
    fi
  done
  echo "ok   test/ds_configs/*.json and examples/*.json single-process under ASan"
else fail "make train_gpt_cpu_asan"; fi

echo "== the header compiles as C++ (nvcc includes it)"
if command -v g++ >/dev/null; then
  g++ -x c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I. run/ds_config.h && echo "ok   g++" || fail "g++ -x c++ run/ds_config.h"
fi
NVCC=/usr/local/cuda/bin/nvcc
if [ -x $NVCC ]; then
  $NVCC -std=c++17 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror -I. -c test/ds_config_nvcc.cu -o $d/ds_config_nvcc.o \
    && echo "ok   nvcc" || fail "nvcc test/ds_config_nvcc.cu"
fi

echo "$fails failures"
[ $fails -eq 0 ]
