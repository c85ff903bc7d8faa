#!/usr/bin/env bash
# The CPU optimizer engine (core/optimizer_engine.h) gives the element update's bits
# (optimizer.h) on each of its paths: the AVX-512 AdamW path (this machine's -march=native build;
# non-temporal stores on the large case; 1 and 2 threads) and the OpenMP simd loops (the same
# test compiled with OPT_ENGINE_GENERIC; 2 threads): every optimizer, gradient type, decay, length, offset,
# and the special values (test/test_optimizer_engine.c).
set -uo pipefail
cd "$(dirname "$0")/.."
make -s test/bin/test_optimizer_engine test/bin/test_optimizer_engine_generic || exit 1
fails=0
for run in "test/bin/test_optimizer_engine 1" "test/bin/test_optimizer_engine 2" "test/bin/test_optimizer_engine_generic 2"; do
  set -- $run
  echo "== $1, $2 thread(s)"
  OMP_NUM_THREADS=$2 $1 | tail -12 || fails=$((fails + 1))
done
[ $fails = 0 ] && echo PASS || { echo "FAIL ($fails runs)"; exit 1; }
