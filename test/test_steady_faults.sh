#!/usr/bin/env bash
# A warm step maps no new memory: once the first steps have run, a step's page faults (the log's
# page_faults, rank 0's, from getrusage) are near zero, on one rank and on two at ZeRO stages 0-3.
#
# What it guards: OpenMPI's collectives on our 16-bit sums malloc a temporary as large as the
# message at every call. glibc maps blocks above its mmap threshold afresh and unmaps them on
# free, so unless the trainer keeps them in the heap (cpu/mpi_backend.h, mpi_keep_heap) every
# step faults in a message's worth of new pages per rank: at GPT-2 124M that was ~40% of a
# two-rank step on this project's VM. A test-sized model's messages are a few KB, under glibc's
# default threshold, so the runs lower it to 4 KB (GLIBC_TUNABLES), which puts these messages
# where a real model's are. Without mpi_keep_heap the two-rank runs fault 23-37 times a step, every
# step (115-185 over the five steps counted); with it, 0 (0-2 in a few steps now and then).
# And where the kernel's transparent huge pages are "madvise", two ranks run with glibc's heap on
# them (cpu/mpi_backend.h, mpi_heap_huge_pages), the tunables they were started with kept.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
. test/lib.sh; new_scratch steady_faults
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1 > /dev/null
args="--train-data $d/train.bin --layers 4 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --seq-len 16
      --total-batch 64 --batch 2 --steps 8 --lr 3e-3 --warmup 2 --val-every 0 --sample-every 0 --seed 7 --precision bf16"
fail=0
for run in "1 0" "2 0" "2 1" "2 2" "2 3"; do
  set -- $run; n=$1 s=$2
  OMP_NUM_THREADS=1 mpirun -np $n -x GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4096 ./train_gpt_cpu $args --zero-stage $s \
    --log $d/n${n}_s$s.jsonl > $d/n${n}_s$s.out 2>&1 || { echo "run N=$n S=$s failed:"; tail -5 $d/n${n}_s$s.out; exit 1; }
  # steps 4-8: warm (the first steps allocate and touch what the run keeps)
  faults=$($PYTHON - $d/n${n}_s$s.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"step"')]
steps = {r["step"]: r["page_faults"] for r in rows if "loss" in r}
assert sorted(steps) == list(range(1, 9)), f"steps logged: {sorted(steps)}"
print(" ".join(str(steps[s]) for s in range(4, 9)))
PY
)
  total=0; for f in $faults; do total=$((total + f)); done
  if [ $total -le 10 ]; then echo "ok   N=$n stage $s: page faults in steps 4-8: $faults (total $total <= 10)"
  else echo "FAIL N=$n stage $s: page faults in steps 4-8: $faults (total $total > 10)"; fail=1; fi
  # Two ranks, where the kernel gives huge pages on request: the ranks ran themselves again with
  # glibc.malloc.hugetlb=1 added to the GLIBC_TUNABLES they were given (mpi_heap_huge_pages),
  # which they keep; one rank runs as it was started.
  heap=$(grep '^heap: ' $d/n${n}_s$s.out || true)
  if [ $n -eq 1 ] || ! grep -q '\[madvise\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
    if [ -n "$heap" ]; then echo "FAIL N=$n stage $s: unexpected: $heap"; fail=1; fi
  elif [ "$heap" = "heap: transparent huge pages for MPI's temporaries (GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4096:glibc.malloc.hugetlb=1)" ]; then
    echo "ok   N=$n stage $s: $heap"
  else echo "FAIL N=$n stage $s: the heap line is '$heap'"; fail=1; fi
done
exit $fail
