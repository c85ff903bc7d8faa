#!/usr/bin/env bash
# The GPU trainer's column sums (gpu/colsum.cuh: matmul bias gradients, the LayerNorm backward's
# dinp, dw and db) and its gradient norm's kernels (gpu/kernels.cuh: sumsq + sum_partials) on the
# CUDA emulator, in bf16, fp16 and fp32, against an fp64 numpy reference written from their
# contracts (test/colsum_check.py): within one floatX rounding plus the fp32 sum's bound (the
# norm: 1e-12 relative). Shapes with partial tiles, C not a multiple of a slab, N not a multiple
# of the row range, one row, unaligned pointers and C % VEC != 0 (the V = 1 kernels), grids for
# 1 to 132 SMs; norms over lengths with short last chunks and a full grid. Also (gpu_colsum_emu
# itself): a second call from the same state gives the same bits, an unaligned copy gives the
# aligned norm's bits, and the scratch column_scratch_floats sizes is enough for every grid.
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh; new_scratch gpu_colsum
PY=${PYTHON:-/usr/bin/python3}
fails=0
for p in bf16 fp16 fp32; do
  make -s -j2 test/bin/gpu_colsum_emu_$p || { echo "FAIL: build $p"; exit 1; }
  if ! test/bin/gpu_colsum_emu_$p "$d/$p.bin"; then echo "FAIL $p: gpu_colsum_emu"; fails=1; continue; fi
  out=$($PY test/colsum_check.py "$d/$p.bin"); rc=$?
  echo "$out" | sed "s/^/$p: /"
  if [ $rc -eq 0 ]; then echo "ok   $p: column sums and norms against numpy"; else echo "FAIL $p: against numpy"; fails=1; fi
done
[ $fails = 0 ]
