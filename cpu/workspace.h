// cpu/workspace.h: how the CPU trainer stores activations and what working memory it needs
// beyond the model states, so that its gpt2_build allocates and the planner predicts the same
// bytes (cpu_plan_backend).
//
// Contract
//   - Activations. The CPU kernels compute in fp32. An fp32 run keeps the activations of
//     core/gpt2.h's list in fp32 in the generic layout of its recompute (gpt2_recompute_slots:
//     without recompute every layer's, packed back to back). A 16-bit run (bf16, fp16) computes
//     its layers in fp32 slots and keeps in 16 bits, from the forward to the backward, the
//     per-layer tensors its recompute keeps (gpt2_recompute_keeps) but the fp32 LayerNorm
//     statistics: without recompute every layer's nine tensors, with selective each layer's
//     qkv, residual2, fch and residual3, with full each segment's output. Its fp32 slots: without
//     recompute two layers' tensors (the layer and its input, the previous layer's output) and
//     every layer's statistics; with recompute K layers' tensors and statistics (selective: K = 1)
//     and K + 1 of residual3 (a segment's input beside its layers' outputs). Every other
//     activation stays fp32 (the logits and the loss are fp32 by the semantics, the rest is one
//     (B,T,...) each). cpu_activation_bytes() is the total.
//   - Workspace (16-bit runs only): fp32 views of the units being computed (the embeddings, the
//     final LayerNorm, two layers: the one computing and the one prefetched), fp32 gradient
//     accumulators (the embeddings, the final LayerNorm, one layer) rounded into the 16-bit
//     storage, and in bf16 the matmuls' operands rounded into one staging area ((B,T) rows of
//     the widest pair of a matmul's output gradient and input: the LM head's, or the MLP's),
//     gemm_bf16.h's packing scratch (sized for the run's OpenMP threads), one flag per
//     vocabulary row (the batch's tokens: the tied embedding's rows that keep fp32 sums), and
//     GELU's tables: its bf16 result and its fp32 derivative for each of the 65536 bf16 values.
//     fp32 and fp16 runs multiply in fp32 (gemm_f32 where the CPU has AVX-512, else OpenBLAS)
//     and keep its packing scratch, whichever runs. cpu_workspace_bytes() is the total: in fp32,
//     that scratch alone.
// CPU trainer only (C11); no global state.
#ifndef CPU_WORKSPACE_H
#define CPU_WORKSPACE_H

#include "core/gpt2.h"
#include "cpu/gemm_bf16.h"
#include "run/planner.h"

// bf16 runs: GELU (bf16) and its derivative (fp32) for every bf16 input
#define CPU_GELU_TABLES_BYTES ((size_t)65536 * (sizeof(uint16_t) + sizeof(float)))

// The fp32 block's slots: per-layer tensor i holds slots[i] layers (see the contract).
static inline void cpu_activation_slots(const GPT2Config *c, GPT2Recompute r, int mixed, int slots[NUM_ACTIVATIONS]) {
    int L = c->num_layers, K = gpt2_recompute_every(r);
    if (!mixed) { gpt2_recompute_slots(r, L, slots); return; }
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        slots[i] = !gpt2_activation_is_layered(i) ? 1
                   : r.mode == RECOMPUTE_NONE ? (gpt2_activation_in_slots(i) ? 2 : L)
                   : (i == A_RESIDUAL3 ? K + 1 : K);
}
// Layer l's slot of each per-layer tensor in it; returns its input's (residual3's slot of layer
// l - 1), or -1 for the embeddings' output.
static inline int cpu_layer_slots(const GPT2Config *c, GPT2Recompute r, int mixed, int l, int slot[NUM_ACTIVATIONS]) {
    int L = c->num_layers, K = gpt2_recompute_every(r), none = r.mode == RECOMPUTE_NONE;
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        slot[i] = !gpt2_activation_is_layered(i) ? 0
                  : !mixed ? gpt2_recompute_slot(r, L, i, l)
                  : none ? (gpt2_activation_in_slots(i) ? l % 2 : l)
                  : (i == A_RESIDUAL3 ? l % (K + 1) : l % K);
    if (l == 0) return -1;
    return !mixed ? gpt2_recompute_slot(r, L, A_RESIDUAL3, l - 1) : none ? (l - 1) % 2 : (l - 1) % (K + 1);
}
// fp32 elements of the activation block.
static inline size_t cpu_activation_floats(const GPT2Config *c, int B, int T, GPT2Recompute r, int mixed) {
    int slots[NUM_ACTIVATIONS];
    cpu_activation_slots(c, r, mixed, slots);
    return gpt2_activation_layout(c, B, T, slots, sizeof(float), 1, NULL) / sizeof(float);
}

// 16-bit runs: tensor i of layer l is kept in 16 bits at this element offset of the 16-bit
// block (at (B,T)), or not at all (-1). The keeping layers (every layer, or with full recompute
// each segment's last) each hold their kept tensors back to back, in the list's order.
static inline long cpu_kept16_offset(const GPT2Config *c, GPT2Recompute r, int B, int T, int i, int l) {
    int L = c->num_layers;
    if (!gpt2_activation_in_slots(i) || !gpt2_recompute_keeps(r, L, i, l)) return -1;
    size_t n[NUM_ACTIVATIONS], record = 0, at = 0;
    gpt2_activation_numels(c, B, T, n);
    for (int j = 0; j < NUM_ACTIVATIONS; j++)
        if (gpt2_activation_in_slots(j) && gpt2_recompute_keeps(r, L, j, l)) {
            if (j < i) at += n[j] / L;
            record += n[j] / L;
        }
    size_t index = r.mode == RECOMPUTE_FULL ? (size_t)(l / gpt2_recompute_every(r)) : (size_t)l;
    return (long)(index * record + at);
}
// ... and the block's elements: the last keeping layer's end.
static inline size_t cpu_kept16_numel(const GPT2Config *c, GPT2Recompute r, int B, int T) {
    int L = c->num_layers;
    size_t n[NUM_ACTIVATIONS], end = 0;
    gpt2_activation_numels(c, B, T, n);
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        long at = cpu_kept16_offset(c, r, B, T, i, L - 1);
        if (at >= 0 && (size_t)at + n[i] / L > end) end = (size_t)at + n[i] / L;
    }
    return end;
}
// Bytes of all activations as the CPU trainer allocates them (fp32, or mixed precision).
static inline size_t cpu_activation_bytes(const GPT2Config *c, int B, int T, GPT2Recompute r, int mixed) {
    return cpu_activation_floats(c, B, T, r, mixed) * sizeof(float) + (mixed ? cpu_kept16_numel(c, r, B, T) * 2 : 0);
}

// Elements of the bf16 staging area: (B,T) rows of max(Vp + C, 5C).
static inline size_t cpu_bf16_staging_elems(const GPT2Config *c, int B, int T) {
    size_t C = c->channels, Vp = c->padded_vocab_size;
    return (size_t)B * T * (Vp + C > 5 * C ? Vp + C : 5 * C);
}
// Scratch for every matmul of the model at (B,T), its four linear layers and the LM head: bf16
// (esize 2, gemm_bf16) or fp32 (4, gemm_f32).
static inline size_t cpu_matmul_scratch_bytes(const GPT2Config *c, int B, int T, int threads, int esize) {
    int N = B * T, C = c->channels, io[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, c->padded_vocab_size}};
    size_t most = 0;
    for (int i = 0; i < 5; i++) {
        size_t b = esize == 2 ? gemm_bf16_linear_scratch_bytes(N, io[i][0], io[i][1], threads)
                              : gemm_f32_linear_scratch_bytes(N, io[i][0], io[i][1], threads);
        most = b > most ? b : most;
    }
    return most;
}
static inline size_t cpu_bf16_matmul_scratch_bytes(const GPT2Config *c, int B, int T, int threads) {
    return cpu_matmul_scratch_bytes(c, B, T, threads, 2);
}
static inline size_t cpu_f32_matmul_scratch_bytes(const GPT2Config *c, int B, int T, int threads) {
    return cpu_matmul_scratch_bytes(c, B, T, threads, 4);
}
static inline size_t cpu_workspace_bytes(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads) {
    if (dtype == ZC_F32) return cpu_f32_matmul_scratch_bytes(c, B, T, threads);
    size_t embed = gpt2_unit_padded(lay, 0), fin = gpt2_unit_padded(lay, c->num_layers + 1), layer = gpt2_unit_padded(lay, 1);
    size_t floats = (embed + fin + 2 * layer) + (embed + fin + layer);
    if (dtype != ZC_BF16) return floats * sizeof(float) + cpu_f32_matmul_scratch_bytes(c, B, T, threads);
    return floats * sizeof(float) + cpu_bf16_staging_elems(c, B, T) * 2 + cpu_bf16_matmul_scratch_bytes(c, B, T, threads) +
           (size_t)c->padded_vocab_size + CPU_GELU_TABLES_BYTES;
}

// --- for the planner ---

static inline double cpu_plan_activations(const GPT2Config *c, int B, int T, int dtype, GPT2Recompute r, double *host) {
    *host = 0.0; // (this trainer's memory is the host's: cpu_checkpointing moves nothing)
    return (double)cpu_activation_bytes(c, B, T, r, dtype != ZC_F32);
}
static inline double cpu_plan_workspace(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads) {
    return (double)cpu_workspace_bytes(lay, c, B, T, dtype, threads);
}
static const PlanBackend cpu_plan_backend = {
    cpu_plan_activations, cpu_plan_workspace,
    {"4 B x its list", "2 B x layers + 2 fp32", "2 B x layers + 2 fp32"},
    {"4 B x kept + scratch", "2 B x kept + fp32 slots", "2 B x kept + fp32 slots"},
    {"CPU workspace (matmul scratch)", "CPU fp32 workspace (16-bit runs)", "CPU fp32 workspace (16-bit runs)"},
    "cpu_workspace_bytes", ZC_F32, 1};

#endif // CPU_WORKSPACE_H
