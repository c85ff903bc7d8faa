#!/usr/bin/env bash
# Multi-rank efficiency on this machine (`make bench-ranks`): GPT-2 124M (d12), T = 64, the same
# global batch of 4 sequences two ways on the machine's two cores, at ZeRO stages 0-3:
#   - 1 rank with 2 OpenMP threads (B = 4), and
#   - 2 ranks (mpirun -np 2) with 1 thread each (B = 2 per rank),
# both `mpirun --bind-to none`. Interleaved: each round runs every stage both ways one after the
# other, so that a busy neighbour slows all alike; ROUNDS rounds of STEPS steps. Per configuration
# the median of the trainer's "average step (after the first)" and the fastest single step of all
# rounds (the least disturbed); efficiency = the 1-rank time / the 2-rank time (above 1: the two
# ranks are faster than one rank's two threads).
# Environment: ROUNDS (3), STEPS (5), PRECISION (bf16), STAGES ("0 1 2 3").
set -u
# (as bench.sh: OpenBLAS chooses its kernels for this CPU, whatever OPENBLAS_CORETYPE the
# environment sets: cpu/openblas.h)
unset OPENBLAS_CORETYPE
cd "$(dirname "$0")/.." || exit 1
make -s train_gpt_cpu || exit 1
ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-5} PRECISION=${PRECISION:-bf16} STAGES=${STAGES:-0 1 2 3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
run() { # stage ranks threads batch round
    mpirun -np "$2" --bind-to none -x OMP_NUM_THREADS="$3" ./train_gpt_cpu --model d12 --batch "$4" --seq-len 64 \
        --steps "$STEPS" --val-every 0 --sample-every 0 --lr 6e-4 --warmup 0 --precision "$PRECISION" \
        --zero-stage "$1" > "$d/z$1_np$2_r$5.out" 2>&1 || { echo "error: stage $1, $2 ranks:"; tail -5 "$d/z$1_np$2_r$5.out"; exit 1; }
}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
    for s in $STAGES; do
        run "$s" 1 2 4 "$r"
        run "$s" 2 1 2 "$r"
    done
done
# the median of the rounds' averages and the fastest step, in ms, of one configuration's runs
stats() {
    /usr/bin/python3 - "$@" <<'PY'
import re, statistics, sys
avg, best = [], []
for f in sys.argv[1:]:
    for line in open(f):
        m = re.match(r"average step \(after the first\): ([0-9.]+) ms", line)
        if m: avg.append(float(m.group(1)))
        m = re.match(r"step\s+(\d+)/\d+ .*\|\s+([0-9.]+) ms \|", line)
        if m and int(m.group(1)) > 1: best.append(float(m.group(2)))
print(f"{statistics.median(avg):.0f} {min(best):.0f}")
PY
}
echo "d12 B=4 (global) T=64 $PRECISION, $ROUNDS rounds of $STEPS steps; load average before: $load_before"
printf '%-6s %22s %22s %12s %12s\n' stage "1 rank x 2 threads" "2 ranks x 1 thread" "efficiency" "(fastest)"
printf '%-6s %22s %22s %12s %12s\n' "" "median ms (fastest)" "median ms (fastest)" "median" "steps"
for s in $STAGES; do
    read -r a1 b1 <<<"$(stats "$d"/z${s}_np1_r*.out)"
    read -r a2 b2 <<<"$(stats "$d"/z${s}_np2_r*.out)"
    printf '%-6s %22s %22s %12s %12s\n' "$s" "$a1 ($b1)" "$a2 ($b2)" \
        "$(/usr/bin/python3 -c "print(f'{$a1/$a2:.2f}')")" "$(/usr/bin/python3 -c "print(f'{$b1/$b2:.2f}')")"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
