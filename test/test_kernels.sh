#!/usr/bin/env bash
# Every kernel's backward (and the whole model's gradient) against finite differences:
# test/test_kernels.c, which includes train_gpt_cpu.c, built twice and run twice:
#   optimized (-O3 -march=native, as the trainer is built)
#   sanitized (ASan + UBSan + LeakSanitizer): out-of-bounds reads, UB, leaks of the model's
#             own allocations (no MPI is initialised here, so leak checking can stay on); with
#             --quick: every check but the model's finite differences (12,000 forward passes
#             through code its own passes already ran under the sanitizers: the optimized
#             build checks them; a fifth of this build's run)
# Two OpenMP threads, so that the parallel loops really run in parallel.
set -euo pipefail
cd "$(dirname "$0")/.."

# (the Makefile knows that this program includes train_gpt_cpu.c)
make -s -j2 test/bin/test_kernels test/bin/test_kernels_asan

export OMP_NUM_THREADS=2
echo "== optimized build"
./test/bin/test_kernels
echo "== sanitized build"
ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ./test/bin/test_kernels_asan --quick
