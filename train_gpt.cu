// train_gpt.cu: GPT-2 training on NVIDIA GPUs: CUDA kernels, cuBLASLt matmuls, NCCL
// collectives, ZeRO stages 0-3. The GPU twin of train_gpt_cpu.c, which stays the oracle:
// every kernel below has a CPU twin there and must agree with it.
//
// Sections: utilities; kernels (each with its shapes, launch geometry and a review note on
// bounds, occupancy and synchronisation, because the machine this was written on has no GPU);
// cuBLASLt matmuls; the NCCL backend that zero.h drives (host copies included); the model's
// storage and what model.h's shared passes need; the shared run (trainer.h); main.
//
// What is shared, not copied: options and DeepSpeed config (config.h, ds_config.h), the
// dataloader, checkpoints (checkpoint.h), the ZeRO partitioning, schedule and accounting
// (zero.h), AdamW's element update and the LR schedules (optimizer.h, adamw_element runs in
// the update kernel as written there), the planner, the log format and the loop (trainer.h).
//
// Precision: fp32 throughout (params, grads, activations, fp32 cuBLASLt compute without TF32).
// The shared headers also carry the CPU trainer's bf16/fp16 (16-bit storage in zero.h, fp32
// master weights); the backend below already handles all three element types (collectives,
// add, host copies, AdamW), but the kernels are fp32, so config.h refuses the others here.
// docs/gpu.md has the plan for bf16/fp16.
// Streams: every kernel runs on one compute stream; every collective on one communication
// stream, ordered against compute with events (see the backend). The host waits for the
// device only where it needs a number (loss, norm, a logits row, checkpoint staging) and at
// the end of each step, always through gpu_sync(), which is also the watchdog.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <omp.h>
// MPI's C API only: its deprecated C++ bindings do not compile warning-free
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <nccl.h>

#include "gpt2.h"
#include "config.h"
#include "optimizer.h"
#include "zero.h"
#include "planner.h"
#include "dataloader.h"
#include "tokenizer.h"
#include "ds_config.h"
#include "checkpoint.h"

// ----------------------------------------------------------------------------------------
// Utilities

static void gpu_fatal(const char *what, const char *detail, const char *file, int line) {
    int rank = 0, init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "error: rank %d: %s failed: %s (%s:%d)\n", rank, what, detail, file, line);
    if (init) MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) gpu_fatal(#x, cudaGetErrorString(e_), __FILE__, __LINE__); } while (0)
#define CUBLAS_CHECK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { char m_[32]; snprintf(m_, sizeof(m_), "cuBLAS status %d", (int)s_); gpu_fatal(#x, m_, __FILE__, __LINE__); } } while (0)
#define NCCL_CHECK(x) do { ncclResult_t r_ = (x); if (r_ != ncclSuccess) gpu_fatal(#x, ncclGetErrorString(r_), __FILE__, __LINE__); } while (0)
// After a launch: configuration errors show at once; faults show at the next sync.
#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

// The device state every kernel launch and matmul uses: one process drives one GPU.
typedef struct {
    int device, sm_count;
    cudaDeviceProp prop;
    cudaStream_t compute;      // every kernel and matmul
    cublasLtHandle_t lt;
    void *workspace;           // cuBLASLt's
    size_t workspace_bytes;
} Gpu;
static Gpu gpu;

static inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }
// Grid for a grid-stride elementwise loop: enough blocks to fill the GPU, never zero.
static inline unsigned grid_for(size_t n, int block) {
    size_t want = (n + block - 1) / block, cap = (size_t)gpu.sm_count * 32;
    if (want > cap) want = cap;
    return want ? (unsigned)want : 1u;
}

// ----------------------------------------------------------------------------------------
// Kernels. Shapes: B batch, T time, C channels, NH heads, hs = C/NH, V vocabulary (Vp padded),
// N = B*T rows. The contract is the CPU trainer's: backward kernels ACCUMULATE (+=) into
// parameter gradients and OVERWRITE activation gradients unless the comment says otherwise.
// Review conventions: every index that can exceed 2^31 is size_t; warp-per-row kernels return
// whole warps only (no __syncthreads after the return); block reductions keep every thread of
// the block alive up to the last __syncthreads.

#define WARP 32
static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// out (N,C) = wte[inp[n]] + wpe[n % T]. Grid-stride over N*C; consecutive threads take
// consecutive channels, so the reads and writes are coalesced. Token ids were checked by the
// dataloader (< vocab_size <= Vp rows).
static __global__ void encoder_forward_kernel(float *out, const int *inp, const float *wte, const float *wpe,
                                              int N, int T, int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        out[i] = wte[(size_t)inp[n] * C + c] + wpe[(n % T) * C + c];
    }
}

// dwte (Vp,C) += dout scattered by token. Two positions can hold the same token, so the adds
// are atomic: the sum is exact up to fp32 addition order, which varies from run to run
// (llm.c's deterministic bucketed version is a later improvement, see docs/gpu.md).
static __global__ void encoder_backward_wte_kernel(float *dwte, const float *dout, const int *inp, int N, int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        atomicAdd(dwte + (size_t)inp[n] * C + c, dout[i]);
    }
}
// dwpe (maxT,C) += sum over b of dout[b,t]: one thread per (t,c), deterministic, no races.
static __global__ void encoder_backward_wpe_kernel(float *dwpe, const float *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dout[(size_t)b * T * C + i];
        dwpe[i] += s;
    }
}

// out (N,C) = (inp - mean) * rstd * w + b. One warp per row (8 rows per 256-thread block);
// two passes over the row like the CPU (mean, then the centred variance). Bounds: a warp whose
// row is past N returns as a whole before any shuffle.
static __global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                                const float *w, const float *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int c = lane; c < C; c += WARP) m += x[c];
    m = warp_sum(m) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += WARP) { float d = x[c] - m; v += d * d; }
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) o[c] = (x[c] - m) * s * w[c] + b[c];
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// dinp (N,C) += through the normalisation (ACCUMULATES: the input is the residual stream).
// One warp per row, as the forward.
static __global__ void layernorm_backward_input_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                                       const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float dnorm = w[c] * d[c];
        dm += dnorm;
        dnm += dnorm * (x[c] - m) * s;
    }
    dm = warp_sum(dm) / C;
    dnm = warp_sum(dnm) / C;
    float *di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) {
        float norm = (x[c] - m) * s;
        di[c] += (w[c] * d[c] - dm - norm * dnm) * s;
    }
}

// Column reductions over N rows, deterministic (fixed order, no atomics): a 32x32 block owns
// 32 columns; thread (tx, ty) sums rows ty, ty+32, ... of column tx (coalesced: a warp reads
// 32 consecutive floats of one row), then the 32 partial sums are added in a fixed order in
// shared memory. Grid: ceil(cols/32). Threads past the last column compute zeros but stay
// alive through __syncthreads. Occupancy is modest for small C (C/32 blocks); the rows are
// long, so each block streams a lot. Used for LayerNorm dw/db and matmul bias gradients.
//   dw (C) += sum_n (x - mean) * rstd * dout;  db (C) += sum_n dout     (x != NULL)
//   db (C) += sum_n dout                                                  (x == NULL)
static __global__ void column_grads_kernel(float *dw, float *db, const float *dout, const float *x,
                                           const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[32][33], sb[32][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int n = ty; n < N; n += 32) {
            float d = dout[(size_t)n * C + c];
            ab += d;
            if (x) aw += (x[(size_t)n * C + c] - mean[n]) * rstd[n] * d;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 32; k++) { tw += sw[k][tx]; tb += sb[k][tx]; }
        if (x) dw[c] += tw;
        db[c] += tb;
    }
}

// out (N,OC) += bias: only where cuBLASLt's bias epilogue cannot take the pointer (it wants
// 16-byte alignment, which small test models' tensor offsets do not always give).
static __global__ void add_bias_kernel(float *out, const float *bias, int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

// out = a + b elementwise (the residual connections).
static __global__ void residual_forward_kernel(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}
// dst (n) += src (n), both of type dtype (ZC_F32, ZC_BF16, ZC_FP16), the sum rounded to it:
// zero.h's add (a reduce-scatter's slice into the gradient shard). zc_load / zc_store are
// mixed_precision.h's, the same integer code the CPU trainer rounds with, so a 16-bit sum is
// bit-identical to its host_add. dtype is uniform over the grid: its branches never diverge.
static __global__ void add_kernel(void *dst, const void *src, size_t n, int dtype) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        zc_store(dst, i, zc_load(dst, i, dtype) + zc_load(src, i, dtype), dtype);
}
// dst (n, fp32) = src (n, dtype) widened (exact), and dst (n, dtype) = src (n, fp32) rounded to
// nearest even: the 16-bit side of the backend's host copies, which travel as fp32.
static __global__ void widen_kernel(float *dst, const void *src, size_t n, int dtype) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = zc_load(src, i, dtype);
}
static __global__ void narrow_kernel(void *dst, const float *src, size_t n, int dtype) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        zc_store(dst, i, src[i], dtype);
}

// GELU elementwise: gpt2_gelu / gpt2_gelu_grad from gpt2.h, the very functions the CPU kernels use.
static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = gpt2_gelu(inp[i]);
}
// dinp = gelu'(inp) * dout; dinp may be dout (each element read before it is written, by the
// same thread).
static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = gpt2_gelu_grad(inp[i]) * dout[i];
}

// Causal softmax of the scores, in place: att (rows = B*NH*T, each T long), row r is query
// t = r % T; columns t2 <= t become the probabilities, t2 > t become 0 (the batched matmul
// with V reads the whole row). One warp per row, three passes (max, sum, write). Bounds as
// layernorm_forward_kernel. Scores were scaled by 1/sqrt(hs) in the matmul.
static __global__ void softmax_causal_kernel(float *att, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t = row % T;
    float *a = att + (size_t)row * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += WARP) maxv = fmaxf(maxv, a[t2]);
    maxv = warp_max(maxv); // column 0 is always in, so maxv is finite for finite scores
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += WARP) sum += expf(a[t2] - maxv);
    float inv = 1.0f / warp_sum(sum);
    for (int t2 = lane; t2 < T; t2 += WARP) a[t2] = t2 <= t ? expf(a[t2] - maxv) * inv : 0.0f;
}

// The softmax's backward, in place over the probabilities of one layer:
//   dS[t,t2] = P[t,t2] * (dP[t,t2] - D[t]) * scale,  dP[t,t2] = dy_t . v_t2,  D[t] = dy_t . y_t
// (D[t] = sum_t2 P[t,t2] dP[t,t2], because y_t = sum_t2 P[t,t2] v_t2: the flash-attention
// identity, so the row needs one pass). dy (B,T,C) is the gradient of the attention output
// y (B,T,C), v inside qkv (B,T,3C). One warp per row (b, h, t); lanes split the keys t2.
// Each lane computes its own dot over hs (dy_t is the same address for all lanes: a
// broadcast; v_t2 rows differ per lane: uncoalesced, served mostly by L2). This is the
// O(T^2 hs) part the planned flash kernel replaces; P must still hold the probabilities (the
// dV matmul runs before this kernel on the same stream).
static __global__ void attention_softmax_backward_kernel(float *att, const float *dy, const float *y, const float *qkv,
                                                         int B, int T, int C, int NH, float scale) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= B * NH * T) return;
    int hs = C / NH, t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const float *dyt = dy + ((size_t)b * T + t) * C + (size_t)h * hs;
    const float *yt = y + ((size_t)b * T + t) * C + (size_t)h * hs;
    float D = 0.0f;
    for (int i = lane; i < hs; i += WARP) D += dyt[i] * yt[i];
    D = warp_sum(D);
    float *a = att + (size_t)row * T;
    for (int t2 = lane; t2 < T; t2 += WARP) {
        if (t2 > t) { a[t2] = 0.0f; continue; }
        const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * (size_t)C + (size_t)h * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += dyt[i] * v[i];
        a[t2] = a[t2] * (dot - D) * scale;
    }
}

// The fused classifier: for each of N rows of logits (N,Vp), the softmax over the first V
// columns, the loss against targets into losses (when targets != NULL), and, when dloss != 0,
// dloss * (softmax - onehot) written over the logits in place (padded columns get 0). One
// block per row (CLS_THREADS threads): an online max/sum per thread over a strided slice,
// combined across the warp by shuffles and across warps in shared memory, so the row is read
// twice (reduce, write) and never copied. Empty partials are (-inf, 0) and combine without
// NaN. Every thread reaches both __syncthreads. The target was checked by the dataloader
// (< V); an out-of-range one gives a NaN loss, never an out-of-bounds read.
#define CLS_THREADS 512
static __device__ __forceinline__ void online_combine(float *m, float *s, float m2, float s2) {
    float mm = fmaxf(*m, m2);
    if (mm == -INFINITY) return; // both empty
    *s = *s * expf(*m - mm) + s2 * expf(m2 - mm);
    *m = mm;
}
static __global__ void crossentropy_softmax_kernel(float *logits, float *losses, const int *targets,
                                                   int V, int Vp, float dloss) {
    __shared__ float sm[CLS_THREADS / WARP], ss[CLS_THREADS / WARP], row_max, row_inv;
    float *l = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) online_combine(&m, &s, l[i], 1.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_combine(&m, &s, m2, s2);
    }
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = -INFINITY, S = 0.0f;
        for (int k = 0; k < (int)(blockDim.x / WARP); k++) online_combine(&M, &S, sm[k], ss[k]);
        if (targets) {
            int tgt = targets[blockIdx.x];
            losses[blockIdx.x] = tgt >= 0 && tgt < V ? logf(S) + M - l[tgt] : NAN;
        }
        row_max = M;
        row_inv = 1.0f / S;
    }
    __syncthreads(); // the loss has read l[tgt] before anyone overwrites it
    if (dloss == 0.0f) return;
    int tgt = targets ? targets[blockIdx.x] : -1;
    float M = row_max, inv = row_inv;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x)
        l[i] = i < V ? expf(l[i] - M) * inv * dloss - (i == tgt ? dloss : 0.0f) : 0.0f;
}

// AdamW over one run of elements of one kind (decayed or not): adamw_element is optimizer.h's,
// the same code the CPU trainer runs. p, m, v (n) fp32; g (n) of type dtype, widened. p16 NULL:
// p is the parameter. Otherwise p is the fp32 master weight and the result is also rounded
// into p16 (n, dtype), as the CPU's host_adamw does. Grid-stride; each element is independent.
static __global__ void adamw_kernel(float *p, float *m, float *v, const void *g, void *p16, size_t n, int dtype,
                                    AdamWStep step, int decay) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        adamw_element(&p[i], &m[i], &v[i], zc_load(g, i, dtype), &step, decay);
        if (p16) zc_store(p16, i, p[i], dtype);
    }
}

// Sum of squares of g (n) into partial[blockIdx.x], in double; the grid is fixed (NORM_BLOCKS)
// so the order, and therefore the result, is the same every run. 256 threads; a tree in
// shared memory; every thread reaches every __syncthreads.
#define NORM_BLOCKS 128
#define NORM_THREADS 256
static __global__ void sumsq_kernel(double *partial, const float *g, size_t n) {
    __shared__ double sh[NORM_THREADS];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g[i] * g[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = NORM_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}
// out[0] = sum of partial[0..n) in a fixed order (one block).
static __global__ void sum_partials_kernel(double *out, const double *partial, int n) {
    __shared__ double sh[NORM_THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += partial[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = NORM_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = sh[0];
}

// ----------------------------------------------------------------------------------------
// Matmuls through cuBLASLt, fp32 in, fp32 out, fp32 compute (no TF32: the CPU comparison
// wants fp32 products). Written in row-major terms:
//   D (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * D, each matrix row-major with its own
//   leading dimension; op(A) = A stored (M,K), or A^T with A stored (K,M) when transA.
// `batch` matrices at the given element strides (strided batch). bias (N), when given, is
// added to every row (beta must be 0 then). cuBLASLt is column-major, so it computes
// D^T = op(B)^T . op(A)^T: the row-major B is its first operand.

static size_t alignment_of(const void *p, long long stride_elems, int batch) {
    uintptr_t a = (uintptr_t)p;
    if (batch > 1) a |= (uintptr_t)(stride_elems * (long long)sizeof(float));
    size_t al = 256;
    while (al > 4 && (a & (al - 1))) al >>= 1;
    return al;
}

static void matmul_lt(float *d, const float *a, const float *b, const float *bias, int M, int N, int K, int transA,
                      int transB, int lda, int ldb, int ldd, float alpha, float beta, int batch = 1,
                      long long strideA = 0, long long strideB = 0, long long strideD = 0) {
    int bias_epilogue = bias && ((uintptr_t)bias % 16) == 0;
    cublasLtMatmulDesc_t desc;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opA = transB ? CUBLAS_OP_T : CUBLAS_OP_N, opB = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    if (bias_epilogue) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    // column-major views: first operand = row-major B, second = row-major A, D is (N rows, M cols)
    cublasLtMatrixLayout_t la, lb, ld;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, transB ? K : N, transB ? N : K, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, transA ? M : K, transA ? K : M, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, N, M, ldd));
    if (batch > 1) {
        cublasLtMatrixLayout_t ls[3] = {la, lb, ld};
        long long st[3] = {strideB, strideA, strideD};
        for (int i = 0; i < 3; i++) {
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i], sizeof(st[i])));
        }
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &gpu.workspace_bytes, sizeof(gpu.workspace_bytes)));
    // Tell the heuristic how aligned the pointers (and every batch's pointer) really are, so
    // it never picks a kernel that needs more: tensor offsets inside a unit can be 4-aligned.
    uint32_t al[3] = {(uint32_t)alignment_of(b, strideB, batch), (uint32_t)alignment_of(a, strideA, batch),
                      (uint32_t)alignment_of(d, strideD, batch)};
    cublasLtMatmulPreferenceAttributes_t which[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                     CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    uint32_t vals[4] = {al[0], al[1], al[2], al[2]};
    for (int i = 0; i < 4; i++) CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &vals[i], sizeof(vals[i])));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(gpu.lt, desc, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found == 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "no cuBLASLt algorithm for M=%d N=%d K=%d transA=%d transB=%d batch=%d", M, N, K,
                 transA, transB, batch);
        gpu_fatal("cublasLtMatmulAlgoGetHeuristic", msg, __FILE__, __LINE__);
    }
    CUBLAS_CHECK(cublasLtMatmul(gpu.lt, desc, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &heur.algo,
                                gpu.workspace, gpu.workspace_bytes, gpu.compute));
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    if (bias && !bias_epilogue) {
        for (int k = 0; k < batch; k++) {
            add_bias_kernel<<<grid_for((size_t)M * N, 256), 256, 0, gpu.compute>>>(d + k * strideD, bias, M, N);
            LAUNCH_CHECK();
        }
    }
}

// out (N,OC) = inp (N,C) . w^T + bias; w (OC,C) as PyTorch's Linear; bias (OC) or NULL.
// w16: the weight's 16-bit copy (model.h's gpt2_x16), or NULL. These matmuls are fp32 and the
// storage hooks below never hand one over (UnitParams.x16 is NULL), so it is unused; the bf16
// kernels will read it, as the CPU trainer's bf16 matmuls do.
static void matmul_forward(float *out, const float *inp, const float *w, const void *w16, const float *bias, int N, int C,
                           int OC) {
    (void)w16;
    matmul_lt(out, inp, w, bias, N, OC, C, 0, 1, C, C, OC, 1.0f, 0.0f);
}
// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += dout^T . inp;  dbias (OC) += column sums of dout
// (w16 as in matmul_forward)
static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                            const void *w16, int N, int C, int OC) {
    (void)w16;
    matmul_lt(dinp, dout, w, NULL, N, C, OC, 0, 0, OC, C, C, 1.0f, 0.0f);
    matmul_lt(dw, dout, inp, NULL, OC, C, N, 1, 0, OC, C, C, 1.0f, 1.0f);
    if (dbias) {
        column_grads_kernel<<<ceil_div(OC, 32), dim3(32, 32), 0, gpu.compute>>>(NULL, dbias, dout, NULL, NULL, NULL, N, OC);
        LAUNCH_CHECK();
    }
}

static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                              int N, int C) {
    layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, gpu.compute>>>(out, mean, rstd, inp, w, b, N, C);
    LAUNCH_CHECK();
}
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                               const float *mean, const float *rstd, int N, int C) {
    layernorm_backward_input_kernel<<<ceil_div(N, 8), 256, 0, gpu.compute>>>(dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCH_CHECK();
    column_grads_kernel<<<ceil_div(C, 32), dim3(32, 32), 0, gpu.compute>>>(dw, db, dout, inp, mean, rstd, N, C);
    LAUNCH_CHECK();
}

// Causal self-attention over one layer. qkv (B,T,3C): q, k, v side by side, each NH heads of
// hs channels; out (B,T,C); att (B,NH,T,T) the probabilities (upper triangle zero). The head
// matrices are read where they lie in qkv (leading dimension 3C): no permute copies. One
// strided-batched matmul covers all (b, h) pairs along one axis: the axis with more entries
// is the batch, the other a host loop, because a strided batch has a single stride.
typedef struct { int outer, batch; long long sq, satt, sy; size_t oq, oatt, oy; } HeadLoop;
static HeadLoop head_loop(int B, int T, int C, int NH) {
    int hs = C / NH;
    HeadLoop h;
    if (B <= NH) { // loop over b, batch over h
        h.outer = B; h.batch = NH; h.sq = hs; h.satt = (long long)T * T; h.sy = hs;
        h.oq = (size_t)T * 3 * C; h.oatt = (size_t)NH * T * T; h.oy = (size_t)T * C;
    } else {       // loop over h, batch over b
        h.outer = NH; h.batch = B; h.sq = (long long)T * 3 * C; h.satt = (long long)NH * T * T; h.sy = (long long)T * C;
        h.oq = hs; h.oatt = (size_t)T * T; h.oy = hs;
    }
    return h;
}
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    HeadLoop h = head_loop(B, T, C, NH);
    for (int o = 0; o < h.outer; o++) { // S = scale * Q K^T   (T,T) per head
        const float *q = qkv + o * h.oq;
        matmul_lt(att + o * h.oatt, q, q + C, NULL, T, T, hs, 0, 1, C3, C3, T, scale, 0.0f, h.batch, h.sq, h.sq, h.satt);
    }
    int rows = B * NH * T;
    softmax_causal_kernel<<<ceil_div(rows, 8), 256, 0, gpu.compute>>>(att, rows, T);
    LAUNCH_CHECK();
    for (int o = 0; o < h.outer; o++) { // Y = P V   (T,hs) per head, written into out (B,T,C)
        const float *q = qkv + o * h.oq;
        matmul_lt(out + o * h.oy, att + o * h.oatt, q + 2 * C, NULL, T, hs, T, 0, 0, T, C3, C, 1.0f, 0.0f, h.batch,
                  h.satt, h.sq, h.sy);
    }
}
// dqkv (B,T,3C), OVERWRITTEN, from dout (B,T,C), qkv, the output y (B,T,C) and att, whose
// probabilities are replaced by the scores' gradient on the way (att is not needed again).
static void attention_backward(float *dqkv, float *att, const float *dout, const float *qkv, const float *y, int B,
                               int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    HeadLoop h = head_loop(B, T, C, NH);
    for (int o = 0; o < h.outer; o++) // dV = P^T dY
        matmul_lt(dqkv + o * h.oq + 2 * C, att + o * h.oatt, dout + o * h.oy, NULL, T, hs, T, 1, 0, T, C, C3, 1.0f, 0.0f,
                  h.batch, h.satt, h.sy, h.sq);
    int rows = B * NH * T;
    attention_softmax_backward_kernel<<<ceil_div(rows, 8), 256, 0, gpu.compute>>>(att, dout, y, qkv, B, T, C, NH, scale);
    LAUNCH_CHECK();
    for (int o = 0; o < h.outer; o++) {
        const float *q = qkv + o * h.oq;
        float *dq = dqkv + o * h.oq;
        // dQ = dS K,  dK = dS^T Q  (dS carries the scale)
        matmul_lt(dq, att + o * h.oatt, q + C, NULL, T, hs, T, 0, 0, T, C3, C3, 1.0f, 0.0f, h.batch, h.satt, h.sq, h.sq);
        matmul_lt(dq + C, att + o * h.oatt, q, NULL, T, hs, T, 1, 0, T, C3, C3, 1.0f, 0.0f, h.batch, h.satt, h.sq, h.sq);
    }
}

static void residual_forward(float *out, const float *a, const float *b, size_t n) {
    residual_forward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(out, a, b, n);
    LAUNCH_CHECK();
}
static void gelu_forward(float *out, const float *inp, size_t n) {
    gelu_forward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(out, inp, n);
    LAUNCH_CHECK();
}
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    gelu_backward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(dinp, inp, dout, n);
    LAUNCH_CHECK();
}

// ----------------------------------------------------------------------------------------
// Communication: the NCCL backend that zero.h drives. MPI only launched the processes and
// carried NCCL's unique id.
//
// Ordering. A collective is issued on the communication stream after an event recorded on
// the compute stream at that moment, so it sees every kernel the schedule enqueued before
// asking for it (the backward that produced a gradient; the last reader of a gather buffer it
// overwrites). wait() does not block the host: it makes the compute stream wait for the
// collective's completion event, so the next kernel that reads the result is ordered after
// it while the host runs ahead enqueuing work (gradient reductions overlap the backward;
// stage-3 gathers of the next layer overlap this one). All collectives share one stream and
// one communicator, issued in the schedule's order, the same on every rank.
//
// Watchdog. The host blocks only in gpu_sync(), which polls with --comm-timeout: when the
// device does not get there in time, it names the oldest collective that has not completed,
// in the CPU trainer's words, and aborts the job (ncclCommAbort, then MPI_Abort). NCCL's
// asynchronous errors (a peer gone) are checked at every poll and unit boundary.

#define MAX_PENDING (GPT2_MAX_UNITS + 8)
enum { SLOT_FREE, SLOT_INFLIGHT, SLOT_WAITED };
typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;           // communication
    int rank, world, step;
    double timeout;
    cudaEvent_t ready;             // recorded on compute before each collective
    cudaEvent_t done[MAX_PENDING]; // recorded on the comm stream after it
    int state[MAX_PENDING];
    char what[MAX_PENDING][112];
    unsigned long seq[MAX_PENDING], next_seq;
    double *d_scalars, *h_scalars; // sum_doubles' buffers (device, pinned host)
    int scalar_cap;
    size_t allocated;              // bytes asked of cudaMalloc through the backend's alloc
} NcclBackend;

static NcclBackend nccl;

static void comm_abort(NcclBackend *b, const char *what, const char *why) {
    fprintf(stderr, "error: rank %d: %s %s at step %d; a peer is stuck or gone (--comm-timeout); aborting the job\n",
            b->rank, what, why, b->step);
    if (b->comm) ncclCommAbort(b->comm);
    MPI_Abort(MPI_COMM_WORLD, 3);
}
static void comm_check_async(NcclBackend *b) {
    if (!b->comm) return;
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(b->comm, &r);
    if (r != ncclSuccess && r != ncclInProgress) {
        char why[160];
        snprintf(why, sizeof(why), "failed (%s)", ncclGetErrorString(r));
        comm_abort(b, "a collective", why);
    }
}
// Free the slots whose collective completed and was waited for.
static void comm_reclaim(NcclBackend *b) {
    for (int h = 0; h < MAX_PENDING; h++)
        if (b->state[h] == SLOT_WAITED && cudaEventQuery(b->done[h]) == cudaSuccess) b->state[h] = SLOT_FREE;
}

// Block the host until `ev` (recorded on a stream) completes, within --comm-timeout.
static void wait_event_watchdog(NcclBackend *b, cudaEvent_t ev, const char *what) {
    double start = now_seconds();
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) gpu_fatal(what, cudaGetErrorString(e), __FILE__, __LINE__);
        comm_check_async(b);
        if (now_seconds() - start > b->timeout) {
            // name the oldest collective still running; otherwise the device was just slow
            int oldest = -1;
            for (int h = 0; h < MAX_PENDING; h++)
                if (b->state[h] != SLOT_FREE && cudaEventQuery(b->done[h]) == cudaErrorNotReady &&
                    (oldest < 0 || b->seq[h] < b->seq[oldest])) oldest = h;
            char why[64];
            snprintf(why, sizeof(why), "did not complete within %g s", b->timeout);
            comm_abort(b, oldest >= 0 ? b->what[oldest] : what, why);
        }
        if (spins > 100) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
}
// The host waits for everything enqueued on the compute stream so far.
static void gpu_sync(NcclBackend *b, const char *what) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, gpu.compute));
    wait_event_watchdog(b, ev, what);
    CUDA_CHECK(cudaEventDestroy(ev));
    comm_reclaim(b);
}

static int comm_begin(NcclBackend *b, const char *kind) {
    int h = -1;
    for (int pass = 0; pass < 2 && h < 0; pass++) {
        if (pass == 1) comm_reclaim(b);
        for (int k = 0; k < MAX_PENDING; k++)
            if (b->state[k] == SLOT_FREE) { h = k; break; }
    }
    if (h < 0) { // every slot busy (a very deep model between two host syncs): wait for the oldest
        for (int k = 0; k < MAX_PENDING; k++)
            if (b->state[k] == SLOT_WAITED && (h < 0 || b->seq[k] < b->seq[h])) h = k;
        if (h < 0) {
            fprintf(stderr, "error: rank %d: more than %d collectives in flight, none waited for\n", b->rank, MAX_PENDING);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        wait_event_watchdog(b, b->done[h], b->what[h]);
    }
    b->state[h] = SLOT_INFLIGHT;
    b->seq[h] = b->next_seq++;
    snprintf(b->what[h], sizeof(b->what[h]), "%s", kind);
    CUDA_CHECK(cudaEventRecord(b->ready, gpu.compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->stream, b->ready, 0));
    return h;
}
static int comm_end(NcclBackend *b, int h) {
    CUDA_CHECK(cudaEventRecord(b->done[h], b->stream));
    return h;
}
// zero.h's element types as NCCL's: its 16-bit sums round as they go, which is zero.h's
// contract (and what the CPU's MPI operations do one pair at a time).
static ncclDataType_t nccl_type(int dtype) {
    return dtype == ZC_BF16 ? ncclBfloat16 : dtype == ZC_FP16 ? ncclHalf : ncclFloat;
}
static int nccl_all_reduce(void *ctx, void *buf, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = comm_begin(b, "all_reduce");
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(dtype), ncclSum, b->comm, b->stream));
    return comm_end(b, h);
}
// In place exactly when recv == send + rank * n elements, in bytes: n * zc_dtype_size(dtype)
// each. That is NCCL's own convention (it compares the addresses), and zero.h's: nothing to
// check or move here, whatever the element size.
static int nccl_reduce_scatter(void *ctx, void *send, void *recv, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = comm_begin(b, "reduce_scatter");
    NCCL_CHECK(ncclReduceScatter(send, recv, n, nccl_type(dtype), ncclSum, b->comm, b->stream));
    return comm_end(b, h);
}
// In place exactly when send == recv + rank * n elements (bytes as above), again NCCL's convention.
static int nccl_all_gather(void *ctx, const void *send, void *recv, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = comm_begin(b, "all_gather");
    NCCL_CHECK(ncclAllGather(send, recv, n, nccl_type(dtype), b->comm, b->stream));
    return comm_end(b, h);
}
static void nccl_wait(void *ctx, int h, const char *what) {
    NcclBackend *b = (NcclBackend *)ctx;
    snprintf(b->what[h], sizeof(b->what[h]), "%s", what);
    CUDA_CHECK(cudaStreamWaitEvent(gpu.compute, b->done[h], 0));
    b->state[h] = SLOT_WAITED;
}
static void nccl_set_step(void *ctx, int step) { ((NcclBackend *)ctx)->step = step; }
static void nccl_progress(void *ctx) { comm_check_async((NcclBackend *)ctx); } // NCCL progresses by itself
static void nccl_sum_doubles(void *ctx, double *x, int n) {
    NcclBackend *b = (NcclBackend *)ctx;
    if (n > b->scalar_cap) {
        if (b->d_scalars) { CUDA_CHECK(cudaFree(b->d_scalars)); CUDA_CHECK(cudaFreeHost(b->h_scalars)); }
        b->scalar_cap = n < 64 ? 64 : n;
        CUDA_CHECK(cudaMalloc(&b->d_scalars, (size_t)b->scalar_cap * sizeof(double)));
        CUDA_CHECK(cudaMallocHost(&b->h_scalars, (size_t)b->scalar_cap * sizeof(double)));
    }
    memcpy(b->h_scalars, x, (size_t)n * sizeof(double));
    // on the comm stream: after the collectives already issued, as on every other rank
    CUDA_CHECK(cudaMemcpyAsync(b->d_scalars, b->h_scalars, (size_t)n * sizeof(double), cudaMemcpyHostToDevice, b->stream));
    NCCL_CHECK(ncclAllReduce(b->d_scalars, b->d_scalars, (size_t)n, ncclDouble, ncclSum, b->comm, b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_scalars, b->d_scalars, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, b->stream));
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, b->stream));
    wait_event_watchdog(b, ev, "all_reduce of scalars (loss, norm, reports)");
    CUDA_CHECK(cudaEventDestroy(ev));
    memcpy(x, b->h_scalars, (size_t)n * sizeof(double));
}
// zero.h's memory, zeroed. `allocated` counts exactly the bytes asked for, as zero.h's `mem`
// does, so the start-up line compares like with like (a request for 0 bytes still gets a
// valid pointer: 1 byte, counted as 0).
static void *dev_alloc(void *ctx, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    void *p = NULL;
    size_t got = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, got);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fprintf(stderr, "error: rank %d: cudaMalloc of %.1f MiB failed (%s; %.1f of %.1f MiB free); try a higher "
                        "--zero-stage, a smaller --batch, or ./train_gpt --plan\n",
                b->rank, got / 1048576.0, cudaGetErrorString(e), free_b / 1048576.0, total_b / 1048576.0);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CUDA_CHECK(cudaMemset(p, 0, got));
    b->allocated += bytes;
    return p;
}
static void dev_free(void *ctx, void *p) { (void)ctx; CUDA_CHECK(cudaFree(p)); }
static void dev_zero(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, gpu.compute));
}
static void dev_add(void *ctx, void *dst, const void *src, size_t n, int dtype) {
    (void)ctx;
    add_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(dst, src, n, dtype);
    LAUNCH_CHECK();
}


// Host <-> device copies on the compute stream, complete when they return.
static void d2h(void *host, const void *dev, size_t bytes, const char *what) {
    CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, gpu.compute));
    gpu_sync(&nccl, what);
}
// The host side of to_host / from_host is fp32. fp32 buffers copy straight through; 16-bit ones
// are widened (exact) or rounded on the device, through an fp32 staging buffer taken from the
// stream-ordered pool on the compute stream and given back before the call returns. These
// copies stage one unit or slice at a time (initialisation, model files, checkpoints), so the
// staging is transient, outside the memory plan, and never exists in fp32 runs.
static float *staging_floats(size_t n) {
    float *s = NULL;
    CUDA_CHECK(cudaMallocAsync((void **)&s, n * sizeof(float), gpu.compute));
    return s;
}
static void dev_to_host(void *ctx, float *host, const void *src, size_t n, int dtype) {
    (void)ctx;
    if (n == 0) return;
    if (dtype == ZC_F32) { d2h(host, src, n * sizeof(float), "a device-to-host copy"); return; }
    float *s = staging_floats(n);
    widen_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(s, src, n, dtype);
    LAUNCH_CHECK();
    d2h(host, s, n * sizeof(float), "a device-to-host copy");
    CUDA_CHECK(cudaFreeAsync(s, gpu.compute));
}
static void dev_from_host(void *ctx, void *dst, const float *host, size_t n, int dtype) {
    (void)ctx;
    if (n == 0) return;
    float *s = dtype == ZC_F32 ? (float *)dst : staging_floats(n);
    CUDA_CHECK(cudaMemcpyAsync(s, host, n * sizeof(float), cudaMemcpyHostToDevice, gpu.compute));
    if (dtype != ZC_F32) {
        narrow_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(dst, s, n, dtype);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaFreeAsync(s, gpu.compute));
    }
    gpu_sync(&nccl, "a host-to-device copy"); // the host buffer may be reused at once
}
static void dev_adamw(void *ctx, float *p, float *m, float *v, const void *g, void *p16, size_t n, int dtype,
                      const AdamWStep *step, int decay) {
    (void)ctx;
    adamw_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(p, m, v, g, p16, n, dtype, *step, decay);
    LAUNCH_CHECK();
}

static ZeroBackend nccl_backend(NcclBackend *b) {
    ZeroBackend be = {b, nccl_all_reduce, nccl_reduce_scatter, nccl_all_gather, nccl_wait, nccl_set_step, nccl_progress,
                      nccl_sum_doubles, dev_alloc, dev_free, dev_zero, dev_add, dev_to_host, dev_from_host, dev_adamw};
    return be;
}

// ----------------------------------------------------------------------------------------
// The model. Parameters, gradients and optimizer state live where zero.h put them (device
// memory, through the backend); the forward and backward ask it unit by unit.


typedef struct {
    GPT2Config cfg;
    Zero z;
    Activations acts;              // device
    float *acts_memory;
    size_t bytes_activations;
    size_t bytes_scratch;          // device memory outside the plan: cuBLASLt workspace, norm partials, tokens
    int B, T;
    int *inputs, *targets;         // host (pinned), what the dataloader fills
    int *d_inputs, *d_targets;     // device copies
    const int *dev_inputs, *dev_targets; // what model.h's kernels read: the device copies
    float *h_losses, *h_row;       // pinned: losses (B*T), one logits row (Vp)
    double *d_partials, *d_sumsq, *h_sumsq;
} GPT2;

// dtype: the element type of parameters, gradients and ZeRO's buffers. Always ZC_F32 here:
// config.h refuses bf16 and fp16 for this trainer, and every kernel and hook below reads fp32;
// the check is the defence should a 16-bit run ever get this far.
static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int stage, int rank, int world, int dtype,
                       ZeroBackend be) {
    if (dtype != ZC_F32) {
        fprintf(stderr, "error: rank %d: the GPU trainer computes in fp32 only, not %s\n", rank,
                dtype >= 0 && dtype < PRECISION_NUM ? precision_names[dtype] : "an unknown type");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    size_t free0 = 0, free1 = 0, total_dev = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total_dev));
    zero_init(&m->z, cfg, stage, rank, world, dtype, be);
    // Every layer's activations in fp32 (layer_slots = L: no 16-bit layer store), and no
    // workspace: the kernels read ZeRO's fp32 buffers directly (MEM_WORKSPACE stays 0).
    m->bytes_activations = gpt2_activation_bytes(cfg, B, T, 0);
    CUDA_CHECK(cudaMalloc(&m->acts_memory, m->bytes_activations));
    CUDA_CHECK(cudaMemset(m->acts_memory, 0, m->bytes_activations));
    m->z.mem[MEM_ACTIVATIONS] = m->bytes_activations;
    gpt2_activations_wire(&m->acts, m->acts_memory, cfg, B, T, cfg->num_layers);
    m->B = B;
    m->T = T;
    size_t bt = (size_t)B * T;
    CUDA_CHECK(cudaMallocHost(&m->inputs, bt * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&m->targets, bt * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&m->h_losses, bt * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_row, (size_t)cfg->padded_vocab_size * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_sumsq, sizeof(double)));
    CUDA_CHECK(cudaMalloc(&m->d_inputs, bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_targets, bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_partials, (size_t)m->z.lay.num_units * NORM_BLOCKS * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&m->d_sumsq, sizeof(double)));
    m->bytes_scratch = gpu.workspace_bytes + 2 * bt * sizeof(int) + ((size_t)m->z.lay.num_units * NORM_BLOCKS + 1) * sizeof(double);
    CUDA_CHECK(cudaMemGetInfo(&free1, &total_dev));
    // The memory log entries carry zero.h's counts and the activations, which are exactly the
    // bytes asked of cudaMalloc; the device's own view (allocation granularity included) and
    // what lies outside the plan are printed beside them.
    size_t states = 0;
    for (int k = 0; k < MEM_KINDS; k++) if (k != MEM_ACTIVATIONS && k != MEM_WORKSPACE) states += m->z.mem[k];
    if (rank == 0)
        printf("device memory, rank 0: model states + ZeRO buffers %.1f MiB (cudaMalloc'd %.1f MiB), activations %.1f MiB, "
               "outside the plan %.1f MiB (cuBLASLt workspace, norm partials, tokens); device reports %.1f MiB more in use, "
               "%.1f MiB free\n", states / 1048576.0, ((NcclBackend *)be.ctx)->allocated / 1048576.0,
               m->bytes_activations / 1048576.0, m->bytes_scratch / 1048576.0,
               (double)(free0 - free1) / 1048576.0, free1 / 1048576.0);
}

static void gpt2_free(GPT2 *m) {
    gpu_sync(&nccl, "the last kernels");
    zero_free(&m->z);
    CUDA_CHECK(cudaFree(m->acts_memory));
    CUDA_CHECK(cudaFree(m->d_inputs)); CUDA_CHECK(cudaFree(m->d_targets));
    CUDA_CHECK(cudaFree(m->d_partials)); CUDA_CHECK(cudaFree(m->d_sumsq));
    CUDA_CHECK(cudaFreeHost(m->inputs)); CUDA_CHECK(cudaFreeHost(m->targets));
    CUDA_CHECK(cudaFreeHost(m->h_losses)); CUDA_CHECK(cudaFreeHost(m->h_row)); CUDA_CHECK(cudaFreeHost(m->h_sumsq));
}

// --- what model.h needs beyond the kernel wrappers above -------------------------------

static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(out, inp, wte, wpe, B * T, T, C);
    LAUNCH_CHECK();
}
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    encoder_backward_wte_kernel<<<grid_for((size_t)B * T * C, 256), 256, 0, gpu.compute>>>(dwte, dout, inp, B * T, C);
    LAUNCH_CHECK();
    encoder_backward_wpe_kernel<<<grid_for((size_t)T * C, 256), 256, 0, gpu.compute>>>(dwpe, dout, B, T, C);
    LAUNCH_CHECK();
}
static void zero_fill(float *p, size_t n) { CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), gpu.compute)); }
// The batch goes to the device on the compute stream, ahead of the kernels that read it.
static void upload_batch(GPT2 *m, const int *inputs, const int *targets, int N) {
    CUDA_CHECK(cudaMemcpyAsync(m->d_inputs, inputs, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, gpu.compute));
    if (targets)
        CUDA_CHECK(cudaMemcpyAsync(m->d_targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, gpu.compute));
    m->dev_inputs = m->d_inputs;
    m->dev_targets = m->d_targets;
}
// The fused classifier over the logits, and the mean loss summed on the host in order, as the
// CPU trainer does.
static float classifier_loss(GPT2 *m, int N, float dloss) {
    const GPT2Config *c = &m->cfg;
    crossentropy_softmax_kernel<<<N, CLS_THREADS, 0, gpu.compute>>>(m->acts.logits, m->acts.losses, m->d_targets,
                                                                    c->vocab_size, c->padded_vocab_size, dloss);
    LAUNCH_CHECK();
    d2h(m->h_losses, m->acts.losses, (size_t)N * sizeof(float), "the forward pass (loss)");
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->h_losses[i];
    return (float)(sum / N);
}

// The storage hooks. The kernels compute in the storage type, fp32, so they pass zero.h's
// pointers straight through (the CPU trainer converts 16-bit storage here; a bf16 GPU run will
// hand its matmuls the 16-bit weights as UnitParams.x16 instead). Every layer's activations
// stay where the forward computed them, for the backward.
static UnitParams gpt2_unit_params(GPT2 *m, int u, int next) {
    UnitParams up = {(float *)zero_params(&m->z, u, next), NULL};
    return up;
}
static float *gpt2_unit_grads(GPT2 *m, int u) { return (float *)zero_grads(&m->z, u); }
static void gpt2_unit_grads_done(GPT2 *m, int u) { zero_grads_done(&m->z, u); }
static LayerActs gpt2_layer_acts_forward(GPT2 *m, int l, int B, int T) {
    return gpt2_layer_acts(&m->acts, &m->cfg, l, m->cfg.num_layers, B, T);
}
static void gpt2_layer_store(GPT2 *m, int l, int B, int T) { (void)m; (void)l; (void)B; (void)T; }
static LayerActs gpt2_layer_acts_backward(GPT2 *m, int l, int B, int T) { return gpt2_layer_acts_forward(m, l, B, T); }

#include "model.h" // gpt2_forward, gpt2_backward: the same passes as the CPU trainer's

// The global L2 norm: each unit's sum of squares in fixed-size partials, one fixed-order sum,
// one copy to the host, then zero.h's sum over ranks.
static float gpt2_grad_norm(GPT2 *m) {
    Zero *z = &m->z;
    for (int u = 0; u < z->lay.num_units; u++) {
        const float *g = (const float *)zero_update_grads(z, u); // fp32: gpt2_build refuses other types
        sumsq_kernel<<<NORM_BLOCKS, NORM_THREADS, 0, gpu.compute>>>(m->d_partials + (size_t)u * NORM_BLOCKS, g,
                                                                     zero_update_count(z, u));
        LAUNCH_CHECK();
    }
    sum_partials_kernel<<<1, NORM_THREADS, 0, gpu.compute>>>(m->d_sumsq, m->d_partials, z->lay.num_units * NORM_BLOCKS);
    LAUNCH_CHECK();
    d2h(m->h_sumsq, m->d_sumsq, sizeof(double), "the gradient norm");
    return zero_global_grad_norm(z, *m->h_sumsq);
}

// AdamW over the elements this rank owns, one launch per run of one kind (a partition
// boundary can cut through any tensor; frozen runs, padding and unused vocabulary rows, are
// never touched and stay zero).
static void gpt2_update(GPT2 *m, const AdamWStep *step) {
    zero_update(&m->z, step);
    gpu_sync(&nccl, "the update"); // the step ends here: its time is the device's, not the launches'
}

static const float *gpt2_logits_row(GPT2 *m, int t) {
    size_t Vp = (size_t)m->cfg.padded_vocab_size;
    d2h(m->h_row, m->acts.logits + (size_t)t * Vp, Vp * sizeof(float), "the sampler's logits");
    return m->h_row;
}


// ----------------------------------------------------------------------------------------
// The run: options, data, the loop, reports, checkpoints (shared with the CPU trainer)

struct Run;
static ZeroBackend trainer_backend(struct Run *r);
static void gpu_init(void);
#include "trainer.h"

// This rank's collectives: NCCL over all ranks, created here (setup calls this on every rank
// at the same point), with the watchdog's timeout from the options.
static ZeroBackend trainer_backend(Run *r) {
    NcclBackend *b = (NcclBackend *)r->backend;
    if (!gpu.lt) gpu_init(); // here, not in main: --help and option errors need no GPU
    b->rank = r->rank;
    b->world = r->world;
    b->timeout = r->cfg.comm_timeout;
    if (!b->comm) {
        ncclUniqueId id;
        if (r->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        NCCL_CHECK(ncclCommInitRank(&b->comm, r->world, id, r->rank));
        CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming));
        for (int h = 0; h < MAX_PENDING; h++) CUDA_CHECK(cudaEventCreateWithFlags(&b->done[h], cudaEventDisableTiming));
        // room for every report's scalars (checkpoint.h sums 6 per rank + 1): no cudaMalloc mid-run
        b->scalar_cap = 8 * r->world + 64;
        CUDA_CHECK(cudaMalloc(&b->d_scalars, (size_t)b->scalar_cap * sizeof(double)));
        CUDA_CHECK(cudaMallocHost(&b->h_scalars, (size_t)b->scalar_cap * sizeof(double)));
    }
    return nccl_backend(b);
}

// One GPU per process: the process's rank among those on its node picks the device.
static void gpu_init(void) {
    MPI_Comm local;
    int rank, lrank, ndev = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_free(&local);
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (ndev < 1) gpu_fatal("cudaGetDeviceCount", "no CUDA device", __FILE__, __LINE__);
    gpu.device = lrank % ndev;
    if (lrank >= ndev && rank == 0)
        fprintf(stderr, "warning: more processes per node than GPUs (%d): several share a device\n", ndev);
    CUDA_CHECK(cudaSetDevice(gpu.device));
    CUDA_CHECK(cudaGetDeviceProperties(&gpu.prop, gpu.device));
    gpu.sm_count = gpu.prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreate(&gpu.compute));
    CUBLAS_CHECK(cublasLtCreate(&gpu.lt));
    gpu.workspace_bytes = (size_t)32 << 20;
    CUDA_CHECK(cudaMalloc(&gpu.workspace, gpu.workspace_bytes));
    if (rank == 0)
        printf("device: %s (sm_%d%d, %d SMs, %.1f GiB), fp32 with fp32 cuBLASLt compute\n", gpu.prop.name, gpu.prop.major,
               gpu.prop.minor, gpu.sm_count, gpu.prop.totalGlobalMem / 1073741824.0);
}

static void gpu_shutdown(void) {
    if (!gpu.lt) return;
    if (nccl.comm) {
        ncclCommDestroy(nccl.comm);
        cudaStreamDestroy(nccl.stream);
    }
    cublasLtDestroy(gpu.lt);
    cudaFree(gpu.workspace);
    cudaStreamDestroy(gpu.compute);
}

#ifndef TESTING
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan")) return planner_main(argc, argv); // arithmetic only
    if (argc > 1 && !strcmp(argv[1], "--export")) return export_main(argc, argv);
    MPI_Init(&argc, &argv);
    static Run run;
    run.backend = &nccl;
    int rc = trainer_run(&run, argc, argv);
    gpu_shutdown();
    MPI_Finalize();
    return rc;
}
#endif
