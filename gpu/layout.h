// gpu/layout.h: how the GPU trainer stores its activations, so that its gpt2_build allocates and
// the planner predicts the same bytes (gpu_plan_backend). Plain C: no CUDA in it.
//
// Contract
//   - Attention: the flash kernels (16-bit builds, through tensor cores, whose tiles need a head
//     size that is a multiple of 16, at most 64: every GPT-2 size) keep no (T,T) probabilities:
//     A_ATT holds each row's log-sum-exp instead, (L,B,NH,T) fp32, from which the backward
//     recomputes them. Otherwise (the fp32 build, other head sizes) it is the matmul path with
//     the probabilities stored, as on the CPU (gpu_flash_attention decides).
//   - The GPU trainer keeps every layer's activations, in its element type (elem: 2 for bf16
//     and fp16, 4 for fp32) but for the fp32 statistics and losses, logits included (its
//     classifier reads 16-bit logits and computes the softmax and the loss in fp32), and A_ATT as
//     its attention needs it. Each tensor starts on a 256-byte boundary, so that cuBLASLt's
//     fastest kernels (16-byte operands) take any shape's tensors wherever the block's arithmetic
//     would otherwise leave them (the fp32 statistics of an odd B*T, say). It has no workspace:
//     its kernels read 16 bits directly. gpu_activation_bytes() is exactly what it asks of
//     cudaMalloc.
// No global state; C11 and CUDA C++.
#ifndef GPU_LAYOUT_H
#define GPU_LAYOUT_H

#include "core/gpt2.h"
#include "run/planner.h"

#define GPU_FLASH_MAX_HS 64
static inline int gpu_flash_attention(int channels, int num_heads, size_t elem) {
    int hs = channels / num_heads;
    return elem == 2 && hs % 16 == 0 && hs <= GPU_FLASH_MAX_HS;
}

// offset (may be NULL): where each tensor starts, for gpt2_activations_wire_at.
#define GPU_ACT_ALIGN 256
static inline size_t gpu_activation_bytes(const GPT2Config *c, int B, int T, size_t elem, size_t offset[NUM_ACTIVATIONS]) {
    size_t n[NUM_ACTIVATIONS];
    int fp32[NUM_ACTIVATIONS];
    gpt2_activation_numels(c, B, T, n);
    for (int i = 0; i < NUM_ACTIVATIONS; i++) fp32[i] = gpt2_activation_is_fp32(i);
    if (gpu_flash_attention(c->channels, c->num_heads, elem)) {
        n[A_ATT] = (size_t)c->num_layers * B * c->num_heads * T;
        fp32[A_ATT] = 1;
    }
    return gpt2_activation_pack(n, fp32, elem, GPU_ACT_ALIGN, offset);
}

// --- for the planner ---

// Recompute (a plan): residual3 (every layer's output) in full, one layer of the other per-layer
// tensors, each at its element size.
static inline double gpu_plan_activations(const GPT2Config *c, int B, int T, int dtype, int recompute) {
    size_t elem = dtype == ZC_F32 ? 4 : 2;
    if (!recompute) return (double)gpu_activation_bytes(c, B, T, elem, NULL);
    size_t n[NUM_ACTIVATIONS], L = (size_t)c->num_layers;
    gpt2_activation_numels(c, B, T, n);
    double total = 0.0;
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        size_t k = gpt2_activation_is_layered(i) && i != A_RESIDUAL3 ? n[i] / L : n[i];
        total += (double)k * (gpt2_activation_is_fp32(i) ? 4.0 : (double)elem);
    }
    return total;
}
static inline double gpu_plan_workspace(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads) {
    (void)lay; (void)c; (void)B; (void)T; (void)dtype; (void)threads;
    return 0.0; // the GPU kernels compute on the 16-bit storage itself
}
// default_precision: the build's (the GPU trainer's kernels are compiled for one).
static inline PlanBackend gpu_plan_backend(int default_precision) {
    PlanBackend b = {gpu_plan_activations, gpu_plan_workspace,
                     {"4 B x its list, aligned", "2 B x its list (stats 4)", "2 B x its list (stats 4)"},
                     {"workspace (none on the GPU)", "workspace (none on the GPU)", "workspace (none on the GPU)"},
                     "16-bit kernels", default_precision, 0};
    return b;
}

#endif // GPU_LAYOUT_H
