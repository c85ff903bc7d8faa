#!/usr/bin/env bash
# The CPU optimizer engine (core/optimizer_engine.h) against torch.optim.AdamW on this machine, in
# one run: ms per AdamW step for GPT-2 124M and 1.5B in fp32 and bf16 mixed precision, the bytes
# per second it streams against the machine's measured memory bandwidth, and torch's best of
# 1/2 threads and foreach off/on over 124M's parameters (fp32; torch has no mixed-precision
# AdamW of its own). Run it on an otherwise idle machine; `make bench-optimizer` builds first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/usr/bin/python3}
out=$(mktemp); trap 'rm -f "$out"' EXIT
threads=${OMP_NUM_THREADS:-$(nproc)}
OMP_NUM_THREADS=$threads test/bin/bench_optimizer --steps "${STEPS:-5}" | tee "$out"
"$PY" scripts/bench_torch_adamw.py --steps "${STEPS:-5}" | tee -a "$out"
# (each line's ms is the field before "ms/step": the labels have spaces in them)
awk 'function ms(  i) { for (i = 2; i <= NF; i++) if ($i == "ms/step") return $(i - 1); return 0 }
     /^d12 fp32 \(whole-model/ {ours=ms()} /^d12 fp32 \(unit/ {unit=ms()} /^torch AdamW best/ {t=ms()}
     END {if (ours && t) printf "d12 fp32: the engine %.1f ms (whole-model arrays), %.1f ms (unit by unit); torch best %.1f ms: %.1fx\n", ours, unit, t, t / (ours < unit ? ours : unit)}' "$out"
