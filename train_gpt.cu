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
// Precision: fixed when compiled (as llm.c's), `make train_gpt` bf16, `PRECISION=FP16` or
// `PRECISION=FP32` the others; the binary runs that one only (config.h). Parameters, gradients,
// ZeRO's buffers and collectives and the activations are floatX (below); LayerNorm statistics,
// the losses, the master weights and Adam's moments are fp32. Kernels load floatX, compute in
// fp32 and round once on the store; a kernel that adds into a parameter gradient sums its whole
// contribution in fp32 and rounds into the gradient once. Matmuls: cuBLASLt with floatX inputs
// and outputs and fp32 accumulation (CUBLAS_COMPUTE_32F; fp32 builds get no TF32). fp16 runs
// scale the loss (trainer.h); an overflow shows as a non-finite gradient norm, which the norm
// kernel lets through. The semantics are the CPU trainer's, with these differences (all within
// 16-bit rounding): every activation is rounded as it is produced (the CPU rounds a layer when
// it stores it), so the attention scores, the final LayerNorm's output, the logits and the
// embeddings' output are floatX before the fp32 kernels read them, the backward's activation
// gradients are floatX, and a parameter gradient is rounded after each kernel that adds to it
// rather than once per unit and micro-step.
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
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <cublasLt.h>
#include <nccl.h>

// floatX: the element type of parameters, gradients and activations in this build, its cuBLASLt
// type and zero.h's dtype for it (config.h reads the same GPU_PRECISION_* define; the
// static_assert below keeps the two in step). gpt2.h's views and activations are built on it.
#if defined(GPU_PRECISION_FP32)
typedef float floatX;
#define FLOATX_CUDA CUDA_R_32F
#define FLOATX_DTYPE ZC_F32
#elif defined(GPU_PRECISION_FP16)
typedef __half floatX;
#define FLOATX_CUDA CUDA_R_16F
#define FLOATX_DTYPE ZC_FP16
#else
typedef __nv_bfloat16 floatX;
#define FLOATX_CUDA CUDA_R_16BF
#define FLOATX_DTYPE ZC_BF16
#endif
#define GPT2_FLOATX floatX

#include "gpt2.h"
#include "config.h"
#include "optimizer.h"
#include "zero.h"
#include "planner.h"
#include "dataloader.h"
#include "tokenizer.h"
#include "ds_config.h"
#include "checkpoint.h"

// zero.h's dtypes and config.h's precisions share one order (fp32, bf16, fp16)
static_assert((int)FLOATX_DTYPE == (int)CONFIG_GPU_PRECISION, "train_gpt.cu and config.h read GPU_PRECISION_* differently");
static_assert(sizeof(floatX) == (FLOATX_DTYPE == ZC_F32 ? 4 : 2), "floatX is not the size of zero.h's dtype");

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

// floatX <-> fp32 at every load and store: kernels compute in fp32 only. Round to nearest even
// (the hardware conversion, which for every non-NaN value agrees bit for bit with
// mixed_precision.h's f32_to_bf16 / f32_to_fp16, the CPU's rounding; NaNs stay NaNs, payloads
// aside). Overflow rounds to Inf, which fp16's loss scaling relies on seeing.
static __device__ __forceinline__ float to_float(floatX x) {
#if defined(GPU_PRECISION_FP32)
    return x;
#elif defined(GPU_PRECISION_FP16)
    return __half2float(x);
#else
    return __bfloat162float(x);
#endif
}
#if !defined(GPU_PRECISION_FP32)
// An fp32 value passed by mistake would silently round on its way in: refuse it at compile time.
static __device__ float to_float(float x) = delete;
#endif
static __device__ __forceinline__ floatX to_floatX(float x) {
#if defined(GPU_PRECISION_FP32)
    return x;
#elif defined(GPU_PRECISION_FP16)
    return __float2half_rn(x);
#else
    return __float2bfloat16_rn(x);
#endif
}

// out (N,C) = wte[inp[n]] + wpe[n % T]. Grid-stride over N*C; consecutive threads take
// consecutive channels, so the reads and writes are coalesced. Token ids were checked by the
// dataloader (< vocab_size <= Vp rows).
static __global__ void encoder_forward_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe,
                                              int N, int T, int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        out[i] = to_floatX(to_float(wte[(size_t)inp[n] * C + c]) + to_float(wpe[(n % T) * C + c]));
    }
}

// dwte (Vp,C) += dout (N,C) summed over the positions of each token. The host grouped the
// batch's positions by token (group_tokens): bucket k is token tok[k], at positions
// pos[start[k]] .. pos[start[k+1]-1], increasing. One block per bucket, threads over channels:
// every (token, channel) belongs to one thread, so there are no atomics, the sum is fp32 in a
// fixed order (bitwise deterministic) and the gradient is rounded once. A frequent token makes
// one long block; the other buckets fill the GPU meanwhile. Grid: the number of buckets (>= 1).
static __global__ void encoder_backward_wte_kernel(floatX *dwte, const floatX *dout, const int *start, const int *pos,
                                                   const int *tok, int C) {
    int k = blockIdx.x, first = start[k], end = start[k + 1];
    floatX *row = dwte + (size_t)tok[k] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f;
        for (int j = first; j < end; j++) acc += to_float(dout[(size_t)pos[j] * C + c]);
        row[c] = to_floatX(to_float(row[c]) + acc);
    }
}
// dwpe (maxT,C) += sum over b of dout[b,t]: one thread per (t,c), deterministic, no races, one
// rounding.
static __global__ void encoder_backward_wpe_kernel(floatX *dwpe, const floatX *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += to_float(dout[(size_t)b * T * C + i]);
        dwpe[i] = to_floatX(to_float(dwpe[i]) + s);
    }
}

// out (N,C) = (inp - mean) * rstd * w + b. One warp per row (8 rows per 256-thread block);
// two passes over the row like the CPU (mean, then the centred variance), in fp32; mean and
// rstd are fp32. Bounds: a warp whose row is past N returns as a whole before any shuffle.
static __global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                                const floatX *w, const floatX *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    const floatX *x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int c = lane; c < C; c += WARP) m += to_float(x[c]);
    m = warp_sum(m) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += WARP) { float d = to_float(x[c]) - m; v += d * d; }
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) o[c] = to_floatX((to_float(x[c]) - m) * s * to_float(w[c]) + to_float(b[c]));
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// dinp (N,C) += through the normalisation (ACCUMULATES: the input is the residual stream).
// One warp per row, as the forward; each element of dinp is read and written by one lane.
static __global__ void layernorm_backward_input_kernel(floatX *dinp, const floatX *dout, const floatX *inp,
                                                       const floatX *w, const float *mean, const float *rstd, int N,
                                                       int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    const floatX *x = inp + (size_t)row * C, *d = dout + (size_t)row * C;
    float m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
    for (int c = lane; c < C; c += WARP) {
        float dnorm = to_float(w[c]) * to_float(d[c]);
        dm += dnorm;
        dnm += dnorm * (to_float(x[c]) - m) * s;
    }
    dm = warp_sum(dm) / C;
    dnm = warp_sum(dnm) / C;
    floatX *di = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += WARP) {
        float norm = (to_float(x[c]) - m) * s;
        di[c] = to_floatX(to_float(di[c]) + (to_float(w[c]) * to_float(d[c]) - dm - norm * dnm) * s);
    }
}

// Column reductions over N rows, deterministic (fixed order, no atomics): a 32x32 block owns
// 32 columns; thread (tx, ty) sums rows ty, ty+32, ... of column tx (coalesced: a warp reads
// 32 consecutive elements of one row), then the 32 partial sums are added in a fixed order in
// shared memory, all in fp32, and added to the gradient with one rounding. Grid: ceil(cols/32).
// Threads past the last column compute zeros but stay alive through __syncthreads. Occupancy is
// modest for small C (C/32 blocks); the rows are long, so each block streams a lot. Used for
// LayerNorm dw/db and matmul bias gradients.
//   dw (C) += sum_n (x - mean) * rstd * dout;  db (C) += sum_n dout     (x != NULL)
//   db (C) += sum_n dout                                                  (x == NULL)
static __global__ void column_grads_kernel(floatX *dw, floatX *db, const floatX *dout, const floatX *x,
                                           const float *mean, const float *rstd, int N, int C) {
    __shared__ float sw[32][33], sb[32][33];
    int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * 32 + tx;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int n = ty; n < N; n += 32) {
            float d = to_float(dout[(size_t)n * C + c]);
            ab += d;
            if (x) aw += (to_float(x[(size_t)n * C + c]) - mean[n]) * rstd[n] * d;
        }
    }
    sw[ty][tx] = aw;
    sb[ty][tx] = ab;
    __syncthreads();
    if (ty == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 32; k++) { tw += sw[k][tx]; tb += sb[k][tx]; }
        if (x) dw[c] = to_floatX(to_float(dw[c]) + tw);
        db[c] = to_floatX(to_float(db[c]) + tb);
    }
}

// out (N,OC) += bias: only where cuBLASLt's bias epilogue cannot take the pointer (it wants
// 16-byte alignment, which small test models' tensor offsets do not always give). In 16 bits
// the product was rounded already, so such a matmul rounds twice (the epilogue rounds once).
static __global__ void add_bias_kernel(floatX *out, const floatX *bias, int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_floatX(to_float(out[i]) + to_float(bias[i % OC]));
}

// out = a + b elementwise (the residual connections).
static __global__ void residual_forward_kernel(floatX *out, const floatX *a, const floatX *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_floatX(to_float(a[i]) + to_float(b[i]));
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
static __global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_floatX(gpt2_gelu(to_float(inp[i])));
}
// dinp = gelu'(inp) * dout; dinp may be dout (each element read before it is written, by the
// same thread).
static __global__ void gelu_backward_kernel(floatX *dinp, const floatX *inp, const floatX *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = to_floatX(gpt2_gelu_grad(to_float(inp[i])) * to_float(dout[i]));
}

// Causal softmax of the scores, in place: att (rows = B*NH*T, each T long), row r is query
// t = r % T; columns t2 <= t become the probabilities, t2 > t become 0 (the batched matmul
// with V reads the whole row). One warp per row, three passes (max, sum, write), in fp32 over
// the stored scores (floatX: the scores matmul's output). Bounds as layernorm_forward_kernel;
// each element is read and rewritten by the same lane. Scores were scaled by 1/sqrt(hs) in the
// matmul.
static __global__ void softmax_causal_kernel(floatX *att, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t = row % T;
    floatX *a = att + (size_t)row * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += WARP) maxv = fmaxf(maxv, to_float(a[t2]));
    maxv = warp_max(maxv); // column 0 is always in, so maxv is finite for finite scores
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += WARP) sum += expf(to_float(a[t2]) - maxv);
    float inv = 1.0f / warp_sum(sum);
    for (int t2 = lane; t2 < T; t2 += WARP) a[t2] = to_floatX(t2 <= t ? expf(to_float(a[t2]) - maxv) * inv : 0.0f);
}

// The softmax's backward, in place over the probabilities of one layer:
//   dS[t,t2] = P[t,t2] * (dP[t,t2] - D[t]) * scale,  dP[t,t2] = dy_t . v_t2,  D[t] = dy_t . y_t
// (D[t] = sum_t2 P[t,t2] dP[t,t2], because y_t = sum_t2 P[t,t2] v_t2: the flash-attention
// identity, so the row needs one pass; in 16 bits y is the stored, rounded output, so D carries
// its rounding). dy (B,T,C) is the gradient of the attention output y (B,T,C), v inside qkv
// (B,T,3C). One warp per row (b, h, t); lanes split the keys t2, each dot in fp32.
// Each lane computes its own dot over hs (dy_t is the same address for all lanes: a
// broadcast; v_t2 rows differ per lane: uncoalesced, served mostly by L2). This is the
// O(T^2 hs) part the planned flash kernel replaces; P must still hold the probabilities (the
// dV matmul runs before this kernel on the same stream). Each a[t2] is read and rewritten by
// one lane.
static __global__ void attention_softmax_backward_kernel(floatX *att, const floatX *dy, const floatX *y,
                                                         const floatX *qkv, int B, int T, int C, int NH, float scale) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= B * NH * T) return;
    int hs = C / NH, t = row % T, h = (row / T) % NH, b = row / (T * NH);
    const floatX *dyt = dy + ((size_t)b * T + t) * C + (size_t)h * hs;
    const floatX *yt = y + ((size_t)b * T + t) * C + (size_t)h * hs;
    float D = 0.0f;
    for (int i = lane; i < hs; i += WARP) D += to_float(dyt[i]) * to_float(yt[i]);
    D = warp_sum(D);
    floatX *a = att + (size_t)row * T;
    for (int t2 = lane; t2 < T; t2 += WARP) {
        if (t2 > t) { a[t2] = to_floatX(0.0f); continue; }
        const floatX *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * (size_t)C + (size_t)h * hs;
        float dot = 0.0f;
        for (int i = 0; i < hs; i++) dot += to_float(dyt[i]) * to_float(v[i]);
        a[t2] = to_floatX(to_float(a[t2]) * (dot - D) * scale);
    }
}

// ---- Flash attention (16-bit builds): causal self-attention without the (T,T) matrix ----
// The probabilities are never stored: the forward keeps each query row's log-sum-exp (lse,
// (B,NH,T) fp32, in units of the scaled scores) and the backward recomputes P = exp(s - lse)
// tile by tile. Tiles go through the tensor cores with WMMA (16x16x16, floatX operands, fp32
// accumulation); softmax statistics, the rescaling and dS are fp32, and P and dS are rounded
// to floatX as the tensor cores' operands (as FlashAttention-2 does). Key tiles entirely above
// the diagonal of a warp's queries are skipped (causal). Head size hs: a multiple of 16, at most
// FA_HS (gpt2_gpu_flash_attention), so every tile is whole; rows past T are zero-filled and
// masked. Blocks of 4 warps; each warp owns 16 rows (queries, or keys in the dK/dV kernel); all
// shared memory is static and under 48 KB, each array 128-byte aligned (WMMA needs every tile
// pointer 32-byte aligned and every leading dimension a multiple of 16 bytes: the tiles below
// start at multiples of 16 elements of rows of 32 or 64). Synchronisation: __syncthreads around every tile load
// (all warps read the shared tiles); within a warp, __syncwarp between the lanes' scalar writes
// of a tile and the fragment loads that read it, and between a fragment store and the lanes'
// scalar reads of it. Grid: (B*NH, ceil(T/64)).
#define FA_ROWS 64  // rows a block owns: queries (forward, dQ) or keys (dK, dV): 4 warps x 16
#define FA_STEP 32  // the inner loop's tile: keys (forward, dQ) or queries (dK, dV)
#define FA_HS GPT2_FLASH_MAX_HS
#define FA_THREADS 128
#if !defined(GPU_PRECISION_FP32)
namespace wmma = nvcuda::wmma;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, floatX, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, floatX, wmma::row_major> FragB;  // B (K,N) row-major
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, floatX, wmma::col_major> FragBT; // B given as B^T (N,K) row-major
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// One warp: C (16, 16*nt) fp32 in shared memory (ldc) = A (16,K) . Bt^T, with Bt (16*nt, K):
// products against a tile's rows (S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T).
static __device__ void warp_mm_bt(float *c, int ldc, const floatX *a, int lda, const floatX *bt, int ldb, int K, int nt) {
    for (int j = 0; j < nt; j++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < K; k += 16) {
            FragA fa;
            FragBT fb;
            wmma::load_matrix_sync(fa, a + k, lda);
            wmma::load_matrix_sync(fb, bt + (size_t)j * 16 * ldb + k, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + j * 16, acc, ldc, wmma::mem_row_major);
    }
}
// One warp: acc[j] (16x16 tiles of a (16, 16*nt) result) += A (16,K) . B (K, 16*nt), B row-major.
// (Loops over fragment arrays run to the compile-time FA_HS / 16 and stop at nt, so that the
// compiler unrolls them and keeps the fragments in registers rather than local memory.)
static __device__ void warp_mm_acc(FragC *acc, const floatX *a, int lda, const floatX *b, int ldb, int K, int nt) {
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++)
        for (int k = 0; k < K && j < nt; k += 16) {
            FragA fa;
            FragB fb;
            wmma::load_matrix_sync(fa, a + k, lda);
            wmma::load_matrix_sync(fb, b + (size_t)k * ldb + j * 16, ldb);
            wmma::mma_sync(acc[j], fa, fb, acc[j]);
        }
}
// rows (r0 .. r0+n) of one part (0 q, 1 k, 2 v) of head h of qkv, or of a (B,T,C) tensor when
// part < 0, into a (n, FA_HS) shared tile; rows at or past T are zeros. All threads of the block.
static __device__ void fa_load(floatX (*dst)[FA_HS], const floatX *src, int b, int h, int part, int r0, int n, int T, int C,
                               int hs) {
    size_t ld = part < 0 ? (size_t)C : 3 * (size_t)C;
    const floatX *base = src + (size_t)b * T * ld + (part < 0 ? 0 : part) * C + h * hs;
    for (int i = threadIdx.x; i < n * hs; i += blockDim.x) {
        int r = i / hs, d = i % hs, t = r0 + r;
        dst[r][d] = t < T ? base[(size_t)t * ld + d] : to_floatX(0.0f);
    }
}

// out (B,T,C): head h's columns = softmax(scale Q K^T, causal) V; lse (B,NH,T).
static __global__ void flash_forward_kernel(floatX *out, float *lse, const floatX *qkv, int T, int C, int NH) {
    __shared__ __align__(128) floatX Qs[FA_ROWS][FA_HS], Ks[FA_STEP][FA_HS], Vs[FA_STEP][FA_HS], P[4][16][FA_STEP];
    __shared__ __align__(128) float S[4][16][FA_STEP], O[4][16][FA_HS];
    int b = blockIdx.x / NH, h = blockIdx.x % NH, q0 = blockIdx.y * FA_ROWS, hs = C / NH;
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, r = lane / 2, half = lane % 2; // a lane pair per row
    int t = q0 + 16 * w + r, wfirst = q0 + 16 * w, last = min(q0 + FA_ROWS, T) - 1;
    float scale = 1.0f / sqrtf((float)hs), m = -INFINITY, l = 0.0f; // row t's running max and sum
    fa_load(Qs, qkv, b, h, 0, q0, FA_ROWS, T, C, hs);
    for (int d = half; d < hs; d += 2) O[w][r][d] = 0.0f;
    for (int k0 = 0; k0 <= last; k0 += FA_STEP) {
        __syncthreads(); // every warp is done with the previous K, V (and Q is loaded)
        fa_load(Ks, qkv, b, h, 1, k0, FA_STEP, T, C, hs);
        fa_load(Vs, qkv, b, h, 2, k0, FA_STEP, T, C, hs);
        __syncthreads();
        if (k0 > wfirst + 15) continue; // the whole tile is above this warp's diagonal (warp-uniform)
        warp_mm_bt(&S[w][0][0], FA_STEP, &Qs[16 * w][0], FA_HS, &Ks[0][0], FA_HS, hs, FA_STEP / 16);
        __syncwarp();
        float s[16], mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j < 16; j++) {
            int key = k0 + half * 16 + j;
            s[j] = key <= t && key < T ? S[w][r][half * 16 + j] * scale : -INFINITY;
            mx = fmaxf(mx, s[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float mnew = fmaxf(m, mx), mu = mnew == -INFINITY ? 0.0f : mnew; // a row with nothing yet (t >= T) stays 0
        float alpha = expf(m - mu);
        for (int j = 0; j < 16; j++) {
            float p = expf(s[j] - mu);
            sum += p;
            P[w][r][half * 16 + j] = to_floatX(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * alpha + sum;
        m = mnew;
        for (int d = half; d < hs; d += 2) O[w][r][d] *= alpha;
        __syncwarp();
        FragC acc[FA_HS / 16];
#pragma unroll
        for (int j = 0; j < FA_HS / 16; j++)
            if (j < hs / 16) wmma::load_matrix_sync(acc[j], &O[w][0][16 * j], FA_HS, wmma::mem_row_major);
        warp_mm_acc(acc, &P[w][0][0], FA_STEP, &Vs[0][0], FA_HS, FA_STEP, hs / 16);
#pragma unroll
        for (int j = 0; j < FA_HS / 16; j++)
            if (j < hs / 16) wmma::store_matrix_sync(&O[w][0][16 * j], acc[j], FA_HS, wmma::mem_row_major);
        __syncwarp();
    }
    if (t < T) {
        floatX *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int d = half; d < hs; d += 2) o[d] = to_floatX(O[w][r][d] / l);
        if (half == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
    }
}

// D[i] = dy_t . y_t for the rows r0 .. r0+n of head h (0 past T), and their lse: what
// P = exp(s - lse) and dS = P (dP - D) need (D = sum_t2 P dP, the flash-attention identity; y
// is the stored, rounded forward output). All threads of the block.
static __device__ void fa_row_stats(float *D, float *L, const floatX *dout, const floatX *y, const float *lse, int b, int h,
                                    int r0, int n, int T, int C, int NH, int hs) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        int t = r0 + i;
        float acc = 0.0f;
        if (t < T) {
            const floatX *dy = dout + ((size_t)b * T + t) * C + h * hs, *yy = y + ((size_t)b * T + t) * C + h * hs;
            for (int d = 0; d < hs; d++) acc += to_float(dy[d]) * to_float(yy[d]);
        }
        D[i] = acc;
        L[i] = t < T ? lse[((size_t)b * NH + h) * T + t] : 0.0f;
    }
}

// dqkv's q part (B,T,C of its 3C), OVERWRITTEN: dQ = dS K, dS = P (dP - D) scale, dP = dY V^T.
static __global__ void flash_backward_dq_kernel(floatX *dqkv, const float *lse, const floatX *dout, const floatX *y,
                                                const floatX *qkv, int T, int C, int NH) {
    __shared__ __align__(128) floatX Qs[FA_ROWS][FA_HS], dYs[FA_ROWS][FA_HS], Ks[FA_STEP][FA_HS], Vs[FA_STEP][FA_HS],
        dS[4][16][FA_STEP];
    __shared__ __align__(128) float W[4][16][2 * FA_STEP]; // per warp: S | dP; at the end dQ (FA_HS <= 2 FA_STEP columns)
    __shared__ float Ds[FA_ROWS], Ls[FA_ROWS];
    int b = blockIdx.x / NH, h = blockIdx.x % NH, q0 = blockIdx.y * FA_ROWS, hs = C / NH;
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, r = lane / 2, half = lane % 2;
    int i = 16 * w + r, t = q0 + i, wfirst = q0 + 16 * w, last = min(q0 + FA_ROWS, T) - 1;
    float scale = 1.0f / sqrtf((float)hs);
    fa_load(Qs, qkv, b, h, 0, q0, FA_ROWS, T, C, hs);
    fa_load(dYs, dout, b, h, -1, q0, FA_ROWS, T, C, hs);
    fa_row_stats(Ds, Ls, dout, y, lse, b, h, q0, FA_ROWS, T, C, NH, hs);
    FragC dq[FA_HS / 16];
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++) wmma::fill_fragment(dq[j], 0.0f);
    for (int k0 = 0; k0 <= last; k0 += FA_STEP) {
        __syncthreads();
        fa_load(Ks, qkv, b, h, 1, k0, FA_STEP, T, C, hs);
        fa_load(Vs, qkv, b, h, 2, k0, FA_STEP, T, C, hs);
        __syncthreads();
        if (k0 > wfirst + 15) continue;
        warp_mm_bt(&W[w][0][0], 2 * FA_STEP, &Qs[16 * w][0], FA_HS, &Ks[0][0], FA_HS, hs, FA_STEP / 16);        // S
        warp_mm_bt(&W[w][0][FA_STEP], 2 * FA_STEP, &dYs[16 * w][0], FA_HS, &Vs[0][0], FA_HS, hs, FA_STEP / 16); // dP
        __syncwarp();
        for (int j = 0; j < 16; j++) {
            int c = half * 16 + j, key = k0 + c;
            float p = key <= t && key < T && t < T ? expf(W[w][r][c] * scale - Ls[i]) : 0.0f;
            dS[w][r][c] = to_floatX(p * (W[w][r][FA_STEP + c] - Ds[i]) * scale);
        }
        __syncwarp();
        warp_mm_acc(dq, &dS[w][0][0], FA_STEP, &Ks[0][0], FA_HS, FA_STEP, hs / 16);
    }
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++)
        if (j < hs / 16) wmma::store_matrix_sync(&W[w][0][16 * j], dq[j], 2 * FA_STEP, wmma::mem_row_major);
    __syncwarp();
    if (t < T) {
        floatX *o = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
        for (int d = half; d < hs; d += 2) o[d] = to_floatX(W[w][r][d]);
    }
}

// dqkv's k and v parts, OVERWRITTEN: for this block's keys, dV = P^T dY and dK = dS^T Q over the
// queries at or after them, with S^T = K Q^T and dP^T = V dY^T computed per 32-query tile.
static __global__ void flash_backward_dkv_kernel(floatX *dqkv, const float *lse, const floatX *dout, const floatX *y,
                                                 const floatX *qkv, int T, int C, int NH) {
    __shared__ __align__(128) floatX Ks[FA_ROWS][FA_HS], Vs[FA_ROWS][FA_HS], Qs[FA_STEP][FA_HS], dYs[FA_STEP][FA_HS],
        Ps[4][16][FA_STEP];
    __shared__ __align__(128) float W[4][16][2 * FA_STEP]; // per warp: P^T (from S^T) | dP^T; at the end dK, then dV
    __shared__ float Ds[FA_STEP], Ls[FA_STEP];
    int b = blockIdx.x / NH, h = blockIdx.x % NH, k0 = blockIdx.y * FA_ROWS, hs = C / NH;
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, r = lane / 2, half = lane % 2;
    int key = k0 + 16 * w + r, wfirst = k0 + 16 * w;
    float scale = 1.0f / sqrtf((float)hs);
    fa_load(Ks, qkv, b, h, 1, k0, FA_ROWS, T, C, hs);
    fa_load(Vs, qkv, b, h, 2, k0, FA_ROWS, T, C, hs);
    FragC dk[FA_HS / 16], dv[FA_HS / 16];
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++) { wmma::fill_fragment(dk[j], 0.0f); wmma::fill_fragment(dv[j], 0.0f); }
    for (int q0 = k0; q0 < T; q0 += FA_STEP) { // queries before k0 see none of these keys
        __syncthreads();
        fa_load(Qs, qkv, b, h, 0, q0, FA_STEP, T, C, hs);
        fa_load(dYs, dout, b, h, -1, q0, FA_STEP, T, C, hs);
        fa_row_stats(Ds, Ls, dout, y, lse, b, h, q0, FA_STEP, T, C, NH, hs);
        __syncthreads();
        if (q0 + FA_STEP - 1 < wfirst || wfirst >= T) continue; // no query of the tile sees a key of this warp
        warp_mm_bt(&W[w][0][0], 2 * FA_STEP, &Ks[16 * w][0], FA_HS, &Qs[0][0], FA_HS, hs, FA_STEP / 16);        // S^T
        warp_mm_bt(&W[w][0][FA_STEP], 2 * FA_STEP, &Vs[16 * w][0], FA_HS, &dYs[0][0], FA_HS, hs, FA_STEP / 16); // dP^T
        __syncwarp();
        for (int j = 0; j < 16; j++) {
            int c = half * 16 + j, q = q0 + c;
            float p = q >= key && q < T && key < T ? expf(W[w][r][c] * scale - Ls[c]) : 0.0f;
            W[w][r][c] = p;
            Ps[w][r][c] = to_floatX(p);
        }
        __syncwarp();
        warp_mm_acc(dv, &Ps[w][0][0], FA_STEP, &dYs[0][0], FA_HS, FA_STEP, hs / 16);
        __syncwarp(); // every lane has read P^T before it becomes dS^T
        for (int j = 0; j < 16; j++) {
            int c = half * 16 + j;
            Ps[w][r][c] = to_floatX(W[w][r][c] * (W[w][r][FA_STEP + c] - Ds[c]) * scale);
        }
        __syncwarp();
        warp_mm_acc(dk, &Ps[w][0][0], FA_STEP, &Qs[0][0], FA_HS, FA_STEP, hs / 16);
    }
    for (int part = 1; part <= 2; part++) {
        __syncwarp(); // the lanes are done reading W (the previous part, or the last tile's)
#pragma unroll
        for (int j = 0; j < FA_HS / 16; j++)
            if (j < hs / 16) wmma::store_matrix_sync(&W[w][0][16 * j], part == 1 ? dk[j] : dv[j], 2 * FA_STEP, wmma::mem_row_major);
        __syncwarp();
        if (key < T) {
            floatX *o = dqkv + ((size_t)b * T + key) * 3 * C + part * C + h * hs;
            for (int d = half; d < hs; d += 2) o[d] = to_floatX(W[w][r][d]);
        }
    }
}
#endif

// The fused classifier: for each of N rows of logits (N,Vp, floatX), the softmax over the
// first V columns in fp32, the loss (fp32) against targets into losses (when targets != NULL),
// and, when dloss != 0, dloss * (softmax - onehot) written over the logits in place (padded
// columns get 0). One block per row (CLS_THREADS threads): an online max/sum per thread over a
// strided slice, combined across the warp by shuffles and across warps in shared memory, so
// the row is read twice (reduce, write) and never copied. Empty partials are (-inf, 0) and
// combine without NaN. Every thread reaches both __syncthreads. The target was checked by the
// dataloader (< V); an out-of-range one gives a NaN loss, never an out-of-bounds read.
#define CLS_THREADS 512
static __device__ __forceinline__ void online_combine(float *m, float *s, float m2, float s2) {
    float mm = fmaxf(*m, m2);
    if (mm == -INFINITY) return; // both empty
    *s = *s * expf(*m - mm) + s2 * expf(m2 - mm);
    *m = mm;
}
static __global__ void crossentropy_softmax_kernel(floatX *logits, float *losses, const int *targets,
                                                   int V, int Vp, float dloss) {
    __shared__ float sm[CLS_THREADS / WARP], ss[CLS_THREADS / WARP], row_max, row_inv;
    floatX *l = logits + (size_t)blockIdx.x * Vp;
    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) online_combine(&m, &s, to_float(l[i]), 1.0f);
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
            losses[blockIdx.x] = tgt >= 0 && tgt < V ? logf(S) + M - to_float(l[tgt]) : NAN;
        }
        row_max = M;
        row_inv = 1.0f / S;
    }
    __syncthreads(); // the loss has read l[tgt] before anyone overwrites it
    if (dloss == 0.0f) return;
    int tgt = targets ? targets[blockIdx.x] : -1;
    float M = row_max, inv = row_inv;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x)
        l[i] = to_floatX(i < V ? expf(to_float(l[i]) - M) * inv * dloss - (i == tgt ? dloss : 0.0f) : 0.0f);
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

// Sum of squares of g (n, the floatX gradient) into partial[blockIdx.x], in double; the grid
// is fixed (NORM_BLOCKS) so the order, and therefore the result, is the same every run. An Inf
// or NaN anywhere makes the sum non-finite (plain adds and products, nothing that drops a NaN):
// the overflow signal fp16's loss scaling reads off the norm. 256 threads; a tree in shared
// memory; every thread reaches every __syncthreads.
#define NORM_BLOCKS 128
#define NORM_THREADS 256
static __global__ void sumsq_kernel(double *partial, const floatX *g, size_t n) {
    __shared__ double sh[NORM_THREADS];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double x = to_float(g[i]);
        s += x * x;
    }
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

// The matmul of last resort (see matmul_lt): D (M,N) = alpha op(A) op(B) + beta D (+ bias),
// row-major as matmul_lt describes, `batch` matrices at element strides. One thread per
// element of D, an fp32 dot over K, one rounding; a 16x16 block covers a 16x16 tile (threads
// along a row of D: coalesced stores). Rows on grid.x (up to 2^31-1 blocks), columns on grid.y
// (N <= 4C or Vp or T: well under 65535 blocks of 16), batches on grid.z and a loop, so no
// grid limit binds. Slow (no reuse through shared memory) but correct for any alignment and
// leading dimension. beta == 0 never reads D (it may hold anything, NaN included).
static __global__ void matmul_fallback_kernel(floatX *d, const floatX *a, const floatX *b, const floatX *bias, int M,
                                              int N, int K, int transA, int transB, int lda, int ldb, int ldd,
                                              float alpha, float beta, int batch, long long strideA,
                                              long long strideB, long long strideD) {
    size_t i = (size_t)blockIdx.x * 16 + threadIdx.y;
    int j = blockIdx.y * 16 + threadIdx.x;
    if (i >= (size_t)M || j >= N) return;
    for (int k = blockIdx.z; k < batch; k += gridDim.z) {
        const floatX *ak = a + k * strideA, *bk = b + k * strideB;
        float acc = 0.0f;
        for (int p = 0; p < K; p++) {
            float x = to_float(transA ? ak[(size_t)p * lda + i] : ak[i * lda + p]);
            float y = to_float(transB ? bk[(size_t)j * ldb + p] : bk[(size_t)p * ldb + j]);
            acc += x * y;
        }
        floatX *dk = d + k * strideD + i * ldd + j;
        float r = alpha * acc;
        if (beta != 0.0f) r += beta * to_float(*dk);
        if (bias) r += to_float(bias[j]);
        *dk = to_floatX(r);
    }
}

// ----------------------------------------------------------------------------------------
// Matmuls through cuBLASLt: floatX inputs and outputs, fp32 accumulation and scaling
// (CUBLAS_COMPUTE_32F; in fp32 builds that is plain fp32, no TF32: the CPU comparison wants fp32
// products). Written in row-major terms:
//   D (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * D, each matrix row-major with its own
//   leading dimension; op(A) = A stored (M,K), or A^T with A stored (K,M) when transA.
// `batch` matrices at the given element strides (strided batch). bias (N), when given, is
// added to every row (beta must be 0 then). cuBLASLt is column-major, so it computes
// D^T = op(B)^T . op(A)^T: the row-major B is its first operand. With beta != 0 cuBLASLt reads
// D, adds in fp32 and rounds once: parameter gradients (dw +=) get one rounding per call.

// The alignment in bytes (256 at most, one element at least) that a pointer and, in a strided
// batch, every batch's pointer share.
static size_t alignment_of(const void *p, long long stride_elems, int batch) {
    uintptr_t a = (uintptr_t)p;
    if (batch > 1) a |= (uintptr_t)(stride_elems * (long long)sizeof(floatX));
    size_t al = 256;
    while (al > sizeof(floatX) && (a & (al - 1))) al >>= 1;
    return al;
}

// cuBLASLt's descriptors and its heuristic's choice for one shape. A training step asks for the
// same couple of dozen shapes again and again, and asking the heuristic costs more host time
// than many of the kernels it picks, so each shape is planned once (matmul_plan) and its plan
// reused; only the bias pointer changes between calls (set on the descriptor before each one:
// cuBLASLt reads descriptors when the matmul is enqueued). The key is everything the heuristic
// saw: sizes, transposes, leading dimensions, batch and strides, the alignments the pointers
// have and whether the bias goes through the epilogue.
typedef struct {
    int M, N, K, transA, transB, lda, ldb, ldd, batch, bias_epilogue;
    long long strideA, strideB, strideD;
    uint32_t al[3];                  // B, A, D: as told to the heuristic
} MatmulKey;
typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t heur;
    int found;                       // 0: no cuBLASLt algorithm, the fallback kernel runs
} MatmulPlan;
#define MATMUL_PLANS 64              // GPT-2 uses about 20 shapes (sampler included); more are replaced in turn
static MatmulPlan matmul_plans[MATMUL_PLANS];
static int matmul_plans_used, matmul_plans_next;

static void matmul_plan_free(MatmulPlan *p) {
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}
static void matmul_plans_free(void) {
    for (int i = 0; i < matmul_plans_used; i++) matmul_plan_free(&matmul_plans[i]);
    matmul_plans_used = matmul_plans_next = 0;
}
static const MatmulPlan *matmul_plan(const MatmulKey *k) {
    for (int i = 0; i < matmul_plans_used; i++)
        if (!memcmp(&matmul_plans[i].key, k, sizeof(*k))) return &matmul_plans[i];
    MatmulPlan *p;
    if (matmul_plans_used < MATMUL_PLANS) p = &matmul_plans[matmul_plans_used++];
    else { p = &matmul_plans[matmul_plans_next]; matmul_plans_next = (matmul_plans_next + 1) % MATMUL_PLANS; matmul_plan_free(p); }
    memset(p, 0, sizeof(*p));
    p->key = *k;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opA = k->transB ? CUBLAS_OP_T : CUBLAS_OP_N, opB = k->transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    if (k->bias_epilogue) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        int32_t bias_type = FLOATX_CUDA; // D's type is the default; said explicitly, as the bias is floatX by contract
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    // column-major views: first operand = row-major B, second = row-major A, D is (N rows, M cols)
    int M = k->M, N = k->N, K = k->K;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, FLOATX_CUDA, k->transB ? K : N, k->transB ? N : K, k->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, FLOATX_CUDA, k->transA ? M : K, k->transA ? K : M, k->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, FLOATX_CUDA, N, M, k->ldd));
    if (k->batch > 1) {
        cublasLtMatrixLayout_t ls[3] = {p->la, p->lb, p->ld};
        long long st[3] = {k->strideB, k->strideA, k->strideD};
        for (int i = 0; i < 3; i++) {
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &k->batch, sizeof(k->batch)));
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i], sizeof(st[i])));
        }
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &gpu.workspace_bytes, sizeof(gpu.workspace_bytes)));
    // Tell the heuristic how aligned the pointers (and every batch's pointer) really are, so
    // it never picks a kernel that needs more: tensor offsets inside a unit, a head's columns
    // inside qkv and the sampler's odd sequence lengths can leave as little as one element.
    cublasLtMatmulPreferenceAttributes_t which[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                     CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    uint32_t vals[4] = {k->al[0], k->al[1], k->al[2], k->al[2]};
    for (int i = 0; i < 4; i++) CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &vals[i], sizeof(vals[i])));
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(gpu.lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &p->heur, &p->found);
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(hs);
    if (hs != CUBLAS_STATUS_SUCCESS) p->found = 0;
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    return p;
}

static void matmul_lt(floatX *d, const floatX *a, const floatX *b, const floatX *bias, int M, int N, int K, int transA,
                      int transB, int lda, int ldb, int ldd, float alpha, float beta, int batch = 1,
                      long long strideA = 0, long long strideB = 0, long long strideD = 0) {
    MatmulKey key;
    memset(&key, 0, sizeof(key)); // the padding too: keys are compared with memcmp
    key.M = M; key.N = N; key.K = K; key.transA = transA; key.transB = transB;
    key.lda = lda; key.ldb = ldb; key.ldd = ldd; key.batch = batch;
    key.strideA = strideA; key.strideB = strideB; key.strideD = strideD;
    key.bias_epilogue = bias && ((uintptr_t)bias % 16) == 0;
    key.al[0] = (uint32_t)alignment_of(b, strideB, batch);
    key.al[1] = (uint32_t)alignment_of(a, strideA, batch);
    key.al[2] = (uint32_t)alignment_of(d, strideD, batch);
    const MatmulPlan *p = matmul_plan(&key);
    if (!p->found) {
        // No cuBLASLt kernel for this shape and these alignments (16-bit operands one element
        // aligned, say): compute it anyway, slowly, and say so once per process, so that a
        // slow shape is visible rather than fatal.
        static int warned = 0;
        if (!warned) {
            warned = 1;
            fprintf(stderr, "warning: no cuBLASLt algorithm for M=%d N=%d K=%d transA=%d transB=%d batch=%d (alignments "
                            "%u/%u/%u bytes): a plain CUDA kernel computes it (slow); further cases are not reported\n",
                    M, N, K, transA, transB, batch, key.al[1], key.al[0], key.al[2]);
        }
        dim3 grid(ceil_div((size_t)M, 16), ceil_div((size_t)N, 16), batch < 65535 ? batch : 65535);
        matmul_fallback_kernel<<<grid, dim3(16, 16), 0, gpu.compute>>>(d, a, b, bias, M, N, K, transA, transB, lda, ldb,
                                                                       ldd, alpha, beta, batch, strideA, strideB, strideD);
        LAUNCH_CHECK();
        return;
    }
    if (key.bias_epilogue)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    CUBLAS_CHECK(cublasLtMatmul(gpu.lt, p->desc, &alpha, b, p->la, a, p->lb, &beta, d, p->ld, d, p->ld, &p->heur.algo,
                                gpu.workspace, gpu.workspace_bytes, gpu.compute));
    if (bias && !key.bias_epilogue) {
        for (int k = 0; k < batch; k++) {
            add_bias_kernel<<<grid_for((size_t)M * N, 256), 256, 0, gpu.compute>>>(d + k * strideD, bias, M, N);
            LAUNCH_CHECK();
        }
    }
}

// out (N,OC) = inp (N,C) . w^T + bias; w (OC,C) as PyTorch's Linear; bias (OC) or NULL.
// w16: the weight's 16-bit copy (model.h's gpt2_x16), or NULL. Here the weights themselves
// are floatX already, so the storage hooks never hand one over (UnitParams.x16 is NULL): it is
// the CPU trainer's, whose fp32 kernels need a separate 16-bit copy for its bf16 matmuls.
static void matmul_forward(floatX *out, const floatX *inp, const floatX *w, const void *w16, const floatX *bias, int N,
                           int C, int OC) {
    (void)w16;
    matmul_lt(out, inp, w, bias, N, OC, C, 0, 1, C, C, OC, 1.0f, 0.0f);
}
// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += dout^T . inp;  dbias (OC) += column sums of dout
// (w16 as in matmul_forward)
static void matmul_backward(floatX *dinp, floatX *dw, floatX *dbias, const floatX *dout, const floatX *inp,
                            const floatX *w, const void *w16, int N, int C, int OC) {
    (void)w16;
    matmul_lt(dinp, dout, w, NULL, N, C, OC, 0, 0, OC, C, C, 1.0f, 0.0f);
    matmul_lt(dw, dout, inp, NULL, OC, C, N, 1, 0, OC, C, C, 1.0f, 1.0f);
    if (dbias) {
        column_grads_kernel<<<ceil_div(OC, 32), dim3(32, 32), 0, gpu.compute>>>(NULL, dbias, dout, NULL, NULL, NULL, N, OC);
        LAUNCH_CHECK();
    }
}

static void layernorm_forward(floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w, const floatX *b,
                              int N, int C) {
    layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, gpu.compute>>>(out, mean, rstd, inp, w, b, N, C);
    LAUNCH_CHECK();
}
static void layernorm_backward(floatX *dinp, floatX *dw, floatX *db, const floatX *dout, const floatX *inp,
                               const floatX *w, const float *mean, const float *rstd, int N, int C) {
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
// Whether this build and this head size run the flash kernels (gpt2.h decides, for the
// activations' layout too); then att holds the log-sum-exp rows, (B,NH,T) fp32.
static int flash_attention(int C, int NH) { return gpt2_gpu_flash_attention(C, NH, sizeof(floatX)); }
static void attention_forward(floatX *out, floatX *att, const floatX *qkv, int B, int T, int C, int NH) {
#if !defined(GPU_PRECISION_FP32)
    if (flash_attention(C, NH)) {
        flash_forward_kernel<<<dim3(B * NH, ceil_div(T, FA_ROWS)), FA_THREADS, 0, gpu.compute>>>(out, (float *)(void *)att, qkv, T, C, NH);
        LAUNCH_CHECK();
        return;
    }
#endif
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    HeadLoop h = head_loop(B, T, C, NH);
    for (int o = 0; o < h.outer; o++) { // S = scale * Q K^T   (T,T) per head
        const floatX *q = qkv + o * h.oq;
        matmul_lt(att + o * h.oatt, q, q + C, NULL, T, T, hs, 0, 1, C3, C3, T, scale, 0.0f, h.batch, h.sq, h.sq, h.satt);
    }
    int rows = B * NH * T;
    softmax_causal_kernel<<<ceil_div(rows, 8), 256, 0, gpu.compute>>>(att, rows, T);
    LAUNCH_CHECK();
    for (int o = 0; o < h.outer; o++) { // Y = P V   (T,hs) per head, written into out (B,T,C)
        const floatX *q = qkv + o * h.oq;
        matmul_lt(out + o * h.oy, att + o * h.oatt, q + 2 * C, NULL, T, hs, T, 0, 0, T, C3, C, 1.0f, 0.0f, h.batch,
                  h.satt, h.sq, h.sy);
    }
}
// dqkv (B,T,3C), OVERWRITTEN, from dout (B,T,C), qkv, the output y (B,T,C) and att, whose
// probabilities are replaced by the scores' gradient on the way (att is not needed again).
static void attention_backward(floatX *dqkv, floatX *att, const floatX *dout, const floatX *qkv, const floatX *y,
                               int B, int T, int C, int NH) {
#if !defined(GPU_PRECISION_FP32)
    if (flash_attention(C, NH)) {
        dim3 grid(B * NH, ceil_div(T, FA_ROWS));
        const float *lse = (const float *)(const void *)att;
        flash_backward_dq_kernel<<<grid, FA_THREADS, 0, gpu.compute>>>(dqkv, lse, dout, y, qkv, T, C, NH);
        LAUNCH_CHECK();
        flash_backward_dkv_kernel<<<grid, FA_THREADS, 0, gpu.compute>>>(dqkv, lse, dout, y, qkv, T, C, NH);
        LAUNCH_CHECK();
        return;
    }
#endif
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
        const floatX *q = qkv + o * h.oq;
        floatX *dq = dqkv + o * h.oq;
        // dQ = dS K,  dK = dS^T Q  (dS carries the scale)
        matmul_lt(dq, att + o * h.oatt, q + C, NULL, T, hs, T, 0, 0, T, C3, C3, 1.0f, 0.0f, h.batch, h.satt, h.sq, h.sq);
        matmul_lt(dq + C, att + o * h.oatt, q, NULL, T, hs, T, 1, 0, T, C3, C3, 1.0f, 0.0f, h.batch, h.satt, h.sq, h.sq);
    }
}

static void residual_forward(floatX *out, const floatX *a, const floatX *b, size_t n) {
    residual_forward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(out, a, b, n);
    LAUNCH_CHECK();
}
static void gelu_forward(floatX *out, const floatX *inp, size_t n) {
    gelu_forward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(out, inp, n);
    LAUNCH_CHECK();
}
static void gelu_backward(floatX *dinp, const floatX *inp, const floatX *dout, size_t n) {
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
    Activations acts;              // device: floatX, the statistics and losses fp32
    void *acts_memory;
    size_t bytes_activations;
    size_t bytes_scratch;          // device memory outside the plan: cuBLASLt workspace, norm partials, tokens
    int B, T;
    int *inputs, *targets;         // host (pinned), what the dataloader fills
    int *d_inputs, *d_targets;     // device copies
    const int *dev_inputs, *dev_targets; // what model.h's kernels read: the device copies
    float *h_losses, *h_row;       // pinned: losses (B*T), one logits row (Vp) widened to fp32
    floatX *h_row_x;               // pinned: that row as the device holds it
    int *h_groups, *d_groups;      // pinned / device: the batch's positions grouped by token (3*B*T + 1)
    int *token_group, *group_fill; // host: a token's group while grouping (-1 otherwise, Vp); fill cursors (B*T)
    cudaEvent_t groups_sent;       // the last upload of h_groups has been read
    double *d_partials, *d_sumsq, *h_sumsq;
} GPT2;

// The token groups of the last upload_batch, for encoder_backward (whose signature, model.h's,
// carries no model): `count` groups, group k is token tok[k] at positions pos[start[k]] ..
// pos[start[k+1]-1]. Device pointers into GPT2.d_groups.
static struct { const int *start, *pos, *tok; int count; } token_groups;

// dtype: the element type of parameters, gradients and ZeRO's buffers: floatX's. config.h
// refuses every other precision for this binary; the check is the defence should one ever get
// this far (every kernel and hook below reads floatX).
static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int stage, int rank, int world, int dtype,
                       ZeroBackend be) {
    if (dtype != FLOATX_DTYPE) {
        fprintf(stderr, "error: rank %d: this GPU trainer was built for %s, not %s\n", rank, precision_names[FLOATX_DTYPE],
                dtype >= 0 && dtype < PRECISION_NUM ? precision_names[dtype] : "an unknown type");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    size_t free0 = 0, free1 = 0, total_dev = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total_dev));
    zero_init(&m->z, cfg, stage, rank, world, dtype, be);
    // Every layer's activations in floatX (the statistics and losses fp32), each tensor 256-byte
    // aligned: gpt2_gpu_activation_bytes, the planner's formula for this trainer, which also
    // gives the offsets. No workspace: the kernels read ZeRO's floatX buffers directly
    // (MEM_WORKSPACE stays 0).
    size_t offset[NUM_ACTIVATIONS];
    m->bytes_activations = gpt2_gpu_activation_bytes(cfg, B, T, sizeof(floatX), offset);
    CUDA_CHECK(cudaMalloc(&m->acts_memory, m->bytes_activations));
    CUDA_CHECK(cudaMemset(m->acts_memory, 0, m->bytes_activations));
    m->z.mem[MEM_ACTIVATIONS] = m->bytes_activations;
    gpt2_activations_wire_at(&m->acts, m->acts_memory, offset);
    m->B = B;
    m->T = T;
    size_t bt = (size_t)B * T, Vp = (size_t)cfg->padded_vocab_size;
    CUDA_CHECK(cudaMallocHost(&m->inputs, bt * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&m->targets, bt * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&m->h_losses, bt * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_row, Vp * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_row_x, Vp * sizeof(floatX)));
    CUDA_CHECK(cudaMallocHost(&m->h_groups, (3 * bt + 1) * sizeof(int)));
    CUDA_CHECK(cudaMallocHost(&m->h_sumsq, sizeof(double)));
    m->token_group = (int *)xmalloc(Vp * sizeof(int));
    for (size_t v = 0; v < Vp; v++) m->token_group[v] = -1;
    m->group_fill = (int *)xmalloc(bt * sizeof(int));
    CUDA_CHECK(cudaEventCreateWithFlags(&m->groups_sent, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&m->d_inputs, bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_targets, bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_groups, (3 * bt + 1) * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_partials, (size_t)m->z.lay.num_units * NORM_BLOCKS * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&m->d_sumsq, sizeof(double)));
    m->bytes_scratch = gpu.workspace_bytes + (5 * bt + 1) * sizeof(int) +
                       ((size_t)m->z.lay.num_units * NORM_BLOCKS + 1) * sizeof(double);
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
    CUDA_CHECK(cudaFree(m->d_inputs)); CUDA_CHECK(cudaFree(m->d_targets)); CUDA_CHECK(cudaFree(m->d_groups));
    CUDA_CHECK(cudaFree(m->d_partials)); CUDA_CHECK(cudaFree(m->d_sumsq));
    CUDA_CHECK(cudaFreeHost(m->inputs)); CUDA_CHECK(cudaFreeHost(m->targets));
    CUDA_CHECK(cudaFreeHost(m->h_losses)); CUDA_CHECK(cudaFreeHost(m->h_row)); CUDA_CHECK(cudaFreeHost(m->h_row_x));
    CUDA_CHECK(cudaFreeHost(m->h_groups)); CUDA_CHECK(cudaFreeHost(m->h_sumsq));
    CUDA_CHECK(cudaEventDestroy(m->groups_sent));
    free(m->token_group); free(m->group_fill);
}

// --- what model.h needs beyond the kernel wrappers above -------------------------------

static void encoder_forward(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<grid_for(n, 256), 256, 0, gpu.compute>>>(out, inp, wte, wpe, B * T, T, C);
    LAUNCH_CHECK();
}
// inp is read through the token groups upload_batch built from the same batch (model.h runs the
// backward right after the forward over the same inputs).
static void encoder_backward(floatX *dwte, floatX *dwpe, const floatX *dout, const int *inp, int B, int T, int C) {
    (void)inp;
    if (token_groups.count > 0) { // channels per thread: whole warps, at most 256 threads
        int threads = C >= 256 ? 256 : (int)ceil_div((size_t)C, WARP) * WARP;
        encoder_backward_wte_kernel<<<token_groups.count, threads, 0, gpu.compute>>>(dwte, dout, token_groups.start,
                                                                                    token_groups.pos, token_groups.tok, C);
        LAUNCH_CHECK();
    }
    encoder_backward_wpe_kernel<<<grid_for((size_t)T * C, 256), 256, 0, gpu.compute>>>(dwpe, dout, B, T, C);
    LAUNCH_CHECK();
}
static void zero_fill(floatX *p, size_t n) { CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(floatX), gpu.compute)); }

// The batch's positions grouped by token into h_groups: start (count+1), then pos (N), then tok
// (count), where group k is token tok[k] at positions pos[start[k]] .. pos[start[k+1]-1] in
// increasing order; groups in order of first appearance. Two passes over the batch, touching
// only the tokens present (token_group is left all -1 again). Returns the number of groups.
static int group_tokens(GPT2 *m, const int *inputs, int N) {
    int *start = m->h_groups, *pos = start + N + 1, *tok = pos + N, count = 0;
    int Vp = m->cfg.padded_vocab_size;
    for (int n = 0; n < N; n++) {
        int t = inputs[n];
        if (t < 0 || t >= Vp) { // the dataloader and the sampler never produce one: a bug, not bad data
            fprintf(stderr, "error: rank %d: token %d at position %d is outside the vocabulary (%d rows)\n", m->z.rank, t,
                    n, Vp);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (m->token_group[t] < 0) { m->token_group[t] = count; tok[count] = t; start[count + 1] = 0; count++; }
        start[m->token_group[t] + 1]++;
    }
    start[0] = 0;
    for (int k = 0; k < count; k++) { start[k + 1] += start[k]; m->group_fill[k] = start[k]; }
    for (int n = 0; n < N; n++) pos[m->group_fill[m->token_group[inputs[n]]]++] = n;
    for (int k = 0; k < count; k++) m->token_group[tok[k]] = -1;
    return count;
}

// The batch goes to the device on the compute stream, ahead of the kernels that read it, with
// its token groups (for the embedding's backward). The pinned h_groups is rewritten only once
// the previous upload of it has completed (in practice long since: every forward ends in a
// host sync).
static void upload_batch(GPT2 *m, const int *inputs, const int *targets, int N) {
    CUDA_CHECK(cudaMemcpyAsync(m->d_inputs, inputs, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, gpu.compute));
    if (targets)
        CUDA_CHECK(cudaMemcpyAsync(m->d_targets, targets, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, gpu.compute));
    m->dev_inputs = m->d_inputs;
    m->dev_targets = m->d_targets;
    wait_event_watchdog(&nccl, m->groups_sent, "the previous batch's upload");
    int count = group_tokens(m, inputs, N);
    size_t ints = (size_t)2 * N + 1 + count;
    CUDA_CHECK(cudaMemcpyAsync(m->d_groups, m->h_groups, ints * sizeof(int), cudaMemcpyHostToDevice, gpu.compute));
    CUDA_CHECK(cudaEventRecord(m->groups_sent, gpu.compute));
    token_groups.start = m->d_groups;
    token_groups.pos = m->d_groups + N + 1;
    token_groups.tok = m->d_groups + 2 * (size_t)N + 1;
    token_groups.count = count;
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

// The storage hooks. The kernels compute on the storage type, floatX, so they pass zero.h's
// pointers straight through (the CPU trainer converts 16-bit storage here) and need no 16-bit
// copy beside them (x16 NULL). Every layer's activations stay where the forward computed them,
// for the backward.
static UnitParams gpt2_unit_params(GPT2 *m, int u, int next) {
    UnitParams up = {(floatX *)zero_params(&m->z, u, next), NULL};
    return up;
}
static floatX *gpt2_unit_grads(GPT2 *m, int u) { return (floatX *)zero_grads(&m->z, u); }
static void gpt2_unit_grads_done(GPT2 *m, int u) { zero_grads_done(&m->z, u); }
static LayerActs gpt2_layer_acts_forward(GPT2 *m, int l, int B, int T) {
    LayerActs x = gpt2_layer_acts(&m->acts, &m->cfg, l, m->cfg.num_layers, B, T);
    if (flash_attention(m->cfg.channels, m->cfg.num_heads)) // layer l's log-sum-exp rows, not its (T,T) probabilities
        x.att = (floatX *)(void *)((float *)(void *)m->acts.att + (size_t)l * B * m->cfg.num_heads * T);
    return x;
}
static void gpt2_layer_store(GPT2 *m, int l, int B, int T) { (void)m; (void)l; (void)B; (void)T; }
static LayerActs gpt2_layer_acts_backward(GPT2 *m, int l, int B, int T) { return gpt2_layer_acts_forward(m, l, B, T); }

#include "model.h" // gpt2_forward, gpt2_backward: the same passes as the CPU trainer's

// The global L2 norm of the floatX gradient: each unit's sum of squares in fixed-size
// partials, one fixed-order sum, one copy to the host, then zero.h's sum over ranks. An
// overflowed (fp16) gradient gives an Inf or NaN norm on every rank: trainer.h skips the step.
static float gpt2_grad_norm(GPT2 *m) {
    Zero *z = &m->z;
    for (int u = 0; u < z->lay.num_units; u++) {
        const floatX *g = (const floatX *)zero_update_grads(z, u);
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

// The sampler's row: copied as the device holds it, widened on the host (exact; the CPU's own
// conversion code).
static const float *gpt2_logits_row(GPT2 *m, int t) {
    size_t Vp = (size_t)m->cfg.padded_vocab_size;
    d2h(m->h_row_x, m->acts.logits + (size_t)t * Vp, Vp * sizeof(floatX), "the sampler's logits");
    zc_widen(m->h_row, m->h_row_x, Vp, FLOATX_DTYPE);
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
        printf("device: %s (sm_%d%d, %d SMs, %.1f GiB); this build: %s parameters, gradients and activations, "
               "cuBLASLt with fp32 accumulation%s\n", gpu.prop.name, gpu.prop.major, gpu.prop.minor, gpu.sm_count,
               gpu.prop.totalGlobalMem / 1073741824.0, precision_names[FLOATX_DTYPE],
               FLOATX_DTYPE == ZC_F32 ? " (no TF32)" : ", fp32 master weights");
}

static void gpu_shutdown(void) {
    if (!gpu.lt) return;
    if (nccl.comm) {
        ncclCommDestroy(nccl.comm);
        cudaStreamDestroy(nccl.stream);
    }
    matmul_plans_free();
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
