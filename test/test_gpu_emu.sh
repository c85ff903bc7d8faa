#!/usr/bin/env bash
# The GPU trainer run without a GPU: train_gpt.cu built against the CUDA emulator
# (test/cuda_emu/: kernels as fibers on the CPU, cuBLASLt and NCCL emulated) and put through
# the checks written for GPU machines (test/gpu/run_gpu_checks.sh), so its kernels, its
# cuBLASLt descriptors, its NCCL calls and its stream ordering are all exercised here.
# test_gpu_emu_memory.sh does the rest (ZeRO, recompute, offload, a resume under ASan): the two halves
# run side by side in the suite (test/gpu_emu_lib.sh holds what they share).
#   1. the emulator's own checks bite (cuda_emu_selftest): a correct block reduction is right;
#      a __syncthreads or shuffle after threads exited, a write past an allocation, a host read
#      of device memory, a host pointer given to a kernel, an over-promised alignment, an
#      overlapping all-gather, a WMMA load racing the lanes' shared-memory writes or from a
#      tile that is not 32-byte aligned are each
#      caught; a missing event wait shows under one schedule; a WMMA tile product is right; so is
#      gpu/mma16.cuh's portable m16n8k16 product (the PTX fragment layouts, bf16 and fp16) and its
#      ldmatrix.x4, plain and transposed (the PTX layout; a row address not 16-byte aligned is caught).
#      The emulated cuBLASLt's products do not depend on the OpenMP thread count (1 and 2: the same bits).
#   2. run_gpu_checks.sh section 1, emulated: loss and every gradient against the CPU trainer in
#      fp32, bf16 and fp16 (two shapes; a 1000-token vocabulary, as in 3 and 5; bf16 also through
#      the ATTENTION=matmul and ATTENTION=flash builds, which run_gpu_checks.sh takes where they are
#      built).
#   3. no cuBLASLt algorithm for any matmul (EMU_CUBLASLT_MIN_ALIGN=512): every product by the
#      trainer's fallback kernel, gradients against the CPU trainer's as in 2.
#   4. a run with validation and sampling on the embedded data, fp32: the emulated GPU trainer
#      prints the CPU trainer's losses, validation losses and sample text (its own sampler path:
#      a logits row copied from the device).
#   5. attention at other head sizes and an odd T (B=3, T=77), bf16 against the CPU trainer:
#      hs 64 runs gpu/flash2.cuh's mma.sync kernels (the default ATTENTION=flash2 build, emulated
#      through gpu/mma16.cuh's portable fragment code), hs 16 the WMMA flash kernels (tiles partly
#      past T), hs 24 the matmul path; hs 64 again with the ATTENTION=flash build (the WMMA kernels).
#   6. DeepSpeed's prescale_gradients / gradient_predivide_factor in the GPU trainer: where the
#      mean over 2 ranks divides, against the run without them and one process (fp32).
set -u
cd "$(dirname "$0")/.." || exit 1
. test/gpu_emu_lib.sh
emu_build test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_fp16 test/bin/train_gpt_emu_fp32 test/bin/cuda_emu_selftest \
  test/bin/train_gpt_emu_bf16_flash test/bin/train_gpt_emu_bf16_mm train_gpt_cpu
new_scratch gpu_emu

echo "== 1. the emulator's checks"
selftest() { # case, expected exit status, expected text in the output
  local out rc
  out=$(test/bin/cuda_emu_selftest "$1" 2>&1); rc=$?
  if [ "$rc" -eq "$2" ] && grep -qF -- "$3" <<<"$out"; then echo "ok   $1: $(grep -F -- "$3" <<<"$out" | head -n 1)"
  else fail "$1: exit $rc (expected $2), output: $(head -c 300 <<<"$out")"; fi
}
selftest sum 0 "sum 500500 500500 500500"
selftest wmma 0 "wmma: 0 of 256 elements wrong"
selftest mma16816 0 "mma16816: bf16 0, fp16 0 of 256 elements wrong"
selftest ldmatrix 0 "ldmatrix: plain 0, transposed 0 of 256 elements wrong"
selftest ldmatrix_misaligned 134 "is not 16-byte aligned"
selftest wmma_race 134 "holds other operands than lane 0"
selftest wmma_misaligned 134 "is not 32-byte aligned"
selftest sync_after_return 134 "48 of the block's 64 threads have exited before it"
selftest shuffle_after_return 134 "while 16 lanes of its warp have exited"
selftest write_past_end 134 "a write past the end of the 400-byte device allocation"
selftest host_reads_device 139 "the host touched device memory"
selftest launch_limits 0 "invalid configuration argument / invalid configuration argument / invalid configuration argument"
selftest host_pointer_argument 134 "pointer argument 0"
selftest cublaslt_alignment 134 "less aligned than the 16 bytes promised"
selftest cublaslt_threads 0 "cublaslt_threads: 0 of 16384 elements differ between 1 and 2 threads, 0 off the float64 sum"
selftest nccl_overlap 134 "overlap without being NCCL's in-place layout"
selftest wait 0 "y = 7"
EMU_SCHEDULE=comm-first selftest wait 0 "y = 7"
selftest no_wait 0 "y = 7"                      # the writer's stream runs first
EMU_SCHEDULE=comm-first selftest no_wait 0 "y = 0" # the reader's runs first: the race shows

echo "== 2. run_gpu_checks.sh section 1 on the emulator"
emu_checks 1
# its emulated tokens: random, below its 1000-token vocabulary
common=(--train-data "$d/checks/tokens.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0)

echo "== 3. every matmul by the fallback kernel (no cuBLASLt algorithm)"
EMU_CUBLASLT_MIN_ALIGN=512 test/bin/train_gpt_emu_bf16 --init "$d/checks/init/model_00000001.bin" --batch 2 --seq-len 128 \
  --steps 1 "${common[@]}" --dump-grads "$d/grads_fallback.bin" >"$d/fallback.log" 2>&1 || { tail -n 5 "$d/fallback.log"; fail "fallback run"; }
if grep -q "no cuBLASLt algorithm" "$d/fallback.log" &&
   $PY test/gpu/compare_grads.py "$d/checks/grads_cpu_bf16_B2.bin" "$d/grads_fallback.bin" --tol 5e-2 >"$d/fallback_cmp.txt"; then
  echo "ok   bf16 B=2 T=128 fallback matmuls, gradients: $(tail -n 1 "$d/fallback_cmp.txt")"
else cat "$d/fallback_cmp.txt" 2>/dev/null; fail "fallback matmuls: no warning, or gradients differ from the CPU's"; fi

echo "== 4. validation and sampling, fp32: the CPU trainer's numbers and text"
run6=(--layers 2 --channels 64 --heads 4 --batch 2 --seq-len 32 --steps 4 --val-every 2 --val-steps 2 --sample-every 4
      --sample-len 16 --lr 1e-3)
./train_gpt_cpu "${run6[@]}" >"$d/full_cpu.log" 2>&1 || fail "CPU run"
test/bin/train_gpt_emu_fp32 "${run6[@]}" >"$d/full_gpu.log" 2>&1 || fail "emulated GPU run"
pick() { grep -E "^val loss|^sample:" "$1"; grep "^step" "$1" | sed -E 's/ \| +[0-9.]+ ms.*//'; }
if [ "$(pick "$d/full_cpu.log")" = "$(pick "$d/full_gpu.log")" ] && [ "$(pick "$d/full_cpu.log" | grep -c .)" -eq 7 ]; then
  echo "ok   the same step and validation losses and sample: $(grep -m1 "^sample:" "$d/full_gpu.log" | cut -c1-60)..."
else diff <(pick "$d/full_cpu.log") <(pick "$d/full_gpu.log"); fail "validation/sampling differ from the CPU trainer's"; fi

echo "== 5. attention at head sizes 64, 24, 16 and T=77, bf16"
for ch_nh in "128 2" "96 4" "64 4" "128 2 flash"; do
  set -- $ch_nh; k=hs$(($1 / $2))${3:+_$3}
  shape7=(--layers 2 --channels "$1" --heads "$2" --vocab-size 1000 --batch 3 --seq-len 77 --steps 1 "${common[@]}" --precision bf16)
  ./train_gpt_cpu "${shape7[@]}" --dump-grads "$d/g7_cpu_$k.bin" --log "$d/l7_cpu_$k.jsonl" >"$d/r7_cpu_$k.log" 2>&1 || fail "CPU $k"
  test/bin/train_gpt_emu_bf16${3:+_$3} "${shape7[@]}" --dump-grads "$d/g7_gpu_$k.bin" --log "$d/l7_gpu_$k.jsonl" >"$d/r7_gpu_$k.log" 2>&1 ||
    { tail -n 5 "$d/r7_gpu_$k.log"; fail "emulated GPU $k"; continue; }
  lc=$(sed -n 's/.*"step":1,"loss":\([^,]*\),.*/\1/p' "$d/l7_cpu_$k.jsonl"); lg=$(sed -n 's/.*"step":1,"loss":\([^,]*\),.*/\1/p' "$d/l7_gpu_$k.jsonl")
  if $PY -c "import sys; a,b=float('$lc'),float('$lg'); sys.exit(0 if abs(a-b) <= 5e-3*max(1,abs(a)) else 1)" &&
     $PY test/gpu/compare_grads.py "$d/g7_cpu_$k.bin" "$d/g7_gpu_$k.bin" --tol 5e-2 >"$d/c7_$k.txt"; then
    echo "ok   $k: loss cpu $lc, gpu $lg; gradients: $(tail -n 1 "$d/c7_$k.txt")"
  else cat "$d/c7_$k.txt" 2>/dev/null; fail "$k: loss cpu '$lc', gpu '$lg', or gradients"; fi
done

echo "== 6. prescale_gradients / gradient_predivide_factor: where the mean over ranks divides (fp32)"
# run/trainer.h's train_step, shared with the CPU trainer (test_ds_config checks it there): DeepSpeed's
# 1/f before the sum and f/world after. On 2 ranks x 2 sequences: f = world and prescale true are
# the run without the keys bit for bit, f = 3 is the one-process mean of all 4 within rounding.
$PY test/zero_check.py shard $d/pm.bin 20000 512 1 > /dev/null
pm=(--layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16 --val-every 0 --sample-every 0
    --train-data $d/pm.bin --steps 4 --seed 3 --lr 1e-2)
traj() { grep '"loss"' "$1" | grep -o '"loss":[^,]*\|"grad_norm":[^,]*' | cut -d: -f2 | tr '\n' ' '; }
OMP_NUM_THREADS=1 test/bin/train_gpt_emu_fp32 "${pm[@]}" --batch 4 --log $d/pm_one.jsonl > $d/pm_one.out 2>&1 || fail "pm_one: $(tail -n 3 $d/pm_one.out)"
for name in none f2 true f3; do
  case $name in none) ds=();; f2) ds=(--deepspeed $d/pm_f2.json);; true) ds=(--deepspeed $d/pm_true.json);; f3) ds=(--deepspeed $d/pm_f3.json);; esac
  echo '{"gradient_predivide_factor": 2}' > $d/pm_f2.json; echo '{"prescale_gradients": true}' > $d/pm_true.json
  echo '{"gradient_predivide_factor": 3}' > $d/pm_f3.json
  OMP_NUM_THREADS=1 mpirun -np 2 test/bin/train_gpt_emu_fp32 "${pm[@]}" --batch 2 "${ds[@]}" --log $d/pm_$name.jsonl \
    > $d/pm_$name.out 2>&1 || fail "pm_$name: $(tail -n 3 $d/pm_$name.out)"
done
for name in f2 true; do
  [ "$(traj $d/pm_$name.jsonl)" = "$(traj $d/pm_none.jsonl)" ] && echo "ok   pm_$name: bit for bit the run without the keys" \
    || fail "pm_$name: $(traj $d/pm_$name.jsonl) != $(traj $d/pm_none.jsonl)"
done
$PY - "$(traj $d/pm_one.jsonl)" "$(traj $d/pm_f3.jsonl)" "$(traj $d/pm_none.jsonl)" <<'PY' && echo "ok   pm_f3: the one-process mean within rounding, and not the run without the key" || fail "pm_f3"
import sys
a, b, c = [list(map(float, s.split())) for s in sys.argv[1:4]]
assert len(a) == len(b) == 8 and all(abs(x - y) <= 2e-5 * abs(x) for x, y in zip(a, b)), (a, b)
assert b != c, "f = 3 changed nothing"
PY

echo "$fails failures"
[ $fails -eq 0 ]
