#!/usr/bin/env bash
# The GPU trainer's memory machinery (ZeRO, recompute, offload) run without a GPU, on the CUDA
# emulator (as in test_gpu_emu.sh, which does the rest: the two halves run side by side in the
# suite; test/gpu_emu_lib.sh holds what they share):
#   1. run_gpu_checks.sh sections 2, 3 and 5, emulated: ZeRO stages 0-3 on 2 ranks agreeing (fp32,
#      bf16); activation recompute (full, every 2, selective, cpu_checkpointing) equal to no
#      recompute bit for bit in the three precisions and at ZeRO-3 on 2 ranks, and to the CPU
#      trainer's within tolerance; offload (the optimizer on the host, pageable and pinned, on NVMe,
#      and at ZeRO-3 the parameters too) equal to no offload bit for bit, plan = allocated.
#   2. the ZeRO runs again with collectives scheduled as early as their events allow
#      (EMU_SCHEDULE=comm-first) instead of as late as their waits allow: the same losses, bit
#      for bit. A collective ordered wrongly against the kernels around it changes them. So do
#      cpu_checkpointing's copies to the host and back (their stream is the last created, so it
#      runs first): the loss and gradient of the run without recompute, bit for bit.
#   3. under AddressSanitizer + UBSan, ZeRO-3 on 2 ranks: a run saved at step 2 and resumed
#      gives the uninterrupted run's losses bit for bit (checkpoints through the device copies).
set -u
cd "$(dirname "$0")/.." || exit 1
. test/gpu_emu_lib.sh
emu_build test/bin/train_gpt_emu_bf16_asan test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_fp16 test/bin/train_gpt_emu_fp32 \
  train_gpt_cpu
new_scratch gpu_emu_memory

echo "== 1. run_gpu_checks.sh sections 2, 3 and 5 on the emulator"
emu_checks "2 3 5"

echo "== 2. collectives and host copies as early as possible: the same losses, bit for bit"
zcommon=(--train-data "$d/checks/zero_tokens.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)
for s in 1 2 3; do # run_gpu_checks.sh section 2's emulated runs: its small model and tokens
  ref=$d/checks/zero_bf16_$s.jsonl out=$d/early_bf16_$s.jsonl
  EMU_SCHEDULE=comm-first mpirun -np 2 --oversubscribe --bind-to none test/bin/train_gpt_emu_bf16 \
    --init "$d/checks/zinit/model_00000001.bin" --batch 2 --seq-len 32 --grad-accum 2 --steps 2 "${zcommon[@]}" \
    --zero-stage "$s" --log "$out" >"$d/early_bf16_$s.log" 2>&1 || { tail -n 5 "$d/early_bf16_$s.log"; fail "ZeRO-$s comm-first run"; continue; }
  a=$(grep '"step"' "$ref" | losses)
  b=$(grep '"step"' "$out" | losses)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok   ZeRO-$s bf16, comm-first = compute-first: $b"
  else fail "ZeRO-$s bf16: compute-first '$a', comm-first '$b'"; fi
done

for k in 1 2; do # the recompute runs of run_gpu_checks.sh section 3, their copies now first
  ref=$d/checks/rc_bf16_none1 out=$d/early_ck$k
  EMU_SCHEDULE=comm-first test/bin/train_gpt_emu_bf16 --layers 6 --channels 64 --heads 4 --vocab-size 512 --max-seq-len 32 \
    --batch 2 --seq-len 32 --grad-accum 2 --steps 2 --train-data "$d/checks/rc_tokens.bin" --no-shuffle --val-every 0 \
    --sample-every 0 --lr 1e-3 --warmup 0 --recompute full --recompute-every $k --cpu-checkpointing --dump-grads "$out.bin" --log "$out.jsonl" \
    >"$out.log" 2>&1 || { tail -n 5 "$out.log"; fail "cpu_checkpointing comm-first run"; continue; }
  a=$(grep '"step"' "$ref.jsonl" | losses) b=$(grep '"step"' "$out.jsonl" | losses)
  if [ -n "$a" ] && [ "$a" = "$b" ] && cmp -s "$ref.bin" "$out.bin"; then
    echo "ok   cpu_checkpointing (every $k), copies first = no recompute: $b, the same gradient"
  else fail "cpu_checkpointing every $k, comm-first: '$b' vs '$a' (or the gradient)"; fi
done

echo "== 3. ASan + UBSan, ZeRO-3 on 2 ranks: save at step 2, resume, the same losses"
export ASAN_OPTIONS=detect_leaks=0 # MPI's own allocations at exit are not ours
$PY test/zero_check.py shard "$d/small.bin" 4096 512 5 # random tokens below 512
small=(--batch 2 --seq-len 32 --train-data "$d/small.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0
       --zero-stage 3)
shape=(--layers 2 --channels 64 --heads 4 --vocab-size 512 --max-seq-len 32)
asan() { mpirun -np 2 --oversubscribe --bind-to none test/bin/train_gpt_emu_bf16_asan "$@"; }
if asan "${small[@]}" "${shape[@]}" --steps 4 --save-every 2 --out "$d/ck" --log "$d/a.jsonl" >"$d/asan_a.log" 2>&1 &&
   asan "${small[@]}" --steps 4 --resume "$d/ck/step_00000002" --log "$d/b.jsonl" >"$d/asan_b.log" 2>&1; then
  a=$(grep -E '"step":(3|4),' "$d/a.jsonl" | losses)
  b=$(grep -E '"step":(3|4),' "$d/b.jsonl" | losses)
  if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok   steps 3-4 uninterrupted $a| resumed $b"
  else fail "resume: uninterrupted '$a', resumed '$b'"; fi
else tail -n 20 "$d"/asan_*.log; fail "ASan runs"; fi

echo "$fails failures"
[ $fails -eq 0 ]
