#!/usr/bin/env bash
# gemm_bf16.h: every path this CPU supports (scalar; AVX512-BF16 and AMX when present, chosen at
# run time) against a double-precision reference on the same bf16 inputs, for odd shapes, all
# transpositions and beta 0/1/other (test/test_gemm_bf16.c). Built four ways:
#   native build (-march=native)
#   sanitized build (ASan + UBSan): out-of-bounds reads/writes of A, B, C
#   portable build (-march=x86-64): the ISA-specific code must build from target attributes
#     alone and still be found and used at run time
#   tiny-block build (K block, resident block and chunk = 32, threads on every call, chunk
#     widening always on, the direct forward's streaming stores on every C): every block
#     boundary and the parallel code on small shapes
# If /proc/cpuinfo lists amx_bf16 or avx512_bf16, the matching path must be detected (and so
# tested), so a broken detection cannot silently fall back to the scalar path.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p test/bin
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Idle OpenMP threads sleep instead of spinning: on a machine shared with other busy processes,
# spinning makes the many small parallel calls below up to 10x slower (this is a correctness test).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

make -s test/bin/test_gemm_bf16 test/bin/test_gemm_bf16_asan
. test/lib.sh; new_scratch gemm_bf16 # (the two extra builds go there: this run's own)

run() {  # name, binary, args...
  local name=$1; shift
  echo "== $name"
  local out
  out=$("$@" 2>&1) || { echo "$out"; echo "FAILED: $name"; exit 1; }
  echo "$out"
  if grep -qw amx_bf16 /proc/cpuinfo && ! grep -q 'amx=yes' <<<"$out"; then
    echo "FAILED: the CPU has AMX-BF16 but the amx path was not detected"; exit 1
  fi
  if grep -qw avx512_bf16 /proc/cpuinfo && ! grep -q 'avx512bf16=yes' <<<"$out"; then
    echo "FAILED: the CPU has AVX512-BF16 but the avx512bf16 path was not detected"; exit 1
  fi
}

# the two extra builds compile in parallel while the first two run
LIBS="-lopenblas -lm"
gcc -std=c11 -D_GNU_SOURCE -O2 -march=x86-64 -fopenmp -Wall -Wextra -Werror -I. \
    test/test_gemm_bf16.c -o $d/test_gemm_bf16_portable $LIBS &
p1=$!
gcc -std=c11 -D_GNU_SOURCE -O2 -march=native -fopenmp -Wall -Wextra -Werror -I. \
    -DGEMM_BF16_KC=32 -DGEMM_BF16_RC=32 -DGEMM_BF16_SC=32 -DGEMM_BF16_SERIAL_FLOPS=0 \
    -DGEMM_BF16_RES_L2_BYTES=4096 -DGEMM_BF16_STREAM_BYTES=0 \
    test/test_gemm_bf16.c -o $d/test_gemm_bf16_tiny $LIBS &
p2=$!

run "native build" ./test/bin/test_gemm_bf16
run "sanitized build" ./test/bin/test_gemm_bf16_asan --quick
wait $p1 || { echo "FAILED: portable build"; exit 1; }
wait $p2 || { echo "FAILED: tiny-block build"; exit 1; }
run "portable build (-march=x86-64)" $d/test_gemm_bf16_portable --quick
run "tiny-block build" $d/test_gemm_bf16_tiny --quick

echo "== header compiles warning-free on its own: C11 -Wpedantic, without OpenMP, C++17"
gcc -std=c11 -fopenmp -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I. -x c cpu/gemm_bf16.h
gcc -std=c11 -march=x86-64 -Wall -Wextra -Werror -fsyntax-only -I. -x c cpu/gemm_bf16.h
g++ -std=c++17 -fopenmp -Wall -Wextra -Werror -fsyntax-only -I. -x c++ cpu/gemm_bf16.h
echo ok
