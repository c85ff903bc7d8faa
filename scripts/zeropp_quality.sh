#!/usr/bin/env bash
# ZeRO++'s convergence against ZeRO-3 (make zeropp-quality): a small GPT-2 trained 300 steps on
# the Brown corpus (data/) by 4 ranks posing as 2 hosts x 2 (ZERO_HOST_ID, cpu/mpi_backend.h),
# with ZeRO-3, qwZ, hpZ, qgZ (int4) and all three, the same seed and batches. Prints each run's
# final loss (the mean of the last 20 steps' losses) against ZeRO-3's, and fails beyond 2%; the
# curves go to docs/figures/zeropp_loss.png (scripts/plot.py) and the numbers to
# docs/figures/zeropp_quality.txt. A benchmark, not a test: minutes; run alone
# (flock /work/tmp/bench.lock make zeropp-quality on the shared machine).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s train_gpt_cpu
out=${ZEROPP_OUT:-docs/figures}
work=$(mktemp -d "${TMPDIR:-/tmp}/zeropp_quality.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
steps=${STEPS:-300}
PY=${PYTHON:-python3}; [ -x /usr/bin/python3 ] && [ -z "${PYTHON:-}" ] && PY=/usr/bin/python3 # (numpy, matplotlib)
args="--layers 2 --channels 64 --heads 2 --max-seq-len 32 --seq-len 32 --batch 4 --steps $steps --lr 1e-3
      --warmup 20 --val-every 0 --sample-every 0 --print-every 50 --seed 1337 --zero-stage 3 --precision bf16"
names=(zero3 qwz hpz qgz all)
opts=("" "--zeropp-qwz 1" "--zeropp-hpz 2" "--zeropp-qgz 4" "--zeropp-qwz 1 --zeropp-hpz 2 --zeropp-qgz 4")
for i in "${!names[@]}"; do
  n=${names[$i]}
  # shellcheck disable=SC2086
  mpirun --oversubscribe -np 2 -x ZERO_HOST_ID=0 ./train_gpt_cpu $args ${opts[$i]} --log $work/$n.jsonl : \
         -np 2 -x ZERO_HOST_ID=1 ./train_gpt_cpu $args ${opts[$i]} --log $work/$n.jsonl > $work/$n.out 2>&1 ||
    { tail -5 $work/$n.out; echo "run $n failed"; exit 1; }
  echo "$n: $(grep -m1 'of which inside' $work/$n.out | sed 's/^ *//' | cut -c1-60)"
done
mkdir -p "$out"
$PY - "$work" "$out/zeropp_quality.txt" "$(git rev-parse --short HEAD)" "${names[@]}" <<'EOF'
import json, sys
work, txt, commit, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def final(n):
    losses = [json.loads(l)["loss"] for l in open(f"{work}/{n}.jsonl") if l.startswith('{"step"') and '"loss"' in l]
    return sum(losses[-20:]) / len(losses[-20:]), len(losses)
def across(n):
    c = [json.loads(l) for l in open(f"{work}/{n}.jsonl") if '"event":"comm"' in l and '"rank":0' in l]
    return c[-1].get("across_hosts", 0), c[-1].get("inside_host", 0)
base, steps = final(names[0])
lines, bad = [f"ZeRO++ quality: commit {commit}; 4 ranks as 2 hosts x 2, bf16, L2 C64, B4 T32 per rank, {steps} steps, Brown",
              "run     final loss (mean of last 20)   vs ZeRO-3   bytes/rank/step across hosts, inside"], 0
for n in names:
    f, _ = final(n)
    a, i = across(n)
    rel = (f - base) / base
    bad |= abs(rel) > 0.02
    lines.append(f"{n:7s} {f:10.4f}                     {100 * rel:+6.2f}%   {a:12.0f} {i:12.0f}")
open(txt, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad else 0)
EOF
$PY scripts/plot.py --out "$work/fig" --labels "$(IFS=,; echo "${names[*]}")" $(for n in "${names[@]}"; do echo $work/$n.jsonl; done) > /dev/null
cp "$work/fig/loss.png" "$out/zeropp_loss.png"
echo "wrote $out/zeropp_loss.png and $out/zeropp_quality.txt"
