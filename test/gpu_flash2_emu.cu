// gpu/flash2.cuh's attention on the CUDA emulator, built once per variant (test_gpu_flash2.sh):
// the default, -DF2_QWARPS=8, -DF2_DS_STORE (dQ from the dK/dV kernel's dS^T tiles) and both.
// For each shape: random qkv and dout (bf16), the trainer's launches (flash2_forward,
// flash_backward_preprocess_kernel's D, flash2_backward), and a dump of inputs and outputs:
// test/flash2_check.py compares each variant with an fp64 numpy reference written from the
// contract (softmax(scale Q K^T, causal) V and its gradients), and the script compares the
// variants' outputs with the default's bit for bit. dqkv and the dS^T tiles start as NaNs:
// every element must be written, and every tile element the dQ kernel reads.
// Head sizes 64 and 128 (flash2_forward and flash2_backward pick the kernels' instance from C / NH).
// Usage: gpu_flash2_emu OUT.bin (records: B, T, NH, HS; qkv, dout, out, lse, dqkv as raw bits).
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <nccl.h>
#include <mma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include "gpu/floatx.cuh"
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "gpu/layout.h"
#include "gpu/common.cuh"
#include "gpu/profile.cuh"
#include "gpu/kernels.cuh"
#include "gpu/flash_attention.cuh"
#include "gpu/flash2.cuh"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float sym(float a) { // xorshift64*, uniform in (-a, a)
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return (float)((2.0 * (((rng * 2685821657736338717ull) >> 11) + 0.5) / 9007199254740992.0 - 1.0) * a);
}
static FILE *out;
static cudaStream_t stream; // the emulator takes work on named streams only
template <class X> static void put(const X *d, size_t n) {
    std::vector<X> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(X), cudaMemcpyDeviceToHost));
    fwrite(h.data(), sizeof(X), n, out);
}
static floatX *dev_rand(size_t n, float a) {
    std::vector<floatX> h(n);
    for (size_t i = 0; i < n; i++) zc_store(h.data(), i, sym(a), FLOATX_DTYPE);
    floatX *d;
    CUDA_CHECK(cudaMalloc((void **)&d, n * sizeof(floatX)));
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    return d;
}

static void attention_case(int B, int T, int NH, int HS) {
    int C = NH * HS;
    size_t n = (size_t)B * T * C, rows = (size_t)B * NH * T, nds = f2_ds_elems(B, NH, T);
    floatX *qkv = dev_rand(3 * n, 2.0f), *dout = dev_rand(n, 1.0f), *y, *dqkv, *ds = NULL;
    float *lse, *D;
    CUDA_CHECK(cudaMalloc((void **)&y, n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc((void **)&dqkv, 3 * n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc((void **)&lse, rows * sizeof(float)));
    CUDA_CHECK(cudaMalloc((void **)&D, rows * sizeof(float)));
    CUDA_CHECK(cudaMemset(dqkv, 0xFF, 3 * n * sizeof(floatX)));
    if (nds) {
        CUDA_CHECK(cudaMalloc((void **)&ds, nds * sizeof(floatX)));
        CUDA_CHECK(cudaMemset(ds, 0xFF, nds * sizeof(floatX)));
    }
    flash2_forward(y, lse, qkv, B, T, C, NH, stream);
    flash_backward_preprocess_kernel<<<ceil_div(rows, 256), 256, 0, stream>>>(D, dout, y, B, T, C, NH);
    LAUNCH_CHECK();
    flash2_backward(dqkv, lse, D, dout, qkv, ds, B, T, C, NH, stream);
    CUDA_CHECK(cudaDeviceSynchronize());
    int hdr[4] = {B, T, NH, HS};
    fwrite(hdr, sizeof(int), 4, out);
    put(qkv, 3 * n); put(dout, n); put(y, n); put(lse, rows); put(dqkv, 3 * n);
    cudaFree(qkv); cudaFree(dout); cudaFree(y); cudaFree(dqkv); cudaFree(lse); cudaFree(D);
    if (ds) cudaFree(ds);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gpu_flash2_emu OUT.bin\n"); return 2; }
    CUDA_CHECK(cudaStreamCreate(&stream));
    out = fopen(argv[1], "wb");
    if (!out) { fprintf(stderr, "gpu_flash2_emu: cannot write %s\n", argv[1]); return 1; }
    // a partial last tile (T % 64 != 0, and T % 128 for the 8-warp blocks), several heads and
    // batch rows (the tiles' per-head offsets), one tile alone, a tile and a few rows
    attention_case(2, 130, 2, 64);
    attention_case(1, 64, 1, 64);
    attention_case(1, 70, 3, 64);
    // head size 128 (one tile stage, refilled once): two heads, a tile and a few rows
    attention_case(1, 70, 2, 128);
    fclose(out);
    printf("gpu_flash2_emu: 4 cases written (F2_QWARPS=%d, dS^T tiles %s)\n", F2_QWARPS,
           f2_ds_elems(1, 1, 1) ? "on" : "off");
    return 0;
}
