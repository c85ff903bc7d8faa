#!/usr/bin/env bash
# The -DGPU_FUSED_RESIDUAL_LN build (residual2 = residual + the attention's projection and the MLP's
# LayerNorm of it in one kernel, gpu/kernels.cuh's residual_layernorm_forward_kernel, through
# core/model.h's GPT2_FUSED_RESIDUAL_LN hook; a variant scripts/gpu_session.sh times) on the CUDA
# emulator, against the default bf16 build: the same kernels' arithmetic in the same order, so
# the losses of two steps and the gradients (--dump-grads) must be identical bit for bit. Also with
# --recompute selective, whose recompute runs the LayerNorm alone (the unfused kernel) over the
# kept residual2: again the same bits. And the fused kernel must have run (--profile-kernels names
# it), the default build's must not.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh; new_scratch gpu_rln
PY=${PYTHON:-/usr/bin/python3}
make -s -j2 test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_bf16_rln || { echo "FAIL: build"; exit 1; }
$PY test/zero_check.py shard "$d/tok.bin" 4096 512 5 >/dev/null || { echo "FAIL: tokens"; exit 1; }
args=(--layers 2 --channels 64 --heads 4 --vocab-size 512 --max-seq-len 32 --batch 2 --seq-len 32 --steps 2 --seed 7
      --train-data "$d/tok.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0 --profile-kernels)
fails=0
run() { # NAME BINARY [OPTIONS...]
  local n=$1 bin=$2; shift 2
  "$bin" "${args[@]}" "$@" --dump-grads "$d/g_$n.bin" --log "$d/l_$n.jsonl" >"$d/r_$n.log" 2>&1 ||
    { tail -n 5 "$d/r_$n.log"; echo "FAIL: run $n"; exit 1; }
  grep -o '"step":[0-9]*,"loss":[0-9.eE+-]*' "$d/l_$n.jsonl" >"$d/loss_$n.txt"
}
run def test/bin/train_gpt_emu_bf16
run rln test/bin/train_gpt_emu_bf16_rln
run rln_sel test/bin/train_gpt_emu_bf16_rln --recompute selective
if grep -q residual_layernorm_forward "$d/r_rln.log" && ! grep -q residual_layernorm_forward "$d/r_def.log"; then
  echo "ok   the fused build runs residual_layernorm_forward, the default does not"
else echo "FAIL: the profile does not show the fused kernel where it should run"; fails=1; fi
for n in rln rln_sel; do
  if [ "$(wc -l <"$d/loss_def.txt")" = 2 ] && cmp -s "$d/loss_def.txt" "$d/loss_$n.txt" && cmp -s "$d/g_def.bin" "$d/g_$n.bin"; then
    echo "ok   $n: losses ($(paste -sd ' ' "$d/loss_$n.txt")) and gradients bit-identical to the default build's"
  else echo "FAIL $n: differs from the default build"; paste "$d/loss_def.txt" "$d/loss_$n.txt"; fails=1; fi
done
[ $fails = 0 ]
