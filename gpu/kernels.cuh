// gpu/kernels.cuh: the GPU trainer's CUDA kernels (all but flash attention, gpu/flash_attention.cuh),
// each with its shapes, launch geometry and a review note on bounds, occupancy and synchronisation.
// Every one has a CPU twin in train_gpt_cpu.c that it must agree with (test_gpu_emu). The host
// wrappers that launch them are train_gpt.cu's; this file holds device code only.
#ifndef GPU_KERNELS_CUH
#define GPU_KERNELS_CUH
#include "gpu/common.cuh"

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



// The fused classifier: for each of N rows of logits (N,Vp, floatX), the softmax over the
// first V columns in fp32, the loss (fp32) against targets into losses (when targets != NULL),
// and, when dloss != 0, dloss * (softmax - onehot) written over the logits in place (padded
// columns get 0). One block per row (CLS_THREADS threads): the row is read twice (reduce,
// write) and never copied, in 16-byte vectors (CLS_VEC elements; Vp is a multiple of 128 and
// rows start 256-byte aligned, so every vector is whole and aligned; the columns from the last
// whole vector below V to V are read singly). Bytes per row: 2 reads + 1 write of Vp floatX:
// d12 at N=16384 moves 4.9 GB a call, ~1.2 ms at 4 TB/s. The reduction is an online max/sum per
// thread (a vector's 8 exponentials against the running max, which moves only when the
// vector's own max exceeds it: one expf per element, not two), combined across the warp by
// shuffles and across warps in shared memory. Empty partials are (-inf, 0) and combine without
// NaN. Every thread reaches both __syncthreads. The target was checked by the dataloader (< V);
// an out-of-range one gives a NaN loss, never an out-of-bounds read.
#define CLS_THREADS 512
#define CLS_VEC (16 / (int)sizeof(floatX))
struct __align__(16) ClsVec { floatX v[CLS_VEC]; };
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
    const ClsVec *lv = (const ClsVec *)l;
    float m = -INFINITY, s = 0.0f;
    int whole = V / CLS_VEC; // vectors entirely below V
    for (int k = threadIdx.x; k < whole; k += blockDim.x) {
        ClsVec x = lv[k];
        float f[CLS_VEC], vm = -INFINITY;
#pragma unroll
        for (int e = 0; e < CLS_VEC; e++) { f[e] = to_float(x.v[e]); vm = fmaxf(vm, f[e]); }
        if (vm > m) { s = m == -INFINITY ? 0.0f : s * expf(m - vm); m = vm; }
#pragma unroll
        for (int e = 0; e < CLS_VEC; e++) s += expf(f[e] - m);
    }
    for (int i = whole * CLS_VEC + threadIdx.x; i < V; i += blockDim.x) online_combine(&m, &s, to_float(l[i]), 1.0f);
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
    ClsVec *wv = (ClsVec *)l;
    for (int k = threadIdx.x; k < Vp / CLS_VEC; k += blockDim.x) {
        ClsVec x = wv[k];
#pragma unroll
        for (int e = 0; e < CLS_VEC; e++) {
            int i = k * CLS_VEC + e;
            x.v[e] = to_floatX(i < V ? expf(to_float(x.v[e]) - M) * inv * dloss - (i == tgt ? dloss : 0.0f) : 0.0f);
        }
        wv[k] = x;
    }
}

// The optimizer over one run of elements of one kind (decayed or not): optimizer_element is
// optimizer.h's, the same arithmetic the CPU trainer runs. p and the state arrays s0, s1 (n; NULL
// where the optimizer keeps fewer) fp32; g (n) of type dtype, widened. p16 NULL: p is the
// parameter. Otherwise p is the fp32 master weight and the result is also rounded into p16 (n,
// dtype), as the CPU's host_update does. Grid-stride; each element is independent.
static __global__ void optimizer_kernel(OptStep step, float *p, float *s0, float *s1, const void *g, void *p16, size_t n,
                                        int dtype, int decay) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        optimizer_element(&step, &p[i], s0 ? &s0[i] : NULL, s1 ? &s1[i] : NULL, zc_load(g, i, dtype), decay);
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
// out[0] = the mean of losses[0..n), in double in a fixed order (one block of NORM_THREADS: each
// thread a strided sum, then a tree), rounded to float as the CPU trainer's mean is. The
// micro-step's loss stays on the device until the step's end reads them all (classifier_loss).
static __global__ void loss_mean_kernel(double *out, const float *losses, int n) {
    __shared__ double sh[NORM_THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = NORM_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (double)(float)(sh[0] / n);
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

#endif // GPU_KERNELS_CUH
