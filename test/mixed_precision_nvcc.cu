// Compile-only check that mixed_precision.h is valid CUDA C++ with no warnings: the ZC_HD
// conversions in a kernel (device) and in host code, and the host-only parts from a .cu file.
// Built by test/test_mixed_precision.sh when nvcc exists; it needs no GPU.
#include "mixed_precision.h"

__global__ void roundtrip_kernel(const float *x, bf16_t *b, fp16_t *h, float *y, int *finite, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    b[i] = f32_to_bf16(x[i]);
    h[i] = f32_to_fp16(x[i]);
    y[i] = bf16_to_f32(b[i]) + fp16_to_f32(h[i]);
    finite[i] = zc_isfinite_f32(y[i]);
}

int host_side(float *x, bf16_t *b, fp16_t *h, size_t n) {
    f32_to_bf16_array(b, x, n);
    f32_to_fp16_array(h, x, n);
    bf16_to_f32_array(x, b, n);
    fp16_to_f32_array(x, h, n);
    LossScaler s;
    if (loss_scaler_init(&s, 0.0f, 16, 1000, 2, 1.0f, 0) != 0) return -1;
    int overflow = has_inf_or_nan_f32(x, n) | has_inf_or_nan_bf16(b, n) | has_inf_or_nan_fp16(h, n);
    int r = loss_scaler_update(&s, overflow);
    if (r == ZC_STEP_ABORT) return (int)loss_scaler_abort_advice()[0];
    return r + (int)f32_to_bf16(1.0f) + zc_isfinite_f32(fp16_to_f32(f32_to_fp16(2.0f))) + (int)zc_mp_simd_path()[0];
}
