// gpu/layout.h: how the GPU trainer stores its activations, so that its gpt2_build allocates and
// the planner predicts the same bytes (gpu_plan_backend), and what a build of it runs
// (gpu_config_build). Plain C: no CUDA in it.
//
// Contract
//   - Attention: the flash kernels (16-bit builds, through tensor cores, whose tiles need a head
//     size that is a multiple of 16, at most 64: every GPT-2 size; 128 too in ATTENTION=flash2
//     builds) keep no (T,T) probabilities:
//     A_ATT holds each row's log-sum-exp instead, (L,B,NH,T) fp32, from which the backward
//     recomputes them. Otherwise (the fp32 build, other head sizes) it is the matmul path with
//     the probabilities stored, as on the CPU (gpu_flash_attention decides).
//   - The GPU trainer keeps its activations in the generic layout of its recompute
//     (gpt2_recompute_slots: without recompute every layer's), in its element type (elem: 2 for
//     bf16 and fp16, 4 for fp32) but for the fp32 statistics and losses, logits included (its
//     classifier reads 16-bit logits and computes the softmax and the loss in fp32), and A_ATT as
//     its attention needs it. Each tensor starts on a 256-byte boundary, so that cuBLASLt's
//     fastest kernels (16-byte operands) take any shape's tensors wherever the block's arithmetic
//     would otherwise leave them (the fp32 statistics of an odd B*T, say). It has no workspace:
//     its kernels read 16 bits directly. gpu_activation_bytes() is exactly what it asks of
//     cudaMalloc.
//   - cpu_checkpointing (full recompute, r.host): the device holds two of the checkpoints
//     (segment outputs) in residual3, checkpoint c in slot c % 2; those the forward overwrites
//     there before the backward needs them, all but the last two, go to pinned host memory
//     (gpu_host_checkpoints) and come back ahead of their segment's recompute.
// No global state; C11 and CUDA C++.
#ifndef GPU_LAYOUT_H
#define GPU_LAYOUT_H

#include "core/gpt2.h"
#include "run/planner.h"

#define GPU_FLASH_MAX_HS 64
// A build made with `make train_gpt ATTENTION=flash2` (-DGPU_ATTENTION_FLASH2) runs head sizes 64
// and 128 through gpu/flash2.cuh's kernels and the others up to 64 through the flash kernels
// (larger ones: the matmul path): the same log-sum-exp
// rows in A_ATT either way, so this layout does not change (its backward's (B,NH,T) fp32 row
// scratch lies outside the plan, in train_gpt.cu's bytes_scratch).
// A build made with `make train_gpt ATTENTION=matmul` (-DGPU_ATTENTION_MATMUL) takes the matmul
// path at every head size: cuBLASLt's batched products and the softmax kernels, the (T,T)
// probabilities stored per layer (the planner counts them the same way).
static inline int gpu_flash_attention(int channels, int num_heads, size_t elem) {
#if defined(GPU_ATTENTION_MATMUL)
    (void)channels; (void)num_heads; (void)elem;
    return 0;
#else
    int hs = channels / num_heads;
#if defined(GPU_ATTENTION_FLASH2)
    if (elem == 2 && hs == 128) return 1;
#endif
    return elem == 2 && hs % 16 == 0 && hs <= GPU_FLASH_MAX_HS;
#endif
}

// Checkpoints in host memory (cpu_checkpointing): all but the last two of full's.
static inline int gpu_host_checkpoints(const GPT2Config *c, GPT2Recompute r) {
    int n = gpt2_checkpoints(r, c->num_layers) - 2;
    return r.mode == RECOMPUTE_FULL && r.host && n > 0 ? n : 0;
}
// The device's slot of per-layer tensor i of layer l: the generic layout's, but for the
// checkpoints with cpu_checkpointing (two slots, then residual3's scratch).
static inline int gpu_activation_slot(const GPT2Config *c, GPT2Recompute r, int i, int l) {
    int L = c->num_layers, s = gpt2_recompute_slot(r, L, i, l), ncp = gpt2_checkpoints(r, L);
    if (r.mode != RECOMPUTE_FULL || !r.host || i != A_RESIDUAL3) return s;
    return gpt2_segment_end(r, L, l) ? s % 2 : s - ncp + (ncp < 2 ? ncp : 2);
}
static inline void gpu_activation_slots(const GPT2Config *c, GPT2Recompute r, int slots[NUM_ACTIVATIONS]) {
    int ncp = gpt2_checkpoints(r, c->num_layers);
    gpt2_recompute_slots(r, c->num_layers, slots);
    if (r.mode == RECOMPUTE_FULL && r.host) slots[A_RESIDUAL3] -= ncp - (ncp < 2 ? ncp : 2);
}

// offset (may be NULL): where each tensor starts, for gpt2_activations_wire_at.
#define GPU_ACT_ALIGN 256
static inline size_t gpu_activation_bytes(const GPT2Config *c, int B, int T, size_t elem, GPT2Recompute r,
                                          size_t offset[NUM_ACTIVATIONS]) {
    size_t n[NUM_ACTIVATIONS];
    int fp32[NUM_ACTIVATIONS], slots[NUM_ACTIVATIONS];
    gpt2_activation_numels(c, B, T, n);
    gpu_activation_slots(c, r, slots);
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        fp32[i] = gpt2_activation_is_fp32(i);
        if (gpt2_activation_is_layered(i)) n[i] = n[i] / c->num_layers * (size_t)slots[i];
    }
    if (gpu_flash_attention(c->channels, c->num_heads, elem)) {
        n[A_ATT] = (size_t)slots[A_ATT] * B * c->num_heads * T;
        fp32[A_ATT] = 1;
    }
    return gpt2_activation_pack(n, fp32, elem, GPU_ACT_ALIGN, offset);
}
// Bytes of pinned host memory for the checkpoints (cpu_checkpointing).
static inline size_t gpu_host_checkpoint_bytes(const GPT2Config *c, int B, int T, size_t elem, GPT2Recompute r) {
    return (size_t)gpu_host_checkpoints(c, r) * B * T * c->channels * elem;
}

// --- for the planner ---

static inline double gpu_plan_activations(const GPT2Config *c, int B, int T, int dtype, GPT2Recompute r, double *host) {
    size_t elem = dtype == ZC_F32 ? 4 : 2;
    *host = (double)gpu_host_checkpoint_bytes(c, B, T, elem, r);
    return (double)gpu_activation_bytes(c, B, T, elem, r, NULL);
}
static inline double gpu_plan_workspace(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads) {
    (void)lay; (void)c; (void)B; (void)T; (void)dtype; (void)threads;
    return 0.0; // the GPU kernels compute on the 16-bit storage itself
}
// What a build of the GPU trainer runs (run/config.h's ConfigBuild): the one precision its kernels
// were compiled for (dtype), its kernel profiler, no per-tensor reductions (LAMB) yet, and compute
// in device memory (aio.use_gds: NVMe goes through host buffers). train_gpt.cu's training runs and
// --plan, and the planner page's train_gpt, take it from here.
static inline ConfigBuild gpu_config_build(int dtype) {
    static const char *const refusal[ZC_NUM_DTYPES][ZC_NUM_DTYPES] = { // [the build's][the one asked for]
        {NULL, "this binary was built for fp32 (make train_gpt PRECISION=BF16)",
         "this binary was built for fp32 (make train_gpt PRECISION=FP16)"},
        {"this binary was built for bf16 (make train_gpt PRECISION=FP32)", NULL,
         "this binary was built for bf16 (make train_gpt PRECISION=FP16)"},
        {"this binary was built for fp16 (make train_gpt PRECISION=FP32)",
         "this binary was built for fp16 (make train_gpt PRECISION=BF16)", NULL}};
    static const char *const others[ZC_NUM_DTYPES] = {"bf16, fp16: make train_gpt PRECISION=BF16 or FP16",
                                                      "fp16, fp32: make train_gpt PRECISION=FP16 or FP32",
                                                      "bf16, fp32: make train_gpt PRECISION=BF16 or FP32"};
    ConfigBuild b = {1u << dtype, dtype, {refusal[dtype][0], refusal[dtype][1], refusal[dtype][2]}, others[dtype], 1, 0, 0};
    return b;
}
// default_precision: the build's (the GPU trainer's kernels are compiled for one).
static inline PlanBackend gpu_plan_backend(int default_precision) {
    PlanBackend b = {gpu_plan_activations, gpu_plan_workspace,
                     {"4 B x its list, aligned", "2 B x its list (stats 4)", "2 B x its list (stats 4)"},
                     {"4 B x kept + scratch, aligned", "2 B x kept + scratch", "2 B x kept + scratch"},
                     {"workspace (none on the GPU)", "workspace (none on the GPU)", "workspace (none on the GPU)"},
                     "16-bit kernels", default_precision, 0};
    return b;
}

#endif // GPU_LAYOUT_H
