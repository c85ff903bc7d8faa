// zero.h: ZeRO stages 0-3 as a schedule of gathers, reductions and updates, independent of
// the communication backend (MPI in train_gpt_cpu.c, NCCL in train_gpt.cu).
//
// Contract
//   Partitioning and what a rank keeps (the Zero struct, by stage and precision): zero/state.h.
//   Every unit is padded to a multiple of world * ZERO_ALIGN elements and rank r owns the r-th of
//   world equal slices of every unit; its "shard" is its slices of all units, back to back.
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
//              final LayerNorm are gathered once per micro-step. The layers share two buffers:
//              the one in use and the one being filled for the next (whichever the unit in use
//              is not in), so the last two layers are still there when the backward begins.
//              Every other layer is gathered twice per micro-step. Activation recompute asks for
//              a layer again for its recompute (model.h): one recompute per layer (full with
//              K = 1, selective) shares the backward's gather; full recompute of segments of
//              K > 2 layers gathers each segment's layers for the recompute, in forward order,
//              and again for the backward all but the last two, and prefetches the next
//              segment's first layer where it would otherwise have prefetched the layer below.
//     Gradients start each optimizer step at zero: zero_begin_step zeroes them (stages 0, 1: the
//              full buffer; 2, 3: the shard) and zero_grads each bucket it hands out, unless the
//              caller set z->grads_written: its backward writes every element of a gradient the
//              first time it sees it (zero_grads_fresh(z, u): stages 0 and 1 on the step's first
//              micro-step, a bucket always) and adds after that, so those zeroings are skipped
//              (the shard of stages 2 and 3, which buckets are added into, is still zeroed).
//     One rank: a collective over one rank is the identity, so none is issued: stages 0 and 1
//              leave the gradient where it is, stages 2 and 3 add each bucket straight into the
//              shard, and stage 3 computes from its shard in place (unless it is offloaded).
//   ZeRO++ (zero/pp.h has the mechanics and their contract; ZeroOptions' zeropp_*). qwZ: stage
//     3's parameter all-gathers send int8 blocks, dequantized on arrival; the owner's slice is
//     exact. hpZ: the forward's gather of a unit also fills this rank's part of the secondary
//     shard (MEM_HPZ, partitioned over hpZ's group of consecutive ranks inside a host), and any
//     later gather of the unit within the same forward (the backward's, a recompute's) is an
//     all-gather of those parts inside the group. qgZ: stages 2 and 3 reduce each bucket by a
//     two-level all-to-all of quantized slices (inside the host, then across hosts), started where
//     the reduce-scatter was and finished in zero_finish_reduce; the result lands in the receive
//     slice and is added to the shard as before. Each is off with one rank, and refused where
//     the backend lacks ZeRO++'s entries or the hosts do not fit (zero/pp_setup.h's
//     zero_pp_problem; its setup and buffers are there too).
//   Accounting. Every collective's bytes are counted in the ring model (all-gather or
//   reduce-scatter of M bytes over N ranks: M(N-1)/N; all-reduce: twice that; ZeRO++'s: the
//   messages a rank sends), split into inside the host and across hosts (a world collective: the
//   pieces from the L - 1 ranks of the host and from the N - L others), and every
//   buffer this header asks the backend to allocate is counted by kind and by where it lives.
//   Timeline (core/trace.h, z->trace, NULL: none). Each collective is a span from its issue to
//   its completion (as the backend's wait reports it), named all_gather, reduce_scatter or
//   all_reduce, with its unit and the bytes counted above, inside the host and across hosts; the time the caller's thread spends
//   blocked in a wait (or in a progress poke while collectives are in flight: MPI moves data
//   inside those calls) is a "wait" span; each unit's update is an "update" span (the stores'
//   own spans: zero/store.h).
//   Flight recorder (core/flight.h, z->flight, NULL: none). Every collective this header starts,
//   (qgZ's level-2 all-to-all across hosts as its unit's reduce_scatter, once level 1 landed),
//   and every sum of scalars (zero_sum_doubles, zero_sum_scalars), is numbered in start order and
//   recorded with its unit, bytes, step and micro-step; the waits for them mark the rank as
//   waiting. A watchdog's verdict reads it (run/verdict.h).
//
//   Where the model states live (device, host, NVMe), and how the update and a gather reach them
//   there, is zero/store.h's: this header allocates, reads, writes and streams each kind through
//   its location's store (z->st) and never asks which location that is.
//   The update (zero_update), walked as runs of one kind by zero/update.h: an optimizer's
//   per-tensor reductions first (LAMB's: the read-only pass, then one all-reduce of R x tensors
//   doubles under stages 1-3); then the device's units (all of them, or Twin-Flow's device part
//   from st.host_units on) with the backend's kernel; then, when anything the update touches is
//   off the device, the host's units streamed in pieces (zero_update_streamed). Stages 1 and 2
//   then all-gather the updated parameters: with a streamed update each unit's as soon as it is
//   done (the device's first, so they overlap the host's work), else every unit's after the walk.
//   With only the parameter shard off a device the host cannot address (offload_param alone),
//   the update stays on the device and each unit's new parameters are written back through the
//   store (zero_store_write_back). The delayed parameter update (zero_hold, zero/update.h's
//   zero_take_held) makes the next zero_update read a held step's gradients; the host's part of it
//   runs on a helper thread meanwhile (zero/update.h), and that zero_update only puts its new
//   parameters in place and all-gathers them.
//   The backend (ZeroBackend, zero/backend.h) performs what it is handed and never decides what
//   to communicate.
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
#include "core/flight.h"
#include "zero/store.h"
#include "zero/nvme_store.h"
#include "zero/pp.h"
#include "zero/state.h"
#include "zero/pp_setup.h"
#include "zero/update.h"

// Sets up the partition and allocates this rank's model states and buffers (ZeroOptions: the
// stage, the element type, the optimizer, what is offloaded, and where NVMe files go).
static inline void zero_init(Zero *z, const GPT2Config *cfg, int rank, int world, const ZeroOptions *o, ZeroBackend be) {
    memset(z, 0, sizeof(*z));
    int stage = o->stage, dtype = o->dtype;
    z->stage = stage; z->rank = rank; z->world = world; z->be = be;
    z->dtype = dtype; z->esize = zc_dtype_size(dtype);
    z->optimizer = o->optimizer;
    z->nstate = optimizer_info(o->optimizer)->slices;
    zero_pp_setup(z, o);
    zero_placement(o, be.unified, z->where);
    gpt2_layout_init(&z->lay, cfg, (size_t)world * ZERO_ALIGN);
    ZeroStore *st = &z->st;
    zero_store_init(st, &z->be, &z->trace, &z->lay, z->where, z->mem, rank, world, z->esize, z->nstate, o);
    zero_nvme_bind(st, o); // (zero/nvme_store.h: its files, for the kinds on NVMe)
    zero_offload_check(z, o); // (zero/update.h: Twin-Flow, the delayed update)
    size_t full = z->lay.num_flat, shard = zero_shard_size(z);
    z->params = zero_store_alloc(st, MEM_PARAMS, stage == 3 ? shard : full);
    z->grads = zero_store_alloc(st, MEM_GRADS, stage >= 2 ? shard : full);
    zero_held_alloc(z, o);
    z->has_master = dtype != ZC_F32 || zero_streams(z->where); // a streamed update needs its fp32 weights in its memory
    // (Twin-Flow: the offloaded kinds' first st->host_elems of the shard where they live, the rest on the device)
    size_t opt = stage == 0 ? full : st->host_elems, twin = stage == 0 ? 0 : shard - st->host_elems;
    if (z->has_master && opt) z->master = (float *)zero_store_alloc(st, MEM_MASTER, opt);
    for (int k = 0; k < z->nstate && opt; k++) z->state[k] = (float *)zero_store_alloc(st, MEM_STATE + k, opt);
    zero_twin_alloc(z, twin);
    z->nred = optimizer_reductions(o->optimizer) * gpt2_num_tensors(&z->lay);
    if (z->nred) z->red = (double *)zero_store_alloc(st, MEM_BUFFERS, zero_reduction_elems(z));
    zero_store_staging(st);
    int F = gpt2_final_unit(&z->lay);
    if (stage >= 2) {
        z->bucket_embed = zero_store_alloc(st, MEM_BUFFERS, gpt2_unit_padded(&z->lay, UNIT_EMBED));
        z->bucket_final = zero_store_alloc(st, MEM_BUFFERS, gpt2_unit_padded(&z->lay, F));
        for (int i = 0; i < 2; i++) z->bucket_layer[i] = zero_store_alloc(st, MEM_BUFFERS, zero_max_layer(z));
        // The receive buffers: one for the embeddings (reduced last), two for alternating
        // layers (the final LayerNorm's tiny reduction borrows the embeddings' one).
        z->scatter_recv[0] = zero_store_alloc(st, MEM_BUFFERS, zero_slice(z, UNIT_EMBED));
        for (int i = 1; i < 3; i++) z->scatter_recv[i] = zero_store_alloc(st, MEM_BUFFERS, zero_max_layer(z) / world);
    }
    if (stage == 3) {
        z->gather_embed = zero_store_alloc(st, MEM_BUFFERS, gpt2_unit_padded(&z->lay, UNIT_EMBED));
        z->gather_final = zero_store_alloc(st, MEM_BUFFERS, gpt2_unit_padded(&z->lay, F));
        for (int i = 0; i < 2; i++) z->gather_layer[i] = zero_store_alloc(st, MEM_BUFFERS, zero_max_layer(z));
    }
    zero_pp_alloc(z);
    zero_store_landing(st); // a host or NVMe shard's slice lands there before its gather
    for (int u = 0; u < GPT2_MAX_UNITS; u++) z->pending[u] = -1;
    z->buffer_layer[0] = z->buffer_layer[1] = z->in_use = -1;
}

// Elements of the bounded buffers zero_init allocates: gradient buckets and reduce-scatter
// receive slices (stages 2, 3), gather buffers (stage 3), the device slices a host or NVMe shard
// is copied into before its gather, and an optimizer's per-tensor sums (zero_reduction_elems).
// The planner predicts with it (z->st shaped by zero_store_shape, z->optimizer set).
static inline size_t zero_buffer_floats(const Zero *z, int unified) {
    size_t embed = gpt2_unit_padded(&z->lay, UNIT_EMBED), fin = gpt2_unit_padded(&z->lay, gpt2_final_unit(&z->lay));
    size_t n = 0;
    if (z->stage >= 2) n += embed + fin + 2 * zero_max_layer(z)                          // buckets
                            + zero_slice(z, UNIT_EMBED) + 2 * (zero_max_layer(z) / z->world); // receive slices
    if (z->stage == 3) n += embed + fin + 2 * zero_max_layer(z);                         // gather buffers
    n += zero_pp_buffer_elems(z);                                                        // ZeRO++'s (zero/pp.h)
    return n + zero_landing_floats(&z->st, unified)                                      // landing slices
           + zero_reduction_elems(z);                                                     // per-tensor sums
}

static inline void zero_free(Zero *z) {
    ZeroStore *st = &z->st;
    void *all[] = {z->params, z->grads, z->master, z->state[0], z->state[1]};
    int kind[] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_STATE, MEM_STATE + 1};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) zero_store_free(st, kind[i], all[i]);
    zero_store_free(st, MEM_BUFFERS, z->red);
    zero_offload_free(z);
    void *buffers[] = {z->gather_embed, z->gather_final, z->gather_layer[0], z->gather_layer[1], z->bucket_embed,
                       z->bucket_final, z->bucket_layer[0], z->bucket_layer[1], z->scatter_recv[0], z->scatter_recv[1],
                       z->scatter_recv[2]};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) zero_store_free(st, MEM_BUFFERS, buffers[i]);
    zero_pp_free(z);
    zero_store_close(st);
}

// --- the schedule: where a unit's parameters and gradients are ---------------------------

static inline void *zero_gather_buffer(const Zero *z, int u) {
    if (u == UNIT_EMBED) return z->gather_embed;
    if (u == gpt2_final_unit(&z->lay)) return z->gather_final;
    return z->gather_layer[z->layer_buffer[u]]; // (zero_prefetch put it there)
}
static inline void *zero_bucket(const Zero *z, int u) {
    if (u == UNIT_EMBED) return z->bucket_embed;
    if (u == gpt2_final_unit(&z->lay)) return z->bucket_final;
    return z->bucket_layer[u % 2];
}

// The bytes a rank sends in a collective of `kind` over M bytes (the ring model).
static inline double zero_ring_bytes(const Zero *z, int kind, double M) {
    double bytes = M * (z->world - 1) / z->world;
    return kind == ZC_ALL_REDUCE ? 2.0 * bytes : bytes;
}
static inline double zero_count(Zero *z, int kind, size_t n_full) {
    double bytes = zero_ring_bytes(z, kind, (double)n_full * z->esize);
    z->comm[kind] += bytes;
    double in = 0.0, out = 0.0; // each rank's piece from every other: inside the host or across
    zpp_split_world(&z->pp, (double)n_full * z->esize / z->world * (kind == ZC_ALL_REDUCE ? 2.0 : 1.0), &in, &out);
    z->comm_inside += in; z->comm_across += out;
    z->last_across = out;
    return bytes;
}
// A ZeRO++ collective's bytes (zero/pp.h's accounting): sent, of which inside the host and across.
static inline double zero_count_pp(Zero *z, int kind, double inside, double across) {
    z->comm[kind] += inside + across;
    z->comm_inside += inside; z->comm_across += across;
    z->last_across = across;
    return inside + across;
}

// Unit u's collective `kind` is about to start (its padded elements): 0 when it is not to be
// (core/flight.h's test-only fault hook), after --check-collectives' check.
static inline int zero_starts(Zero *z, int kind, int u) {
    return flight_start(z->flight, kind, u, (double)gpt2_unit_padded(&z->lay, u) * z->esize, z->dtype, z->step, z->micro);
}
// Unit u's collective `kind` over its n_full padded elements was started at t_issue: it is in
// flight (handle), counted, and remembered for the trace until zero_wait.
static inline void zero_issued_as(Zero *z, int u, int kind, size_t n_full, double t_issue, int handle, double bytes) {
    z->pending_seq[u] = flight_issue(z->flight, kind, u, (double)n_full * z->esize, z->dtype, z->step, z->micro);
    z->pending[u] = handle;
    z->pending_kind[u] = kind;
    z->pending_bytes[u] = bytes;
    z->pending_across[u] = z->last_across; // (bytes: the count just made)
    z->issued[u] = t_issue;
}
static inline void zero_issued(Zero *z, int u, int kind, size_t n_full, double t_issue, int handle) {
    if (handle < 0) return; // skipped (core/flight.h's test-only fault hook): nothing in flight
    zero_issued_as(z, u, kind, n_full, t_issue, handle, zero_count(z, kind, n_full));
}

// "all_gather of unit 3 (layer 2)": what a watchdog says when a collective never completes.
static inline void zero_describe(const Zero *z, char *buf, size_t n, const char *what, int u) {
    if (u == UNIT_EMBED) snprintf(buf, n, "%s of unit 0 (embeddings)", what);
    else if (u == gpt2_final_unit(&z->lay)) snprintf(buf, n, "%s of unit %d (final layernorm)", what, u);
    else snprintf(buf, n, "%s of unit %d (layer %d)", what, u, u - 1);
}

// Stage 3: unit u's gather landed: qwZ's messages dequantized into it, hpZ's part kept.
static inline void zero_pp_landed(Zero *z, int u) {
    if (z->qw_land[u]) zpp_qw_land(&z->pp, &z->be, z->pp_dst[u], zero_slice(z, u), z->qw_buf[z->qw_land[u] - 1]);
    if (z->hp_keep[u]) {
        zpp_hp_keep(&z->pp, &z->be, zero_at(z, z->hp_second, z->lay.unit_offset[u] / (size_t)z->hpz), z->pp_dst[u],
                    gpt2_unit_padded(&z->lay, u));
        z->hp_have[u] = z->forwards + 1;
    }
    z->qw_land[u] = z->hp_keep[u] = 0;
}

static inline void zero_wait(Zero *z, int u, const char *what) {
    if (u < 0 || u >= GPT2_MAX_UNITS || z->pending[u] < 0) return;
    char desc[96];
    zero_describe(z, desc, sizeof(desc), what, u);
    int kind = z->pending_kind[u];
    double w0 = trace_begin(z->trace, zero_wait_names[kind], TRACE_WAIT, u, 0.0);
    flight_wait(z->flight, z->pending_seq[u]);
    double done = z->be.wait(z->be.ctx, z->pending[u], desc);
    flight_done(z->flight, z->pending_seq[u]);
    if (kind == ZC_ALL_GATHER) zero_pp_landed(z, u);
    trace_end(z->trace, w0);
    trace_span_split(z->trace, zero_collective_names[kind], TRACE_COMM, u, z->pending_bytes[u], z->pending_across[u],
                     z->issued[u], done);
    z->pending[u] = -1;
}

// A shard on NVMe: unit u's slice is read ahead into the host slot of its gather buffer
// (zero/store.h). The slot's previous unit must be done with it: its all-gather (which reads
// it on a unified backend) unless it was waited for: a layer prefetched and not yet asked for
// (otherwise its pending collective may be its reduce-scatter).
static inline void zero_read_ahead(Zero *z, int u) {
    int v = zero_store_holder(&z->st, u);
    if (v >= 0 && zero_is_layer(z, v) && z->unclaimed[v]) zero_wait(z, v, "all_gather");
    zero_store_prefetch(&z->st, u);
}

// Let the collectives in flight advance (at a unit boundary); with some in flight, the time
// it takes is communication the thread does instead of computing (a "wait" span).
static inline void zero_progress(Zero *z, int u) {
    int busy = 0;
    for (int v = 0; v < z->lay.num_units && !busy; v++) busy = z->pending[v] >= 0;
    double t0 = busy ? trace_begin(z->trace, "progress", TRACE_WAIT, u, 0.0) : 0.0;
    z->be.progress(z->be.ctx);
    if (busy) trace_end(z->trace, t0);
    zero_store_poll(&z->st); // the next update's NVMe reads, as their buffers free up
    zero_held_poll(z);       // the delayed update's held gradients on their way to the host
}

// A blocking all-reduce of n doubles, numbered in the flight recorder (unit -1). Everything that
// sums scalars over the ranks once training runs calls this or zero_sum_scalars.
static inline void zero_sum_doubles(Zero *z, double *x, int n) {
    if (z->world > 1 && !flight_start(z->flight, ZC_ALL_REDUCE, -1, (double)n * sizeof(double), -1, z->step, z->micro)) return;
    int64_t seq = z->world > 1 ? flight_issue(z->flight, ZC_ALL_REDUCE, -1, (double)n * sizeof(double), -1, z->step, z->micro) : -1;
    flight_wait(z->flight, seq);
    z->be.sum_doubles(z->be.ctx, x, n);
    flight_done(z->flight, seq);
}
// A blocking all-reduce of n doubles (the loss, the gradient norm's partial sums): in the
// trace, an all_reduce without a unit that the thread waits for all along.
static inline void zero_sum_scalars(Zero *z, double *x, int n) {
    if (z->world == 1) { z->be.sum_doubles(z->be.ctx, x, n); return; }
    double t0 = trace_begin(z->trace, zero_wait_names[ZC_ALL_REDUCE], TRACE_WAIT, -1, 0.0);
    zero_sum_doubles(z, x, n);
    trace_end(z->trace, t0);
    trace_span(z->trace, zero_collective_names[ZC_ALL_REDUCE], TRACE_COMM, -1,
               zero_ring_bytes(z, ZC_ALL_REDUCE, (double)n * sizeof(double)), t0, trace_clock(z->trace));
}

// Stage 3 with qwZ or hpZ: unit u's gather. A re-gather within the forward whose gather filled
// its secondary part (hpZ) runs inside the host; otherwise the world's, quantized with qwZ.
static inline void zero_pp_prefetch(Zero *z, int u, const void *send, double t0) {
    void *dst = zero_gather_buffer(z, u);
    size_t pad = gpt2_unit_padded(&z->lay, u), s = zero_slice(z, u);
    z->pp_dst[u] = dst;
    if (!zero_starts(z, ZC_ALL_GATHER, u)) return;
    if (z->hpz > 1 && z->hp_have[u] == z->forwards + 1) {
        int h = zpp_hp_gather(&z->pp, &z->be, zero_at(z, z->hp_second, z->lay.unit_offset[u] / (size_t)z->hpz), dst, pad);
        zero_issued_as(z, u, ZC_ALL_GATHER, pad, t0, h,
                       zero_count_pp(z, ZC_ALL_GATHER, (double)(z->hpz - 1) * (pad / z->hpz) * z->esize, 0.0));
        return;
    }
    z->hp_keep[u] = z->hpz > 1;
    if (!z->qwz) {
        zero_issued(z, u, ZC_ALL_GATHER, pad, t0, z->be.all_gather(z->be.ctx, send, dst, s, z->dtype));
        return;
    }
    int b = u == UNIT_EMBED ? 0 : u == gpt2_final_unit(&z->lay) ? 1 : 2 + z->layer_buffer[u];
    int h = zpp_qw_start(&z->pp, &z->be, send, dst, s, z->qw_buf[b]);
    z->qw_land[u] = b + 1;
    double in = 0.0, out = 0.0;
    zpp_split_world(&z->pp, (double)zpp_qw_msg(&z->pp, s), &in, &out);
    zero_issued_as(z, u, ZC_ALL_GATHER, pad, t0, h, zero_count_pp(z, ZC_ALL_GATHER, in, out));
}

// Stage 3: start gathering unit u's parameters into its buffer, unless already there.
static inline void zero_prefetch(Zero *z, int u) {
    if (z->stage != 3 || u < 0 || u >= z->lay.num_units || z->gathered[u]) return;
    if (zero_is_layer(z, u)) { // into the layer buffer the layer in use is not in; its layer is dropped
        int b = z->buffer_layer[0] >= 0 && z->buffer_layer[0] == z->in_use ? 1 : 0, v = z->buffer_layer[b];
        if (v >= 0 && z->unclaimed[v]) zero_wait(z, v, "all_gather"); // (a prefetch nobody asked for)
        if (v >= 0) z->gathered[v] = z->unclaimed[v] = 0;
        z->buffer_layer[b] = u;
        z->layer_buffer[u] = b;
        z->unclaimed[u] = 1;
    }
    zero_read_ahead(z, u); // its store sends the slice from where the all-gather reads it
    const void *send = zero_store_send(&z->st, u, z->params ? zero_at(z, z->params, zero_shard_offset(z, u)) : NULL);
    double t0 = trace_clock(z->trace);
    if (z->qwz || z->hpz > 1) zero_pp_prefetch(z, u, send, t0);
    else {
        int h = !zero_starts(z, ZC_ALL_GATHER, u) ? -1 : z->be.all_gather(z->be.ctx, send, zero_gather_buffer(z, u), zero_slice(z, u), z->dtype);
        zero_issued(z, u, ZC_ALL_GATHER, gpt2_unit_padded(&z->lay, u), t0, h);
    }
    z->gathered[u] = 1;
}

// A forward pass begins (a training micro-step, a validation batch or a sampling step):
// parameters may have changed since the last one, so nothing gathered is trusted.
static inline void zero_begin_forward(Zero *z, int micro, int accum) {
    z->micro = micro;
    flight_set_step(z->flight, z->step, micro);
    z->accum = accum;
    z->forwards++;
    for (int u = 0; u < z->lay.num_units; u++) z->gathered[u] = 0;
    z->buffer_layer[0] = z->buffer_layer[1] = z->in_use = -1;
}

// The parameters of unit u, for its forward or its backward. next: the unit that will be
// needed after this one, prefetched now so that its gather overlaps this unit's compute (-1:
// none). Stage 3 re-gathers a layer for its backward (or its recompute) only if its buffer was
// reused since.
static inline void *zero_params(Zero *z, int u, int next) {
    zero_progress(z, u);
    if (z->stage != 3) return zero_at(z, z->params, z->lay.unit_offset[u]);
    // one rank's all-gather is the identity: its shard in compute memory is the whole unit
    if (z->world == 1 && z->params && z->where[MEM_PARAMS] == LOC_DEVICE) return zero_at(z, z->params, zero_shard_offset(z, u));
    zero_prefetch(z, u);
    zero_wait(z, u, "all_gather");
    if (zero_is_layer(z, u)) z->unclaimed[u] = 0, z->in_use = u;
    zero_prefetch(z, next);
    // the unit after next, in this direction, starts its read ahead into u's slot (a shard on NVMe)
    int ahead = next + (next - u);
    if (next >= 0 && (next - u == 1 || next - u == -1) && zero_is_layer(z, ahead) && zero_is_layer(z, u))
        zero_read_ahead(z, ahead);
    return zero_gather_buffer(z, u);
}

// Finish unit u's reduction in flight: wait, and for stages 2 and 3 add the received slice
// into this rank's gradient shard (micro-steps accumulate there).
static inline void zero_finish_reduce(Zero *z, int u) {
    if (z->pending[u] < 0 && !z->qg_todo[u]) return;
    zero_wait(z, u, z->stage == 0 ? "all_reduce" : "reduce_scatter");
    if (z->stage < 2) return;
    if (z->qg_todo[u]) { // qgZ: level 1 landed; level 2 (in the flight recorder) and the rounding into the receive slice
        int r = z->pending_recv[u], H = z->world / z->per_host;
        size_t s = zero_slice(z, u);
        double bytes = (double)H * zpp_qg_msg(&z->pp, s);
        int go = H > 1 && flight_start(z->flight, ZC_REDUCE_SCATTER, u, bytes, z->dtype, z->step, z->micro);
        int h = zpp_qg_level2(&z->pp, &z->be, zero_bucket(z, u), s, z->qg_slot[r], z->qg_sums, z->qg_shared, z->scatter_recv[r], go);
        if (h >= 0) {
            char desc[96];
            zero_describe(z, desc, sizeof(desc), "all_to_all across hosts (qgZ)", u);
            int64_t seq = flight_issue(z->flight, ZC_REDUCE_SCATTER, u, bytes, z->dtype, z->step, z->micro);
            flight_wait(z->flight, seq);
            z->be.wait(z->be.ctx, h, desc);
            flight_done(z->flight, seq);
            zpp_qg_land(&z->pp, &z->be, s, z->qg_sums, z->qg_shared, z->scatter_recv[r]);
        }
        z->qg_todo[u] = 0;
    }
    z->be.add(z->be.ctx, zero_at(z, z->grads, zero_shard_offset(z, u)), z->scatter_recv[z->pending_recv[u]],
              zero_slice(z, u), z->dtype);
}

// Where the backward accumulates unit u's gradient. Stages 0 and 1: the full gradient
// buffer (micro-steps accumulate in it). Stages 2 and 3: a zeroed bucket, once the bucket's
// previous user (the layer two above, for layers) has finished its reduce-scatter.
// With grads_written nothing is zeroed, and zero_grads_fresh says whether the buffer holds
// nothing of this step yet (the backward must write every element of it, not add).
static inline void *zero_grads(Zero *z, int u) {
    if (z->stage < 2) return zero_at(z, z->grads, z->lay.unit_offset[u]);
    if (zero_is_layer(z, u) && u + 2 < gpt2_final_unit(&z->lay)) zero_finish_reduce(z, u + 2);
    void *b = zero_bucket(z, u);
    if (!z->grads_written) z->be.zero(z->be.ctx, b, gpt2_unit_padded(&z->lay, u) * z->esize);
    return b;
}
static inline int zero_grads_fresh(const Zero *z, int u) {
    (void)u;
    return z->grads_written && (z->stage >= 2 || z->micro == 0);
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
            zero_issued(z, u, ZC_ALL_REDUCE, n, t0, !zero_starts(z, ZC_ALL_REDUCE, u) ? -1 : z->be.all_reduce(z->be.ctx, g, n, z->dtype));
        } else { // in place: this rank's summed slice lands on its own slice
            int h = !zero_starts(z, ZC_REDUCE_SCATTER, u) ? -1 : z->be.reduce_scatter(z->be.ctx, g, zero_at(z, g, (size_t)z->rank * zero_slice(z, u)),
                                                                       zero_slice(z, u), z->dtype);
            zero_issued(z, u, ZC_REDUCE_SCATTER, n, t0, h);
        }
        return;
    }
    if (z->world == 1) { // one rank's reduce-scatter is the identity: the bucket is its slice
        z->be.add(z->be.ctx, zero_at(z, z->grads, zero_shard_offset(z, u)), zero_bucket(z, u), n, z->dtype);
        return;
    }
    int r = u == UNIT_EMBED || u == gpt2_final_unit(&z->lay) ? 0 : 1 + u % 2;
    z->pending_recv[u] = r;
    double t0 = trace_clock(z->trace);
    if (z->qgz) { // qgZ (zero/pp.h): level 1 starts now, the rest in zero_finish_reduce
        if (!zero_starts(z, ZC_REDUCE_SCATTER, u)) return;
        size_t s = zero_slice(z, u), m = zpp_qg_msg(&z->pp, s);
        int L = z->per_host, H = z->world / L, h = zpp_qg_start(&z->pp, &z->be, zero_bucket(z, u), s, z->qg_slot[r]);
        double bytes = zero_count_pp(z, ZC_REDUCE_SCATTER, (double)(L - 1) * H * m, (double)(H - 1) * m);
        z->qg_todo[u] = 1;
        if (h >= 0) zero_issued_as(z, u, ZC_REDUCE_SCATTER, n, t0, h, bytes);
        if (u == gpt2_final_unit(&z->lay)) zero_finish_reduce(z, u);
        return;
    }
    int h = !zero_starts(z, ZC_REDUCE_SCATTER, u) ? -1 : z->be.reduce_scatter(z->be.ctx, zero_bucket(z, u), z->scatter_recv[r], zero_slice(z, u), z->dtype);
    zero_issued(z, u, ZC_REDUCE_SCATTER, n, t0, h);
    if (u == gpt2_final_unit(&z->lay)) zero_finish_reduce(z, u); // it shares scatter_recv[0]
}

// After the last backward of a micro-step: every reduction has landed.
static inline void zero_end_backward(Zero *z) {
    for (int u = 0; u < z->lay.num_units; u++) zero_finish_reduce(z, u);
}

// --- the update (its walks: zero/update.h) -------------------------------------------------

// The global gradient norm from this rank's sum of squares over its zero_update_grads.
// Under stage 0 every rank holds the whole averaged gradient, so its local sum is already the
// global one (adding the ranks' sums would count every element N times); otherwise each rank
// holds a disjoint slice and the partial sums add up: one all-reduce of one number.
static inline float zero_global_grad_norm(Zero *z, double local_sumsq) {
    if (z->stage > 0 && z->world > 1) zero_sum_scalars(z, &local_sumsq, 1);
    return (float)sqrt(local_sumsq);
}

// Stages 1, 2: after the update, every rank needs all parameters again: unit u's all-gather
// (in place), and the wait for every unit's.
static inline void zero_gather_updated_unit(Zero *z, int u) {
    if (z->stage == 0 || z->stage == 3 || z->world == 1) return;
    void *p = zero_at(z, z->params, z->lay.unit_offset[u]);
    double t0 = trace_clock(z->trace);
    int h = !zero_starts(z, ZC_ALL_GATHER, u) ? -1 : z->be.all_gather(z->be.ctx, zero_at(z, p, (size_t)z->rank * zero_slice(z, u)), p, zero_slice(z, u), z->dtype);
    zero_issued(z, u, ZC_ALL_GATHER, gpt2_unit_padded(&z->lay, u), t0, h);
}
static inline void zero_gather_updated_params(Zero *z) {
    for (int u = 0; u < z->lay.num_units; u++) zero_gather_updated_unit(z, u);
    for (int u = 0; u < z->lay.num_units; u++) zero_wait(z, u, "all_gather (updated parameters)");
}

// An optimizer's per-tensor reductions (optimizer.h: LAMB's sum p^2 and sum u^2), before its
// update: this rank's sums per tensor over its elements (zero/update.h's read-only pass), then
// over the ranks: one all-reduce of R x tensors doubles (not under stage 0, where every rank holds
// every tensor whole and computes the same sums).
static inline void zero_reductions(Zero *z, const OptStep *step) {
    if (!z->nred || !z->be.reduce) return;
    double t0 = trace_begin(z->trace, "reductions", TRACE_OPTIMIZER, -1, 0.0);
    zero_reduce_pass(z, step);
    if (z->stage > 0 && z->world > 1) zero_sum_scalars(z, z->red, z->nred);
    trace_end(z->trace, t0);
}

// Twin-Flow: the device's units (from st.host_units on) are updated by the backend's kernel and
// their all-gathers started first, so that the device works on them while the host streams its part.
// offload_param alone (back): the device's update writes each unit's new parameters back.
// A held update whose host part ran on the helper thread (zero_hold: its sums taken then) commits
// the host's units' new parameters instead of streaming them (zero/update.h's zero_held_finish).
static inline void zero_update(Zero *z, const OptStep *step) {
    int held = z->from_held && z->held_started;
    if (!held) zero_reductions(z, step);
    int streams = zero_update_on_host(z->where, z->be.unified), first = streams || held ? z->st.host_units : 0;
    int back = !streams && z->where[MEM_PARAMS] != LOC_DEVICE; // the shard is off the device: written back unit by unit
    if (back) zero_stream_begin(&z->st, 0);
    for (int u = first; u < z->lay.num_units; u++) {
        double t0 = trace_begin(z->trace, "update", TRACE_OPTIMIZER, u,
                                zero_update_bytes_per_element(z) * (double)zero_update_count(z, u));
        ZeroUpdateRun r = zero_unit_run(z, u, step);
        if (back) r.p16 = zero_store_landing_of(&z->st, u);
        gpt2_for_each_segment(&z->lay, r.base, r.base + zero_update_count(z, u),
                              back ? zero_update_back_segment : zero_update_segment, &r);
        if (back) zero_store_write_back(&z->st, u, zero_update_params(z, u), r.p16);
        trace_end(z->trace, t0);
        if (streams) zero_gather_updated_unit(z, u);
    }
    if (back) zero_stream_end(&z->st, NULL, 0);
    if (streams || held) { // the host's units; each unit's all-gather starts after its last piece
        if (held) zero_held_finish(z, zero_gather_updated_unit);
        else zero_update_streamed(z, step, zero_gather_updated_unit);
        for (int u = 0; u < z->lay.num_units; u++) zero_wait(z, u, "all_gather (updated parameters)");
    } else zero_gather_updated_params(z);
    z->from_held = 0;
}

// The delayed parameter update: step's update is held (zero/update.h's zero_hold_update); where
// its host part may overlap (zero_held_overlaps), an optimizer's per-tensor sums over the held
// gradients are taken now (a collective: on this thread) and the helper thread starts on it.
static inline void zero_hold(Zero *z, const OptStep *step) {
    zero_hold_update(z, step);
    if (!zero_held_overlaps(z)) return;
    z->from_held = 1;
    zero_reductions(z, step);
    z->from_held = 0;
    zero_held_start(z);
}

// --- parameters in and out, one unit at a time through a host buffer ---------------------

// Set unit u from unit_host (fp32, the whole padded unit): this rank's parameters (rounded to
// the element type) and, in mixed precision, its master weights (exact).
static inline void zero_set_unit(Zero *z, int u, const float *unit_host) {
    size_t n = zero_slice(z, u), begin = (size_t)z->rank * n, padded = gpt2_unit_padded(&z->lay, u);
    if (z->stage == 3) zero_put(&z->st, MEM_PARAMS, u, 0, zero_at(z, z->params, zero_shard_offset(z, u)), unit_host + begin, n, z->dtype);
    else zero_put(&z->st, MEM_PARAMS, u, 0, zero_at(z, z->params, z->lay.unit_offset[u]), unit_host, padded, z->dtype);
    if (!z->has_master) return;
    if (z->stage == 0) zero_put(&z->st, MEM_MASTER, u, 0, zero_opt_unit(z, MEM_MASTER, u), unit_host, padded, ZC_F32);
    else zero_put(&z->st, MEM_MASTER, u, 0, zero_opt_unit(z, MEM_MASTER, u), unit_host + begin, n, ZC_F32);
}

// This rank's slice of unit u's weights into host (fp32): the master weights in mixed
// precision (what checkpoints keep: rounding them again gives the parameters), else the
// parameters.
static inline void zero_get_slice(Zero *z, int u, float *host) {
    size_t n = zero_slice(z, u);
    if (z->has_master) {
        float *m = zero_opt_unit(z, MEM_MASTER, u);
        zero_get(&z->st, MEM_MASTER, u, 0, host, m && z->stage == 0 ? m + (size_t)z->rank * n : m, n, ZC_F32);
    } else {
        size_t off = z->stage == 3 ? zero_shard_offset(z, u) : zero_slice_begin(z, u);
        zero_get(&z->st, MEM_PARAMS, u, 0, host, z->params ? zero_at(z, z->params, off) : NULL, n, z->dtype);
    }
}

// State array k's share of unit u: this rank's slice into host (fp32), and from a whole
// padded unit (host, fp32) what this rank keeps (every element under stage 0, else its slice).
static inline void zero_get_state_slice(Zero *z, int k, int u, float *host) {
    float *a = zero_opt_unit(z, MEM_STATE + k, u);
    size_t n = zero_slice(z, u);
    zero_get(&z->st, MEM_STATE + k, u, 0, host, a && z->stage == 0 ? a + (size_t)z->rank * n : a, n, ZC_F32);
}
static inline void zero_set_state_unit(Zero *z, int k, int u, const float *unit_host) {
    if (z->stage == 0)
        zero_put(&z->st, MEM_STATE + k, u, 0, zero_opt_unit(z, MEM_STATE + k, u), unit_host, gpt2_unit_padded(&z->lay, u), ZC_F32);
    else
        zero_put(&z->st, MEM_STATE + k, u, 0, zero_opt_unit(z, MEM_STATE + k, u), unit_host + (size_t)z->rank * zero_slice(z, u),
                        zero_slice(z, u), ZC_F32);
}

// Zero the gradient accumulators at the start of a step; reset the step's counters.
static inline void zero_begin_step(Zero *z, int step) {
    z->step = step;
    z->be.set_step(z->be.ctx, step);
    if (z->stage >= 2 || !z->grads_written)
        z->be.zero(z->be.ctx, z->grads, (z->stage >= 2 ? zero_shard_size(z) : z->lay.num_flat) * z->esize);
    for (int k = 0; k < ZC_NUM_COLLECTIVES; k++) z->comm[k] = 0.0;
    z->comm_inside = z->comm_across = 0.0;
    zero_store_check(&z->st); // an NVMe file deleted or truncated under the job
}

// NVMe traffic since the last call (zero/store.h).
static inline ZeroNvmeStats zero_nvme_stats(Zero *z) { return zero_store_nvme_stats(&z->st); }

// --- theory, for the reports beside the measurements -------------------------------------

// Bytes communicated per rank per step (one micro-step), textbook: 2P(N-1)/N elements for
// stages 0-2, 3P(N-1)/N for stage 3, of elem_bytes each.
static inline double zero_theory_comm(int stage, double P, int N, double elem_bytes) {
    return (stage == 3 ? 3.0 : 2.0) * P * elem_bytes * (N - 1) / N;
}

// Bytes a rank sends across hosts per micro-step, as the ZeRO++ paper reasons (Wang et al. 2023,
// section 3): with Psi the model's parameters in the element type, ZeRO-3 sends a forward
// all-gather, a backward all-gather and a gradient reduce-scatter, each Psi (N-L)/N across hosts
// (what comes from the ranks off the host): 3 Psi. qwZ sends the forward's in int8 (Psi/2 from
// 16 bits), hpZ keeps the backward's inside the host (0), qgZ sends gradients in int4 (Psi/4):
// 0.75 Psi. Stage 2 has no parameter gathers beyond the update's (Psi). The measured bytes are
// lower still for qgZ with several ranks per host: its level 2 sends each rank's 1/L of the
// host's sum (zero/pp.h).
static inline double zero_theory_across(const Zero *z) {
    double P = (double)z->lay.num_params, e = (double)z->esize, N = z->world, L = z->per_host;
    double fwd = P * (z->qwz ? 1.0 : e), bwd = z->stage == 3 && z->hpz == 1 ? P * e : 0.0;
    double grad = P * (z->qgz ? z->qgz / 8.0 : e);
    return (fwd + bwd + grad) * (N - L) / N;
}

#endif // ZERO_H
