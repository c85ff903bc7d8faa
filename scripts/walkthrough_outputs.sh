#!/usr/bin/env bash
# Runs every command of docs/walkthrough.md (and docs/zh/walkthrough.md) and keeps each output in
# DIR/NN.txt, so the outputs quoted there can be regenerated and checked. About 5 minutes on an idle
# 2-core machine.
#   scripts/walkthrough_outputs.sh DIR
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-/usr/bin/python3}
out=${1:?usage: $0 DIR}
mkdir -p "$out"
make -s train_gpt_cpu
t() { local n=$1; shift; echo "== $n: $*" >&2; { echo "\$ $*"; "$@" 2>&1; } > "$out/$n.txt"; }
sh() { local n=$1; shift; echo "== $n: $*" >&2; { echo "\$ $*"; bash -c "$*" 2>&1; } > "$out/$n.txt"; }
# 1. one process
t 01 ./train_gpt_cpu --steps 20 --val-every 10 --sample-every 20 --sample-len 24
# 2. the arithmetic of 7B
t 02 ./train_gpt_cpu --plan --params 7e9 --precision bf16
# 3. data parallelism: the same global batch on one process (2 micro-steps) and on two
t 03a ./train_gpt_cpu --steps 5 --total-batch 1024 --val-every 0 --sample-every 0
t 03b mpirun -np 2 --bind-to none ./train_gpt_cpu --steps 5 --total-batch 1024 --val-every 0 --sample-every 0
# 4. the four stages on 4 ranks, GPT-2 124M, one step
for s in 0 1 2 3; do
  t 04s$s mpirun -np 4 ./train_gpt_cpu --model d12 --precision bf16 --zero-stage $s --batch 1 --seq-len 64 --steps 1 \
    --val-every 0 --sample-every 0
done
sh 04plan "for s in 0 1 2 3; do ./train_gpt_cpu --plan --params 7e9 --precision bf16 --world 64 --zero-stage \$s | grep 'MODEL STATES'; done"
# 6. seeing it: a trace and the plots
t 06 mpirun -np 2 --bind-to none ./train_gpt_cpu --zero-stage 3 --precision bf16 --steps 6 --val-every 3 --sample-every 0 \
  --log "$out/z3.jsonl" --trace "$out/z3.json"
t 06plot $PY scripts/plot.py --out "$out/figures" --trace "$out/z3.json" "$out/z3.jsonl"
sh 06log "grep '\"step\":6,' $out/z3.jsonl"
# 7. fp16's loss scale and bf16
t 07 ./train_gpt_cpu --precision fp16 --initial-scale-power 20 --steps 5 --val-every 0 --sample-every 0
# 8. WarmupLR and clipping
t 08 ./train_gpt_cpu --lr-schedule WarmupLR --warmup 4 --warmup-type linear --lr 6e-4 --grad-clip 0.5 --steps 8 \
  --val-every 0 --sample-every 0
# 9. the two DeepSpeed configs
t 09a mpirun -np 2 --bind-to none ./train_gpt_cpu --deepspeed ../shared/examples/ds_config_zero3.json --steps 3 \
  --val-every 0 --sample-every 0
t 09b mpirun -np 2 --bind-to none ./train_gpt_cpu --deepspeed ../shared/examples/ds_config_zero2.json --steps 3 \
  --val-every 0 --sample-every 0
# 10. a hostfile
echo "localhost slots=2" > "$out/hosts"
t 10 mpirun --hostfile "$out/hosts" -np 2 --bind-to none ./train_gpt_cpu --zero-stage 2 --steps 3 --val-every 0 --sample-every 0
# 11. offload (the plan and the prediction)
t 11a ./train_gpt_cpu --plan --model d48 --precision bf16 --zero-stage 2 --world 8 --batch 8 --seq-len 1024 --offload-optimizer cpu
sh 11b "for o in '' '--offload-optimizer cpu' '--offload-optimizer nvme'; do ./train_gpt_cpu --plan --time --hardware h100-80gb-sxm --model d48 --precision bf16 --zero-stage 2 --world 8 --batch 8 --seq-len 1024 \$o | grep -E 'STEP|offload'; done"
# 12. recompute (the plan and the prediction)
sh 12 "for r in '' '--recompute full'; do ./train_gpt_cpu --plan --time --hardware h100-80gb-sxm --model d48 --precision bf16 --zero-stage 3 --world 8 --batch 8 --seq-len 1024 \$r | grep -E 'activations \\(|STEP'; done"
# 13. a thousand GPUs
t 13 ./train_gpt_cpu --plan --time --hardware h100-80gb-sxm --model d48 --precision bf16 --zero-stage 3 --world 1024 \
  --batch 8 --seq-len 1024 --network eth-100
ls "$out"
