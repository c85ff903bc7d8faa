// Tests and benchmark for gemm_bf16.h.
//
// Every path this machine supports (scalar always; AVX512-BF16 and AMX when detected) is forced
// through gemm_bf16_ex and compared with a double-precision reference computed from the same
// bf16 values, so the only error left is fp32 accumulation: |C - ref| <= 1e-5 * sum_k |a||b|
// (+ |C0| for beta = 1). Shapes include odd sizes on every edge, all four transposition cases,
// beta 0 / 1 / other, padded leading dimensions whose padding holds NaN (reading it would poison
// the result) and C padding holding a sentinel (writing it is caught). Exactly-sized allocations
// let ASan catch any read or write past the end. Also: determinism across thread counts,
// scratch handling, argument checks, NaN/Inf propagation, the three layer wrappers.
//
// usage: test_gemm_bf16 [--quick]                 run the tests (--quick: fewer big shapes)
//        test_gemm_bf16 --bench [--no-scalar] [--seconds S] [--path NAME] [--shape SUBSTRING]
//                                                 GFLOP/s of each path and of OpenBLAS
//                                                 cblas_sgemm (fp32) on the GPT-2 124M shapes,
//                                                 then the machine's peaks and a step's floor
//        test_gemm_bf16 --floor                   only the peaks and the floor
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#include "test/membw.h"
#endif
// Counts the scratch gemm_bf16 allocates for itself (test_linear_scratch: none, given enough).
static long gb_mallocs;
static void *counted_malloc(size_t n) { gb_mallocs++; return malloc(n); }
#define ZC_GB_MALLOC(n) counted_malloc(n)
#include "cpu/gemm_bf16.h"
#include "cpu/openblas.h"

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

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rng_u64(void) {  // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_unif(void) { return (double)(rng_u64() >> 11) * 0x1.0p-53; }
// Random bf16 with varied magnitudes (2^-4 .. 2^3), random signs, some exact zeros.
static bf16_t rng_bf16(void) {
    uint64_t r = rng_u64();
    if ((r & 31) == 0) return 0;
    double v = ldexp(1.0 + rng_unif(), (int)((r >> 8) % 8) - 4);
    if (r & 64) v = -v;
    return f32_to_bf16((float)v);
}
static float bf(bf16_t h) { return bf16_to_f32(h); }

static const bf16_t NAN_BF16 = 0x7FC1;   // in leading-dimension padding: must never be read
static const float C_SENTINEL = -7777.25f;  // in C's padding: must never be written

static const GemmBf16Path PATHS[] = {GEMM_BF16_SCALAR, GEMM_BF16_AVX512BF16, GEMM_BF16_AMX};
#define NPATHS 3
// gemm_f32 (fp32 operands) runs the same cases as a path of its own: PATH_F32, index NPATHS.
#define PATH_F32 ((GemmBf16Path)100)
static int path_supported(GemmBf16Path p) { return p == PATH_F32 ? gemm_f32_supported() : gemm_bf16_path_supported(p); }
static const char *path_name(GemmBf16Path p) { return p == PATH_F32 ? "f32" : gemm_bf16_path_name(p); }
static const float NAN_F32_PAD = -NAN;  // fp32 padding: must never be read either

// A logical (rows x cols) row-major matrix with leading dimension ld, allocated to exactly
// (rows-1)*ld + cols elements, the padding filled with NaN.
static bf16_t *alloc_mat(int rows, int cols, int ld) {
    size_t n = rows > 0 && cols > 0 ? (size_t)(rows - 1) * ld + cols : 1;
    bf16_t *p = aligned_alloc(64, (n * sizeof(bf16_t) + 63) / 64 * 64); // (as the trainer's: see run_case's C)
    for (size_t i = 0; i < n; i++) p[i] = NAN_BF16;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) p[(size_t)r * ld + c] = rng_bf16();
    return p;
}

// The same for fp32 operands: values of varied magnitudes (2^-4 .. 2^3) with all 24 bits of
// mantissa, random signs, some exact zeros.
static float *alloc_mat_f32(int rows, int cols, int ld) {
    size_t n = rows > 0 && cols > 0 ? (size_t)(rows - 1) * ld + cols : 1;
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) p[i] = NAN_F32_PAD;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            uint64_t x = rng_u64();
            p[(size_t)r * ld + c] = (x & 31) == 0 ? 0.0f : (float)ldexp((x & 64 ? -1 : 1) * (1.0 + rng_unif()), (int)((x >> 8) % 8) - 4);
        }
    return p;
}
// An operand for path p (bf16, or fp32 for PATH_F32), element i of one as a double, and one set.
static void *alloc_for(GemmBf16Path p, int rows, int cols, int ld) {
    return p == PATH_F32 ? (void *)alloc_mat_f32(rows, cols, ld) : (void *)alloc_mat(rows, cols, ld);
}
static double elem(GemmBf16Path p, const void *m, size_t i) { return p == PATH_F32 ? ((const float *)m)[i] : bf(((const bf16_t *)m)[i]); }
static void set_elem(GemmBf16Path p, void *m, size_t i, float v) {
    if (p == PATH_F32) ((float *)m)[i] = v;
    else ((bf16_t *)m)[i] = f32_to_bf16(v);
}
static int gemm_call(GemmBf16Path p, int tA, int tB, int M, int N, int K, const void *A, int lda, const void *B, int ldb,
                     float beta, float *C, int ldc, void *scratch, size_t bytes) {
    if (p == PATH_F32) return gemm_f32_ex(tA, tB, M, N, K, (const float *)A, lda, (const float *)B, ldb, beta, C, ldc, scratch, bytes);
    return gemm_bf16_ex(p, tA, tB, M, N, K, (const bf16_t *)A, lda, (const bf16_t *)B, ldb, beta, C, ldc, scratch, bytes);
}

// The layer wrappers of path p (ctx's path: p, or GEMM_BF16_AUTO for PATH_F32); bias: forward_bias.
static int wrap_forward(GemmBf16Path p, const GemmBf16Ctx *ctx, float *out, const void *inp, const void *w, const float *bias,
                        int N, int C, int OC, float beta) {
    if (p == PATH_F32)
        return bias ? gemm_f32_forward_bias(ctx, out, (const float *)inp, (const float *)w, bias, N, C, OC)
                    : gemm_f32_forward(ctx, out, (const float *)inp, (const float *)w, N, C, OC, beta);
    return bias ? gemm_bf16_forward_bias(ctx, out, (const bf16_t *)inp, (const bf16_t *)w, bias, N, C, OC)
                : gemm_bf16_forward(ctx, out, (const bf16_t *)inp, (const bf16_t *)w, N, C, OC, beta);
}
static int wrap_backward_data(GemmBf16Path p, const GemmBf16Ctx *ctx, float *dinp, const void *dout, const void *w, int N, int C,
                              int OC, float beta) {
    if (p == PATH_F32) return gemm_f32_backward_data(ctx, dinp, (const float *)dout, (const float *)w, N, C, OC, beta);
    return gemm_bf16_backward_data(ctx, dinp, (const bf16_t *)dout, (const bf16_t *)w, N, C, OC, beta);
}
static int wrap_backward_weight(GemmBf16Path p, const GemmBf16Ctx *ctx, float *dw, const void *dout, const void *inp, int N,
                                int C, int OC, float beta) {
    if (p == PATH_F32) return gemm_f32_backward_weight(ctx, dw, (const float *)dout, (const float *)inp, N, C, OC, beta);
    return gemm_bf16_backward_weight(ctx, dw, (const bf16_t *)dout, (const bf16_t *)inp, N, C, OC, beta);
}

// Runs one case on every supported path (cases_f32: on gemm_f32, with fp32 operands) and checks
// each against the reference (computed once). scratch_mode: 0 = NULL, 1 = exactly the path's
// scratch_bytes, 2 = too small (falls back to malloc).
static long path_fail[NPATHS + 1];
static int cases_f32;
static void run_case(int tA, int tB, int M, int N, int K, int pad, float beta, int scratch_mode) {
    int lda = (tA ? M : K) + pad, ldb = (tB ? K : N) + pad, ldc = N + (pad ? pad + 1 : 0);
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (ldc < 1) ldc = 1;
    const GemmBf16Path kind = cases_f32 ? PATH_F32 : GEMM_BF16_SCALAR; // (the operands' type)
    void *A = tA ? alloc_for(kind, K, M, lda) : alloc_for(kind, M, K, lda);
    void *B = tB ? alloc_for(kind, N, K, ldb) : alloc_for(kind, K, N, ldb);
    size_t nc = M > 0 && N > 0 ? (size_t)(M - 1) * ldc + N : 1;
    // (64-byte aligned, as the trainer's buffers are: rows of a multiple of 16 floats are then
    // aligned, where the direct forward may write them with streaming stores)
    float *C = aligned_alloc(64, (nc * sizeof(float) + 63) / 64 * 64), *C0 = malloc(nc * sizeof(float));
    for (size_t i = 0; i < nc; i++) C0[i] = C_SENTINEL;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++)
            C0[(size_t)m * ldc + n] = beta == 0.0f ? NAN : (float)(rng_unif() * 4 - 2);
    size_t mn = (size_t)M * N;
    double *ref = malloc((mn ? mn : 1) * sizeof(double)), *bound = malloc((mn ? mn : 1) * sizeof(double));
    // B as doubles, row k contiguous along n: each C element's sum still runs in k order (the
    // loop over n inside keeps one sum per element), with the elements of a row side by side
    double *Bd = malloc(((size_t)N * K + 1) * sizeof(double));
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++)
            Bd[(size_t)k * N + n] = elem(kind, B, tB ? (size_t)n * ldb + k : (size_t)k * ldb + n);
    for (int m = 0; m < M; m++) {
        double *s = ref + (size_t)m * N, *b = bound + (size_t)m * N;
        for (int n = 0; n < N; n++) s[n] = b[n] = 0;
        for (int k = 0; k < K; k++) {
            double x = elem(kind, A, tA ? (size_t)k * lda + m : (size_t)m * lda + k);
            const double *y = Bd + (size_t)k * N;
            for (int n = 0; n < N; n++) {
                s[n] += x * y[n];
                b[n] += fabs(x * y[n]);
            }
        }
        if (beta != 0.0f)
            for (int n = 0; n < N; n++) {
                double c0 = (double)(float)(beta * C0[(size_t)m * ldc + n]);
                s[n] += c0;
                b[n] += fabs(c0);
            }
    }
    free(Bd);
    size_t sb = cases_f32 ? gemm_f32_scratch_bytes(tA, tB, M, N, K) : gemm_bf16_scratch_bytes(M, N, K);
    void *scratch = NULL;
    size_t scratch_bytes = 0;
    if (scratch_mode == 1) { scratch = malloc(sb ? sb : 1); scratch_bytes = sb; }
    if (scratch_mode == 2) { scratch = malloc(64); scratch_bytes = 64; }

    for (int p = cases_f32 ? NPATHS : 0; p < (cases_f32 ? NPATHS + 1 : NPATHS); p++) {
        GemmBf16Path path = p == NPATHS ? PATH_F32 : PATHS[p];
        if (!path_supported(path)) continue;
        long f0 = n_fail;
        memcpy(C, C0, nc * sizeof(float));
        int rc = gemm_call(path, tA, tB, M, N, K, A, lda, B, ldb, beta, C, ldc, scratch, scratch_bytes);
        CHECK(rc == 0, "%s rc=%d", path_name(path), rc);
        double worst = 0;
        long bad = 0;
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                double s = ref[(size_t)m * N + n], b = bound[(size_t)m * N + n];
                double got = C[(size_t)m * ldc + n], err = fabs(got - s);
                double ratio = b > 0 ? err / b : (err > 0 ? INFINITY : 0);
                if (!(ratio <= 1e-5)) {  // also catches NaN
                    if (bad++ < 3)
                        printf("  %s tA=%d tB=%d M=%d N=%d K=%d pad=%d beta=%g: C[%d][%d]=%.9g ref=%.9g bound=%.3g\n",
                               path_name(path), tA, tB, M, N, K, pad, beta, m, n, got, s, b);
                }
                if (ratio > worst) worst = ratio;
            }
        }
        CHECK(bad == 0, "%s tA=%d tB=%d M=%d N=%d K=%d pad=%d beta=%g: %ld elements off (worst %.3g)",
              path_name(path), tA, tB, M, N, K, pad, beta, bad, worst);
        long touched = 0;
        for (size_t i = 0; i < nc; i++)
            if ((int)(i % ldc) >= N && C[i] != C_SENTINEL) touched++;
        CHECK(touched == 0, "%s M=%d N=%d ldc=%d: %ld padding elements of C written",
              path_name(path), M, N, ldc, touched);
        path_fail[p] += n_fail - f0;
    }
    free(A); free(B); free(C); free(C0); free(ref); free(bound); free(scratch);
}

typedef struct { int M, N, K; } Shape;

static void test_shapes(int quick) {
    static const Shape small[] = {
        {1, 1, 1}, {1, 1, 2}, {1, 3, 31}, {2, 1, 33}, {3, 5, 7}, {7, 3, 64}, {15, 16, 31}, {16, 16, 32},
        {17, 15, 33}, {16, 17, 16}, {31, 33, 64}, {32, 32, 32}, {33, 31, 65}, {32, 48, 95},
        {47, 20, 96}, {64, 64, 128}, {20, 47, 100}, {5, 130, 70}, {130, 5, 70}, {1, 200, 40},
        {200, 1, 40}, {65, 97, 17},
    };
    int nsmall = (int)(sizeof small / sizeof small[0]);
    // every transposition, beta 0 and 1, with and without padding, scratch modes in turn
    int i = 0;
    for (int s = 0; s < nsmall; s++)
        for (int t = 0; t < 4; t++)
            for (int b = 0; b < 2; b++, i++)
                run_case(t >> 1, t & 1, small[s].M, small[s].N, small[s].K, (i % 3) * 3,
                         (float)b, i % 3);
    // larger: several streamed chunks, K blocks (K > KC = 768), resident blocks (> RC = 512)
    static const Shape big[] = {
        {64, 200, 800}, {200, 64, 800}, {40, 530, 50}, {530, 40, 50}, {96, 1100, 33}, {33, 96, 1600},
        {520, 530, 24}, {256, 160, 768},
    };
    int nbig = quick ? 3 : (int)(sizeof big / sizeof big[0]);
    for (int s = 0; s < nbig; s++) {
        int t = s % 4;
        run_case(t >> 1, t & 1, big[s].M, big[s].N, big[s].K, s % 2 ? 5 : 0, (float)(s & 1), s % 3);
    }
    // the three GPT-2 layer shapes at small width: forward (0,1), backward data (0,0),
    // backward weight (1,0), with accumulation
    run_case(0, 1, 64, 3 * 96, 96, 0, 0.0f, 1);
    // the forward on AMX reads the weight in place (K, N multiples of 32, M <= N): ragged M,
    // beta 1 (the bias), padded leading dimensions, K > KC
    run_case(0, 1, 17, 64, 64, 0, 1.0f, 1);
    run_case(0, 1, 45, 96, 160, 3, 1.0f, 0);
    run_case(1, 1, 40, 64, 32, 2, 0.0f, 1);
    run_case(0, 1, 33, 64, 800, 0, 1.0f, 2);
    run_case(0, 0, 64, 96, 3 * 96, 0, 0.0f, 1);
    run_case(1, 0, 3 * 96, 96, 64, 0, 1.0f, 1);
    // a resident block over GEMM_BF16_RES_L2_BYTES (720 rows x 736 k) and a streamed side so
    // long that half of it per thread would exceed that budget too: capped chunks
    if (!quick) run_case(1, 0, 2848, 720, 736, 0, 1.0f, 1);
    // a forward whose C (33.5 MB) is over GEMM_BF16_STREAM_BYTES: written with streaming stores
    if (!quick) run_case(0, 1, 64, 131072, 32, 0, 0.0f, 1);
    // general beta, and degenerate sizes
    run_case(0, 1, 37, 41, 45, 2, 0.5f, 0);
    run_case(1, 1, 33, 17, 19, 0, -2.0f, 1);
    run_case(0, 0, 9, 10, 0, 0, 0.0f, 0);  // K = 0, beta = 0: C = 0
    run_case(0, 0, 9, 10, 0, 3, 1.0f, 0);  // K = 0, beta = 1: C unchanged
    run_case(0, 0, 0, 10, 5, 0, 0.0f, 0);
    run_case(1, 1, 7, 0, 5, 0, 1.0f, 0);
}

// Bitwise-identical results for 1 and 2 threads and on repetition (every C element has one
// summation order), forcing the parallel code even on small shapes by using a big one.
static void test_determinism(GemmBf16Path path) {
#ifdef _OPENMP
    int M = 96, N = 160, K = 800, saved = omp_get_max_threads();
    void *A = alloc_for(path, K, M, M), *B = alloc_for(path, K, N, N);
    float *C1 = malloc((size_t)M * N * 4), *C2 = malloc((size_t)M * N * 4), *C3 = malloc((size_t)M * N * 4);
    omp_set_num_threads(1);
    gemm_call(path, 1, 0, M, N, K, A, M, B, N, 0.0f, C1, N, NULL, 0);
    omp_set_num_threads(2);
    gemm_call(path, 1, 0, M, N, K, A, M, B, N, 0.0f, C2, N, NULL, 0);
    CHECK(memcmp(C1, C2, (size_t)M * N * 4) == 0, "%s: 1 vs 2 threads differ", path_name(path));
    gemm_call(path, 1, 0, M, N, K, A, M, B, N, 0.0f, C2, N, NULL, 0);
    CHECK(memcmp(C1, C2, (size_t)M * N * 4) == 0, "%s: repeated call differs", path_name(path));
    omp_set_num_threads(3);  // more threads than this machine's cores
    gemm_call(path, 1, 0, M, N, K, A, M, B, N, 0.0f, C3, N, NULL, 0);
    CHECK(memcmp(C1, C3, (size_t)M * N * 4) == 0, "%s: 1 vs 3 threads differ", path_name(path));
    omp_set_num_threads(saved);
    free(A); free(B); free(C1); free(C2); free(C3);
#else
    (void)path;
#endif
}

// Streaming stores (a C over GEMM_BF16_STREAM_BYTES that the call only writes, rows 64-byte
// aligned) write the same bits as plain stores (the same C one element off alignment): the
// direct forward, bias included, and a fresh 16-bit weight gradient.
// The product with A given transposed (transA 1: A read across its rows, as a weight gradient's
// doutᵀ) equals, bit for bit, the product with the same A given row-major: each C element has one
// summation order (the same products, the same k order) whatever the operand's layout and however
// it is packed. A resident (M <= N) and streamed (M > N), several K blocks, ragged edges, both B
// orientations, beta 0 and 1; and on the bf16 paths the same with the sums rounded into a 16-bit C
// (gemm_bf16_acc16: all of K in one block), as the trainer computes its weight gradients.
static void test_transposed_a(GemmBf16Path path) {
    // ({64, 96, 1024}: rows of a 4 KB multiple in fp32, which the driver packs rather than read in
    // place, and of 2 KB in bf16, which it reads in place: see zc_gb_direct)
    static const Shape shapes[] = {{200, 64, 800}, {64, 200, 800}, {97, 40, 300}, {33, 70, 65}, {256, 768, 64}, {768, 96, 256},
                                   {64, 96, 1024}};
    const int es = path == PATH_F32 ? 4 : 2;
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (int t = 0; t < 4; t++) {
            const int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K, tB = t & 1, acc16 = t >> 1;
            if (acc16 && path == PATH_F32) continue;
            char *A = alloc_for(path, M, K, K), *At = alloc_for(path, K, M, M);
            void *B = tB ? alloc_for(path, N, K, K) : alloc_for(path, K, N, N);
            for (int m = 0; m < M; m++)
                for (int k = 0; k < K; k++) memcpy(At + ((size_t)k * M + m) * es, A + ((size_t)m * K + k) * es, es);
            const float beta = (float)(s & 1);
            const size_t nc = (size_t)M * N;
            int same = 1;
            if (!acc16) {
                float *x = malloc(nc * 4), *y = malloc(nc * 4);
                for (size_t i = 0; i < nc; i++) x[i] = y[i] = (float)(i % 7) - 3.0f;
                int r1 = gemm_call(path, 0, tB, M, N, K, A, K, B, tB ? K : N, beta, x, N, NULL, 0);
                int r2 = gemm_call(path, 1, tB, M, N, K, At, M, B, tB ? K : N, beta, y, N, NULL, 0);
                same = r1 == 0 && r2 == 0 && memcmp(x, y, nc * 4) == 0;
                free(x); free(y);
            } else {
                bf16_t *x = malloc(nc * 2), *y = malloc(nc * 2);
                for (size_t i = 0; i < nc; i++) x[i] = y[i] = rng_bf16();
                int r1 = gemm_bf16_acc16(path, 0, tB, M, N, K, (bf16_t *)A, K, B, tB ? K : N, beta, x, N, NULL, 0);
                int r2 = gemm_bf16_acc16(path, 1, tB, M, N, K, (bf16_t *)At, M, B, tB ? K : N, beta, y, N, NULL, 0);
                same = r1 == 0 && r2 == 0 && memcmp(x, y, nc * 2) == 0;
                free(x); free(y);
            }
            CHECK(same, "%s %dx%dx%d tB=%d beta %g%s: A transposed and A row-major give different bits", path_name(path), M,
                  N, K, tB, beta, acc16 ? " (acc16)" : "");
            free(A); free(At); free(B);
        }
}

static void test_streaming_forward(GemmBf16Path path) {
    int M = 64, N = (int)(GEMM_BF16_STREAM_BYTES / (64 * sizeof(float))) / 32 * 32 + 32, K = 64;
    void *A = alloc_for(path, M, K, K), *B = alloc_for(path, N, K, K);
    float *bias = malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) bias[n] = (float)(rng_unif() - 0.5);
    size_t nc = (size_t)M * N;
    float *C1 = aligned_alloc(64, (nc * 4 + 63) / 64 * 64), *C2 = aligned_alloc(64, (nc * 4 + 64 + 63) / 64 * 64);
    GemmBf16Ctx ctx = {path == PATH_F32 ? GEMM_BF16_AUTO : path, NULL, 0};
    for (int b = 0; b < 2; b++) {
        int rc1 = wrap_forward(path, &ctx, C1, A, B, b ? bias : NULL, M, K, N, 0.0f);
        int rc2 = wrap_forward(path, &ctx, C2 + 1, A, B, b ? bias : NULL, M, K, N, 0.0f);
        CHECK(rc1 == 0 && rc2 == 0, "%s: streaming forward rc %d %d", path_name(path), rc1, rc2);
        CHECK(memcmp(C1, C2 + 1, nc * 4) == 0, "%s: streaming stores (aligned C) and plain stores differ%s",
              path_name(path), b ? " (bias)" : "");
    }
    free(A); free(B); free(bias); free(C1); free(C2);
}
static void test_streaming(GemmBf16Path path) {
    test_streaming_forward(path);
    GemmBf16Ctx ctx = {path, NULL, 0};
    // a fresh 16-bit weight gradient (acc16, beta 0) over the threshold, and the LM head's split
    // variant: the same bits streamed (aligned) or stored (one element off alignment)
    int OC = (int)(GEMM_BF16_STREAM_BYTES / (64 * sizeof(bf16_t))) / 32 * 32 + 32, Cc = 64, Nt = 32;
    bf16_t *dout = alloc_mat(Nt, OC, OC), *inp = alloc_mat(Nt, Cc, Cc);
    size_t nw = (size_t)OC * Cc;
    bf16_t *W1 = aligned_alloc(64, (nw * 2 + 63) / 64 * 64), *W2 = aligned_alloc(64, (nw * 2 + 64 + 63) / 64 * 64);
    uint8_t *split = malloc((size_t)OC);
    for (int m = 0; m < OC; m++) split[m] = (uint8_t)(m % 97 == 5);
    float *S1 = malloc(nw * 4), *S2 = malloc(nw * 4);
    for (int v = 0; v < 2; v++) {
        int rc1 = v ? gemm_bf16_backward_weight_split(&ctx, W1, split, S1, dout, inp, Nt, Cc, OC, 0.0f)
                    : gemm_bf16_backward_weight_acc16(&ctx, W1, dout, inp, Nt, Cc, OC, 0.0f);
        int rc2 = v ? gemm_bf16_backward_weight_split(&ctx, W2 + 1, split, S2, dout, inp, Nt, Cc, OC, 0.0f)
                    : gemm_bf16_backward_weight_acc16(&ctx, W2 + 1, dout, inp, Nt, Cc, OC, 0.0f);
        CHECK(rc1 == 0 && rc2 == 0, "%s: streaming acc16 rc %d %d", gemm_bf16_path_name(path), rc1, rc2);
        CHECK(memcmp(W1, W2 + 1, nw * 2) == 0, "%s: streaming and plain stores of a fresh 16-bit gradient differ%s",
              gemm_bf16_path_name(path), v ? " (split)" : "");
    }
    free(dout); free(inp); free(W1); free(W2); free(split); free(S1); free(S2);
}

// NaN and Inf in the inputs reach the output (no path may drop them); padding stays harmless.
static void test_specials(GemmBf16Path path) {
    int M = 20, N = 35, K = 40;
    void *A = alloc_for(path, M, K, K), *B = alloc_for(path, N, K, K);
    float *C = malloc((size_t)M * N * 4);
    set_elem(path, A, 3 * K + 7, NAN);        // NaN in row 3 of A: row 3 of C is NaN
    set_elem(path, B, 5 * K + 39, INFINITY);  // +Inf at k = 39 (last) of column 5
    set_elem(path, A, 9 * K + 39, 1.0f);      // a(9,39) = 1: C[9][5] = +Inf
    set_elem(path, A, 10 * K + 39, 0.0f);     // a(10,39) = 0: C[10][5] = 0 * Inf = NaN
    gemm_call(path, 0, 1, M, N, K, A, K, B, K, 0.0f, C, N, NULL, 0);
    int ok = 1;
    for (int n = 0; n < N; n++) ok &= isnan(C[3 * N + n]);
    CHECK(ok, "%s: NaN in A did not reach its row of C", path_name(path));
    CHECK(isinf(C[9 * N + 5]) && C[9 * N + 5] > 0, "%s: Inf lost (%g)", path_name(path), C[9 * N + 5]);
    CHECK(isnan(C[10 * N + 5]), "%s: 0*Inf not NaN (%g)", path_name(path), C[10 * N + 5]);
    CHECK(isfinite(C[0 * N + 0]) && isfinite(C[19 * N + 34]), "%s: finite elements poisoned", path_name(path));
    free(A); free(B); free(C);
}

static void test_args(void) {
    bf16_t a[64] = {0}, b[64] = {0};
    float c[64];
    for (int i = 0; i < 64; i++) c[i] = 3.0f;
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, -1, 4, 4, a, 4, b, 4, 0, c, 4, NULL, 0) == -1, "M < 0");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, 4, 4, 4, a, 3, b, 4, 0, c, 4, NULL, 0) == -1, "lda < K");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 1, 0, 5, 4, 4, a, 4, b, 4, 0, c, 4, NULL, 0) == -1, "lda < M (transA)");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, 4, 5, 4, a, 4, b, 4, 0, c, 5, NULL, 0) == -1, "ldb < N");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 1, 4, 4, 5, a, 5, b, 4, 0, c, 4, NULL, 0) == -1, "ldb < K (transB)");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, 4, 4, 4, a, 4, b, 4, 0, c, 3, NULL, 0) == -1, "ldc < N");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, 4, 4, 4, NULL, 4, b, 4, 0, c, 4, NULL, 0) == -1, "A NULL");
    CHECK(gemm_bf16_ex((GemmBf16Path)42, 0, 0, 4, 4, 4, a, 4, b, 4, 0, c, 4, NULL, 0) == -1, "bad path");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 2, 0, 4, 4, 4, a, 4, b, 4, 0, c, 4, NULL, 0) == -1, "transA = 2");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, 4, 4, INT_MAX, a, INT_MAX, b, 4, 0, c, 4, NULL, 0) == -1, "K huge");
    int untouched = 1;
    for (int i = 0; i < 64; i++) untouched &= c[i] == 3.0f;
    CHECK(untouched, "a rejected call wrote C");
    CHECK(gemm_bf16_ex(GEMM_BF16_SCALAR, 0, 0, 4, 4, 0, NULL, 1, NULL, 4, 0, c, 4, NULL, 0) == 0 && c[15] == 0.0f,
          "K = 0 with NULL A/B");
    CHECK(gemm_bf16_scratch_bytes(0, 5, 5) == 0, "scratch for empty");
}

// The layer wrappers with a context (one scratch buffer, the largest of the three products
// need), against the general call on the same path.
static void test_wrappers(GemmBf16Path path) {
    int Nt = 40, C = 96, OC = 144, f32 = path == PATH_F32;
    size_t sb = f32 ? gemm_f32_linear_scratch_bytes(Nt, C, OC, zc_gb_threads()) : gemm_bf16_scratch_bytes(Nt, OC, C);
    if (!f32 && gemm_bf16_scratch_bytes(Nt, C, OC) > sb) sb = gemm_bf16_scratch_bytes(Nt, C, OC);
    if (!f32 && gemm_bf16_scratch_bytes(OC, C, Nt) > sb) sb = gemm_bf16_scratch_bytes(OC, C, Nt);
    void *scratch = malloc(sb);
    GemmBf16Ctx ctx = {f32 ? GEMM_BF16_AUTO : path, scratch, sb};
    void *inp = alloc_for(path, Nt, C, C), *w = alloc_for(path, OC, C, C), *dout = alloc_for(path, Nt, OC, OC);
    float *x = malloc((size_t)OC * C * 4), *y = malloc((size_t)OC * C * 4);
    for (int pass = 0; pass < 2; pass++) {  // beta = 0, then 1 on top
        float beta = (float)pass;
        if (pass == 0) { memset(x, 0, (size_t)OC * C * 4); memset(y, 0, (size_t)OC * C * 4); }
        CHECK(wrap_forward(path, &ctx, x, inp, w, NULL, Nt, C, OC, beta) == 0, "forward rc");
        gemm_call(path, 0, 1, Nt, OC, C, inp, C, w, C, beta, y, OC, NULL, 0);
        CHECK(memcmp(x, y, (size_t)Nt * OC * 4) == 0, "%s forward wrapper", path_name(path));
        CHECK(wrap_backward_data(path, &ctx, x, dout, w, Nt, C, OC, beta) == 0, "bwd data rc");
        gemm_call(path, 0, 0, Nt, C, OC, dout, OC, w, C, beta, y, C, NULL, 0);
        CHECK(memcmp(x, y, (size_t)Nt * C * 4) == 0, "%s backward-data wrapper", path_name(path));
        CHECK(wrap_backward_weight(path, &ctx, x, dout, inp, Nt, C, OC, beta) == 0, "bwd weight rc");
        gemm_call(path, 1, 0, OC, C, Nt, dout, OC, inp, C, beta, y, C, NULL, 0);
        CHECK(memcmp(x, y, (size_t)OC * C * 4) == 0, "%s backward-weight wrapper", path_name(path));
    }
    // the forward with a bias: bit for bit the bias copied into every row and beta 1, where the
    // direct forward applies (sizes multiples of 32) and where it does not (Nt = 40, OC = 144)
    for (int sh = 0; sh < 2; sh++) {
        int n = sh ? 64 : Nt, oc = sh ? 96 : OC, c = sh ? 64 : C;
        float *bias = malloc((size_t)oc * 4), *bx = malloc((size_t)n * oc * 4), *by = malloc((size_t)n * oc * 4);
        for (int o = 0; o < oc; o++) bias[o] = bf(rng_bf16());
        for (int i = 0; i < n; i++) memcpy(by + (size_t)i * oc, bias, (size_t)oc * 4);
        for (size_t i = 0; i < (size_t)n * oc; i++) bx[i] = NAN;  // not read
        void *in2 = alloc_for(path, n, c, c), *w2 = alloc_for(path, oc, c, c);
        CHECK(wrap_forward(path, &ctx, bx, in2, w2, bias, n, c, oc, 0.0f) == 0, "forward_bias rc");
        gemm_call(path, 0, 1, n, oc, c, in2, c, w2, c, 1.0f, by, oc, NULL, 0);
        CHECK(memcmp(bx, by, (size_t)n * oc * 4) == 0, "%s forward with bias %dx%dx%d: not the bias rows + beta 1",
              path_name(path), n, oc, c);
        CHECK((f32 ? gemm_f32_forward_bias(&ctx, bx, (const float *)in2, (const float *)w2, NULL, n, c, oc)
                   : gemm_bf16_forward_bias(&ctx, bx, (const bf16_t *)in2, (const bf16_t *)w2, NULL, n, c, oc)) == -1,
              "forward_bias without a bias");
        free(bias); free(bx); free(by); free(in2); free(w2);
    }
    if (f32) { // a context naming a bf16 path is refused
        GemmBf16Ctx bad = {GEMM_BF16_SCALAR, scratch, sb};
        CHECK(gemm_f32_forward(&bad, x, (const float *)inp, (const float *)w, Nt, C, OC, 0.0f) == -1, "f32 with a bf16 path");
    }
    free(inp); free(w); free(dout); free(x); free(y); free(scratch);
}

// gemm_bf16_forward_round against gemm_bf16_forward(_bias) followed by mixed_precision.h's scalar
// rounding of every value (f32_to_bf16, bf16_to_f32), bit for bit: where the direct forward rounds
// each block on its way out (sizes multiples of 32) and where the driver rounds C after the
// product (Nt = 40, OC = 144); with out32 0, out16 only (out is scratch). The first rows of inp are zero, so that their
// values are the bias itself: NaNs (quiet, signalling, with payloads), infinities, the largest
// floats (rounding up to infinity), subnormals and ties between two bf16 values.
static void test_forward_round(GemmBf16Path path) {
    static const uint32_t special[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0x7FBFFFFFu, 0x7F800000u, 0xFF800000u,
                                       0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F7FFFu, 0x00000001u, 0x807FFFFFu, 0x00008000u,
                                       0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F80FFFFu, 0x80000000u, 0x00000000u};
    const int ns = (int)(sizeof special / sizeof special[0]);
    for (int sh = 0; sh < 2; sh++) {
        int n = sh == 0 ? 64 : 40, oc = sh == 0 ? 96 : 144, c = sh == 0 ? 64 : 96;
        size_t sb = gemm_bf16_scratch_bytes(n, oc, c);
        void *scratch = malloc(sb);
        GemmBf16Ctx ctx = {path, scratch, sb};
        bf16_t *inp = alloc_mat(n, c, c), *w = alloc_mat(oc, c, c);
        memset(inp, 0, (size_t)2 * c * sizeof(bf16_t)); // rows 0 and 1: the bias alone
        float *bias = malloc((size_t)oc * 4), *y = malloc((size_t)n * oc * 4), *x = malloc((size_t)n * oc * 4);
        bf16_t *x16 = malloc((size_t)n * oc * 2);
        for (int o = 0; o < oc; o++) {
            uint32_t u = special[o % ns];
            if (o >= ns) u = (uint32_t)rng_bf16() << 16 | (uint32_t)(o * 2654435761u >> 16); // any 32 bits
            memcpy(&bias[o], &u, 4);
        }
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *b = with_bias ? bias : NULL;
            CHECK((b ? gemm_bf16_forward_bias(&ctx, y, inp, w, b, n, c, oc) : gemm_bf16_forward(&ctx, y, inp, w, n, c, oc, 0.0f)) == 0,
                  "forward rc");
            for (int out32 = 0; out32 < 2; out32++)
                for (int want16 = !out32; want16 < 2; want16++) {
                    for (size_t i = 0; i < (size_t)n * oc; i++) x[i] = NAN, x16[i] = 0x5555;
                    CHECK(gemm_bf16_forward_round(&ctx, x, want16 ? x16 : NULL, out32, inp, w, b, n, c, oc) == 0, "forward_round rc");
                    long bad = 0;
                    for (size_t i = 0; i < (size_t)n * oc; i++) {
                        bf16_t r = f32_to_bf16(y[i]);
                        float v = bf16_to_f32(r);
                        if ((out32 && memcmp(&v, &x[i], 4)) || (want16 && x16[i] != r) || (!want16 && x16[i] != 0x5555)) bad++;
                    }
                    CHECK(bad == 0, "%s forward_round %dx%dx%d bias %d out32 %d out16 %d: %ld values differ from the forward + "
                          "f32_to_bf16", path_name(path), n, oc, c, with_bias, out32, want16, bad);
                }
            CHECK(gemm_bf16_forward_round(&ctx, x, NULL, 0, inp, w, b, n, c, oc) == -1, "forward_round with neither output");
        }
        free(scratch); free(inp); free(w); free(bias); free(y); free(x); free(x16);
    }
}

// ----------------------------------------------------------------------------
// benchmark

typedef struct { const char *name; int tA, tB, M, N, K, count; } BenchShape;

// GPT-2 124M at B=4, T=64 (N = 256 tokens, C = 768); count = uses per training step.
static const BenchShape BENCH[] = {
    {"fwd qkv", 0, 1, 256, 2304, 768, 12},
    {"fwd attproj", 0, 1, 256, 768, 768, 12},
    {"fwd fc", 0, 1, 256, 3072, 768, 12},
    {"fwd fcproj", 0, 1, 256, 768, 3072, 12},
    {"fwd lm-head", 0, 1, 256, 50304, 768, 1},
    {"bwd-data qkv", 0, 0, 256, 768, 2304, 12},
    {"bwd-data attproj", 0, 0, 256, 768, 768, 12},
    {"bwd-data fc", 0, 0, 256, 768, 3072, 12},
    {"bwd-data fcproj", 0, 0, 256, 3072, 768, 12},
    {"bwd-data lm-head", 0, 0, 256, 768, 50304, 1},
    {"bwd-w qkv", 1, 0, 2304, 768, 256, 12},
    {"bwd-w attproj", 1, 0, 768, 768, 256, 12},
    {"bwd-w fc", 1, 0, 3072, 768, 256, 12},
    {"bwd-w fcproj", 1, 0, 768, 3072, 256, 12},
    {"bwd-w lm-head", 1, 0, 50304, 768, 256, 1},
    {"square 1024", 0, 0, 1024, 1024, 1024, 0},
};
#define NBENCH ((int)(sizeof BENCH / sizeof BENCH[0]))

// best time of repeated calls: at least 2, until `seconds` have passed (at most 50)
#define TIME_BEST(best, seconds, call) do { \
        call; \
        double t_start_ = now(); best = INFINITY; \
        for (int r_ = 0; r_ < 50; r_++) { \
            double t0_ = now(); call; double dt_ = now() - t0_; \
            if (dt_ < best) best = dt_; \
            if (r_ >= 1 && now() - t_start_ > (seconds)) break; \
        } \
    } while (0)

// The machine's ceilings, measured: what one core's vector units do per second with every
// operand in registers (12 independent accumulators, more than latency x throughput needs), on
// all threads at once; and the memory bandwidth of AdamW's access pattern (read and write back
// in place, 1 GiB of fp32 per pass). From them the floor of one GPT-2 step: its matmul FLOPs at
// the bf16 peak plus AdamW's bytes at that bandwidth, before anything else the step does.
#ifdef ZC_GB_X86
// (7 short trials, best kept: a trial during which the VM took a core away reads half the peak,
// and a probe whose every trial was disturbed so put a floor 1.5x too high under bench.sh's
// steps; short trials make that unlikely)
#define PEAK_ITERS 15000000L
#define PEAK_TRIALS 7
ZC_GB_TARGET_BF16 static float peak_dpbf16(long iters) {
    __m512 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_setzero_ps();
    __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F80), b = (__m512bh)_mm512_set1_epi16(0x2F80);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) c[i] = _mm512_dpbf16_ps(c[i], a, b);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(c[i]);
    return s;
}
ZC_GB_TARGET_AVX512 static float peak_fma(long iters) {
    __m512 c[12];
    for (int i = 0; i < 12; i++) c[i] = _mm512_setzero_ps();
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-9f);
    for (long it = 0; it < iters; it++)
        for (int i = 0; i < 12; i++) c[i] = _mm512_fmadd_ps(a, b, c[i]);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(c[i]);
    return s;
}
// GFLOP/s of one of the loops above on every thread (best of PEAK_TRIALS)
static double peak_gflops(float (*loop)(long), double flop_per_instr) {
    double best = INFINITY, sink = 0;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    for (int r = 0; r < PEAK_TRIALS; r++) {
        double t0 = now();
#pragma omp parallel reduction(+ : sink)
        sink += loop(PEAK_ITERS);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    if (sink == 12345.0) printf(" ");  // keep the loops
    return threads * PEAK_ITERS * 12.0 * flop_per_instr / best * 1e-9;
}
static void bench_floor(void) {
    int has_bf16 = gemm_bf16_path_supported(GEMM_BF16_AVX512BF16), has_avx512 = zc_gb_cpu_features() & ZC_GB_F_AVX512;
    double bf16 = has_bf16 ? peak_gflops(peak_dpbf16, 64) : NAN;  // 16 lanes x 2 products x 2 FLOP
    double fp32 = has_avx512 ? peak_gflops(peak_fma, 32) : NAN;   // 16 lanes x 2 FLOP
    double gbs = bench_memory_gbs();
    // One step's matmuls: 6 FLOP per parameter per token (forward, backward data, backward
    // weights), 256 tokens; attention's products are left out (under 1%). AdamW in bf16 reads
    // and writes back the fp32 master weight, m and v, reads the 16-bit gradient and writes the
    // 16-bit parameter: 28 bytes per parameter at the least; in fp32 the parameter is the master
    // weight and the gradient 4 bytes: 28 again.
    const double params = 124475904.0, flop = 6.0 * params * 256, bytes = 28.0 * params;
    printf("peak, every operand in registers: VDPBF16PS %.0f GFLOP/s, VFMADD (fp32) %.0f GFLOP/s%s\n", bf16, fp32,
           gemm_bf16_path_supported(GEMM_BF16_AMX) ? " (AMX tiles not measured)" : "");
    printf("memory, read and write in place: %.1f GB/s\n", gbs);
    // (scripts/bench.sh reads the two totals: the last field of each floor line)
    const double adamw = bytes / (gbs * 1e9);
    printf("floor of a d12 B=4 T=64 step, bf16: matmuls %.3fs at the bf16 peak + AdamW %.3fs at that bandwidth = %.3fs\n",
           flop / (bf16 * 1e9), adamw, flop / (bf16 * 1e9) + adamw);
    printf("floor of a d12 B=4 T=64 step, fp32: matmuls %.3fs at the fp32 peak + AdamW %.3fs at that bandwidth = %.3fs\n",
           flop / (fp32 * 1e9), adamw, flop / (fp32 * 1e9) + adamw);
}
#else
static void bench_floor(void) { printf("peak and floor: measured on x86-64 only\n"); }
#endif

// Path-major order (all shapes on one path, then the next, with a pause in between), so that one
// library's idle threads, which spin for a while after a call (OpenBLAS's and OpenMP's), do not
// steal a core from the next one's timing.
static int bench(int no_scalar, double seconds, const char *only_path, const char *only_shape) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    // columns: OpenBLAS sgemm and gemm_f32 (fp32 data), then the bf16 paths, fastest first
    const char *names[2 + NPATHS];
    GemmBf16Path paths[2 + NPATHS];  // GEMM_BF16_AUTO stands for sgemm here
    int np = 0;
    if (!only_path || !strcmp(only_path, "sgemm")) { paths[np] = GEMM_BF16_AUTO; names[np++] = "sgemm"; }
    if (gemm_f32_supported() && (!only_path || !strcmp(only_path, "f32"))) { paths[np] = PATH_F32; names[np++] = "f32"; }
    for (int p = NPATHS - 1; p >= 0; p--) {
        if (!gemm_bf16_path_supported(PATHS[p])) continue;
        if (no_scalar && PATHS[p] == GEMM_BF16_SCALAR) continue;
        if (only_path && strcmp(only_path, gemm_bf16_path_name(PATHS[p]))) continue;
        paths[np] = PATHS[p];
        names[np++] = gemm_bf16_path_name(PATHS[p]);
    }
    printf("GFLOP/s, best of repeated calls; %d OpenMP threads; OpenBLAS %s (core %s)\n", threads,
           OPENBLAS_VERSION, openblas_get_corename());
    double res[NBENCH][2 + NPATHS];
    for (int p = 0; p < np; p++) {
        for (int s = 0; s < NBENCH; s++) res[s][p] = NAN;
        struct timespec pause = {0, 300000000};
        nanosleep(&pause, NULL);
        for (int s = 0; s < NBENCH; s++) {
            const BenchShape *b = &BENCH[s];
            if (only_shape && !strstr(b->name, only_shape)) continue;
            int M = b->M, N = b->N, K = b->K;
            int lda = b->tA ? M : K, ldb = b->tB ? K : N;
            size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
            float *C = aligned_alloc(64, (nc * 4 + 63) / 64 * 64);
            double t;
            if (paths[p] == GEMM_BF16_AUTO || paths[p] == PATH_F32) {
                float *A = malloc(na * 4), *B = malloc(nb * 4);
                for (size_t i = 0; i < na; i++) A[i] = bf(rng_bf16());
                for (size_t i = 0; i < nb; i++) B[i] = bf(rng_bf16());
                size_t sb = paths[p] == PATH_F32 ? gemm_f32_scratch_bytes(b->tA, b->tB, M, N, K) : 1;
                void *scratch = malloc(sb);
                if (paths[p] == PATH_F32)
                    TIME_BEST(t, seconds, gemm_f32_ex(b->tA, b->tB, M, N, K, A, lda, B, ldb, 0.0f, C, N, scratch, sb));
                else
                    TIME_BEST(t, seconds, cblas_sgemm(CblasRowMajor, b->tA ? CblasTrans : CblasNoTrans,
                                                      b->tB ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A,
                                                      lda, B, ldb, 0.0f, C, N));
                free(A); free(B); free(scratch);
            } else {
                bf16_t *A = malloc(na * 2), *B = malloc(nb * 2);
                for (size_t i = 0; i < na; i++) A[i] = rng_bf16();
                for (size_t i = 0; i < nb; i++) B[i] = rng_bf16();
                size_t sb = gemm_bf16_scratch_bytes(M, N, K);  // the caller's buffer, as in training
                void *scratch = malloc(sb);
                TIME_BEST(t, seconds, gemm_bf16_ex(paths[p], b->tA, b->tB, M, N, K, A, lda, B, ldb,
                                                   0.0f, C, N, scratch, sb));
                free(A); free(B); free(scratch);
            }
            res[s][p] = t;
            free(C);
        }
    }
    printf("%-18s %-22s", "shape", "M x N x K");
    for (int p = 0; p < np; p++) printf(" %10s", names[p]);
    printf("\n");
    double step[2 + NPATHS] = {0};
    for (int s = 0; s < NBENCH; s++) {
        const BenchShape *b = &BENCH[s];
        if (only_shape && !strstr(b->name, only_shape)) continue;
        char dims[40];
        snprintf(dims, sizeof dims, "%dx%dx%d%s%s", b->M, b->N, b->K, b->tA ? " tA" : "", b->tB ? " tB" : "");
        printf("%-18s %-22s", b->name, dims);
        for (int p = 0; p < np; p++) {
            printf(" %10.0f", 2.0 * b->M * b->N * b->K / res[s][p] * 1e-9);
            step[p] += b->count * res[s][p];
        }
        printf("\n");
    }
    printf("%-41s", "matmul seconds per GPT-2 step (sum)");
    for (int p = 0; p < np; p++) printf(" %9.3fs", step[p]);
    printf("\n");
    if (!only_shape) bench_floor();
    return 0;
}

// gemm_bf16_acc16 is gemm_bf16_ex (beta 0) into fp32 followed by C16 = f32_to_bf16(C16 + that)
// (beta 1) or C16 = f32_to_bf16(that) (beta 0: the NaN, Inf and -0 in C16 are not read), and
// gemm_bf16_acc16_split the same with the flagged rows' fp32 sums stored in C32 instead and
// their C16 left (beta 1) or zeroed (beta 0), bit for bit: on every transposition, edges (sizes
// not multiples of 16 or 32), leading dimensions with padding (never read or written), NaN and
// Inf in C16 and in the products, signed zeros, 1 and 2 threads. K <= GEMM_BF16_KC except on
// AMX, where the K blocks' sums are the same anyway (the tiles carry them); K = 0 leaves C16 as
// it is (beta 1) or zeroes it (beta 0). Other betas are refused.
static void test_acc16(GemmBf16Path path) {
    static const int shapes[][3] = {{1, 1, 1}, {17, 33, 31}, {64, 96, 64}, {130, 5, 70}, {3 * 96, 96, 64},
                                    {96, 3 * 96, 64}, {70, 530, 256}, {45, 77, 900}};
    for (int s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        if (K > GEMM_BF16_KC && path != GEMM_BF16_AMX) continue;
        for (int t = 0; t < 4; t++) {
            int tA = t >> 1, tB = t & 1, pad = s % 2 ? 3 : 0, ldc = N + pad;
            int lda = (tA ? M : K) + pad, ldb = (tB ? K : N) + pad;
            bf16_t *A = tA ? alloc_mat(K, M, lda) : alloc_mat(M, K, lda);
            bf16_t *B = tB ? alloc_mat(N, K, ldb) : alloc_mat(K, N, ldb);
            if (s == 1) { A[0] = 0x7F80; B[0] = 0xFF80; }  // Inf products (and Inf - Inf = NaN)
            bf16_t *C16 = alloc_mat(M, N, ldc), *want = alloc_mat(M, N, ldc);
            C16[0] = 0x7F81; if (M * N > 2) { C16[1] = 0x8000; C16[2] = 0xFF80; }  // sNaN, -0, -Inf
            // A row of C whose products are all zero (its row of A is), and whose C16 holds bf16
            // subnormals: with beta 1 each sum is that subnormal, which must round to itself (an
            // epilogue that reads fp32 subnormals as zero, as VCVTNE2PS2BF16 does, fails here)
            if (M >= 4) {
                const int zr = 3;
                for (int k = 0; k < K; k++) A[tA ? (size_t)k * lda + zr : (size_t)zr * lda + k] = 0;
                for (int n = 0; n < N; n++) C16[(size_t)zr * ldc + n] = (bf16_t)((n % 2 ? 0x8000u : 0u) | (1u + (n * 37u) % 0x7Fu));
            }
            memcpy(want, C16, ((size_t)(M - 1) * ldc + N) * sizeof(bf16_t));
            float *P = malloc((size_t)M * N * sizeof(float));
            gemm_bf16_ex(path, tA, tB, M, N, K, A, lda, B, ldb, 0.0f, P, N, NULL, 0);
            const float beta = (float)((s + t) % 2); // each shape and transposition with one of them
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    bf16_t *w = want + (size_t)m * ldc + n;
                    *w = f32_to_bf16(beta != 0.0f ? bf16_to_f32(*w) + P[(size_t)m * N + n] : P[(size_t)m * N + n]);
                }
            for (int threads = 1; threads <= 2; threads++) {
                bf16_t *got = alloc_mat(M, N, ldc);
                memcpy(got, C16, ((size_t)(M - 1) * ldc + N) * sizeof(bf16_t));
#ifdef _OPENMP
                int saved = omp_get_max_threads();
                omp_set_num_threads(threads);
#endif
                CHECK(gemm_bf16_acc16(path, tA, tB, M, N, K, A, lda, B, ldb, beta, got, ldc, NULL, 0) == 0, "acc16 rc");
#ifdef _OPENMP
                omp_set_num_threads(saved);
#endif
                CHECK(memcmp(got, want, ((size_t)(M - 1) * ldc + N) * sizeof(bf16_t)) == 0,
                      "%s acc16 %dx%dx%d tA=%d tB=%d beta %g, %d threads: differs from gemm_bf16_ex + add",
                      gemm_bf16_path_name(path), M, N, K, tA, tB, beta, threads);
                free(got);
            }
            // split: flagged rows keep their C16 (beta 1) or get zeros (beta 0), and get the fp32
            // sums in C32; the rest as above
            uint8_t *split = malloc((size_t)M);
            for (int m = 0; m < M; m++) split[m] = (uint8_t)(rng_u64() % 3 == 0);
            bf16_t *got = alloc_mat(M, N, ldc);
            memcpy(got, C16, ((size_t)(M - 1) * ldc + N) * sizeof(bf16_t));
            float *C32 = malloc((size_t)M * (N + 1) * sizeof(float));
            for (size_t i = 0; i < (size_t)M * (N + 1); i++) C32[i] = C_SENTINEL;
            CHECK(gemm_bf16_acc16_split(path, tA, tB, M, N, K, A, lda, B, ldb, beta, got, ldc, split, C32, N + 1, NULL, 0) == 0,
                  "acc16_split rc");
            int ok = 1;
            for (int m = 0; m < M; m++) {
                if (split[m] && beta == 0.0f)
                    for (int n = 0; n < N; n++) ok &= got[(size_t)m * ldc + n] == 0;
                else ok &= memcmp(got + (size_t)m * ldc, (split[m] ? C16 : want) + (size_t)m * ldc, (size_t)N * sizeof(bf16_t)) == 0;
                if (m + 1 < M) ok &= memcmp(got + (size_t)m * ldc + N, C16 + (size_t)m * ldc + N, (size_t)pad * sizeof(bf16_t)) == 0;
                ok &= C32[(size_t)m * (N + 1) + N] == C_SENTINEL;
                if (split[m]) ok &= memcmp(C32 + (size_t)m * (N + 1), P + (size_t)m * N, (size_t)N * sizeof(float)) == 0;
                else for (int n = 0; n < N; n++) ok &= C32[(size_t)m * (N + 1) + n] == C_SENTINEL;
            }
            CHECK(ok, "%s acc16_split %dx%dx%d tA=%d tB=%d beta %g: wrong rows", gemm_bf16_path_name(path), M, N, K, tA, tB, beta);
            free(split); free(got); free(C32);
            free(A); free(B); free(C16); free(want); free(P);
        }
    }
    bf16_t a = 0x3F80, b = 0x3F80, c = 0x8000;
    CHECK(gemm_bf16_acc16(path, 0, 0, 1, 1, 0, &a, 1, &b, 1, 1.0f, &c, 1, NULL, 0) == 0 && c == 0x8000, "acc16 K = 0 changed C");
    CHECK(gemm_bf16_acc16(path, 0, 0, 1, 1, 0, &a, 1, &b, 1, 0.0f, &c, 1, NULL, 0) == 0 && c == 0, "acc16 K = 0 beta 0: C not 0");
    CHECK(gemm_bf16_acc16(path, 0, 0, 1, 1, 1, &a, 1, &b, 1, 1.0f, NULL, 1, NULL, 0) == -1, "acc16 C NULL");
    c = 0x4000;
    CHECK(gemm_bf16_acc16(path, 0, 0, 1, 1, 1, &a, 1, &b, 1, 0.5f, &c, 1, NULL, 0) == -1 && c == 0x4000, "acc16 beta 0.5 accepted");
    // the layer wrapper
    int Nt = 64, C = 96, OC = 3 * 96;
    bf16_t *dout = alloc_mat(Nt, OC, OC), *inp = alloc_mat(Nt, C, C), *x = alloc_mat(OC, C, C), *y = alloc_mat(OC, C, C);
    memcpy(y, x, (size_t)OC * C * sizeof(bf16_t));
    GemmBf16Ctx ctx = {path, NULL, 0};
    CHECK(gemm_bf16_backward_weight_acc16(&ctx, x, dout, inp, Nt, C, OC, 1.0f) == 0, "acc16 wrapper rc");
    gemm_bf16_acc16(path, 1, 0, OC, C, Nt, dout, OC, inp, C, 1.0f, y, C, NULL, 0);
    CHECK(memcmp(x, y, (size_t)OC * C * sizeof(bf16_t)) == 0, "%s backward-weight acc16 wrapper", gemm_bf16_path_name(path));
    free(dout); free(inp); free(x); free(y);
}

// gemm_bf16_linear_scratch_bytes serves each of a linear layer's products, with one thread or
// with the team, at every size: checked against each product's own scratch_bytes.
// A linear layer's products on the SIMD paths, given gemm_*_linear_scratch_bytes, allocate
// nothing of their own (the trainer sizes its workspace so, and the planner predicts it), and
// that size covers each product's exact need; the generic sizes cover every path.
static void linear_products(GemmBf16Path p, int N, int C, int OC, void *scratch, size_t bytes) {
    GemmBf16Ctx ctx = {p == PATH_F32 ? GEMM_BF16_AUTO : p, scratch, bytes};
    void *inp = alloc_for(p, N, C, C), *w = alloc_for(p, OC, C, C), *dout = alloc_for(p, N, OC, OC);
    float *out = malloc((size_t)N * OC * 4), *dinp = malloc((size_t)N * C * 4), *dw = malloc((size_t)OC * C * 4);
    CHECK(wrap_forward(p, &ctx, out, inp, w, NULL, N, C, OC, 0.0f) == 0 && wrap_backward_data(p, &ctx, dinp, dout, w, N, C, OC, 0.0f) == 0 &&
              wrap_backward_weight(p, &ctx, dw, dout, inp, N, C, OC, 1.0f) == 0,
          "%s linear products rc", path_name(p));
    if (p != PATH_F32)
        CHECK(gemm_bf16_backward_weight_acc16(&ctx, (bf16_t *)dw, dout, inp, N, C, OC, 0.0f) == 0, "acc16 rc");
    free(inp); free(w); free(dout); free(out); free(dinp); free(dw);
}
static void test_linear_scratch(void) {
    static const int sizes[] = {1, 5, 31, 32, 33, 64, 100, 256, 768, 1000, 3072, 50304};
    const int ns = (int)(sizeof sizes / sizeof sizes[0]);
    int threads = zc_gb_threads();
    for (int a = 0; a < ns; a++)
        for (int b = 0; b < ns; b++)
            for (int c = 0; c < ns; c++) {
                int N = sizes[a], C = sizes[b], OC = sizes[c];
                size_t have = gemm_bf16_linear_scratch_bytes(N, C, OC, threads), have32 = gemm_f32_linear_scratch_bytes(N, C, OC, threads);
                size_t need = gemm_bf16_scratch_bytes_t(0, 1, N, OC, C), x;
                if ((x = gemm_bf16_scratch_bytes_t(0, 0, N, C, OC)) > need) need = x;
                if ((x = gemm_bf16_scratch_bytes_t(1, 0, OC, C, N)) > need) need = x;
                if ((x = zc_gb_scratch(2, 1, 1, 0, OC, C, N, threads)) > need) need = x;
                size_t need32 = gemm_f32_scratch_bytes(0, 1, N, OC, C);
                if ((x = gemm_f32_scratch_bytes(0, 0, N, C, OC)) > need32) need32 = x;
                if ((x = gemm_f32_scratch_bytes(1, 0, OC, C, N)) > need32) need32 = x;
                CHECK(have >= need && need <= gemm_bf16_scratch_bytes(N, C, OC) + gemm_bf16_scratch_bytes(N, OC, C) + gemm_bf16_acc16_scratch_bytes(OC, C, N),
                      "linear scratch N=%d C=%d OC=%d: %zu bytes, a product needs %zu", N, C, OC, have, need);
                CHECK(have32 >= need32, "fp32 linear scratch N=%d C=%d OC=%d: %zu bytes, a product needs %zu", N, C, OC, have32, need32);
                CHECK(gemm_bf16_scratch_bytes_t(0, 0, N, C, OC) <= gemm_bf16_scratch_bytes(N, C, OC), "exact over generic");
            }
    // the products themselves: in-place reads (M, K multiples of 32: the backward-data product's
    // dout is not packed, and its scratch leaves the resident buffer out; except fp32 rows of a
    // 4 KB multiple, K = 1024), ragged sizes, a resident side over the L2 budget, on every SIMD path
    static const int shapes[][3] = {{64, 96, 288}, {40, 100, 70}, {64, 64, 4000}, {256, 768, 768}, {64, 96, 1024}};
    for (int q = 0; q < (int)(sizeof shapes / sizeof shapes[0]); q++) {
        int N = shapes[q][0], C = shapes[q][1], OC = shapes[q][2];
        for (int p = 0; p <= NPATHS; p++) {
            GemmBf16Path path = p == NPATHS ? PATH_F32 : PATHS[p];
            if (path == GEMM_BF16_SCALAR || !path_supported(path)) continue;
            size_t bytes = path == PATH_F32 ? gemm_f32_linear_scratch_bytes(N, C, OC, threads)
                                            : gemm_bf16_linear_scratch_bytes(N, C, OC, threads);
            void *scratch = malloc(bytes);
            long before = gb_mallocs;
            linear_products(path, N, C, OC, scratch, bytes);
            CHECK(gb_mallocs == before, "%s N=%d C=%d OC=%d: %ld allocations with the linear scratch (%zu bytes)", path_name(path), N,
                  C, OC, gb_mallocs - before, bytes);
            free(scratch);
        }
    }
    // and a call short of scratch allocates its own (the count sees allocations)
    long before = gb_mallocs;
    if (path_supported(PATH_F32)) linear_products(PATH_F32, 64, 96, 288, NULL, 0);
    else linear_products(GEMM_BF16_SCALAR, 64, 96, 288, NULL, 0);
    CHECK(gb_mallocs > before, "a call without scratch did not allocate (the count sees nothing)");
}

int main(int argc, char **argv) {
    int quick = 0, do_bench = 0, no_scalar = 0;
    const char *only_path = NULL, *only_shape = NULL;
    double seconds = 0.5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--bench")) do_bench = 1;
        else if (!strcmp(argv[i], "--floor")) do_bench = 2;
        else if (!strcmp(argv[i], "--no-scalar")) no_scalar = 1;
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--path") && i + 1 < argc) only_path = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = argv[++i];
        else { fprintf(stderr, "usage: %s [--quick] | --floor | --bench [--no-scalar] [--seconds S] [--path NAME] [--shape SUBSTRING]\n", argv[0]); return 2; }
    }
#ifdef _OPENMP
    // Start the OpenMP team before anything asks for AMX permission: the permission is per
    // process, so threads that already exist must be able to use the tiles too.
    int team = 0;
#pragma omp parallel reduction(+ : team)
    team += 1;
    printf("openmp threads: %d\n", team);
#endif
    printf("paths: best=%s", gemm_bf16_path_name(gemm_bf16_best_path()));
    for (int p = 0; p < NPATHS; p++)
        printf(" %s=%s", gemm_bf16_path_name(PATHS[p]), gemm_bf16_path_supported(PATHS[p]) ? "yes" : "no");
    printf("\n");
    if (do_bench) openblas_pick_core(argv); // as train_gpt_cpu does: a fair comparison
    if (do_bench == 2) { bench_floor(); return 0; }
    if (do_bench) return bench(no_scalar, seconds, only_path, only_shape);

    double t0 = now();
    test_args();
    test_linear_scratch();
    test_shapes(quick);
    printf("shapes: all paths against the reference (%.2fs)\n", now() - t0);
    if (gemm_f32_supported()) { // gemm_f32: the same cases with fp32 operands, and its own checks
        double t1 = now();
        long f0 = n_fail;
        cases_f32 = 1;
        test_shapes(quick);
        cases_f32 = 0;
        test_determinism(PATH_F32);
        test_transposed_a(PATH_F32);
        test_specials(PATH_F32);
        test_streaming_forward(PATH_F32);
        test_wrappers(PATH_F32);
        printf("gemm_f32: %s (%.2fs more)\n", n_fail == f0 && path_fail[NPATHS] == 0 ? "ok" : "FAILED", now() - t1);
    } else {
        printf("gemm_f32: not supported on this machine (no AVX-512), not tested\n");
    }
    for (int p = 0; p < NPATHS; p++) {
        GemmBf16Path path = PATHS[p];
        if (!gemm_bf16_path_supported(path)) {
            printf("path %s: not supported on this machine, not tested\n", gemm_bf16_path_name(path));
            continue;
        }
        long f0 = n_fail;
        double t1 = now();
        test_determinism(path);
        test_transposed_a(path);
        test_specials(path);
        if (path != GEMM_BF16_SCALAR) test_streaming(path); // (the direct forward: AVX512-BF16 and AMX only)
        test_wrappers(path);
        test_forward_round(path);
        test_acc16(path);
        printf("path %s: %s (%.2fs more)\n", gemm_bf16_path_name(path),
               n_fail == f0 && path_fail[p] == 0 ? "ok" : "FAILED", now() - t1);
    }
    // the default entry point picks the best path
    {
        int M = 45, N = 70, K = 99;
        bf16_t *A = alloc_mat(M, K, K), *B = alloc_mat(K, N, N);
        float *x = malloc((size_t)M * N * 4), *y = malloc((size_t)M * N * 4);
        CHECK(gemm_bf16(0, 0, M, N, K, A, K, B, N, 0.0f, x, N) == 0, "gemm_bf16 rc");
        gemm_bf16_ex(gemm_bf16_best_path(), 0, 0, M, N, K, A, K, B, N, 0.0f, y, N, NULL, 0);
        CHECK(memcmp(x, y, (size_t)M * N * 4) == 0, "gemm_bf16 is not the best path");
        free(A); free(B); free(x); free(y);
    }
    printf("%ld checks, %ld failed (%.2fs)\n", n_checks, n_fail, now() - t0);
    return n_fail ? 1 : 0;
}
