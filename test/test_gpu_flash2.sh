#!/usr/bin/env bash
# gpu/flash2.cuh's attention kernels on the CUDA emulator, in each build variant that
# scripts/gpu_session.sh times: the default, q8 (-DF2_QWARPS=8), ds (-DF2_DS_STORE: dQ from the
# dK/dV kernel's dS^T tiles) and q8ds. Each variant's forward and backward (the trainer's launch
# code: flash2_forward_kernel, flash2_backward) at small shapes with partial tiles
# (test/gpu_flash2_emu.cu) against an fp64 numpy reference of causal attention and its gradients
# (test/flash2_check.py, relative L2 within 1e-2, every output element written); and every
# variant's outputs bit-identical to the default's (the variants reorder no sum: q8 changes the
# blocks, ds the kernel that forms dS).
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh; new_scratch gpu_flash2
PY=${PYTHON:-/usr/bin/python3}
fails=0
for v in def q8 ds q8ds; do
  make -s test/bin/gpu_flash2_emu_$v || { echo "FAIL: build $v"; exit 1; }
  if ! test/bin/gpu_flash2_emu_$v "$d/$v.bin"; then echo "FAIL $v: gpu_flash2_emu"; fails=1; continue; fi
  out=$($PY test/flash2_check.py "$d/$v.bin"); rc=$?
  echo "$out" | sed "s/^/$v: /"
  if [ $rc -eq 0 ]; then echo "ok   $v: against numpy"; else echo "FAIL $v: against numpy"; fails=1; fi
  if [ $v != def ]; then
    if cmp -s "$d/def.bin" "$d/$v.bin"; then echo "ok   $v: bit-identical to the default build"
    else echo "FAIL $v: outputs differ from the default build's"; fails=1; fi
  fi
done
[ $fails = 0 ]
