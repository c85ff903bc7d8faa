// cpu/storage.h: the CPU trainer's model as the passes see it (GPT2) and core/model.h's storage
// hooks for it: where the kernels find each unit's parameters and gradients and each layer's
// activations, with 16-bit storage converted at the edges.
//
// Contract
//   - Included by train_gpt_cpu.c after its kernels and before core/model.h. It takes from the
//     trainer CpuKernels, the kernels' per-run context, with at least `mm` (cpu/matmul.h's
//     CpuMatmul: the hooks read which matmul path runs) and `notes` (cpu/tensor_notes.h's
//     TensorNotes, which the hooks write), and cpu_kernels_setup(k, cfg, B, T, dtype, rank,
//     &work_bytes) / cpu_kernels_free(k).
//   - gpt2_build(m, cfg, B, T, rank, world, zo, recompute, backend): ZeRO's state (zero_init) and
//     the activations and working memory for batches up to (B,T), every byte counted into
//     zero.h's MEM_ACTIVATIONS and MEM_WORKSPACE as it is allocated (cpu/workspace.h predicts
//     the same totals: test_planner compares them). gpt2_free(m) frees it all.
//   - The hooks, with model.h's signatures and meanings: gpt2_unit_params, gpt2_unit_grads,
//     gpt2_unit_grads_done, gpt2_layer_acts_forward, gpt2_act_rounded, gpt2_layer_store,
//     gpt2_layers_output, gpt2_layer_acts_recompute, gpt2_layer_recomputed,
//     gpt2_layer_acts_backward; and upload_batch (the kernels read the batch where it is).
//   - Where parameters, gradients and optimizer state live is ZeRO's business: the hooks ask
//     zero.h for each unit's as the passes reach it. The kernels compute in fp32. In a 16-bit run
//     (bf16, fp16) ZeRO keeps parameters, gradients and buffers in 16 bits and the activations of
//     every layer are stored in 16 bits, so the hooks convert at the edges: a unit's parameters
//     are widened into an fp32 view when the passes reach it (bf16 matmuls read the 16-bit
//     weights themselves), its gradient accumulates in fp32 and is rounded into ZeRO's 16-bit
//     buffer when the backward is done with it, and each layer computes in an fp32 slot: every
//     activation that a later kernel reads is rounded to 16 bits as soon as it is produced
//     (gpt2_act_rounded), and what the run keeps for the backward (cpu/workspace.h: every
//     layer's tensors, or with recompute what that keeps) is stored in 16 bits then and widened
//     again for the backward or a recompute. In fp32 they pass zero.h's pointers through. (The
//     GPU trainer's kernels read and write 16 bits directly; its hooks pass them through.)
//   - What the kernels may use beyond their fp32 tensors the hooks say in kern.notes, and
//     nowhere else: bf16 copies already stored, outputs wanted in bf16 only, how each weight
//     gradient is written (cpu/tensor_notes.h).
// CPU trainer only (C11, OpenMP); no global state.
#ifndef CPU_STORAGE_H
#define CPU_STORAGE_H

#include "core/gpt2.h"
#include "zero.h"
#include "cpu/memory.h"
#include "cpu/matmul.h"
#include "cpu/tensor_notes.h"
#include "cpu/workspace.h"

// dst (of type dtype) += src (fp32), rounded to dtype: gradients accumulate so; with add 0,
// dst = src rounded (a gradient's first contribution). (One loop per type, so that each
// vectorises.)
static void add_to(void *dst, const float *src, size_t n, int dtype, int add) {
    if (!add) zc_narrow(dst, src, n, dtype);
    else if (dtype == ZC_F32) {
        float *d = (float *)dst;
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) d[i] += src[i];
    } else if (dtype == ZC_BF16) {
        bf16_t *d = (bf16_t *)dst;
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + src[i]);
    } else {
        fp16_t *d = (fp16_t *)dst;
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) d[i] = f32_to_fp16(fp16_to_f32(d[i]) + src[i]);
    }
}

enum { VIEW_EMBED, VIEW_FINAL, VIEW_LAYER0, VIEW_LAYER1, NUM_VIEWS };

typedef struct {
    GPT2Config cfg;
    Zero z;                        // parameters, gradients, optimizer state, ZeRO buffers
    int dtype, mixed;              // ZC_F32 / ZC_BF16 / ZC_FP16; mixed = dtype != ZC_F32
    GPT2Recompute recompute;       // what the forward keeps, what the backward recomputes (gpt2.h)
    Activations acts;              // fp32, laid out as cpu_activation_slots says
    float *acts_memory;
    uint16_t *acts16;              // 16-bit runs: what they keep in 16 bits (cpu_kept16_offset)
    int slot_layer[2];             // without recompute, 16-bit: the layer the fp32 slot holds (-1: none)
    float *view[NUM_VIEWS];        // 16-bit runs: fp32 views of units' parameters
    int view_unit[NUM_VIEWS];
    unsigned long view_forward[NUM_VIEWS]; // ...valid while zero.h's forward count is unchanged
    float *gacc_embed, *gacc_final, *gacc_layer; // 16-bit runs: fp32 gradient accumulators
    void *grad_target[GPT2_MAX_UNITS];           // where a unit's fp32 gradient is rounded into
    CpuKernels kern;               // the kernels' context (the trainer's), with the notes the hooks leave them
    uint8_t *batch_rows;           // bf16 runs: a flag per vocabulary row, set for the batch's tokens
    size_t bytes_activations;
    int B, T;                      // the largest batch the activations hold
    int *inputs, *targets;         // (B,T)
    const int *dev_inputs, *dev_targets; // where the kernels read the batch: here, the same arrays
    int batch_n;                   // B*T of the batch uploaded last
} GPT2;

static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int rank, int world, const ZeroOptions *zo,
                       GPT2Recompute recompute, ZeroBackend be) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    int dtype = zo->dtype;
    m->dtype = dtype;
    m->mixed = dtype != ZC_F32;
    m->recompute = recompute;
    zero_init(&m->z, cfg, rank, world, zo, be);
    m->z.grads_written = 1; // the hooks below write a fresh gradient (gpt2_unit_grads): no zeroing
    // Every allocation below is counted as it is made; the planner predicts the totals
    // (cpu_activation_bytes, cpu_workspace_bytes) and test_planner compares the two.
    size_t *act = &m->z.mem[MEM_ACTIVATIONS], *work = &m->z.mem[MEM_WORKSPACE];
    int slots[NUM_ACTIVATIONS];
    cpu_activation_slots(cfg, recompute, m->mixed, slots);
    size_t act_floats = cpu_activation_floats(cfg, B, T, recompute, m->mixed);
    m->acts_memory = xcalloc_floats(act_floats);
    *act += act_floats * sizeof(float);
    gpt2_activations_wire(&m->acts, m->acts_memory, cfg, B, T, slots);
    m->slot_layer[0] = m->slot_layer[1] = -1;
    if (m->mixed) {
        size_t n16 = cpu_kept16_numel(cfg, recompute, B, T);
        m->acts16 = (uint16_t *)xcalloc_bytes(n16 * sizeof(uint16_t));
        *act += n16 * sizeof(uint16_t);
        const ParamLayout *lay = &m->z.lay;
        size_t embed = gpt2_unit_padded(lay, UNIT_EMBED), fin = gpt2_unit_padded(lay, gpt2_final_unit(lay));
        size_t layer = gpt2_unit_padded(lay, 1);
        size_t view_n[NUM_VIEWS] = {embed, fin, layer, layer};
        for (int k = 0; k < NUM_VIEWS; k++) {
            m->view[k] = xcalloc_floats(view_n[k]);
            m->view_unit[k] = -1;
            *work += view_n[k] * sizeof(float);
        }
        m->gacc_embed = xcalloc_floats(embed);
        m->gacc_final = xcalloc_floats(fin);
        m->gacc_layer = xcalloc_floats(layer);
        *work += (embed + fin + layer) * sizeof(float);
        if (dtype == ZC_BF16) {
            m->batch_rows = (uint8_t *)xcalloc_bytes((size_t)cfg->padded_vocab_size);
            *work += (size_t)cfg->padded_vocab_size;
        }
    }
    cpu_kernels_setup(&m->kern, cfg, B, T, dtype, rank, work);
    m->bytes_activations = *act;
    m->B = B;
    m->T = T;
    m->inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    m->targets = (int *)xmalloc((size_t)B * T * sizeof(int));
}

static void gpt2_free(GPT2 *m) {
    zero_free(&m->z);
    for (int k = 0; k < NUM_VIEWS; k++) free(m->view[k]);
    free(m->gacc_embed); free(m->gacc_final); free(m->gacc_layer); free(m->acts16); free(m->batch_rows);
    cpu_kernels_free(&m->kern);
    free(m->acts_memory); free(m->inputs); free(m->targets);
}

// --- the storage hooks model.h calls ---

// bf16 runs on gemm_bf16 (not its sgemm fallback): the matmuls read the 16-bit weights and the
// stored 16-bit activations themselves, and write weight gradients straight into 16 bits.
static int bf16_gemm(const GPT2 *m) { return m->dtype == ZC_BF16 && !m->kern.mm.via_sgemm; }

static int view_of(const GPT2 *m, int u) {
    return u == UNIT_EMBED ? VIEW_EMBED : u == gpt2_final_unit(&m->z.lay) ? VIEW_FINAL : VIEW_LAYER0 + u % 2;
}
// Widen one run of a unit's 16-bit parameters into its fp32 view. A bf16 run's matmuls read the
// 16-bit weights, so only what other kernels read is widened: everything but the layers'
// weight matrices, and of the token embedding (the LM head's weights too) only the rows of the
// batch's tokens, which the token lookup reads (wte is unit 0's first tensor: [0, wte_end)).
typedef struct { float *dst; const void *src; size_t base, wte_end; int dtype, skip_matrices; } WidenRun;
static void widen_segment(const ParamSegment *seg, void *ctx) {
    WidenRun *w = (WidenRun *)ctx;
    if (w->skip_matrices && seg->kind == SEG_DECAY) return;
    size_t lo = seg->begin - w->base;
    if (lo < w->wte_end) return; // (a segment never straddles a tensor's end)
    zc_widen(w->dst + lo, (const uint16_t *)w->src + lo, seg->end - seg->begin, w->dtype);
}
static UnitParams gpt2_unit_params(GPT2 *m, int u, int next) {
    Zero *z = &m->z;
    void *p = zero_params(z, u, next);
    UnitParams up = {(float *)p, NULL};
    if (!m->mixed) return up;
    int k = view_of(m, u);
    if (m->view_unit[k] != u || m->view_forward[k] != z->forwards) {
        size_t begin = z->lay.unit_offset[u];
        int rows_only = bf16_gemm(m) && u == UNIT_EMBED;
        size_t C = (size_t)m->cfg.channels;
        WidenRun w = {m->view[k], p, begin, rows_only ? gpt2_tensor_numel(&m->cfg, P_WTE) : 0, m->dtype,
                      bf16_gemm(m) && zero_is_layer(z, u)};
        gpt2_for_each_segment(&z->lay, begin, begin + gpt2_unit_padded(&z->lay, u), widen_segment, &w);
        if (rows_only) // the batch is uploaded before the forward asks for the embeddings
            for (int i = 0; i < m->batch_n; i++) {
                size_t row = (size_t)m->dev_inputs[i] * C;
                zc_widen(m->view[k] + row, (const uint16_t *)p + row, C, m->dtype);
            }
        m->view_unit[k] = u;
        m->view_forward[k] = z->forwards;
    }
    up.f32 = m->view[k];
    up.x16 = m->dtype == ZC_BF16 ? p : NULL;
    return up;
}

// The fp32 accumulator unit u's gradient collects in (16-bit runs)
static float *grad_acc(const GPT2 *m, int u) {
    return u == UNIT_EMBED ? m->gacc_embed : u == gpt2_final_unit(&m->z.lay) ? m->gacc_final : m->gacc_layer;
}
// The weight matrices of the layers and wte go straight into 16 bits (grads16_direct) in bf16
// runs on gemm_bf16.
static int grads_direct(const GPT2 *m, int u) {
    return bf16_gemm(m) && (zero_is_layer(&m->z, u) || u == UNIT_EMBED);
}
// The part of unit u's gradient (as the kernels see it: `acc`) that gradients collect in by
// adding: all of it, or, where the weight products write straight into the final gradient
// (16-bit runs whose matrices go straight into 16 bits), all but a layer's matrices
// (SEG_DECAY) and the embeddings' wte, [0, wte_end) (whose rows of the batch's tokens
// gpt2_unit_grads_done adds). Zeroed when the unit's backward starts (op 0); in 16-bit runs
// added (op 1), or on a fresh gradient stored (op 2), into the 16-bit gradient when it is done.
typedef struct { float *acc; void *target; size_t base, wte_end; int dtype, skip_matrices, op; } AccRun;
static void acc_segment(const ParamSegment *seg, void *ctx) {
    AccRun *r = (AccRun *)ctx;
    if (r->skip_matrices && seg->kind == SEG_DECAY) return;
    size_t lo = seg->begin - r->base, n = seg->end - seg->begin;
    if (lo < r->wte_end) return; // (a segment never straddles a tensor's end)
    if (r->op) add_to((char *)r->target + lo * zc_dtype_size(r->dtype), r->acc + lo, n, r->dtype, r->op == 1);
    else zero_bytes(r->acc + lo, n * sizeof(float));
}
static void acc_pass(GPT2 *m, int u, float *acc, int products_write, int op) {
    size_t begin = m->z.lay.unit_offset[u];
    int layer = zero_is_layer(&m->z, u);
    AccRun r = {acc, m->grad_target[u], begin, products_write && u == UNIT_EMBED ? gpt2_tensor_numel(&m->cfg, P_WTE) : 0,
                m->dtype, products_write && layer, op};
    gpt2_for_each_segment(&m->z.lay, begin, begin + gpt2_unit_padded(&m->z.lay, u), acc_segment, &r);
}
static float *gpt2_unit_grads(GPT2 *m, int u) {
    void *g = zero_grads(&m->z, u);
    int fresh = zero_grads_fresh(&m->z, u), pw = m->kern.mm.f32_gemm; // (gemm_f32 products write with beta 0)
    GradsOpen *o = &m->kern.notes.grads[u == UNIT_EMBED ? 0 : 1];
    if (!m->mixed) { // a fresh gradient: zeroed here where the products do not write it. (On OpenBLAS
        // they add to a zeroed buffer: with beta 0 its threads zeroed their shares of each matrix,
        // blocks that are not contiguous, with plain stores: 3.5% of a 2-thread fp32 step, against
        // one memset per thread here. The same sums.)
        if (fresh) acc_pass(m, u, (float *)g, pw, 0);
        *o = (GradsOpen){(const float *)g, gpt2_unit_padded(&m->z.lay, u), fresh && pw, NULL, NULL};
        return (float *)g;
    }
    m->grad_target[u] = g;
    // (fp16 on gemm_f32: the accumulator holds nothing of this micro-step yet, so the products
    // write their parts of it)
    acc_pass(m, u, grad_acc(m, u), grads_direct(m, u) || pw, 0);
    *o = (GradsOpen){grad_acc(m, u), gpt2_unit_padded(&m->z.lay, u), pw, NULL, NULL};
    if (grads_direct(m, u)) {
        o->fresh = fresh;
        o->g16 = (bf16_t *)g;
        if (u == UNIT_EMBED) { // wte: the LM head's weights; the batch was uploaded by the forward
            o->n = gpt2_tensor_numel(&m->cfg, P_WTE);
            memset(m->batch_rows, 0, (size_t)m->cfg.padded_vocab_size);
            for (int i = 0; i < m->batch_n; i++) m->batch_rows[m->dev_inputs[i]] = 1;
            o->rows = m->batch_rows;
        }
    }
    return grad_acc(m, u);
}
static void gpt2_unit_grads_done(GPT2 *m, int u) {
    GradsOpen *o = &m->kern.notes.grads[u == UNIT_EMBED ? 0 : 1];
    if (m->mixed) {
        int fresh = zero_grads_fresh(&m->z, u); // (the micro-step is the one gpt2_unit_grads saw)
        acc_pass(m, u, grad_acc(m, u), grads_direct(m, u), fresh ? 2 : 1);
        if (o->rows) { // wte's rows of the batch's tokens
            size_t C = (size_t)m->cfg.channels;
#pragma omp parallel for schedule(dynamic, 64) // (each add_to then runs on its thread: nesting is off)
            for (int r = 0; r < m->cfg.padded_vocab_size; r++)
                if (o->rows[r]) add_to(o->g16 + (size_t)r * C, o->acc + (size_t)r * C, C, m->dtype, !fresh);
        }
    }
    memset(o, 0, sizeof *o);
    zero_grads_done(&m->z, u);
}

// Layer l's activations in the fp32 block (cpu/workspace.h's slots), at the batch's (B,T).
static LayerActs layer_acts(const GPT2 *m, int l, int B, int T) {
    int slot[NUM_ACTIVATIONS], in = cpu_layer_slots(&m->cfg, m->recompute, m->mixed, l, slot);
    return gpt2_layer_acts_at(&m->acts, &m->cfg, B, T, slot, in);
}
// Where a 16-bit run keeps per-layer tensor i of layer l in 16 bits, or NULL.
static uint16_t *kept16(const GPT2 *m, int i, int l, int B, int T) {
    long at = cpu_kept16_offset(&m->cfg, m->recompute, B, T, i, l);
    return at < 0 ? NULL : m->acts16 + at;
}
static size_t layer_numel(const GPT2Config *c, int i, int B, int T) {
    size_t n[NUM_ACTIVATIONS];
    gpt2_activation_numels(c, B, T, n);
    return n[i] / c->num_layers;
}
// Widens layer l's kept tensor i from 16 bits into x (a recompute's or a backward's input).
static void widen_kept(const GPT2 *m, const LayerActs *x, int i, int l, int B, int T) {
    zc_widen(gpt2_layer_tensor(x, i), kept16(m, i, l, B, T), layer_numel(&m->cfg, i, B, T), m->dtype);
}

// bf16 runs on gemm_bf16: the matmuls read layer l's tensor i from its stored 16 bits, where the
// run keeps it (TensorNotes.stored: set as each tensor is produced or widened, cleared when
// another layer's pass begins).
static void stored16_set(GPT2 *m, const LayerActs *x, int i, int l, int B, int T) {
    uint16_t *h = bf16_gemm(m) ? kept16(m, i, l, B, T) : NULL;
    m->kern.notes.stored[i].f32 = h ? gpt2_layer_tensor(x, i) : NULL;
    m->kern.notes.stored[i].x16 = (const bf16_t *)h;
}
static void stored16_clear(GPT2 *m) {
    memset(m->kern.notes.stored, 0, sizeof m->kern.notes.stored);
    memset(m->kern.notes.out16, 0, sizeof m->kern.notes.out16);
}
// What the forward and the backward (model.h) read of a layer's tensor i only through its stored
// 16 bits, as a matmul's input or (fch) GELU's: with those there, the fp32 tensor is never read,
// so the forward need not round it in place nor the backward widen it back (attention's
// backward uses atty's slot as scratch, which it writes before reading).
static int reads_stored16_only(int i) { return i == A_LN1 || i == A_ATTY || i == A_LN2 || i == A_FCH || i == A_FCH_GELU; }

static LayerActs gpt2_layer_acts_forward(GPT2 *m, int l, int B, int T) {
    m->slot_layer[l % 2] = l;
    stored16_clear(m);
    LayerActs x = layer_acts(m, l, B, T);
    // the tensors that gpt2_act_rounded would only narrow into their stored 16 bits, for the
    // kernels that write those bits themselves (bf16 runs on gemm_bf16, as stored16_set)
    if (bf16_gemm(m))
        for (int i = 0; i < NUM_ACTIVATIONS; i++) {
            uint16_t *h = gpt2_activation_is_layered(i) && reads_stored16_only(i) ? kept16(m, i, l, B, T) : NULL;
            m->kern.notes.out16[i].f32 = h ? gpt2_layer_tensor(&x, i) : NULL;
            m->kern.notes.out16[i].x16 = (bf16_t *)h;
        }
    return x;
}
// 16-bit runs: the kernel's output is rounded in place, and stored when the run keeps it; only
// stored where its readers read nothing else (reads_stored16_only, with the stored copy there).
static void gpt2_act_rounded(GPT2 *m, const LayerActs *x, int l, int i, int B, int T) {
    if (!m->mixed) return;
    uint16_t *h = kept16(m, i, l, B, T);
    float *p = gpt2_layer_tensor(x, i);
    size_t n = layer_numel(&m->cfg, i, B, T);
    stored16_set(m, x, i, l, B, T);
    if (m->kern.notes.out16[i].done) { // the kernel that produced it wrote its 16 bits (out16)
        m->kern.notes.out16[i].done = 0;
        return;
    }
    if (m->kern.notes.stored[i].f32 && reads_stored16_only(i)) zc_narrow(h, p, n, m->dtype);
    else zc_round_array(p, h, n, m->dtype);
}
// The forward is done with layer l: without recompute the attention's probabilities are stored
// in 16 bits too (the rest was as it was produced), and rounded in the slot, which the backward
// reads while it still holds the layer.
static void gpt2_layer_store(GPT2 *m, int l, int B, int T) {
    if (!m->mixed || m->recompute.mode != RECOMPUTE_NONE) return;
    LayerActs x = layer_acts(m, l, B, T);
    zc_round_array(x.att, kept16(m, A_ATT, l, B, T), layer_numel(&m->cfg, A_ATT, B, T), m->dtype);
}
static float *gpt2_layers_output(GPT2 *m, int B, int T) { return layer_acts(m, m->cfg.num_layers - 1, B, T).residual3; }
// A recompute of layer l reads what the run kept of it, and its input, from the fp32 block:
// 16-bit runs widen them there (a segment's later layers read the input their predecessor's
// recompute left).
static LayerActs gpt2_layer_acts_recompute(GPT2 *m, int l, int B, int T) {
    LayerActs x = layer_acts(m, l, B, T);
    if (!m->mixed) return x;
    stored16_clear(m);
    if (l > 0 && l == gpt2_segment_start(m->recompute, l)) { // the input: residual3 of layer l - 1
        LayerActs prev = layer_acts(m, l - 1, B, T);
        widen_kept(m, &prev, A_RESIDUAL3, l - 1, B, T);
    }
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (i != A_RESIDUAL3 && kept16(m, i, l, B, T)) {
            widen_kept(m, &x, i, l, B, T);
            stored16_set(m, &x, i, l, B, T);
        }
    return x;
}
static void gpt2_layer_recomputed(GPT2 *m, int l, int B, int T) {
    if (!m->mixed) return;
    LayerActs x = layer_acts(m, l, B, T);
    zc_round_array(x.att, NULL, layer_numel(&m->cfg, A_ATT, B, T), m->dtype);
}
// Layer l's activations for its backward. With recompute they are where the recompute left
// them. Without, 16-bit runs widen them from 16 bits unless the slot still holds them (bf16 runs
// on gemm_bf16 leave out what only the matmuls read: they read the 16 bits), and the layer's
// input (the output of layer l-1) into the other slot's residual3.
static LayerActs gpt2_layer_acts_backward(GPT2 *m, int l, int B, int T) {
    LayerActs x = layer_acts(m, l, B, T);
    if (!m->mixed || m->recompute.mode != RECOMPUTE_NONE) return x;
    stored16_clear(m);
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (gpt2_activation_in_slots(i)) stored16_set(m, &x, i, l, B, T);
    if (m->slot_layer[l % 2] != l) {
        for (int i = 0; i < NUM_ACTIVATIONS; i++)
            if (gpt2_activation_in_slots(i) && !(m->kern.notes.stored[i].f32 && reads_stored16_only(i)))
                widen_kept(m, &x, i, l, B, T);
        m->slot_layer[l % 2] = l;
    }
    if (l > 0 && m->slot_layer[(l - 1) % 2] != l - 1) {
        LayerActs prev = layer_acts(m, l - 1, B, T);
        widen_kept(m, &prev, A_RESIDUAL3, l - 1, B, T);
        m->slot_layer[(l - 1) % 2] = -1; // holds only that
    }
    return x;
}

// The batch is already where the kernels read it.
static void upload_batch(GPT2 *m, const int *inputs, const int *targets, int N) {
    m->batch_n = N;
    m->dev_inputs = inputs;
    m->dev_targets = targets;
}

#endif // CPU_STORAGE_H
