#!/usr/bin/env bash
# The step-time model (run/timemodel.h) against this machine: calibrate once, then predict and
# measure `mpirun -np 1, 2, 4` at ZeRO stages 0-3, and print one markdown table (docs/scaling.md).
#
#   scripts/timemodel_check.sh [REPEATS]     (default 3; about 3 minutes per repeat on 2 cores)
#
# 1. The calibration run: 2 ranks, ZeRO-3, d12 bf16, B=4, T=64, 6 steps, with --log; then
#    `train_gpt_cpu --plan --calibrate LOG` fits the matmul and memory efficiencies and MPI's
#    bandwidth (run/timemodel.h, timemodel_calibrate) and writes this machine's description.
# 2. Every configuration REPEATS times, interleaved (one of each, then again), 4 steps each: the
#    mean step time after the first step of each run. Beside each run the share of the machine's
#    2 cores it got (user + system CPU seconds / wall seconds / 2, from /usr/bin/time): other
#    work on a shared machine shows as a share well below 1.
# 3. The prediction for each configuration with that description, and its error against the
#    median of the measured runs.
# Per-rank batch and sequence are fixed, so the global batch grows with N (weak scaling) and
# ranks beyond the 2 cores share them.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-/usr/bin/python3}
R=${1:-3}
make -s train_gpt_cpu
out=${TM_OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "runs in $out" >&2
common="--model d12 --precision bf16 --batch 4 --seq-len 64 --val-every 0 --sample-every 0"
run() { # name np stage steps
  local log=$out/$1.jsonl
  /usr/bin/time -f "%e %U %S" -o "$out/$1.time" mpirun -np "$2" --bind-to none ./train_gpt_cpu $common \
    --zero-stage "$3" --steps "$4" --log "$log" > "$out/$1.out" 2>&1 || { tail -5 "$out/$1.out"; exit 1; }
  echo "$(cat /proc/loadavg | cut -d' ' -f1)" > "$out/$1.load"
}
run calibration 2 3 6
./train_gpt_cpu --plan --calibrate "$out/calibration.jsonl" --hardware this-machine > "$out/this-machine.json"
for rep in $(seq 1 "$R"); do
  for np in 1 2 4; do for s in 0 1 2 3; do
    echo "repeat $rep: -np $np stage $s" >&2
    run "n${np}_s${s}_r${rep}" $np $s 4
  done; done
done
$PY - "$out" "$R" <<'PY'
import json, subprocess, sys, statistics
out, R = sys.argv[1], int(sys.argv[2])
def mean_ms(path):
    steps = [json.loads(l) for l in open(path) if '"loss"' in l and '"event"' not in l][1:]
    return sum(s["ms"] for s in steps) / len(steps)
def share(name):
    wall, user, sys_ = map(float, open(f"{out}/{name}.time").read().split()[-3:])
    return (user + sys_) / wall / 2
print("| N | stage | measured ms/step (repeats) | median | predicted | error | core share of the runs |")
print("|---|---|---|---|---|---|---|")
errs = []
for np in (1, 2, 4):
    for s in range(4):
        names = [f"n{np}_s{s}_r{r}" for r in range(1, R + 1)]
        ms = [mean_ms(f"{out}/{n}.jsonl") for n in names]
        med = statistics.median(ms)
        p = json.loads(subprocess.run(["./train_gpt_cpu", "--plan", "--time", "--json", "--hardware", f"{out}/this-machine.json",
                                       "--model", "d12", "--precision", "bf16", "--batch", "4", "--seq-len", "64",
                                       "--world", str(np), "--zero-stage", str(s)], capture_output=True, text=True,
                                      check=True).stdout)["step_ms"]
        err = (p - med) / med
        errs.append(abs(err))
        print(f"| {np} | {s} | {', '.join(f'{x:.0f}' for x in ms)} | {med:.0f} | {p:.0f} | {100 * err:+.0f}% | "
              f"{', '.join(f'{share(n):.2f}' for n in names)} |")
print(f"\nworst |error| {100 * max(errs):.0f}%, mean {100 * sum(errs) / len(errs):.0f}%")
print("calibration:", open(f"{out}/this-machine.json").read())
PY
