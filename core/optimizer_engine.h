// optimizer_engine.h: the CPU optimizer engine: optimizer.h's element updates over arrays in
// host memory, vectorised (OpenMP simd: AVX-512 where the compiler may use it) and
// multi-threaded (OpenMP), streaming each array once.
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
OPT_ENGINE_CLONES
static inline void optimizer_update_host(const OptStep *step, float *p, float *const *state, const void *g, void *p16,
                                         size_t n, int dtype, int decay) {
    float *s0 = state[0], *s1 = state[1];
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
