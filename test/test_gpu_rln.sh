#!/usr/bin/env bash
# The -DGPU_FUSED_RESIDUAL_LN build (each residual add and the LayerNorm of its sum in one kernel,
# gpu/kernels.cuh's residual_layernorm_forward_kernel, through core/model.h's
# GPT2_FUSED_RESIDUAL_LN hook: residual2 with ln2; residual3, the layer's output, with the next
# layer's ln1, or the last layer's with the final LayerNorm; a variant scripts/gpu_session.sh
# times) on the CUDA emulator, against the default bf16 build: the same kernels' arithmetic in the
# same order, so the losses of two steps and the gradients (--dump-grads) must be identical bit
# for bit. Three layers, so that a layer's output is fused into the next layer's LayerNorm and the
# last one's into the final LayerNorm. Also with recompute, which must give the default's bits too:
# selective (its recompute runs the LayerNorms alone over the kept residual stream); full every 2
# (segments [0,1] and [2]: the recompute of layer 0 leaves its output to layer 1's first kernel);
# full every layer with --cpu-checkpointing under EMU_SCHEDULE=comm-first (a checkpoint now goes to
# the host after the next layer's first kernel has written it; the copies run as early as their
# waits allow, so one that waited for less would copy a stale checkpoint).
# Each run's kernel profile (--profile-kernels, calls per step, one micro-step) must show the
# fused kernel and plain LayerNorm calls that count (L = 3): the forward fuses every LayerNorm
# but layer 0's ln1 (the embeddings' output, no add before it): 2 L = 6 fused, the final one
# included, 1 alone, and residual_forward never runs; selective recompute adds the 2 L LayerNorms
# alone; full every 2 recomputes layer 2 (ln1 alone, ln2 fused), layer 0 (the same) and layer 1
# (both fused): 4 fused, 2 alone; full every layer recomputes each layer alone from its checkpoint:
# 3 fused, 3 alone. The default build runs 2 L + 1 = 7 LayerNorms and no fused kernel.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh; new_scratch gpu_rln
PY=${PYTHON:-/usr/bin/python3}
make -s -j2 test/bin/train_gpt_emu_bf16 test/bin/train_gpt_emu_bf16_rln || { echo "FAIL: build"; exit 1; }
$PY test/zero_check.py shard "$d/tok.bin" 4096 512 5 >/dev/null || { echo "FAIL: tokens"; exit 1; }
args=(--layers 3 --channels 64 --heads 4 --vocab-size 512 --max-seq-len 32 --batch 2 --seq-len 32 --steps 2 --seed 7
      --train-data "$d/tok.bin" --no-shuffle --val-every 0 --sample-every 0 --lr 1e-3 --warmup 0 --profile-kernels)
fails=0
run() { # NAME BINARY [OPTIONS...]
  local n=$1 bin=$2; shift 2
  "$bin" "${args[@]}" "$@" --dump-grads "$d/g_$n.bin" --log "$d/l_$n.jsonl" >"$d/r_$n.log" 2>&1 ||
    { tail -n 5 "$d/r_$n.log"; echo "FAIL: run $n"; exit 1; }
  grep -o '"step":[0-9]*,"loss":[0-9.eE+-]*' "$d/l_$n.jsonl" >"$d/loss_$n.txt"
}
calls() { # NAME KERNEL: calls per step in the run's profile (0 when absent)
  awk -v k="$2" '$1 == k { c = $2 } END { print c + 0 }' "$d/r_$1.log"
}
counts() { # NAME FUSED ALONE
  local f l r
  f=$(calls "$1" residual_layernorm_forward) l=$(calls "$1" layernorm_forward) r=$(calls "$1" residual_forward)
  if [ "$f $l $r" = "$2 $3 0" ] || { [ "$1" = def ] && [ "$f $l" = "$2 $3" ]; }; then
    echo "ok   $1: $f fused residual+LayerNorm calls a step, $l LayerNorms alone"
  else echo "FAIL $1: residual_layernorm_forward $f, layernorm_forward $l, residual_forward $r a step; want $2, $3, 0"
    fails=1; fi
}
run def test/bin/train_gpt_emu_bf16
run rln test/bin/train_gpt_emu_bf16_rln
run rln_sel test/bin/train_gpt_emu_bf16_rln --recompute selective
run rln_full2 test/bin/train_gpt_emu_bf16_rln --recompute full --recompute-every 2
EMU_SCHEDULE=comm-first run rln_ck test/bin/train_gpt_emu_bf16_rln --recompute full --cpu-checkpointing
counts def 0 7; counts rln 6 1; counts rln_sel 6 7; counts rln_full2 10 3; counts rln_ck 9 4
for n in rln rln_sel rln_full2 rln_ck; do
  if [ "$(wc -l <"$d/loss_def.txt")" = 2 ] && cmp -s "$d/loss_def.txt" "$d/loss_$n.txt" &&
     cmp -s "$d/g_def.bin" "$d/g_$n.bin"; then
    echo "ok   $n: losses ($(paste -sd ' ' "$d/loss_$n.txt")) and gradients bit-identical to the default build's"
  else echo "FAIL $n: differs from the default build"; paste "$d/loss_def.txt" "$d/loss_$n.txt"; fails=1; fi
done
[ $fails = 0 ]
