// cpu/workspace.h: how the CPU trainer stores activations and what working memory it needs
// beyond the model states, so that its gpt2_build allocates and the planner predicts the same
// bytes (cpu_plan_backend).
//
// Contract
//   - Activations. The CPU kernels compute in fp32. An fp32 run keeps every activation of
//     core/gpt2.h's list in fp32, all L layers (packed back to back). A 16-bit run (bf16, fp16)
//     computes each layer in fp32 in one of two layer-sized slots (the layer, and its input: the
//     previous layer's output) and keeps all L layers' per-layer tensors (cpu_activation_is_layer16:
//     everything (L, ...) but the fp32 LayerNorm statistics) in 16 bits; every other activation
//     stays fp32 (the statistics, the logits and the loss are fp32 by the semantics, the rest is
//     one (B,T,...) each). cpu_activation_bytes() is the total.
//   - Workspace (16-bit runs only): fp32 views of the units being computed (the embeddings, the
//     final LayerNorm, two layers: the one computing and the one prefetched), fp32 gradient
//     accumulators (the embeddings, the final LayerNorm, one layer) rounded into the 16-bit
//     storage, and in bf16 the matmuls' operands rounded into one staging area ((B,T) rows of
//     the widest pair of a matmul's output gradient and input: the LM head's, or the MLP's),
//     gemm_bf16.h's packing scratch (sized for the run's OpenMP threads) and one flag per
//     vocabulary row (the batch's tokens: the tied embedding's rows that keep fp32 sums).
//     cpu_workspace_bytes() is the total; 0 in fp32.
//   - Recompute (a plan; the trainer does not implement it yet): each layer's input kept in full,
//     one layer's worth of the other per-layer tensors.
// CPU trainer only (C11); no global state.
#ifndef CPU_WORKSPACE_H
#define CPU_WORKSPACE_H

#include "core/gpt2.h"
#include "cpu/gemm_bf16.h"
#include "run/planner.h"

// The tensors a 16-bit run stores in 16 bits, per layer: gpt2.h's slot tensors.
static inline int cpu_activation_is_layer16(int i) { return gpt2_activation_in_slots(i); }

// fp32 elements of the activation block: with slots = L every layer in fp32, with slots = 2
// the 16-bit layout's two fp32 layer slots.
static inline size_t cpu_activation_floats(const GPT2Config *c, int B, int T, int slots) {
    return gpt2_activation_layout(c, B, T, slots, sizeof(float), 1, NULL) / sizeof(float);
}
// 16-bit elements one layer stores (the sum of its cpu_activation_is_layer16 tensors)
static inline size_t cpu_layer16_numel(const GPT2Config *c, int B, int T) {
    size_t n[NUM_ACTIVATIONS], total = 0;
    gpt2_activation_numels(c, B, T, n);
    for (int i = 0; i < NUM_ACTIVATIONS; i++) if (cpu_activation_is_layer16(i)) total += n[i] / c->num_layers;
    return total;
}
// Bytes of all activations as the CPU trainer allocates them (fp32, or mixed precision).
static inline size_t cpu_activation_bytes(const GPT2Config *c, int B, int T, int mixed) {
    if (!mixed) return cpu_activation_floats(c, B, T, c->num_layers) * sizeof(float);
    return cpu_activation_floats(c, B, T, 2) * sizeof(float) + (size_t)c->num_layers * cpu_layer16_numel(c, B, T) * 2;
}

// The 16-bit-stored tensors of a layer view, in cpu_activation_is_layer16's order, with their
// element counts at (B,T): what a 16-bit run converts when it stores or loads a layer.
static inline int cpu_layer16_tensors(const LayerActs *x, const GPT2Config *c, int B, int T, float *t[9], size_t n[9]) {
    size_t btc = (size_t)B * T * c->channels;
    float *p[9] = {x->ln1, x->qkv, x->atty, x->att, x->residual2, x->ln2, x->fch, x->fch_gelu, x->residual3};
    size_t k[9] = {btc, 3 * btc, btc, (size_t)B * c->num_heads * T * T, btc, btc, 4 * btc, 4 * btc, btc};
    memcpy(t, p, sizeof(p));
    memcpy(n, k, sizeof(k));
    return 9;
}

// Elements of the bf16 staging area: (B,T) rows of max(Vp + C, 5C).
static inline size_t cpu_bf16_staging_elems(const GPT2Config *c, int B, int T) {
    size_t C = c->channels, Vp = c->padded_vocab_size;
    return (size_t)B * T * (Vp + C > 5 * C ? Vp + C : 5 * C);
}
// Scratch for every bf16 matmul of the model at (B,T): its four linear layers and the LM head.
static inline size_t cpu_bf16_matmul_scratch_bytes(const GPT2Config *c, int B, int T, int threads) {
    int N = B * T, C = c->channels, io[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, c->padded_vocab_size}};
    size_t most = 0;
    for (int i = 0; i < 5; i++) {
        size_t b = gemm_bf16_linear_scratch_bytes(N, io[i][0], io[i][1], threads);
        most = b > most ? b : most;
    }
    return most;
}
static inline size_t cpu_workspace_bytes(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads) {
    if (dtype == ZC_F32) return 0;
    size_t embed = gpt2_unit_padded(lay, 0), fin = gpt2_unit_padded(lay, c->num_layers + 1), layer = gpt2_unit_padded(lay, 1);
    size_t floats = (embed + fin + 2 * layer) + (embed + fin + layer);
    if (dtype != ZC_BF16) return floats * sizeof(float);
    return floats * sizeof(float) + cpu_bf16_staging_elems(c, B, T) * 2 + cpu_bf16_matmul_scratch_bytes(c, B, T, threads) +
           (size_t)c->padded_vocab_size;
}

// --- for the planner ---

// Recompute (a plan): residual3 (every layer's output) in full and one layer of the other
// per-layer tensors (in 16-bit runs at 2 bytes, plus the two fp32 layer slots).
static inline double cpu_plan_activations(const GPT2Config *c, int B, int T, int dtype, int recompute) {
    int mixed = dtype != ZC_F32;
    if (!recompute) return (double)cpu_activation_bytes(c, B, T, mixed);
    size_t n[NUM_ACTIVATIONS], L = (size_t)c->num_layers;
    gpt2_activation_numels(c, B, T, n);
    double total = 0.0;
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        size_t k = gpt2_activation_is_layered(i) && i != A_RESIDUAL3 ? n[i] / L : n[i];
        if (!cpu_activation_is_layer16(i)) total += 4.0 * (double)k;
        else total += mixed ? 2.0 * (double)k + 4.0 * 2.0 * (double)(n[i] / L) : 4.0 * (double)k;
    }
    return total;
}
static inline double cpu_plan_workspace(const ParamLayout *lay, const GPT2Config *c, int B, int T, int dtype, int threads) {
    return (double)cpu_workspace_bytes(lay, c, B, T, dtype, threads);
}
static const PlanBackend cpu_plan_backend = {
    cpu_plan_activations, cpu_plan_workspace,
    {"4 B x its list", "2 B x layers + 2 fp32", "2 B x layers + 2 fp32"},
    {"CPU workspace (none in fp32)", "CPU fp32 workspace (16-bit runs)", "CPU fp32 workspace (16-bit runs)"},
    "cpu_workspace_bytes", ZC_F32, 1};

#endif // CPU_WORKSPACE_H
