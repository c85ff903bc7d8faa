#!/usr/bin/env bash
# GFLOP/s of gemm_bf16.h's paths against OpenBLAS cblas_sgemm (fp32) on the GPT-2 124M shapes
# at B=4, T=64 (256 tokens), plus a 1024^3 square, and the sum over one training step
# (12 layers x 4 linear layers x 3 products + the tied LM head's 3 products).
# Each figure is the best of repeated calls. Run on an otherwise idle machine: with other busy
# processes, 2-thread timings swing by 2-10x from one run to the next.
#   scripts/bench_gemm_bf16.sh [--no-scalar] [--seconds S] [--path NAME] [--shape SUBSTRING]
# OMP_NUM_THREADS sets the bf16 threads (default: all cores); OpenBLAS uses its own. Debian's
# OpenBLAS 0.3.21 gives CPUs it does not know kernels without their AVX-512 units (SSE3 "Prescott"
# or AVX2 "Haswell"); the benchmark then re-runs itself with OPENBLAS_CORETYPE=SkylakeX, as
# train_gpt_cpu does (cpu/openblas.h).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s test/bin/test_gemm_bf16
exec ./test/bin/test_gemm_bf16 --bench "$@"
