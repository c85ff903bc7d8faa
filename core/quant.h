// quant.h: block-wise symmetric quantization, the number format of ZeRO++'s messages (Wang et
// al. 2023): int8 blocks for the quantized weight all-gather (qwZ), int4 or int8 blocks for the
// quantized gradient reduction (qgZ).
//
// Contract
//   A vector of n elements of type dtype (ZC_F32, ZC_BF16, ZC_FP16; 16-bit ones are widened
//   exactly) is cut into blocks of `block` elements, the last one possibly shorter. For `bits`
//   8 or 4, qmax = 2^(bits-1) - 1 (127 or 7), and in fp32 arithmetic, each operation rounded to
//   nearest even as IEEE says:
//     amax_b  = max |x_i| over block b
//     scale_b = amax_b / qmax
//     q_i     = clamp(rint(x_i / scale_b), -qmax, qmax)     (rint: nearest, ties to even)
//   with q_i = 0 for a block whose amax is 0 (scale 0). A block holding an Inf or a NaN gets
//   scale NaN, so that everything it dequantizes to is NaN: an overflow stays visible to the
//   loss scaler (mixed_precision.h) instead of being quantized into finite numbers.
//   Dequantized: x'_i = q_i * scale_b in fp32, rounded to the destination's dtype when that is
//   16-bit. For a finite block, before that rounding, |x'_i - x_i| <= scale_b/2 (1 + 2^-14) +
//   2^-142: half a step, plus the roundings of the quotient and of the product (each at most
//   qmax scale_b 2^-24), plus what a subnormal scale loses (the last term; no other case needs it).
//   The message (what a collective sends): the nblocks fp32 scales, then the codes: int8, one
//   byte each; int4, two per byte, element 2k in the low nibble and 2k+1 in the high one, both
//   two's complement (the last byte's high nibble 0 when n is odd). zq_bytes() is its size;
//   its scales are 4-byte aligned when the message is.
//   zq_quantize / zq_dequantize / zq_dequantize_add (acc[i] += x'_i in fp32: qgZ's sums) loop
//   over blocks on the host, OpenMP-parallel over blocks; the per-block functions are ZC_HD so
//   a GPU kernel computes the same bits.
// No global state; C11 and CUDA C++.
#ifndef ZERO_QUANT_H
#define ZERO_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "mixed_precision.h"

#ifdef _OPENMP
#define ZQ_OMP(x) _Pragma(#x)
#else
#define ZQ_OMP(x)
#endif

static inline int zq_qmax(int bits) { return bits == 4 ? 7 : 127; }
static inline size_t zq_nblocks(size_t n, size_t block) { return (n + block - 1) / block; }
static inline size_t zq_code_bytes(size_t n, int bits) { return bits == 4 ? (n + 1) / 2 : n; }
static inline size_t zq_bytes(size_t n, size_t block, int bits) {
    return zq_nblocks(n, block) * sizeof(float) + zq_code_bytes(n, bits);
}

// The scale of one block of m elements (src at element offset `at`): amax / qmax, NaN if any is
// not finite (a bit test, zc_isfinite_f32: no compiler flag can drop it).
ZC_HD static inline float zq_block_scale(const void *src, size_t at, size_t m, int dtype, int qmax) {
    float amax = 0.0f;
    int bad = 0;
    for (size_t i = 0; i < m; i++) {
        float x = zc_load(src, at + i, dtype);
        bad |= !zc_isfinite_f32(x);
        float a = fabsf(x);
        amax = a > amax ? a : amax;
    }
    return bad ? NAN : amax / (float)qmax;
}

// One element's code in [-qmax, qmax]; 0 where the scale is 0 or NaN.
ZC_HD static inline int zq_code(float x, float scale, int qmax) {
    if (!(scale > 0.0f)) return 0;
    float r = rintf(x / scale);
    return r > (float)qmax ? qmax : r < (float)-qmax ? -qmax : (int)r;
}

ZC_HD static inline void zq_put(uint8_t *codes, size_t i, int q, int bits) {
    if (bits == 8) { codes[i] = (uint8_t)(int8_t)q; return; }
    uint8_t nib = (uint8_t)(q & 0xF), *b = &codes[i / 2];
    *b = (i & 1) ? (uint8_t)((*b & 0x0F) | (nib << 4)) : (uint8_t)((*b & 0xF0) | nib);
}

ZC_HD static inline int zq_get(const uint8_t *codes, size_t i, int bits) {
    if (bits == 8) return (int8_t)codes[i];
    int nib = (codes[i / 2] >> ((i & 1) * 4)) & 0xF;
    return nib >= 8 ? nib - 16 : nib;
}

// The message's parts.
static inline float *zq_scales(void *msg) { return (float *)msg; }
static inline uint8_t *zq_codes(void *msg, size_t n, size_t block) {
    return (uint8_t *)msg + zq_nblocks(n, block) * sizeof(float);
}

// msg (zq_bytes(n, block, bits)) <- src (n elements of dtype).
static inline void zq_quantize(void *msg, const void *src, size_t n, int dtype, size_t block, int bits) {
    const int qmax = zq_qmax(bits);
    const long nb = (long)zq_nblocks(n, block);
    float *scales = zq_scales(msg);
    uint8_t *codes = zq_codes(msg, n, block);
    if (bits == 4 && (n & 1)) codes[n / 2] = 0;
    // Blocks of an odd size share bytes between int4 blocks: whole blocks per thread would race
    // on those nibbles, so 4-bit codes of odd blocks are written on one thread.
    const int threads = !(bits == 4 && (block & 1)) && n >= 65536;
    (void)threads;
    ZQ_OMP(omp parallel for schedule(static) if (threads))
    for (long b = 0; b < nb; b++) {
        size_t at = (size_t)b * block, m = at + block <= n ? block : n - at;
        float s = zq_block_scale(src, at, m, dtype, qmax);
        scales[b] = s;
        for (size_t i = 0; i < m; i++) zq_put(codes, at + i, zq_code(zc_load(src, at + i, dtype), s, qmax), bits);
    }
}

// dst (n elements of dtype) <- the message, or with add: acc (fp32) += the message's values.
static inline void zq_dequantize_into(void *dst, int dtype, float *acc, const void *msg, size_t n, size_t block,
                                      int bits) {
    const long nb = (long)zq_nblocks(n, block);
    const float *scales = (const float *)msg;
    const uint8_t *codes = (const uint8_t *)msg + (size_t)nb * sizeof(float);
    ZQ_OMP(omp parallel for schedule(static) if (n >= 65536))
    for (long b = 0; b < nb; b++) {
        size_t at = (size_t)b * block, m = at + block <= n ? block : n - at;
        float s = scales[b];
        for (size_t i = at; i < at + m; i++) {
            float x = (float)zq_get(codes, i, bits) * s;
            if (acc) acc[i] += x;
            else zc_store(dst, i, x, dtype);
        }
    }
}
static inline void zq_dequantize(void *dst, int dtype, const void *msg, size_t n, size_t block, int bits) {
    zq_dequantize_into(dst, dtype, NULL, msg, n, block, bits);
}
static inline void zq_dequantize_add(float *acc, const void *msg, size_t n, size_t block, int bits) {
    zq_dequantize_into(NULL, ZC_F32, acc, msg, n, block, bits);
}

#endif // ZERO_QUANT_H
