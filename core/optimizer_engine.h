// optimizer_engine.h: the CPU optimizer engine: optimizer.h's element updates over arrays in
// host memory, vectorised and multi-threaded (OpenMP), streaming each array once.
//
// Contract
//   optimizer_update_host(step, p, state, g, p16, n, dtype, decay): for i < n,
//     optimizer_element(step, &p[i], &state[0][i], &state[1][i], g[i] (widened from dtype), decay)
//     and, when p16 is not NULL, p16[i] = p[i] rounded to dtype (nearest even): in mixed precision
//     p is the fp32 master weight and p16 the 16-bit parameter; in fp32 runs p is the parameter
//     itself (p16 NULL, g fp32). One pass: each element's g, p and state are read once and
//     written once, the 16-bit parameter written in the same pass (28 bytes per parameter for
//     AdamW in bf16: read 2 + 4 + 8, write 4 + 8 + 2).
//   The arithmetic is optimizer.h's, so the GPU's kernel and this engine produce the same bits
//   wherever neither compiler contracts a product and a sum into one fused operation (the GPU
//   trainer's host code is compiled with -ffp-contract=off; optimizer.h's device path uses
//   explicitly rounded operations): the GPU trainer's offloaded update equals its on-device one.
//   Both trainers use it: the CPU trainer for every update, the GPU trainer for an update
//   offloaded to host memory (zero/store.h).
//   optimizer_reduce_host(step, p, state, g, n, dtype, decay, phase, acc): an optimizer's
//     per-tensor reduction pass (optimizer.h: LAMB's sum p^2, sum u^2) over one run of one tensor,
//     added into acc[0..R). Its bits depend on the elements alone, never on how a caller cut the
//     tensor into runs at block boundaries, nor on threads or alignment: the run is cut into blocks
//     of OPT_REDUCE_BLOCK elements counted from `phase` elements before p (block boundaries where
//     (phase + i) % OPT_REDUCE_BLOCK == 0), each block summed in 8 lanes (element i into lane i % 8
//     of its block) combined in a fixed order, and the block sums added into acc in order. So a
//     caller whose runs are cut only at block boundaries (zero.h: a piece of a streamed update is
//     a multiple of the block) gets the same sums streamed from NVMe or updated in memory.
//   Paths: AdamW, when compiled with AVX-512 (F, BW, VL: the CPU trainer's -march=native on this
//   project's machines), runs opt_engine_adamw_avx512: 16 elements a vector, the threads each
//   taking one contiguous share, the same IEEE operations in the same order as adamw_element
//   (so the same bits: test_optimizer_engine compares it with the element update, every path), the
//   16-bit rounding done on the integers exactly as mixed_precision.h's f32_to_bf16 /
//   VCVTPS2PH. On a large update (OPT_ENGINE_NT_MIN) the arrays it writes are written with
//   non-temporal stores, which do not read the 16-bit parameter's lines before writing them
//   and leave the caches to what comes next. Every other optimizer, and builds without
//   AVX-512 (the GPU trainer's host code: cloned for AVX-512/AVX2 instead), take the OpenMP simd
//   loops. OPT_ENGINE_GENERIC defined before including this header forces the loops (tests).
// Host only (C11 and C++); no global state.
#ifndef OPTIMIZER_ENGINE_H
#define OPTIMIZER_ENGINE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include "mixed_precision.h"
#include "core/optimizer.h"

#ifdef _OPENMP
#define OPT_ENGINE_PRAGMA(x) _Pragma(#x)
#else
#define OPT_ENGINE_PRAGMA(x)
#endif

// One loop per optimizer and gradient type, the kind chosen outside it, so that each vectorises.
// Below OPT_ENGINE_OMP_MIN elements a run stays on the calling thread (forking a team costs
// about what a core needs for that many elements).
#define OPT_ENGINE_OMP_MIN 16384
// Each thread reads the step's constants from its own copy (sc): through the shared *step, which
// stores to p and the state might change for all the compiler knows, the loop re-read them and
// redid lr / bias_correction1 (a division) and the (1 - beta) terms for every vector of elements.
#define OPT_ENGINE_LOOP(ELEMENT, STORE)                                                                           \
    {                                                                                                              \
        OPT_ENGINE_PRAGMA(omp parallel if (n >= OPT_ENGINE_OMP_MIN))                                               \
        {                                                                                                          \
            const OptStep sc = *step;                                                                              \
            OPT_ENGINE_PRAGMA(omp for simd schedule(static))                                                       \
            for (size_t i = 0; i < n; i++) {                                                                       \
                ELEMENT;                                                                                           \
                STORE;                                                                                             \
            }                                                                                                      \
        }                                                                                                          \
    }
#define OPT_ENGINE_KINDS(LOAD, STORE)                                                                              \
    switch (step->kind) {                                                                                          \
    case OPT_LION: OPT_ENGINE_LOOP(lion_element(&sc, &p[i], &s0[i], LOAD, decay), STORE) break;                  \
    case OPT_SGD_MOMENTUM: OPT_ENGINE_LOOP(sgd_element(&sc, &p[i], &s0[i], LOAD, decay), STORE) break;           \
    case OPT_SGD: OPT_ENGINE_LOOP(sgd_element(&sc, &p[i], NULL, LOAD, decay), STORE) break;                       \
    case OPT_LAMB: OPT_ENGINE_LOOP(lamb_element(&sc, &p[i], &s0[i], &s1[i], LOAD, decay), STORE) break;         \
    default: OPT_ENGINE_LOOP(adamw_element(&sc, &p[i], &s0[i], &s1[i], LOAD, decay), STORE) break;               \
    }
// The GPU trainer's host code is compiled for any x86-64 (it runs on whatever CPU hosts the GPU),
// so there the engine is cloned for AVX-512 and AVX2 and picks one at load time; the CPU trainer
// is compiled for its own machine (-march=native) and needs no clones.
#if defined(__CUDACC__) && !defined(CUDA_EMULATOR) && defined(__x86_64__)
#define OPT_ENGINE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OPT_ENGINE_CLONES
#endif
#if !defined(__CUDACC__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    !defined(OPT_ENGINE_GENERIC)
#define OPT_ENGINE_AVX512 1
#include <immintrin.h>
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif
// Bytes an update streams (28 per AdamW element) from which its stores are non-temporal: well
// past the last-level cache, where whatever is written is evicted before it is read again.
#ifndef OPT_ENGINE_NT_MIN
#define OPT_ENGINE_NT_MIN ((size_t)64 << 20)
#endif

// The step's scalars, each computed once in float exactly as adamw_element computes it.
typedef struct { __m512 gs, keep, b1, omb1, b2, omb2, bc2, eps, step; } OptAdamVec;

static inline __attribute__((always_inline)) __m512 opt_engine_load_g(const void *g, size_t i, __mmask16 k, int dtype) {
    if (dtype == ZC_F32) return _mm512_maskz_loadu_ps(k, (const float *)g + i);
    __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)g + i);
    if (dtype == ZC_FP16) return _mm512_cvtph_ps(h); // exact, quiets NaNs as fp16_to_f32
    __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16); // bf16_to_f32
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x00400000)));
}
// p rounded to dtype (16-bit), as f32_to_bf16 / f32_to_fp16.
static inline __attribute__((always_inline)) __m256i opt_engine_narrow(__m512 p, int dtype) {
    if (dtype == ZC_FP16) return _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_castps_si512(p), hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(hi, _mm512_set1_epi32(1)))), 16);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x0040));
    return _mm512_cvtepi32_epi16(r);
}
// Elements [i, i + 16) under mask k (a partial vector at either end). nt: aligned non-temporal
// stores (full vectors only).
static inline __attribute__((always_inline)) void opt_engine_adamw_vec(const OptAdamVec *c, float *p, float *m, float *v,
                                                                       const void *g, void *p16, size_t i, __mmask16 k,
                                                                       int dtype, int decay, int nt) {
    __m512 gv = _mm512_mul_ps(opt_engine_load_g(g, i, k, dtype), c->gs);
    __m512 param = _mm512_maskz_loadu_ps(k, p + i);
    if (decay) param = _mm512_mul_ps(param, c->keep);
    __m512 mt = _mm512_add_ps(_mm512_mul_ps(c->b1, _mm512_maskz_loadu_ps(k, m + i)), _mm512_mul_ps(c->omb1, gv));
    __m512 vt = _mm512_add_ps(_mm512_mul_ps(c->b2, _mm512_maskz_loadu_ps(k, v + i)), _mm512_mul_ps(_mm512_mul_ps(c->omb2, gv), gv));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vt), c->bc2), c->eps);
    param = _mm512_sub_ps(param, _mm512_mul_ps(c->step, _mm512_div_ps(mt, denom)));
    if (nt) {
        _mm512_stream_ps(m + i, mt); _mm512_stream_ps(v + i, vt); _mm512_stream_ps(p + i, param);
        if (p16 && dtype == ZC_F32) _mm512_stream_ps((float *)p16 + i, param);
        else if (p16) _mm256_stream_si256((__m256i *)((uint16_t *)p16 + i), opt_engine_narrow(param, dtype));
    } else {
        _mm512_mask_storeu_ps(m + i, k, mt); _mm512_mask_storeu_ps(v + i, k, vt); _mm512_mask_storeu_ps(p + i, k, param);
        if (p16 && dtype == ZC_F32) _mm512_mask_storeu_ps((float *)p16 + i, k, param);
        else if (p16) _mm256_mask_storeu_epi16((uint16_t *)p16 + i, k, opt_engine_narrow(param, dtype));
    }
}
static inline __mmask16 opt_engine_mask(size_t count) { return (__mmask16)(count >= 16 ? 0xFFFF : (1u << count) - 1u); }
// Elements [lo, hi): partial vectors until p is 64-byte aligned, then whole ones (non-temporal
// when nt and every written array is then aligned too), then the tail.
static inline __attribute__((always_inline)) void opt_engine_adamw_range(const OptAdamVec *c, float *p, float *m, float *v,
                                                                         const void *g, void *p16, size_t lo, size_t hi,
                                                                         int dtype, int decay, int nt) {
    size_t i = lo;
    size_t head = (size_t)((64 - ((uintptr_t)(p + i) & 63)) & 63) / 4;
    if (((uintptr_t)(p + i) & 3) != 0) head = 0; // not even float-aligned: no alignment to reach
    if (head > hi - i) head = hi - i;
    if (head) { opt_engine_adamw_vec(c, p, m, v, g, p16, i, opt_engine_mask(head), dtype, decay, 0); i += head; }
    size_t es = dtype == ZC_F32 ? 4 : 2;
    if (nt && (((uintptr_t)(p + i) | (uintptr_t)(m + i) | (uintptr_t)(v + i)) & 63)) nt = 0;
    if (nt && p16 && ((uintptr_t)((char *)p16 + i * es) & (16 * es - 1))) nt = 0;
    if (nt) {
        for (; i + 16 <= hi; i += 16) opt_engine_adamw_vec(c, p, m, v, g, p16, i, 0xFFFF, dtype, decay, 1);
        _mm_sfence(); // the non-temporal stores visible before the threads join
    } else {
        for (; i + 16 <= hi; i += 16) opt_engine_adamw_vec(c, p, m, v, g, p16, i, 0xFFFF, dtype, decay, 0);
    }
    if (i < hi) opt_engine_adamw_vec(c, p, m, v, g, p16, i, opt_engine_mask(hi - i), dtype, decay, 0);
}
// One instance per gradient type and decay, so that each is compiled with its branches resolved.
#define OPT_ENGINE_ADAMW_CASE(DT, DECAY) opt_engine_adamw_range(&c, p, m, v, g, p16, lo, hi, DT, DECAY, nt)
static inline void opt_engine_adamw_avx512(const OptStep *s, float *p, float *m, float *v, const void *g, void *p16, size_t n,
                                           int dtype, int decay) {
    OptAdamVec c;
    c.gs = _mm512_set1_ps(s->grad_scale);
    c.keep = _mm512_set1_ps(1.0f - s->lr * s->weight_decay);
    c.b1 = _mm512_set1_ps(s->beta1); c.omb1 = _mm512_set1_ps(1.0f - s->beta1);
    c.b2 = _mm512_set1_ps(s->beta2); c.omb2 = _mm512_set1_ps(1.0f - s->beta2);
    c.bc2 = _mm512_set1_ps(s->bias_correction2_sqrt); c.eps = _mm512_set1_ps(s->eps);
    c.step = _mm512_set1_ps(s->lr / s->bias_correction1);
    int nt = n * 28 >= OPT_ENGINE_NT_MIN;
    OPT_ENGINE_PRAGMA(omp parallel if (n >= OPT_ENGINE_OMP_MIN))
    {
        size_t lo = 0, hi = n;
#ifdef _OPENMP
        // one contiguous share per thread, cut at multiples of 16 elements
        size_t T = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num(), vecs = (n + 15) / 16;
        lo = vecs * t / T * 16; hi = vecs * (t + 1) / T * 16;
        if (lo > n) lo = n;
        if (hi > n) hi = n;
#endif
        if (lo < hi) {
            if (dtype == ZC_F32) { if (decay) OPT_ENGINE_ADAMW_CASE(ZC_F32, 1); else OPT_ENGINE_ADAMW_CASE(ZC_F32, 0); }
            else if (dtype == ZC_BF16) { if (decay) OPT_ENGINE_ADAMW_CASE(ZC_BF16, 1); else OPT_ENGINE_ADAMW_CASE(ZC_BF16, 0); }
            else { if (decay) OPT_ENGINE_ADAMW_CASE(ZC_FP16, 1); else OPT_ENGINE_ADAMW_CASE(ZC_FP16, 0); }
        }
    }
}
#undef OPT_ENGINE_ADAMW_CASE
#endif // OPT_ENGINE_AVX512

OPT_ENGINE_CLONES
static inline void optimizer_update_host(const OptStep *step, float *p, float *const *state, const void *g, void *p16,
                                         size_t n, int dtype, int decay) {
    float *s0 = state[0], *s1 = state[1];
#ifdef OPT_ENGINE_AVX512
    if (step->kind == OPT_ADAMW) { opt_engine_adamw_avx512(step, p, s0, s1, g, p16, n, dtype, decay); return; }
#endif
    if (dtype == ZC_F32) {
        const float *gf = (const float *)g;
        float *pf = (float *)p16; // fp32 with its optimizer offloaded: the device's copy of p
        if (pf) { OPT_ENGINE_KINDS(gf[i], pf[i] = p[i]) }
        else { OPT_ENGINE_KINDS(gf[i], (void)0) }
    } else if (dtype == ZC_BF16) {
        const bf16_t *gh = (const bf16_t *)g;
        bf16_t *ph = (bf16_t *)p16;
        OPT_ENGINE_KINDS(bf16_to_f32(gh[i]), ph[i] = f32_to_bf16(p[i]))
    } else {
        const fp16_t *gh = (const fp16_t *)g;
        fp16_t *ph = (fp16_t *)p16;
        OPT_ENGINE_KINDS(fp16_to_f32(gh[i]), ph[i] = f32_to_fp16(p[i]))
    }
}
#undef OPT_ENGINE_KINDS
#undef OPT_ENGINE_LOOP

#define OPT_REDUCE_BLOCK 2048 // divides every streamed piece (zero/store.h: multiples of 2048 elements)
static inline float opt_engine_load(const void *g, size_t i, int dtype) {
    if (dtype == ZC_F32) return ((const float *)g)[i];
    if (dtype == ZC_BF16) return bf16_to_f32(((const bf16_t *)g)[i]);
    return fp16_to_f32(((const fp16_t *)g)[i]);
}
// One block [lo, hi) of a run: its R sums into out.
static inline void opt_reduce_block(const OptStep *step, const float *p, float *const *state, const void *g, size_t lo,
                                    size_t hi, int dtype, int decay, int R, double *out) {
    double lane[OPT_MAX_REDUCTIONS][8] = {{0}};
    const float *s0 = state[0], *s1 = state[1];
    for (size_t i = lo; i < hi; i++) {
        double t[OPT_MAX_REDUCTIONS];
        optimizer_reduce_element(step, p[i], s0 ? &s0[i] : NULL, s1 ? &s1[i] : NULL, opt_engine_load(g, i, dtype), decay, t);
        for (int k = 0; k < R; k++) lane[k][(i - lo) % 8] += t[k];
    }
    for (int k = 0; k < R; k++)
        out[k] = ((lane[k][0] + lane[k][1]) + (lane[k][2] + lane[k][3])) + ((lane[k][4] + lane[k][5]) + (lane[k][6] + lane[k][7]));
}
static inline void optimizer_reduce_host(const OptStep *step, const float *p, float *const *state, const void *g, size_t n,
                                         int dtype, int decay, size_t phase, double *acc) {
    int R = optimizer_reductions(step->kind);
    if (R <= 0 || n == 0) return;
    size_t B = OPT_REDUCE_BLOCK, first = (B - phase % B) % B; // elements before the first boundary
    if (first > n) first = n;
    size_t nb = (first ? 1 : 0) + (n - first + B - 1) / B;
    double *part = (double *)malloc(nb * OPT_MAX_REDUCTIONS * sizeof(double));
    if (!part) { fprintf(stderr, "error: out of memory in the optimizer's reduction pass\n"); exit(1); }
    OPT_ENGINE_PRAGMA(omp parallel for schedule(static) if (n >= OPT_ENGINE_OMP_MIN))
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b == 0 ? 0 : first + (b - (first ? 1 : 0)) * B;
        size_t hi = b == 0 && first ? first : lo + B;
        if (hi > n) hi = n;
        opt_reduce_block(step, p, state, g, lo, hi, dtype, decay, R, part + b * OPT_MAX_REDUCTIONS);
    }
    for (size_t b = 0; b < nb; b++)
        for (int k = 0; k < R; k++) acc[k] += part[b * OPT_MAX_REDUCTIONS + k];
    free(part);
}

#endif // OPTIMIZER_ENGINE_H
