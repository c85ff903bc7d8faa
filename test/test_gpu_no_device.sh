#!/usr/bin/env bash
# The GPU trainer on a machine without a usable GPU (the card's `make train_gpt && mpirun -np 8
# ./train_gpt` here): one line, from one rank, says what is wrong and what to run instead (the
# CPU trainer, or the emulator build), and every rank exits 1, whether CUDA finds no driver
# ("driver version is insufficient", what an ordinary machine says) or no device. Run on the
# CUDA emulator's build of train_gpt.cu, told to find neither (EMU_DEVICES). And a node with
# fewer GPUs than processes: one line from the first rank without a GPU, before NCCL, exit 1.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh
make -s test/bin/train_gpt_emu_fp32 || exit 1
new_scratch gpu_no_device
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
want="^error: no usable GPU \(rank 0: cudaGetDeviceCount: (CUDA driver version is insufficient for CUDA runtime version|no CUDA-capable device is detected)\): train_gpt needs an NVIDIA GPU and its driver; here run the CPU trainer \(make train_gpt_cpu && mpirun -np [0-9]+ ./train_gpt_cpu, same options\), or check the GPU code on the CUDA emulator \(make test/bin/train_gpt_emu_bf16\)$"
for devices in nodriver 0; do
  for np in 1 4; do
    launch=(); [ $np -gt 1 ] && launch=(mpirun -np $np --oversubscribe)
    EMU_DEVICES=$devices OMP_NUM_THREADS=1 timeout 120 "${launch[@]}" test/bin/train_gpt_emu_fp32 --steps 1 > $d/out 2> $d/err; rc=$?
    errs=$(grep '^error:' $d/err)
    echo "EMU_DEVICES=$devices, $np process(es): exit $rc: $errs"
    [ $rc -eq 1 ] || fail "exit code $rc"
    [ "$(echo "$errs" | grep -c .)" -eq 1 ] && echo "$errs" | grep -Eq "$want" || fail "want one line saying what to run instead"
    [ $np -gt 1 ] || [ "$(grep -c . $d/err)" -eq 1 ] || fail "more on stderr than that line"
    grep -Eq "rank [1-9][0-9]*:|MPI_ABORT" $d/err && fail "other ranks spoke, or the job was aborted"
  done
done
# More processes on a node than it has GPUs (NCCL refuses two ranks on one device, naming neither):
# one line from the lowest rank without a GPU, before NCCL starts, and every rank exits 1.
want="^error: more processes than GPUs on [^ ]+: rank 2 is process 3 of 4 there, which has 2 GPU\\(s\\); train_gpt drives one GPU per process \\(NCCL refuses two on one device\\): start at most 2 per node \\(mpirun -np 2, or --map-by ppr:2:node on several\\)$"
EMU_DEVICES=2 OMP_NUM_THREADS=1 timeout 120 mpirun -np 4 --oversubscribe test/bin/train_gpt_emu_fp32 --steps 1 > $d/out 2> $d/err; rc=$?
errs=$(grep '^error:' $d/err)
echo "EMU_DEVICES=2, 4 processes: exit $rc: $errs"
[ $rc -eq 1 ] || fail "exit code $rc"
[ "$(echo "$errs" | grep -c .)" -eq 1 ] && echo "$errs" | grep -Eq "$want" || fail "want one line naming the rank, the node's GPUs and what to start"
grep -q "ncclCommInitRank\|NCCL WARN\|MPI_ABORT" $d/err && fail "NCCL started, or the job was aborted"
EMU_DEVICES=2 OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 --oversubscribe test/bin/train_gpt_emu_fp32 --layers 1 --channels 32 --heads 2 \
  --max-seq-len 16 --seq-len 16 --batch 2 --steps 1 --val-every 0 --sample-every 0 > $d/out2 2>&1 ||
  { tail -n 5 $d/out2; fail "2 processes on a node with 2 GPUs did not train"; }
echo "$fails failures"
[ $fails -eq 0 ]
