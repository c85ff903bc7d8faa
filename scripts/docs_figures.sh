#!/usr/bin/env bash
# `make docs-figures`: the PNGs in docs/figures/ (README.md and docs/ show them), from real runs of a
# small GPT-2 (6 layers, 384 channels, 30M parameters) on the embedded Brown corpus, drawn by
# scripts/plot.py. About two minutes on 2 cores. The runs' logs and trace stay in $FIG_RUNS
# (default: a temporary directory, removed).
#   loss.png      fp32 and bf16 on one rank, bf16 ZeRO-3 on two: 50 steps each
#   memory.png, comm.png, time.png    ZeRO stages 0-3 on 4 ranks, bf16, 4 steps each
#   timeline.png  the last of 3 steps of ZeRO-3 on 2 ranks, bf16, from --trace
#   partitions.png  `--plan --partitions` of GPT-2 124M in bf16 on 4 ranks: what each rank keeps at
#                 stages 0-3 (the walkthrough's section 4 shows the same command)
#   predicted_ib.png, predicted_eth.png   the step-time model's timeline (`--plan --time --trace`) of
#                 GPT-2 1.5B, ZeRO-3 on 64 H100s: 400 Gb/s InfiniBand per GPU, 100 Gb/s Ethernet per node
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-/usr/bin/python3}
make -s train_gpt_cpu
runs=${FIG_RUNS:-$(mktemp -d)}
[ -n "${FIG_RUNS:-}" ] || trap 'rm -rf "$runs"' EXIT
mkdir -p "$runs" docs/figures
model="--layers 6 --channels 384 --heads 6 --max-seq-len 64 --seq-len 64 --batch 4 --sample-every 0 --seed 7"
train() { # name np args...
  local name=$1 np=$2; shift 2
  echo "run: $name"
  mpirun -np "$np" --bind-to none ./train_gpt_cpu $model "$@" --log "$runs/$name.jsonl" > "$runs/$name.out" 2>&1 ||
    { tail -5 "$runs/$name.out"; exit 1; }
}
train loss_fp32 1 --steps 50 --val-every 10 --val-steps 4 --warmup 5
train loss_bf16 1 --steps 50 --val-every 10 --val-steps 4 --warmup 5 --precision bf16
train loss_z3 2 --steps 50 --val-every 10 --val-steps 4 --warmup 5 --precision bf16 --zero-stage 3 --batch 2
for s in 0 1 2 3; do train stage$s 4 --steps 4 --val-every 0 --precision bf16 --zero-stage $s; done
train timeline 2 --steps 3 --val-every 0 --precision bf16 --zero-stage 3 --trace "$runs/timeline.json"
$PY scripts/plot.py --out "$runs/a" --labels "fp32 N=1,bf16 N=1,bf16 N=2 ZeRO-3" \
  "$runs/loss_fp32.jsonl" "$runs/loss_bf16.jsonl" "$runs/loss_z3.jsonl"
$PY scripts/plot.py --out "$runs/b" --trace "$runs/timeline.json" "$runs"/stage{0,1,2,3}.jsonl
cp "$runs/a/loss.png" "$runs/b/memory.png" "$runs/b/comm.png" "$runs/b/time.png" "$runs/b/timeline.png" docs/figures/
for net in ib eth; do
  ./train_gpt_cpu --plan --time --hardware h100-80gb-sxm --model d48 --precision bf16 --zero-stage 3 --world 64 --batch 8 \
    --seq-len 1024 --network "$([ $net = ib ] && echo ib-400 || echo eth-100)" --trace "$runs/predicted_$net.json" > /dev/null
  $PY scripts/plot.py --out "$runs/p$net" --trace "$runs/predicted_$net.json"
  cp "$runs/p$net/timeline.png" "docs/figures/predicted_$net.png"
done
./train_gpt_cpu --plan --partitions --model d12 --precision bf16 --world 4 > "$runs/partitions.txt"
$PY scripts/plot.py --out "$runs/parts" --partitions "$runs/partitions.txt"
cp "$runs/parts/partitions.png" docs/figures/
ls -l docs/figures/
