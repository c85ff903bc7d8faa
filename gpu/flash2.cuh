// gpu/flash2.cuh: FlashAttention-2-style causal self-attention for 16-bit builds at head sizes 64
// (GPT-2's) and 128, selected by `make train_gpt ATTENTION=flash2` (-DGPU_ATTENTION_FLASH2); every
// kernel is a template over the head size HS, and flash2_forward / flash2_backward pick the
// instance from C / NH (f2_head_size says which they take); other head sizes keep
// gpu/flash_attention.cuh's kernels (up to 64) or the matmul path. The data contract is theirs:
// qkv (B,T,3C) in, out (B,T,C), the log-sum-exp rows (B,NH,T) fp32 in the att slot (units of the
// scaled scores, natural log), dqkv (B,T,3C) overwritten by the backward.
//
// Design (the chip's, not WMMA's): every product is mma.sync m16n8k16 (gpu/mma16.cuh) on
// registers. A warp owns 16 rows: queries (forward, dQ) or keys (dK/dV); a block is 4 warps, 64
// rows; the inner loop walks 64-row tiles of the other operand, held row-major in shared memory
// with rows padded to HS + 8 elements (144 or 272 bytes: the 8 rows an ldmatrix phase reads fall
// on distinct banks), in two stages at HS = 64 (one at 128: F2_NS): cp.async fills the next tile's
// stage while the current one computes. The warp's own rows (Q, or K and V, and dO) stay in
// registers as A fragments for the whole kernel; S, P and the accumulators never leave registers:
// the C fragments of two adjacent 16x8 score tiles are P's A fragment for P V (mma16_pack_a,
// FlashAttention-2's trick). Online softmax in base 2 (scores scaled by scale*log2 e), each row's
// max and sum reduced over its quad by two shuffles (the sum only at the end). B fragments come
// from the tiles by ldmatrix.x4, two fragments an instruction: as stored for the operands that run
// along a tile's columns (K for Q K^T, V for dO V^T, Q and dO for K Q^T and V dO^T), transposed by
// ldmatrix.trans for those that run along its rows (V for P V, K for dS K, Q and dO for dS^T Q and
// P^T dO), so each tile is stored once, untransposed.
// Causal: tiles above the block's diagonal are not visited; on the diagonal tile, each warp skips
// the 8-column score tiles (and 16- or 32-row sub-tiles) entirely above its own diagonal.
// Backward as FlashAttention-2's: D = rowsum(dO * O) once per row into a (B,NH,T) fp32 scratch
// (flash_attention.cuh's flash_backward_preprocess_kernel), then dK/dV per key block (iterating query tiles, P = exp2(S c - lse c)
// recomputed) and dQ per query block (iterating key tiles): deterministic, no atomics. dS is
// rounded to the 16-bit type unscaled; dQ and dK are scaled once at the end (scale = 1/8 at head
// size 64: exact). All shared memory is static, under 48 KB (two stages of two tiles, 36-37 KB, at
// HS = 64; one stage, 34-35 KB, at 128).
// -DF2_DS_STORE (a variant to time, off by default): the dK/dV kernel also writes dS^T, rounded as
// the dQ kernel rounds dS, into 16-bit tiles in global memory (f2_ds_elems), and dQ = dS K is read
// back from them by flash2_backward_dq_ds_kernel: 5 tile products per (query, key) tile pair
// instead of 7 (the dQ kernel no longer recomputes S and dP), for 2 x 8 KB of memory traffic per
// pair. Bit-identical to the default on the emulator (S^T and dP^T sum the same products in the
// same order as S and dP); on a GPU, as long as the MMA's sum does not depend on the operands' roles.
#ifndef GPU_FLASH2_CUH
#define GPU_FLASH2_CUH
#include "gpu/kernels.cuh"
#include "gpu/mma16.cuh"
#if !defined(GPU_PRECISION_FP32)
// The head sizes these kernels take (each kernel is a template over HS; flash2_forward and
// flash2_backward pick the instance from C / NH at run time)
static inline int f2_head_size(int hs) { return hs == 64 || hs == 128; }
#define F2_ROWS 64    // the tiles' rows, and the keys a dK/dV block owns: 4 warps x 16
#define F2_LD 72      // a 64-column shared tile's row length, elements (64 + 8 padding); HS + 8 in general
// Stages of the shared tiles: two at head size 64 (2 x 2 x 64 x 72 x 2 bytes = 36 KB), one at 128
// (two would be 68 KB, over the 48 KB of static shared memory: the copy no longer overlaps the math)
#define F2_NS(HS) ((HS) == 64 ? 2 : 1)
#define F2_THREADS 128
// Warps of a query-owning block (the forward, dQ), 16 rows each: 4 (a block per 64-row tile) or 8
// (128 rows: each K/V tile read from L2 once for twice the queries; the forward was L2-bound)
#ifndef F2_QWARPS
#define F2_QWARPS 4
#endif
#define F2_QROWS (16 * F2_QWARPS)
#define F2_QTHREADS (WARP * F2_QWARPS)
static_assert(F2_QWARPS == 4 || F2_QWARPS == 8, "F2_QWARPS: 4 or 8");
#define F2_LOG2E 1.4426950408889634f
#define F2_LN2 0.6931471805599453f
// Blocks per SM each kernel is compiled to fit (__launch_bounds__' second argument: the register
// cap follows, 65536 / (threads x blocks)); -D overrides them for a variant build to time.
// The defaults cap every kernel at 128 registers: 16 warps per SM (dK/dV spills about 90 bytes,
// dQ 24; on an H200 that was 6% faster than 2-3 blocks without the cap, docs/gpu-runs/2026-11-27-4a43b81).
#ifndef F2_MINB_FWD
#define F2_MINB_FWD (16 / F2_QWARPS)
#endif
#ifndef F2_MINB_DQ
#define F2_MINB_DQ (16 / F2_QWARPS)
#endif
#ifndef F2_MINB_DKV
#define F2_MINB_DKV 4
#endif
// Head size 128 holds twice the accumulators and fragments (dK/dV: 64 + 128 registers of them), so
// its kernels are compiled for F2_MINB_128 blocks of 4 warps per SM (2: 255 registers, 8 warps)
#ifndef F2_MINB_128
#define F2_MINB_128 2
#endif
#define F2_MINB(HS, m, warps) ((HS) == 64 ? (m) : (F2_MINB_128 * 4 / (warps) > 0 ? F2_MINB_128 * 4 / (warps) : 1))

// 4 bytes (2 elements) of a row through a register.
#if defined(CUDA_EMULATOR)
static __device__ __forceinline__ uint32_t f2_ld32(const floatX *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static __device__ __forceinline__ void f2_st32(floatX *p, uint32_t v) { memcpy(p, &v, 4); }
#else
static __device__ __forceinline__ uint32_t f2_ld32(const floatX *p) { return *(const uint32_t *)p; }
static __device__ __forceinline__ void f2_st32(floatX *p, uint32_t v) { *(uint32_t *)p = v; }
#endif

// cp.async (sm_80+): 16 bytes from global to shared memory without passing through registers,
// zeros where !valid (src-size 0: nothing is read), in commit groups that f2_cp_wait<N> waits for
// (all but the N most recent groups of this thread complete; a __syncthreads then makes every
// thread's copies visible). The portable body (emulator, nvcc's host pass) copies at once.
static __device__ __forceinline__ void f2_cp16(floatX *dst, const floatX *src, bool valid) {
#if defined(__CUDA_ARCH__)
    uint32_t d = (uint32_t)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
    if (valid) memcpy(dst, src, 16);
    else memset(dst, 0, 16);
#endif
}
static __device__ __forceinline__ void f2_cp_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void f2_cp_wait() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
// A 64-row tile of one head (COLS columns: the head size, or 64 for a dS^T tile) into the shared
// tile s by cp.async, 16-byte chunks: thread i copies columns 8 c .. 8 c + 7 (c = i / R) of rows
// i % R + R p (R = NT / (COLS / 8) rows per pass, p < 64 / R; at NT = 128 and COLS = 64 a warp
// covers 16 rows x 32 bytes). Rows at or past T are zeros. base: row 0 of the head, ld: the row
// stride (3C for qkv's parts, C for dout). NT: the block's threads.
template <int NT, int COLS>
static __device__ __forceinline__ void f2_load_tile(floatX (*s)[COLS + 8], const floatX *base, size_t ld, int row0,
                                                    int T) {
    constexpr int R = NT / (COLS / 8);
    int c = threadIdx.x / R;
#pragma unroll
    for (int p = 0; p < F2_ROWS / R; p++) {
        int r = threadIdx.x % R + R * p, row = row0 + r;
        f2_cp16(&s[r][8 * c], base + (size_t)(row < T ? row : 0) * ld + 8 * c, row < T);
    }
}
// This lane's A fragments (4 k-steps of 16 columns) of rows r and r + 8 of a head (zeros past T).
template <int HS>
static __device__ __forceinline__ void f2_load_a(uint32_t a[HS / 16][4], const floatX *base, size_t ld, int r, int T) {
    int t = threadIdx.x % 4;
    const floatX *p0 = base + (size_t)r * ld + 2 * t, *p1 = p0 + 8 * ld;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        a[kk][0] = r < T ? f2_ld32(p0 + 16 * kk) : 0u;
        a[kk][1] = r + 8 < T ? f2_ld32(p1 + 16 * kk) : 0u;
        a[kk][2] = r < T ? f2_ld32(p0 + 16 * kk + 8) : 0u;
        a[kk][3] = r + 8 < T ? f2_ld32(p1 + 16 * kk + 8) : 0u;
    }
}
// B fragments from a shared tile through ldmatrix (gpu/mma16.cuh), two per instruction, the
// lane's row address chosen for the pair:
//   f2_ldsm_nk: the tile holds B^T (rows n, columns k): n-tile n0 at the k-steps k0 and k0 + 16:
//     b[0..1] = B (k0..k0+15, n0..n0+7), b[2..3] = B (k0+16..k0+31, n0..n0+7)
//   f2_ldsm_kn: the tile holds B (rows k, columns n): the k-step k0 for the n-tiles n0 and n0 + 8:
//     b[0..1] = B (k0..k0+15, n0..n0+7), b[2..3] = B (k0..k0+15, n0+8..n0+15)
template <int LD>
static __device__ __forceinline__ void f2_ldsm_nk(uint32_t b[4], const floatX (*s)[LD], int n0, int k0) {
    int l = threadIdx.x % 32;
    mma16_ldsm_x4<0>(b, &s[n0 + l % 8][k0 + 8 * (l / 8)]);
}
template <int LD>
static __device__ __forceinline__ void f2_ldsm_kn(uint32_t b[4], const floatX (*s)[LD], int k0, int n0) {
    int l = threadIdx.x % 32, m = l / 8;
    mma16_ldsm_x4<1>(b, &s[k0 + 8 * (m % 2) + l % 8][n0 + 8 * (m / 2)]);
}
#define F2_MMA mma16816<floatX>
// The backward's two score-shaped products over 32 rows n0 .. n0+31 of two shared tiles, fresh
// accumulators: x = a . tx[n0..]^T and y = b . ty[n0..]^T (the warp's 16 rows against 4 n-tiles of
// 8, 4 k-steps of 16 each): S and dP in the dQ kernel, S^T and dP^T in the dK/dV kernel.
template <int HS>
static __device__ __forceinline__ void f2_two_products(float x[4][4], const uint32_t a[HS / 16][4],
                                                       const floatX (*tx)[HS + 8], float y[4][4],
                                                       const uint32_t b[HS / 16][4], const floatX (*ty)[HS + 8],
                                                       int n0) {
#pragma unroll
    for (int n = 0; n < 4; n++) {
        x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.0f;
        y[n][0] = y[n][1] = y[n][2] = y[n][3] = 0.0f;
#pragma unroll
        for (int kp = 0; kp < HS / 32; kp++) {
            uint32_t bb[4];
            f2_ldsm_nk(bb, tx, n0 + 8 * n, 32 * kp);
            F2_MMA(x[n], a[2 * kp], bb);
            F2_MMA(x[n], a[2 * kp + 1], bb + 2);
            f2_ldsm_nk(bb, ty, n0 + 8 * n, 32 * kp);
            F2_MMA(y[n], b[2 * kp], bb);
            F2_MMA(y[n], b[2 * kp + 1], bb + 2);
        }
    }
}

// out (B,T,C): head h's columns = softmax(scale Q K^T, causal) V; lse (B,NH,T).
// Grid (B*NH, ceil(T/F2_QROWS)), F2_QTHREADS threads, the heaviest query blocks (last) first.
template <int HS>
static __global__ void __launch_bounds__(F2_QTHREADS, F2_MINB(HS, F2_MINB_FWD, F2_QWARPS))
flash2_forward_kernel(floatX *out, float *lse, const floatX *qkv, int T, int C, int NH) {
    constexpr int NS = F2_NS(HS); // tile stages
    __shared__ __align__(16) floatX Ks[NS][F2_ROWS][HS + 8], Vs[NS][F2_ROWS][HS + 8]; // K and V (key, dim), NS stages
    int b = blockIdx.x / NH, h = blockIdx.x % NH, q0 = (gridDim.y - 1 - blockIdx.y) * F2_QROWS;
    int w = threadIdx.x / WARP, g = threadIdx.x % WARP / 4, t = threadIdx.x % 4;
    int r0 = q0 + 16 * w + g, r1 = r0 + 8; // this lane's two rows
    // the warp's 64-row group (its diagonal K tile) and its place in it; the block's last K tile
    int qt = (q0 + 16 * w) / F2_ROWS, wl = w % 4, live = q0 + 16 * w < T;
    int ktmax = min(q0 + F2_QROWS, T) - 1;
    ktmax /= F2_ROWS;
    size_t ld = 3 * (size_t)C;
    const floatX *qb = qkv + (size_t)b * T * ld + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const float c = F2_LOG2E / sqrtf((float)HS);
    uint32_t qa[HS / 16][4];
    f2_load_a<HS>(qa, qb, ld, r0, T);
    // the output's accumulators; the rows' running max (base 2) and partial sums
    float o[HS / 8][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    f2_load_tile<F2_QTHREADS, HS>(Ks[0], kb, ld, 0, T);
    f2_load_tile<F2_QTHREADS, HS>(Vs[0], vb, ld, 0, T);
    f2_cp_commit();
    for (int kt = 0; kt <= ktmax; kt++) {
        int k0 = kt * F2_ROWS, diag = kt == qt, st = NS == 2 ? kt & 1 : 0, nx = st ^ (NS - 1);
        __syncthreads(); // every warp is done with the previous tile: its stage is refilled next
        if (NS == 2 ? kt < ktmax : kt > 0) { // the next tile into the other stage; one stage: this tile
            f2_load_tile<F2_QTHREADS, HS>(Ks[nx], kb, ld, k0 + F2_ROWS * (NS - 1), T);
            f2_load_tile<F2_QTHREADS, HS>(Vs[nx], vb, ld, k0 + F2_ROWS * (NS - 1), T);
        }
        f2_cp_commit();
        f2_cp_wait<NS - 1>(); // this thread's copies of tile kt are in (the next tile's may still fly)
        __syncthreads(); // ... and every thread's
        if (kt > qt || !live) continue; // the tile's keys all follow this warp's rows (8 warps), or its rows are past T
        int nlim = diag ? 2 * wl + 2 : 8; // 8-key column tiles at or below this warp's diagonal
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            if (n < nlim) {
#pragma unroll
                for (int kp = 0; kp < HS / 32; kp++) {
                    uint32_t bb[4];
                    f2_ldsm_nk(bb, Ks[st], 8 * n, 32 * kp);
                    F2_MMA(s[n], qa[2 * kp], bb);
                    F2_MMA(s[n], qa[2 * kp + 1], bb + 2);
                }
            }
        }
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int key = k0 + 8 * n + 2 * t + (i & 1), row = i < 2 ? r0 : r1;
                float v = s[n][i] * c;
                if (diag && (n >= nlim || key > row || key >= T)) v = -INFINITY;
                s[n][i] = v;
                if (i < 2) mx0 = fmaxf(mx0, v);
                else mx1 = fmaxf(mx1, v);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        // every row has a key in every tile it visits (key k0 <= row, k0 < T): the max is finite
        float a0 = exp2f(m0 - mx0), a1 = exp2f(m1 - mx1), sum0 = 0.0f, sum1 = 0.0f;
        m0 = mx0;
        m1 = mx1;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            s[n][0] = exp2f(s[n][0] - m0);
            s[n][1] = exp2f(s[n][1] - m0);
            s[n][2] = exp2f(s[n][2] - m1);
            s[n][3] = exp2f(s[n][3] - m1);
            sum0 += s[n][0] + s[n][1];
            sum1 += s[n][2] + s[n][3];
        }
#pragma unroll
        for (int n = 0; n < HS / 8; n++) {
            o[n][0] *= a0;
            o[n][1] *= a0;
            o[n][2] *= a1;
            o[n][3] *= a1;
        }
        l0 = l0 * a0 + sum0;
        l1 = l1 * a1 + sum1;
        int klim = diag ? wl + 1 : 4; // 16-key steps of P V at or below the diagonal
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            if (kk < klim) {
                uint32_t pa[4];
                mma16_pack_a<floatX>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
                for (int np = 0; np < HS / 16; np++) {
                    uint32_t bb[4];
                    f2_ldsm_kn(bb, Vs[st], 16 * kk, 16 * np);
                    F2_MMA(o[2 * np], pa, bb);
                    F2_MMA(o[2 * np + 1], pa, bb + 2);
                }
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    floatX *ob = out + (size_t)b * T * C + h * HS + 2 * t;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        if (r0 < T) f2_st32(ob + (size_t)r0 * C + 8 * n, mma16_pack<floatX>(o[n][0] / l0, o[n][1] / l0));
        if (r1 < T) f2_st32(ob + (size_t)r1 * C + 8 * n, mma16_pack<floatX>(o[n][2] / l1, o[n][3] / l1));
    }
    if (t == 0) {
        float *lb = lse + ((size_t)b * NH + h) * T;
        if (r0 < T) lb[r0] = m0 * F2_LN2 + logf(l0);
        if (r1 < T) lb[r1] = m1 * F2_LN2 + logf(l1);
    }
}

// F2_DS_STORE's dS^T tiles, 16-bit: per (b, h), the causal tile pairs (query tile qt, key tile kt <=
// qt) in the order (0,0), (1,0), (1,1), (2,0) ...: a query tile's key tiles lie one after another.
// Each is 64 keys x 64 queries, row-major (dS^T[key][query] / scale).
static __host__ __device__ __forceinline__ size_t f2_ds_tile(int bh, int nq, int qt, int kt) {
    return ((size_t)bh * nq * (nq + 1) / 2 + (size_t)qt * (qt + 1) / 2 + kt) * F2_ROWS * F2_ROWS;
}
// The elements of those tiles for B*NH heads of T rows (0 where the build does not store them).
static inline size_t f2_ds_elems(int B, int NH, int T) {
#if defined(F2_DS_STORE)
    return f2_ds_tile(B * NH, ceil_div(T, F2_ROWS), 0, 0);
#else
    (void)B; (void)NH; (void)T;
    return 0;
#endif
}
// A warp's dQ accumulators (rows r0 and r1 of this lane, columns 2t + 8n) times scale into ob
// (dqkv's q part of the head, offset by 2t; rows ld apart), rows past T skipped.
template <int HS>
static __device__ __forceinline__ void f2_store_dq(floatX *ob, size_t ld, const float dq[HS / 8][4], int r0, int r1,
                                                   int T) {
    const float scale = 1.0f / sqrtf((float)HS);
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        if (r0 < T) f2_st32(ob + (size_t)r0 * ld + 8 * n, mma16_pack<floatX>(dq[n][0] * scale, dq[n][1] * scale));
        if (r1 < T) f2_st32(ob + (size_t)r1 * ld + 8 * n, mma16_pack<floatX>(dq[n][2] * scale, dq[n][3] * scale));
    }
}

#if !defined(F2_DS_STORE)
// dqkv's q part, OVERWRITTEN: dQ = scale dS K, dS = P (dP - D), dP = dY V^T, per 64-query block,
// iterating key tiles up to the diagonal (two 32-key halves each). Grid and threads as the forward's.
template <int HS>
static __global__ void __launch_bounds__(F2_QTHREADS, F2_MINB(HS, F2_MINB_DQ, F2_QWARPS))
flash2_backward_dq_kernel(floatX *dqkv, const float *lse, const float *D, const floatX *dout, const floatX *qkv,
                          int T, int C, int NH) {
    constexpr int NS = F2_NS(HS); // tile stages
    __shared__ __align__(16) floatX Ks[NS][F2_ROWS][HS + 8], Vs[NS][F2_ROWS][HS + 8]; // K and V (key, dim), NS stages
    int b = blockIdx.x / NH, h = blockIdx.x % NH, q0 = (gridDim.y - 1 - blockIdx.y) * F2_QROWS;
    int w = threadIdx.x / WARP, g = threadIdx.x % WARP / 4, t = threadIdx.x % 4;
    int r0 = q0 + 16 * w + g, r1 = r0 + 8;
    int qt = (q0 + 16 * w) / F2_ROWS, wl = w % 4, live = q0 + 16 * w < T; // as the forward's
    int ktmax = min(q0 + F2_QROWS, T) - 1;
    ktmax /= F2_ROWS;
    size_t ld = 3 * (size_t)C;
    const floatX *qb = qkv + (size_t)b * T * ld + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const float c = F2_LOG2E / sqrtf((float)HS);
    uint32_t qa[HS / 16][4], da[HS / 16][4];
    f2_load_a<HS>(qa, qb, ld, r0, T);
    f2_load_a<HS>(da, dout + (size_t)b * T * C + h * HS, C, r0, T);
    const float *lb = lse + ((size_t)b * NH + h) * T, *db = D + ((size_t)b * NH + h) * T;
    float L0 = r0 < T ? lb[r0] * F2_LOG2E : 0.0f, L1 = r1 < T ? lb[r1] * F2_LOG2E : 0.0f;
    float D0 = r0 < T ? db[r0] : 0.0f, D1 = r1 < T ? db[r1] : 0.0f;
    float dq[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    f2_load_tile<F2_QTHREADS, HS>(Ks[0], kb, ld, 0, T);
    f2_load_tile<F2_QTHREADS, HS>(Vs[0], vb, ld, 0, T);
    f2_cp_commit();
    for (int kt = 0; kt <= ktmax; kt++) {
        int k0 = kt * F2_ROWS, diag = kt == qt, st = NS == 2 ? kt & 1 : 0, nx = st ^ (NS - 1);
        __syncthreads(); // as the forward's: the previous stage is free, refill it, wait for this one
        if (NS == 2 ? kt < ktmax : kt > 0) {
            f2_load_tile<F2_QTHREADS, HS>(Ks[nx], kb, ld, k0 + F2_ROWS * (NS - 1), T);
            f2_load_tile<F2_QTHREADS, HS>(Vs[nx], vb, ld, k0 + F2_ROWS * (NS - 1), T);
        }
        f2_cp_commit();
        f2_cp_wait<NS - 1>();
        __syncthreads();
        if (kt > qt || !live) continue;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            if (diag && 32 * hh > 16 * wl + 15) continue; // the half's keys all follow this warp's queries
            float s[4][4], dp[4][4];
            f2_two_products<HS>(s, qa, Ks[st], dp, da, Vs[st], 32 * hh); // S and dP of the half's 32 keys
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int key = k0 + 32 * hh + 8 * n + 2 * t + (i & 1), row = i < 2 ? r0 : r1;
                    float p = exp2f(s[n][i] * c - (i < 2 ? L0 : L1));
                    if (diag && (key > row || key >= T)) p = 0.0f;
                    s[n][i] = p * (dp[n][i] - (i < 2 ? D0 : D1)); // dS / scale
                }
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t sa[4];
                mma16_pack_a<floatX>(sa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
                for (int np = 0; np < HS / 16; np++) {
                    uint32_t bb[4];
                    f2_ldsm_kn(bb, Ks[st], 32 * hh + 16 * kk, 16 * np);
                    F2_MMA(dq[2 * np], sa, bb);
                    F2_MMA(dq[2 * np + 1], sa, bb + 2);
                }
            }
        }
    }
    f2_store_dq<HS>(dqkv + (size_t)b * T * ld + h * HS + 2 * t, ld, dq, r0, r1, T);
}
#endif

// dqkv's k and v parts, OVERWRITTEN: per 64-key block, over the query tiles from its diagonal on
// (two 32-query halves each): S^T = K Q^T, P^T = exp2(S^T c - lse c), dV += P^T dY,
// dP^T = V dY^T, dS^T = P^T (dP^T - D), dK += scale dS^T Q. Grid (B*NH, ceil(T/64)), key
// block = blockIdx.y (the heaviest, first, first).
// ds: F2_DS_STORE builds' dS^T tiles (f2_ds_tile), written here; NULL and unused otherwise.
template <int HS>
static __global__ void __launch_bounds__(F2_THREADS, F2_MINB(HS, F2_MINB_DKV, 4))
flash2_backward_dkv_kernel(floatX *dqkv, const float *lse, const float *D, const floatX *dout, const floatX *qkv,
                           floatX *ds, int T, int C, int NH) {
    constexpr int NS = F2_NS(HS); // tile stages
    // Q and dY (query, dim), NS stages
    __shared__ __align__(16) floatX Qs[NS][F2_ROWS][HS + 8], dYs[NS][F2_ROWS][HS + 8];
    __shared__ float Ls[2][F2_ROWS], Ds[2][F2_ROWS]; // the tiles' rows' lse (base 2) and D
    int b = blockIdx.x / NH, h = blockIdx.x % NH, kt = blockIdx.y, k0 = kt * F2_ROWS, nq = gridDim.y;
    int w = threadIdx.x / WARP, g = threadIdx.x % WARP / 4, t = threadIdx.x % 4;
    int r0 = k0 + 16 * w + g, r1 = r0 + 8; // this lane's two keys
    size_t ld = 3 * (size_t)C;
    const floatX *qb = qkv + (size_t)b * T * ld + h * HS, *kb = qb + C, *vb = qb + 2 * C;
    const floatX *yb = dout + (size_t)b * T * C + h * HS;
    const float *lb = lse + ((size_t)b * NH + h) * T, *db = D + ((size_t)b * NH + h) * T;
    const float c = F2_LOG2E / sqrtf((float)HS);
    uint32_t ka[HS / 16][4], va[HS / 16][4];
    f2_load_a<HS>(ka, kb, ld, r0, T);
    f2_load_a<HS>(va, vb, ld, r0, T);
    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        dk[n][0] = dk[n][1] = dk[n][2] = dk[n][3] = 0.0f;
        dv[n][0] = dv[n][1] = dv[n][2] = dv[n][3] = 0.0f;
    }
    // threads 0..63 carry one row's lse and D of the tile after the one being filled, in registers
    // (loaded a tile ahead of their store into its stage, so that the load's latency is hidden)
    int tq = k0 + (int)threadIdx.x;
    f2_load_tile<F2_THREADS, HS>(Qs[0], qb, ld, k0, T);
    f2_load_tile<F2_THREADS, HS>(dYs[0], yb, C, k0, T);
    f2_cp_commit();
    if (threadIdx.x < F2_ROWS) {
        Ls[0][threadIdx.x] = tq < T ? lb[tq] * F2_LOG2E : 0.0f;
        Ds[0][threadIdx.x] = tq < T ? db[tq] : 0.0f;
    }
    tq += F2_ROWS;
    float lq = threadIdx.x < F2_ROWS && tq < T ? lb[tq] * F2_LOG2E : 0.0f, dq = threadIdx.x < F2_ROWS && tq < T ? db[tq] : 0.0f;
    for (int qt = kt; qt < nq; qt++) {
        // ls: the lse/D rows' buffer (always two); st: the tiles' stage (NS of them)
        int q0 = qt * F2_ROWS, diag = qt == kt, ls = (qt - kt) & 1, st = NS == 2 ? ls : 0;
        __syncthreads(); // every warp is done with the previous tile: its stage is refilled next
        if (NS == 1 && qt > kt) { // one stage: this tile, now that every warp is done with the last
            f2_load_tile<F2_THREADS, HS>(Qs[0], qb, ld, q0, T);
            f2_load_tile<F2_THREADS, HS>(dYs[0], yb, C, q0, T);
        }
        if (qt + 1 < nq) {
            if (NS == 2) { // the next tile into the other stage
                f2_load_tile<F2_THREADS, HS>(Qs[ls ^ 1], qb, ld, q0 + F2_ROWS, T);
                f2_load_tile<F2_THREADS, HS>(dYs[ls ^ 1], yb, C, q0 + F2_ROWS, T);
            }
            if (threadIdx.x < F2_ROWS) {
                Ls[ls ^ 1][threadIdx.x] = lq;
                Ds[ls ^ 1][threadIdx.x] = dq;
            }
            tq = q0 + 2 * F2_ROWS + (int)threadIdx.x;
            lq = threadIdx.x < F2_ROWS && tq < T ? lb[tq] * F2_LOG2E : 0.0f;
            dq = threadIdx.x < F2_ROWS && tq < T ? db[tq] : 0.0f;
        }
        f2_cp_commit();
        f2_cp_wait<NS - 1>();
        __syncthreads();
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            if (diag && 32 * hh + 31 < 16 * w) continue; // the half's queries all precede this warp's keys
            float s[4][4], dp[4][4];
            f2_two_products<HS>(s, ka, Qs[st], dp, va, dYs[st], 32 * hh); // S^T and dP^T of the half's 32 queries
#pragma unroll
            for (int n = 0; n < 4; n++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int j = 32 * hh + 8 * n + 2 * t + (i & 1), q = q0 + j, key = i < 2 ? r0 : r1;
                    float p = exp2f(s[n][i] * c - Ls[ls][j]);
                    if (q >= T || (diag && q < key)) p = 0.0f;
                    s[n][i] = p;                                // P^T
                    dp[n][i] = p * (dp[n][i] - Ds[ls][j]);      // dS^T / scale
                }
#if defined(F2_DS_STORE)
            { // the half's dS^T (rows: this warp's keys, zeros past T; columns: the half's 32 queries)
                floatX *tile = ds + f2_ds_tile(blockIdx.x, nq, qt, kt) + (size_t)(16 * w + g) * F2_ROWS + 32 * hh + 2 * t;
#pragma unroll
                for (int n = 0; n < 4; n++) {
                    f2_st32(tile + 8 * n, r0 < T ? mma16_pack<floatX>(dp[n][0], dp[n][1]) : 0u);
                    f2_st32(tile + 8 * F2_ROWS + 8 * n, r1 < T ? mma16_pack<floatX>(dp[n][2], dp[n][3]) : 0u);
                }
            }
#else
            (void)ds;
#endif
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t pa[4], sa[4];
                mma16_pack_a<floatX>(pa, s[2 * kk], s[2 * kk + 1]);
                mma16_pack_a<floatX>(sa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int np = 0; np < HS / 16; np++) {
                    uint32_t bb[4];
                    f2_ldsm_kn(bb, dYs[st], 32 * hh + 16 * kk, 16 * np);
                    F2_MMA(dv[2 * np], pa, bb);
                    F2_MMA(dv[2 * np + 1], pa, bb + 2);
                    f2_ldsm_kn(bb, Qs[st], 32 * hh + 16 * kk, 16 * np);
                    F2_MMA(dk[2 * np], sa, bb);
                    F2_MMA(dk[2 * np + 1], sa, bb + 2);
                }
            }
        }
    }
    const float scale = 1.0f / sqrtf((float)HS);
    floatX *ok = dqkv + (size_t)b * T * ld + C + h * HS + 2 * t, *ov = ok + C;
#pragma unroll
    for (int n = 0; n < HS / 8; n++) {
        if (r0 < T) {
            f2_st32(ok + (size_t)r0 * ld + 8 * n, mma16_pack<floatX>(dk[n][0] * scale, dk[n][1] * scale));
            f2_st32(ov + (size_t)r0 * ld + 8 * n, mma16_pack<floatX>(dv[n][0], dv[n][1]));
        }
        if (r1 < T) {
            f2_st32(ok + (size_t)r1 * ld + 8 * n, mma16_pack<floatX>(dk[n][2] * scale, dk[n][3] * scale));
            f2_st32(ov + (size_t)r1 * ld + 8 * n, mma16_pack<floatX>(dv[n][2], dv[n][3]));
        }
    }
}

#if defined(F2_DS_STORE)
#ifndef F2_MINB_DQDS
#define F2_MINB_DQDS 4
#endif
// dqkv's q part, OVERWRITTEN, from the dK/dV kernel's dS^T tiles: dQ = scale dS K per 64-query
// block (4 warps, 16 queries each), iterating key tiles up to the diagonal; K and the dS^T tile in
// two cp.async stages. dS's A fragment is ldmatrix.trans of dS^T (rows keys, columns queries):
// f2_ldsm_kn's registers in the order (q, k), (q+8, k), (q, k+8), (q+8, k+8). The products, their
// order and the rounding are flash2_backward_dq_kernel's. Grid (B*NH, ceil(T/64)), heaviest first.
template <int HS>
static __global__ void __launch_bounds__(F2_THREADS, F2_MINB(HS, F2_MINB_DQDS, 4))
flash2_backward_dq_ds_kernel(floatX *dqkv, const floatX *ds, const floatX *qkv, int T, int C, int NH) {
    constexpr int NS = F2_NS(HS); // tile stages
    __shared__ __align__(16) floatX Ks[NS][F2_ROWS][HS + 8], Ss[NS][F2_ROWS][F2_LD]; // K (key, dim), dS^T (key, query)
    int nq = gridDim.y, qt = nq - 1 - blockIdx.y, q0 = qt * F2_ROWS, b = blockIdx.x / NH, h = blockIdx.x % NH;
    int w = threadIdx.x / WARP, g = threadIdx.x % WARP / 4, t = threadIdx.x % 4;
    int r0 = q0 + 16 * w + g, r1 = r0 + 8, live = q0 + 16 * w < T;
    size_t ld = 3 * (size_t)C;
    const floatX *kb = qkv + (size_t)b * T * ld + C + h * HS, *sb = ds + f2_ds_tile(blockIdx.x, nq, qt, 0);
    float dq[HS / 8][4];
#pragma unroll
    for (int n = 0; n < HS / 8; n++) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
    f2_load_tile<F2_THREADS, HS>(Ks[0], kb, ld, 0, T);
    f2_load_tile<F2_THREADS, F2_ROWS>(Ss[0], sb, F2_ROWS, 0, F2_ROWS);
    f2_cp_commit();
    for (int kt = 0; kt <= qt; kt++) {
        int diag = kt == qt, st = NS == 2 ? kt & 1 : 0, nx = st ^ (NS - 1), kn = kt + NS - 1; // kn: the tile loaded now
        __syncthreads(); // as the forward's: the previous stage is free, refill it, wait for this one
        if (NS == 2 ? kt < qt : kt > 0) {
            f2_load_tile<F2_THREADS, HS>(Ks[nx], kb, ld, kn * F2_ROWS, T);
            f2_load_tile<F2_THREADS, F2_ROWS>(Ss[nx], sb + (size_t)kn * F2_ROWS * F2_ROWS, F2_ROWS, 0, F2_ROWS);
        }
        f2_cp_commit();
        f2_cp_wait<NS - 1>();
        __syncthreads();
        if (!live) continue;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            if (diag && 32 * hh > 16 * w + 15) continue; // the half's keys all follow this warp's queries
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t bb[4], sa[4];
                f2_ldsm_kn(bb, Ss[st], 32 * hh + 16 * kk, 16 * w);
                sa[0] = bb[0]; sa[1] = bb[2]; sa[2] = bb[1]; sa[3] = bb[3];
#pragma unroll
                for (int np = 0; np < HS / 16; np++) {
                    f2_ldsm_kn(bb, Ks[st], 32 * hh + 16 * kk, 16 * np);
                    F2_MMA(dq[2 * np], sa, bb);
                    F2_MMA(dq[2 * np + 1], sa, bb + 2);
                }
            }
        }
    }
    f2_store_dq<HS>(dqkv + (size_t)b * T * ld + h * HS + 2 * t, ld, dq, r0, r1, T);
}
#endif

// The backward's two kernels after D (flash_backward_preprocess_kernel): dK/dV, then dQ (from the
// dS^T tiles in ds, f2_ds_elems of them, in F2_DS_STORE builds; ds unused otherwise).
// The instances are launched through pointers (the emulator's launch rewrite takes a plain name).
template <int HS>
static void flash2_forward_hs(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH,
                              cudaStream_t stream) {
    auto fwd = flash2_forward_kernel<HS>;
    fwd<<<dim3(B * NH, ceil_div(T, F2_QROWS)), F2_QTHREADS, 0, stream>>>(out, lse, qkv, T, C, NH);
    LAUNCH_CHECK();
}
template <int HS>
static void flash2_backward_hs(floatX *dqkv, const float *lse, const float *D, const floatX *dout, const floatX *qkv,
                               floatX *ds, int B, int T, int C, int NH, cudaStream_t stream) {
    dim3 grid(B * NH, ceil_div(T, F2_ROWS));
    auto dkv = flash2_backward_dkv_kernel<HS>;
    dkv<<<grid, F2_THREADS, 0, stream>>>(dqkv, lse, D, dout, qkv, ds, T, C, NH);
    LAUNCH_CHECK();
#if defined(F2_DS_STORE)
    auto dq = flash2_backward_dq_ds_kernel<HS>;
    dq<<<grid, F2_THREADS, 0, stream>>>(dqkv, ds, qkv, T, C, NH);
#else
    dim3 qgrid(B * NH, ceil_div(T, F2_QROWS));
    auto dq = flash2_backward_dq_kernel<HS>;
    dq<<<qgrid, F2_QTHREADS, 0, stream>>>(dqkv, lse, D, dout, qkv, T, C, NH);
#endif
    LAUNCH_CHECK();
}
// The forward: out and lse from qkv, at head size C / NH (f2_head_size: 64 or 128; any other is fatal).
static void flash2_forward(floatX *out, float *lse, const floatX *qkv, int B, int T, int C, int NH,
                           cudaStream_t stream) {
    if (C / NH == 64) flash2_forward_hs<64>(out, lse, qkv, B, T, C, NH, stream);
    else if (C / NH == 128) flash2_forward_hs<128>(out, lse, qkv, B, T, C, NH, stream);
    else gpu_fatal("flash2_forward", "head size not 64 or 128", __FILE__, __LINE__);
}
static void flash2_backward(floatX *dqkv, const float *lse, const float *D, const floatX *dout, const floatX *qkv,
                            floatX *ds, int B, int T, int C, int NH, cudaStream_t stream) {
    if (C / NH == 64) flash2_backward_hs<64>(dqkv, lse, D, dout, qkv, ds, B, T, C, NH, stream);
    else if (C / NH == 128) flash2_backward_hs<128>(dqkv, lse, D, dout, qkv, ds, B, T, C, NH, stream);
    else gpu_fatal("flash2_backward", "head size not 64 or 128", __FILE__, __LINE__);
}
#endif

#endif // GPU_FLASH2_CUH
