// gpu/quant.cuh: core/quant.h's block-wise symmetric int8/int4 quantization on the device, for
// ZeRO++'s messages (qwZ's int8 weight all-gather, qgZ's int4/int8 gradient all-to-all) in the
// NCCL backend (gpu/nccl_backend.cuh).
//
// Contract
//   The same message, byte for byte, as core/quant.h's zq_quantize on the host (its format: the
//   nblocks fp32 scales, then the codes; int4 two per byte, element 2k low nibble), and the same
//   bits for dequantize (rounded into dst's dtype) and dequantize-and-add (acc += q * scale in
//   fp32). The arithmetic is quant.h's own ZC_HD functions (zq_block_scale's rule, zq_code,
//   zq_get), one IEEE operation at a time: the product and the sum of the add are explicitly
//   rounded intrinsics on the device, so nvcc never fuses them into an FMA (its default).
//   How the work is cut, so nothing races: the scales, one warp per quantization block (amax is a
//   maximum, exact in any order; a non-finite element makes the scale NaN as on the host); then
//   the codes, one thread per code byte (an int4 byte's two nibbles may belong to two blocks when
//   the block is odd: the one thread writes both). Everything is enqueued on the stream given and
//   ordered after what it already holds; n == 0 enqueues nothing. test_gpu_quant checks the bytes
//   against core/quant.h on the CUDA emulator (zeros, a huge value in a block, Inf/NaN, subnormal
//   scales, odd and partial blocks, the three dtypes).
// No global state. Included by train_gpt.cu after gpu/common.cuh.
#ifndef GPU_QUANT_CUH
#define GPU_QUANT_CUH
#include "core/quant.h"
#include "gpu/common.cuh"

#if defined(__CUDA_ARCH__)
#define GQ_MUL(a, b) __fmul_rn((a), (b))
#define GQ_ADD(a, b) __fadd_rn((a), (b))
#else
#define GQ_MUL(a, b) ((a) * (b))
#define GQ_ADD(a, b) ((a) + (b))
#endif

// scales[b] for the nb blocks of src: one warp per block (blockDim.x a multiple of 32).
static __global__ void zq_scale_kernel(float *scales, const void *src, size_t n, int dtype, size_t block, size_t nb,
                                       int qmax) {
    const unsigned lane = threadIdx.x % 32;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    for (size_t b = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; b < nb; b += warps) {
        size_t at = b * block, m = at + block <= n ? block : n - at;
        float amax = 0.0f;
        int bad = 0;
        for (size_t i = lane; i < m; i += 32) {
            float x = zc_load(src, at + i, dtype);
            bad |= !zc_isfinite_f32(x);
            float a = fabsf(x);
            amax = a > amax ? a : amax;
        }
        for (int o = 16; o > 0; o >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, amax, o);
            amax = other > amax ? other : amax;
            bad |= __shfl_xor_sync(0xffffffffu, bad, o);
        }
        if (lane == 0) scales[b] = bad ? NAN : amax / (float)qmax;
    }
}
// The code bytes: one thread per byte (int8: element i; int4: elements 2k and 2k+1).
static __global__ void zq_code_kernel(uint8_t *codes, const float *scales, const void *src, size_t n, int dtype,
                                      size_t block, int bits, int qmax, size_t nbytes) {
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < nbytes; k += (size_t)gridDim.x * blockDim.x) {
        if (bits == 8) {
            codes[k] = (uint8_t)(int8_t)zq_code(zc_load(src, k, dtype), scales[k / block], qmax);
            continue;
        }
        size_t i = 2 * k;
        int lo = zq_code(zc_load(src, i, dtype), scales[i / block], qmax);
        int hi = i + 1 < n ? zq_code(zc_load(src, i + 1, dtype), scales[(i + 1) / block], qmax) : 0;
        codes[k] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
    }
}
// dst (dtype) <- the message's values; with acc non-NULL, acc (fp32) += them instead.
static __global__ void zq_dequant_kernel(void *dst, int dtype, float *acc, const float *scales, const uint8_t *codes,
                                         size_t n, size_t block, int bits) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = GQ_MUL((float)zq_get(codes, i, bits), scales[i / block]);
        if (acc) acc[i] = GQ_ADD(acc[i], x);
        else zc_store(dst, i, x, dtype);
    }
}
// dst (dst_dtype) <- src (src_dtype): widened exactly or rounded to nearest even.
static __global__ void zq_convert_kernel(void *dst, int dst_dtype, const void *src, int src_dtype, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        zc_store(dst, i, zc_load(src, i, src_dtype), dst_dtype);
}

// The launches. msg is zq_bytes(n, block, bits) bytes of device memory, 4-byte aligned.
static void gq_quantize(const Gpu *gpu, cudaStream_t s, void *msg, const void *src, size_t n, int dtype, size_t block,
                        int bits) {
    if (n == 0) return;
    size_t nb = zq_nblocks(n, block), nbytes = zq_code_bytes(n, bits);
    float *scales = zq_scales(msg);
    zq_scale_kernel<<<grid_for(gpu, nb * 32, 256), 256, 0, s>>>(scales, src, n, dtype, block, nb, zq_qmax(bits));
    LAUNCH_CHECK();
    zq_code_kernel<<<grid_for(gpu, nbytes, 256), 256, 0, s>>>(zq_codes(msg, n, block), scales, src, n, dtype, block, bits,
                                                              zq_qmax(bits), nbytes);
    LAUNCH_CHECK();
}
static void gq_dequantize_into(const Gpu *gpu, cudaStream_t s, void *dst, int dtype, float *acc, const void *msg, size_t n,
                               size_t block, int bits) {
    if (n == 0) return;
    const float *scales = (const float *)msg;
    const uint8_t *codes = (const uint8_t *)msg + zq_nblocks(n, block) * sizeof(float);
    zq_dequant_kernel<<<grid_for(gpu, n, 256), 256, 0, s>>>(dst, dtype, acc, scales, codes, n, block, bits);
    LAUNCH_CHECK();
}
static void gq_dequantize(const Gpu *gpu, cudaStream_t s, void *dst, int dtype, const void *msg, size_t n, size_t block,
                          int bits) {
    gq_dequantize_into(gpu, s, dst, dtype, NULL, msg, n, block, bits);
}
static void gq_dequantize_add(const Gpu *gpu, cudaStream_t s, float *acc, const void *msg, size_t n, size_t block, int bits) {
    gq_dequantize_into(gpu, s, NULL, ZC_F32, acc, msg, n, block, bits);
}
static void gq_convert(const Gpu *gpu, cudaStream_t s, void *dst, int dst_dtype, const void *src, int src_dtype, size_t n) {
    if (n == 0) return;
    zq_convert_kernel<<<grid_for(gpu, n, 256), 256, 0, s>>>(dst, dst_dtype, src, src_dtype, n);
    LAUNCH_CHECK();
}

#endif // GPU_QUANT_CUH
