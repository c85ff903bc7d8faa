// gpu/floatx.cuh: floatX, the element type of parameters, gradients and activations in a GPU
// build, chosen by GPU_PRECISION_FP32 / _FP16 (else bf16), with its cuBLASLt type (FLOATX_CUDA)
// and zero.h's dtype for it (FLOATX_DTYPE, a ZC_* name from mixed_precision.h, used only where
// that is included). run/config.h reads the same GPU_PRECISION_* define; train_gpt.cu's
// static_assert keeps the two in step. GPT2_FLOATX = floatX: core/gpt2.h's views and activations
// are built on it, so this comes before core/gpt2.h. The trainer and the GPU tests include it.
#ifndef GPU_FLOATX_CUH
#define GPU_FLOATX_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h> // CUDA_R_* (the CUDA emulator's too)
#if defined(GPU_PRECISION_FP32)
typedef float floatX;
#define FLOATX_CUDA CUDA_R_32F
#define FLOATX_DTYPE ZC_F32
#elif defined(GPU_PRECISION_FP16)
typedef __half floatX;
#define FLOATX_CUDA CUDA_R_16F
#define FLOATX_DTYPE ZC_FP16
#else
typedef __nv_bfloat16 floatX;
#define FLOATX_CUDA CUDA_R_16BF
#define FLOATX_DTYPE ZC_BF16
#endif
#define GPT2_FLOATX floatX
#endif // GPU_FLOATX_CUH
