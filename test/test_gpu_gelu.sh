#!/usr/bin/env bash
# gpu/kernels.cuh's GELU forward on the CUDA emulator, the default build and -DGPU_GELU_FAST (the
# variant scripts/gpu_session.sh times): every finite bf16 input in [-16, 16] and the extremes
# (test/gpu_gelu_emu.cu; the packed and scalar kernels agree bit for bit) against fp64 GELU from
# its formula (test/gelu_check.py: within one bf16 ulp plus the fp32 tanh's error), and the
# variant's outputs equal to the default's or one ulp away. (On the emulator __expf is expf, so
# the variant differs only on a GPU, by the SFU's approximation; the GPU checks compare it with
# the CPU trainer.)
set -uo pipefail
cd "$(dirname "$0")/.."
. test/lib.sh; new_scratch gpu_gelu
PY=${PYTHON:-/usr/bin/python3}
make -s test/bin/gpu_gelu_emu_def test/bin/gpu_gelu_emu_fast || { echo "FAIL: build"; exit 1; }
fails=0
test/bin/gpu_gelu_emu_def "$d/def.bin" && test/bin/gpu_gelu_emu_fast "$d/fast.bin" || { echo "FAIL: gpu_gelu_emu"; exit 1; }
if $PY test/gelu_check.py "$d/def.bin"; then echo "ok   default: against fp64"; else echo "FAIL default: against fp64"; fails=1; fi
if $PY test/gelu_check.py "$d/fast.bin" "$d/def.bin"; then echo "ok   GPU_GELU_FAST: against fp64 and the default"
else echo "FAIL GPU_GELU_FAST: against fp64 and the default"; fails=1; fi
[ $fails = 0 ]
