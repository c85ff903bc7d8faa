/*
mixed_precision.h: 16-bit number formats and the fp16 loss scaler.
Shared by train_gpt_cpu.c (C11) and train_gpt.cu (CUDA C++); stb-style, no global state,
everything static inline.

Contract
- bf16_t and fp16_t are uint16_t bit patterns, so this header is plain C and the types never
  collide with CUDA's __nv_bfloat16 / __half. bf16: 1 sign, 8 exponent, 7 mantissa bits (fp32's
  range). fp16: 1, 5, 10 (largest finite 65504, smallest subnormal 2^-24).
- Scalar conversions (host and device, marked ZC_HD):
    float  bf16_to_f32(bf16_t)    bf16_t f32_to_bf16(float)
    float  fp16_to_f32(fp16_t)    fp16_t f32_to_fp16(float)
  Narrowing rounds to nearest, ties to even, from the exact fp32 value (fp32 subnormals included,
  fp16 subnormals produced exactly); values beyond the largest finite after rounding become
  +-Inf; signed zeros keep their sign. Widening is exact.
  NaN rule, the same for every conversion and every path: a NaN stays a NaN of the same sign,
  with the quiet bit set and the payload's leading bits kept (those that fit). So for a 16-bit
  pattern h: narrow(widen(h)) == h for every non-NaN h, and == h | quiet-bit for NaN h.
  This matches what the x86 instructions do (VCVTNEPS2BF16, VCVTPS2PH, VCVTPH2PS).
- Array conversions (host only): f32_to_bf16_array, bf16_to_f32_array, f32_to_fp16_array,
  fp16_to_f32_array (dst, src, n). Bit-identical to the scalar functions for every input (the
  test checks all 2^32 fp32 patterns). They use AVX512-BF16 / F16C when compiled with them
  (-march=native), are OpenMP-parallel above ZC_MP_OMP_MIN elements, and dst/src must not overlap.
  zc_mp_simd_path() names the path compiled in.
- zc_round_array(p, dst16, n, t): p rounded to t (16-bit) in place, p[i] = widen(narrow(p[i])),
  and the 16-bit values also stored in dst16 unless it is NULL; parallel as the conversions.
- zc_add_array(dst, src, n, t): dst += src elementwise in type t (16-bit: widened, added in fp32,
  rounded), bit-identical to the scalar zc_store(dst, i, zc_load(dst, i, t) + zc_load(src, i, t), t)
  but where both addends are NaNs (a NaN then, of either's payload; the test checks it);
  OpenMP-parallel as the conversions.
- Overflow detection (host only): has_inf_or_nan_f32/_bf16/_fp16(x, n) -> 1 if any element is
  Inf or NaN. zc_isfinite_f32 (ZC_HD) for one value. Bit tests, so -ffast-math cannot remove them.
- The precision enum ZC_F32 / ZC_BF16 / ZC_FP16 (names zc_dtype_names: "fp32", "bf16",
  "fp16"): a run's --precision and the element type of its parameters and gradients, one enum.
- LossScaler: DeepSpeed's DynamicLossScaler as a small state machine; see the comment above
  loss_scaler_update for every rule. Host only.
- ZC_HD expands to __host__ __device__ under nvcc and to nothing in C; other headers may define
  it identically (it is guarded).
- The results do not depend on MXCSR (DAZ/FTZ) or the FP environment (the test checks under
  DAZ+FTZ): the scalar paths are integer arithmetic plus one exact int -> float conversion, and
  the instructions used ignore MXCSR, VCVTNEPS2BF16's built-in flush of fp32 subnormal inputs
  being fixed up. On the device the same integer code runs (no CUDA intrinsics), so the GPU
  trainer's 16-bit values are bit-identical to the CPU oracle's.
*/
#ifndef ZC_MIXED_PRECISION_H
#define ZC_MIXED_PRECISION_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

#ifndef ZC_HD
#ifdef __CUDACC__
#define ZC_HD __host__ __device__
#else
#define ZC_HD
#endif
#endif

// The SIMD paths are for the CPU trainer only: nvcc's front end and immintrin.h's AVX-512
// builtins do not mix, and the .cu trainer converts on the GPU anyway.
#if !defined(__CUDACC__) && defined(__AVX512F__) && defined(__AVX512BF16__)
#define ZC_MP_AVX512BF16 1
#endif
#if !defined(__CUDACC__) && defined(__AVX__) && defined(__F16C__)
#define ZC_MP_F16C 1
#endif
#if defined(ZC_MP_AVX512BF16) || defined(ZC_MP_F16C)
#include <immintrin.h>
#endif

// Below this many elements an array conversion or check stays on the calling thread: forking
// a team costs a few microseconds, about what one core needs for ~64K elements.
#ifndef ZC_MP_OMP_MIN
#define ZC_MP_OMP_MIN (1 << 16)
#endif
#define ZC_MP_BLOCK ((size_t)1 << 14)  // elements per OpenMP work item

typedef uint16_t bf16_t;
typedef uint16_t fp16_t;

// ----------------------------------------------------------------------------
// bit casts, valid in C, C++ and device code (memcpy is the only portable pun in C++)

ZC_HD static inline uint32_t zc_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u; memcpy(&u, &f, sizeof u); return u;
#endif
}
ZC_HD static inline float zc_f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f; memcpy(&f, &u, sizeof f); return f;
#endif
}

ZC_HD static inline int zc_isfinite_f32(float f) {
    return (zc_f32_bits(f) & 0x7F800000u) != 0x7F800000u;
}

// ----------------------------------------------------------------------------
// scalar conversions. The same code runs on host and device so the GPU trainer's rounding is
// bit-identical to the CPU oracle's (CUDA's intrinsics canonicalise NaNs differently).

ZC_HD static inline float bf16_to_f32(bf16_t h) {
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) u |= 0x00400000u;  // NaN: quiet it (the NaN rule)
    return zc_f32_from_bits(u);
}

ZC_HD static inline bf16_t f32_to_bf16(float f) {
    uint32_t u = zc_f32_bits(f);
    // NaN: truncating could leave a zero mantissa (= Inf), so keep the top payload bits and
    // set the quiet bit, which also guarantees a nonzero mantissa.
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (bf16_t)((u >> 16) | 0x0040u);
    // Round to nearest even on the integer: add just under half an ulp (0x7FFF) plus the lsb
    // of the kept part, so an exact tie rounds up only when that lsb is odd. A carry out of the
    // mantissa bumps the exponent, which is exactly right, including subnormal -> normal and
    // largest finite -> Inf. bf16 shares fp32's exponent, so subnormals need no special case.
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

// The fp16 functions compute every case and select at the end rather than branching: no
// divergence on the GPU, and gcc vectorises the host loop of f32_to_fp16 (zc_f32_to_fp16_scalar).
ZC_HD static inline float fp16_to_f32(fp16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    // normal: rebias the exponent 15 -> 127 by adding 112 << 23 to exponent and mantissa
    uint32_t normal = ((uint32_t)(h & 0x7FFFu) << 13) + 0x38000000u;
    // Inf, or NaN (quieted per the NaN rule)
    uint32_t special = 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u);
    // zero or subnormal: the value is m * 2^-24. (float)m is exact (m < 2^10) and dividing it
    // by 2^24 is subtracting 24 from its exponent field, which stays normal: nothing rounds and
    // FTZ/DAZ cannot apply. (gcc will not vectorise this loop anyway: with -ftrapping-math it
    // will not if-convert the int -> float conversion. F16C does the host arrays.)
    uint32_t sub = m ? zc_f32_bits((float)m) - (24u << 23) : 0u;
    return zc_f32_from_bits(sign | (e == 0x1Fu ? special : e == 0 ? sub : normal));
}

ZC_HD static inline fp16_t f32_to_fp16(float f) {
    uint32_t u = zc_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    // |f| >= 2^-14, a normal fp16: rebias the exponent 127 -> 15 (subtract 112 << 23; wraps
    // harmlessly where this case is not selected) and round to nearest even as in f32_to_bf16,
    // dropping 13 bits. A carry into the exponent is right, up to and including 65520 -> Inf.
    uint32_t r = a - 0x38000000u;
    uint32_t normal = (r + 0x0FFFu + ((r >> 13) & 1u)) >> 13;
    // |f| < 2^-14, an fp16 subnormal or zero: |f| = m * 2^(e-150) with the implicit bit in m,
    // which in units of the fp16 subnormal ulp 2^-24 is m * 2^(e-126): m shifted right by 126-e,
    // rounded to nearest even the same way. The shift is >= 14 here; past 31 everything rounds
    // to 0 (|f| < 2^-25, fp32 subnormals included), so clamp it to 31 to stay defined.
    // A result of 0x400 is the smallest normal, which is the right encoding too.
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x007FFFFFu) | 0x00800000u;
    uint32_t shift = (e >= 95u && e <= 112u) ? 126u - e : 31u;  // 14..31
    uint32_t sub = (m + (1u << (shift - 1u)) - 1u + ((m >> shift) & 1u)) >> shift;
    uint32_t h = a < 0x38800000u ? sub : normal;
    h = a >= 0x477FF000u ? 0x7C00u : h;  // |f| >= 65520 = 65504 + half an ulp: Inf (also Inf)
    h = a > 0x7F800000u ? (0x7E00u | ((a >> 13) & 0x01FFu)) : h;  // NaN: quiet, top payload kept
    return (fp16_t)(sign | h);
}

// ----------------------------------------------------------------------------
// array conversions and overflow checks (host)

static inline const char *zc_mp_simd_path(void) {
#if defined(ZC_MP_AVX512BF16) && defined(ZC_MP_F16C)
    return "avx512-bf16 + f16c";
#elif defined(ZC_MP_AVX512BF16)
    return "avx512-bf16, scalar fp16";
#elif defined(ZC_MP_F16C)
    return "scalar bf16, f16c";
#else
    return "scalar";
#endif
}

// The plain loops, also the tails of the SIMD kernels and the "scalar path" the tests compare.
static inline void zc_f32_to_bf16_scalar(bf16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}
static inline void zc_bf16_to_f32_scalar(float *dst, const bf16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}
static inline void zc_f32_to_fp16_scalar(fp16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = f32_to_fp16(src[i]);
}
static inline void zc_fp16_to_f32_scalar(float *dst, const fp16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}

// One block of at most ZC_MP_BLOCK elements on one thread.
static inline void zc_f32_to_bf16_block(bf16_t *dst, const float *src, size_t n) {
    size_t i = 0;
#ifdef ZC_MP_AVX512BF16
    // VCVTNEPS2BF16 rounds to nearest even and quiets NaNs exactly as f32_to_bf16 does, but it
    // treats fp32 subnormal inputs as zero (always; MXCSR.DAZ is not consulted). Such inputs
    // (|x| < 2^-126) are rare in practice, so detect them per 16 lanes with one compare and
    // redo only those lanes with the scalar code: the result stays bit-identical to the scalar
    // path, at the cost of a branch that is almost never taken.
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i min_normal = _mm512_set1_epi32(0x00800000);
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(src + i);
        __m512i a = _mm512_and_si512(_mm512_castps_si512(x), abs_mask);
        __mmask16 sub = _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(a, a), a, min_normal);
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)_mm512_cvtneps_pbh(x));
        if (sub) {
            for (int j = 0; j < 16; j++)
                if (sub & (1u << j)) dst[i + j] = f32_to_bf16(src[i + j]);
        }
    }
#endif
    zc_f32_to_bf16_scalar(dst + i, src + i, n - i);
}

static inline void zc_bf16_to_f32_block(float *dst, const bf16_t *src, size_t n) {
    size_t i = 0;
#ifdef ZC_MP_AVX512BF16
    // Widening is a shift; the only work is the NaN rule (set the quiet bit on NaN lanes).
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
    const __m512i inf = _mm512_set1_epi32(0x7F800000);
    const __m512i quiet = _mm512_set1_epi32(0x00400000);
    for (; i + 16 <= n; i += 16) {
        __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i))), 16);
        __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf);
        u = _mm512_mask_or_epi32(u, nan, u, quiet);
        _mm512_storeu_si512((void *)(dst + i), u);
    }
#endif
    zc_bf16_to_f32_scalar(dst + i, src + i, n - i);
}

static inline void zc_f32_to_fp16_block(fp16_t *dst, const float *src, size_t n) {
    size_t i = 0;
#ifdef ZC_MP_F16C
    // VCVTPS2PH with an explicit rounding immediate ignores MXCSR.RC, handles subnormals in both
    // directions regardless of DAZ/FTZ, overflows to Inf and quiets NaNs like f32_to_fp16.
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
#endif
    zc_f32_to_fp16_scalar(dst + i, src + i, n - i);
}

static inline void zc_fp16_to_f32_block(float *dst, const fp16_t *src, size_t n) {
    size_t i = 0;
#ifdef ZC_MP_F16C
    for (; i + 8 <= n; i += 8)  // VCVTPH2PS: exact, quiets NaNs like fp16_to_f32
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    zc_fp16_to_f32_scalar(dst + i, src + i, n - i);
}

#ifdef _OPENMP
#define ZC_MP_PRAGMA(x) _Pragma(#x)
#else
#define ZC_MP_PRAGMA(x)
#endif

// Split [0, n) into ZC_MP_BLOCK blocks and run `block` on each, in parallel when n is large.
// Called from inside a parallel region it runs on the calling thread (nesting is off).
#define ZC_MP_FOR_BLOCKS(block, dst, src, n) do { \
        long nb_ = (long)(((n) + ZC_MP_BLOCK - 1) / ZC_MP_BLOCK); \
        ZC_MP_PRAGMA(omp parallel for schedule(static) if ((n) >= ZC_MP_OMP_MIN)) \
        for (long b_ = 0; b_ < nb_; b_++) { \
            size_t i_ = (size_t)b_ * ZC_MP_BLOCK; \
            size_t m_ = (n) - i_ < ZC_MP_BLOCK ? (n) - i_ : ZC_MP_BLOCK; \
            block((dst) + i_, (src) + i_, m_); \
        } \
    } while (0)

static inline void f32_to_bf16_array(bf16_t *dst, const float *src, size_t n) {
    ZC_MP_FOR_BLOCKS(zc_f32_to_bf16_block, dst, src, n);
}
static inline void bf16_to_f32_array(float *dst, const bf16_t *src, size_t n) {
    ZC_MP_FOR_BLOCKS(zc_bf16_to_f32_block, dst, src, n);
}
static inline void f32_to_fp16_array(fp16_t *dst, const float *src, size_t n) {
    ZC_MP_FOR_BLOCKS(zc_f32_to_fp16_block, dst, src, n);
}
static inline void fp16_to_f32_array(float *dst, const fp16_t *src, size_t n) {
    ZC_MP_FOR_BLOCKS(zc_fp16_to_f32_block, dst, src, n);
}

// Overflow checks: an element is Inf or NaN iff its exponent field is all ones. The loops OR a
// flag instead of returning early so the compiler vectorises them; a full pass over the
// gradients is what DeepSpeed does too, and it is memory-bound either way.
static inline int has_inf_or_nan_f32(const float *x, size_t n) {
    int bad = 0;
    ZC_MP_PRAGMA(omp parallel for reduction(|:bad) schedule(static) if (n >= ZC_MP_OMP_MIN))
    for (size_t i = 0; i < n; i++) bad |= (zc_f32_bits(x[i]) & 0x7F800000u) == 0x7F800000u;
    return bad;
}
static inline int has_inf_or_nan_bf16(const bf16_t *x, size_t n) {
    int bad = 0;
    ZC_MP_PRAGMA(omp parallel for reduction(|:bad) schedule(static) if (n >= ZC_MP_OMP_MIN))
    for (size_t i = 0; i < n; i++) bad |= (x[i] & 0x7F80u) == 0x7F80u;
    return bad;
}
static inline int has_inf_or_nan_fp16(const fp16_t *x, size_t n) {
    int bad = 0;
    ZC_MP_PRAGMA(omp parallel for reduction(|:bad) schedule(static) if (n >= ZC_MP_OMP_MIN))
    for (size_t i = 0; i < n; i++) bad |= (x[i] & 0x7C00u) == 0x7C00u;
    return bad;
}

// ----------------------------------------------------------------------------
// The precision of a run, which is also the element type of its model states: the ONE enum for
// both (--precision, the planner, zero.h's buffers, the backends' collectives all use it).
// fp32; bf16 or fp16 mixed precision (16-bit parameters, gradients and activations, fp32 master
// weights).

enum { ZC_F32, ZC_BF16, ZC_FP16, ZC_NUM_DTYPES };
static const char *const zc_dtype_names[ZC_NUM_DTYPES] = {"fp32", "bf16", "fp16"};
ZC_HD static inline size_t zc_dtype_size(int t) { return t == ZC_F32 ? 4 : 2; }
// Element i of an array of type t, as a float; and stored, rounded to nearest even.
ZC_HD static inline float zc_load(const void *p, size_t i, int t) {
    if (t == ZC_F32) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == ZC_BF16 ? bf16_to_f32(h) : fp16_to_f32(h);
}
ZC_HD static inline void zc_store(void *p, size_t i, float x, int t) {
    if (t == ZC_F32) ((float *)p)[i] = x;
    else ((uint16_t *)p)[i] = t == ZC_BF16 ? f32_to_bf16(x) : f32_to_fp16(x);
}
// Whole arrays (host): widen to fp32, narrow from fp32 (a plain copy for fp32).
static inline void zc_widen(float *dst, const void *src, size_t n, int t) {
    if (t == ZC_F32) memcpy(dst, src, n * sizeof(float));
    else if (t == ZC_BF16) bf16_to_f32_array(dst, (const bf16_t *)src, n);
    else fp16_to_f32_array(dst, (const fp16_t *)src, n);
}
static inline void zc_narrow(void *dst, const float *src, size_t n, int t) {
    if (t == ZC_F32) memcpy(dst, src, n * sizeof(float));
    else if (t == ZC_BF16) f32_to_bf16_array((bf16_t *)dst, src, n);
    else f32_to_fp16_array((fp16_t *)dst, src, n);
}

// Rounding in place (host, t 16-bit): p[i] = widen(narrow(p[i])), the value an fp32 tensor has
// once stored in 16 bits, and, when dst16 is not NULL, dst16[i] = narrow(p[i]) too. One
// parallel region over blocks, each block narrowed and widened by its thread through the block
// conversions (calling the array functions there would enter an empty nested region per block:
// a team set up and torn down per 16K elements, ~5,000 a d12 step).
static inline void zc_round_array(float *p, void *dst16, size_t n, int t) {
    long nb = (long)((n + ZC_MP_BLOCK - 1) / ZC_MP_BLOCK);
    ZC_MP_PRAGMA(omp parallel for schedule(static) if (n >= ZC_MP_OMP_MIN))
    for (long b = 0; b < nb; b++) {
        size_t lo = (size_t)b * ZC_MP_BLOCK, len = n - lo < ZC_MP_BLOCK ? n - lo : ZC_MP_BLOCK;
        uint16_t tmp[ZC_MP_BLOCK], *d = dst16 ? (uint16_t *)dst16 + lo : tmp;
        if (t == ZC_BF16) { zc_f32_to_bf16_block(d, p + lo, len); zc_bf16_to_f32_block(p + lo, d, len); }
        else { zc_f32_to_fp16_block(d, p + lo, len); zc_fp16_to_f32_block(p + lo, d, len); }
    }
}

// Sums of arrays (host): dst[i] = zc_store(zc_load(dst, i) + zc_load(src, i)): both widened
// (exactly), added in fp32, rounded back; how 16-bit gradients accumulate and how the CPU
// trainer's 16-bit collectives sum. In blocks through the SIMD conversions above, so a 16-bit
// sum runs at memory speed instead of one element's conversions at a time.
#define ZC_ADD_CHUNK 256
#define ZC_ADD16_BLOCK(name, T, widen, narrow) \
    static inline void name(T *dst, const T *src, size_t n) { \
        float a[ZC_ADD_CHUNK], b[ZC_ADD_CHUNK]; \
        for (size_t i = 0; i < n; i += ZC_ADD_CHUNK) { \
            size_t m = n - i < ZC_ADD_CHUNK ? n - i : ZC_ADD_CHUNK; \
            widen(a, dst + i, m); \
            widen(b, src + i, m); \
            for (size_t j = 0; j < m; j++) a[j] += b[j]; \
            narrow(dst + i, a, m); \
        } \
    }
ZC_ADD16_BLOCK(zc_add_bf16_block, bf16_t, zc_bf16_to_f32_block, zc_f32_to_bf16_block)
ZC_ADD16_BLOCK(zc_add_fp16_block, fp16_t, zc_fp16_to_f32_block, zc_f32_to_fp16_block)
static inline void zc_add_f32_block(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}
static inline void zc_add_array(void *dst, const void *src, size_t n, int t) {
    if (t == ZC_F32) ZC_MP_FOR_BLOCKS(zc_add_f32_block, (float *)dst, (const float *)src, n);
    else if (t == ZC_BF16) ZC_MP_FOR_BLOCKS(zc_add_bf16_block, (bf16_t *)dst, (const bf16_t *)src, n);
    else ZC_MP_FOR_BLOCKS(zc_add_fp16_block, (fp16_t *)dst, (const fp16_t *)src, n);
}

// ----------------------------------------------------------------------------
// fp16 loss scaler (DeepSpeed's DynamicLossScaler, and its static LossScaler)

enum { ZC_STEP_ABORT = -1, ZC_STEP_APPLY = 0, ZC_STEP_SKIP = 1 };

typedef struct {
    float scale;             // current loss scale: multiply the loss by it, divide gradients by it
    float min_scale;         // min_loss_scale (dynamic only)
    int dynamic;             // 0: static scale (loss_scale > 0), never changes
    int window;              // loss_scale_window
    int hysteresis;          // hysteresis (DeepSpeed's delayed_shift)
    int hysteresis_left;     // overflows still tolerated before halving (DeepSpeed's cur_hysteresis)
    int consecutive_hysteresis;  // DeepSpeed option, default 0: refill hysteresis on every good step
    int on_min_scale_skip;   // overflow at the minimum scale: 1 skip the step, 0 abort
    long good_steps;         // overflow-free steps since the last overflow (or since the start)
    long iter;               // update calls so far (DeepSpeed's cur_iter)
    long skipped;            // overflow steps skipped in total
    long skipped_at_min;     // of those, steps skipped at the minimum scale (on_min_scale skip)
} LossScaler;

// static_scale > 0: a static scale (DeepSpeed's loss_scale); 0: dynamic, starting at
// 2^initial_scale_power. DeepSpeed's defaults: 16, window 1000, hysteresis 2, min_scale 1.
// Returns 0, or -1 (and leaves *s a valid static scaler of 1) for out-of-range arguments.
static inline int loss_scaler_init(LossScaler *s, float static_scale, int initial_scale_power,
                                   int window, int hysteresis, float min_scale, int on_min_scale_skip) {
    memset(s, 0, sizeof *s);
    s->scale = 1.0f;
    s->min_scale = 1.0f;
    s->window = window;
    s->hysteresis = s->hysteresis_left = hysteresis;
    s->on_min_scale_skip = on_min_scale_skip != 0;
    if (!(static_scale >= 0.0f) || !isfinite(static_scale)) return -1;
    if (static_scale > 0.0f) { s->scale = static_scale; return 0; }
    if (initial_scale_power < -126 || initial_scale_power > 127 || window < 1 || hysteresis < 1 ||
        !(min_scale > 0.0f) || !isfinite(min_scale)) return -1;
    s->dynamic = 1;
    s->scale = ldexpf(1.0f, initial_scale_power);
    s->min_scale = min_scale;
    // Like DeepSpeed, an initial scale below min_scale is not clamped; its first halving,
    // max(scale / 2, min_scale), lifts it to min_scale.
    return 0;
}

// Feed one step's global overflow flag (inf/NaN in any gradient on any rank, already agreed by
// all ranks) and get what to do with the step. This is DeepSpeed's
// DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py) with
// consecutive_hysteresis as configured (default False), rule by rule:
//
// overflow, dynamic:
//   - hysteresis == 1 or hysteresis_left == 1 (the last tolerated overflow is used up):
//       - scale == min_scale: DeepSpeed raises ("cannot decrease scale anymore"). Here:
//         on_min_scale abort -> return ZC_STEP_ABORT and change nothing (the caller prints
//         loss_scaler_abort_advice() and exits); on_min_scale skip -> the scale stays at the
//         minimum, skipped and skipped_at_min count it, return ZC_STEP_SKIP.
//       - otherwise scale = max(scale / 2, min_scale). hysteresis_left is NOT refilled: it stays
//         at 1, so further overflows keep halving until a full window passes without one.
//   - otherwise hysteresis_left -= 1 and the scale is unchanged (also at the minimum scale:
//     DeepSpeed only raises where it would halve).
//   - in every case the step is skipped (ZC_STEP_SKIP: no parameter update, no optimizer-state
//     or Adam step-counter change, the LR schedule does not advance), skipped += 1, and the
//     good-step counter restarts: good_steps = 0 (DeepSpeed: last_overflow_iter = cur_iter).
// no overflow, dynamic:
//   - consecutive_hysteresis: hysteresis_left = hysteresis on every good step.
//   - if good_steps > 0 and good_steps % window == 0, where good_steps counts the good steps
//     *before* this one since the last overflow (DeepSpeed's stable_interval =
//     cur_iter - last_overflow_iter - 1): scale *= 2 and, without consecutive_hysteresis,
//     hysteresis_left = hysteresis. So with window 1000 the scale doubles on the 1001st
//     consecutive good step, then on the 2001st, ... counted from the last overflow, or from
//     the start (DeepSpeed starts with last_overflow_iter = -1, i.e. as if step -1 overflowed).
//   - good_steps += 1, return ZC_STEP_APPLY.
// static scale (dynamic == 0): the scale never changes; an overflow step is still skipped
//   (ZC_STEP_SKIP, skipped += 1) and a good one applied. It never aborts: the scale is the
//   user's explicit choice, and every skipped step is reported by the caller.
// iter counts every call that does not abort (DeepSpeed's cur_iter += 1).
// One deviation: the scale is a float, so doubling stops at 2^127 instead of reaching Inf
// (DeepSpeed's Python float would go on to 2^1023); no run gets there without fp16 overflow.
static inline int loss_scaler_update(LossScaler *s, int overflow) {
    if (!s->dynamic) {
        s->iter++;
        if (overflow) { s->skipped++; return ZC_STEP_SKIP; }
        return ZC_STEP_APPLY;
    }
    if (overflow) {
        if (s->hysteresis == 1 || s->hysteresis_left <= 1) {
            if (s->scale == s->min_scale) {
                if (!s->on_min_scale_skip) return ZC_STEP_ABORT;
                s->skipped_at_min++;
            } else {
                float next = s->scale * 0.5f;
                s->scale = next > s->min_scale ? next : s->min_scale;
            }
        } else {
            s->hysteresis_left--;
        }
        s->good_steps = 0;
        s->skipped++;
        s->iter++;
        return ZC_STEP_SKIP;
    }
    if (s->consecutive_hysteresis) s->hysteresis_left = s->hysteresis;
    if (s->good_steps > 0 && s->good_steps % s->window == 0) {
        if (!s->consecutive_hysteresis) s->hysteresis_left = s->hysteresis;
        float next = s->scale * 2.0f;
        if (isfinite(next)) s->scale = next;  // stops at 2^127 (see above)
    }
    s->good_steps++;
    s->iter++;
    return ZC_STEP_APPLY;
}

// The message to print (after saying the scale and step) when loss_scaler_update aborts.
static inline const char *loss_scaler_abort_advice(void) {
    return "fp16 gradients overflowed at the minimum loss scale, so the scale cannot be lowered "
           "further and the step cannot be taken. Things to try: train in bf16 instead of fp16 "
           "(it has fp32's range and needs no loss scaling); a static loss scale (loss_scale > 0 "
           "in the fp16 config); a lower learning rate or a longer warmup (overflows at every "
           "scale usually mean the loss is diverging); a smaller min_loss_scale; or "
           "--on-min-scale skip to skip such steps and keep going (each one is reported).";
}

#endif  // ZC_MIXED_PRECISION_H
