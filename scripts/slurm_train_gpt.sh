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
# Preemption and the time limit: five minutes before the limit Slurm sends SIGUSR1 to this
# script (--signal=B:USR1@300), which hands it to mpirun; mpirun forwards it to every rank, and
# the ranks agree to stop after the step in progress, save runs/JOBID/step_N and exit 0. The
# script then requeues the job (--requeue; `scontrol requeue`), and the requeued job, finding
# runs/JOBID/latest, continues with --resume bit for bit. (SIGTERM, which Slurm sends at the
# limit itself, also stops a rank cleanly, but mpirun answers it by killing its ranks a second
# later: the early SIGUSR1 is what leaves time to save. Raise @300 if a save takes longer.) A job
# that ends for another reason is not requeued; scancel ends it for good.
#
#SBATCH --job-name=zeroc-gpt2
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
#SBATCH --output=zeroc-%j.out
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
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
# A node that stops answering (a network partition): the trainer's watchdog names the collective
# after --comm-timeout (300 s by default), and mpirun must then notice the lost node by TCP
# keepalive (OpenMPI's default takes up to 480 s, and the watchdog's own abort would otherwise
# leave mpirun waiting for good: run/job.h). 5 + 5 x 62 s fits --comm-timeout 300; the trainer
# says which numbers fit another (docs/robustness.md: several hosts).
export OMPI_MCA_oob_tcp_keepalive_time=${OMPI_MCA_oob_tcp_keepalive_time:-5}
export OMPI_MCA_oob_tcp_keepalive_intvl=${OMPI_MCA_oob_tcp_keepalive_intvl:-5}
export OMPI_MCA_oob_tcp_keepalive_probes=${OMPI_MCA_oob_tcp_keepalive_probes:-62}

# pass the environment on to every node's processes (only variables that are set)
envs=()
for v in NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_DEBUG OMP_NUM_THREADS PATH LD_LIBRARY_PATH; do
  [ -n "${!v:-}" ] && envs+=(-x "$v")
done

# A requeued job (same job id) continues from its last checkpoint, which also gives the model.
out="runs/${SLURM_JOB_ID:-local}"
model=(--model d12)
[ -f "$out/latest" ] && model=(--resume "$out")
mkdir -p runs

# mpirun in the background, so that this shell can catch Slurm's warning signal and pass it on.
stopping=0 pid=
trap 'stopping=1; kill -USR1 "$pid" 2>/dev/null || true' USR1
mpirun -np "$NP" --map-by "ppr:${SLURM_NTASKS_PER_NODE:-8}:node" --bind-to none "${envs[@]}" \
  ./train_gpt "${model[@]}" --seq-len 1024 --batch 16 --total-batch 524288 --zero-stage 2 \
  --train-data "data/brown_train_*.bin" --val-data "data/brown_val_*.bin" \
  --steps 5000 --lr 6e-4 --warmup 700 --out "$out" --save-every 500 \
  --log "$out.${SLURM_RESTART_COUNT:-0}.jsonl" "$@" &
pid=$!
rc=0
while :; do # a trapped signal ends `wait` early: wait again until mpirun itself has ended
  wait "$pid" && rc=0 || rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
if [ "$stopping" = 1 ] && [ "$rc" = 0 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "stopped before the time limit and saved: requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
