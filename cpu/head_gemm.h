/*
cpu/head_gemm.h: the fp32 products of one attention head (T x T scores, T x hs outputs) for the
CPU trainer, on AVX-512 registers, skipping the causal mask's zeros. stb-style (all static), C11.

What it computes (row-major; the contract of cblas_sgemm with beta = 0)
    C (M,N) = alpha * op(A) · op(B)        op(A) is (M,K), op(B) is (K,N)
    transA = 0: A(i,k) at A[i*lda + k]    transA = 1: at A[k*lda + i]
    transB = 0: B(k,j) at B[k*ldb + j]    transB = 1: at B[j*ldb + k]
  Each C element is one chain of fused multiply-adds over k in increasing order, starting from
  +0, then multiplied by alpha: the order OpenBLAS's kernels use for these shapes (its small-matrix
  kernels, and its packed kernel while K fits its K block), so the results equal OpenBLAS's, bit
  for bit, where it sums so: the trainer's checkpoints at T=64 are identical; at T=1024 OpenBLAS
  splits k and the last bits differ. (test_kernels's test_head_gemm checks this contract against
  a scalar fmaf chain.)

    void head_gemm(simd, transA, transB, M, N, K, alpha, A, lda, B, ldb, C, ldc, mask, d)
  mask says which terms are known zeros or which results are not wanted, relative to the
  diagonal offset d (the causal mask seen from the call's own indices):
    HG_FULL     everything
    HG_C_LOWER  only C(i,j) with j <= i + d is wanted; the rest of C is left unspecified
                (the scores before the softmax, which reads columns 0..t of row t only)
    HG_A_LOWER  the caller guarantees A(i,k) = 0 for k > i + d (probabilities . values)
    HG_A_UPPER  the caller guarantees A(i,k) = 0 for k < i + d (probabilitiesᵀ . gradient)
  The kernel skips those zero terms where a whole block of 6 rows has them (it may still read
  some: they must be zeros, not garbage). A skipped term is an exact zero product, and a chain
  that starts from +0 is never -0, so skipping it changes no bit (unless the other factor is Inf
  or NaN, which would make the sum NaN: a run in that state has lost its loss already).
  simd 0 (no AVX-512, or transB with K > HG_MAX_K) calls cblas_sgemm instead, computing all of C.

Tiling: blocks of 6 rows x 64 columns of C in 24 zmm accumulators (fewer columns near the
diagonal: 16, 32 or 48 in 6, 12 or 18); per k, the vectors of B's row k and one broadcast of
A(i,k) per row. A transB operand (keys or values rows of qkv, whose B(k,j) runs down rows 9 KB
apart) is first transposed, 64 columns at a time, into a stack buffer.
Needs cpu/gemm_bf16.h (its 16 x 16 transpose) and cblas.h.
*/
#ifndef ZC_HEAD_GEMM_H
#define ZC_HEAD_GEMM_H

#include <cblas.h>
#include "cpu/gemm_bf16.h"

enum { HG_FULL, HG_C_LOWER, HG_A_LOWER, HG_A_UPPER };
#define HG_MAX_K 256

#ifdef ZC_GB_X86
// rows (1..6) x n (1..16 NV) of C = alpha * sum over k in [k0, k1) of A(i,k) B(k,j): A(i,k) at
// a[i*sai + k*sak], B(k,j) at b[k*ldb + j]. NV (1..4) vectors of 16 columns, a constant in each
// of the four instances below (a block narrower than 64 columns, near the causal diagonal, does
// not multiply the columns it does not have).
#define HG_ZERO(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0;
#define HG_ROW(i)                                                                                        \
    {                                                                                                    \
        const __m512 y = _mm512_set1_ps(a[(size_t)(i) * sai + (size_t)k * sak]);                         \
        c##i##0 = _mm512_fmadd_ps(y, x0, c##i##0);                                                       \
        if (NV > 1) c##i##1 = _mm512_fmadd_ps(y, x1, c##i##1);                                           \
        if (NV > 2) c##i##2 = _mm512_fmadd_ps(y, x2, c##i##2);                                           \
        if (NV > 3) c##i##3 = _mm512_fmadd_ps(y, x3, c##i##3);                                           \
    }
#define HG_STORE(i)                                                                                      \
    if ((i) < rows) {                                                                                    \
        float *cr = c + (size_t)(i) * ldc;                                                               \
        _mm512_mask_storeu_ps(cr, m0, _mm512_mul_ps(al, c##i##0));                                       \
        if (NV > 1) _mm512_mask_storeu_ps(cr + 16, m1, _mm512_mul_ps(al, c##i##1));                      \
        if (NV > 2) _mm512_mask_storeu_ps(cr + 32, m2, _mm512_mul_ps(al, c##i##2));                      \
        if (NV > 3) _mm512_mask_storeu_ps(cr + 48, m3, _mm512_mul_ps(al, c##i##3));                      \
    }
static inline __mmask16 hg_mask(int n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u); }
ZC_GB_TARGET_AVX512 static inline __attribute__((always_inline)) void hg_block(const int NV, int rows, int n, int k0, int k1,
                                                                               float alpha, const float *a, size_t sai, size_t sak,
                                                                               const float *b, size_t ldb, float *c, size_t ldc) {
    const __mmask16 m0 = hg_mask(n), m1 = hg_mask(n - 16), m2 = hg_mask(n - 32), m3 = hg_mask(n - 48);
    const __m512 al = _mm512_set1_ps(alpha);
    HG_ZERO(0) HG_ZERO(1) HG_ZERO(2) HG_ZERO(3) HG_ZERO(4) HG_ZERO(5)
    for (int k = k0; k < k1; k++) {
        const float *br = b + (size_t)k * ldb;
        const __m512 x0 = _mm512_maskz_loadu_ps(m0, br), x1 = NV > 1 ? _mm512_maskz_loadu_ps(m1, br + 16) : x0,
                     x2 = NV > 2 ? _mm512_maskz_loadu_ps(m2, br + 32) : x0, x3 = NV > 3 ? _mm512_maskz_loadu_ps(m3, br + 48) : x0;
        if (rows == 6) { // (the common case, without a branch per row)
            HG_ROW(0) HG_ROW(1) HG_ROW(2) HG_ROW(3) HG_ROW(4) HG_ROW(5)
            continue;
        }
        HG_ROW(0)
        if (rows > 1) HG_ROW(1)
        if (rows > 2) HG_ROW(2)
        if (rows > 3) HG_ROW(3)
        if (rows > 4) HG_ROW(4)
    }
    HG_STORE(0) HG_STORE(1) HG_STORE(2) HG_STORE(3) HG_STORE(4) HG_STORE(5)
}
#undef HG_ZERO
#undef HG_ROW
#undef HG_STORE
#define HG_BLOCK_NV(nv)                                                                                                      \
    ZC_GB_TARGET_AVX512 static void hg_block##nv(int rows, int n, int k0, int k1, float alpha, const float *a, size_t sai,    \
                                                 size_t sak, const float *b, size_t ldb, float *c, size_t ldc) {           \
        hg_block(nv, rows, n, k0, k1, alpha, a, sai, sak, b, ldb, c, ldc);                                                    \
    }
HG_BLOCK_NV(1)
HG_BLOCK_NV(2)
HG_BLOCK_NV(3)
HG_BLOCK_NV(4)
#undef HG_BLOCK_NV

// bt (K,64) = columns j0..j0+n-1 of op(B) = rows j0.. of B (n <= 64, K <= HG_MAX_K), 16 x 16 at a
// time through registers (columns past n: zeros)
ZC_GB_TARGET_AVX512 static inline void hg_transpose(float *bt, const float *B, int ldb, int j0, int n, int K) {
    for (int jb = 0; jb < 64; jb += 16)
        for (int kb = 0; kb < K; kb += 16) {
            __m512i v[16];
            const __mmask16 mk = hg_mask(K - kb);
            for (int j = 0; j < 16; j++)
                v[j] = jb + j < n ? _mm512_maskz_loadu_epi32(mk, B + (size_t)(j0 + jb + j) * ldb + kb) : _mm512_setzero_si512();
            zc_gb_transpose16_epi32(v);
            for (int k = 0; k < 16 && kb + k < K; k++) _mm512_storeu_si512((void *)(bt + (size_t)(kb + k) * 64 + jb), v[k]);
        }
}

ZC_GB_TARGET_AVX512 static inline void hg_run(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                                              const float *B, int ldb, float *C, int ldc, int mask, int d) {
    float bt[HG_MAX_K * 64] __attribute__((aligned(64)));
    const size_t sai = transA ? 1 : (size_t)lda, sak = transA ? (size_t)lda : 1;
    for (int j0 = 0; j0 < N; j0 += 64) {
        const int n = N - j0 < 64 ? N - j0 : 64;
        if (mask == HG_C_LOWER && j0 > M - 1 + d) break; // no wanted element in this or later columns
        const float *b = B + j0;
        size_t ldbb = (size_t)ldb;
        if (transB) hg_transpose(bt, B, ldb, j0, n, K), b = bt, ldbb = 64;
        for (int i0 = 0; i0 < M; i0 += 6) {
            const int rows = M - i0 < 6 ? M - i0 : 6;
            int k0 = 0, k1 = K, nn = n;
            if (mask == HG_C_LOWER) { // columns up to the block's last row's diagonal
                int last = i0 + rows - 1 + d - j0 + 1;
                if (last <= 0) continue;
                if (last < nn) nn = last;
            } else if (mask == HG_A_LOWER) {
                if (i0 + rows + d < k1) k1 = i0 + rows + d;
            } else if (mask == HG_A_UPPER) {
                if (i0 + d > k0) k0 = i0 + d;
            }
            if (k0 > k1) k0 = k1;
            void (*blk)(int, int, int, int, float, const float *, size_t, size_t, const float *, size_t, float *, size_t) =
                nn > 48 ? hg_block4 : nn > 32 ? hg_block3 : nn > 16 ? hg_block2 : hg_block1;
            blk(rows, nn, k0, k1, alpha, A + (size_t)i0 * sai, sai, sak, b, ldbb, C + (size_t)i0 * ldc + j0, (size_t)ldc);
        }
    }
}
#endif // ZC_GB_X86

static inline void head_gemm(int simd, int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                             const float *B, int ldb, float *C, int ldc, int mask, int d) {
    if (M <= 0 || N <= 0) return;
#ifdef ZC_GB_X86
    if (simd && (!transB || K <= HG_MAX_K)) {
        hg_run(transA, transB, M, N, K, alpha, A, lda, B, ldb, C, ldc, mask, d);
        return;
    }
#endif
    (void)mask; (void)d; (void)simd;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda,
                B, ldb, 0.0f, C, ldc);
}

#endif // ZC_HEAD_GEMM_H
