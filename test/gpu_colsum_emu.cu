// gpu/colsum.cuh's column sums and gpu/kernels.cuh's gradient-norm kernels on the CUDA emulator
// (test_gpu_colsum.sh): for each case, random inputs, the trainer's own launch code
// (gpu/matmul.cuh's column_grads, train_gpt.cu's sumsq + sum_partials), and a dump of inputs and
// outputs that test/colsum_check.py compares with an fp64 numpy reference written from the
// contracts. Cases: matmul bias gradients and LayerNorm backwards at shapes with partial tiles,
// C not a multiple of a slab (256 or 2048 columns), N not a multiple of the row range, one row,
// an unaligned dout (the V = 1 kernels), C % VEC != 0, several SM counts (the grid); the norm
// over lengths with a short last chunk, aligned and not. Here, without numpy: each column sum
// repeated gives the same bits; the norm of an unaligned copy gives the aligned one's bits; the
// scratch is exactly column_scratch_floats (column_grads refuses a grid it would overflow).
// Output: DIR/cases.bin (see colsum_check.py); prints "gpu_colsum: N cases, M problems".
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <vector>
#include "gpu/floatx.cuh"
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "gpu/common.cuh"
#include "gpu/profile.cuh"
#include "gpu/kernels.cuh"
#include "gpu/matmul.cuh"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform() { // xorshift64*, in (0, 1)
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return ((rng * 2685821657736338717ull >> 11) + 0.5) / 9007199254740992.0;
}
static float sym(float a) { return (float)((2.0 * uniform() - 1.0) * a); }

static FILE *out;
static int problems = 0, cases = 0;
static void put_i(int v) { fwrite(&v, sizeof(v), 1, out); }
// n floatX (device) widened to fp32 (exact) into the dump
static void put_x(const floatX *d, size_t n) {
    std::vector<floatX> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = zc_load(h.data(), i, FLOATX_DTYPE);
    fwrite(f.data(), sizeof(float), n, out);
}
static void put_f(const float *h, size_t n) { fwrite(h, sizeof(float), n, out); }
// n random floatX on the device at element offset `off` of a fresh allocation (off 1: not 16-byte aligned)
static floatX *dev_rand(size_t n, float a, int off, floatX **base) {
    std::vector<floatX> h(n + off);
    for (size_t i = 0; i < n + off; i++) zc_store(h.data(), i, sym(a), FLOATX_DTYPE);
    CUDA_CHECK(cudaMalloc((void **)base, (n + off) * sizeof(floatX)));
    CUDA_CHECK(cudaMemcpy(*base, h.data(), (n + off) * sizeof(floatX), cudaMemcpyHostToDevice));
    return *base + off;
}
static bool same_bits(const floatX *a, const floatX *b, size_t n) {
    std::vector<floatX> x(n), y(n);
    CUDA_CHECK(cudaMemcpy(x.data(), a, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(y.data(), b, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    return memcmp(x.data(), y.data(), n * sizeof(floatX)) == 0;
}

// One column-sum case: kind 0 bias (db += column sums of dout), 1 LayerNorm backward.
// Record: kind, N, C, sm, off, vec; then dout (N,C); [x (N,C), w (C), mean (N), rstd (N), dinp0 (N,C),
// dw0 (C)]; db0 (C); then the results: [dinp (N,C), dw (C)]; db (C).
static void column_case(Gpu *gpu, int ln, int N, int C, int sm, int off) {
    cases++;
    gpu->sm_count = sm;
    GpuKernels kc;
    memset(&kc, 0, sizeof(kc));
    kc.gpu = gpu;
    kc.scratch_floats = column_scratch_floats(sm, N, C, ln);
    CUDA_CHECK(cudaMalloc((void **)&kc.scratch, kc.scratch_floats * sizeof(float)));
    size_t NC = (size_t)N * C;
    floatX *b_dout, *b_x = NULL, *b_w = NULL, *b_dinp = NULL, *b_dw = NULL, *b_db, *b_db2, *b_dw2 = NULL, *b_dinp2 = NULL;
    floatX *dout = dev_rand(NC, 1.0f, off, &b_dout), *x = NULL, *w = NULL, *dinp = NULL, *dw = NULL, *dinp2 = NULL, *dw2 = NULL;
    floatX *db = dev_rand(C, 1.0f, off, &b_db), *db2;
    float *mean = NULL, *rstd = NULL;
    std::vector<float> hm(N), hr(N);
    if (ln) {
        x = dev_rand(NC, 2.0f, off, &b_x);
        w = dev_rand(C, 1.5f, off, &b_w);
        dinp = dev_rand(NC, 1.0f, off, &b_dinp);
        dw = dev_rand(C, 1.0f, off, &b_dw);
        for (int n = 0; n < N; n++) { hm[n] = sym(0.5f); hr[n] = 0.5f + (float)uniform(); }
        CUDA_CHECK(cudaMalloc((void **)&mean, N * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&rstd, N * sizeof(float)));
        CUDA_CHECK(cudaMemcpy(mean, hm.data(), N * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(rstd, hr.data(), N * sizeof(float), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMalloc((void **)&b_dinp2, (NC + off) * sizeof(floatX)));
        CUDA_CHECK(cudaMalloc((void **)&b_dw2, (C + off) * sizeof(floatX)));
        dinp2 = b_dinp2 + off; dw2 = b_dw2 + off;
        CUDA_CHECK(cudaMemcpy(dinp2, dinp, NC * sizeof(floatX), cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(dw2, dw, C * sizeof(floatX), cudaMemcpyDeviceToDevice));
    }
    CUDA_CHECK(cudaMalloc((void **)&b_db2, (C + off) * sizeof(floatX)));
    db2 = b_db2 + off;
    CUDA_CHECK(cudaMemcpy(db2, db, C * sizeof(floatX), cudaMemcpyDeviceToDevice));
    int vec = C % VEC == 0 && off == 0;
    put_i(ln); put_i(N); put_i(C); put_i(sm); put_i(off); put_i(vec);
    put_x(dout, NC);
    if (ln) { put_x(x, NC); put_x(w, C); put_f(hm.data(), N); put_f(hr.data(), N); put_x(dinp, NC); put_x(dw, C); }
    put_x(db, C);
    column_grads(&kc, dinp, dw, db, dout, x, w, mean, rstd, N, C);
    column_grads(&kc, dinp2, dw2, db2, dout, x, w, mean, rstd, N, C); // again, from the same state
    if (ln) { put_x(dinp, NC); put_x(dw, C); }
    put_x(db, C);
    if (!same_bits(db, db2, C) || (ln && (!same_bits(dw, dw2, C) || !same_bits(dinp, dinp2, NC)))) {
        fprintf(stderr, "PROBLEM: %s N=%d C=%d sm=%d off=%d: a second call gave other bits\n", ln ? "layernorm" : "bias", N, C, sm, off);
        problems++;
    }
    void *bufs[] = {b_dout, b_x, b_w, b_dinp, b_dw, b_db, b_db2, b_dw2, b_dinp2, mean, rstd, kc.scratch};
    for (void *p : bufs)
        if (p) CUDA_CHECK(cudaFree(p));
}

// The gradient norm's kernels as gpt2_grad_norm launches them, over units of the given lengths:
// record: kind 2, units, lengths, the values (fp32), then the sum of squares (double, as 2 floats'
// worth of bytes: written raw).
static void norm_case(Gpu *gpu, const std::vector<size_t> &ns, int off) {
    cases++;
    std::vector<floatX *> g(ns.size()), base(ns.size()), g2(ns.size()), base2(ns.size());
    size_t total_blocks = 0;
    for (size_t u = 0; u < ns.size(); u++) {
        g[u] = dev_rand(ns[u], (float)(u + 1), 0, &base[u]);
        CUDA_CHECK(cudaMalloc((void **)&base2[u], (ns[u] + 2) * sizeof(floatX)));
        g2[u] = base2[u] + 1; // the same values, not 16-byte aligned
        if (ns[u]) CUDA_CHECK(cudaMemcpy(g2[u], g[u], ns[u] * sizeof(floatX), cudaMemcpyDeviceToDevice));
        total_blocks += norm_blocks(ns[u]);
    }
    double *partials, *sum;
    CUDA_CHECK(cudaMalloc((void **)&partials, ns.size() * NORM_BLOCKS * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void **)&sum, 2 * sizeof(double)));
    for (int pass = 0; pass < 2; pass++) {
        size_t o = 0;
        for (size_t u = 0; u < ns.size(); u++) {
            unsigned blocks = norm_blocks(ns[u]);
            sumsq_kernel<<<blocks, NORM_THREADS, 0, gpu->compute>>>(partials + o, pass ? g2[u] : g[u], ns[u]);
            LAUNCH_CHECK();
            o += blocks;
        }
        sum_partials_kernel<<<1, NORM_THREADS, 0, gpu->compute>>>(sum + pass, partials, (int)o);
        LAUNCH_CHECK();
    }
    double h[2];
    CUDA_CHECK(cudaMemcpy(h, sum, sizeof(h), cudaMemcpyDeviceToHost));
    if (memcmp(&h[0], &h[1], sizeof(double))) {
        fprintf(stderr, "PROBLEM: norm over %zu units: unaligned %.17g, aligned %.17g\n", ns.size(), h[1], h[0]);
        problems++;
    }
    put_i(2); put_i((int)ns.size());
    for (size_t n : ns) put_i((int)n);
    for (size_t u = 0; u < ns.size(); u++) put_x(g[u], ns[u]);
    fwrite(&h[0], sizeof(double), 1, out);
    for (size_t u = 0; u < ns.size(); u++) { CUDA_CHECK(cudaFree(base[u])); CUDA_CHECK(cudaFree(base2[u])); }
    CUDA_CHECK(cudaFree(partials)); CUDA_CHECK(cudaFree(sum));
    (void)off; (void)total_blocks;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s OUT.bin\n", argv[0]); return 2; }
    out = fopen(argv[1], "wb");
    if (!out) { fprintf(stderr, "error: cannot write %s\n", argv[1]); return 1; }
    Gpu gpu;
    memset(&gpu, 0, sizeof(gpu));
    CUDA_CHECK(cudaGetDeviceProperties(&gpu.prop, 0));
    CUDA_CHECK(cudaStreamCreate(&gpu.compute));
    put_i((int)sizeof(floatX)); put_i(FLOATX_DTYPE == ZC_FP16);
    // bias: (N, C, SMs, offset)
    const int bias[][4] = {{1, 8, 2, 0},    {37, 24, 132, 0}, {300, 776, 5, 0}, {1001, 264, 132, 0}, {517, 520, 2, 0},
                           {77, 13, 3, 0},  {250, 72, 132, 1}, {64, 256, 1, 0},  {129, 40, 7, 1},     {2000, 48, 132, 0},
                           // several full tiles per warp, then a partial one; the last range shorter
                           {700, 40, 1, 1}, {1500, 264, 3, 0}};
    for (auto &b : bias) column_case(&gpu, 0, b[0], b[1], b[2], b[3]);
    const int ln[][4] = {{1, 8, 2, 0}, {50, 768, 5, 0}, {45, 2056, 2, 0}, {33, 20, 3, 0}, {129, 160, 132, 0}, {70, 96, 2, 1}, {300, 20, 2, 0}};
    for (auto &b : ln) column_case(&gpu, 1, b[0], b[1], b[2], b[3]);
    norm_case(&gpu, {1}, 0);
    norm_case(&gpu, {7, 8, 9, 0, 1000003}, 0);
    norm_case(&gpu, {(size_t)NORM_THREADS * NORM_UNROLL * VEC * 3 + 5, 4096, 33}, 0);
    // a full grid, each thread through the unrolled loop twice and then the rest
    norm_case(&gpu, {(size_t)NORM_BLOCKS * NORM_THREADS * NORM_UNROLL * VEC * 2 + 12345, 77}, 0);
    fclose(out);
    printf("gpu_colsum: %d cases, %d problems\n", cases, problems);
    return problems ? 1 : 0;
}
