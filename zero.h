// zero.h: ZeRO stages 0-3 as a schedule of gathers, reductions and updates, independent of
// the communication backend (MPI in train_gpt_cpu.c, NCCL in train_gpt.cu).
//
// Contract
//   Partitioning. The flat parameter buffer (gpt2.h) is cut into units: the embeddings (wte,
//   wpe), each transformer layer, the final LayerNorm. Every unit is padded to a multiple of
//   world * ZERO_ALIGN elements, and rank r owns the r-th of world equal slices of EVERY unit.
//   A rank's "shard" is its slices of all units, back to back: num_flat / world elements.
//   Padding elements are zero, stay zero through the update, and add nothing to the gradient norm.
//
//   What a rank keeps. In fp32 the parameters are their own master copy; in bf16/fp16
//   (mixed precision) parameters, gradients and every buffer are 16-bit, and fp32 master
//   weights are kept with the optimizer's state. The optimizer's state is `nstate` fp32 arrays
//   laid out like the parameters (optimizer.h's slices: AdamW's m and v, Lion's m, ...), which
//   this header partitions and hands to the update without interpreting them. With AdamW
//   K = 4 (master) + 8 (m, v) = 12 bytes/param, partitioned like m and v:
//                                                                 fp32          16-bit
//     stage 0: everything in full                                 16            2 + 2 + 12
//     stage 1: parameters and gradients in full, the rest shard   8 + 8/N       2 + 2 + 12/N
//     stage 2: parameters in full; the rest of its shard          4 + 12/N      2 + 14/N
//     stage 3: only its shard of everything                       16/N          16/N
//   plus bounded buffers: gradient buckets (stages 2, 3) and gather buffers (stage 3).
//   The element type of parameters, gradients and buffers is z->dtype (mixed_precision.h);
//   they are void pointers, indexed with zero_at.
//
//   The schedule. The model calls the hooks below around each unit's forward and backward;
//   they return where the unit's parameters and gradients are, and start the collectives:
//     stage 0: in the last micro-step, each unit's gradient is all-reduced as soon as the
//              backward has finished with it (overlapping the rest of the backward).
//     stage 1: the same moment, a reduce-scatter: each rank receives the summed gradient of
//              its slice; after the update, the parameters are all-gathered.
//     stage 2: every micro-step, each unit's gradient is produced in a bucket, reduce-scattered
//              into the owner's shard accumulator, and the bucket reused.
//     stage 3: as stage 2, and before each unit's forward and backward its parameters are
//              all-gathered into a gather buffer; the next unit's gather is started (prefetch)
//              before the current unit computes. A gathered unit is kept while no other unit
//              needs its buffer: the embeddings (used by the token lookup and again by the tied
//              LM head, forward and backward; the lookup's backward needs no weights) and the
//              final LayerNorm are gathered once per micro-step, and the last two layers are
//              still in the two layer buffers when the backward begins. Every other layer is
//              gathered twice per micro-step.
//   Accounting. Every collective's bytes are counted in the ring model (all-gather or
//   reduce-scatter of M bytes over N ranks: M(N-1)/N; all-reduce: twice that), and every
//   buffer this header asks the backend to allocate is counted by kind.
//   Timeline (core/trace.h, z->trace, NULL: none). Each collective is a span from its issue to
//   its completion (as the backend's wait reports it), named all_gather, reduce_scatter or
//   all_reduce, with its unit and the bytes counted above; the time the caller's thread spends
//   blocked in a wait (or in a progress poke while collectives are in flight: MPI moves data
//   inside those calls) is a "wait" span; each unit's update is an "update" span.
//
//   The backend (ZeroBackend) performs what it is handed: non-blocking collectives identified
//   by a small integer, a wait and a progress poke, a blocking sum of a few doubles, and
//   memory (allocate, zero, add). It never decides what to communicate.
//   Mixed precision: the update reads the 16-bit gradient (times OptStep.grad_scale, which
//   also removes the loss scale), updates the fp32 master weight and rounds it to nearest even
//   into the 16-bit parameter; collectives run in 16 bits (sums rounded as they go, as NCCL's).
//   Checkpoints read and write the master weights and the state arrays through
//   zero_get_slice / zero_set_unit and zero_get_state_slice / zero_set_state_unit, one unit's
//   slice at a time, without knowing where a stage keeps them.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_H
#define ZERO_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "mixed_precision.h"
#include "core/trace.h"

#define ZERO_ALIGN 16 // elements: every slice starts on a 64-byte boundary in fp32

enum { ZC_ALL_REDUCE, ZC_REDUCE_SCATTER, ZC_ALL_GATHER, ZC_NUM_COLLECTIVES };
static const char *const zero_collective_names[ZC_NUM_COLLECTIVES] = {"all_reduce", "reduce_scatter", "all_gather"};
static const char *const zero_wait_names[ZC_NUM_COLLECTIVES] = {"wait all_reduce", "wait reduce_scatter", "wait all_gather"};

// The kinds of memory a rank holds. MEM_STATE + k is the optimizer's state array k (named by
// optimizer.h: "adam_m", "adam_v", "lion_m", ...). activations and workspace (what a trainer
// needs beyond these to compute: the CPU trainer's fp32 working copies in 16-bit runs) are
// counted by the trainer.
enum { MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_STATE, MEM_BUFFERS = MEM_STATE + OPT_MAX_SLICES, MEM_ACTIVATIONS,
       MEM_WORKSPACE, MEM_KINDS };
// The kind's name in logs and plans; NULL for a state array the optimizer does not keep.
static inline const char *zero_memory_name(int optimizer, int kind) {
    static const char *const names[MEM_KINDS] = {"params", "grads", "master", "state0", "state1", "buffers",
                                                 "activations", "workspace"};
    if (kind >= MEM_STATE && kind < MEM_STATE + OPT_MAX_SLICES) return optimizer_info(optimizer)->slice_names[kind - MEM_STATE];
    return names[kind];
}

typedef struct {
    void *ctx;
    // Start a collective over n elements of type dtype (ZC_F32, ZC_BF16, ZC_FP16; sums of 16-bit
    // elements are rounded to that type) and return its handle (>= 0).
    //   all_reduce: buf (n) summed over ranks, in place.
    //   reduce_scatter: send (n * world) summed over ranks; this rank's n elements land in
    //     recv. In place when recv == send + rank * n (NCCL's convention).
    //   all_gather: each rank's send (n) lands at recv + rank * n on every rank. In place
    //     when send == recv + rank * n.
    int (*all_reduce)(void *ctx, void *buf, size_t n, int dtype);
    int (*reduce_scatter)(void *ctx, void *send, void *recv, size_t n, int dtype);
    int (*all_gather)(void *ctx, const void *send, void *recv, size_t n, int dtype);
    // Wait for a collective to complete. `what` names it (collective and unit) for the
    // watchdog's message; set_step tells the backend the step, for the same message. Returns
    // when it completed (trace_clock()): the first time the backend saw it done, or, for
    // a backend whose wait does not block the host, the time of the call.
    double (*wait)(void *ctx, int handle, const char *what);
    void (*set_step)(void *ctx, int step);
    // Let collectives in flight advance (MPI moves non-blocking collectives only inside MPI
    // calls, so the schedule pokes it at every unit boundary); may do nothing.
    void (*progress)(void *ctx);
    void (*sum_doubles)(void *ctx, double *x, int n); // blocking all-reduce of a few scalars
    // Memory where the backend's compute runs (host here, device on the GPU): allocated
    // zeroed, and touched by this header only through these calls.
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p);
    void (*zero)(void *ctx, void *p, size_t bytes);
    void (*add)(void *ctx, void *dst, const void *src, size_t n, int dtype); // dst += src, rounded
    // Copies between that memory and the host's fp32, complete when they return, widening or
    // rounding the elements: initialisation, model files and checkpoints stage one unit (or
    // slice) at a time through the host.
    void (*to_host)(void *ctx, float *host, const void *src, size_t n, int dtype);
    void (*from_host)(void *ctx, void *dst, const float *host, size_t n, int dtype);
    // The optimizer's update (optimizer.h's optimizer_element) over n elements of one kind
    // (decay 1 or 0): p and the state arrays (state[k] for k < the optimizer's slices) fp32, g of
    // type dtype. p16 NULL: p is the parameter (fp32). Otherwise p is the master weight and the
    // result is also rounded into p16 (of type dtype).
    void (*update)(void *ctx, const OptStep *step, float *p, float *const *state, const void *g, void *p16, size_t n,
                   int dtype, int decay);
} ZeroBackend;

typedef struct {
    int stage, rank, world;
    int dtype;                     // of parameters, gradients, buffers: ZC_F32, ZC_BF16, ZC_FP16
    size_t esize;                  // its bytes
    ParamLayout lay;               // padded for this world size
    ZeroBackend be;
    // the model states this rank keeps
    void *params;                  // full (stages 0-2) or shard (stage 3)
    void *grads;                   // full (stages 0, 1) or shard accumulator (stages 2, 3)
    float *master;                 // mixed precision: fp32 weights, full (stage 0) or shard; else NULL
    int optimizer, nstate;         // optimizer.h's kind, and its number of state arrays
    float *state[OPT_MAX_SLICES];  // its state arrays: full (stage 0) or shard
    // bounded buffers
    void *gather_embed, *gather_final, *gather_layer[2]; // stage 3
    void *bucket_embed, *bucket_final, *bucket_layer[2]; // stages 2, 3
    void *scatter_recv[3];         // a reduce-scatter's output before it is added to the shard
    // schedule state
    int micro, accum;              // current micro-step (0-based) and how many per step
    int pending[GPT2_MAX_UNITS];   // handle of the unit's collective in flight, or -1
    int pending_recv[GPT2_MAX_UNITS]; // which scatter_recv buffer the unit's reduce-scatter uses
    int gathered[GPT2_MAX_UNITS];  // stage 3: the unit's parameters are (being) gathered in its buffer
    int step;                      // for the watchdog's message
    Trace *trace;                  // the rank's timeline (core/trace.h), or NULL
    int pending_kind[GPT2_MAX_UNITS];     // the unit's collective in flight: ZC_*,
    double pending_bytes[GPT2_MAX_UNITS]; // its bytes (ring model),
    double issued[GPT2_MAX_UNITS];        // and when it was started (trace_clock)
    unsigned long forwards;        // forward passes begun: a unit's values are the same within one
    // accounting
    size_t mem[MEM_KINDS];         // bytes allocated, by kind
    double comm[ZC_NUM_COLLECTIVES]; // bytes moved this step, ring model
} Zero;

// --- partition arithmetic -------------------------------------------------------------

static inline size_t zero_slice(const Zero *z, int u) { return gpt2_unit_padded(&z->lay, u) / z->world; }
// Where this rank's slice of unit u starts, in full-buffer and in shard coordinates.
static inline size_t zero_slice_begin(const Zero *z, int u) { return z->lay.unit_offset[u] + (size_t)z->rank * zero_slice(z, u); }
static inline size_t zero_shard_offset(const Zero *z, int u) { return z->lay.unit_offset[u] / z->world; }
static inline size_t zero_shard_size(const Zero *z) { return z->lay.num_flat / z->world; }
static inline size_t zero_max_layer(const Zero *z) { return gpt2_unit_padded(&z->lay, 1); }
static inline size_t zero_max_unit(const Zero *z) {
    size_t e = gpt2_unit_padded(&z->lay, UNIT_EMBED), l = zero_max_layer(z);
    return e > l ? e : l;
}
static inline int zero_is_layer(const Zero *z, int u) { return u >= 1 && u < gpt2_final_unit(&z->lay); }

// Element i of a buffer of the model's element type.
static inline void *zero_at(const Zero *z, const void *p, size_t i) { return (char *)p + i * z->esize; }

// n elements of a kind's element size (fp32 for the master weights and optimizer state,
// z->dtype otherwise).
static inline void *zero_alloc(Zero *z, int kind, size_t n) {
    size_t e = kind == MEM_MASTER || (kind >= MEM_STATE && kind < MEM_BUFFERS) ? sizeof(float) : z->esize;
    z->mem[kind] += n * e;
    return z->be.alloc(z->be.ctx, n * e);
}

// Sets up the partition and allocates this rank's model states and buffers. dtype: ZC_F32,
// or ZC_BF16 / ZC_FP16 for mixed precision; optimizer: optimizer.h's kind (its state arrays).
static inline void zero_init(Zero *z, const GPT2Config *cfg, int stage, int rank, int world, int dtype, int optimizer,
                             ZeroBackend be) {
    memset(z, 0, sizeof(*z));
    z->stage = stage; z->rank = rank; z->world = world; z->be = be;
    z->dtype = dtype; z->esize = zc_dtype_size(dtype);
    z->optimizer = optimizer;
    z->nstate = optimizer_info(optimizer)->slices;
    gpt2_layout_init(&z->lay, cfg, (size_t)world * ZERO_ALIGN);
    size_t full = z->lay.num_flat, shard = zero_shard_size(z);
    z->params = zero_alloc(z, MEM_PARAMS, stage == 3 ? shard : full);
    z->grads = zero_alloc(z, MEM_GRADS, stage >= 2 ? shard : full);
    if (dtype != ZC_F32) z->master = (float *)zero_alloc(z, MEM_MASTER, stage == 0 ? full : shard);
    for (int k = 0; k < z->nstate; k++) z->state[k] = (float *)zero_alloc(z, MEM_STATE + k, stage == 0 ? full : shard);
    int F = gpt2_final_unit(&z->lay);
    if (stage >= 2) {
        z->bucket_embed = zero_alloc(z, MEM_BUFFERS, gpt2_unit_padded(&z->lay, UNIT_EMBED));
        z->bucket_final = zero_alloc(z, MEM_BUFFERS, gpt2_unit_padded(&z->lay, F));
        for (int i = 0; i < 2; i++) z->bucket_layer[i] = zero_alloc(z, MEM_BUFFERS, zero_max_layer(z));
        // The receive buffers: one for the embeddings (reduced last), two for alternating
        // layers (the final LayerNorm's tiny reduction borrows the embeddings' one).
        z->scatter_recv[0] = zero_alloc(z, MEM_BUFFERS, zero_slice(z, UNIT_EMBED));
        for (int i = 1; i < 3; i++) z->scatter_recv[i] = zero_alloc(z, MEM_BUFFERS, zero_max_layer(z) / world);
    }
    if (stage == 3) {
        z->gather_embed = zero_alloc(z, MEM_BUFFERS, gpt2_unit_padded(&z->lay, UNIT_EMBED));
        z->gather_final = zero_alloc(z, MEM_BUFFERS, gpt2_unit_padded(&z->lay, F));
        for (int i = 0; i < 2; i++) z->gather_layer[i] = zero_alloc(z, MEM_BUFFERS, zero_max_layer(z));
    }
    for (int u = 0; u < GPT2_MAX_UNITS; u++) z->pending[u] = -1;
}

// Elements of the bounded buffers zero_init allocates: gradient buckets and reduce-scatter
// receive slices (stages 2, 3), gather buffers (stage 3). The planner predicts with it.
static inline size_t zero_buffer_floats(const Zero *z) {
    size_t embed = gpt2_unit_padded(&z->lay, UNIT_EMBED), fin = gpt2_unit_padded(&z->lay, gpt2_final_unit(&z->lay));
    size_t n = 0;
    if (z->stage >= 2) n += embed + fin + 2 * zero_max_layer(z)                          // buckets
                            + zero_slice(z, UNIT_EMBED) + 2 * (zero_max_layer(z) / z->world); // receive slices
    if (z->stage == 3) n += embed + fin + 2 * zero_max_layer(z);                         // gather buffers
    return n;
}

static inline void zero_free(Zero *z) {
    void *all[] = {z->params, z->grads, z->master, z->state[0], z->state[1], z->gather_embed, z->gather_final,
                    z->gather_layer[0], z->gather_layer[1], z->bucket_embed, z->bucket_final,
                    z->bucket_layer[0], z->bucket_layer[1], z->scatter_recv[0], z->scatter_recv[1],
                    z->scatter_recv[2]};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i]) z->be.free(z->be.ctx, all[i]);
}

// --- the schedule: where a unit's parameters and gradients are ---------------------------

static inline void *zero_gather_buffer(const Zero *z, int u) {
    if (u == UNIT_EMBED) return z->gather_embed;
    if (u == gpt2_final_unit(&z->lay)) return z->gather_final;
    return z->gather_layer[u % 2]; // consecutive layers alternate: one computes, one prefetches
}
static inline void *zero_bucket(const Zero *z, int u) {
    if (u == UNIT_EMBED) return z->bucket_embed;
    if (u == gpt2_final_unit(&z->lay)) return z->bucket_final;
    return z->bucket_layer[u % 2];
}

static inline double zero_count(Zero *z, int kind, size_t n_full) {
    double bytes = (double)n_full * z->esize * (z->world - 1) / z->world;
    if (kind == ZC_ALL_REDUCE) bytes *= 2.0;
    z->comm[kind] += bytes;
    return bytes;
}

// Unit u's collective `kind` over its n_full padded elements was started at t_issue: it is in
// flight (handle), counted, and remembered for the trace until zero_wait.
static inline void zero_issued(Zero *z, int u, int kind, size_t n_full, double t_issue, int handle) {
    z->pending[u] = handle;
    z->pending_kind[u] = kind;
    z->pending_bytes[u] = zero_count(z, kind, n_full);
    z->issued[u] = t_issue;
}

// "all_gather of unit 3 (layer 2)": what a watchdog says when a collective never completes.
static inline void zero_describe(const Zero *z, char *buf, size_t n, const char *what, int u) {
    if (u == UNIT_EMBED) snprintf(buf, n, "%s of unit 0 (embeddings)", what);
    else if (u == gpt2_final_unit(&z->lay)) snprintf(buf, n, "%s of unit %d (final layernorm)", what, u);
    else snprintf(buf, n, "%s of unit %d (layer %d)", what, u, u - 1);
}

static inline void zero_wait(Zero *z, int u, const char *what) {
    if (u < 0 || u >= GPT2_MAX_UNITS || z->pending[u] < 0) return;
    char desc[96];
    zero_describe(z, desc, sizeof(desc), what, u);
    int kind = z->pending_kind[u];
    double w0 = trace_begin(z->trace, zero_wait_names[kind], TRACE_WAIT, u, 0.0);
    double done = z->be.wait(z->be.ctx, z->pending[u], desc);
    trace_end(z->trace, w0);
    trace_span(z->trace, zero_collective_names[kind], TRACE_COMM, u, z->pending_bytes[u], z->issued[u], done);
    z->pending[u] = -1;
}

// Let the collectives in flight advance (at a unit boundary); with some in flight, the time
// it takes is communication the thread does instead of computing (a "wait" span).
static inline void zero_progress(Zero *z, int u) {
    int busy = 0;
    for (int v = 0; v < z->lay.num_units && !busy; v++) busy = z->pending[v] >= 0;
    double t0 = busy ? trace_begin(z->trace, "progress", TRACE_WAIT, u, 0.0) : 0.0;
    z->be.progress(z->be.ctx);
    if (busy) trace_end(z->trace, t0);
}

// A blocking all-reduce of n doubles (the loss, the gradient norm's partial sums): in the
// trace, an all_reduce without a unit that the thread waits for all along.
static inline void zero_sum_scalars(Zero *z, double *x, int n) {
    if (z->world == 1) { z->be.sum_doubles(z->be.ctx, x, n); return; }
    double t0 = trace_begin(z->trace, zero_wait_names[ZC_ALL_REDUCE], TRACE_WAIT, -1, 0.0);
    z->be.sum_doubles(z->be.ctx, x, n);
    trace_end(z->trace, t0);
    trace_span(z->trace, zero_collective_names[ZC_ALL_REDUCE], TRACE_COMM, -1,
               2.0 * n * sizeof(double) * (z->world - 1) / z->world, t0, trace_clock(z->trace));
}

// Stage 3: start gathering unit u's parameters into its buffer, unless already there.
static inline void zero_prefetch(Zero *z, int u) {
    if (z->stage != 3 || u < 0 || u >= z->lay.num_units || z->gathered[u]) return;
    if (zero_is_layer(z, u)) // the buffer's previous layer (same parity) is overwritten
        for (int v = 1; v < gpt2_final_unit(&z->lay); v++)
            if (v % 2 == u % 2) z->gathered[v] = 0;
    double t0 = trace_clock(z->trace);
    int h = z->be.all_gather(z->be.ctx, zero_at(z, z->params, zero_shard_offset(z, u)), zero_gather_buffer(z, u),
                             zero_slice(z, u), z->dtype);
    zero_issued(z, u, ZC_ALL_GATHER, gpt2_unit_padded(&z->lay, u), t0, h);
    z->gathered[u] = 1;
}

// A forward pass begins (a training micro-step, a validation batch or a sampling step):
// parameters may have changed since the last one, so nothing gathered is trusted.
static inline void zero_begin_forward(Zero *z, int micro, int accum) {
    z->micro = micro;
    z->accum = accum;
    z->forwards++;
    for (int u = 0; u < z->lay.num_units; u++) z->gathered[u] = 0;
}

// The parameters of unit u, for its forward or its backward. next: the unit that will be
// needed after this one, prefetched now so that its gather overlaps this unit's compute (-1:
// none). Stage 3 re-gathers a layer for its backward only if its buffer was reused since.
static inline void *zero_params(Zero *z, int u, int next) {
    zero_progress(z, u);
    if (z->stage != 3) return zero_at(z, z->params, z->lay.unit_offset[u]);
    zero_prefetch(z, u);
    zero_wait(z, u, "all_gather");
    zero_prefetch(z, next);
    return zero_gather_buffer(z, u);
}

// Finish unit u's reduction in flight: wait, and for stages 2 and 3 add the received slice
// into this rank's gradient shard (micro-steps accumulate there).
static inline void zero_finish_reduce(Zero *z, int u) {
    if (z->pending[u] < 0) return;
    zero_wait(z, u, z->stage == 0 ? "all_reduce" : "reduce_scatter");
    if (z->stage < 2) return;
    z->be.add(z->be.ctx, zero_at(z, z->grads, zero_shard_offset(z, u)), z->scatter_recv[z->pending_recv[u]],
              zero_slice(z, u), z->dtype);
}

// Where the backward accumulates unit u's gradient. Stages 0 and 1: the full gradient
// buffer (micro-steps accumulate in it). Stages 2 and 3: a zeroed bucket, once the bucket's
// previous user (the layer two above, for layers) has finished its reduce-scatter.
static inline void *zero_grads(Zero *z, int u) {
    if (z->stage < 2) return zero_at(z, z->grads, z->lay.unit_offset[u]);
    if (zero_is_layer(z, u) && u + 2 < gpt2_final_unit(&z->lay)) zero_finish_reduce(z, u + 2);
    void *b = zero_bucket(z, u);
    z->be.zero(z->be.ctx, b, gpt2_unit_padded(&z->lay, u) * z->esize);
    return b;
}

// The backward is done with unit u's gradient: start its reduction.
static inline void zero_grads_done(Zero *z, int u) {
    size_t n = gpt2_unit_padded(&z->lay, u);
    if (z->world == 1 && z->stage < 2) return;
    if (z->stage < 2) {
        if (z->micro != z->accum - 1) return; // stages 0 and 1 reduce once per optimizer step
        void *g = zero_at(z, z->grads, z->lay.unit_offset[u]);
        double t0 = trace_clock(z->trace);
        if (z->stage == 0) {
            zero_issued(z, u, ZC_ALL_REDUCE, n, t0, z->be.all_reduce(z->be.ctx, g, n, z->dtype));
        } else { // in place: this rank's summed slice lands on its own slice
            int h = z->be.reduce_scatter(z->be.ctx, g, zero_at(z, g, (size_t)z->rank * zero_slice(z, u)), zero_slice(z, u),
                                         z->dtype);
            zero_issued(z, u, ZC_REDUCE_SCATTER, n, t0, h);
        }
        return;
    }
    int r = u == UNIT_EMBED || u == gpt2_final_unit(&z->lay) ? 0 : 1 + u % 2;
    z->pending_recv[u] = r;
    double t0 = trace_clock(z->trace);
    int h = z->be.reduce_scatter(z->be.ctx, zero_bucket(z, u), z->scatter_recv[r], zero_slice(z, u), z->dtype);
    zero_issued(z, u, ZC_REDUCE_SCATTER, n, t0, h);
    if (u == gpt2_final_unit(&z->lay)) zero_finish_reduce(z, u); // it shares scatter_recv[0]
}

// After the last backward of a micro-step: every reduction has landed.
static inline void zero_end_backward(Zero *z) {
    for (int u = 0; u < z->lay.num_units; u++) zero_finish_reduce(z, u);
}

// --- the update ------------------------------------------------------------------------

// The gradient of the elements this rank updates, for unit u: a pointer to the first of
// zero_update_count(z, u) elements, aligned with zero_update_params / the moments.
static inline size_t zero_update_begin(const Zero *z, int u) { return z->stage == 0 ? z->lay.unit_offset[u] : zero_slice_begin(z, u); }
static inline size_t zero_update_count(const Zero *z, int u) { return z->stage == 0 ? gpt2_unit_padded(&z->lay, u) : zero_slice(z, u); }
static inline void *zero_update_grads(const Zero *z, int u) {
    return zero_at(z, z->grads, z->stage < 2 ? zero_update_begin(z, u) : zero_shard_offset(z, u));
}
static inline void *zero_update_params(const Zero *z, int u) {
    return zero_at(z, z->params, z->stage == 3 ? zero_shard_offset(z, u) : zero_update_begin(z, u));
}
// The state arrays and master weights are laid out alike: in full under stage 0, else the shard.
static inline float *zero_update_moment(const Zero *z, const float *moment, int u) {
    return (float *)moment + (z->stage == 0 ? z->lay.unit_offset[u] : zero_shard_offset(z, u));
}

// The global gradient norm from this rank's sum of squares over its zero_update_grads.
// Under stage 0 every rank holds the whole averaged gradient, so its local sum is already the
// global one (adding the ranks' sums would count every element N times); otherwise each rank
// holds a disjoint slice and the partial sums add up: one all-reduce of one number.
static inline float zero_global_grad_norm(Zero *z, double local_sumsq) {
    if (z->stage > 0 && z->world > 1) zero_sum_scalars(z, &local_sumsq, 1);
    return (float)sqrt(local_sumsq);
}

// Stages 1, 2: after the update, every rank needs all parameters again.
static inline void zero_gather_updated_params(Zero *z) {
    if (z->stage == 0 || z->stage == 3 || z->world == 1) return;
    for (int u = 0; u < z->lay.num_units; u++) {
        void *p = zero_at(z, z->params, z->lay.unit_offset[u]);
        double t0 = trace_clock(z->trace);
        int h = z->be.all_gather(z->be.ctx, zero_at(z, p, (size_t)z->rank * zero_slice(z, u)), p, zero_slice(z, u), z->dtype);
        zero_issued(z, u, ZC_ALL_GATHER, gpt2_unit_padded(&z->lay, u), t0, h);
    }
    for (int u = 0; u < z->lay.num_units; u++) zero_wait(z, u, "all_gather (updated parameters)");
}

// The update: the optimizer over the elements this rank owns, walked as runs of one kind
// (decayed, not decayed, frozen: padding and unused vocabulary rows stay zero), because a
// partition boundary can cut through any tensor; then the gather of the updated parameters.
// Mixed precision: the fp32 master weights are updated and rounded into the 16-bit parameters.
typedef struct { Zero *z; size_t base; float *p, *state[OPT_MAX_SLICES]; void *g, *p16; const OptStep *step; } ZeroUpdateRun;
static inline void zero_update_segment(const ParamSegment *seg, void *ctx) {
    ZeroUpdateRun *r = (ZeroUpdateRun *)ctx;
    if (seg->kind == SEG_FROZEN) return;
    size_t lo = seg->begin - r->base;
    Zero *z = r->z;
    float *state[OPT_MAX_SLICES] = {NULL};
    for (int k = 0; k < z->nstate; k++) state[k] = r->state[k] + lo;
    z->be.update(z->be.ctx, r->step, r->p + lo, state, zero_at(z, r->g, lo), r->p16 ? zero_at(z, r->p16, lo) : NULL,
                 seg->end - seg->begin, z->dtype, seg->kind == SEG_DECAY);
}
// Bytes the update reads and writes per element it owns: the fp32 weight (the master in mixed
// precision) and each state array read and written, the gradient read, and in mixed precision
// the 16-bit parameter written (AdamW: 28 in every precision).
static inline double zero_update_bytes_per_element(const Zero *z) {
    return 8.0 + 8.0 * z->nstate + (double)z->esize + (z->dtype != ZC_F32 ? (double)z->esize : 0.0);
}
static inline void zero_update(Zero *z, const OptStep *step) {
    for (int u = 0; u < z->lay.num_units; u++) {
        double t0 = trace_begin(z->trace, "update", TRACE_OPTIMIZER, u,
                                zero_update_bytes_per_element(z) * (double)zero_update_count(z, u));
        size_t begin = zero_update_begin(z, u);
        void *p = zero_update_params(z, u);
        ZeroUpdateRun r = {z, begin, z->master ? zero_update_moment(z, z->master, u) : (float *)p, {NULL},
                           zero_update_grads(z, u), z->master ? p : NULL, step};
        for (int k = 0; k < z->nstate; k++) r.state[k] = zero_update_moment(z, z->state[k], u);
        gpt2_for_each_segment(&z->lay, begin, begin + zero_update_count(z, u), zero_update_segment, &r);
        trace_end(z->trace, t0);
    }
    zero_gather_updated_params(z);
}

// --- parameters in and out, one unit at a time through a host buffer ---------------------

// Set unit u from unit_host (fp32, the whole padded unit): this rank's parameters (rounded to
// the element type) and, in mixed precision, its master weights (exact).
static inline void zero_set_unit(Zero *z, int u, const float *unit_host) {
    size_t n = zero_slice(z, u), begin = (size_t)z->rank * n, padded = gpt2_unit_padded(&z->lay, u);
    if (z->stage == 3) z->be.from_host(z->be.ctx, zero_at(z, z->params, zero_shard_offset(z, u)), unit_host + begin, n, z->dtype);
    else z->be.from_host(z->be.ctx, zero_at(z, z->params, z->lay.unit_offset[u]), unit_host, padded, z->dtype);
    if (!z->master) return;
    if (z->stage == 0) z->be.from_host(z->be.ctx, zero_update_moment(z, z->master, u), unit_host, padded, ZC_F32);
    else z->be.from_host(z->be.ctx, zero_update_moment(z, z->master, u), unit_host + begin, n, ZC_F32);
}

// This rank's slice of unit u's weights into host (fp32): the master weights in mixed
// precision (what checkpoints keep: rounding them again gives the parameters), else the
// parameters.
static inline void zero_get_slice(Zero *z, int u, float *host) {
    size_t n = zero_slice(z, u);
    if (z->master) {
        size_t off = z->stage == 0 ? zero_slice_begin(z, u) : zero_shard_offset(z, u);
        z->be.to_host(z->be.ctx, host, z->master + off, n, ZC_F32);
    } else {
        size_t off = z->stage == 3 ? zero_shard_offset(z, u) : zero_slice_begin(z, u);
        z->be.to_host(z->be.ctx, host, zero_at(z, z->params, off), n, z->dtype);
    }
}

// State array k's share of unit u: this rank's slice into host (fp32), and from a whole
// padded unit (host, fp32) what this rank keeps (every element under stage 0, else its slice).
static inline void zero_get_state_slice(Zero *z, int k, int u, float *host) {
    size_t off = z->stage == 0 ? zero_slice_begin(z, u) : zero_shard_offset(z, u);
    z->be.to_host(z->be.ctx, host, z->state[k] + off, zero_slice(z, u), ZC_F32);
}
static inline void zero_set_state_unit(Zero *z, int k, int u, const float *unit_host) {
    if (z->stage == 0)
        z->be.from_host(z->be.ctx, zero_update_moment(z, z->state[k], u), unit_host, gpt2_unit_padded(&z->lay, u), ZC_F32);
    else
        z->be.from_host(z->be.ctx, zero_update_moment(z, z->state[k], u), unit_host + (size_t)z->rank * zero_slice(z, u),
                        zero_slice(z, u), ZC_F32);
}

// Zero the gradient accumulators at the start of a step; reset the step's counters.
static inline void zero_begin_step(Zero *z, int step) {
    z->step = step;
    z->be.set_step(z->be.ctx, step);
    z->be.zero(z->be.ctx, z->grads, (z->stage >= 2 ? zero_shard_size(z) : z->lay.num_flat) * z->esize);
    for (int k = 0; k < ZC_NUM_COLLECTIVES; k++) z->comm[k] = 0.0;
}

// --- theory, for the reports beside the measurements -------------------------------------

// Bytes communicated per rank per step (one micro-step), textbook: 2P(N-1)/N elements for
// stages 0-2, 3P(N-1)/N for stage 3, of elem_bytes each.
static inline double zero_theory_comm(int stage, double P, int N, double elem_bytes) {
    return (stage == 3 ? 3.0 : 2.0) * P * elem_bytes * (N - 1) / N;
}

#endif // ZERO_H
