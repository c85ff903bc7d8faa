// gpu/flash_attention.cuh: causal self-attention on tensor cores without the (T,T) matrix (16-bit
// builds; the fp32 build and head sizes gpu_flash_attention refuses take the matmul path).
#ifndef GPU_FLASH_ATTENTION_CUH
#define GPU_FLASH_ATTENTION_CUH
#include "gpu/kernels.cuh"

// ---- Flash attention (16-bit builds): causal self-attention without the (T,T) matrix ----
// The probabilities are never stored: the forward keeps each query row's log-sum-exp (lse,
// (B,NH,T) fp32, in units of the scaled scores) and the backward recomputes P = exp(s - lse)
// tile by tile. Tiles go through the tensor cores with WMMA (16x16x16, floatX operands, fp32
// accumulation); softmax statistics, the rescaling and dS are fp32, and P and dS are rounded
// to floatX as the tensor cores' operands (as FlashAttention-2 does). Key tiles entirely above
// the diagonal of a warp's queries are skipped (causal). Head size hs: a multiple of 16, at most
// FA_HS (gpu_flash_attention), so every tile is whole; rows past T are zero-filled and
// masked. Blocks of 4 warps; each warp owns 16 rows (queries, or keys in the dK/dV kernel); all
// shared memory is static, each kernel's exactly 48 KB, each array 128-byte aligned and a multiple
// of 128 bytes long. Rows of the shared tiles are padded by 16 bytes (FA_LD, FA_SLD, FA_OLD,
// FA_WLD) against bank conflicts: an unpadded 16-bit row of 64 is 128 bytes, so the 8 rows a
// fragment load reads at once all start in the same bank (8-way), and a lane pair per row
// reading fp32 rows of 32 or 64 floats puts all 16 rows of a column in one bank (16-way); padded,
// the fragment loads are conflict-free and the lanes' fp32 accesses 2- to 4-way. (The 16-bit
// P / dS tiles stay unpadded: padding them too would pass 48 KB.) WMMA needs every tile pointer
// 32-byte aligned and every leading dimension a multiple of 16 bytes: the 16-bit tiles' rows are
// 144 bytes (a tile starts at a multiple of 16 rows, 2304 bytes, and 16 columns, 32 bytes), the
// fp32 rows 144 or 272 bytes (a warp's 16 rows: 2304 or 4352 bytes; columns at multiples of 16,
// 64 bytes), P / dS rows 64 bytes. Synchronisation: __syncthreads around every tile load
// (all warps read the shared tiles); within a warp, __syncwarp between the lanes' scalar writes
// of a tile and the fragment loads that read it, and between a fragment store and the lanes'
// scalar reads of it. Grid: (B*NH, ceil(T/64)).
#define FA_ROWS 64  // rows a block owns: queries (forward, dQ) or keys (dK, dV): 4 warps x 16
#define FA_STEP 32  // the inner loop's tile: keys (forward, dQ) or queries (dK, dV)
#define FA_HS GPU_FLASH_MAX_HS
#define FA_THREADS 128
#define FA_LD (FA_HS + 8)         // floatX tiles of head rows (Q, K, V, dY)
#define FA_SLD (FA_STEP + 4)      // the forward's fp32 scores
#define FA_OLD (FA_HS + 4)        // the forward's fp32 output accumulator
#define FA_WLD (2 * FA_STEP + 4)  // the backward's fp32 work tile (S | dP, then dQ, dK, dV: FA_HS <= 2 FA_STEP)
#define FA_CHUNKS (FA_HS / 8)     // 16-byte chunks of a head row
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
// part < 0, into a (n, FA_LD) shared tile; rows at or past T are zeros. All threads of the block:
// FA_CHUNKS threads per row, each one 16-byte chunk (8 elements) of it, FA_THREADS / FA_CHUNKS
// rows at a time (compile-time shifts and masks, no division); chunks at or past hs (hs < FA_HS)
// are neither read nor written. Global chunks are 16-byte aligned: activations start at 256 bytes
// (gpu/layout.h) and every row offset (C, 3C) and head offset (h hs) is a multiple of 8 elements,
// as hs is of 16.
static __device__ void fa_load(floatX (*dst)[FA_LD], const floatX *src, int b, int h, int part, int r0, int n, int T, int C,
                               int hs) {
    size_t ld = part < 0 ? (size_t)C : 3 * (size_t)C;
    const floatX *base = src + (size_t)b * T * ld + (part < 0 ? 0 : part) * C + h * hs;
    int c = (threadIdx.x % FA_CHUNKS) * 8;
    if (c >= hs) return;
    for (int r = threadIdx.x / FA_CHUNKS; r < n; r += FA_THREADS / FA_CHUNKS) {
        int t = r0 + r;
        Pack<8> v;
        if (t < T) v = load_pack<8>(base + (size_t)t * ld + c);
        else
#pragma unroll
            for (int k = 0; k < 8; k++) v.v[k] = to_floatX(0.0f);
        store_pack<8>(&dst[r][c], v);
    }
}

// out (B,T,C): head h's columns = softmax(scale Q K^T, causal) V; lse (B,NH,T).
static __global__ void flash_forward_kernel(floatX *out, float *lse, const floatX *qkv, int T, int C, int NH) {
    __shared__ __align__(128) floatX Qs[FA_ROWS][FA_LD], Ks[FA_STEP][FA_LD], Vs[FA_STEP][FA_LD], P[4][16][FA_STEP];
    __shared__ __align__(128) float S[4][16][FA_SLD], O[4][16][FA_OLD];
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
        warp_mm_bt(&S[w][0][0], FA_SLD, &Qs[16 * w][0], FA_LD, &Ks[0][0], FA_LD, hs, FA_STEP / 16);
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
            if (j < hs / 16) wmma::load_matrix_sync(acc[j], &O[w][0][16 * j], FA_OLD, wmma::mem_row_major);
        warp_mm_acc(acc, &P[w][0][0], FA_STEP, &Vs[0][0], FA_LD, FA_STEP, hs / 16);
#pragma unroll
        for (int j = 0; j < FA_HS / 16; j++)
            if (j < hs / 16) wmma::store_matrix_sync(&O[w][0][16 * j], acc[j], FA_OLD, wmma::mem_row_major);
        __syncwarp();
    }
    if (t < T) {
        floatX *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int d = half; d < hs; d += 2) o[d] = to_floatX(O[w][r][d] / l);
        if (half == 0) lse[((size_t)b * NH + h) * T + t] = m + logf(l);
    }
}

// The backward's preprocessing: D (B,NH,T) fp32, D[b,h,t] = dy_t . y_t over head h's hs channels,
// what dS = P (dP - D) needs (D = sum_t2 P dP, the flash-attention identity; y is the stored,
// rounded forward output). Computed once per row here and read by both backward kernels (the
// dK/dV kernel used to recompute it for every key block: T/64 times per row at T = 1024, 8.5 on
// average). Grid-stride over the B*T*NH (row, head) pairs, head fastest, so that consecutive
// threads read consecutive hs-element stretches of dy and y (16-byte chunks: aligned as in
// fa_load); each dot in fp32 in channel order (the order the kernels used before: the same D).
static __global__ void flash_backward_preprocess_kernel(float *D, const floatX *dout, const floatX *y, int B, int T, int C,
                                                        int NH) {
    int hs = C / NH;
    size_t total = (size_t)B * T * NH;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const floatX *dy = dout + i * hs, *yy = y + i * hs; // (b*T + t)*C + h*hs = i*hs
        float acc = 0.0f;
        for (int d = 0; d < hs; d += 8) {
            Pack<8> a = load_pack<8>(dy + d), c = load_pack<8>(yy + d);
#pragma unroll
            for (int k = 0; k < 8; k++) acc += to_float(a.v[k]) * to_float(c.v[k]);
        }
        size_t bt = i / NH, b = bt / T;
        int h = (int)(i - bt * NH), t = (int)(bt - b * T);
        D[(b * NH + h) * T + t] = acc;
    }
}

// dqkv's q part (B,T,C of its 3C), OVERWRITTEN: dQ = dS K, dS = P (dP - D) scale, dP = dY V^T.
// D: flash_backward_preprocess_kernel's; the row's D and lse are the lane's own (registers).
static __global__ void flash_backward_dq_kernel(floatX *dqkv, const float *lse, const float *D, const floatX *dout,
                                                const floatX *qkv, int T, int C, int NH) {
    __shared__ __align__(128) floatX Qs[FA_ROWS][FA_LD], dYs[FA_ROWS][FA_LD], Ks[FA_STEP][FA_LD], Vs[FA_STEP][FA_LD],
        dS[4][16][FA_STEP];
    __shared__ __align__(128) float W[4][16][FA_WLD]; // per warp: S | dP; at the end dQ (FA_HS <= 2 FA_STEP columns)
    int b = blockIdx.x / NH, h = blockIdx.x % NH, q0 = blockIdx.y * FA_ROWS, hs = C / NH;
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, r = lane / 2, half = lane % 2;
    int t = q0 + 16 * w + r, wfirst = q0 + 16 * w, last = min(q0 + FA_ROWS, T) - 1;
    float scale = 1.0f / sqrtf((float)hs);
    size_t row = ((size_t)b * NH + h) * T + t;
    float Dt = t < T ? D[row] : 0.0f, Lt = t < T ? lse[row] : 0.0f;
    fa_load(Qs, qkv, b, h, 0, q0, FA_ROWS, T, C, hs);
    fa_load(dYs, dout, b, h, -1, q0, FA_ROWS, T, C, hs);
    FragC dq[FA_HS / 16];
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++) wmma::fill_fragment(dq[j], 0.0f);
    for (int k0 = 0; k0 <= last; k0 += FA_STEP) {
        __syncthreads();
        fa_load(Ks, qkv, b, h, 1, k0, FA_STEP, T, C, hs);
        fa_load(Vs, qkv, b, h, 2, k0, FA_STEP, T, C, hs);
        __syncthreads();
        if (k0 > wfirst + 15) continue;
        warp_mm_bt(&W[w][0][0], FA_WLD, &Qs[16 * w][0], FA_LD, &Ks[0][0], FA_LD, hs, FA_STEP / 16);        // S
        warp_mm_bt(&W[w][0][FA_STEP], FA_WLD, &dYs[16 * w][0], FA_LD, &Vs[0][0], FA_LD, hs, FA_STEP / 16); // dP
        __syncwarp();
        for (int j = 0; j < 16; j++) {
            int c = half * 16 + j, key = k0 + c;
            float p = key <= t && key < T && t < T ? expf(W[w][r][c] * scale - Lt) : 0.0f;
            dS[w][r][c] = to_floatX(p * (W[w][r][FA_STEP + c] - Dt) * scale);
        }
        __syncwarp();
        warp_mm_acc(dq, &dS[w][0][0], FA_STEP, &Ks[0][0], FA_LD, FA_STEP, hs / 16);
    }
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++)
        if (j < hs / 16) wmma::store_matrix_sync(&W[w][0][16 * j], dq[j], FA_WLD, wmma::mem_row_major);
    __syncwarp();
    if (t < T) {
        floatX *o = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
        for (int d = half; d < hs; d += 2) o[d] = to_floatX(W[w][r][d]);
    }
}

// dqkv's k and v parts, OVERWRITTEN: for this block's keys, dV = P^T dY and dK = dS^T Q over the
// queries at or after them, with S^T = K Q^T and dP^T = V dY^T computed per 32-query tile. A
// query column's D and lse are read from global memory where used (16 per lane per tile, the same
// 128 bytes for every warp of the block: L1 hits), which keeps the shared memory within 48 KB.
static __global__ void flash_backward_dkv_kernel(floatX *dqkv, const float *lse, const float *D, const floatX *dout,
                                                 const floatX *qkv, int T, int C, int NH) {
    __shared__ __align__(128) floatX Ks[FA_ROWS][FA_LD], Vs[FA_ROWS][FA_LD], Qs[FA_STEP][FA_LD], dYs[FA_STEP][FA_LD],
        Ps[4][16][FA_STEP];
    __shared__ __align__(128) float W[4][16][FA_WLD]; // per warp: P^T (from S^T) | dP^T; at the end dK, then dV
    int b = blockIdx.x / NH, h = blockIdx.x % NH, k0 = blockIdx.y * FA_ROWS, hs = C / NH;
    int w = threadIdx.x / WARP, lane = threadIdx.x % WARP, r = lane / 2, half = lane % 2;
    int key = k0 + 16 * w + r, wfirst = k0 + 16 * w;
    float scale = 1.0f / sqrtf((float)hs);
    const float *Dh = D + ((size_t)b * NH + h) * T, *Lh = lse + ((size_t)b * NH + h) * T;
    fa_load(Ks, qkv, b, h, 1, k0, FA_ROWS, T, C, hs);
    fa_load(Vs, qkv, b, h, 2, k0, FA_ROWS, T, C, hs);
    FragC dk[FA_HS / 16], dv[FA_HS / 16];
#pragma unroll
    for (int j = 0; j < FA_HS / 16; j++) { wmma::fill_fragment(dk[j], 0.0f); wmma::fill_fragment(dv[j], 0.0f); }
    for (int q0 = k0; q0 < T; q0 += FA_STEP) { // queries before k0 see none of these keys
        __syncthreads();
        fa_load(Qs, qkv, b, h, 0, q0, FA_STEP, T, C, hs);
        fa_load(dYs, dout, b, h, -1, q0, FA_STEP, T, C, hs);
        __syncthreads();
        if (q0 + FA_STEP - 1 < wfirst || wfirst >= T) continue; // no query of the tile sees a key of this warp
        warp_mm_bt(&W[w][0][0], FA_WLD, &Ks[16 * w][0], FA_LD, &Qs[0][0], FA_LD, hs, FA_STEP / 16);        // S^T
        warp_mm_bt(&W[w][0][FA_STEP], FA_WLD, &Vs[16 * w][0], FA_LD, &dYs[0][0], FA_LD, hs, FA_STEP / 16); // dP^T
        __syncwarp();
        for (int j = 0; j < 16; j++) {
            int c = half * 16 + j, q = q0 + c;
            float p = q >= key && q < T && key < T ? expf(W[w][r][c] * scale - Lh[q]) : 0.0f;
            W[w][r][c] = p;
            Ps[w][r][c] = to_floatX(p);
        }
        __syncwarp();
        warp_mm_acc(dv, &Ps[w][0][0], FA_STEP, &dYs[0][0], FA_LD, FA_STEP, hs / 16);
        __syncwarp(); // every lane has read P^T before it becomes dS^T
        for (int j = 0; j < 16; j++) {
            int c = half * 16 + j, q = q0 + c;
            Ps[w][r][c] = to_floatX(W[w][r][c] * (W[w][r][FA_STEP + c] - (q < T ? Dh[q] : 0.0f)) * scale);
        }
        __syncwarp();
        warp_mm_acc(dk, &Ps[w][0][0], FA_STEP, &Qs[0][0], FA_LD, FA_STEP, hs / 16);
    }
    for (int part = 1; part <= 2; part++) {
        __syncwarp(); // the lanes are done reading W (the previous part, or the last tile's)
#pragma unroll
        for (int j = 0; j < FA_HS / 16; j++)
            if (j < hs / 16) wmma::store_matrix_sync(&W[w][0][16 * j], part == 1 ? dk[j] : dv[j], FA_WLD, wmma::mem_row_major);
        __syncwarp();
        if (key < T) {
            floatX *o = dqkv + ((size_t)b * T + key) * 3 * C + part * C + h * hs;
            for (int d = half; d < hs; d += 2) o[d] = to_floatX(W[w][r][d]);
        }
    }
}
#endif

#endif // GPU_FLASH_ATTENTION_CUH
