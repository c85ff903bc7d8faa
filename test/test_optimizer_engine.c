// The CPU optimizer engine (core/optimizer_engine.h) against optimizer.h's element update, bit for
// bit: every optimizer, gradient type (fp32 with and without the fp32 copy, bf16, fp16), decay on
// and off, lengths around the vector width and the thread split, start offsets that leave the
// arrays unaligned (and m misaligned against p), an update large enough for the non-temporal
// stores, AdamW with and without bias correction, and values that exercise every rounding rule:
// NaNs with payloads, infinities, fp32 subnormals, 16-bit ties, values past fp16's range, every
// 16-bit gradient pattern.
// The reference is the scalar element update and mixed_precision.h's scalar narrowing, element
// by element; the engine is whatever path this build compiles (test_optimizer_engine.sh runs the
// AVX-512 path and the OpenMP simd loops).
//   test/bin/test_optimizer_engine        prints the path, one line per failure; exit 0 when all agree
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/optimizer_engine.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 16); }
static float frand(float scale) { return scale * ((float)(next32() % 2000001) / 1000000.0f - 1.0f); }
static float special(uint32_t r, float normal) {
    static const uint32_t bits[] = {0x7FC00001u, 0xFFA00123u, 0x7F800000u, 0xFF800000u, 0x00000007u, 0x80400000u,
                                    0x3F808000u, 0x3F818000u, 0x477FF000u, 0xC77FF000u, 0x47800000u, 0x387FC000u,
                                    0x33000001u, 0x00000000u, 0x80000000u, 0x7F7FFFFFu};
    if (r % 23 == 0) { float f; memcpy(&f, &bits[(r / 23) % 16], 4); return f; }
    return normal;
}

static void reference(const OptStep *s, float *p, float *m, float *v, const void *g, void *p16, size_t n, int dtype, int decay) {
    for (size_t i = 0; i < n; i++) {
        optimizer_element(s, &p[i], m ? &m[i] : NULL, v ? &v[i] : NULL, zc_load(g, i, dtype), decay);
        if (p16 && dtype == ZC_F32) ((float *)p16)[i] = p[i];
        else if (p16) zc_store(p16, i, p[i], dtype);
    }
}

// Equal bits, or both NaN: where two NaNs meet in one operation, which payload survives depends on
// the operand order the compiler picks for a commutative sum or product (x86 keeps the first
// source's), which C leaves open and the engine's loops never promised; every other bit must agree.
static int same32(const float *x, const float *y, size_t n, size_t *at) {
    for (size_t i = 0; i < n; i++) {
        uint32_t a, b; memcpy(&a, &x[i], 4); memcpy(&b, &y[i], 4);
        if (a != b && !((a & 0x7FFFFFFFu) > 0x7F800000u && (b & 0x7FFFFFFFu) > 0x7F800000u)) { *at = i; return 0; }
    }
    return 1;
}
static int same16(const uint16_t *x, const uint16_t *y, size_t n, int dtype, size_t *at) {
    uint16_t inf = dtype == ZC_BF16 ? 0x7F80u : 0x7C00u;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i] && !((x[i] & 0x7FFFu) > inf && (y[i] & 0x7FFFu) > inf)) { *at = i; return 0; }
    return 1;
}

static int fails = 0;
static void one(int kind, int dtype, int copy, int decay, size_t n, size_t off, size_t moff) {
    size_t es = zc_dtype_size(dtype), cap = n + 64;
    float *a[2][3];
    void *g = malloc(cap * es), *h[2] = {malloc(cap * es), malloc(cap * es)};
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++) a[k][j] = (float *)aligned_alloc(64, cap * 4);
    for (size_t i = 0; i < cap; i++) {
        uint32_t r = next32();
        a[0][0][i] = special(r, frand(0.1f) * (r % 7 == 0 ? 1e5f : 1.0f));
        a[0][1][i] = special(next32(), frand(1e-3f));
        a[0][2][i] = (r % 31 == 0) ? special(next32(), 1e-6f) : 1e-6f * (float)(next32() % 1000);
        if (dtype == ZC_F32) ((float *)g)[i] = special(next32(), frand(1e-2f));
        else ((uint16_t *)g)[i] = (uint16_t)next32(); // every pattern: NaNs, infinities, subnormals
        for (int j = 0; j < 3; j++) a[1][j][i] = a[0][j][i];
    }
    memset(h[0], 0xA5, cap * es); memset(h[1], 0xA5, cap * es);
    OptimizerHyper hy = {kind, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1.0f, off != 3, 10.0f, 0.01f}; // offset 3: AdamW without bias correction
    OptStep s = optimizer_step_begin(&hy, 3e-4f, 3, 2.5f);
    int slices = optimizer_info(kind)->slices;
    void *p16[2] = {dtype != ZC_F32 || copy ? (char *)h[0] + off * es : NULL, dtype != ZC_F32 || copy ? (char *)h[1] + off * es : NULL};
    if (dtype == ZC_F32 && copy) { p16[0] = (char *)h[0] + off * 4; p16[1] = (char *)h[1] + off * 4; }
    float *st[OPT_MAX_SLICES] = {slices > 0 ? a[0][1] + moff : NULL, slices > 1 ? a[0][2] + moff : NULL};
    optimizer_update_host(&s, a[0][0] + off, st, (char *)g + off * es, p16[0], n, dtype, decay);
    reference(&s, a[1][0] + off, slices > 0 ? a[1][1] + moff : NULL, slices > 1 ? a[1][2] + moff : NULL, (char *)g + off * es,
              p16[1], n, dtype, decay);
    const char *what[3] = {"p", "state 0", "state 1"};
    for (int j = 0; j < 3; j++) {
        size_t i = 0;
        if (!same32(a[0][j], a[1][j], cap, &i)) {
            uint32_t x, y; memcpy(&x, &a[0][j][i], 4); memcpy(&y, &a[1][j][i], 4);
            printf("FAIL %s %s%s decay %d n %zu offsets %zu/%zu: %s[%zu] differs: %08x, the element update %08x\n", optimizer_names[kind], zc_dtype_names[dtype],
                   copy ? "+copy" : "", decay, n, off, moff, what[j], i, x, y);
            fails++;
        }
    }
    size_t at = 0;
    if (dtype == ZC_F32 ? !same32((float *)h[0], (float *)h[1], cap, &at) : !same16((uint16_t *)h[0], (uint16_t *)h[1], cap, dtype, &at)) {
        printf("FAIL %s %s%s decay %d n %zu offsets %zu/%zu: the 16-bit (or copied) parameter [%zu] differs\n", optimizer_names[kind],
               zc_dtype_names[dtype], copy ? "+copy" : "", decay, n, off, moff, at);
        fails++;
    }
    for (int k = 0; k < 2; k++) { free(h[k]); for (int j = 0; j < 3; j++) free(a[k][j]); }
    free(g);
}

int main(void) {
#ifdef OPT_ENGINE_AVX512
    printf("path: AVX-512 (AdamW), OpenMP simd loops (the others)\n");
    const size_t big = OPT_ENGINE_NT_MIN / 28 + 37; // non-temporal stores
#else
    printf("path: OpenMP simd loops\n");
    const size_t big = (size_t)1 << 20;
#endif
    const size_t ns[] = {0, 1, 15, 16, 17, 100, 16384 + 37, 70001};
    const size_t offs[][2] = {{0, 0}, {1, 1}, {3, 3}, {8, 8}, {0, 5}, {16, 16}};
    int cases = 0;
    for (int kind = 0; kind < OPT_NUM; kind++)
        for (int dtype = 0; dtype < ZC_NUM_DTYPES; dtype++)
            for (int copy = 0; copy <= (dtype == ZC_F32); copy++)
                for (int decay = 0; decay < 2; decay++) {
                    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
                        for (size_t b = 0; b < sizeof offs / sizeof offs[0]; b++, cases++)
                            one(kind, dtype, copy, decay, ns[a], offs[b][0], offs[b][1]);
                    if (kind == OPT_ADAMW && decay) { one(kind, dtype, copy, decay, big, 0, 0); one(kind, dtype, copy, decay, big, 5, 5); cases += 2; }
                }
    printf("%d cases, %d failures\n", cases, fails);
    return fails != 0;
}
