// cuda_bf16.h, the emulator's (see cuda_runtime.h): __nv_bfloat16 as its bits, with CUDA's
// conversions. Written independently of mixed_precision.h, so a disagreement between the GPU
// trainer's rounding and the CPU's shows up instead of being shared.
#pragma once
#include "cuda_runtime.h"
struct __nv_bfloat16 { unsigned short x; };
// Round to nearest even; NaN becomes the canonical 0x7FFF, as CUDA's __float2bfloat16_rn.
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 b;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) b.x = 0x7FFF;
    else b.x = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return b;
}
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
