// The CUDA emulator's own checks, one case per run (`cuda_emu_selftest CASE`), for
// test_gpu_emu.sh: a correct kernel computes the right numbers, and each kind of mistake the
// emulator exists to catch is caught (the script expects the message or the signal). Compiled
// like train_gpt.cu: against test/cuda_emu/, launches rewritten by the Makefile.
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <nccl.h>
#include <mma.h>
#include "gpu/mma16.cuh"
#include <vector>
#include <math.h>
#include <omp.h>

#define CHECK(x) do { if ((x) != 0) { fprintf(stderr, "selftest: %s failed\n", #x); exit(2); } } while (0)

// Sum of in[0..n) by one block: per-warp shuffles, then warp partials through shared memory.
static __global__ void block_sum(float *out, const float *in, int n) {
    __shared__ float part[32];
    float v = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += in[i];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (unsigned w = 0; w < blockDim.x / 32; w++) s += part[w];
        out[blockIdx.x] = s;
    }
}
static __global__ void sync_after_return(float *out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
static __global__ void shuffle_after_return(float *out) {
    if (threadIdx.x < 16) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
static __global__ void fill(float *p, int n, float v) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}
static __global__ void copy(float *dst, const float *src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// One warp: C (16x16) = A B with A[i][k] = i + k, B[k][j] = (k == j) (the identity), so C = A;
// each lane writes its share of A to shared memory first, with or without the __syncwarp that
// must separate those writes from the warp's fragment loads.
static __global__ void wmma_tile(float *out, int sync, int offset) {
    __shared__ __align__(128) __half a[17][16], b[16][16];
    __shared__ __align__(128) float c[16][16];
    for (int e = threadIdx.x; e < 256; e += 32) {
        a[e / 16][e % 16] = __float2half_rn((float)(e / 16 + e % 16));
        b[e / 16][e % 16] = __float2half_rn(e / 16 == e % 16 ? 1.0f : 0.0f);
    }
    if (sync) __syncwarp();
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> fb;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
    nvcuda::wmma::fill_fragment(fc, 0.0f);
    nvcuda::wmma::load_matrix_sync(fa, &a[0][0] + offset, 16);
    nvcuda::wmma::load_matrix_sync(fb, &b[0][0], 16);
    nvcuda::wmma::mma_sync(fc, fa, fb, fc);
    nvcuda::wmma::store_matrix_sync(&c[0][0], fc, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();
    for (int e = threadIdx.x; e < 256; e += 32) out[e] = c[e / 16][e % 16];
}

// gpu/mma16.cuh's m16n8k16 product, the portable body (shuffles over the PTX ISA's fragment
// layouts): each lane builds its fragments of A (16x16), B (16x8) and C (16x8) from row-major
// fp32 arrays by the documented layout, and writes its four results back by the same layout; two
// warps, so that lanes 32-63 map too. The values are exact in bf16 and fp16 and their sums exact
// in fp32, so the result must equal the plain matmul bit for bit.
template <class T> static __device__ void mma16816_tile(float *out, const float *A, const float *B, const float *Cin) {
    unsigned lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    uint32_t a[4], b[2];
    a[0] = mma16_pack<T>(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]);
    a[1] = mma16_pack<T>(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]);
    a[2] = mma16_pack<T>(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]);
    a[3] = mma16_pack<T>(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9]);
    b[0] = mma16_pack<T>(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
    b[1] = mma16_pack<T>(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g]);
    float d[4] = {Cin[g * 8 + 2 * t], Cin[g * 8 + 2 * t + 1], Cin[(g + 8) * 8 + 2 * t], Cin[(g + 8) * 8 + 2 * t + 1]};
    mma16816<T>(d, a, b);
    float *o = out + threadIdx.x / 32 * 128;
    o[g * 8 + 2 * t] = d[0];
    o[g * 8 + 2 * t + 1] = d[1];
    o[(g + 8) * 8 + 2 * t] = d[2];
    o[(g + 8) * 8 + 2 * t + 1] = d[3];
}
// (a launch names a plain kernel: the Makefile's rewrite of `kernel<<<` takes no template arguments)
static __global__ void mma16816_bf16(float *o, const float *A, const float *B, const float *C) { mma16816_tile<__nv_bfloat16>(o, A, B, C); }
static __global__ void mma16816_f16(float *o, const float *A, const float *B, const float *C) { mma16816_tile<__half>(o, A, B, C); }

// gpu/mma16.cuh's ldmatrix.x4, the portable body: four 8x8 matrices of distinct 16-bit integers
// (exact in bf16) in a shared tile with padded rows (24 elements: 48 bytes, 16-byte aligned), each
// lane giving the address of row l % 8 of matrix l / 8; every lane's r[m] must hold the elements
// the PTX ISA's layout names: M[g][2t], M[g][2t+1] plain, M[2t][g], M[2t+1][g] transposed. Out:
// per lane, 4 registers x 2 halves, as floats. misalign: the rows start 8 bytes off (a fault).
static __global__ void ldsm_tile(float *out, int trans, int misalign) {
    __shared__ __align__(16) __nv_bfloat16 tile[33][24];
    int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) { // matrix m = i / 64 at rows 8 m .. 8 m + 7, its element (r, c)
        int m = i / 64, r = i % 64 / 8, c = i % 8;
        tile[8 * m + r][c + (misalign ? 4 : 0)] = __float2bfloat16_rn((float)(m * 64 + r * 8 + c));
    }
    __syncwarp();
    const __nv_bfloat16 *row = &tile[8 * (l / 8) + l % 8][misalign ? 4 : 0];
    uint32_t r[4];
    if (trans) mma16_ldsm_x4<1>(r, row);
    else mma16_ldsm_x4<0>(r, row);
    for (int m = 0; m < 4; m++) {
        float v[2];
        mma16_unpack<__nv_bfloat16>(v, r[m]);
        out[l * 8 + 2 * m] = v[0];
        out[l * 8 + 2 * m + 1] = v[1];
    }
}

static float *dev_floats(int n) {
    float *p;
    CHECK(cudaMalloc(&p, (size_t)n * sizeof(float)));
    return p;
}
static void to_host(float *h, const float *d, int n) { CHECK(cudaMemcpy(h, d, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost)); }

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: cuda_emu_selftest CASE\n"); return 2; }
    const char *c = argv[1];
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    if (!strcmp(c, "sum")) { // 3 blocks of 256 threads, each the sum 1..1000
        int n = 1000;
        float h[1000], r[3];
        for (int i = 0; i < n; i++) h[i] = (float)(i + 1);
        float *in = dev_floats(n), *out = dev_floats(3);
        CHECK(cudaMemcpy(in, h, sizeof(h), cudaMemcpyHostToDevice));
        block_sum<<<3, 256, 0, s1>>>(out, in, n);
        CHECK(cudaGetLastError());
        to_host(r, out, 3);
        printf("sum %.0f %.0f %.0f\n", r[0], r[1], r[2]);
        return r[0] == 500500.0f && r[1] == 500500.0f && r[2] == 500500.0f ? 0 : 1;
    }
    if (!strcmp(c, "wmma") || !strcmp(c, "wmma_race") || !strcmp(c, "wmma_misaligned")) {
        float *o = dev_floats(256), h[256];
        wmma_tile<<<1, 32, 0, s1>>>(o, strcmp(c, "wmma_race") != 0, !strcmp(c, "wmma_misaligned") ? 8 : 0);
        to_host(h, o, 256);
        int bad = 0;
        for (int e = 0; e < 256; e++) bad += h[e] != (float)(e / 16 + e % 16);
        printf("wmma: %d of 256 elements wrong\n", bad);
        return bad != 0;
    }
    if (!strcmp(c, "mma16816")) { // both element types, against a plain matmul
        float hA[256], hB[128], hC[128], ref[128], h[256];
        for (int i = 0; i < 16; i++)
            for (int k = 0; k < 16; k++) hA[i * 16 + k] = (float)((i * 3 + k * 5) % 11 - 5) * 0.5f;
        for (int k = 0; k < 16; k++)
            for (int j = 0; j < 8; j++) hB[k * 8 + j] = (float)((k * 7 + j * 2 + k * j) % 9 - 4) * 0.25f;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 8; j++) {
                hC[i * 8 + j] = (float)(i - 2 * j);
                float acc = hC[i * 8 + j];
                for (int k = 0; k < 16; k++) acc += hA[i * 16 + k] * hB[k * 8 + j];
                ref[i * 8 + j] = acc;
            }
        float *dA = dev_floats(256), *dB = dev_floats(128), *dC = dev_floats(128), *o = dev_floats(256);
        CHECK(cudaMemcpy(dA, hA, sizeof(hA), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, hB, sizeof(hB), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dC, hC, sizeof(hC), cudaMemcpyHostToDevice));
        int bad[2] = {0, 0};
        for (int ty = 0; ty < 2; ty++) {
            if (ty == 0) mma16816_bf16<<<1, 64, 0, s1>>>(o, dA, dB, dC);
            else mma16816_f16<<<1, 64, 0, s1>>>(o, dA, dB, dC);
            CHECK(cudaGetLastError());
            to_host(h, o, 256);
            for (int e = 0; e < 256; e++) bad[ty] += h[e] != ref[e % 128];
        }
        printf("mma16816: bf16 %d, fp16 %d of 256 elements wrong\n", bad[0], bad[1]);
        return bad[0] + bad[1] != 0;
    }
    if (!strcmp(c, "ldmatrix") || !strcmp(c, "ldmatrix_misaligned")) { // plain and transposed, against the PTX layout
        float *o = dev_floats(256), h[256];
        int bad[2] = {0, 0};
        for (int trans = 0; trans < 2; trans++) {
            ldsm_tile<<<1, 32, 0, s1>>>(o, trans, !strcmp(c, "ldmatrix_misaligned"));
            CHECK(cudaGetLastError());
            to_host(h, o, 256);
            for (int l = 0; l < 32; l++)
                for (int m = 0; m < 4; m++)
                    for (int k = 0; k < 2; k++) {
                        int g = l / 4, t = l % 4, r = trans ? 2 * t + k : g, col = trans ? g : 2 * t + k;
                        bad[trans] += h[l * 8 + 2 * m + k] != (float)(m * 64 + r * 8 + col);
                    }
        }
        printf("ldmatrix: plain %d, transposed %d of 256 elements wrong\n", bad[0], bad[1]);
        return bad[0] + bad[1] != 0;
    }
    if (!strcmp(c, "sync_after_return")) { float *o = dev_floats(64); sync_after_return<<<1, 64, 0, s1>>>(o); cudaDeviceSynchronize(); return 0; }
    if (!strcmp(c, "shuffle_after_return")) { float *o = dev_floats(32); shuffle_after_return<<<1, 32, 0, s1>>>(o); cudaDeviceSynchronize(); return 0; }
    if (!strcmp(c, "write_past_end")) { // 8 floats past a 100-float buffer: the canary
        float *p = dev_floats(100);
        fill<<<1, 32, 0, s1>>>(p, 108, 1.0f);
        cudaDeviceSynchronize();
        return 0;
    }
    if (!strcmp(c, "host_reads_device")) { float *p = dev_floats(4); printf("%f\n", p[0]); return 0; } // faults
    if (!strcmp(c, "launch_limits")) { // reported through cudaGetLastError, as on hardware
        float *p = dev_floats(4);
        fill<<<1, 2048, 0, s1>>>(p, 4, 1.0f);
        cudaError_t a = cudaGetLastError();
        fill<<<0, 32, 0, s1>>>(p, 4, 1.0f);
        cudaError_t b = cudaGetLastError();
        fill<<<dim3(1, 70000), 32, 0, s1>>>(p, 4, 1.0f);
        cudaError_t d = cudaGetLastError();
        printf("%s / %s / %s\n", cudaGetErrorString(a), cudaGetErrorString(b), cudaGetErrorString(d));
        return a == cudaErrorInvalidConfiguration && b == cudaErrorInvalidConfiguration && d == cudaErrorInvalidConfiguration ? 0 : 1;
    }
    if (!strcmp(c, "host_pointer_argument")) { float h[4]; fill<<<1, 32, 0, s1>>>(h, 4, 1.0f); return 0; }
    if (!strcmp(c, "wait") || !strcmp(c, "no_wait")) {
        // s1 writes x = 7; s2 copies x to y, after an event wait or without one. Prints y.
        float *x = dev_floats(1), *y = dev_floats(1), hy;
        fill<<<1, 32, 0, s1>>>(x, 1, 0.0f);
        cudaDeviceSynchronize();
        cudaEvent_t e;
        CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        fill<<<1, 32, 0, s1>>>(x, 1, 7.0f);
        CHECK(cudaEventRecord(e, s1));
        if (!strcmp(c, "wait")) CHECK(cudaStreamWaitEvent(s2, e, 0));
        copy<<<1, 32, 0, s2>>>(y, x, 1);
        cudaDeviceSynchronize();
        to_host(&hy, y, 1);
        printf("y = %g\n", hy);
        return 0;
    }
    if (!strcmp(c, "cublaslt_alignment")) { // a pointer less aligned than promised to the heuristic
        cublasLtHandle_t lt;
        CHECK(cublasLtCreate(&lt));
        float *a = dev_floats(64), *d = dev_floats(64);
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t l;
        cublasLtMatmulPreference_t pref;
        CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CHECK(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4));
        CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint32_t al = 16;
        CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof(al)));
        cublasLtMatmulHeuristicResult_t h;
        int found = 0;
        CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, l, l, l, l, pref, 1, &h, &found));
        float one = 1.0f, zero = 0.0f;
        CHECK(cublasLtMatmul(lt, desc, &one, a + 1, l, a, l, &zero, d, l, d, l, &h.algo, NULL, 0, s1));
        return 0;
    }
    if (!strcmp(c, "cublaslt_threads")) { // D (64 x 256) = A B (k = 64) on 1 and on 2 OpenMP threads: the same bits,
        // and each element the float64 sum's within fp32 rounding (OpenBLAS's own threaded sgemm differs here)
        int m = 64, n = 256, k = 64;
        std::vector<float> ha(m * k), hb(k * n), h1(m * n), h2(m * n);
        unsigned x = 12345u; // full mantissas, so that the order of the sums shows in the last bits
        for (int i = 0; i < m * k; i++) x = x * 1664525u + 1013904223u, ha[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        for (int i = 0; i < k * n; i++) x = x * 1664525u + 1013904223u, hb[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        float *a = dev_floats(m * k), *b = dev_floats(k * n), *d = dev_floats(m * n);
        CHECK(cudaMemcpy(a, ha.data(), ha.size() * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(b, hb.data(), hb.size() * sizeof(float), cudaMemcpyHostToDevice));
        cublasLtHandle_t lt;
        CHECK(cublasLtCreate(&lt));
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, ld;
        cublasLtMatmulPreference_t pref;
        CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m));
        CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k));
        CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m));
        CHECK(cublasLtMatmulPreferenceCreate(&pref));
        cublasLtMatmulHeuristicResult_t h;
        int found = 0, diff = 0, far = 0;
        CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, &h, &found));
        float one = 1.0f, zero = 0.0f;
        for (int t = 1; t <= 2; t++) {
            omp_set_num_threads(t);
            CHECK(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld, &h.algo, NULL, 0, s1));
            to_host(t == 1 ? h1.data() : h2.data(), d, m * n);
        }
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double ref = 0.0, mag = 0.0;
                for (int q = 0; q < k; q++) ref += (double)ha[q * m + i] * hb[j * k + q], mag += fabs((double)ha[q * m + i] * hb[j * k + q]);
                diff += h1[j * m + i] != h2[j * m + i];
                far += fabs(h1[j * m + i] - ref) > 1e-6 * mag;
            }
        printf("cublaslt_threads: %d of %d elements differ between 1 and 2 threads, %d off the float64 sum\n", diff, m * n, far);
        return diff + far != 0;
    }
    if (!strcmp(c, "nccl_overlap")) { // an all-gather whose buffers overlap outside NCCL's in-place layout
        MPI_Init(&argc, &argv);
        ncclUniqueId id;
        ncclComm_t comm;
        CHECK(ncclGetUniqueId(&id));
        CHECK(ncclCommInitRank(&comm, 1, id, 0));
        float *p = dev_floats(8);
        ncclAllGather(p + 1, p, 4, ncclFloat, comm, s1);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(c, "nccl_async")) { // 2 ranks: rank 1 joins an all-reduce 1 s late; rank 0's event is not ready till then
        MPI_Init(&argc, &argv);
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        ncclUniqueId id;
        ncclComm_t comm;
        CHECK(ncclGetUniqueId(&id));
        CHECK(ncclCommInitRank(&comm, 2, id, rank));
        float *p = dev_floats(4), h[4] = {1.0f + rank, 2.0f + rank, 3.0f + rank, 4.0f + rank};
        CHECK(cudaMemcpy(p, h, sizeof(h), cudaMemcpyHostToDevice));
        cudaEvent_t ev;
        CHECK(cudaEventCreate(&ev));
        CHECK(ncclAllReduce(p, p, 4, ncclFloat, ncclSum, comm, s1));
        CHECK(cudaEventRecord(ev, s1));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (rank == 1) sleep(1);
        cudaError_t first = cudaEventQuery(ev), e = first;
        while (e == cudaErrorNotReady) e = cudaEventQuery(ev);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        CHECK(e);
        CHECK(cudaMemcpy(h, p, sizeof(h), cudaMemcpyDeviceToHost));
        if (rank == 0)
            printf("nccl_async: first query %s, complete after %.1f s, sum %g %g %g %g\n",
                   first == cudaErrorNotReady ? "not ready" : "ready", (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec),
                   h[0], h[1], h[2], h[3]);
        ncclCommDestroy(comm);
        MPI_Finalize();
        return 0;
    }
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
}
