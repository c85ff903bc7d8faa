// test/gpu/bench_kernels.cu: times the GPU trainer's memory-bound kernels on a GPU (issue 39) at
// GPT-2 124M's shapes, B=16, T=1024 (N = 16384 rows, C = 768, 12 heads of 64), bf16: the LayerNorm
// backward (input gradient and dw/db), the bias gradients of the qkv, fc and projection matmuls,
// the elementwise kernels, the LayerNorm forward, the encoder and flash attention, each as
// train_gpt.cu launches it. Built with BENCH_BEFORE=<commit> (`make test/bin/bench_gpu_kernels
// BENCH_BEFORE=4b98c00`) it also times that commit's kernels (gpu/kernels.cuh and
// gpu/flash_attention.cuh as they were there, extracted with git show, launched as that commit's
// train_gpt.cu did) on the same data, and compares their outputs with the current kernels'.
// A median of BENCH_REPS timed launches (CUDA events) after warm-ups; inputs random, not zeros.
// Needs no MPI, NCCL or cuBLASLt at run time (nothing here calls them; CUDA's runtime is linked
// statically): the binary built on a machine without a GPU runs on one with just the driver
// (`test/bin/bench_gpu_kernels [reps]`). Prints one line per kernel: time, the bytes it must move
// at least (each input read once, each output written once) and those bytes over the time; with
// BENCH_BEFORE, how many output elements differ from the old kernels' and by how much.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <cublasLt.h>
typedef __nv_bfloat16 floatX;
#define GPU_PRECISION_BF16 1
#define FLOATX_CUDA CUDA_R_16BF
#define FLOATX_DTYPE ZC_BF16
#define GPT2_FLOATX floatX
// gpu/common.cuh's error path names the MPI rank; here there is one process and no MPI.
#define MPI_COMM_WORLD 0
static int MPI_Initialized(int *flag) { *flag = 0; return 0; }
static int MPI_Comm_rank(int, int *rank) { *rank = 0; return 0; }
static int MPI_Abort(int, int code) { exit(code); }
#include "core/gpt2.h"
#include "core/optimizer.h"
#define GPU_FLASH_MAX_HS 64 // gpu/layout.h's (it brings the planner along)
#include "gpu/common.cuh"
#include "gpu/profile.cuh" // KSpan, which gpu/matmul.cuh's wrappers use
// The kernels in a namespace of their own, so that the old ones beside them (below) do not meet
// them through argument-dependent lookup (floatX is a global type).
namespace now {
#include "gpu/kernels.cuh"
#include "gpu/flash_attention.cuh"
#include "gpu/colsum.cuh"
} // namespace now
using namespace now;
#include "gpu/matmul.cuh" // column_grads (its kernels.cuh include is done; MatmulPlans is common.cuh's global)
#ifdef BENCH_BEFORE
namespace before {
#undef GPU_KERNELS_CUH
#include "bench_before/gpu/kernels.cuh"
#undef GPU_FLASH_ATTENTION_CUH
#include "bench_before/gpu/flash_attention.cuh"
} // namespace before
#endif

#define CK(x) CUDA_CHECK(x)
static int reps = 20;
static cudaStream_t st;

// Deterministic pseudo-random fill: x[i] = lo + (hi - lo) * u(i, seed).
static __global__ void fill_kernel(floatX *x, size_t n, float lo, float hi, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed * 2246822519u;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
        x[i] = __float2bfloat16_rn(lo + (hi - lo) * (h >> 8) * (1.0f / 16777216.0f));
    }
}
static floatX *rnd(size_t n, float lo, float hi, unsigned seed) {
    floatX *p;
    CK(cudaMalloc(&p, n * sizeof(floatX)));
    fill_kernel<<<1024, 256, 0, st>>>(p, n, lo, hi, seed);
    CK(cudaGetLastError());
    return p;
}
template <class F> static float time_ms(F launch) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) launch();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, st));
        launch();
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaGetLastError());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}
static void row(const char *name, float ms, double bytes) {
    printf("%-52s %9.1f us %9.1f MB %7.0f GB/s\n", name, ms * 1e3, bytes / 1e6, bytes / (ms * 1e-3) / 1e9);
    fflush(stdout);
}
#ifdef BENCH_BEFORE
// max |a - b| / max |a| and the count of elements that differ, over n floatX
static void compare(const char *what, const floatX *a, const floatX *b, size_t n) {
    std::vector<floatX> ha(n), hb(n);
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(ha.data(), a, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), b, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    double md = 0, ma = 0;
    size_t diff = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        float x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        if (!std::isfinite(x) || !std::isfinite(y)) { bad++; continue; }
        md = std::max(md, (double)fabsf(x - y));
        ma = std::max(ma, (double)fabsf(x));
        diff += memcmp(&ha[i], &hb[i], sizeof(floatX)) != 0;
    }
    printf("  compare %-40s %zu of %zu elements differ, max |diff| / max |before| %.2e%s\n", what, diff, n,
           ma > 0 ? md / ma : md, bad ? " NON-FINITE" : "");
}
static void copy(floatX *dst, const floatX *src, size_t n) { CK(cudaMemcpyAsync(dst, src, n * sizeof(floatX), cudaMemcpyDeviceToDevice, st)); }
#endif

int main(int argc, char **argv) {
    if (argc > 1) reps = atoi(argv[1]);
    const int B = 16, T = 1024, C = 768, NH = 12, N = B * T, Vp = 50304;
    const size_t NC = (size_t)N * C;
    static Gpu gpu;
    CK(cudaGetDeviceProperties(&gpu.prop, 0));
    gpu.sm_count = gpu.prop.multiProcessorCount;
    CK(cudaStreamCreate(&st));
    gpu.compute = st;
    GpuKernels kc;
    memset(&kc, 0, sizeof(kc));
    kc.gpu = &gpu;
    kc.scratch_floats = (size_t)4 << 20;
    CK(cudaMalloc(&kc.scratch, kc.scratch_floats * sizeof(float)));
    printf("%s, %d SMs; B=%d T=%d C=%d NH=%d bf16; median of %d launches\n", gpu.prop.name, gpu.sm_count, B, T, C, NH, reps);

    // ---- LayerNorm: forward (for mean, rstd), backward
    floatX *x = rnd(NC, -2, 2, 1), *w = rnd(C, 0.5f, 1.5f, 2), *bb = rnd(C, -0.5f, 0.5f, 3), *dout = rnd(NC, -1, 1, 4);
    floatX *dinp0 = rnd(NC, -1, 1, 5), *dinp = rnd(NC, 0, 0, 0), *ln = rnd(NC, 0, 0, 0), *dw0 = rnd(C, -1, 1, 6),
           *db0 = rnd(C, -1, 1, 7), *dw = rnd(C, 0, 0, 0), *db = rnd(C, 0, 0, 0);
    float *mean, *rstd;
    CK(cudaMalloc(&mean, N * sizeof(float)));
    CK(cudaMalloc(&rstd, N * sizeof(float)));
    auto ln_fwd = [&] { layernorm_forward_kernel<VEC><<<ceil_div(N, 8), 256, 0, st>>>(ln, mean, rstd, x, w, bb, N, C); };
    double ln_fwd_bytes = 2.0 * NC * 2 + 8.0 * N;
    row("layernorm_forward (16-byte packs)", time_ms(ln_fwd), ln_fwd_bytes);
    ln_fwd();
    double ln_bytes = 4.0 * NC * 2 + 8.0 * N; // dout, x, dinp read + dinp written; mean, rstd
    auto ln_bwd = [&] { column_grads(&kc, dinp, dw, db, dout, x, w, mean, rstd, N, C); };
    row("layernorm_backward: column_partials + finish", time_ms(ln_bwd), ln_bytes);
    for (int per_sm = 1; per_sm <= 8; per_sm *= 2) { // the partials kernel alone, other grids
        int want = gpu.sm_count * per_sm, rows = (int)(ceil_div(ceil_div(N, want), CS_TILE) * CS_TILE), parts = (int)ceil_div(N, rows);
        char name[96];
        snprintf(name, sizeof(name), "  column_partials_kernel alone, %d blocks/SM (%d)", per_sm, parts);
        row(name, time_ms([&] {
                column_partials_kernel<VEC><<<dim3(parts, 1), CS_LN_THREADS, 0, st>>>(kc.scratch, dinp, dout, x, w, mean, rstd, N, C, rows);
            }), ln_bytes + 4.0 * parts * 2 * C);
    }
#ifdef BENCH_BEFORE
    floatX *dinp_b = rnd(NC, 0, 0, 0), *dw_b = rnd(C, 0, 0, 0), *db_b = rnd(C, 0, 0, 0);
    auto ln_bwd_before = [&] {
        before::layernorm_backward_input_kernel<<<ceil_div(N, 8), 256, 0, st>>>(dinp_b, dout, x, w, mean, rstd, N, C);
        before::column_grads_kernel<<<ceil_div(C, 32), dim3(32, 32), 0, st>>>(dw_b, db_b, dout, x, mean, rstd, N, C);
    };
    row("before: layernorm_backward_input + column_grads", time_ms(ln_bwd_before), ln_bytes);
    row("  before: layernorm_backward_input_kernel alone", time_ms([&] {
            before::layernorm_backward_input_kernel<<<ceil_div(N, 8), 256, 0, st>>>(dinp_b, dout, x, w, mean, rstd, N, C);
        }), ln_bytes);
    row("  before: column_grads_kernel alone (C/32 blocks)", time_ms([&] {
            before::column_grads_kernel<<<ceil_div(C, 32), dim3(32, 32), 0, st>>>(dw_b, db_b, dout, x, mean, rstd, N, C);
        }), 2.0 * NC * 2);
    row("before: layernorm_forward", time_ms([&] {
            before::layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, st>>>(dinp_b, mean, rstd, x, w, bb, N, C);
        }), ln_fwd_bytes);
    // the same call from the same state: dinp, dw, db
    copy(dinp, dinp0, NC); copy(dw, dw0, C); copy(db, db0, C);
    copy(dinp_b, dinp0, NC); copy(dw_b, dw0, C); copy(db_b, db0, C);
    ln_bwd();
    ln_bwd_before();
    compare("layernorm_backward dinp", dinp_b, dinp, NC);
    compare("layernorm_backward dw", dw_b, dw, C);
    compare("layernorm_backward db", db_b, db, C);
    before::layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, st>>>(dinp_b, mean, rstd, x, w, bb, N, C);
    ln_fwd();
    compare("layernorm_forward out", dinp_b, ln, NC);
#endif

    // ---- bias gradients: column sums of dout (N, OC)
    int ocs[3] = {C, 3 * C, 4 * C};
    floatX *big = rnd((size_t)N * 4 * C, -1, 1, 8), *dbias = rnd(4 * C, 0, 0, 0), *dbias0 = rnd(4 * C, -1, 1, 9);
    for (int k = 0; k < 3; k++) {
        int OC = ocs[k];
        char name[96];
        snprintf(name, sizeof(name), "bias grad OC=%d: column_partials + finish", OC);
        row(name, time_ms([&] { column_grads(&kc, NULL, NULL, dbias, big, NULL, NULL, NULL, NULL, N, OC); }), (double)N * OC * 2);
        for (int per_sm = 2; per_sm <= 4; per_sm *= 2) {
            ColumnGrid g = column_grid(gpu.sm_count, N, OC, VEC, 0);
            int want = gpu.sm_count * per_sm / g.slabs, rows = (int)(ceil_div(ceil_div(N, want), CS_BIAS_WARPS) * CS_BIAS_WARPS),
                parts = (int)ceil_div(N, rows);
            snprintf(name, sizeof(name), "  bias_partials_kernel alone, %d blocks/SM (%d x %d)", per_sm, parts, g.slabs);
            row(name, time_ms([&] {
                    bias_partials_kernel<VEC><<<dim3(parts, g.slabs), CS_BIAS_WARPS * WARP, 0, st>>>(kc.scratch, big, N, OC, rows);
                }), (double)N * OC * 2 + 4.0 * parts * OC);
        }
#ifdef BENCH_BEFORE
        floatX *dbias_b = dinp_b; // scratch of the right type
        snprintf(name, sizeof(name), "before: bias grad OC=%d: column_grads (OC/32 blocks)", OC);
        row(name, time_ms([&] { before::column_grads_kernel<<<ceil_div(OC, 32), dim3(32, 32), 0, st>>>(NULL, dbias_b, big, NULL, NULL, NULL, N, OC); }),
            (double)N * OC * 2);
        copy(dbias, dbias0, OC); copy(dbias_b, dbias0, OC);
        column_grads(&kc, NULL, NULL, dbias, big, NULL, NULL, NULL, NULL, N, OC);
        before::column_grads_kernel<<<ceil_div(OC, 32), dim3(32, 32), 0, st>>>(NULL, dbias_b, big, NULL, NULL, NULL, N, OC);
        snprintf(name, sizeof(name), "bias grad OC=%d", OC);
        compare(name, dbias_b, dbias, OC);
#endif
    }

    // ---- the gradient norm's sum of squares (train_gpt.cu's gpt2_grad_norm over one unit), N*4C elements
    {
        size_t n = (size_t)N * 4 * C;
        double *parts_d;
        CK(cudaMalloc(&parts_d, (NORM_BLOCKS + 1) * sizeof(double)));
        row("gradient norm: sumsq + sum_partials (N*4C)", time_ms([&] {
                sumsq_kernel<<<norm_blocks(n), NORM_THREADS, 0, st>>>(parts_d, big, n);
                sum_partials_kernel<<<1, NORM_THREADS, 0, st>>>(parts_d + NORM_BLOCKS, parts_d, (int)norm_blocks(n));
            }), (double)n * 2);
    }

    // ---- elementwise (the wrappers' launches) and the encoder
    size_t n4 = (size_t)N * 4 * C;
    floatX *a4 = rnd(n4, -4, 4, 10), *o4 = rnd(n4, 0, 0, 0), *o4b = rnd(n4, 0, 0, 0), *r1 = rnd(NC, -1, 1, 11), *o1 = rnd(NC, 0, 0, 0);
    row("residual_forward (N*C)", time_ms([&] { residual_forward_kernel<VEC><<<grid_for(&gpu, NC / VEC, 256), 256, 0, st>>>(o1, x, r1, NC); }), 3.0 * NC * 2);
    row("gelu_forward (N*4C)", time_ms([&] { gelu_forward_kernel<VEC><<<grid_for(&gpu, n4 / VEC, 256), 256, 0, st>>>(o4, a4, n4); }), 2.0 * n4 * 2);
    row("gelu_backward (N*4C, out of place)", time_ms([&] { gelu_backward_kernel<VEC><<<grid_for(&gpu, n4 / VEC, 256), 256, 0, st>>>(o4, a4, big, n4); }), 3.0 * n4 * 2);
    floatX *wte = rnd((size_t)Vp * C, -1, 1, 12), *wpe = rnd((size_t)T * C, -1, 1, 13);
    std::vector<int> tok(N);
    for (int i = 0; i < N; i++) tok[i] = (int)((i * 2654435761u) % 50257u);
    int *dtok;
    CK(cudaMalloc(&dtok, N * sizeof(int)));
    CK(cudaMemcpy(dtok, tok.data(), N * sizeof(int), cudaMemcpyHostToDevice));
    row("encoder_forward", time_ms([&] { encoder_forward_kernel<VEC><<<grid_for(&gpu, NC / VEC, 256), 256, 0, st>>>(o1, dtok, wte, wpe, N, T, C); }),
        2.0 * NC * 2 + (double)T * C * 2 + 4.0 * N);
#ifdef BENCH_BEFORE
    floatX *o1b = dinp_b;
    row("before: residual_forward", time_ms([&] { before::residual_forward_kernel<<<grid_for(&gpu, NC, 256), 256, 0, st>>>(o1b, x, r1, NC); }), 3.0 * NC * 2);
    compare("residual_forward", o1b, o1, NC);
    row("before: gelu_forward", time_ms([&] { before::gelu_forward_kernel<<<grid_for(&gpu, n4, 256), 256, 0, st>>>(o4b, a4, n4); }), 2.0 * n4 * 2);
    gelu_forward_kernel<VEC><<<grid_for(&gpu, n4 / VEC, 256), 256, 0, st>>>(o4, a4, n4);
    compare("gelu_forward", o4b, o4, n4);
    row("before: gelu_backward", time_ms([&] { before::gelu_backward_kernel<<<grid_for(&gpu, n4, 256), 256, 0, st>>>(o4b, a4, big, n4); }), 3.0 * n4 * 2);
    gelu_backward_kernel<VEC><<<grid_for(&gpu, n4 / VEC, 256), 256, 0, st>>>(o4, a4, big, n4);
    compare("gelu_backward", o4b, o4, n4);
    row("before: encoder_forward", time_ms([&] { before::encoder_forward_kernel<<<grid_for(&gpu, NC, 256), 256, 0, st>>>(o1b, dtok, wte, wpe, N, T, C); }),
        2.0 * NC * 2 + (double)T * C * 2 + 4.0 * N);
    encoder_forward_kernel<VEC><<<grid_for(&gpu, NC / VEC, 256), 256, 0, st>>>(o1, dtok, wte, wpe, N, T, C);
    compare("encoder_forward", o1b, o1, NC);
#endif

    // ---- flash attention: forward, backward (preprocess + dQ + dK/dV)
    floatX *qkv = rnd(NC * 3, -2, 2, 14), *y = rnd(NC, 0, 0, 0), *dy = rnd(NC, -1, 1, 15), *dqkv = rnd(NC * 3, 0, 0, 0);
    float *lse, *Dbuf = kc.scratch;
    CK(cudaMalloc(&lse, (size_t)B * NH * T * sizeof(float)));
    dim3 fgrid(B * NH, ceil_div(T, FA_ROWS));
    double fa_fwd_flops = 4.0 * B * NH * ((double)T * (T + 1) / 2) * (C / NH); // causal: QK^T and PV over the lower triangle
    auto fa_fwd = [&] { flash_forward_kernel<<<fgrid, FA_THREADS, 0, st>>>(y, lse, qkv, T, C, NH); };
    float ms = time_ms(fa_fwd);
    printf("%-52s %9.1f us %9.1f TFLOP/s (causal FLOPs)\n", "flash_forward", ms * 1e3, fa_fwd_flops / (ms * 1e-3) / 1e12);
    fa_fwd();
    size_t rowsD = (size_t)B * NH * T;
    auto fa_pre = [&] { flash_backward_preprocess_kernel<<<grid_for(&gpu, rowsD, 256), 256, 0, st>>>(Dbuf, dy, y, B, T, C, NH); };
    auto fa_dq = [&] { flash_backward_dq_kernel<<<fgrid, FA_THREADS, 0, st>>>(dqkv, lse, Dbuf, dy, qkv, T, C, NH); };
    auto fa_dkv = [&] { flash_backward_dkv_kernel<<<fgrid, FA_THREADS, 0, st>>>(dqkv, lse, Dbuf, dy, qkv, T, C, NH); };
    row("flash_backward_preprocess (D)", time_ms(fa_pre), 2.0 * NC * 2 + 4.0 * rowsD);
    fa_pre();
    ms = time_ms(fa_dq);
    printf("%-52s %9.1f us\n", "flash_backward_dq", ms * 1e3);
    ms = time_ms(fa_dkv);
    printf("%-52s %9.1f us\n", "flash_backward_dkv", ms * 1e3);
    ms = time_ms([&] { fa_pre(); fa_dq(); fa_dkv(); });
    printf("%-52s %9.1f us %9.1f TFLOP/s (5 causal products)\n", "flash backward, all three", ms * 1e3, 2.5 * fa_fwd_flops / (ms * 1e-3) / 1e12);
#ifdef BENCH_BEFORE
    floatX *y_b = rnd(NC, 0, 0, 0), *dqkv_b = rnd(NC * 3, 0, 0, 0);
    float *lse_b;
    CK(cudaMalloc(&lse_b, rowsD * sizeof(float)));
    auto fa_fwd_b = [&] { before::flash_forward_kernel<<<fgrid, FA_THREADS, 0, st>>>(y_b, lse_b, qkv, T, C, NH); };
    ms = time_ms(fa_fwd_b);
    printf("%-52s %9.1f us %9.1f TFLOP/s\n", "before: flash_forward", ms * 1e3, fa_fwd_flops / (ms * 1e-3) / 1e12);
    fa_fwd_b();
    fa_fwd();
    compare("flash_forward out", y_b, y, NC);
    auto fa_dq_b = [&] { before::flash_backward_dq_kernel<<<fgrid, FA_THREADS, 0, st>>>(dqkv_b, lse, dy, y, qkv, T, C, NH); };
    auto fa_dkv_b = [&] { before::flash_backward_dkv_kernel<<<fgrid, FA_THREADS, 0, st>>>(dqkv_b, lse, dy, y, qkv, T, C, NH); };
    ms = time_ms(fa_dq_b);
    printf("%-52s %9.1f us\n", "before: flash_backward_dq", ms * 1e3);
    ms = time_ms(fa_dkv_b);
    printf("%-52s %9.1f us\n", "before: flash_backward_dkv", ms * 1e3);
    ms = time_ms([&] { fa_dq_b(); fa_dkv_b(); });
    printf("%-52s %9.1f us %9.1f TFLOP/s\n", "before: flash backward, both", ms * 1e3, 2.5 * fa_fwd_flops / (ms * 1e-3) / 1e12);
    fa_pre(); fa_dq(); fa_dkv();
    fa_dq_b(); fa_dkv_b();
    compare("flash backward dqkv", dqkv_b, dqkv, NC * 3);
#endif
    CK(cudaStreamSynchronize(st));
    CK(cudaGetLastError());
    printf("done\n");
    return 0;
}
