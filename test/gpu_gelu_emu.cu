// gpu/kernels.cuh's GELU forward on the CUDA emulator, built as the default and with
// -DGPU_GELU_FAST (test_gpu_gelu.sh): every finite bf16 value from -16 to 16, and the extremes
// (+-1e30, +-inf, NaN), through gelu_forward_kernel<VEC> and <1> (the trainer's two paths, which
// must agree bit for bit), dumped as raw bf16 pairs (input, output) for test/gelu_check.py.
// Usage: gpu_gelu_emu OUT.bin
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <vector>
#include "gpu/floatx.cuh"
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "gpu/common.cuh"
#include "gpu/profile.cuh"
#include "gpu/kernels.cuh"

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: gpu_gelu_emu OUT.bin\n"); return 2; }
    std::vector<uint16_t> in;
    for (uint32_t b = 0; b < 65536; b++) {
        uint32_t f32 = b << 16;
        float x;
        memcpy(&x, &f32, 4);
        if (fabsf(x) <= 16.0f) in.push_back((uint16_t)b);
    }
    const float extremes[] = {1e30f, -1e30f, INFINITY, -INFINITY, NAN};
    for (float x : extremes) { uint32_t f32; memcpy(&f32, &x, 4); in.push_back((uint16_t)(f32 >> 16)); }
    while (in.size() % VEC) in.push_back(0);
    size_t n = in.size();
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s)); // the emulator takes work on named streams only
    floatX *x, *y1, *y2;
    CUDA_CHECK(cudaMalloc((void **)&x, n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc((void **)&y1, n * sizeof(floatX)));
    CUDA_CHECK(cudaMalloc((void **)&y2, n * sizeof(floatX)));
    CUDA_CHECK(cudaMemcpy(x, in.data(), n * sizeof(floatX), cudaMemcpyHostToDevice));
    void (*packed)(floatX *, const floatX *, size_t) = gelu_forward_kernel<VEC>, (*scalar)(floatX *, const floatX *, size_t) = gelu_forward_kernel<1>;
    packed<<<64, 256, 0, s>>>(y1, x, n);
    LAUNCH_CHECK();
    scalar<<<64, 256, 0, s>>>(y2, x, n);
    LAUNCH_CHECK();
    CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<uint16_t> o1(n), o2(n);
    CUDA_CHECK(cudaMemcpy(o1.data(), y1, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(o2.data(), y2, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    if (memcmp(o1.data(), o2.data(), n * 2)) { fprintf(stderr, "gpu_gelu_emu: the packed and scalar kernels disagree\n"); return 1; }
    FILE *f = fopen(argv[1], "wb");
    if (!f) { fprintf(stderr, "gpu_gelu_emu: cannot write %s\n", argv[1]); return 1; }
    fwrite(in.data(), 2, n, f);
    fwrite(o1.data(), 2, n, f);
    fclose(f);
#if defined(GPU_GELU_FAST)
    printf("gpu_gelu_emu: %zu inputs (GPU_GELU_FAST)\n", n);
#else
    printf("gpu_gelu_emu: %zu inputs (default)\n", n);
#endif
    return 0;
}
