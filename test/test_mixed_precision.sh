#!/usr/bin/env bash
# mixed_precision.h: conversions, overflow checks and loss scaler (test/test_mixed_precision.c),
# built four ways, plus compile checks that the header is clean C11, C++ and CUDA C++.
#   native build (-march=native: AVX512-BF16/F16C array paths), with the exhaustive 2^32 check
#   sanitized build (ASan + UBSan), smaller random sample
#   portable build (-march=x86-64: scalar array paths; _Float16 is libgcc's software conversion,
#     an independent reference for fp16)
# ZC_MP_QUICK=1 skips the exhaustive pass (about 15 CPU-seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p test/bin

make -s test/bin/test_mixed_precision test/bin/test_mixed_precision_asan
. test/lib.sh; new_scratch mixed_precision # (this run's own builds)

echo "== native build"
if [ "${ZC_MP_QUICK:-0}" = 1 ]; then
  ./test/bin/test_mixed_precision
else
  ./test/bin/test_mixed_precision --exhaustive
fi

echo "== sanitized build"
./test/bin/test_mixed_precision_asan --samples 1000000

echo "== portable build (no SIMD)"
gcc -std=c11 -D_GNU_SOURCE -O2 -march=x86-64 -fopenmp -Wall -Wextra -Werror -I. \
    test/test_mixed_precision.c -o $d/test_mixed_precision_portable -lm
$d/test_mixed_precision_portable --samples 2000000

echo "== header compiles warning-free as C11 (pedantic) and C++17"
gcc -std=c11 -march=native -fopenmp -Wall -Wextra -Wpedantic -Werror -fsyntax-only -x c mixed_precision.h
g++ -std=c++17 -march=native -fopenmp -Wall -Wextra -Werror -fsyntax-only -x c++ mixed_precision.h
echo ok

NVCC=/usr/local/cuda/bin/nvcc
if [ -x "$NVCC" ]; then
  echo "== header compiles warning-free as CUDA C++ (nvcc, compile only)"
  # -Werror all-warnings covers nvcc's own front end; -Xcompiler ... the host compiler.
  out=$("$NVCC" -std=c++17 -arch=sm_80 -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fopenmp \
        -I. -c test/mixed_precision_nvcc.cu -o $d/mixed_precision_nvcc.o 2>&1) || { echo "$out"; exit 1; }
  if grep -qi warning <<<"$out"; then echo "$out"; exit 1; fi
  echo ok
else
  echo "== nvcc not found at $NVCC: CUDA compile check not run"
fi
