#!/usr/bin/env bash
# Benchmark: GPT-2 124M (d12), B=4, T=64, a few optimizer steps on the embedded data, in fp32
# and in bf16 (or only PRECISIONS="bf16"). Prints ms/step (the average after the first step),
# tokens/s and achieved GFLOP/s (6 x params + attention FLOPs per token), and each step as a
# multiple of its floor (test_gemm_bf16 --floor: the matmul FLOPs at the bf16 or fp32 peak plus
# AdamW's bytes at the memory bandwidth, all measured on this machine), and beside it the step's
# matmul products timed alone against the floor's matmul term (how near the peak the kernels get
# at that moment, with their operands in cache; the rest of the step's excess is the step's own).
#
# This project's machine is a VM whose ceilings move from one probe to the next: the bandwidth
# probe reads either 49-56 or 77-96 GB/s, seconds apart, and now and then a probe's every trial
# runs while the VM has taken a core away (it then reads half the peak), so a floor measured a
# minute away from the steps it divides describes another machine. So the run goes in ROUNDS
# rounds (default 3), and in each the ceilings are measured right before and right after every
# precision's steps: probe, fp32 steps, probe, bf16 steps, probe. A precision's floor in a round
# is its matmul term at the higher of the two peaks (the CPU's peak does not move; a lower
# reading is a disturbed probe) plus its AdamW term at the mean of the two bandwidths (which does
# move, with the steps); its ratio in that round is its step over that floor. The summary gives
# each precision's median over the rounds and all the rounds' values. Extra arguments go to the
# trainer. Run it on an otherwise idle machine; `make bench` builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-6} rounds=${ROUNDS:-3}
# The floor assumes the CPU's widest vector units; OpenBLAS (and the trainer, cpu/openblas.h)
# choose the kernels that use them, unless OPENBLAS_CORETYPE forces others: drop it, and say so.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "bench: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE in the environment dropped (OpenBLAS chooses its kernels for this CPU)"
  unset OPENBLAS_CORETYPE
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s test/bin/test_gemm_bf16

# The ceilings now: the peak and memory lines, and "bf16 <matmul s> <AdamW s>" (and fp32) into $1.
probe() {
  ./test/bin/test_gemm_bf16 --floor > "$tmp/probe"
  grep -E "^(peak|memory)" "$tmp/probe" | sed 's/^/  /'
  # "floor of a d12 B=4 T=64 step, bf16: matmuls 0.409s at the bf16 peak + AdamW 0.066s at that bandwidth = 0.475s"
  awk '/^floor/ { p = $8; sub(/:$/, "", p); mm = $10; sub(/s$/, "", mm); aw = $17; sub(/s$/, "", aw); print p, mm, aw }' "$tmp/probe" > "$1"
}

# The step's matmul products alone, in seconds (test_gemm_bf16 --bench: each of the step's shapes
# timed on its own, best of repeated calls with its operands in cache, summed with their counts),
# on the path the trainer multiplies precision $1 on: the bf16 path it picks, or gemm_f32 where the
# CPU has AVX-512 (else OpenBLAS); the paths are looked up once, here. Beside the floor's matmul
# term it says how near the peak the products get on their own at that moment; the step's excess
# over them is what the step adds.
bf16_path=$(./test/bin/test_gemm_bf16 --bench --shape none-such | awk -F'best=' '/^paths:/ { split($2, a, " "); print a[1] }')
if ./test/bin/test_gemm_bf16 --bench --no-scalar --path f32 --shape none-such | grep -q '^shape.* f32'; then f32_path=f32
else f32_path=sgemm; fi
products() {
  local path=$f32_path
  if [ "$1" = bf16 ]; then path=$bf16_path; fi
  ./test/bin/test_gemm_bf16 --bench --seconds 0.1 --path "$path" | awk '/^matmul seconds per GPT-2 step/ { v = $NF; sub(/s$/, "", v); print v }'
}

: > "$tmp/results" # round precision ms floor ratio products/matmul-term
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds"
  probe "$tmp/before"
  for p in ${PRECISIONS:-fp32 bf16}; do
    ./train_gpt_cpu --model d12 --batch 4 --seq-len 64 --steps "$steps" --val-every 0 --sample-every 0 \
      --lr 6e-4 --warmup 0 --precision "$p" "$@" > "$tmp/out"
    if [ "$r" = 1 ]; then grep -E "^step|threads|BLAS|^bf16 matmuls" "$tmp/out"; fi
    ms=$(awk '/^average step/ {print $6}' "$tmp/out")
    probe "$tmp/after"
    prod=$(products "$p")
    awk -v p="$p" -v ms="$ms" -v r="$r" -v prod="${prod:-0}" -v out="$tmp/results" 'FNR == 1 { file++ } $1 == p { mm[file] = $2; aw[file] = $3; f[file] = $2 + $3 } END {
      flop = 6*124475904 + 12*12*768*64;         # per token
      term = mm[1] < mm[2] ? mm[1] : mm[2]
      floor = term + (aw[1] + aw[2]) / 2
      printf "  d12 B=4 T=64 %s: %.0f ms/step, %.0f tokens/s, %.1f GFLOP/s achieved; floor %.3f s (%.3f before, %.3f after): %.2fx\n",
             p, ms, 256/(ms/1000), 256*flop/(ms/1000)/1e9, floor, f[1], f[2], ms / 1000 / floor
      printf "    its products alone, operands in cache: %.3f s = %.2fx the floor'"'"'s matmul term (%.3f s)\n", prod, prod / term, term
      printf "%d %s %s %.4f %.4f %.4f\n", r, p, ms, floor, ms / 1000 / floor, prod / term >> out }' "$tmp/before" "$tmp/after"
    mv "$tmp/after" "$tmp/before"
  done
done

# The summary: per precision, the median over the rounds of the ratio (and of the step and the
# floor), and every round's ratio.
echo "summary over $rounds rounds:"
for p in ${PRECISIONS:-fp32 bf16}; do
  awk -v p="$p" '$2 == p { n++; ms[n] = $3; fl[n] = $4; ra[n] = $5; pr[n] = $6; all = all sprintf(" %.2fx", $5) }
    function median(a, n,   i, j, t, b) { for (i = 1; i <= n; i++) b[i] = a[i]
      for (i = 2; i <= n; i++) for (j = i; j > 1 && b[j - 1] > b[j]; j--) { t = b[j]; b[j] = b[j - 1]; b[j - 1] = t }
      return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2 }
    END { if (n) printf "%s: %.0f ms/step = %.2fx its floor (%.3f s), medians of %d rounds; each round:%s; products alone %.2fx the matmul term\n",
                 p, median(ms, n), median(ra, n), median(fl, n), n, all, median(pr, n) }' "$tmp/results"
done
