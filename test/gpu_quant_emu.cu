// gpu/quant.cuh against core/quant.h (test_gpu_quant.sh): on the CUDA emulator, for every case the
// device's message is the host's byte for byte, and its dequantized values (into f32, bf16, fp16)
// and dequantize-and-add sums are the host's bit for bit. Cases: int8 and int4; blocks 1, 7, 64,
// 255, 2048; lengths with a partial last block, odd lengths (int4's last half byte), n = 1; data
// of mixed magnitudes with a block of zeros, a block with one huge value, a block holding an Inf
// and one a NaN (scale NaN), a block of subnormals (a subnormal scale), and the three dtypes.
// Prints one line per group and "gpu_quant: N cases, 0 mismatches"; exits 1 on any mismatch.
// Compiled like train_gpt.cu: against test/cuda_emu/, launches rewritten by the Makefile.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>
#include "mixed_precision.h"
#include "gpu/quant.cuh"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double uniform() { // xorshift64*, in (0, 1)
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return ((rng * 2685821657736338717ull >> 11) + 0.5) / 9007199254740992.0;
}
static float normal() { return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform())); }

// n values (fp32) with the edge cases placed relative to the block.
static std::vector<float> make_data(size_t n, size_t block, int special) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = normal() * powf(10.0f, (float)((i / block) % 7) - 3.0f);
    size_t nb = zq_nblocks(n, block);
    if (special && nb >= 6) {
        for (size_t i = 0; i < block; i++) x[i] = 0.0f;                          // block 0: zeros
        x[block + block / 2] = 3.0e4f;                                         // block 1: one huge value
        for (size_t i = 2 * block; i < 3 * block; i++) x[i] = normal() * 1e-40f; // block 2: subnormals
        x[3 * block] = INFINITY;                                               // block 3: an Inf
        x[4 * block + block - 1] = NAN;                                        // block 4: a NaN
        x[5 * block] = -x[5 * block] * 1e3f;                                   // block 5: a negative outlier
    }
    return x;
}

static int mismatches = 0, cases = 0;
static void check(const char *what, const void *a, const void *b, size_t bytes, size_t n, size_t block, int bits, int dtype) {
    if (memcmp(a, b, bytes) == 0) return;
    size_t k = 0;
    while (((const uint8_t *)a)[k] == ((const uint8_t *)b)[k]) k++;
    if (mismatches < 10)
        fprintf(stderr, "MISMATCH %s: n %zu block %zu int%d dtype %d: byte %zu of %zu: host %02x device %02x\n", what, n,
                block, bits, dtype, k, bytes, ((const uint8_t *)a)[k], ((const uint8_t *)b)[k]);
    mismatches++;
}

static void one_case(const Gpu *gpu, size_t n, size_t block, int bits, int dtype, int special) {
    cases++;
    cudaStream_t s = gpu->compute;
    size_t es = zc_dtype_size(dtype), mb = zq_bytes(n, block, bits);
    std::vector<float> x32 = make_data(n, block, special);
    std::vector<uint8_t> src(n * es + 1);
    for (size_t i = 0; i < n; i++) zc_store(src.data(), i, x32[i], dtype);
    // the host's
    std::vector<uint8_t> msg(mb + 1), out(n * 4 + 1);
    std::vector<float> acc(n + 1);
    zq_quantize(msg.data(), src.data(), n, dtype, block, bits);
    // the device's
    void *d_src, *d_msg, *d_out;
    float *d_acc;
    CUDA_CHECK(cudaMalloc(&d_src, n * es + 1));
    CUDA_CHECK(cudaMalloc(&d_msg, mb + 1));
    CUDA_CHECK(cudaMalloc(&d_out, n * 4 + 1));
    CUDA_CHECK(cudaMalloc((void **)&d_acc, n * 4 + 4));
    CUDA_CHECK(cudaMemcpy(d_src, src.data(), n * es, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(d_msg, 0xA5, mb)); // every byte must be written
    gq_quantize(gpu, s, d_msg, d_src, n, dtype, block, bits);
    std::vector<uint8_t> dmsg(mb + 1);
    CUDA_CHECK(cudaMemcpy(dmsg.data(), d_msg, mb, cudaMemcpyDeviceToHost));
    check("message", msg.data(), dmsg.data(), mb, n, block, bits, dtype);
    // dequantized into each dtype, from the host's message
    CUDA_CHECK(cudaMemcpy(d_msg, msg.data(), mb, cudaMemcpyHostToDevice));
    const int dts[3] = {ZC_F32, ZC_BF16, ZC_FP16};
    for (int t = 0; t < 3; t++) {
        size_t ob = n * zc_dtype_size(dts[t]);
        zq_dequantize(out.data(), dts[t], msg.data(), n, block, bits);
        gq_dequantize(gpu, s, d_out, dts[t], d_msg, n, block, bits);
        std::vector<uint8_t> dout(ob + 1);
        CUDA_CHECK(cudaMemcpy(dout.data(), d_out, ob, cudaMemcpyDeviceToHost));
        check("dequantize", out.data(), dout.data(), ob, n, block, bits, dts[t]);
    }
    // dequantize-and-add onto an fp32 accumulator holding other values
    for (size_t i = 0; i < n; i++) acc[i] = normal();
    CUDA_CHECK(cudaMemcpy(d_acc, acc.data(), n * 4, cudaMemcpyHostToDevice));
    zq_dequantize_add(acc.data(), msg.data(), n, block, bits);
    gq_dequantize_add(gpu, s, d_acc, d_msg, n, block, bits);
    std::vector<float> dacc(n + 1);
    CUDA_CHECK(cudaMemcpy(dacc.data(), d_acc, n * 4, cudaMemcpyDeviceToHost));
    check("dequantize_add", acc.data(), dacc.data(), n * 4, n, block, bits, dtype);
    // convert: src (dtype) -> fp32 -> each dtype
    for (int t = 0; t < 3; t++) {
        size_t ob = n * zc_dtype_size(dts[t]);
        std::vector<uint8_t> h(ob + 1), dh(ob + 1);
        for (size_t i = 0; i < n; i++) zc_store(h.data(), i, zc_load(src.data(), i, dtype), dts[t]);
        gq_convert(gpu, s, d_out, dts[t], d_src, dtype, n);
        CUDA_CHECK(cudaMemcpy(dh.data(), d_out, ob, cudaMemcpyDeviceToHost));
        check("convert", h.data(), dh.data(), ob, n, block, bits, dts[t]);
    }
    CUDA_CHECK(cudaFree(d_src)); CUDA_CHECK(cudaFree(d_msg)); CUDA_CHECK(cudaFree(d_out)); CUDA_CHECK(cudaFree(d_acc));
}

int main(void) {
    Gpu gpu;
    memset(&gpu, 0, sizeof(gpu));
    CUDA_CHECK(cudaGetDeviceProperties(&gpu.prop, 0));
    gpu.sm_count = gpu.prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreate(&gpu.compute));
    const size_t blocks[] = {1, 7, 64, 255, 2048};
    const int dtypes[] = {ZC_F32, ZC_BF16, ZC_FP16};
    for (int bits = 4; bits <= 8; bits += 4)
        for (size_t b : blocks) {
            int before = mismatches, c0 = cases;
            for (int dtype : dtypes) {
                const size_t ns[] = {1, b, 6 * b + 1, 9 * b + b / 2 + 1, b == 1 ? 4097 : 8 * b + 3};
                for (size_t n : ns) one_case(&gpu, n, b, bits, dtype, 1);
            }
            printf("int%d block %4zu: %d cases, %d mismatches\n", bits, b, cases - c0, mismatches - before);
        }
    printf("gpu_quant: %d cases, %d mismatches\n", cases, mismatches);
    return mismatches ? 1 : 0;
}
