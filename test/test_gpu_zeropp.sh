#!/usr/bin/env bash
# ZeRO++ on the GPU trainer (gpu/nccl_backend.cuh's group all-gather and all-to-all, gpu/quant.cuh)
# on the CUDA emulator, 2 hosts x 2 ranks (ZERO_HOST_ID): with qwZ, hpZ and qgZ all on, fp32, the
# emulated GPU trainer's losses equal the CPU trainer's within run_gpu_checks.sh's fp32 tolerance
# (1e-5 relative) at every step, its bytes inside and across hosts are the CPU trainer's exactly,
# and its memory plan equals every rank's device allocation ("plan vs allocated: every kind on every rank matches exactly").
set -uo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s -j2 train_gpt_cpu test/bin/train_gpt_emu_fp32 || { echo "FAIL: build"; exit 1; }
. test/lib.sh; new_scratch gpu_zeropp
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
mpmd() { # mpirun over H hosts of L ranks: mpmd H L PROGRAM ARGS...
  local H=$1 L=$2 app=() h; shift 2
  for ((h = 0; h < H; h++)); do app+=(${app:+:} -np $L -x ZERO_HOST_ID=$h "$@"); done
  mpirun --oversubscribe --bind-to none "${app[@]}"
}
$PYTHON test/zero_check.py shard $d/train.bin 20000 512 1
args=(--train-data $d/train.bin --seq-len 16 --batch 2 --lr 3e-3 --warmup 2 --val-every 0 --sample-every 0 --seed 7
      --zero-stage 3 --layers 2 --channels 32 --heads 2 --vocab-size 512 --max-seq-len 16 --steps 3
      --zeropp-qwz 1 --zeropp-hpz 2 --zeropp-qgz 4 --zeropp-block 64)
mpmd 2 2 ./train_gpt_cpu "${args[@]}" --log $d/cpu.jsonl > $d/cpu.out 2>&1 || { tail -5 $d/cpu.out; fail "CPU run"; }
mpmd 2 2 test/bin/train_gpt_emu_fp32 "${args[@]}" --log $d/gpu.jsonl > $d/gpu.out 2>&1 || { tail -5 $d/gpu.out; fail "emulated GPU run"; }
grep -q "ZeRO++: qwZ int8, hpZ groups of 2, qgZ int4; blocks of 64; 2 hosts x 2 ranks" $d/gpu.out ||
  fail "the GPU run does not say it runs ZeRO++ on 2 hosts x 2 ranks"
$PYTHON - $d/cpu.jsonl $d/gpu.jsonl <<'PY' || fail "losses or bytes differ"
import json, sys
def load(p):
    steps, comm = {}, {}
    for l in open(p):
        e = json.loads(l)
        if "loss" in e and "event" not in e: steps[e["step"]] = e["loss"]
        if e.get("event") == "comm": comm[(e["step"], e["rank"])] = (e["inside_host"], e["across_hosts"])
    return steps, comm
(lc, cc), (lg, cg) = load(sys.argv[1]), load(sys.argv[2])
ok = sorted(lc) == sorted(lg) == [1, 2, 3] and cc == cg and len(cc) == 12
for s in sorted(lc):
    rel = abs(lc[s] - lg.get(s, float("nan"))) / abs(lc[s])
    ok = ok and rel <= 1e-5
    print(f"step {s}: loss cpu {lc[s]:.8f}, gpu {lg.get(s)}, relative difference {rel:.1e}")
print(f"bytes inside/across hosts, step 2 rank 0: cpu {cc.get((2, 0))}, gpu {cg.get((2, 0))}; all 12 equal: {cc == cg}")
sys.exit(0 if ok else 1)
PY
grep -q "plan vs allocated: every kind on every rank matches exactly" $d/gpu.out && echo "ok   plan vs allocated: every kind on every rank matches exactly (GPU)" ||
  { grep -E "DIFFERS|plan vs" $d/gpu.out | head -3; fail "the GPU run's memory plan differs from its allocation"; }
echo "$fails failures"
[ $fails -eq 0 ]
