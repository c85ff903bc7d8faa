// cuda_fp16.h, the emulator's (see cuda_runtime.h): __half as its bits; the conversions are the
// compiler's _Float16 (libgcc's round to nearest even), independent of mixed_precision.h.
#pragma once
#include "cuda_runtime.h"
struct __half { unsigned short x; };
static inline __half __float2half_rn(float f) {
    _Float16 h = (_Float16)f;
    __half r;
    memcpy(&r.x, &h, 2);
    if ((r.x & 0x7FFFu) > 0x7C00u) r.x = 0x7FFF; // CUDA's canonical NaN
    return r;
}
static inline float __half2float(__half h) {
    _Float16 v;
    memcpy(&v, &h.x, 2);
    return (float)v;
}
