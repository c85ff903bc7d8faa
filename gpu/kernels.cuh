// gpu/kernels.cuh: the GPU trainer's CUDA kernels (all but flash attention, gpu/flash_attention.cuh
// and gpu/flash2.cuh, and the column sums, gpu/colsum.cuh),
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

// V consecutive floatX as one load or store: V = VEC (16 bytes: 8 bf16/fp16, 4 fp32) where the
// address is 16-byte aligned (the host checks, vec_ok), V = 1 otherwise. An aligned plain struct:
// nvcc copies it with one 128-bit access (ld/st.global.v4), g++ (the emulator) with a memcpy.
#define VEC (16 / (int)sizeof(floatX))
template <int V> struct alignas(V * sizeof(floatX)) Pack { floatX v[V]; };
template <int V> static __device__ __forceinline__ Pack<V> load_pack(const floatX *p) {
    return *reinterpret_cast<const Pack<V> *>(p);
}
template <int V> static __device__ __forceinline__ void store_pack(floatX *p, const Pack<V> &x) {
    *reinterpret_cast<Pack<V> *>(p) = x;
}

// out (N,C) = wte[inp[n]] + wpe[n % T]. Grid-stride over the N*C/V packs of V channels (V = VEC
// where C % VEC == 0 and out, wte, wpe are 16-byte aligned, so that no pack straddles a row; else
// 1); consecutive threads take consecutive packs, so the reads and writes are coalesced. One
// 64-bit division per pack finds its row. Token ids were checked by the dataloader (< vocab_size
// <= Vp rows).
template <int V>
static __global__ void encoder_forward_kernel(floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int N,
                                              int T, int C) {
    size_t packs = (size_t)C / V, total = (size_t)N * packs;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / packs, c = (i - n * packs) * V;
        Pack<V> e = load_pack<V>(wte + (size_t)inp[n] * C + c), p = load_pack<V>(wpe + (n % T) * C + c), o;
#pragma unroll
        for (int k = 0; k < V; k++) o.v[k] = to_floatX(to_float(e.v[k]) + to_float(p.v[k]));
        store_pack<V>(out + n * C + c, o);
    }
}

// dwte (Vp,C) += dout (N,C) summed over the positions of each token. The host grouped the
// batch's positions by token (group_tokens): bucket k is token tok[k], at positions
// pos[start[k]] .. pos[start[k+1]-1], increasing. One block per bucket: threadIdx.x over the
// channels in packs of V (16-byte loads where V = VEC), threadIdx.y over ENC_RG row groups, group y
// summing the bucket's occurrences y, y + RG, ... (4 loads in flight) into fp32, then thread (x, 0)
// adding the groups' sums in group order from shared memory: no atomics, a fixed order (bitwise
// deterministic), one rounding.
// A frequent token (a thousand occurrences in 16k tokens) makes the longest block; with several
// groups and wide loads it no longer sets the kernel's time. Grid: the number of buckets (>= 1).
template <int V>
static __global__ void encoder_backward_wte_kernel(floatX *dwte, const floatX *dout, const int *start, const int *pos,
                                                   const int *tok, int C) {
    __shared__ float part[8192]; // (RG - 1) x blockDim.x x V <= 1024 V: the launch's choice of RG
    int k = blockIdx.x, first = start[k], end = start[k + 1], RG = blockDim.y, y = threadIdx.y, W = blockDim.x * V;
    for (int cb = 0; cb < C; cb += W) { // the channels in slabs of blockDim.x packs (one slab up to C = 8192)
        int c0 = cb + threadIdx.x * V, pi = (y - 1) * W + threadIdx.x * V;
        float acc[V];
#pragma unroll
        for (int u = 0; u < V; u++) acc[u] = 0.0f;
        if (c0 < C) {
            int j = first + y;
            for (; j + 3 * RG < end; j += 4 * RG) { // 4 occurrences' loads, then their sums in order
                Pack<V> v[4];
#pragma unroll
                for (int q = 0; q < 4; q++) v[q] = load_pack<V>(dout + (size_t)pos[j + q * RG] * C + c0);
#pragma unroll
                for (int q = 0; q < 4; q++)
#pragma unroll
                    for (int u = 0; u < V; u++) acc[u] += to_float(v[q].v[u]);
            }
            for (; j < end; j += RG) {
                Pack<V> v = load_pack<V>(dout + (size_t)pos[j] * C + c0);
#pragma unroll
                for (int u = 0; u < V; u++) acc[u] += to_float(v.v[u]);
            }
            if (y > 0)
#pragma unroll
                for (int u = 0; u < V; u++) part[pi + u] = acc[u];
        }
        __syncthreads();
        if (y == 0 && c0 < C) {
            floatX *row = dwte + (size_t)tok[k] * C + c0;
            Pack<V> r = load_pack<V>(row);
#pragma unroll
            for (int u = 0; u < V; u++) {
                float sum = acc[u];
                for (int g = 1; g < RG; g++) sum += part[(g - 1) * W + threadIdx.x * V + u];
                r.v[u] = to_floatX(to_float(r.v[u]) + sum);
            }
            store_pack<V>(row, r);
        }
        __syncthreads(); // part is reused by the next slab
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
// two passes over the row like the CPU (mean, then the centred variance), in fp32, then the
// output (the second and third passes read the row from L1); mean and rstd are fp32. A lane takes
// V consecutive channels at a time (V = VEC where C % VEC == 0 and inp, out, w, b are 16-byte
// aligned: 16-byte loads; else 1, lanes strided by one element). Bounds: a warp whose row is
// past N returns as a whole before any shuffle.
template <int V>
static __global__ void layernorm_forward_kernel(floatX *out, float *mean, float *rstd, const floatX *inp,
                                                const floatX *w, const floatX *b, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    const floatX *x = inp + (size_t)row * C;
    float m = 0.0f;
    for (int c = lane * V; c < C; c += WARP * V) {
        Pack<V> xv = load_pack<V>(x + c);
#pragma unroll
        for (int k = 0; k < V; k++) m += to_float(xv.v[k]);
    }
    m = warp_sum(m) / C;
    float v = 0.0f;
    for (int c = lane * V; c < C; c += WARP * V) {
        Pack<V> xv = load_pack<V>(x + c);
#pragma unroll
        for (int k = 0; k < V; k++) { float d = to_float(xv.v[k]) - m; v += d * d; }
    }
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);
    floatX *o = out + (size_t)row * C;
    for (int c = lane * V; c < C; c += WARP * V) {
        Pack<V> xv = load_pack<V>(x + c), wv = load_pack<V>(w + c), bv = load_pack<V>(b + c), ov;
#pragma unroll
        for (int k = 0; k < V; k++)
            ov.v[k] = to_floatX((to_float(xv.v[k]) - m) * s * to_float(wv.v[k]) + to_float(bv.v[k]));
        store_pack<V>(o + c, ov);
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}

// out (N,OC) += bias: only where cuBLASLt's bias epilogue cannot take the pointer (it wants
// 16-byte alignment, which small test models' tensor offsets do not always give). In 16 bits
// the product was rounded already, so such a matmul rounds twice (the epilogue rounds once).
static __global__ void add_bias_kernel(floatX *out, const floatX *bias, int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] = to_floatX(to_float(out[i]) + to_float(bias[i % OC]));
}

// The elementwise kernels below (residual, GELU) are grid-stride loops over the n / V packs of V
// elements (V = VEC where every pointer is 16-byte aligned: 16-byte loads and stores; else 1),
// then the n % V elements left over, one each, by the grid's first threads. Each element is read
// and written by one thread.
// out = a + b elementwise (the residual connections).
template <int V>
static __global__ void residual_forward_kernel(floatX *out, const floatX *a, const floatX *b, size_t n) {
    size_t packs = n / V, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = first; i < packs; i += (size_t)gridDim.x * blockDim.x) {
        Pack<V> x = load_pack<V>(a + i * V), y = load_pack<V>(b + i * V), o;
#pragma unroll
        for (int k = 0; k < V; k++) o.v[k] = to_floatX(to_float(x.v[k]) + to_float(y.v[k]));
        store_pack<V>(out + i * V, o);
    }
    size_t t = packs * V + first;
    if (t < n) out[t] = to_floatX(to_float(a[t]) + to_float(b[t]));
}
// -DGPU_FUSED_RESIDUAL_LN (a variant to time, off by default; core/model.h's
// GPT2_FUSED_RESIDUAL_LN hook: each residual add with the LayerNorm after it, residual2 with ln2,
// residual3 with the next layer's ln1 or the final lnf): res (N,C) = a + b, then
// out = layernorm(res) with its mean and rstd, in one pass: residual_forward_kernel<VEC>'s sums,
// rounded and stored, and layernorm_forward_kernel<VEC>'s arithmetic over the rounded values, in
// the same order (the same lane takes the same VEC channels, sums them in the same order, the
// same warp_sum), so the results are those two kernels' bit for bit. One warp per row, 8 rows
// per block; the row stays in registers (NP packs of VEC per lane: C <= NP * WARP * VEC, which
// the caller checks, with C a multiple of VEC and every pointer 16-byte aligned), so it reads a
// and b and writes res and out once: 4 N C elements against the two kernels' 5. Bytes
// (e = sizeof(floatX)): reads a, b (N,C) and w, bias (C): (2 N C + 2 C) e; writes res, out (N,C)
// and mean, rstd (N, fp32): 2 N C e + 8 N. d12 at N = 16384 in bf16: 50.3 MB read, 50.5 MB
// written, 100.8 MB a call against residual_forward's 75.5 MB and layernorm_forward's 50.5; 2 L
// calls a micro-step's forward. Bounds: a warp past N returns whole.
#define RLN_PACKS 8
template <int NP>
static __global__ void residual_layernorm_forward_kernel(floatX *res, floatX *out, float *mean, float *rstd,
                                                         const floatX *a, const floatX *b, const floatX *w,
                                                         const floatX *bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= N) return;
    size_t r0 = (size_t)row * C;
    Pack<VEC> x[NP];
    float m = 0.0f;
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int c = (lane + p * WARP) * VEC;
        if (c < C) {
            Pack<VEC> av = load_pack<VEC>(a + r0 + c), bv = load_pack<VEC>(b + r0 + c);
#pragma unroll
            for (int k = 0; k < VEC; k++) x[p].v[k] = to_floatX(to_float(av.v[k]) + to_float(bv.v[k]));
            store_pack<VEC>(res + r0 + c, x[p]);
#pragma unroll
            for (int k = 0; k < VEC; k++) m += to_float(x[p].v[k]);
        }
    }
    m = warp_sum(m) / C;
    float v = 0.0f;
#pragma unroll
    for (int p = 0; p < NP; p++)
        if ((lane + p * WARP) * VEC < C) {
#pragma unroll
            for (int k = 0; k < VEC; k++) { float d = to_float(x[p].v[k]) - m; v += d * d; }
        }
    v = warp_sum(v) / C;
    float s = 1.0f / sqrtf(v + 1e-5f);
#pragma unroll
    for (int p = 0; p < NP; p++) {
        int c = (lane + p * WARP) * VEC;
        if (c < C) {
            Pack<VEC> wv = load_pack<VEC>(w + c), bv = load_pack<VEC>(bias + c), ov;
#pragma unroll
            for (int k = 0; k < VEC; k++)
                ov.v[k] = to_floatX((to_float(x[p].v[k]) - m) * s * to_float(wv.v[k]) + to_float(bv.v[k]));
            store_pack<VEC>(out + r0 + c, ov);
        }
    }
    if (lane == 0) { mean[row] = m; rstd[row] = s; }
}
// dst (n) += src (n), both of type dtype (ZC_F32, ZC_BF16, ZC_FP16), the sum rounded to it:
// zero.h's add (a reduce-scatter's slice into the gradient shard). zc_load / zc_store are
// mixed_precision.h's, the same integer code the CPU trainer rounds with, so a 16-bit sum is
// bit-identical to its host_add. dtype is uniform over the grid: its branches never diverge.
static __global__ void add_kernel(void *dst, const void *src, size_t n, int dtype) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        zc_store(dst, i, zc_load(dst, i, dtype) + zc_load(src, i, dtype), dtype);
}
// The same where dtype is floatX's, in packs of V (16-byte loads where V = VEC: n % VEC == 0 and
// both pointers 16-byte aligned, which the host checks): the same sums, each rounded once.
template <int V> static __global__ void add_floatx_kernel(floatX *dst, const floatX *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n / V; i += (size_t)gridDim.x * blockDim.x) {
        Pack<V> a = load_pack<V>(dst + i * V), b = load_pack<V>(src + i * V);
#pragma unroll
        for (int k = 0; k < V; k++) a.v[k] = to_floatX(to_float(a.v[k]) + to_float(b.v[k]));
        store_pack<V>(dst + i * V, a);
    }
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

// GELU elementwise: gpt2_gelu / gpt2_gelu_grad from gpt2.h, the very functions the CPU kernels
// use; packs as residual_forward_kernel.
// -DGPU_GELU_FAST (a variant to time, off by default): the forward's tanh(u) = 1 - 2/(e^2u + 1)
// with e^2u by __expf (the SFU's ex2.approx; expf on the emulator) and the quotient by
// __fdividef, about 10 instructions an element instead of gpt2_exp's polynomial and an IEEE
// division: the forward ran at 2,303 GB/s on an H200 against residual_forward's 3,668 (docs/gpu-runs/2026-11-27-4a43b81),
// bound by its arithmetic. Saturates to +-1 (e^2u 0 or inf), NaN stays NaN. Not gpt2_gelu's bits:
// within about 1e-6 of it (relative to max(|x|, 1)), so a 16-bit output is gpt2_gelu's or one unit
// in the last place away (test_gpu_gelu). Recompute runs the same kernel: still bit-identical.
static __device__ __forceinline__ float gpu_gelu(float x) {
#if defined(GPU_GELU_FAST)
    float u = GPT2_GELU_SCALE * (x + 0.044715f * x * x * x);
#if defined(__CUDA_ARCH__)
    float e = __expf(2.0f * u);
#else
    float e = expf(2.0f * u); // the emulator
#endif
    return 0.5f * x * (2.0f - __fdividef(2.0f, e + 1.0f));
#else
    return gpt2_gelu(x);
#endif
}
template <int V>
static __global__ void gelu_forward_kernel(floatX *out, const floatX *inp, size_t n) {
    size_t packs = n / V, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = first; i < packs; i += (size_t)gridDim.x * blockDim.x) {
        Pack<V> x = load_pack<V>(inp + i * V), o;
#pragma unroll
        for (int k = 0; k < V; k++) o.v[k] = to_floatX(gpu_gelu(to_float(x.v[k])));
        store_pack<V>(out + i * V, o);
    }
    size_t t = packs * V + first;
    if (t < n) out[t] = to_floatX(gpu_gelu(to_float(inp[t])));
}
// dinp = gelu'(inp) * dout; dinp may be dout (each pack, and each element of the tail, is read
// before it is written, by the same thread).
template <int V>
static __global__ void gelu_backward_kernel(floatX *dinp, const floatX *inp, const floatX *dout, size_t n) {
    size_t packs = n / V, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = first; i < packs; i += (size_t)gridDim.x * blockDim.x) {
        Pack<V> x = load_pack<V>(inp + i * V), d = load_pack<V>(dout + i * V), o;
#pragma unroll
        for (int k = 0; k < V; k++) o.v[k] = to_floatX(gpt2_gelu_grad(to_float(x.v[k])) * to_float(d.v[k]));
        store_pack<V>(dinp + i * V, o);
    }
    size_t t = packs * V + first;
    if (t < n) dinp[t] = to_floatX(gpt2_gelu_grad(to_float(inp[t])) * to_float(dout[t]));
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

// Sum of squares of g (n, the floatX gradient) into partial[blockIdx.x], in double. The elements
// go by chunks of VEC (16 bytes; the last chunk may be short): thread t of the grid takes chunks
// t, t + G, t + 2G, ... (G = gridDim.x * NORM_THREADS) in increasing order, NORM_UNROLL chunks'
// loads issued before any is summed, each chunk's elements in order into one double. The order
// depends on n and the grid only, not on g's alignment (an unaligned g reads the same chunks
// element by element), so the result is the same every run and for every partition with the
// same n; norm_blocks(n) picks the grid from n alone. Squares of fp32-exact values are exact in
// double. An Inf or NaN anywhere makes the sum non-finite (plain adds and products, nothing that
// drops a NaN): the overflow signal fp16's loss scaling reads off the norm. Bytes: n floatX read
// once. NORM_THREADS threads; a tree in shared memory; every thread reaches every __syncthreads.
#define NORM_BLOCKS 1024 // at most, per call: 8 blocks of 256 threads per SM on 132 SMs
#define NORM_THREADS 256
#define NORM_UNROLL 4
// The grid for n elements: at least NORM_UNROLL chunks per thread, at most NORM_BLOCKS blocks
// (a pure function of n: see sumsq_kernel).
static inline unsigned norm_blocks(size_t n) {
    size_t per_block = (size_t)NORM_THREADS * NORM_UNROLL * VEC, b = (n + per_block - 1) / per_block;
    return b < 1 ? 1u : b > NORM_BLOCKS ? (unsigned)NORM_BLOCKS : (unsigned)b;
}
// The sum over the block of each thread's s, in a fixed tree (NORM_THREADS threads, shared
// memory), so the order, and the result, are the same every run; every thread of the block
// calls it and gets the sum (each reaches every __syncthreads).
static __device__ double block_sum_fixed(double s) {
    __shared__ double sh[NORM_THREADS];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int k = NORM_THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) sh[threadIdx.x] += sh[threadIdx.x + k];
        __syncthreads();
    }
    double total = sh[0];
    __syncthreads(); // sh is free again once every thread has read the total
    return total;
}
static __device__ __forceinline__ double sumsq_chunk(const floatX *g, size_t i, size_t n, int vec, double s) {
    size_t e = i * VEC;
    if (vec && e + VEC <= n) {
        Pack<VEC> v = load_pack<VEC>(g + e);
#pragma unroll
        for (int k = 0; k < VEC; k++) { double x = to_float(v.v[k]); s += x * x; }
    } else {
        for (size_t k = e; k < e + VEC && k < n; k++) { double x = to_float(g[k]); s += x * x; }
    }
    return s;
}
static __global__ void __launch_bounds__(NORM_THREADS) sumsq_kernel(double *partial, const floatX *__restrict__ g, size_t n) {
    size_t chunks = (n + VEC - 1) / VEC, G = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    int vec = ((uintptr_t)g & 15) == 0;
    double s = 0.0;
    if (vec) // whole chunks, NORM_UNROLL loads in flight
        for (; i + (NORM_UNROLL - 1) * G < n / VEC; i += NORM_UNROLL * G) {
            Pack<VEC> v[NORM_UNROLL];
#pragma unroll
            for (int u = 0; u < NORM_UNROLL; u++) v[u] = load_pack<VEC>(g + (i + u * G) * VEC);
#pragma unroll
            for (int u = 0; u < NORM_UNROLL; u++)
#pragma unroll
                for (int k = 0; k < VEC; k++) { double x = to_float(v[u].v[k]); s += x * x; }
        }
    for (; i < chunks; i += G) s = sumsq_chunk(g, i, n, vec, s);
    s = block_sum_fixed(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}
// out[0] = sum of partial[0..n) in a fixed order (one block of NORM_THREADS: thread t adds
// t, t + NORM_THREADS, ... in order, eight loads in flight, then the tree).
static __global__ void sum_partials_kernel(double *out, const double *__restrict__ partial, int n) {
    double s = 0.0;
    int i = threadIdx.x;
    for (; i + 7 * NORM_THREADS < n; i += 8 * NORM_THREADS) {
        double v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = partial[i + u * NORM_THREADS];
#pragma unroll
        for (int u = 0; u < 8; u++) s += v[u];
    }
    for (; i < n; i += NORM_THREADS) s += partial[i];
    s = block_sum_fixed(s);
    if (threadIdx.x == 0) out[0] = s;
}
// out[0] = the mean of losses[0..n), in double in a fixed order (one block of NORM_THREADS: each
// thread a strided sum, then the tree), rounded to float as the CPU trainer's mean is. The
// micro-step's loss stays on the device until the step's end reads them all (classifier_loss).
static __global__ void loss_mean_kernel(double *out, const float *losses, int n) {
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += losses[i];
    s = block_sum_fixed(s);
    if (threadIdx.x == 0) out[0] = (double)(float)(s / n);
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
