// gpu/mma16.cuh: the tensor cores' warp-level m16n8k16 product (mma.sync, bf16 or fp16 operands,
// fp32 accumulators) for gpu/flash2.cuh, as a device function with two bodies: nvcc's device
// pass (__CUDA_ARCH__) issues the PTX instruction; every other compile (the CUDA emulator's g++
// build, test/cuda_emu/, which cannot run inline PTX; nvcc's host pass, which never calls it)
// gets a portable body with the same semantics, built on __shfl_sync over the PTX ISA's documented
// fragment layouts. No floatX in here, so that test/cuda_emu_selftest.cu checks it directly.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), lane l of
// the warp, g = l / 4, t = l % 4; each 32-bit register holds two 16-bit elements, the lower
// column (A, C) or row (B) in its low half:
//   A (16x16, row):  a0 = A[g][2t..2t+1]    a1 = A[g+8][2t..2t+1]  a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B (16x8, col):   b0 = B[2t..2t+1][g]    b1 = B[2t+8..2t+9][g]
//   C, D (16x8 fp32): c0, c1 = C[g][2t], C[g][2t+1]    c2, c3 = C[g+8][2t], C[g+8][2t+1]
// The C fragment of two adjacent n-tiles (columns 0-7 and 8-15) is, element for element, the A
// fragment of their 16x16 tile: FlashAttention-2 turns S = Q K^T into P's operand of P V
// without leaving registers (mma16_pack_a).
#ifndef GPU_MMA16_CUH
#define GPU_MMA16_CUH
#include <stdint.h>
#include <type_traits>
#include <string.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

static __device__ __forceinline__ float mma16_to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ float mma16_to_float(__half x) { return __half2float(x); }
static __device__ __forceinline__ void mma16_round(__nv_bfloat16 *x, float v) { *x = __float2bfloat16_rn(v); }
static __device__ __forceinline__ void mma16_round(__half *x, float v) { *x = __float2half_rn(v); }

// Two fp32 values rounded to T (to nearest even) and packed: lo in the low half.
template <class T> static __device__ __forceinline__ uint32_t mma16_pack(float lo, float hi) {
    T x[2];
    mma16_round(&x[0], lo);
    mma16_round(&x[1], hi);
    uint32_t r;
    memcpy(&r, x, 4);
    return r;
}
// The A fragment of a 16x16 tile from the fp32 C fragments of its two 16x8 halves.
template <class T> static __device__ __forceinline__ void mma16_pack_a(uint32_t a[4], const float c0[4], const float c1[4]) {
    a[0] = mma16_pack<T>(c0[0], c0[1]);
    a[1] = mma16_pack<T>(c0[2], c0[3]);
    a[2] = mma16_pack<T>(c1[0], c1[1]);
    a[3] = mma16_pack<T>(c1[2], c1[3]);
}

#if !defined(__CUDA_ARCH__)
template <class T> static __device__ __forceinline__ void mma16_unpack(float v[2], uint32_t r) {
    T x[2];
    memcpy(x, &r, 4);
    v[0] = mma16_to_float(x[0]);
    v[1] = mma16_to_float(x[1]);
}
static __device__ __forceinline__ unsigned mma16_lane() {
    return ((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) % 32u;
}
#endif

#if !defined(__CUDA_ARCH__)
// The portable body: each lane gathers rows g and g+8 of A (from lanes 4g..4g+3) and columns 2t
// and 2t+1 of B (from lanes 8t..8t+3 and 8t+4..8t+7) with shuffles that every lane makes in the
// same order, then computes its four elements in fp32, summed in k order onto c (the products of
// two 16-bit values are exact in fp32).
template <class T> static __device__ void mma16816_portable(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    unsigned lane = mma16_lane(), g = lane / 4, t = lane % 4;
    float A[2][16], B[2][16];
    for (unsigned tt = 0; tt < 4; tt++) {
        int src = (int)(4 * g + tt);
        uint32_t r0 = __shfl_sync(0xffffffffu, a[0], src), r1 = __shfl_sync(0xffffffffu, a[1], src);
        uint32_t r2 = __shfl_sync(0xffffffffu, a[2], src), r3 = __shfl_sync(0xffffffffu, a[3], src);
        mma16_unpack<T>(&A[0][2 * tt], r0);
        mma16_unpack<T>(&A[1][2 * tt], r1);
        mma16_unpack<T>(&A[0][2 * tt + 8], r2);
        mma16_unpack<T>(&A[1][2 * tt + 8], r3);
    }
    for (unsigned j = 0; j < 2; j++)
        for (unsigned tt = 0; tt < 4; tt++) {
            int src = (int)(4 * (2 * t + j) + tt);
            uint32_t r0 = __shfl_sync(0xffffffffu, b[0], src), r1 = __shfl_sync(0xffffffffu, b[1], src);
            mma16_unpack<T>(&B[j][2 * tt], r0);
            mma16_unpack<T>(&B[j][2 * tt + 8], r1);
        }
    for (int i = 0; i < 4; i++) {
        float acc = d[i];
        for (int k = 0; k < 16; k++) acc += A[i / 2][k] * B[i % 2][k];
        d[i] = acc;
    }
}
#endif


// d (this lane's C fragment) += A B, the whole warp together (every lane must call it, converged).
template <class T> static __device__ __forceinline__ void mma16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(__CUDA_ARCH__)
    if (std::is_same<T, __half>::value)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    mma16816_portable<T>(d, a, b);
#endif
}

// ldmatrix.x4: four 8x8 matrices of 16-bit elements from SHARED memory in one warp instruction.
// Lane l gives the address of row l % 8 of matrix l / 8 (16 contiguous bytes, 16-byte aligned);
// r[m] receives this lane's pair of matrix m (g = l / 4, t = l % 4, the lower element in the low half):
//   TRANS = 0:  M[g][2t], M[g][2t+1]     the B fragment's register when M holds B^T (rows n, columns k)
//   TRANS = 1:  M[2t][g], M[2t+1][g]     ... when M holds B itself (rows k, columns n)
// (the PTX ISA's ldmatrix; its shared-memory phases read 8 rows at a time, so rows 16 bytes apart
// mod 128 are conflict-free). Every lane must call it, converged.
template <int TRANS> static __device__ __forceinline__ void mma16_ldsm_x4(uint32_t r[4], const void *row) {
#if defined(__CUDA_ARCH__)
    uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
#else
    // portable: each lane fetches the row addresses it needs from the lanes that hold them
    unsigned lane = mma16_lane(), g = lane / 4, t = lane % 4;
    unsigned long long mine = (unsigned long long)(uintptr_t)row;
#if defined(CUDA_EMULATOR)
    if (mine % 16) emu_fatal("ldmatrix in %s: lane %u's row address %p is not 16-byte aligned", emu_k.kernel, lane, row);
#endif
    for (int m = 0; m < 4; m++) {
        unsigned long long p0 = __shfl_sync(0xffffffffu, mine, 8 * m + (int)(TRANS ? 2 * t : g));
        if (TRANS) {
            unsigned long long p1 = __shfl_sync(0xffffffffu, mine, 8 * m + (int)(2 * t + 1));
            uint16_t lo, hi;
            memcpy(&lo, (const char *)(uintptr_t)p0 + 2 * g, 2);
            memcpy(&hi, (const char *)(uintptr_t)p1 + 2 * g, 2);
            r[m] = (uint32_t)lo | (uint32_t)hi << 16;
        } else {
            memcpy(&r[m], (const char *)(uintptr_t)p0 + 4 * t, 4);
        }
    }
#endif
}

#endif // GPU_MMA16_CUH
