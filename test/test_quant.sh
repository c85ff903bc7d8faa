#!/usr/bin/env bash
# ZeRO++'s number format (core/quant.h: block-wise symmetric int8 / int4 quantization, the scales
# sent with the blocks) against numpy written again from the contract (test/quant_check.py):
# the message (scales and packed codes), the dequantized values in fp32, bf16 and fp16 and the
# fp32 sums of qgZ equal numpy's byte for byte, for block sizes 2048, 64 and 7 (blocks split
# across int4 bytes, a short last block), on the edge cases (zero blocks, rint's ties, subnormals,
# Inf and NaN blocks, the largest floats) and on 2^20 elements (the OpenMP path); every finite
# element's error is within the contract's bound, half a step. Each case runs on both host paths,
# the SIMD one (AVX-512 where compiled in; its name printed below) and the scalar one.
set -uo pipefail
cd "$(dirname "$0")/.."
make -s test/bin/quant_cli test/bin/quant_cli_asan || exit 1
. test/lib.sh; new_scratch quant
fails=0
$PYTHON test/quant_check.py test/bin/quant_cli "$d" || fails=1
echo "== the same under AddressSanitizer + UBSan"
$PYTHON test/quant_check.py test/bin/quant_cli_asan "$d" > "$d/asan.txt" 2>&1 && echo "ok   $(grep -c '^ok' "$d/asan.txt") cases" ||
  { cat "$d/asan.txt"; fails=1; }
[ $fails = 0 ]
