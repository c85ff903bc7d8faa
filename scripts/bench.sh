#!/usr/bin/env bash
# Benchmark: GPT-2 124M (d12), B=4, T=64, a few optimizer steps on the embedded data, in fp32
# and in bf16 (or only PRECISIONS="bf16"). Prints ms/step (the average after the first step),
# tokens/s and achieved GFLOP/s (6 x params + attention FLOPs per token). Extra arguments go to
# the trainer. Then the machine's measured peaks and the step's floor (test_gemm_bf16 --floor:
# the matmul FLOPs at the bf16 or fp32 peak plus AdamW's bytes at the memory bandwidth), and each
# precision's step as a multiple of its floor. Run it on an otherwise idle machine; `make bench`
# builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-6}
out=$(mktemp) floor=$(mktemp) ms=$(mktemp)
trap 'rm -f "$out" "$floor" "$ms"' EXIT
for p in ${PRECISIONS:-fp32 bf16}; do
  ./train_gpt_cpu --model d12 --batch 4 --seq-len 64 --steps "$steps" --val-every 0 --sample-every 0 \
    --lr 6e-4 --warmup 0 --precision "$p" "$@" > "$out"
  grep -E "^step|^average|threads|^bf16 matmuls" "$out"
  awk -v p="$p" '/^average step/ {print p, $6}' "$out" >> "$ms"
  awk -v p="$p" '/^average step/ {ms=$6} END {
    flop = 6*124475904 + 12*12*768*64;         # per token
    printf "d12 B=4 T=64 %s: %.0f ms/step, %.0f tokens/s, %.1f GFLOP/s achieved\n", p, ms, 256/(ms/1000), 256*flop/(ms/1000)/1e9 }' "$out"
done
make -s test/bin/test_gemm_bf16
./test/bin/test_gemm_bf16 --floor | grep -E "^(peak|memory|floor)" | tee "$floor"
# "floor of a d12 B=4 T=64 step, bf16: ... = 0.481s" against "bf16 655.0"
awk 'NR == FNR { sub(/:$/, "", $8); f[$8] = $NF + 0; next }
     ($1 in f) && f[$1] > 0 { printf "%s: %.0f ms/step = %.2fx its floor (%.3f s)\n", $1, $2, $2 / 1000 / f[$1], f[$1] }' "$floor" "$ms"
