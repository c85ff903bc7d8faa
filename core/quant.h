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
//   Two host paths, the same bytes: the scalar loops (the portable path: WebAssembly, CUDA C++,
//   any CPU) and, where the compiler targets AVX-512 F+BW+VL (-march=native on Zen 4 or Skylake-X
//   and later), 16 lanes at a time: the same IEEE operations per element (vdivps, vroundps to
//   nearest even, vmulps, vaddps, never fused), amax a maximum (exact in any order), the 16-bit
//   stores the integer rounding of mixed_precision.h (bf16) and VCVTPS2PH (fp16, bit-identical to
//   f32_to_fp16), partial blocks through masked loads and stores. int4 blocks that start at an odd
//   element (odd block sizes) stay scalar. The one difference: where acc[i] and x'_i are both NaN,
//   the sum is a NaN of either's payload (as zc_add_array). zq_quantize_path /
//   zq_dequantize_path take ZQ_SIMD or ZQ_SCALAR (test_quant runs both; ZQ_SIMD falls back to the
//   scalar loops where the SIMD path is not compiled in); zq_simd_path() names what is compiled in.
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

// The SIMD path is host C only: nvcc's front end and the AVX-512 builtins do not mix, and the
// WebAssembly build (the planner page) has no such target. -DZQ_NO_SIMD compiles it out.
#if !defined(__CUDACC__) && !defined(ZQ_NO_SIMD) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__)
#define ZQ_AVX512 1
#include <immintrin.h>
#endif
enum { ZQ_SCALAR, ZQ_SIMD };
static inline const char *zq_simd_path(void) {
#ifdef ZQ_AVX512
    return "avx512";
#else
    return "scalar";
#endif
}

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

// One block (m elements at element `at`, block index b): its scale, then its codes.
static inline void zq_quantize_block_scalar(float *scales, uint8_t *codes, const void *src, size_t b, size_t at,
                                            size_t m, int dtype, int bits, int qmax) {
    float s = zq_block_scale(src, at, m, dtype, qmax);
    scales[b] = s;
    for (size_t i = 0; i < m; i++) zq_put(codes, at + i, zq_code(zc_load(src, at + i, dtype), s, qmax), bits);
}
static inline void zq_dequantize_block_scalar(void *dst, int dtype, float *acc, const uint8_t *codes, float s, size_t at,
                                              size_t m, int bits) {
    for (size_t i = at; i < at + m; i++) {
        float x = (float)zq_get(codes, i, bits) * s;
        if (acc) acc[i] += x;
        else zc_store(dst, i, x, dtype);
    }
}

#ifdef ZQ_AVX512
// Lanes [0, r) of 16 (r <= 16), and the int4 bytes that hold them.
static inline __mmask16 zq_lanes(size_t r) { return (__mmask16)((1u << r) - 1u); }
static inline __mmask16 zq_nibble_bytes(size_t r) { return (__mmask16)((1u << ((r + 1) / 2)) - 1u); }

// 16 elements from element i, widened exactly (bf16: a shift; fp16: VCVTPH2PS); masked-off lanes 0.
// NaN payloads are not quieted here: a NaN only makes its block's scale NaN.
static inline __m512 zq_load16(const void *src, size_t i, int dtype, __mmask16 k) {
    if (dtype == ZC_F32) return _mm512_maskz_loadu_ps(k, (const float *)src + i);
    __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)src + i);
    if (dtype == ZC_BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// Lanes k of x stored at element i of dst (dtype), rounded as zc_store rounds.
static inline void zq_store16(void *dst, size_t i, __m512 x, int dtype, __mmask16 k) {
    if (dtype == ZC_F32) { _mm512_mask_storeu_ps((float *)dst + i, k, x); return; }
    if (dtype == ZC_FP16) {
        _mm256_mask_storeu_epi16((uint16_t *)dst + i, k, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        return;
    }
    // f32_to_bf16 on 16 lanes: u + 0x7FFF + lsb, >> 16; NaN: (u >> 16) | 0x40.
    __m512i u = _mm512_castps_si512(x), top = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                                 _mm512_and_si512(top, _mm512_set1_epi32(1)));
    r = _mm512_srli_epi32(r, 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                            _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_or_epi32(r, nan, top, _mm512_set1_epi32(0x40));
    _mm512_mask_cvtepi32_storeu_epi16((uint16_t *)dst + i, k, r);
}

// int4: 16 codes (int32 lanes) -> 8 bytes, element 2k low nibble; and back, sign-extended.
static inline __m512i zq_pack4(__m512i q) {
    __m512i lo = _mm512_and_si512(q, _mm512_set1_epi64(0xF));
    __m512i hi = _mm512_and_si512(_mm512_srli_epi64(q, 28), _mm512_set1_epi64(0xF0));
    return _mm512_or_si512(lo, hi); // one byte per 64-bit lane
}
static inline __m512i zq_unpack4(__m128i bytes) {
    __m512i v = _mm512_cvtepu8_epi64(bytes);
    __m512i w = _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi64(0xF)),
                                _mm512_slli_epi64(_mm512_and_si512(v, _mm512_set1_epi64(0xF0)), 28));
    return _mm512_sub_epi32(_mm512_xor_si512(w, _mm512_set1_epi32(8)), _mm512_set1_epi32(8));
}

// As zq_quantize_block_scalar; int4 only for an even `at` (whole bytes; a last odd element's
// high nibble is written 0, which the next block's scalar code, if any, then fills).
static inline void zq_quantize_block_avx512(float *scales, uint8_t *codes, const void *src, size_t b, size_t at,
                                            size_t m, int dtype, int bits, int qmax) {
    const __m512i expo = _mm512_set1_epi32(0x7F800000), absm = _mm512_set1_epi32(0x7FFFFFFF);
    __m512 amax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (size_t i = 0; i < m; i += 16) {
        __m512i u = _mm512_castps_si512(zq_load16(src, at + i, dtype, zq_lanes(m - i < 16 ? m - i : 16)));
        bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(u, expo), expo);
        amax = _mm512_max_ps(amax, _mm512_castsi512_ps(_mm512_and_si512(u, absm)));
    }
    float s = bad ? NAN : _mm512_reduce_max_ps(amax) / (float)qmax;
    scales[b] = s;
    const int live = s > 0.0f;
    const __m512 vs = _mm512_set1_ps(s), hi = _mm512_set1_ps((float)qmax), lo = _mm512_set1_ps((float)-qmax);
    for (size_t i = 0; i < m; i += 16) {
        size_t r = m - i < 16 ? m - i : 16;
        __mmask16 k = zq_lanes(r);
        __m512i q = _mm512_setzero_si512();
        if (live) {
            __m512 t = _mm512_div_ps(zq_load16(src, at + i, dtype, k), vs);
            t = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(t, lo), hi));
        }
        if (bits == 8) _mm512_mask_cvtepi32_storeu_epi8(codes + at + i, k, q);
        else _mm512_mask_cvtepi64_storeu_epi8(codes + (at + i) / 2, (__mmask8)zq_nibble_bytes(r), zq_pack4(q));
    }
}

static inline void zq_dequantize_block_avx512(void *dst, int dtype, float *acc, const uint8_t *codes, float s,
                                              size_t at, size_t m, int bits) {
    const __m512 vs = _mm512_set1_ps(s);
    for (size_t i = 0; i < m; i += 16) {
        size_t r = m - i < 16 ? m - i : 16;
        __mmask16 k = zq_lanes(r);
        __m512i q = bits == 8 ? _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(k, codes + at + i))
                              : zq_unpack4(_mm_maskz_loadu_epi8(zq_nibble_bytes(r), codes + (at + i) / 2));
        __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs);
        if (acc) _mm512_mask_storeu_ps(acc + at + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, acc + at + i), x));
        else zq_store16(dst, at + i, x, dtype, k);
    }
}
#endif

// msg (zq_bytes(n, block, bits)) <- src (n elements of dtype), on the path asked for.
static inline void zq_quantize_path(void *msg, const void *src, size_t n, int dtype, size_t block, int bits, int path) {
    const int qmax = zq_qmax(bits);
    const long nb = (long)zq_nblocks(n, block);
    float *scales = zq_scales(msg);
    uint8_t *codes = zq_codes(msg, n, block);
    if (bits == 4 && (n & 1)) codes[n / 2] = 0;
    // Blocks of an odd size share bytes between int4 blocks: whole blocks per thread would race
    // on those nibbles, so 4-bit codes of odd blocks are written on one thread.
    const int threads = !(bits == 4 && (block & 1)) && n >= 65536;
    (void)threads; (void)path;
    ZQ_OMP(omp parallel for schedule(static) if (threads))
    for (long b = 0; b < nb; b++) {
        size_t at = (size_t)b * block, m = at + block <= n ? block : n - at;
#ifdef ZQ_AVX512
        if (path == ZQ_SIMD && (bits == 8 || !(at & 1))) {
            zq_quantize_block_avx512(scales, codes, src, (size_t)b, at, m, dtype, bits, qmax);
            continue;
        }
#endif
        zq_quantize_block_scalar(scales, codes, src, (size_t)b, at, m, dtype, bits, qmax);
    }
}
static inline void zq_quantize(void *msg, const void *src, size_t n, int dtype, size_t block, int bits) {
    zq_quantize_path(msg, src, n, dtype, block, bits, ZQ_SIMD);
}

// dst (n elements of dtype) <- the message, or with acc: acc (fp32) += the message's values.
static inline void zq_dequantize_path(void *dst, int dtype, float *acc, const void *msg, size_t n, size_t block,
                                      int bits, int path) {
    const long nb = (long)zq_nblocks(n, block);
    const float *scales = (const float *)msg;
    const uint8_t *codes = (const uint8_t *)msg + (size_t)nb * sizeof(float);
    (void)path;
    ZQ_OMP(omp parallel for schedule(static) if (n >= 65536))
    for (long b = 0; b < nb; b++) {
        size_t at = (size_t)b * block, m = at + block <= n ? block : n - at;
#ifdef ZQ_AVX512
        if (path == ZQ_SIMD && (bits == 8 || !(at & 1))) {
            zq_dequantize_block_avx512(dst, dtype, acc, codes, scales[b], at, m, bits);
            continue;
        }
#endif
        zq_dequantize_block_scalar(dst, dtype, acc, codes, scales[b], at, m, bits);
    }
}
static inline void zq_dequantize(void *dst, int dtype, const void *msg, size_t n, size_t block, int bits) {
    zq_dequantize_path(dst, dtype, NULL, msg, n, block, bits, ZQ_SIMD);
}
static inline void zq_dequantize_add(float *acc, const void *msg, size_t n, size_t block, int bits) {
    zq_dequantize_path(NULL, ZC_F32, acc, msg, n, block, bits, ZQ_SIMD);
}

#endif // ZERO_QUANT_H
