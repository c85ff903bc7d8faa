#!/usr/bin/env bash
# Multi-node GPU training under Slurm: one process per GPU, launched by mpirun from the batch
# script (MPI only launches and carries NCCL's unique id; every collective of training is NCCL).
#
#   sbatch scripts/slurm_train_gpt.sh                      # 2 nodes x 8 GPUs, GPT-2 124M
#   NODES=4 sbatch --nodes=4 scripts/slurm_train_gpt.sh --zero-stage 3 --model d24
#
# Everything after the script name goes to ./train_gpt, after the defaults below (later options
# win). Build first on a login node or in the job: `make train_gpt`. The same binary runs
# without Slurm: `mpirun -np 16 --hostfile hosts --map-by ppr:8:node ./train_gpt ...` with a
# hostfile listing each node once with `slots=8`.
#
#SBATCH --job-name=zeroc-gpt2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=zeroc-%j.out
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}"

# mpirun learns the nodes from Slurm's allocation: no hostfile needed inside the job. One
# process per GPU; train_gpt picks its GPU from its rank among the processes on its node.
NP=$(( ${SLURM_NNODES:-1} * ${SLURM_NTASKS_PER_NODE:-8} ))

# NCCL: which network to use between nodes is site-specific. Common settings, commented:
# export NCCL_SOCKET_IFNAME=ib0        # the interface for NCCL's bootstrap
# export NCCL_IB_HCA=mlx5              # InfiniBand adapters
# export NCCL_DEBUG=WARN               # INFO to see the rings and trees NCCL builds
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}

# pass the environment on to every node's processes (only variables that are set)
envs=()
for v in NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_DEBUG OMP_NUM_THREADS PATH LD_LIBRARY_PATH; do
  [ -n "${!v:-}" ] && envs+=(-x "$v")
done

mkdir -p runs
exec mpirun -np "$NP" --map-by "ppr:${SLURM_NTASKS_PER_NODE:-8}:node" --bind-to none "${envs[@]}" \
  ./train_gpt --model d12 --seq-len 1024 --batch 16 --total-batch 524288 --zero-stage 2 \
  --train-data "data/brown_train_*.bin" --val-data "data/brown_val_*.bin" \
  --steps 5000 --lr 6e-4 --warmup 700 --out "runs/${SLURM_JOB_ID:-local}" --save-every 500 \
  --log "runs/${SLURM_JOB_ID:-local}.jsonl" "$@"
