// gpt2.h: the GPT-2 model description shared by both trainers.
//
// Contract
//   - GPT2Config: the six numbers that define a model (the llm.c checkpoint header).
//   - ParamLayout: where every parameter lives in ONE flat buffer. The buffer is cut into
//     "units" (the embeddings, each transformer layer, the final LayerNorm), the granularity
//     at which ZeRO partitions, gathers and reduces. Each unit is padded to a multiple of
//     `align` elements so that N ranks can own equal, aligned slices of it.
//   - Checkpoints in llm.c's format (magic 20240326, version 3 = fp32). The file stores each
//     tensor stacked over layers; memory stores each layer contiguously (unit-major), so the
//     reader and writer permute. Nothing else in the program needs to know the file order.
//   - GPT-2 initialisation that depends only on (seed, tensor, layer): any rank can create any
//   unit on its own and all ranks agree, whatever the world size.
//   - The activations: the list of what the forward keeps for the backward (A_*), their element
//     counts, named views and a generic packed layout (per-layer tensors in L slots or fewer);
//     activation recompute (GPT2Recompute: none, full every K layers, selective): what the forward
//     keeps, what the backward recomputes, and in which order it asks for the layers.
//     How a backend stores them (element sizes, alignment, workspace) is the backend's:
//     cpu/workspace.h, gpu/layout.h. This header knows no backend.
// All functions are static; no global state. Compiles as C11 and as CUDA C++.
#ifndef GPT2_H
#define GPT2_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <unistd.h>
#include <time.h>
#include "mixed_precision.h"

#define GPT2_MAGIC 20240326
#define GPT2_MAX_LAYERS 256
#define GPT2_MAX_UNITS (GPT2_MAX_LAYERS + 2)

typedef struct {
    int max_seq_len;       // maxT: rows of the position embedding
    int vocab_size;        // V: 50257 for GPT-2
    int padded_vocab_size; // Vp: V rounded up to a multiple of 128 (50304), for aligned matmuls
    int num_layers;        // L
    int num_heads;         // NH
    int channels;          // C
} GPT2Config;

// The parameter tensors, in the order the llm.c checkpoint stores them.
enum {
    P_WTE, P_WPE, P_LN1W, P_LN1B, P_QKVW, P_QKVB, P_ATTPROJW, P_ATTPROJB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FCPROJW, P_FCPROJB, P_LNFW, P_LNFB, NUM_PARAM_TENSORS
};
static const char *const gpt2_tensor_names[NUM_PARAM_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

static inline int gpt2_tensor_is_layered(int t) { return t >= P_LN1W && t <= P_FCPROJB; }
// AdamW decays the 2-D weight matrices only, never biases or LayerNorm parameters.
static inline int gpt2_tensor_decays(int t) {
    return t == P_WTE || t == P_WPE || t == P_QKVW || t == P_ATTPROJW || t == P_FCW || t == P_FCPROJW;
}

// Elements of one tensor for one layer (or of the whole tensor when it is not layered).
static inline size_t gpt2_tensor_numel(const GPT2Config *c, int t) {
    size_t C = (size_t)c->channels;
    switch (t) {
    case P_WTE: return (size_t)c->padded_vocab_size * C;
    case P_WPE: return (size_t)c->max_seq_len * C;
    case P_QKVW: return 3 * C * C;
    case P_QKVB: return 3 * C;
    case P_ATTPROJW: return C * C;
    case P_FCW: case P_FCPROJW: return 4 * C * C;
    case P_FCB: return 4 * C;
    default: return C; // ln1w ln1b attprojb ln2w ln2b fcprojb lnfw lnfb
    }
}

// One message naming what is wrong with a configuration, or NULL when it is usable.
static const char *gpt2_config_problem(const GPT2Config *c) {
    if (c->num_layers < 1 || c->num_layers > GPT2_MAX_LAYERS) return "layers must be between 1 and 256";
    if (c->channels < 1 || c->num_heads < 1) return "channels and heads must be positive";
    if (c->channels % c->num_heads != 0) return "channels must be a multiple of heads";
    if (c->max_seq_len < 1) return "max_seq_len must be positive";
    if (c->vocab_size < 1 || c->vocab_size > 65536) return "vocab_size must be between 1 and 65536 (tokens are uint16)";
    if (c->padded_vocab_size < c->vocab_size) return "padded_vocab_size is smaller than vocab_size";
    return NULL;
}

// ----------------------------------------------------------------------------------------
// Host utilities both trainers use

// Allocation that ends the program with one line when memory runs out. 64-byte alignment:
// whole cache lines, and full AVX-512 vectors for the compiler.
static inline void *xmalloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64) != 0) {
        fprintf(stderr, "error: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}
static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------------------
// Flat layout

enum { UNIT_EMBED = 0 }; // unit 0: wte, wpe; units 1..L: layer l-1; unit L+1: lnfw, lnfb

typedef struct {
    GPT2Config cfg;
    int num_units;                            // L + 2
    size_t align;                             // every unit's padded size is a multiple of this
    size_t unit_offset[GPT2_MAX_UNITS + 1];   // start of each unit in the flat buffer
    size_t unit_numel[GPT2_MAX_UNITS];        // real parameters in the unit
    size_t num_params;                        // real parameters in the model (incl. padded vocab rows)
    size_t num_flat;                          // length of the flat buffer, padding included
} ParamLayout;

static inline int gpt2_unit_of_layer(int l) { return l + 1; }
static inline int gpt2_final_unit(const ParamLayout *lay) { return lay->num_units - 1; }

// Tensor order inside a unit. Within a layer unit the tensors follow the checkpoint order.
static inline int gpt2_unit_first_tensor(const ParamLayout *lay, int u) {
    return u == UNIT_EMBED ? P_WTE : (u == gpt2_final_unit(lay) ? P_LNFW : P_LN1W);
}
static inline int gpt2_unit_end_tensor(const ParamLayout *lay, int u) {
    return u == UNIT_EMBED ? P_LN1W : (u == gpt2_final_unit(lay) ? NUM_PARAM_TENSORS : P_LNFW);
}

static inline size_t gpt2_round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static inline void gpt2_layout_init(ParamLayout *lay, const GPT2Config *c, size_t align) {
    memset(lay, 0, sizeof(*lay));
    lay->cfg = *c;
    lay->align = align < 1 ? 1 : align;
    lay->num_units = c->num_layers + 2;
    size_t off = 0;
    for (int u = 0; u < lay->num_units; u++) {
        size_t n = 0;
        for (int t = gpt2_unit_first_tensor(lay, u); t < gpt2_unit_end_tensor(lay, u); t++) n += gpt2_tensor_numel(c, t);
        lay->unit_offset[u] = off;
        lay->unit_numel[u] = n;
        lay->num_params += n;
        off += gpt2_round_up(n, lay->align);
    }
    lay->unit_offset[lay->num_units] = off;
    lay->num_flat = off;
}

static inline size_t gpt2_unit_padded(const ParamLayout *lay, int u) {
    return lay->unit_offset[u + 1] - lay->unit_offset[u];
}

// Offset of tensor t (of layer l, ignored for unlayered tensors) from the start of its unit.
static inline size_t gpt2_offset_in_unit(const ParamLayout *lay, int t) {
    size_t off = 0;
    int u = t < P_LN1W ? UNIT_EMBED : (t >= P_LNFW ? gpt2_final_unit(lay) : 1);
    for (int s = gpt2_unit_first_tensor(lay, u); s < t; s++) off += gpt2_tensor_numel(&lay->cfg, s);
    return off;
}
static inline int gpt2_unit_of_tensor(const ParamLayout *lay, int t, int l) {
    return t < P_LN1W ? UNIT_EMBED : (t >= P_LNFW ? gpt2_final_unit(lay) : gpt2_unit_of_layer(l));
}
// Offset of tensor t of layer l in the flat buffer.
static inline size_t gpt2_tensor_offset(const ParamLayout *lay, int t, int l) {
    return lay->unit_offset[gpt2_unit_of_tensor(lay, t, l)] + gpt2_offset_in_unit(lay, t);
}

// How the optimizer treats a run of flat elements. A ZeRO partition boundary can cut through
// any tensor, so the update never asks "which tensor is this?"; it walks these runs instead.
// `tensor` numbers the model's tensors as a framework holds them (each layer's own): wte 0, wpe 1,
// layer l's tensor t at 2 + 12 l + (t - P_LN1W), then lnfw, lnfb; -1 for a unit's padding. An
// optimizer with per-tensor reductions (optimizer.h: LAMB) sums by it.
enum { SEG_DECAY, SEG_NO_DECAY, SEG_FROZEN };  // frozen: padding and padded vocabulary rows
typedef struct { size_t begin, end; int kind, tensor; } ParamSegment;
static inline ParamSegment gpt2_segment(size_t begin, size_t end, int kind) {
    ParamSegment s; s.begin = begin; s.end = end; s.kind = kind; s.tensor = -1; return s;
}
static inline int gpt2_num_tensors(const ParamLayout *lay) { return 12 * lay->cfg.num_layers + 4; }
static inline int gpt2_tensor_index(const ParamLayout *lay, int t, int u) {
    if (u == UNIT_EMBED) return t - P_WTE;
    if (u == gpt2_final_unit(lay)) return 2 + 12 * lay->cfg.num_layers + (t - P_LNFW);
    return 2 + 12 * (u - 1) + (t - P_LN1W);
}

// Visits the runs of [begin, end) of the flat buffer in order.
// fn(seg, ctx) is called for each non-empty run, clipped to [begin, end).
static inline void gpt2_for_each_segment(const ParamLayout *lay, size_t begin, size_t end,
                                  void (*fn)(const ParamSegment *, void *), void *ctx) {
    const GPT2Config *c = &lay->cfg;
    for (int u = 0; u < lay->num_units; u++) {
        size_t pos = lay->unit_offset[u];
        if (pos >= end) break;
        if (lay->unit_offset[u + 1] <= begin) continue;
        for (int t = gpt2_unit_first_tensor(lay, u); t <= gpt2_unit_end_tensor(lay, u); t++) {
            ParamSegment runs[2];
            int nruns = 0;
            if (t == gpt2_unit_end_tensor(lay, u)) { // the unit's padding
                runs[nruns++] = gpt2_segment(pos, lay->unit_offset[u + 1], SEG_FROZEN);
            } else if (t == P_WTE) { // the real vocabulary rows train; the padded rows never do
                size_t real = (size_t)c->vocab_size * c->channels;
                runs[nruns++] = gpt2_segment(pos, pos + real, SEG_DECAY);
                runs[nruns++] = gpt2_segment(pos + real, pos + gpt2_tensor_numel(c, t), SEG_FROZEN);
            } else {
                runs[nruns++] = gpt2_segment(pos, pos + gpt2_tensor_numel(c, t),
                                             gpt2_tensor_decays(t) ? SEG_DECAY : SEG_NO_DECAY);
            }
            for (int r = 0; r < nruns; r++) {
                ParamSegment s = runs[r];
                if (t != gpt2_unit_end_tensor(lay, u)) s.tensor = gpt2_tensor_index(lay, t, u);
                pos = s.end;
                if (s.begin < begin) s.begin = begin;
                if (s.end > end) s.end = end;
                if (s.begin < s.end) fn(&s, ctx);
            }
        }
    }
}

// ----------------------------------------------------------------------------------------
// The element type of the tensors the kernels read and write: parameters, gradients and the
// activations (all but the fp32 LayerNorm statistics and losses). The CPU trainer's kernels
// compute in fp32 whatever the storage (its hooks convert), so it leaves this float. The GPU
// trainer's kernels read and write the storage type itself, fixed when it is compiled: it
// defines GPT2_FLOATX (__nv_bfloat16, __half or float) before including any header. Views are
// built from a typed base pointer, so every offset below counts elements of this type.
#ifndef GPT2_FLOATX
#define GPT2_FLOATX float
#endif

// ----------------------------------------------------------------------------------------
// Named views into the flat buffer (parameters and gradients share the layout)

typedef struct { GPT2_FLOATX *wte, *wpe; } EmbedTensors;            // unit 0
typedef struct {                                                    // units 1..L
    GPT2_FLOATX *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    GPT2_FLOATX *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensors;
typedef struct { GPT2_FLOATX *lnfw, *lnfb; } FinalTensors;          // unit L+1

// A unit's parameters as the kernels read them: in the kernels' element type (f32: fp32 on the
// CPU, whose 16-bit runs widen into fp32 views; on the GPU the storage type itself, the name
// notwithstanding), and where the trainer also has them in 16 bits beside an fp32 view, that
// copy (x16, the same layout; NULL otherwise) for kernels that take it (the CPU's bf16 matmuls).
typedef struct { GPT2_FLOATX *f32; const void *x16; } UnitParams;

// `unit` points at the first element of the unit (wherever that unit currently lives: the
// flat buffer, or a ZeRO-3 gather buffer).
static inline EmbedTensors gpt2_embed_tensors(const GPT2Config *c, GPT2_FLOATX *unit) {
    EmbedTensors e;
    e.wte = unit;
    e.wpe = unit + gpt2_tensor_numel(c, P_WTE);
    return e;
}
static inline LayerTensors gpt2_layer_tensors(const GPT2Config *c, GPT2_FLOATX *unit) {
    GPT2_FLOATX *p[P_LNFW - P_LN1W];
    for (int t = P_LN1W; t < P_LNFW; t++) { p[t - P_LN1W] = unit; unit += gpt2_tensor_numel(c, t); }
    LayerTensors x = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10], p[11]};
    return x;
}
static inline FinalTensors gpt2_final_tensors(const GPT2Config *c, GPT2_FLOATX *unit) {
    FinalTensors f = {unit, unit + c->channels};
    return f;
}

// ----------------------------------------------------------------------------------------
// Activations: what the forward pass keeps for the backward pass, and the backward's scratch.
// One list, used by the trainers to allocate and by the planner to account, so the two agree.

enum {
    A_ENCODED,                        // (B,T,C) token + position embedding
    A_LN1, A_LN1_MEAN, A_LN1_RSTD,    // (L,B,T,C), (L,B,T), (L,B,T)
    A_QKV,                            // (L,B,T,3C)
    A_ATTY,                           // (L,B,T,C) attention output before its projection
    A_ATT,                            // (L,B,NH,T,T) softmax probabilities (only t2 <= t used); in the
                                      // GPU trainer's flash attention (L,B,NH,T) fp32: each row's log-sum-exp
    A_RESIDUAL2,                      // (L,B,T,C) residual + attention
    A_LN2, A_LN2_MEAN, A_LN2_RSTD,    // (L,B,T,C), (L,B,T), (L,B,T)
    A_FCH, A_FCH_GELU,                // (L,B,T,4C) MLP hidden before and after GELU
    A_RESIDUAL3,                      // (L,B,T,C) residual2 + MLP: the block output
    A_LNF, A_LNF_MEAN, A_LNF_RSTD,    // (B,T,C), (B,T), (B,T)
    A_LOGITS,                         // (B,T,Vp) logits, overwritten in place by their gradient
    A_LOSSES,                         // (B,T)
    A_DRESIDUAL, A_DBTC, A_DBT4C, A_DQKV, // backward scratch: (B,T,C), (B,T,C), (B,T,4C), (B,T,3C)
    NUM_ACTIVATIONS
};

static inline void gpt2_activation_numels(const GPT2Config *c, int B, int T, size_t n[NUM_ACTIVATIONS]) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, BT = (size_t)B * T;
    size_t v[NUM_ACTIVATIONS] = {
        BT * C,
        L * BT * C, L * BT, L * BT,
        L * BT * 3 * C,
        L * BT * C,
        L * B * NH * T * T,
        L * BT * C,
        L * BT * C, L * BT, L * BT,
        L * BT * 4 * C, L * BT * 4 * C,
        L * BT * C,
        BT * C, BT, BT,
        BT * c->padded_vocab_size,
        BT,
        BT * C, BT * C, BT * 4 * C, BT * 3 * C};
    memcpy(n, v, sizeof(v));
}

// Tensors of one layer, (L, ...): the per-layer activations.
static inline int gpt2_activation_is_layered(int i) { return i >= A_LN1 && i <= A_RESIDUAL3; }
// The activations every precision keeps in fp32: the LayerNorm statistics and the losses.
static inline int gpt2_activation_is_fp32(int i) {
    return i == A_LN1_MEAN || i == A_LN1_RSTD || i == A_LN2_MEAN || i == A_LN2_RSTD || i == A_LNF_MEAN ||
           i == A_LNF_RSTD || i == A_LOSSES;
}
// The per-layer tensors in the kernels' element type: every layered one but the LayerNorm
// statistics, which every precision keeps in fp32.
static inline int gpt2_activation_in_slots(int i) { return gpt2_activation_is_layered(i) && !gpt2_activation_is_fp32(i); }

// ----------------------------------------------------------------------------------------
// Activation recompute (activation checkpointing: ZeRO-R's answer to activations). Which
// per-layer activations the forward keeps for the backward, and which the backward computes
// again from what was kept, with the forward's own kernels on the same inputs (model.h):
//   none: every layer keeps every per-layer tensor.
//   full, every K: the forward keeps the input of every K-th layer (a checkpoint; K = 1: of
//     every layer) and the last layer's output (the final LayerNorm's input). The layers are cut
//     into segments [sK, sK + K); the backward, reaching a segment, recomputes its layers from
//     the segment's checkpoint into K layers' worth of scratch and then runs their backward. A
//     segment's last layer is recomputed without its last matmul and residual: its output is
//     the next checkpoint, kept. Memory: ceil(L/K) inputs (the first is the embeddings' output,
//     kept anyway) and the last output, plus K layers; compute: about one extra forward.
//   selective: every layer keeps its matmuls' outputs (qkv, residual2 = input + attention
//     projection, fch) and its output (residual3); the backward recomputes the cheap, large
//     rest (the LayerNorms with their statistics, the attention's probabilities and output,
//     GELU's output) into one layer's worth of scratch, as Megatron's selective recompute.
// The generic layout (gpt2_recompute_slots, gpt2_layer_acts: the GPU trainer's, and the CPU
// trainer's in fp32) holds each kept tensor for every layer that keeps it and the rest in
// scratch slots; the CPU trainer's 16-bit runs lay theirs out themselves (cpu/workspace.h).
enum { RECOMPUTE_NONE, RECOMPUTE_FULL, RECOMPUTE_SELECTIVE, NUM_RECOMPUTE };
static const char *const gpt2_recompute_names[NUM_RECOMPUTE] = {"none", "full", "selective"};
typedef struct {
    int mode, every; // every: full's K, 1 <= K <= L (others: 1)
    int host;        // full: the checkpoints live in host memory (the GPU trainer's cpu_checkpointing)
} GPT2Recompute;

static inline int gpt2_recompute_every(GPT2Recompute r) { return r.mode == RECOMPUTE_FULL && r.every > 1 ? r.every : 1; }
// Full recompute's segments: the first layer of layer l's, and whether l is its last.
static inline int gpt2_segment_start(GPT2Recompute r, int l) { return l - l % gpt2_recompute_every(r); }
static inline int gpt2_segment_end(GPT2Recompute r, int L, int l) { return (l + 1) % gpt2_recompute_every(r) == 0 || l == L - 1; }
static inline int gpt2_checkpoints(GPT2Recompute r, int L) { return (L + gpt2_recompute_every(r) - 1) / gpt2_recompute_every(r); }
// Whether the forward keeps per-layer tensor i of layer l for the backward.
static inline int gpt2_recompute_keeps(GPT2Recompute r, int L, int i, int l) {
    if (r.mode == RECOMPUTE_FULL) return i == A_RESIDUAL3 && gpt2_segment_end(r, L, l);
    if (r.mode == RECOMPUTE_SELECTIVE) return i == A_QKV || i == A_RESIDUAL2 || i == A_FCH || i == A_RESIDUAL3;
    return 1;
}
// The generic layout: slots[i], the layers per-layer tensor i holds (1 for the others): every
// layer's without recompute; selective: the kept tensors every layer's, the rest one layer's;
// full: residual3 the ceil(L/K) segments' outputs and the K - 1 others of a segment, the rest K.
static inline void gpt2_recompute_slots(GPT2Recompute r, int L, int slots[NUM_ACTIVATIONS]) {
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        int K = gpt2_recompute_every(r);
        if (!gpt2_activation_is_layered(i)) slots[i] = 1;
        else if (r.mode == RECOMPUTE_NONE) slots[i] = L;
        else if (r.mode == RECOMPUTE_SELECTIVE) slots[i] = gpt2_recompute_keeps(r, L, i, 0) ? L : 1;
        else slots[i] = i == A_RESIDUAL3 ? gpt2_checkpoints(r, L) + K - 1 : K;
    }
}
// ... and the slot of per-layer tensor i of layer l in it.
static inline int gpt2_recompute_slot(GPT2Recompute r, int L, int i, int l) {
    int K = gpt2_recompute_every(r);
    if (r.mode == RECOMPUTE_NONE) return l;
    if (r.mode == RECOMPUTE_SELECTIVE) return gpt2_recompute_keeps(r, L, i, l) ? l : 0;
    if (i != A_RESIDUAL3) return l % K;
    return gpt2_segment_end(r, L, l) ? l / K : gpt2_checkpoints(r, L) + l % K;
}
// The order in which the backward asks for the layers' parameters: the first layer, and the
// one after layer l's backward (-1: none). Full recompute begins each segment with its first
// layer (to recompute it); otherwise the layers come from the top down.
static inline int gpt2_backward_first_layer(GPT2Recompute r, int L) { return gpt2_segment_start(r, L - 1); }
static inline int gpt2_backward_next_layer(GPT2Recompute r, int l) {
    if (l == 0) return -1;
    return l == gpt2_segment_start(r, l) ? gpt2_segment_start(r, l - 1) : l - 1;
}

// The block itself: tensor i of n[i] elements, 4 bytes each where fp32[i], else elem, each
// starting at a multiple of align bytes.
static inline size_t gpt2_activation_pack(const size_t n[NUM_ACTIVATIONS], const int fp32[NUM_ACTIVATIONS], size_t elem,
                                          size_t align, size_t offset[NUM_ACTIVATIONS]) {
    size_t at = 0;
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        at = gpt2_round_up(at, align);
        if (offset) offset[i] = at;
        at += n[i] * (fp32[i] ? sizeof(float) : elem);
    }
    return at;
}

// Where each activation starts in one block (offset[i], bytes; may be NULL) and the block's
// bytes: each per-layer tensor i for slots[i] layers (gpt2_recompute_slots, or a backend's own),
// the fp32 ones at 4 bytes an element and every other one at `elem` bytes, each tensor starting
// at a multiple of `align` bytes (a power of two; 1 packs them).
static inline size_t gpt2_activation_layout(const GPT2Config *c, int B, int T, const int slots[NUM_ACTIVATIONS], size_t elem,
                                            size_t align, size_t offset[NUM_ACTIVATIONS]) {
    size_t n[NUM_ACTIVATIONS];
    int fp32[NUM_ACTIVATIONS];
    gpt2_activation_numels(c, B, T, n);
    for (int i = 0; i < NUM_ACTIVATIONS; i++) {
        if (gpt2_activation_is_layered(i)) n[i] = n[i] / c->num_layers * (size_t)slots[i];
        fp32[i] = gpt2_activation_is_fp32(i);
    }
    return gpt2_activation_pack(n, fp32, elem, align, offset);
}

// The activations as named pointers, in the order of the list above, and their wiring into
// one allocation (host or device memory: the trainer allocates, this only carves it up).
typedef struct {
    GPT2_FLOATX *encoded, *ln1; float *ln1_mean, *ln1_rstd; GPT2_FLOATX *qkv, *atty, *att, *residual2;
    GPT2_FLOATX *ln2; float *ln2_mean, *ln2_rstd; GPT2_FLOATX *fch, *fch_gelu, *residual3;
    GPT2_FLOATX *lnf; float *lnf_mean, *lnf_rstd; GPT2_FLOATX *logits; float *losses;
    GPT2_FLOATX *dresidual, *dbtc, *dbt4c, *dqkv;
} Activations;

// Points every activation at memory + offset[i] bytes (gpt2_activation_layout's offsets).
static inline void gpt2_activations_wire_at(Activations *a, void *memory, const size_t offset[NUM_ACTIVATIONS]) {
    char *m = (char *)memory;
#define GPT2_ACT_X(i) ((GPT2_FLOATX *)(void *)(m + offset[i]))
#define GPT2_ACT_F(i) ((float *)(void *)(m + offset[i]))
    a->encoded = GPT2_ACT_X(A_ENCODED);
    a->ln1 = GPT2_ACT_X(A_LN1);     a->ln1_mean = GPT2_ACT_F(A_LN1_MEAN); a->ln1_rstd = GPT2_ACT_F(A_LN1_RSTD);
    a->qkv = GPT2_ACT_X(A_QKV);     a->atty = GPT2_ACT_X(A_ATTY);         a->att = GPT2_ACT_X(A_ATT);
    a->residual2 = GPT2_ACT_X(A_RESIDUAL2);
    a->ln2 = GPT2_ACT_X(A_LN2);     a->ln2_mean = GPT2_ACT_F(A_LN2_MEAN); a->ln2_rstd = GPT2_ACT_F(A_LN2_RSTD);
    a->fch = GPT2_ACT_X(A_FCH);     a->fch_gelu = GPT2_ACT_X(A_FCH_GELU); a->residual3 = GPT2_ACT_X(A_RESIDUAL3);
    a->lnf = GPT2_ACT_X(A_LNF);     a->lnf_mean = GPT2_ACT_F(A_LNF_MEAN); a->lnf_rstd = GPT2_ACT_F(A_LNF_RSTD);
    a->logits = GPT2_ACT_X(A_LOGITS); a->losses = GPT2_ACT_F(A_LOSSES);
    a->dresidual = GPT2_ACT_X(A_DRESIDUAL); a->dbtc = GPT2_ACT_X(A_DBTC);
    a->dbt4c = GPT2_ACT_X(A_DBT4C); a->dqkv = GPT2_ACT_X(A_DQKV);
#undef GPT2_ACT_X
#undef GPT2_ACT_F
}

// The packed layout in the kernels' element type, tensors back to back, per-layer tensor i
// holding slots[i] layers.
static inline void gpt2_activations_wire(Activations *a, void *memory, const GPT2Config *c, int B, int T,
                                         const int slots[NUM_ACTIVATIONS]) {
    size_t offset[NUM_ACTIVATIONS];
    gpt2_activation_layout(c, B, T, slots, sizeof(GPT2_FLOATX), 1, offset);
    gpt2_activations_wire_at(a, memory, offset);
}

// One layer's activations, for a batch of (B,T) (packed at that size). residual is the
// layer's input: the embeddings, or the previous layer's output.
typedef struct {
    GPT2_FLOATX *residual, *ln1; float *ln1_mean, *ln1_rstd; GPT2_FLOATX *qkv, *atty, *att, *residual2;
    GPT2_FLOATX *ln2; float *ln2_mean, *ln2_rstd; GPT2_FLOATX *fch, *fch_gelu, *residual3;
} LayerActs;
// Per-layer tensor i in slot slot[i] of its block (one slot: one layer at (B,T)); the input is
// residual3's slot in_slot, or the embeddings' output when in_slot < 0.
static inline LayerActs gpt2_layer_acts_at(const Activations *a, const GPT2Config *c, int B, int T,
                                           const int slot[NUM_ACTIVATIONS], int in_slot) {
    size_t N = (size_t)B * T, btc = N * c->channels, att = (size_t)B * c->num_heads * T * T;
    LayerActs x;
    x.residual = in_slot < 0 ? a->encoded : a->residual3 + (size_t)in_slot * btc;
    x.ln1 = a->ln1 + slot[A_LN1] * btc;
    x.ln1_mean = a->ln1_mean + slot[A_LN1_MEAN] * N; x.ln1_rstd = a->ln1_rstd + slot[A_LN1_RSTD] * N;
    x.qkv = a->qkv + slot[A_QKV] * 3 * btc;          x.atty = a->atty + slot[A_ATTY] * btc;
    x.att = a->att + slot[A_ATT] * att;              x.residual2 = a->residual2 + slot[A_RESIDUAL2] * btc;
    x.ln2 = a->ln2 + slot[A_LN2] * btc;
    x.ln2_mean = a->ln2_mean + slot[A_LN2_MEAN] * N; x.ln2_rstd = a->ln2_rstd + slot[A_LN2_RSTD] * N;
    x.fch = a->fch + slot[A_FCH] * 4 * btc;          x.fch_gelu = a->fch_gelu + slot[A_FCH_GELU] * 4 * btc;
    x.residual3 = a->residual3 + slot[A_RESIDUAL3] * btc;
    return x;
}
// Per-layer tensor i (gpt2_activation_in_slots: not a statistic) of a layer view.
static inline GPT2_FLOATX *gpt2_layer_tensor(const LayerActs *x, int i) {
    switch (i) {
    case A_LN1: return x->ln1;
    case A_QKV: return x->qkv;
    case A_ATTY: return x->atty;
    case A_ATT: return x->att;
    case A_RESIDUAL2: return x->residual2;
    case A_LN2: return x->ln2;
    case A_FCH: return x->fch;
    case A_FCH_GELU: return x->fch_gelu;
    default: return x->residual3;
    }
}
// Layer l's activations in the generic layout of recompute r.
static inline LayerActs gpt2_layer_acts(const Activations *a, const GPT2Config *c, GPT2Recompute r, int l, int B, int T) {
    int slot[NUM_ACTIVATIONS], L = c->num_layers;
    for (int i = 0; i < NUM_ACTIVATIONS; i++) slot[i] = gpt2_activation_is_layered(i) ? gpt2_recompute_slot(r, L, i, l) : 0;
    return gpt2_layer_acts_at(a, c, B, T, slot, l > 0 ? gpt2_recompute_slot(r, L, A_RESIDUAL3, l - 1) : -1);
}
// ----------------------------------------------------------------------------------------
// Elementwise math of the model, written once for the CPU kernels and the GPU kernels.

// e^x in plain arithmetic that compilers vectorise (libm's expf is a scalar call): 2^k * p(r)
// with r = x - k ln2 in [-ln2/2, ln2/2] and p the degree-6 Taylor polynomial; relative error
// below 2e-7 for x in [-87, 88] (inputs are clamped there: e^x underflows to ~1e-38, never NaN).
ZC_HD static inline float gpt2_exp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x); // compares, not fminf: they vectorise
    float k = rintf(x * 1.44269504f);
    float r = x - k * 0.693145752f - k * 1.42860677e-6f; // ln2 in two parts: exact products
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    // (unsigned: a NaN x, whose k converts to INT_MIN on x86, made this a shift of a negative
    // value, undefined; the result is NaN either way, since p is)
    uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}
// tanh(u) = 1 - 2/(e^{2u} + 1): absolute error below 3e-7.
ZC_HD static inline float gpt2_tanh(float u) { return 1.0f - 2.0f / (gpt2_exp(2.0f * u) + 1.0f); }

// GELU, tanh approximation as in GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
// and its derivative.
#define GPT2_GELU_SCALE 0.7978845608028654f
ZC_HD static inline float gpt2_gelu(float x) {
    return 0.5f * x * (1.0f + gpt2_tanh(GPT2_GELU_SCALE * (x + 0.044715f * x * x * x)));
}
ZC_HD static inline float gpt2_gelu_grad(float x) {
    float th = gpt2_tanh(GPT2_GELU_SCALE * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GPT2_GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

// ----------------------------------------------------------------------------------------
// Initialisation (GPT-2: N(0, 0.02); residual projections N(0, 0.02/sqrt(2L)); LN weight 1)

static inline uint64_t gpt2_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline float gpt2_randn(uint64_t *s) { // Box-Muller on two uniforms in (0, 1]
    double u1 = ((gpt2_splitmix64(s) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (gpt2_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Writes unit u's parameters (unit_numel elements, padding zeroed) into dst.
#define GPT2_INIT_CHUNK 65536 // elements drawn from one generator stream
#ifdef _OPENMP
#define GPT2_OMP_FOR _Pragma("omp parallel for schedule(static)")
#else
#define GPT2_OMP_FOR
#endif
static inline void gpt2_init_unit(const ParamLayout *lay, int u, uint64_t seed, float *dst) {
    const GPT2Config *c = &lay->cfg;
    memset(dst, 0, gpt2_unit_padded(lay, u) * sizeof(float));
    int l = u - 1; // layer index for layer units
    float *p = dst;
    for (int t = gpt2_unit_first_tensor(lay, u); t < gpt2_unit_end_tensor(lay, u); t++) {
        size_t n = gpt2_tensor_numel(c, t);
        if (t == P_LN1W || t == P_LN2W || t == P_LNFW) {
            for (size_t i = 0; i < n; i++) p[i] = 1.0f;
        } else if (gpt2_tensor_decays(t)) {
            float std = 0.02f;
            if (t == P_ATTPROJW || t == P_FCPROJW) std = 0.02f / sqrtf(2.0f * c->num_layers);
            size_t real = t == P_WTE ? (size_t)c->vocab_size * c->channels : n; // padded rows stay 0
            // One generator per chunk of the tensor: chunks fill in parallel, and the values
            // depend only on (seed, tensor, layer, chunk), never on threads or ranks.
            long chunks = (long)((real + GPT2_INIT_CHUNK - 1) / GPT2_INIT_CHUNK);
            GPT2_OMP_FOR
            for (long k = 0; k < chunks; k++) {
                uint64_t s = seed ^ ((uint64_t)t << 40) ^ ((uint64_t)(l + 1) << 20) ^ ((uint64_t)k << 48) ^ (uint64_t)k;
                s = gpt2_splitmix64(&s); // decorrelate neighbouring streams
                size_t end = (size_t)(k + 1) * GPT2_INIT_CHUNK < real ? (size_t)(k + 1) * GPT2_INIT_CHUNK : real;
                for (size_t i = (size_t)k * GPT2_INIT_CHUNK; i < end; i++) p[i] = std * gpt2_randn(&s);
            }
        } // biases stay 0
        p += n;
    }
}

// ----------------------------------------------------------------------------------------
// Checkpoint files (llm.c format)

typedef struct {
    GPT2Config cfg;
    int version; // 3: fp32 parameters, 5: bf16
} GPT2FileInfo;

// Reads and checks the header. Returns 0, or prints one line naming the file and returns -1.
static inline int gpt2_read_header(FILE *f, const char *path, GPT2FileInfo *info) {
    int32_t h[256];
    if (fread(h, sizeof(int32_t), 256, f) != 256) {
        fprintf(stderr, "error: %s: too short for a checkpoint header (1024 bytes)\n", path);
        return -1;
    }
    if (h[0] != GPT2_MAGIC) {
        fprintf(stderr, "error: %s: bad magic %d (expected %d, an llm.c model file)\n", path, h[0], GPT2_MAGIC);
        return -1;
    }
    if (h[1] != 3 && h[1] != 5) {
        fprintf(stderr, "error: %s: unsupported version %d (expected 3, fp32 parameters, or 5, bf16)\n", path, h[1]);
        return -1;
    }
    info->version = h[1];
    info->cfg.max_seq_len = h[2];
    info->cfg.vocab_size = h[3];
    info->cfg.num_layers = h[4];
    info->cfg.num_heads = h[5];
    info->cfg.channels = h[6];
    info->cfg.padded_vocab_size = h[7];
    const char *why = gpt2_config_problem(&info->cfg);
    if (why) {
        fprintf(stderr, "error: %s: bad model shape in header: %s\n", path, why);
        return -1;
    }
    return 0;
}

static inline size_t gpt2_file_elem(int version) { return version == 5 ? 2 : 4; } // bf16 or fp32

// Bytes a file of this version (3: fp32, 5: bf16) with this config must have.
static inline size_t gpt2_file_bytes(const GPT2Config *c, int version) {
    size_t n = 0;
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        n += gpt2_tensor_numel(c, t) * (gpt2_tensor_is_layered(t) ? (size_t)c->num_layers : 1);
    return 256 * sizeof(int32_t) + n * gpt2_file_elem(version);
}

// Byte offset of tensor t of layer l in a file of this version.
static inline long gpt2_file_offset(const GPT2Config *c, int t, int l, int version) {
    size_t off = 256 * sizeof(int32_t), e = gpt2_file_elem(version);
    for (int s = 0; s < t; s++) off += gpt2_tensor_numel(c, s) * (gpt2_tensor_is_layered(s) ? (size_t)c->num_layers : 1) * e;
    return (long)(off + (size_t)l * gpt2_tensor_numel(c, t) * e);
}

// Moves unit u's tensors between a file and `unit` (the unit's first element, fp32 in memory;
// a version-5 file holds bf16, rounded to nearest-even on the way out). Unit by unit, so a
// trainer that never holds the whole model (ZeRO-3) reads and writes it with one unit of
// memory. Returns 0 or -1 (the caller names the file).
static inline int gpt2_unit_file_io(FILE *f, const ParamLayout *lay, int u, float *unit, int writing, int version) {
    int l = u - 1, bad = 0;
    bf16_t *tmp = NULL;
    for (int t = gpt2_unit_first_tensor(lay, u); t < gpt2_unit_end_tensor(lay, u) && !bad; t++) {
        size_t n = gpt2_tensor_numel(&lay->cfg, t);
        float *p = unit + gpt2_offset_in_unit(lay, t);
        if (fseek(f, gpt2_file_offset(&lay->cfg, t, gpt2_tensor_is_layered(t) ? l : 0, version), SEEK_SET)) { bad = 1; break; }
        if (version == 3) {
            bad = (writing ? fwrite(p, sizeof(float), n, f) : fread(p, sizeof(float), n, f)) != n;
            continue;
        }
        bf16_t *grown = (bf16_t *)realloc(tmp, n * sizeof(bf16_t));
        if (!grown) { bad = 1; break; }
        tmp = grown;
        if (writing) { f32_to_bf16_array(tmp, p, n); bad = fwrite(tmp, sizeof(bf16_t), n, f) != n; }
        else { bad = fread(tmp, sizeof(bf16_t), n, f) != n; if (!bad) bf16_to_f32_array(p, tmp, n); }
    }
    free(tmp);
    return bad ? -1 : 0;
}

// Writes a full flat buffer's tensors in file order after a header: gradient dumps, tests.
static inline int gpt2_write_tensors(FILE *f, const ParamLayout *lay, const float *flat) {
    for (int u = 0; u < lay->num_units; u++)
        if (gpt2_unit_file_io(f, lay, u, (float *)flat + lay->unit_offset[u], 1, 3)) return -1;
    return 0;
}

// Opens a checkpoint and checks its header and size. Returns the open file positioned at the
// parameters, or NULL after printing one line naming the file.
static inline FILE *gpt2_open_checkpoint(const char *path, GPT2FileInfo *info) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: %s: cannot open checkpoint\n", path);
        return NULL;
    }
    if (gpt2_read_header(f, path, info)) { fclose(f); return NULL; }
    size_t want = gpt2_file_bytes(&info->cfg, info->version);
    fseek(f, 0, SEEK_END);
    long have = ftell(f);
    if (have < 0 || (size_t)have != want) {
        fprintf(stderr, "error: %s: file has %ld bytes but its header describes %zu (truncated or not this model)\n",
                path, have, want);
        fclose(f);
        return NULL;
    }
    fseek(f, 256 * sizeof(int32_t), SEEK_SET);
    return f;
}

static inline void gpt2_fill_header(int32_t h[256], const GPT2Config *c, int version) {
    memset(h, 0, 256 * sizeof(int32_t));
    h[0] = GPT2_MAGIC; h[1] = version; h[2] = c->max_seq_len; h[3] = c->vocab_size;
    h[4] = c->num_layers; h[5] = c->num_heads; h[6] = c->channels; h[7] = c->padded_vocab_size;
}

// Saving is crash-safe: the trainer writes PATH.tmp unit by unit and then renames it over
// PATH, so an interrupted save never destroys the file that was there.
static inline int gpt2_tmp_path(char *tmp, size_t n, const char *path) {
    int k = snprintf(tmp, n, "%s.tmp", path);
    if (k < 0 || (size_t)k >= n) { fprintf(stderr, "error: %s: path too long\n", path); return -1; }
    return 0;
}
static inline FILE *gpt2_begin_checkpoint(const char *path, const GPT2Config *c, int version) {
    char tmp[4200];
    if (gpt2_tmp_path(tmp, sizeof(tmp), path)) return NULL;
    FILE *f = fopen(tmp, "wb");
    if (!f) { fprintf(stderr, "error: %s: cannot create\n", tmp); return NULL; }
    int32_t h[256];
    gpt2_fill_header(h, c, version);
    if (fwrite(h, sizeof(int32_t), 256, f) != 256) { fclose(f); return NULL; }
    return f;
}
static inline int gpt2_end_checkpoint(FILE *f, const char *path, int ok) {
    char tmp[4200];
    if (gpt2_tmp_path(tmp, sizeof(tmp), path)) { fclose(f); return -1; }
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "error: %s: write failed\n", path);
        remove(tmp);
        return -1;
    }
    return 0;
}

// The GPT-2 family by name (d12 = GPT-2 124M, ...). Returns 0 when the name is known.
static inline int gpt2_preset(const char *name, GPT2Config *c) {
    static const struct { const char *name; int L, C, NH; } presets[] = {
        {"d12", 12, 768, 12}, {"d24", 24, 1024, 16}, {"d36", 36, 1280, 20}, {"d48", 48, 1600, 25}};
    for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
        if (strcmp(name, presets[i].name) == 0) {
            c->num_layers = presets[i].L; c->channels = presets[i].C; c->num_heads = presets[i].NH;
            c->max_seq_len = 1024; c->vocab_size = 50257; c->padded_vocab_size = 50304;
            return 0;
        }
    }
    return -1;
}

#endif // GPT2_H
