#!/usr/bin/env bash
# The C trainer against the independent float64 PyTorch GPT-2 (test/reference_gpt2.py).
# First the reference proves itself (finite differences, torch.optim.AdamW, its comparison logic);
# then, from one random checkpoint (V=50257 padded to 50304, maxT=32, L=2, H=4, C=64, LayerNorm
# params and biases randomised), each case trains 10 steps (Lion 4, below) on a token file that holds exactly
# one optimizer step's tokens (+1; one file per size, shared by the cases), so every step sees the
# same batch, and compares:
#   the first step's gradient of every tensor (--dump-grads, checkpoint format), padded wte rows exactly zero,
#   loss / lr / grad_norm of every step (--log), and all parameters after the last step (--out).
# Cases: plain (B=4 T=16, no clipping, constant LR); clipped (B=2 T=32=maxT, clip 1.0 active,
# warmup 3 + cosine to 0.1); accumulation (B=2 T=16, 2 micro-batches per step, clip, warmup 2 + linear);
# zero3_2ranks (the accumulation case's step split over 2 MPI processes under ZeRO stage 3: the
# reference is the same 2-micro-batch mean; gradients are partitioned there, so no --dump-grads).
# The other optimizers (optimizer.h) against the reference's own, written from their update rules
# (Lion from the paper's Algorithm 2; SGD, checked against torch.optim.SGD in the self-test):
# lion, lion_zero3_2ranks, sgd_momentum, sgd (at ZeRO-2: the stage does not change one rank's math).
# The fp32 matmuls run on gemm_f32 where the CPU has AVX-512; accumulation_openblas runs the
# accumulation case on OpenBLAS's sgemm instead (ZEROC_F32_MATMUL=sgemm), the fallback elsewhere.
# The trainer runs first, case by case; then one Python process checks them all (each PyTorch start
# costs 2-3 CPU seconds). TRAINER=path overrides the binary (e.g. ./train_gpt_cpu_asan).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# Idle OpenMP threads (PyTorch's, the trainer's) sleep instead of spinning on a shared machine
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
PY=${PYTHON:-/usr/bin/python3}
REF=test/reference_gpt2.py
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "skip: $PY has no torch/numpy"; exit 77; }

echo "=== reference self-test"
"$PY" $REF selftest || { echo "FAIL: the reference's own self-test"; exit 1; }

TRAINER=${TRAINER:-./train_gpt_cpu}
if [ "$TRAINER" = ./train_gpt_cpu ]; then
  [ -f train_gpt_cpu.c ] || { echo "skip: train_gpt_cpu.c does not exist yet"; exit 77; }
  make -s train_gpt_cpu || { echo "FAIL: make train_gpt_cpu"; exit 1; }
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$PY" $REF init --out "$tmp/model.bin" --V 50257 --Vp 50304 --maxT 32 --L 2 --H 4 --C 64 --seed 1 --perturb || exit 1

failed=()
# run_case NAME NP STAGE B T ACCUM CLIP SCHEDULE WARMUP MIN_LR_FRAC [extra check options]
# ACCUM: micro-batches of B sequences per optimizer step, over all NP processes together.
# OPT: the optimizer's options, given to the trainer and the check alike (default AdamW's);
# TRAIN_ONLY: options for the trainer alone.
OPT=(--optimizer adamw --beta1 0.9 --beta2 0.95 --eps 1e-8); TRAIN_ONLY=(); ENVS=(); STEPS=10
run_case() {
  local name=$1 np=$2 stage=$3 B=$4 T=$5 accum=$6 clip=$7 sched=$8 warm=$9 minf=${10}; shift 10
  local d=$tmp/$name steps=$STEPS lr=1e-3 wd=0.1 adam=("${OPT[@]}")
  mkdir -p "$d"
  echo; echo "=== $name: B=$B T=$T micro-batches=$accum processes=$np zero-stage=$stage clip=$clip $sched warmup=$warm min-lr-frac=$minf"
  local launch=(env "${ENVS[@]}") grads=(--dump-grads "$d/grads.bin")
  if [ "$np" -gt 1 ]; then
    command -v mpirun >/dev/null || { echo "skipped: no mpirun"; return; }
    launch=(env "${ENVS[@]}" OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$np" --oversubscribe)
  fi
  [ "$stage" -gt 0 ] && [ "$np" -gt 1 ] && grads=()
  local n=$((accum * B * T + 1)); local batch=$tmp/tokens_$n.bin
  [ -f "$batch" ] || "$PY" $REF tokens --out "$batch" --n $n --seed $n || exit 1
  local tb=(); [ "$accum" -gt 1 ] && tb=(--total-batch $((accum * B * T)))
  local cmd=("${launch[@]}" "$TRAINER" --init "$tmp/model.bin" --train-data "$batch" --val-every 0 --sample-every 0 --no-shuffle
             --batch "$B" --seq-len "$T" "${tb[@]}" --steps $steps --lr $lr --warmup "$warm" --lr-schedule "$sched"
             --min-lr-frac "$minf" --weight-decay $wd "${adam[@]}" --grad-clip "$clip" --log "$d/log.jsonl" "${grads[@]}"
             --out "$d/out" --save-every $steps --seed 1 --zero-stage "$stage" "${TRAIN_ONLY[@]}")
  echo "${cmd[*]}"
  local t0; t0=$(date +%s%N)
  if ! "${cmd[@]}" >"$d/stdout" 2>&1; then
    echo "FAIL: the trainer exited with an error:"; tail -n 20 "$d/stdout"; failed+=("$name"); return
  fi
  echo "trainer took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  # The last checkpoint the trainer wrote (model_STEP.bin, the highest STEP).
  local final; final=$(ls "$d"/out/model_*.bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$final" ] || { echo "FAIL: no checkpoint in $d/out"; ls -la "$d/out" 2>&1; failed+=("$name"); return; }
  echo "final checkpoint: $(basename "$final")"
  [ ${#grads[@]} -gt 0 ] && grads=(--grads "$d/grads.bin")
  # the reference's check, run after the last case with the others (one PyTorch start for all)
  local check=("$name" --model "$tmp/model.bin" --tokens "$batch" --log "$d/log.jsonl" "${grads[@]}" --cache "$tmp"
      --final "$final" --B "$B" --T "$T" --accum "$accum" --steps $steps --lr $lr --warmup "$warm" --schedule "$sched"
      --min-lr-frac "$minf" --wd $wd "${adam[@]}" --clip "$clip" "$@")
  printf '%q ' "${check[@]}" >> "$tmp/checks.txt"; echo >> "$tmp/checks.txt"
}

#        name         NP stage B  T accum clip schedule warmup min-lr-frac
run_case plain         1 0     4 16 1     0    constant 0      0
run_case clipped       1 0     2 32 1     1.0  cosine   3      0.1 --expect-clip
run_case accumulation  1 0     2 16 2     1.0  linear   2      0.2 --expect-clip
run_case zero3_2ranks  2 3     2 16 2     1.0  linear   2      0.2 --expect-clip
ENVS=(ZEROC_F32_MATMUL=sgemm)
run_case accumulation_openblas 1 0 2 16 2 1.0  linear   2      0.2 --expect-clip
ENVS=()
# Lion compares 4 steps. sign(c) turns the fp32 rounding of an element whose c is near 0 into a
# 2 lr difference from the float64 reference, and through the loss those flips cascade: measured
# (lion_zero3_2ranks, gemm_f32 with K blocks of 768) 178 elements flipped after 4 steps, 399 after
# 6 (and the grad norm 2.7e-4 off), 4862 after 10; with K blocks of 64, 256 or 1024, or on
# OpenBLAS's kernels, 116-122 after 10 (the key bias, whose exact gradient is 0). So whether 10
# steps pass is a lottery on rounding; 4 steps check the rule (warmup, decay, clipping) before it.
OPT=(--optimizer lion --beta1 0.9 --beta2 0.99); STEPS=4
run_case lion          1 0     4 16 1     1.0  cosine   2      0.1 --expect-clip
run_case lion_zero3_2ranks 2 3 2 16 2     1.0  linear   2      0.2 --expect-clip
OPT=(--optimizer sgd-momentum --momentum 0.9); STEPS=10
run_case sgd_momentum  1 0     4 16 1     1.0  constant 0      0   --expect-clip
OPT=(--optimizer sgd)
run_case sgd           1 2     4 16 1     0    linear   2      0.1

echo; echo "=== the reference's checks of the cases that ran"
if [ -s "$tmp/checks.txt" ]; then
  "$PY" $REF checks < "$tmp/checks.txt" | tee "$tmp/checks.out"; rc=${PIPESTATUS[0]}
  while read -r name; do failed+=("$name"); done < <(sed -n 's/^check \(.*\): [0-9]* FAILED$/\1/p' "$tmp/checks.out")
  [ "$rc" -eq 0 ] || grep -q ' FAILED$' "$tmp/checks.out" || failed+=("the reference's checks (exit $rc)")
fi
echo
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "all cases agree with the reference"
