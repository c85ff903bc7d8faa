// Tests for mixed_precision.h: the 16-bit conversions against an independent reference, the
// hardware (array) paths against the scalar ones, the overflow checks, and the loss scaler rule
// by rule plus a randomised comparison with a transliteration of DeepSpeed's update_scale.
//
// usage: test_mixed_precision [--samples N] [--exhaustive]
//   --samples N    random fp32 values per format (default 10M)
//   --exhaustive   also compare the array path with the scalar path on all 2^32 fp32 patterns,
//                  and f32_to_fp16 with the compiler's _Float16 conversion on all of them
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#include <fenv.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "mixed_precision.h"

static long n_checks = 0, n_fail = 0;
#define CHECK(cond, ...) do { \
        n_checks++; \
        if (!(cond)) { \
            if (n_fail++ < 30) { printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } \
        } \
    } while (0)

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_u64(void) {  // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint32_t rng_u32(void) { return (uint32_t)(rng_u64() >> 32); }

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

// ----------------------------------------------------------------------------
// the independent reference: formats described by their fields, values in double precision

typedef struct { const char *name; int ebits, mbits; } Fmt;
static const Fmt BF16 = {"bf16", 8, 7}, FP16 = {"fp16", 5, 10};

static int fmt_bias(Fmt f) { return (1 << (f.ebits - 1)) - 1; }
static int fmt_emin(Fmt f) { return 1 - fmt_bias(f); }  // exponent of the smallest normal
static double fmt_max(Fmt f) {  // largest finite: (2 - 2^-mbits) * 2^emax
    return ldexp(2.0 - ldexp(1.0, -f.mbits), fmt_bias(f));
}
static int fmt_isnan(Fmt f, uint16_t h) {
    uint32_t e = (h >> f.mbits) & ((1u << f.ebits) - 1), m = h & ((1u << f.mbits) - 1);
    return e == (1u << f.ebits) - 1 && m != 0;
}
static uint16_t fmt_quiet_bit(Fmt f) { return (uint16_t)(1u << (f.mbits - 1)); }

// The value of a 16-bit pattern from its fields (NaN for NaN patterns).
static double ref_decode(Fmt f, uint16_t h) {
    int sign = h >> 15;
    int e = (h >> f.mbits) & ((1 << f.ebits) - 1);
    int m = h & ((1 << f.mbits) - 1);
    double v;
    if (e == (1 << f.ebits) - 1) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, fmt_emin(f) - f.mbits);  // subnormal: m * 2^(emin - mbits)
    else v = ldexp(1.0 + ldexp((double)m, -f.mbits), e - fmt_bias(f));
    return sign ? -v : v;
}

// The value f32 -> format must produce for a non-NaN x: the nearest representable number with
// ties to even, found by scaling x to units of its ulp and rounding with rint() (the default
// rounding mode, which this program checks is to-nearest), in double where all of it is exact.
// Overflow: IEEE rounds as if the exponent were unbounded and returns Inf if that exceeds the
// largest finite value.
static double ref_round(Fmt f, double x) {
    double ax = fabs(x);
    if (ax == 0.0 || isinf(ax)) return x;
    int e2; frexp(ax, &e2);  // ax = frac * 2^e2 with frac in [0.5, 1): floor(log2 ax) = e2 - 1
    int E = e2 - 1 < fmt_emin(f) ? fmt_emin(f) : e2 - 1;  // subnormals share emin's ulp
    double ulp = ldexp(1.0, E - f.mbits);
    double v = rint(ax / ulp) * ulp;
    if (v > fmt_max(f)) v = INFINITY;
    return x < 0 ? -v : v;
}

// Check a narrowing result h for input x against the reference. For NaN x the NaN rule:
// sign kept, quiet bit set, leading payload bits kept.
static int ref_narrow_ok(Fmt f, float x, uint16_t h) {
    uint32_t u = u_of(x);
    if (isnan(x)) {
        uint16_t want = (uint16_t)((u >> 16) & 0x8000u) | (uint16_t)(((1u << f.ebits) - 1) << f.mbits) |
                        fmt_quiet_bit(f) | (uint16_t)((u & 0x7FFFFFu) >> (23 - f.mbits));
        return h == want;
    }
    if (fmt_isnan(f, h)) return 0;
    double want = ref_round(f, (double)x);
    return ref_decode(f, h) == want && (h >> 15) == (u >> 31);  // value and sign (for +-0)
}

// Check a widening result y of pattern h.
static int ref_widen_ok(Fmt f, uint16_t h, float y) {
    if (fmt_isnan(f, h)) {
        uint32_t want = ((uint32_t)(h & 0x8000u) << 16) | 0x7F800000u | 0x00400000u |
                        ((uint32_t)(h & ((1u << f.mbits) - 1)) << (23 - f.mbits));
        return u_of(y) == want;
    }
    double v = ref_decode(f, h);
    return (double)y == v && (u_of(y) >> 31) == (uint32_t)(h >> 15);
}

// ----------------------------------------------------------------------------
// conversions: every 16-bit pattern

static void test_all_16bit(Fmt f) {
    int is_bf = f.mbits == 7;
    static uint16_t h[65536], back_s[65536], back_a[65536];
    static float y_s[65536], y_a[65536];
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    for (uint32_t i = 0; i < 65536; i++) y_s[i] = is_bf ? bf16_to_f32(h[i]) : fp16_to_f32(h[i]);
    if (is_bf) bf16_to_f32_array(y_a, h, 65536); else fp16_to_f32_array(y_a, h, 65536);
    for (uint32_t i = 0; i < 65536; i++) back_s[i] = is_bf ? f32_to_bf16(y_s[i]) : f32_to_fp16(y_s[i]);
    if (is_bf) f32_to_bf16_array(back_a, y_a, 65536); else f32_to_fp16_array(back_a, y_a, 65536);
    long bad_widen = 0, bad_arr = 0, bad_trip = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t want_back = fmt_isnan(f, h[i]) ? (uint16_t)(h[i] | fmt_quiet_bit(f)) : h[i];
        bad_widen += !ref_widen_ok(f, h[i], y_s[i]);
        bad_arr += u_of(y_a[i]) != u_of(y_s[i]);
        bad_trip += back_s[i] != want_back || back_a[i] != want_back;
        CHECK(ref_widen_ok(f, h[i], y_s[i]), "%s_to_f32(0x%04x) = 0x%08x, reference %.9g", f.name, h[i], u_of(y_s[i]), ref_decode(f, h[i]));
        CHECK(u_of(y_a[i]) == u_of(y_s[i]), "%s_to_f32_array(0x%04x) = 0x%08x, scalar 0x%08x", f.name, h[i], u_of(y_a[i]), u_of(y_s[i]));
        CHECK(back_s[i] == want_back, "%s round trip (scalar) 0x%04x -> 0x%04x", f.name, h[i], back_s[i]);
        CHECK(back_a[i] == want_back, "%s round trip (array) 0x%04x -> 0x%04x", f.name, h[i], back_a[i]);
        // every widened value is itself exactly representable, so narrowing must also agree
        // with the reference rounding (exercises ref_narrow_ok on exact values)
        CHECK(ref_narrow_ok(f, y_s[i], back_s[i]), "f32_to_%s(%.9g) = 0x%04x", f.name, y_s[i], back_s[i]);
    }
    printf("  %s: all 65536 patterns, widen vs reference %ld bad, array vs scalar %ld bad, round trip %ld bad\n",
           f.name, bad_widen, bad_arr, bad_trip);
#ifdef __FLT16_MAX__
    if (!is_bf) {  // the compiler's own half type, an implementation independent of ours
        long bad = 0;
        for (uint32_t i = 0; i < 65536; i++) {
            _Float16 x; uint16_t b = (uint16_t)i; memcpy(&x, &b, 2);
            float y = (float)x;
            int ok = fmt_isnan(f, b) ? isnan(y) && (u_of(y) >> 31) == (uint32_t)(b >> 15) : u_of(y) == u_of(y_s[i]);
            bad += !ok;
            CHECK(ok, "(float)(_Float16)0x%04x = 0x%08x, fp16_to_f32 0x%08x", b, u_of(y), u_of(y_s[i]));
        }
        printf("  fp16: all 65536 patterns vs (float)_Float16: %ld bad\n", bad);
    }
#endif
}

// ----------------------------------------------------------------------------
// conversions: a large random sample of fp32 values, weighted towards the hard cases

static uint32_t sample_f32(void) {
    uint32_t r = rng_u32(), sign = rng_u32() & 0x80000000u;
    int delta = (int)(rng_u32() % 5) - 2;  // -2..2 fp32 ulps around a boundary
    switch (rng_u32() % 10) {
    case 0: case 1: case 2: case 3:  // any pattern at all (NaNs, Infs, subnormals included)
        return r;
    case 4:  // the fp16-relevant exponents 2^-30 .. 2^18
        return sign | ((97u + rng_u32() % 49u) << 23) | (r & 0x7FFFFFu);
    case 5:  // fp32 subnormals
        return sign | (r & 0x7FFFFFu);
    case 6:  // bf16 ties (the dropped 16 bits are exactly 0x8000) and their neighbours
        return (r & 0xFFFF0000u) + 0x8000u + (uint32_t)delta;
    case 7: {  // fp16 ties: a finite fp16 value plus half its ulp, and neighbours
        uint32_t h = rng_u32() & 0x7FFFu;
        if ((h >> 10) == 0x1Fu) h = 0x7BFFu;  // largest finite: its tie is 65520
        float tie;
        if ((h >> 10) == 0) tie = (float)(2 * h + 1) * 2.98023223876953125e-08f;  // (m + 1/2) * 2^-24
        else tie = f_of(u_of(fp16_to_f32((fp16_t)h)) + 0x1000u);  // half of 2^13 fp32 ulps
        return sign | (u_of(tie) + (uint32_t)delta);
    }
    case 8: {  // named boundaries
        static const float b[] = {65504.0f, 65520.0f, 65536.0f, 6.103515625e-05f /* 2^-14 */,
                                  5.9604644775390625e-08f /* 2^-24 */, 2.98023223876953125e-08f /* 2^-25 */,
                                  FLT_MAX, FLT_MIN, 3.3895313892515355e38f /* bf16 max */, 1.0f, 2.0f};
        return sign | (u_of(b[rng_u32() % (sizeof b / sizeof b[0])]) + (uint32_t)(delta * (int)(1 + rng_u32() % 3)));
    }
    default:  // NaNs with random payloads, signalling and quiet
        return sign | 0x7F800000u | ((r & 0x7FFFFFu) ? (r & 0x7FFFFFu) : 1u);
    }
}

static void test_random_f32(long n) {
    static const uint32_t specials[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,
        0xFF800001u, 0x7FA00000u, 0x7FFFFFFFu, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x7F7FFFFFu,
        0x7F7F8000u, 0x7F7F7FFFu, 0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x47800000u,
        0x38800000u, 0x387FFFFFu, 0x33800000u, 0x33000000u, 0x33000001u, 0x32FFFFFFu, 0x3F808000u,
        0x3F818000u, 0x3F800001u, 0x007F8000u, 0x007FFFFFu, 0x00008000u, 0x00018000u};
    size_t ns = sizeof specials / sizeof specials[0];
    if (n < (long)ns) n = (long)ns;
    float *x = malloc((size_t)n * sizeof *x);
    bf16_t *b_s = malloc((size_t)n * 2), *b_a = malloc((size_t)n * 2);
    fp16_t *h_s = malloc((size_t)n * 2), *h_a = malloc((size_t)n * 2);
    for (size_t i = 0; i < ns; i++) x[i] = f_of(specials[i]);
    for (long i = (long)ns; i < n; i++) x[i] = f_of(sample_f32());
    for (long i = 0; i < n; i++) { b_s[i] = f32_to_bf16(x[i]); h_s[i] = f32_to_fp16(x[i]); }
    f32_to_bf16_array(b_a, x, (size_t)n);
    f32_to_fp16_array(h_a, x, (size_t)n);
    long bad[5] = {0};
    long n_ties = 0, n_sub = 0, n_nan = 0;
    for (long i = 0; i < n; i++) {
        uint32_t u = u_of(x[i]);
        n_nan += isnan(x[i]) != 0;
        n_sub += (u & 0x7F800000u) == 0 && (u & 0x7FFFFFu) != 0;
        n_ties += (u & 0xFFFFu) == 0x8000u || (u & 0x1FFFu) == 0x1000u;
        int ok;
        ok = ref_narrow_ok(BF16, x[i], b_s[i]); bad[0] += !ok;
        CHECK(ok, "f32_to_bf16(0x%08x = %.9g) = 0x%04x, reference %.9g", u, x[i], b_s[i], ref_round(BF16, x[i]));
        ok = ref_narrow_ok(FP16, x[i], h_s[i]); bad[1] += !ok;
        CHECK(ok, "f32_to_fp16(0x%08x = %.9g) = 0x%04x, reference %.9g", u, x[i], h_s[i], ref_round(FP16, x[i]));
        ok = b_a[i] == b_s[i]; bad[2] += !ok;
        CHECK(ok, "f32_to_bf16_array(0x%08x) = 0x%04x, scalar 0x%04x", u, b_a[i], b_s[i]);
        ok = h_a[i] == h_s[i]; bad[3] += !ok;
        CHECK(ok, "f32_to_fp16_array(0x%08x) = 0x%04x, scalar 0x%04x", u, h_a[i], h_s[i]);
#ifdef __FLT16_MAX__
        _Float16 c = (_Float16)x[i]; uint16_t cb; memcpy(&cb, &c, 2);
        ok = isnan(x[i]) ? fmt_isnan(FP16, cb) && (cb >> 15) == (u >> 31) : cb == h_s[i];
        bad[4] += !ok;
        CHECK(ok, "(_Float16)(0x%08x = %.9g) = 0x%04x, f32_to_fp16 0x%04x", u, x[i], cb, h_s[i]);
#endif
    }
    printf("  random fp32 sample of %ld (%ld NaN, %ld fp32 subnormal, %ld exact ties): bad bf16 %ld, fp16 %ld, "
           "bf16 array %ld, fp16 array %ld, fp16 vs _Float16 %ld\n", n, n_nan, n_sub, n_ties, bad[0], bad[1], bad[2], bad[3], bad[4]);
    free(x); free(b_s); free(b_a); free(h_s); free(h_a);
}

// Odd lengths and misaligned pointers: the SIMD kernels' tails, and nothing written past n.
static void test_array_edges(void) {
    enum { MAXN = 100, PAD = 8 };
    float src[MAXN + 4], wide_s[MAXN + 4], wide_a[MAXN + 4 + PAD];
    uint16_t nar_a[MAXN + 4 + PAD], nar_s[MAXN + 4], h16[MAXN + 4];
    for (int i = 0; i < MAXN + 4; i++) { src[i] = f_of(sample_f32()); h16[i] = (uint16_t)rng_u32(); }
    long bad = 0;
    for (int which = 0; which < 4; which++) {
        for (int off = 0; off < 4; off++) {
            for (int n = 0; n <= MAXN; n++) {
                for (int i = 0; i < MAXN + 4 + PAD; i++) { nar_a[i] = 0xABCD; wide_a[i] = -7.0f; }
                int ok = 1;
                switch (which) {
                case 0: f32_to_bf16_array(nar_a + off, src + off, (size_t)n); zc_f32_to_bf16_scalar(nar_s, src + off, (size_t)n); break;
                case 1: f32_to_fp16_array(nar_a + off, src + off, (size_t)n); zc_f32_to_fp16_scalar(nar_s, src + off, (size_t)n); break;
                case 2: bf16_to_f32_array(wide_a + off, h16 + off, (size_t)n); zc_bf16_to_f32_scalar(wide_s, h16 + off, (size_t)n); break;
                case 3: fp16_to_f32_array(wide_a + off, h16 + off, (size_t)n); zc_fp16_to_f32_scalar(wide_s, h16 + off, (size_t)n); break;
                }
                for (int i = 0; i < MAXN + 4 + PAD; i++) {
                    int inside = i >= off && i < off + n;
                    if (which < 2) ok &= inside ? nar_a[i] == nar_s[i - off] : nar_a[i] == 0xABCD;
                    else ok &= inside ? u_of(wide_a[i]) == u_of(wide_s[i - off]) : wide_a[i] == -7.0f;
                }
                bad += !ok;
                CHECK(ok, "array conversion %d, offset %d, n %d: wrong values or wrote outside [0, n)", which, off, n);
            }
        }
    }
    printf("  array tails/alignment: n 0..%d x offsets 0..3 x 4 conversions, %ld bad\n", MAXN, bad);
}

#ifdef __SSE__
#include <xmmintrin.h>
// The header promises results independent of MXCSR's DAZ/FTZ (which a trainer may set for
// speed): convert under DAZ+FTZ and compare with the same conversions in the default mode.
// (Only the conversions run under DAZ: the double-precision reference would itself be broken.)
static void test_daz_ftz(void) {
    const size_t n = 1u << 20;
    float *x = malloc(n * sizeof *x), *w[4];
    uint16_t *h16 = malloc(65536 * 2), *r[4];
    for (int k = 0; k < 4; k++) { w[k] = malloc(65536 * sizeof(float)); r[k] = malloc(n * 2); }
    for (size_t i = 0; i < n; i++) x[i] = f_of(sample_f32());
    for (uint32_t i = 0; i < 65536; i++) h16[i] = (uint16_t)i;
    long bad = 0;
    for (int pass = 0; pass < 2; pass++) {  // pass 0: default mode, pass 1: DAZ + FTZ
        unsigned int csr = _mm_getcsr();
        if (pass) _mm_setcsr(csr | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
        float *wa = malloc(65536 * sizeof(float)), *ws = malloc(65536 * sizeof(float));
        uint16_t *na = malloc(n * 2), *ns = malloc(n * 2);
        for (int fmt = 0; fmt < 2; fmt++) {
            if (fmt == 0) { bf16_to_f32_array(wa, h16, 65536); zc_bf16_to_f32_scalar(ws, h16, 65536);
                            f32_to_bf16_array(na, x, n); zc_f32_to_bf16_scalar(ns, x, n); }
            else          { fp16_to_f32_array(wa, h16, 65536); zc_fp16_to_f32_scalar(ws, h16, 65536);
                            f32_to_fp16_array(na, x, n); zc_f32_to_fp16_scalar(ns, x, n); }
            if (pass == 0) { memcpy(w[2 * fmt], ws, 65536 * sizeof(float)); memcpy(r[2 * fmt], ns, n * 2);
                             memcpy(w[2 * fmt + 1], wa, 65536 * sizeof(float)); memcpy(r[2 * fmt + 1], na, n * 2); }
            else {
                bad += memcmp(w[2 * fmt], ws, 65536 * sizeof(float)) != 0;
                bad += memcmp(w[2 * fmt + 1], wa, 65536 * sizeof(float)) != 0;
                bad += memcmp(r[2 * fmt], ns, n * 2) != 0;
                bad += memcmp(r[2 * fmt + 1], na, n * 2) != 0;
            }
        }
        _mm_setcsr(csr);
        free(wa); free(ws); free(na); free(ns);
    }
    CHECK(bad == 0, "%ld of 8 conversions (scalar/array x bf16/fp16 x widen/narrow) differ under DAZ+FTZ", bad);
    printf("  under MXCSR DAZ+FTZ (65536 widenings, %zu narrowings, scalar and array): %ld of 8 differ\n", n, bad);
    free(x); free(h16);
    for (int k = 0; k < 4; k++) { free(w[k]); free(r[k]); }
}
#endif

// Informational timings on warm buffers of ordinary values (no subnormals, so no fixups):
// the plain loops vs the array functions (SIMD, and OpenMP at this size).
static void bench_arrays(void) {
    const size_t n = (size_t)1 << 22;
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(rng_u32() % 2000001) - 1e6) * 1e-4f;
    double best[8];
    for (int k = 0; k < 8; k++) best[k] = 1e30;
    for (int rep = 0; rep < 4; rep++) {
        for (int k = 0; k < 8; k++) {
            double t = now();
            switch (k) {
            case 0: zc_f32_to_bf16_scalar(h, x, n); break;  case 1: f32_to_bf16_array(h, x, n); break;
            case 2: zc_bf16_to_f32_scalar(y, h, n); break;  case 3: bf16_to_f32_array(y, h, n); break;
            case 4: zc_f32_to_fp16_scalar(h, x, n); break;  case 5: f32_to_fp16_array(h, x, n); break;
            case 6: zc_fp16_to_f32_scalar(y, h, n); break;  case 7: fp16_to_f32_array(y, h, n); break;
            }
            t = now() - t;
            if (t < best[k]) best[k] = t;
        }
    }
    printf("  ns/element over 4M (plain loop / array function): f32->bf16 %.2f / %.2f, bf16->f32 %.2f / %.2f, "
           "f32->fp16 %.2f / %.2f, fp16->f32 %.2f / %.2f\n", best[0] * 1e9 / (double)n, best[1] * 1e9 / (double)n,
           best[2] * 1e9 / (double)n, best[3] * 1e9 / (double)n, best[4] * 1e9 / (double)n, best[5] * 1e9 / (double)n,
           best[6] * 1e9 / (double)n, best[7] * 1e9 / (double)n);
    free(x); free(y); free(h);
}

// All 2^32 fp32 patterns: array (hardware) path == scalar path, and for fp16 also == _Float16.
static void test_exhaustive(void) {
    const uint32_t chunk = 1u << 16;
    long bad_b = 0, bad_h = 0, bad_c = 0;
    double t0 = now();
    #pragma omp parallel reduction(+:bad_b, bad_h, bad_c)
    {
        float *x = malloc(chunk * sizeof *x);
        uint16_t *s = malloc(chunk * 2), *a = malloc(chunk * 2);
        #pragma omp for schedule(dynamic, 16)
        for (long c = 0; c < (long)(0x100000000ull / chunk); c++) {
            for (uint32_t i = 0; i < chunk; i++) x[i] = f_of((uint32_t)c * chunk + i);
            zc_f32_to_bf16_scalar(s, x, chunk);
            f32_to_bf16_array(a, x, chunk);
            if (memcmp(s, a, chunk * 2)) for (uint32_t i = 0; i < chunk; i++) bad_b += s[i] != a[i];
            zc_f32_to_fp16_scalar(s, x, chunk);
            f32_to_fp16_array(a, x, chunk);
            if (memcmp(s, a, chunk * 2)) for (uint32_t i = 0; i < chunk; i++) bad_h += s[i] != a[i];
#ifdef __FLT16_MAX__
            for (uint32_t i = 0; i < chunk; i++) {
                _Float16 h = (_Float16)x[i]; uint16_t hb; memcpy(&hb, &h, 2);
                // NaN payloads are the compiler's business; NaN-ness and sign are not
                bad_c += isnan(x[i]) ? !(fmt_isnan(FP16, hb) && (hb >> 15) == (s[i] >> 15)) : hb != s[i];
            }
#endif
        }
        free(x); free(s); free(a);
    }
    n_checks += 3; n_fail += (bad_b != 0) + (bad_h != 0) + (bad_c != 0);
    printf("  exhaustive, all 2^32 fp32 patterns (%.1f s): bf16 array != scalar %ld, fp16 array != scalar %ld, "
           "fp16 scalar != _Float16 %ld%s\n", now() - t0, bad_b, bad_h, bad_c,
#ifdef __FLT16_MAX__
           ""
#else
           " (no _Float16)"
#endif
    );
}

// ----------------------------------------------------------------------------
// overflow checks

static void test_has_inf_or_nan(void) {
    const size_t n = 3u << 17;  // above ZC_MP_OMP_MIN, not a multiple of anything nice
    float *x = malloc(n * sizeof *x);
    uint16_t *b = malloc(n * 2), *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) x[i] = (float)((double)(rng_u32() % 2000000) - 1e6) * 1e-3f;
    f32_to_bf16_array(b, x, n);
    f32_to_fp16_array(h, x, n);
    CHECK(!has_inf_or_nan_f32(x, n) && !has_inf_or_nan_bf16(b, n) && !has_inf_or_nan_fp16(h, n), "false positive on finite data");
    CHECK(!has_inf_or_nan_f32(x, 0) && !has_inf_or_nan_bf16(b, 0) && !has_inf_or_nan_fp16(h, 0), "false positive on n = 0");
    // largest finite values and subnormals are not overflow
    x[5] = FLT_MAX; x[6] = -FLT_MAX; x[7] = FLT_MIN * 0.5f; b[5] = 0x7F7F; b[6] = 0xFF7F; h[5] = 0x7BFF; h[6] = 0xFBFF; h[7] = 0x0001;
    CHECK(!has_inf_or_nan_f32(x, n) && !has_inf_or_nan_bf16(b, n) && !has_inf_or_nan_fp16(h, n), "false positive on max/subnormal");
    const uint32_t bad32[] = {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFFFFFFFu, 0x7F800001u};
    const uint16_t badb[] = {0x7F80, 0xFF80, 0x7FC0, 0xFFFF, 0x7F81};
    const uint16_t badh[] = {0x7C00, 0xFC00, 0x7E00, 0xFFFF, 0x7C01};
    const size_t pos[] = {0, 1, 15, 16, 17, 1000, n / 2, n - 17, n - 2, n - 1};
    for (size_t k = 0; k < 5; k++) {
        for (size_t p = 0; p < sizeof pos / sizeof pos[0]; p++) {
            size_t i = pos[p];
            float sx = x[i]; uint16_t sb = b[i], sh = h[i];
            x[i] = f_of(bad32[k]); b[i] = badb[k]; h[i] = badh[k];
            CHECK(has_inf_or_nan_f32(x, n), "f32 0x%08x at %zu not found", bad32[k], i);
            CHECK(has_inf_or_nan_bf16(b, n), "bf16 0x%04x at %zu not found", badb[k], i);
            CHECK(has_inf_or_nan_fp16(h, n), "fp16 0x%04x at %zu not found", badh[k], i);
            CHECK(has_inf_or_nan_f32(x + i, 1) && has_inf_or_nan_bf16(b + i, 1) && has_inf_or_nan_fp16(h + i, 1), "n = 1 at %zu", i);
            if (i > 0) CHECK(!has_inf_or_nan_f32(x, i) && !has_inf_or_nan_bf16(b, i) && !has_inf_or_nan_fp16(h, i),
                             "found an element past n (bad one at %zu)", i);
            x[i] = sx; b[i] = sb; h[i] = sh;
        }
    }
    CHECK(zc_isfinite_f32(FLT_MAX) && zc_isfinite_f32(-0.0f) && zc_isfinite_f32(FLT_MIN * 0.25f) &&
          !zc_isfinite_f32(f_of(0x7F800000u)) && !zc_isfinite_f32(f_of(0xFFC00001u)), "zc_isfinite_f32");
    free(x); free(b); free(h);
    printf("  has_inf_or_nan f32/bf16/fp16: ok so far\n");
}

// ----------------------------------------------------------------------------
// sums of arrays: zc_add_array against the scalar expression it must equal bit for bit (the
// scalar conversions are checked against the references above), on random 16-bit patterns of
// every class (NaNs, infinities, subnormals, zeros of both signs) at lengths around the chunk
// and the OpenMP threshold, at unaligned offsets; nothing outside [0, n) is written.

static void test_add_arrays(void) {
    const size_t cap = (3u << 17) + 37;
    uint16_t *d = malloc((cap + 2) * 2), *s = malloc(cap * 2), *want = malloc(cap * 2);
    float *df = malloc((cap + 2) * 4), *sf = malloc(cap * 4), *wantf = malloc(cap * 4);
    char *two_nans = malloc(cap);
    const size_t lens[] = {0, 1, 15, 255, 256, 257, 4099, (1u << 16) - 1, cap};
    const int types[] = {ZC_BF16, ZC_FP16};
    long bad = 0;
    for (int ti = 0; ti < 2; ti++) {
        int t = types[ti];
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            size_t n = lens[li], off = li % 2; // an odd element offset: not 4-byte aligned
            uint16_t *dst = d + off;
            for (size_t i = 0; i < cap + 2; i++) d[i] = (uint16_t)rng_u32();
            for (size_t i = 0; i < n; i++) {
                s[i] = (uint16_t)rng_u32();
                if (i % 7 == 0) s[i] = dst[i] ^ 0x8000u; // x + (-x): signed zeros, inf - inf
                want[i] = dst[i];
                two_nans[i] = zc_load(dst, i, t) != zc_load(dst, i, t) && zc_load(s, i, t) != zc_load(s, i, t);
                zc_store(want, i, zc_load(want, i, t) + zc_load(s, i, t), t);
            }
            uint16_t before = d[0], after = d[off + n];
            zc_add_array(dst, s, n, t);
            // where both addends are NaNs, either payload is right (a compiler may order an add's
            // operands either way, and x86 keeps the first's): any NaN will do there
            for (size_t i = 0; i < n; i++) bad += dst[i] != want[i] && !(two_nans[i] && zc_load(dst, i, t) != zc_load(dst, i, t));
            CHECK(off == 0 || d[0] == before, "zc_add_array(%s) wrote before dst", zc_dtype_names[t]);
            CHECK(d[off + n] == after, "zc_add_array(%s, n %zu) wrote past n", zc_dtype_names[t], n);
        }
    }
    CHECK(bad == 0, "zc_add_array: %ld 16-bit sums differ from the scalar zc_store(zc_load + zc_load)", bad);
    for (size_t i = 0; i < cap; i++) {
        df[i] = f_of(rng_u32()); sf[i] = f_of(rng_u32()); wantf[i] = df[i] + sf[i];
    }
    zc_add_array(df, sf, cap, ZC_F32);
    bad = 0;
    for (size_t i = 0; i < cap; i++) bad += u_of(df[i]) != u_of(wantf[i]) && !(df[i] != df[i] && wantf[i] != wantf[i]);
    CHECK(bad == 0, "zc_add_array(fp32): %ld sums differ", bad);
    free(d); free(s); free(want); free(df); free(sf); free(wantf); free(two_nans);
    printf("  zc_add_array fp32/bf16/fp16: ok so far\n");
}

// ----------------------------------------------------------------------------
// rounding in place: zc_round_array(p, dst16, n, t) against the scalar narrow and widen, on
// random fp32 patterns of every class, at lengths around the block and the OpenMP threshold,
// with and without the 16-bit copy; nothing outside [0, n) is written.

static void test_round_arrays(void) {
    const size_t cap = (3u << 17) + 37;
    float *p = malloc((cap + 1) * 4), *want = malloc(cap * 4);
    uint16_t *h = malloc((cap + 1) * 2), *wanth = malloc(cap * 2);
    const size_t lens[] = {0, 1, 15, 16, 16385, (1u << 16) - 1, 1u << 16, cap};
    const int types[] = {ZC_BF16, ZC_FP16};
    long bad = 0;
    for (int ti = 0; ti < 2; ti++) {
        int t = types[ti];
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            for (int copy = 0; copy < 2; copy++) {
                size_t n = lens[li];
                for (size_t i = 0; i <= cap; i++) { p[i] = f_of(rng_u32()); h[i] = (uint16_t)rng_u32(); }
                for (size_t i = 0; i < n; i++) {
                    zc_store(wanth, i, p[i], t);
                    want[i] = zc_load(wanth, i, t);
                }
                uint32_t p_after = u_of(p[n]);
                uint16_t h_after = h[n], h0 = h[0];
                zc_round_array(p, copy ? h : NULL, n, t);
                for (size_t i = 0; i < n; i++) bad += u_of(p[i]) != u_of(want[i]) || (copy && h[i] != wanth[i]);
                CHECK(u_of(p[n]) == p_after && h[n] == h_after, "zc_round_array(%s, n %zu) wrote past n", zc_dtype_names[t], n);
                CHECK(copy || n == 0 || h[0] == h0, "zc_round_array(%s) wrote a 16-bit copy it was not given", zc_dtype_names[t]);
            }
        }
    }
    CHECK(bad == 0, "zc_round_array: %ld elements differ from the scalar widen(narrow(x))", bad);
    free(p); free(want); free(h); free(wanth);
    printf("  zc_round_array bf16/fp16: ok so far\n");
}

// ----------------------------------------------------------------------------
// loss scaler

static LossScaler make_dyn(int power, int window, int hyst, float min_scale, int skip) {
    LossScaler s;
    int rc = loss_scaler_init(&s, 0.0f, power, window, hyst, min_scale, skip);
    CHECK(rc == 0, "loss_scaler_init(power %d, window %d, hysteresis %d, min %g) failed", power, window, hyst, min_scale);
    return s;
}

static void test_loss_scaler_rules(void) {
    LossScaler s;
    // initial scale: 2^initial_scale_power, full hysteresis, nothing counted
    s = make_dyn(16, 1000, 2, 1.0f, 0);
    CHECK(s.dynamic == 1 && s.scale == 65536.0f && s.hysteresis_left == 2 && s.good_steps == 0 && s.skipped == 0,
          "initial state: scale %g hysteresis_left %d", s.scale, s.hysteresis_left);
    s = make_dyn(32, 1000, 2, 1.0f, 0);
    CHECK(s.scale == 4294967296.0f, "2^32 initial scale: %g", s.scale);

    // hysteresis countdown: the first overflow only uses up hysteresis, the second halves,
    // and hysteresis is not refilled by halving, so the third halves again
    s = make_dyn(16, 1000, 2, 1.0f, 0);
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 65536.0f && s.hysteresis_left == 1, "1st overflow: scale %g hyst %d", s.scale, s.hysteresis_left);
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 32768.0f && s.hysteresis_left == 1, "2nd overflow: scale %g hyst %d", s.scale, s.hysteresis_left);
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 16384.0f && s.hysteresis_left == 1, "3rd overflow: scale %g hyst %d", s.scale, s.hysteresis_left);
    // a good step in between does not refill it either (only a full window does)
    CHECK(loss_scaler_update(&s, 0) == ZC_STEP_APPLY && s.hysteresis_left == 1, "good step refilled hysteresis");
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 8192.0f, "overflow after a good step: scale %g", s.scale);
    CHECK(s.skipped == 4 && s.iter == 5, "skipped %ld iter %ld", s.skipped, s.iter);

    // hysteresis 4: three tolerated overflows, the fourth halves
    s = make_dyn(10, 1000, 4, 1.0f, 0);
    for (int k = 0; k < 3; k++) loss_scaler_update(&s, 1);
    CHECK(s.scale == 1024.0f && s.hysteresis_left == 1, "hysteresis 4 after 3 overflows: scale %g hyst %d", s.scale, s.hysteresis_left);
    loss_scaler_update(&s, 1);
    CHECK(s.scale == 512.0f, "hysteresis 4, 4th overflow: scale %g", s.scale);

    // hysteresis 1: every overflow halves
    s = make_dyn(16, 1000, 1, 1.0f, 0);
    loss_scaler_update(&s, 1);
    CHECK(s.scale == 32768.0f, "hysteresis 1: scale %g", s.scale);

    // min clamp: halving stops at min_scale (max(scale/2, min)), even when min is not a power of 2
    s = make_dyn(3, 1000, 1, 3.0f, 0);  // 8
    loss_scaler_update(&s, 1);
    CHECK(s.scale == 4.0f, "8 -> %g", s.scale);
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 3.0f, "4 -> %g (min 3)", s.scale);
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_ABORT && s.scale == 3.0f, "overflow at min 3 must abort");

    // window doubling from the start: DeepSpeed starts with last_overflow_iter = -1, so the scale
    // doubles on good step window+1, then every window steps
    s = make_dyn(16, 1000, 2, 1.0f, 0);
    int first = -1;
    for (int k = 1; k <= 1001 && first < 0; k++) { loss_scaler_update(&s, 0); if (s.scale != 65536.0f) first = k; }
    CHECK(first == 1001 && s.scale == 131072.0f, "default window: first doubling on good step %d (want 1001), scale %g", first, s.scale);
    for (int k = 0; k < 999; k++) loss_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0f, "doubled before the next full window");
    loss_scaler_update(&s, 0);
    CHECK(s.scale == 262144.0f, "second doubling on good step 2001: scale %g", s.scale);

    // doubling refills hysteresis
    s = make_dyn(16, 5, 2, 1.0f, 0);
    loss_scaler_update(&s, 1);
    CHECK(s.hysteresis_left == 1 && s.scale == 65536.0f, "overflow used hysteresis");
    for (int k = 0; k < 5; k++) loss_scaler_update(&s, 0);
    CHECK(s.hysteresis_left == 1 && s.scale == 65536.0f, "5 good steps after an overflow, window 5: not yet (scale %g)", s.scale);
    loss_scaler_update(&s, 0);
    CHECK(s.hysteresis_left == 2 && s.scale == 131072.0f, "6th good step: doubled and refilled (scale %g hyst %d)", s.scale, s.hysteresis_left);

    // the window counts from the last overflow: 4 good, overflow, then window+1 more are needed
    s = make_dyn(16, 5, 2, 1.0f, 0);
    for (int k = 0; k < 4; k++) loss_scaler_update(&s, 0);
    loss_scaler_update(&s, 1);
    for (int k = 0; k < 5; k++) loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0f && s.good_steps == 5, "counter not reset by the overflow (scale %g, good %ld)", s.scale, s.good_steps);
    loss_scaler_update(&s, 0);
    CHECK(s.scale == 131072.0f, "window after an overflow: scale %g", s.scale);

    // static scale: never changes, overflow steps are skipped, never aborts
    CHECK(loss_scaler_init(&s, 128.0f, 16, 1000, 2, 1.0f, 0) == 0 && !s.dynamic && s.scale == 128.0f, "static init");
    int ok = 1;
    for (int k = 0; k < 5000; k++) ok &= loss_scaler_update(&s, 0) == ZC_STEP_APPLY && s.scale == 128.0f;
    for (int k = 0; k < 50; k++) ok &= loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 128.0f;
    CHECK(ok && s.skipped == 50 && s.iter == 5050, "static scale changed, aborted, or miscounted (skipped %ld)", s.skipped);
    CHECK(loss_scaler_init(&s, 1.0f, 16, 1000, 2, 1.0f, 0) == 0 && loss_scaler_update(&s, 1) == ZC_STEP_SKIP,
          "static scale 1 (== min_scale) must skip, not abort");

    // at the minimum scale: abort (default) vs skip
    s = make_dyn(1, 1000, 1, 1.0f, 0);  // 2
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 1.0f, "2 -> 1");
    LossScaler before = s;
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_ABORT, "overflow at min with abort");
    CHECK(memcmp(&before, &s, sizeof s) == 0, "an aborting update changed the state");
    s = make_dyn(1, 1000, 1, 1.0f, 1);
    loss_scaler_update(&s, 1);
    for (int k = 0; k < 3; k++) CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.scale == 1.0f, "overflow at min with skip");
    CHECK(s.skipped == 4 && s.skipped_at_min == 3, "skipped %ld at min %ld", s.skipped, s.skipped_at_min);
    // the scale can still grow again after skipping at the minimum
    for (int k = 0; k < 1001; k++) loss_scaler_update(&s, 0);
    CHECK(s.scale == 2.0f, "growth after skipping at min: %g", s.scale);
    // at the minimum with hysteresis left: DeepSpeed only raises where it would halve
    s = make_dyn(0, 1000, 2, 1.0f, 0);  // scale 1 == min
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_SKIP && s.hysteresis_left == 1, "at min with hysteresis 2: first overflow skips");
    CHECK(loss_scaler_update(&s, 1) == ZC_STEP_ABORT, "at min with hysteresis used up: abort");

    // consecutive_hysteresis (DeepSpeed option): every good step refills hysteresis
    s = make_dyn(16, 1000, 2, 1.0f, 0);
    s.consecutive_hysteresis = 1;
    loss_scaler_update(&s, 1);
    loss_scaler_update(&s, 0);
    CHECK(s.hysteresis_left == 2, "consecutive_hysteresis refill");
    loss_scaler_update(&s, 1);
    CHECK(s.scale == 65536.0f && s.hysteresis_left == 1, "consecutive_hysteresis: isolated overflows never halve");

    // the scale stays finite however long it grows
    s = make_dyn(120, 1, 2, 1.0f, 0);
    for (int k = 0; k < 100; k++) loss_scaler_update(&s, 0);
    CHECK(s.scale == 1.7014118346046923e38f, "scale capped at 2^127: %g", s.scale);

    // invalid arguments
    CHECK(loss_scaler_init(&s, 0.0f, 16, 0, 2, 1.0f, 0) == -1, "window 0 accepted");
    CHECK(loss_scaler_init(&s, 0.0f, 16, 1000, 0, 1.0f, 0) == -1, "hysteresis 0 accepted");
    CHECK(loss_scaler_init(&s, 0.0f, 16, 1000, 2, 0.0f, 0) == -1, "min_scale 0 accepted");
    CHECK(loss_scaler_init(&s, 0.0f, 200, 1000, 2, 1.0f, 0) == -1, "initial_scale_power 200 accepted");
    CHECK(loss_scaler_init(&s, -1.0f, 16, 1000, 2, 1.0f, 0) == -1 && s.scale == 1.0f && !s.dynamic, "negative static scale accepted");
    CHECK(strstr(loss_scaler_abort_advice(), "bf16") && strstr(loss_scaler_abort_advice(), "static") &&
          strstr(loss_scaler_abort_advice(), "learning rate"), "abort advice must name bf16, a static scale and a lower LR");
    printf("  loss scaler rules: ok so far\n");
}

// DeepSpeed's DynamicLossScaler.update_scale, transliterated with its own variable names and
// bookkeeping (cur_iter, last_overflow_iter, Python's float = double), as the model to compare to.
typedef struct {
    double cur_scale, min_scale; long cur_iter, last_overflow_iter;
    int scale_window, delayed_shift, cur_hysteresis, consecutive_hysteresis;
} DsModel;
static int ds_update(DsModel *m, int overflow) {  // returns 1 where DeepSpeed raises
    if (overflow) {
        if (m->delayed_shift == 1 || m->cur_hysteresis == 1) {
            if (m->cur_scale == m->min_scale) return 1;
            m->cur_scale = fmax(m->cur_scale / 2.0, m->min_scale);
        } else {
            m->cur_hysteresis -= 1;
        }
        m->last_overflow_iter = m->cur_iter;
    } else {
        if (m->consecutive_hysteresis) m->cur_hysteresis = m->delayed_shift;
        long stable_interval = (m->cur_iter - m->last_overflow_iter) - 1;
        if (stable_interval > 0 && stable_interval % m->scale_window == 0) {
            if (!m->consecutive_hysteresis) m->cur_hysteresis = m->delayed_shift;
            m->cur_scale *= 2.0;
        }
    }
    m->cur_iter += 1;
    return 0;
}

static void test_loss_scaler_vs_deepspeed(void) {
    long steps = 0, runs = 0, aborts = 0, halvings = 0, doublings = 0;
    for (int run = 0; run < 400; run++) {
        int window = 1 + (int)(rng_u32() % 8), hyst = 1 + (int)(rng_u32() % 4), power = (int)(rng_u32() % 12);
        float min_scale = (rng_u32() % 3 == 0) ? 3.0f : (rng_u32() % 2 ? 1.0f : 0.25f);
        int consec = rng_u32() % 4 == 0;
        double p_overflow = 0.02 + 0.5 * (double)(rng_u32() % 1000) / 1000.0;
        LossScaler s = make_dyn(power, window, hyst, min_scale, 0);
        s.consecutive_hysteresis = consec;
        DsModel m = {ldexp(1.0, power), min_scale, 0, -1, window, hyst, hyst, consec};
        runs++;
        for (int k = 0; k < 5000; k++) {
            int of = (double)(rng_u32() % 1000000) / 1e6 < p_overflow;
            double prev = m.cur_scale;
            int raised = ds_update(&m, of);
            int r = loss_scaler_update(&s, of);
            steps++;
            int ok = raised ? r == ZC_STEP_ABORT : (r == (of ? ZC_STEP_SKIP : ZC_STEP_APPLY) &&
                     (double)s.scale == m.cur_scale && s.hysteresis_left == m.cur_hysteresis && s.iter == m.cur_iter);
            CHECK(ok, "vs DeepSpeed: run %d step %d overflow %d: ours %d scale %g hyst %d, DeepSpeed raised %d scale %g hyst %d",
                  run, k, of, r, s.scale, s.hysteresis_left, raised, m.cur_scale, m.cur_hysteresis);
            if (!ok || raised) { aborts += raised; break; }
            halvings += m.cur_scale < prev; doublings += m.cur_scale > prev;
            if (m.cur_scale > 1e30) break;  // stay far from float's range
        }
    }
    printf("  loss scaler vs DeepSpeed model: %ld runs, %ld steps (%ld halvings, %ld doublings, %ld aborts)\n",
           runs, steps, halvings, doublings, aborts);
}

int main(int argc, char **argv) {
    long samples = 10 * 1000 * 1000;
    int exhaustive = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--samples") && i + 1 < argc) samples = atol(argv[++i]);
        else if (!strcmp(argv[i], "--exhaustive")) exhaustive = 1;
        else { fprintf(stderr, "usage: %s [--samples N] [--exhaustive]\n", argv[0]); return 2; }
    }
    if (fegetround() != FE_TONEAREST) { printf("FAIL: rounding mode is not to-nearest\n"); return 1; }
    printf("mixed_precision.h, array path: %s, _Float16 cross-check: %s\n", zc_mp_simd_path(),
#ifdef __FLT16_MAX__
           "yes"
#else
           "no"
#endif
    );
    double t0 = now();
    test_all_16bit(BF16);
    test_all_16bit(FP16);
    test_random_f32(samples);
    test_array_edges();
#ifdef __SSE__
    test_daz_ftz();
#endif
    test_has_inf_or_nan();
    test_add_arrays();
    test_round_arrays();
    test_loss_scaler_rules();
    test_loss_scaler_vs_deepspeed();
    if (exhaustive) test_exhaustive();
#ifdef __SANITIZE_ADDRESS__  // timings of a sanitized build mean nothing
    (void)bench_arrays;
#else
    bench_arrays();
#endif
    printf("%ld checks, %ld failed, %.1f s\n", n_checks, n_fail, now() - t0);
    return n_fail ? 1 : 0;
}
