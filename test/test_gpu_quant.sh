#!/usr/bin/env bash
# ZeRO++'s quantization on the GPU (gpu/quant.cuh) against the CPU's (core/quant.h), which
# test_quant checks against numpy: on the CUDA emulator, the device's int8 and int4 messages are
# the host's byte for byte, and its dequantized values (fp32, bf16, fp16), dequantize-and-add sums
# and conversions are the host's bit for bit (test/gpu_quant_emu.cu: blocks 1, 7, 64, 255, 2048,
# partial last blocks, odd lengths, zero blocks, one huge value, Inf/NaN, subnormal scales).
# A real GPU runs the same kernels; nvcc's FMA contraction is ruled out by the explicitly rounded
# intrinsics (the emulator cannot show it).
set -uo pipefail
cd "$(dirname "$0")/.."
make -s -j2 test/bin/gpu_quant_emu || { echo "FAIL: build"; exit 1; }
out=$(test/bin/gpu_quant_emu 2>&1); rc=$?
echo "$out"
if [ $rc -eq 0 ] && grep -q "^gpu_quant: 150 cases, 0 mismatches" <<<"$out"; then echo "ok   gpu/quant.cuh = core/quant.h"
else echo "FAIL gpu/quant.cuh differs from core/quant.h (exit $rc)"; exit 1; fi
