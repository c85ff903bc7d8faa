#!/usr/bin/env bash
# Measurements behind docs/scaling.md, on this machine (GPT-2 124M, d12, bf16, B=4, T=64 per rank):
#
#   scripts/measure.sh overhead [REPEATS]   what --trace costs: 1 rank ZeRO-0 and 2 ranks ZeRO-3, each
#                                           with and without --trace, interleaved (default 5 repeats,
#                                           6 steps each; about 3 minutes idle); and the bound from
#                                           the cost of one trace call (test/bench_trace.c) times
#                                           the events a traced step records
#   scripts/measure.sh timemodel [REPEATS]  the step-time model: one calibration run (2 ranks, ZeRO-3,
#                                           6 steps; `--plan --calibrate` fits this machine's
#                                           description to it), then -np 1, 2, 4 at stages 0-3, 4 steps
#                                           each, interleaved (default 3 repeats; about 3 minutes
#                                           each idle), against the model's predictions
#
# A run's time is the mean step after its first. Beside each run: the share of the machine's 2
# cores it got (user + system CPU seconds / wall seconds / 2, from /usr/bin/time), which shows
# when other work on a shared machine took cores away (below 0.8 the table marks a run disturbed;
# one rank alone idles near 0.87, in its serial parts). The model is compared with each
# configuration's fastest run: other work only ever adds time. Running the timemodel measurement
# again with the same MEASURE_OUT adds repeats to the earlier ones (and recalibrates). Runs stay
# in $MEASURE_OUT (default: a
# temporary directory, kept and named on stderr). Per-rank batch and sequence are fixed, so the
# global batch grows with N, and ranks beyond the 2 cores share them.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-/usr/bin/python3}
what=${1:-}
[ "$what" = overhead ] || [ "$what" = timemodel ] || { echo "usage: $0 overhead|timemodel [REPEATS]" >&2; exit 1; }
R=${2:-$([ "$what" = overhead ] && echo 5 || echo 3)}
make -s train_gpt_cpu test/bin/bench_trace
out=${MEASURE_OUT:-$(mktemp -d)}
mkdir -p "$out"
echo "runs in $out" >&2
common="--model d12 --precision bf16 --batch 4 --seq-len 64 --val-every 0 --sample-every 0"
run() { # name np stage steps [more options]
  local name=$1 np=$2 stage=$3 steps=$4
  shift 4
  echo "$name" >&2
  /usr/bin/time -f "%e %U %S" -o "$out/$name.time" mpirun -np "$np" --bind-to none ./train_gpt_cpu $common \
    --zero-stage "$stage" --steps "$steps" --log "$out/$name.jsonl" "$@" > "$out/$name.out" 2>&1 || { tail -5 "$out/$name.out"; exit 1; }
}
if [ "$what" = overhead ]; then
  test/bin/bench_trace > "$out/bench_trace.txt"
  for rep in $(seq 1 "$R"); do
    for cfg in "1 0" "2 3"; do
      set -- $cfg
      run "n$1_s$2_off_r$rep" $1 $2 6
      run "n$1_s$2_on_r$rep" $1 $2 6 --trace "$out/n$1_s$2_r$rep.json"
    done
  done
else
  run calibration 2 3 6
  ./train_gpt_cpu --plan --calibrate "$out/calibration.jsonl" --hardware this-machine > "$out/this-machine.json"
  for rep in $(seq 1 "$R"); do
    for np in 1 2 4; do for s in 0 1 2 3; do run "n${np}_s${s}_r$(date +%s)" $np $s 4; done; done
  done
fi
$PY - "$out" "$R" "$what" <<'PY'
import json, statistics, subprocess, sys
out, R, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def ms(n):
    s = [json.loads(l) for l in open(f"{out}/{n}.jsonl") if '"loss"' in l and '"event"' not in l][1:]
    return sum(x["ms"] for x in s) / len(s)
def share(n):
    w, u, s = map(float, open(f"{out}/{n}.time").read().split()[-3:])
    return (u + s) / w / 2
def shares(names): return ", ".join(f"{share(n):.2f}" for n in names)
reps = range(1, R + 1)
if what == "overhead":
    for np, st in ((1, 0), (2, 3)):
        off, on = [f"n{np}_s{st}_off_r{r}" for r in reps], [f"n{np}_s{st}_on_r{r}" for r in reps]
        a, b = [ms(n) for n in off], [ms(n) for n in on]
        print(f"-np {np} ZeRO-{st}: without --trace {', '.join(f'{x:.0f}' for x in a)} ms; with {', '.join(f'{x:.0f}' for x in b)} ms")
        print(f"  pairs (with / without): {', '.join(f'{y / x:.3f}' for x, y in zip(a, b))}; medians {statistics.median(a):.0f} "
              f"vs {statistics.median(b):.0f} ms: {100 * (statistics.median(b) / statistics.median(a) - 1):+.1f}%")
        print(f"  core share: without {shares(off)}; with {shares(on)}")
        t = json.load(open(f"{out}/n{np}_s{st}_r1.json"))
        ev = [e for e in t["traceEvents"] if e["ph"] != "M" and e["pid"] == 0]
        per_step = len(ev) / t["otherData"]["steps"]
        pair = float(open(f"{out}/bench_trace.txt").readline().split(":")[1].split()[0])
        print(f"  bound: {per_step:.0f} events per step on rank 0 x {pair:.0f} ns per traced span = {per_step * pair / 1e3:.1f} us "
              f"per step, {100 * per_step * pair / 1e6 / statistics.median(a):.4f}% of the median step")
    print(open(f"{out}/bench_trace.txt").read())
    sys.exit(0)
import glob, os
print("| N | stage | measured ms/step (core share) | fastest | predicted | error |")
print("|---|---|---|---|---|---|")
errs = []
for np in (1, 2, 4):
    for s in range(4):
        names = sorted(os.path.basename(f)[:-5] for f in glob.glob(f"{out}/n{np}_s{s}_r*.time")) # every repeat run so far
        m = [ms(n) for n in names]
        med = min(m)
        p = json.loads(subprocess.run(["./train_gpt_cpu", "--plan", "--time", "--json", "--hardware", f"{out}/this-machine.json",
                                       "--model", "d12", "--precision", "bf16", "--batch", "4", "--seq-len", "64",
                                       "--world", str(np), "--zero-stage", str(s)], capture_output=True, text=True,
                                      check=True).stdout)["step_ms"]
        errs.append(abs(p - med) / med)
        runs = ", ".join(f"{x:.0f} ({share(n):.2f}{'' if share(n) >= 0.8 else ', disturbed'})"
                         for x, n in zip(m, names))
        print(f"| {np} | {s} | {runs} | {med:.0f} | {p:.0f} | {100 * (p - med) / med:+.0f}% |")
print(f"\nworst |error| {100 * max(errs):.0f}%, mean {100 * sum(errs) / len(errs):.0f}%; calibration run's core share "
      f"{share('calibration'):.2f}")
print(open(f"{out}/this-machine.json").read())
PY
