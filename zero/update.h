// zero/update.h: the optimizer's walks over the elements a rank updates, for zero.h's zero_update:
// the device's walk, the streamed update (the optimizer state or the parameters off the device),
// an optimizer's per-tensor reduction pass, Twin-Flow's device part and the delayed update.
//
// Contract
//   Runs. A unit's elements (zero/state.h: zero_update_begin, zero_update_count) are walked as
//   runs of one kind (decayed, not decayed, frozen: padding and unused vocabulary rows stay zero),
//   because a partition boundary can cut through any tensor (gpt2_for_each_segment). A run's
//   ZeroUpdateRun holds where its fp32 weights (the master in mixed precision), state arrays,
//   gradient and 16-bit parameters begin; origin is where the unit's elements begin (the
//   reduction pass's blocks count from it).
//   The device's walk (zero_update_segment): the backend's update kernel. With the parameter
//   shard off the device (offload_param alone), zero_update_back_segment rounds the new 16-bit
//   parameters into the unit's landing slice instead (frozen runs zeroed: the slice last held
//   another unit's), which zero/store.h then writes back where the shard lives.
//   The streamed update (zero_update_streamed): for each piece of at most z->st.piece elements of
//   one unit's slice (a whole slice unless something is on NVMe), its gradient, master weights,
//   state arrays and parameters are opened where the host addresses them (zero/store.h's stream),
//   updated by the CPU optimizer engine (optimizer_engine.h; a simulated backend's host_update
//   instead) and closed back; after a unit's last piece the caller's unit_done runs (zero.h: stages
//   1 and 2 start its all-gather). Frozen runs are written as the zeros they are, since staging is
//   reused. Each unit is an "update" span, and
//   on a traced GPU the whole a "gpu idle" span (core/trace.h's trace_device_idle: the compute
//   stream is drained at the first span's start and gets no kernel until the last one's end but
//   ZeRO++'s quantization of an all-gather, when qwZ is on).
//   Per-tensor reductions (an optimizer that declares them, optimizer.h: LAMB's sum p^2, sum u^2):
//   zero_reduce_pass adds each tensor's terms of this rank's elements (ParamSegment.tensor) into
//   z->red, R doubles per tensor of the model (host memory, counted among the buffers:
//   zero_reduction_elems), read only, streamed over the same pieces when the update streams (with
//   NVMe the master weights and state arrays are read twice a step). zero.h then sums them over the
//   ranks, and each tensor's runs are updated with optimizer_step_for_tensor (zero_tensor_step).
//   The engine's block rule (optimizer_engine.h) and pieces that are multiples of its block make
//   the sums, and so the update, the same bits streamed or in memory. A backend without `reduce`
//   skips the pass (the step-time model charges its bytes in its update instead).
//   Twin-Flow (zero/store.h's split): with the optimizer offloaded to the host, the units from
//   st.host_units on keep their master weights and state on the device (twin_master, twin_state,
//   zero_twin_alloc; zero/state.h's zero_opt_unit finds a unit's); zero.h updates them with the
//   device's walk before it streams the host's units, so the two run at once. It needs the
//   parameters on the device (zero_offload_check).
//   The delayed parameter update (ZeroOptions.delayed_update, stages 1-3; ZeRO-Offload's DPU;
//   docs/offload.md): zero_hold_update keeps a step's update gradients in a second shard (held,
//   counted as gradients) with its OptStep instead of updating; zero_take_held hands it back, and
//   the next zero_update reads the held gradients (zero_update_grads while z->from_held). The
//   caller decides when (run/trainer.h: after the next step's forward and backward).
//   Meanwhile its host part runs on a helper thread (zero_held_start, from zero.h's zero_hold):
//   the host's units (st.host_units: all of them on a unified backend) updated by the CPU
//   optimizer engine from the held gradients in host memory, their new parameters into a staging
//   shard (held_out); the thread touches host memory only and calls no backend entry. With the
//   optimizer state on NVMe it streams the update's pieces through the stores as the streamed
//   update does (zero_update_pieces; the gradients and parameters in place in the held shard's host
//   copy and held_out): the step's thread begins the stream before it starts the helper and ends it
//   after the join, and does not touch the stores in between (zero/store.h's zero_store_hand: no
//   polls; the helper's I/O is counted at the join, its spans drawn on its own lane). On a device
//   the host cannot address the held gradients reach it by a copy: into pinned memory an
//   asynchronous one, overlapped with the next forward, which the step's thread polls at unit
//   boundaries (zero_held_poll, from zero.h's zero_progress) and the helper waits for before it
//   reads them; into pageable memory a synchronous one (CUDA stages it). The next
//   zero_update joins it and puts the parameters in place (zero_held_finish), with the same bits
//   as the synchronous update. Not with the parameter shard on NVMe (zero_held_threaded), nor when
//   the caller sets z->held_sync: then the next zero_update streams the held update as above.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_UPDATE_H
#define ZERO_UPDATE_H

#include <stdlib.h>
#include <string.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "core/optimizer_engine.h"
#include "core/trace.h"
#include "mixed_precision.h"
#include "zero/state.h"
#include "zero/store.h"

// Elements (of the model's type) of the per-tensor sums vector of an optimizer with reductions:
// R doubles per tensor of the model (optimizer.h, gpt2_num_tensors), whatever the stage.
static inline size_t zero_reduction_elems(const Zero *z) {
    size_t n = (size_t)optimizer_reductions(z->optimizer) * (size_t)gpt2_num_tensors(&z->lay);
    return n * sizeof(double) / z->esize;
}

// --- runs --------------------------------------------------------------------------------

typedef struct { Zero *z; size_t base; float *p, *state[OPT_MAX_SLICES]; void *g, *p16; const OptStep *step; size_t origin; } ZeroUpdateRun;
// Unit u's run in memory (the device's walk, and the reduction pass over it): the master weights
// (else the parameters) as the fp32 weights, rounded into the parameters in mixed precision.
static inline ZeroUpdateRun zero_unit_run(Zero *z, int u, const OptStep *step) {
    size_t begin = zero_update_begin(z, u);
    void *p = zero_update_params(z, u);
    float *master = z->has_master ? zero_opt_unit(z, MEM_MASTER, u) : NULL;
    ZeroUpdateRun r = {z, begin, master ? master : (float *)p, {NULL}, zero_update_grads(z, u), master ? p : NULL, step, begin};
    for (int k = 0; k < z->nstate; k++) r.state[k] = zero_opt_unit(z, MEM_STATE + k, u);
    return r;
}
// A streamed piece's run: each kind where zero/store.h's stream opened it (at).
static inline ZeroUpdateRun zero_piece_run(Zero *z, const ZeroPiece *pc, void *const at[MEM_BUFFERS], const OptStep *step) {
    size_t begin = zero_update_begin(z, pc->u);
    ZeroUpdateRun r = {z, begin + pc->lo, (float *)at[MEM_MASTER], {NULL}, at[MEM_GRADS], at[MEM_PARAMS], step, begin};
    for (int k = 0; k < z->nstate; k++) r.state[k] = (float *)at[MEM_STATE + k];
    return r;
}
// A segment walker's start (ctx: its ZeroUpdateRun): NULL for a frozen run (nothing to update
// or sum); else the run, where the segment starts in it (*lo) and its state arrays from there.
static inline const ZeroUpdateRun *zero_run_at(const ParamSegment *seg, void *ctx, float *state[OPT_MAX_SLICES], size_t *lo) {
    const ZeroUpdateRun *r = (const ZeroUpdateRun *)ctx;
    if (seg->kind == SEG_FROZEN) return NULL;
    *lo = seg->begin - r->base;
    for (int k = 0; k < OPT_MAX_SLICES; k++) state[k] = k < r->z->nstate ? r->state[k] + *lo : NULL;
    return r;
}
// The step for a run of one tensor: with per-tensor reductions, its sums' factor in place (optimizer.h).
static inline OptStep zero_tensor_step(const Zero *z, const OptStep *step, int tensor) {
    if (!z->nred || !z->be.reduce || tensor < 0) return *step;
    return optimizer_step_for_tensor(step, z->red + (size_t)tensor * optimizer_reductions(z->optimizer));
}
// Bytes the update reads and writes per element it owns: the fp32 weight (the master in mixed
// precision) and each state array read and written, the gradient read, and in mixed precision
// the 16-bit parameter written (AdamW: 28 in every precision).
static inline double zero_update_bytes_per_element(const Zero *z) {
    return 8.0 + 8.0 * z->nstate + (double)z->esize + (z->dtype != ZC_F32 ? (double)z->esize : 0.0);
}

// --- the walks ---------------------------------------------------------------------------

// The device's: the backend's update kernel over the run.
static inline void zero_update_segment(const ParamSegment *seg, void *ctx) {
    float *state[OPT_MAX_SLICES];
    size_t lo;
    const ZeroUpdateRun *r = zero_run_at(seg, ctx, state, &lo);
    if (!r) return;
    Zero *z = r->z;
    OptStep step = zero_tensor_step(z, r->step, seg->tensor);
    z->be.update(z->be.ctx, &step, r->p + lo, state, zero_at(z, r->g, lo), r->p16 ? zero_at(z, r->p16, lo) : NULL,
                 seg->end - seg->begin, z->dtype, seg->kind == SEG_DECAY);
}
// The device's with the shard off the device: into the landing slice, frozen runs zeroed there.
static inline void zero_update_back_segment(const ParamSegment *seg, void *ctx) {
    ZeroUpdateRun *r = (ZeroUpdateRun *)ctx;
    Zero *z = r->z;
    if (seg->kind == SEG_FROZEN)
        z->be.zero(z->be.ctx, zero_at(z, r->p16, seg->begin - r->base), (seg->end - seg->begin) * z->esize);
    else zero_update_segment(seg, ctx);
}
// The host's (the streamed update): the CPU optimizer engine; frozen runs written as zeros.
static inline void zero_update_host_segment(const ParamSegment *seg, void *ctx) {
    ZeroUpdateRun *r = (ZeroUpdateRun *)ctx;
    Zero *z = r->z;
    size_t n = seg->end - seg->begin;
    if (seg->kind == SEG_FROZEN) {
        if (r->p16 && !z->be.host_update) memset(zero_at(z, r->p16, seg->begin - r->base), 0, n * z->esize);
        return;
    }
    float *state[OPT_MAX_SLICES];
    size_t lo;
    zero_run_at(seg, ctx, state, &lo);
    OptStep step = zero_tensor_step(z, r->step, seg->tensor);
    void *p16 = r->p16 ? zero_at(z, r->p16, lo) : NULL;
    if (z->be.host_update) // (a simulated host: zero/backend.h)
        z->be.host_update(z->be.ctx, &step, r->p + lo, state, zero_at(z, r->g, lo), p16, n, z->dtype,
                          seg->kind == SEG_DECAY);
    else optimizer_update_host(&step, r->p + lo, state, zero_at(z, r->g, lo), p16, n, z->dtype, seg->kind == SEG_DECAY);
}
// The reduction pass's: this tensor's terms added into its sums (nothing else written).
static inline void zero_reduce_segment(const ParamSegment *seg, void *ctx) {
    float *state[OPT_MAX_SLICES];
    size_t lo;
    const ZeroUpdateRun *r = zero_run_at(seg, ctx, state, &lo);
    if (!r) return;
    Zero *z = r->z;
    z->be.reduce(z->be.ctx, r->step, r->p + lo, state, zero_at(z, r->g, lo), seg->end - seg->begin, z->dtype,
                 seg->kind == SEG_DECAY, seg->begin - r->origin,
                 z->red + (size_t)seg->tensor * optimizer_reductions(z->optimizer));
}

// --- the streamed update -----------------------------------------------------------------

// The pieces, unit by unit, with where each kind's elements are in memory (a malloc'd list of *count).
static inline ZeroPiece *zero_piece_list(const Zero *z, int *count) {
    int P = 0;
    size_t piece = z->st.piece;
    int H = z->st.host_units; // (Twin-Flow: the units after them update on the device)
    for (int u = 0; u < H; u++) P += (int)((zero_slice(z, u) + piece - 1) / piece);
    ZeroPiece *list = (ZeroPiece *)calloc((size_t)P, sizeof(ZeroPiece));
    if (!list) z->be.fatal(z->be.ctx, "out of host memory for the offloaded update's piece list");
    P = 0;
    for (int u = 0; u < H; u++)
        for (size_t lo = 0, n = zero_slice(z, u); lo < n; lo += piece) {
            ZeroPiece *pc = &list[P++];
            pc->u = u; pc->lo = lo; pc->n = n - lo < piece ? n - lo : piece;
            pc->at[MEM_GRADS] = zero_at(z, zero_update_grads(z, u), lo);
            pc->at[MEM_PARAMS] = zero_at(z, zero_update_params(z, u), lo);
            pc->at[MEM_MASTER] = z->master ? zero_opt_unit(z, MEM_MASTER, u) + lo : NULL;
            for (int k = 0; k < z->nstate; k++) pc->at[MEM_STATE + k] = z->state[k] ? zero_opt_unit(z, MEM_STATE + k, u) + lo : NULL;
        }
    *count = P;
    return list;
}
// The P pieces of a begun stream, updated in order; unit_done(z, u) after each unit's last piece
// (NULL: none). Each unit an "update" span (the delayed update's helper: of its own lane); *t_first
// and *t_last: when the first began and the last ended.
static inline void zero_update_pieces(Zero *z, const ZeroPiece *pcs, int P, const OptStep *step,
                                      void (*unit_done)(Zero *z, int u), double *t_first, double *t_last) {
    double t_unit = 0.0;
    for (int i = 0; i < P; i++) {
        const ZeroPiece *pc = &pcs[i];
        int u = pc->u;
        double bytes = zero_update_bytes_per_element(z) * (double)zero_update_count(z, u);
        if (pc->lo == 0) { // the unit's update: a span over its pieces
            t_unit = zero_store_span_begin(&z->st, "update", TRACE_OPTIMIZER, u, bytes);
            if (i == 0) *t_first = t_unit;
        }
        void *at[MEM_BUFFERS] = {NULL};
        zero_stream_open(&z->st, pcs, P, i, at);
        ZeroUpdateRun r = zero_piece_run(z, pc, at, step);
        gpt2_for_each_segment(&z->lay, r.base, r.base + pc->n, zero_update_host_segment, &r);
        zero_stream_close(&z->st, pc, i);
        if (pc->lo + pc->n < zero_slice(z, u)) continue;
        *t_last = t_unit + zero_store_span_end(&z->st, "update", TRACE_OPTIMIZER, u, bytes, t_unit);
        if (unit_done) unit_done(z, u);
    }
}
// The units before st.host_units, piece by piece; unit_done(z, u) after each unit's last piece.
static inline void zero_update_streamed(Zero *z, const OptStep *step, void (*unit_done)(Zero *z, int u)) {
    int P;
    ZeroPiece *pcs = zero_piece_list(z, &P);
    zero_stream_begin(&z->st, 0);
    double t_first = 0.0, t_last = 0.0;
    zero_update_pieces(z, pcs, P, step, unit_done, &t_first, &t_last);
    // (the compute stream got no kernel meanwhile: copies' and all-gathers' waits only, but qwZ's)
    if (P) trace_device_idle(z->trace, "gpu idle", t_first, t_last);
    zero_stream_end(&z->st, pcs, P);
    free(pcs);
}

// --- per-tensor reductions -----------------------------------------------------------------

// This rank's terms of every tensor into z->red (zeroed first): over the same pieces, read only
// (zero/store.h's read pass), when the update streams; else over each unit in memory.
static inline void zero_reduce_pass(Zero *z, const OptStep *step) {
    memset(z->red, 0, (size_t)z->nred * sizeof(double));
    if (zero_update_on_host(z->where, z->be.unified)) {
        int P;
        ZeroPiece *pcs = zero_piece_list(z, &P);
        zero_stream_begin(&z->st, 1);
        for (int i = 0; i < P; i++) {
            void *at[MEM_BUFFERS] = {NULL};
            zero_stream_open(&z->st, pcs, P, i, at);
            ZeroUpdateRun r = zero_piece_run(z, &pcs[i], at, step);
            gpt2_for_each_segment(&z->lay, r.base, r.base + pcs[i].n, zero_reduce_segment, &r);
            zero_stream_close(&z->st, &pcs[i], i);
        }
        zero_stream_end(&z->st, pcs, P); // (with NVMe: the update's first pieces read ahead now)
        free(pcs);
        return;
    }
    for (int u = 0; u < z->lay.num_units; u++) {
        ZeroUpdateRun r = zero_unit_run(z, u, step);
        gpt2_for_each_segment(&z->lay, r.base, r.base + zero_update_count(z, u), zero_reduce_segment, &r);
    }
}

// --- Twin-Flow and the delayed update ------------------------------------------------------

// What zero_init refuses (one line through the backend's fatal): Twin-Flow with the parameters
// off the device, the delayed update under stage 0.
static inline void zero_offload_check(const Zero *z, const ZeroOptions *o) {
    if (z->st.host_units < z->lay.num_units && z->where[MEM_PARAMS] != LOC_DEVICE)
        z->be.fatal(z->be.ctx, "offload_optimizer.ratio below 1 (Twin-Flow) needs the parameters on the device (the device's "
                               "part of the update writes them there)");
    if (o->delayed_update && z->stage == 0) z->be.fatal(z->be.ctx, "the delayed parameter update needs ZeRO stage 1-3 (offload)");
}
// Twin-Flow's device part of the master weights and state arrays: `twin` elements each.
static inline void zero_twin_alloc(Zero *z, size_t twin) {
    if (!twin) return;
    ZeroStore *st = &z->st;
    const ZeroLocation *dev = st->loc[LOC_DEVICE];
    if (z->has_master) z->twin_master = (float *)dev->alloc(st, MEM_MASTER, twin * sizeof(float));
    for (int k = 0; k < z->nstate; k++) z->twin_state[k] = (float *)dev->alloc(st, MEM_STATE + k, twin * sizeof(float));
}
// The delayed update's host part runs on a helper thread unless the parameter shard is on NVMe
// (zero/store.h's zero_held_threaded). Its staging (elements of the model's type, MEM_STAGING): the
// new parameters of the host's units (st.host_elems: all of them without Twin-Flow), and on a
// device the host cannot address (not unified) their held gradients copied to the host.
static inline size_t zero_held_staging_bytes(const ZeroStore *s, int unified, int delayed) {
    return zero_held_threaded(s->where, delayed) ? (unified ? 1 : 2) * s->host_elems * s->esize : 0;
}
// The delayed update's held gradients: a second gradient shard; and the helper thread's staging.
static inline void zero_held_alloc(Zero *z, const ZeroOptions *o) {
    if (o->delayed_update) z->held = zero_store_alloc(&z->st, MEM_GRADS, zero_shard_size(z));
    if (!zero_held_threaded(z->where, o->delayed_update)) return;
    z->held_out = zero_store_alloc(&z->st, MEM_STAGING, z->st.host_elems);
    z->held_host = z->st.loc[LOC_DEVICE]->staged ? zero_store_alloc(&z->st, MEM_STAGING, z->st.host_elems) : z->held;
    z->held_async = z->held_host != z->held && z->st.pinned && z->be.copy_landed;
    pthread_mutex_init(&z->held_mu, NULL);
    pthread_cond_init(&z->held_cv, NULL);
}
static inline void zero_held_join(Zero *z);
static inline void zero_offload_free(Zero *z) {
    ZeroStore *st = &z->st;
    zero_held_join(z);
    if (z->held_host != z->held) zero_store_free(st, MEM_STAGING, z->held_host);
    if (z->held_out) { pthread_mutex_destroy(&z->held_mu); pthread_cond_destroy(&z->held_cv); }
    zero_store_free(st, MEM_STAGING, z->held_out);
    zero_store_free(st, MEM_GRADS, z->held);
    st->loc[LOC_DEVICE]->free(st, z->twin_master);
    for (int k = 0; k < OPT_MAX_SLICES; k++) st->loc[LOC_DEVICE]->free(st, z->twin_state[k]);
}

// Step i's update is held instead of applied: its gradients (what zero_update would read) are
// copied into z->held with its OptStep; the next step, after its forward and backward (which so
// compute with the parameters from before update i), takes it: zero_take_held says whether one is
// pending, gives its OptStep and makes the next zero_update read the held gradients.
static inline void zero_hold_update(Zero *z, const OptStep *step) {
    z->be.zero(z->be.ctx, z->held, zero_shard_size(z) * z->esize);
    for (int u = 0; u < z->lay.num_units; u++)
        z->be.add(z->be.ctx, zero_at(z, z->held, zero_shard_offset(z, u)), zero_update_grads(z, u), zero_update_count(z, u), z->dtype);
    z->held_step = *step;
    z->held_pending = 1;
}
static inline int zero_take_held(Zero *z, OptStep *step) {
    if (!z->held_pending) return 0;
    *step = z->held_step;
    z->held_pending = 0;
    z->from_held = 1;
    return 1;
}

// --- the delayed update's host part on a helper thread ----------------------------------------

// Whether a held update's host part may run on the helper thread (zero_held_alloc gave it its
// staging, and the caller did not ask for the synchronous update).
static inline int zero_held_overlaps(const Zero *z) { return z->held_out && !z->held_sync; }
// The helper thread: the held update of the host's units (st.host_units), each as the update walks
// it (the CPU optimizer engine, optimizer_engine.h: also a unified backend's update), reading the
// held gradients at held_host and writing the new parameters into held_out (in fp32 without
// master weights, held_out first takes the parameters, which are then the weights it updates).
// It touches host memory only (the master weights and state arrays in place: nothing else reads
// them before zero_held_finish joins it) and calls no backend entry: no collective, no copy. Each
// unit is an "update" span of its own lane (trace_span: safe from any thread, never syncing the
// device).
// With the optimizer state on NVMe (held_pcs) it streams the update's pieces through the stores as
// zero_update_streamed does (the stream begun and ended by the step's thread: zero_held_start,
// zero_held_join), the gradients and parameters opened in place in held_host and held_out.
static inline void *zero_held_main(void *arg) {
    Zero *z = (Zero *)arg;
    pthread_mutex_lock(&z->held_mu); // (the held gradients' copy: until the step's thread saw it land)
    while (!z->held_landed) pthread_cond_wait(&z->held_cv, &z->held_mu);
    pthread_mutex_unlock(&z->held_mu);
    if (z->held_pcs) {
        double t0 = 0.0, t1 = 0.0;
        zero_update_pieces(z, z->held_pcs, z->held_npcs, &z->held_step, NULL, &t0, &t1);
        return NULL;
    }
    for (int u = 0; u < z->st.host_units; u++) {
        double t0 = trace_clock(z->trace);
        size_t begin = zero_update_begin(z, u), n = zero_update_count(z, u), off = zero_shard_offset(z, u);
        void *out = zero_at(z, z->held_out, off);
        float *master = z->has_master ? zero_opt_unit(z, MEM_MASTER, u) : NULL;
        if (!master) memcpy(out, zero_update_params(z, u), n * z->esize);
        ZeroUpdateRun r = {z, begin, master ? master : (float *)out, {NULL}, zero_at(z, z->held_host, off),
                           master ? out : NULL, &z->held_step, begin};
        for (int k = 0; k < z->nstate; k++) r.state[k] = zero_opt_unit(z, MEM_STATE + k, u);
        gpt2_for_each_segment(&z->lay, begin, begin + n, zero_update_host_segment, &r);
        trace_span_of(z->trace, z->st.helper_step, "update", TRACE_OPTIMIZER, u,
                      zero_update_bytes_per_element(z) * (double)n, t0, trace_clock(z->trace));
    }
    return NULL;
}
// The held gradients' copy has landed in held_host (the step's thread saw it: zero_held_poll, or
// waited for it): the helper may read them. A "held gradients" span of the offload lanes from the
// copy's issue to then.
static inline void zero_held_landed(Zero *z) {
    if (z->held_inflight) trace_span(z->trace, "held gradients", TRACE_OFFLOAD, -1,
                                     (double)(z->st.host_elems * z->esize), z->held_copy_t0, trace_clock(z->trace));
    z->held_inflight = 0;
    pthread_mutex_lock(&z->held_mu);
    z->held_landed = 1;
    pthread_cond_signal(&z->held_cv);
    pthread_mutex_unlock(&z->held_mu);
}
// At a unit boundary of the next step's forward and backward (zero.h's zero_progress): the held
// gradients' copy polled (never waited for); once it landed the helper starts its update.
static inline void zero_held_poll(Zero *z) {
    if (z->held_inflight && z->be.copy_landed(z->be.ctx, z->held_copy)) zero_held_landed(z);
}
// Step i's update was just held (zero_hold_update; an optimizer's per-tensor sums already taken
// over the held gradients): the host's units' held gradients go where the host reads them, and
// the helper thread starts on them; it runs during step i+1's forward and backward. Into pinned
// memory (held_async) the copy runs on the backend's copy stream behind the hold (which wrote the
// held shard: nothing writes it again before zero_held_finish joins the helper), overlapped with
// the next forward, and the helper waits for zero_held_poll to see it land; into pageable memory
// it is waited for here (the step's thread could not overlap it anyway: CUDA stages it). The
// stores are the helper's until zero_held_join (zero/store.h's zero_store_hand; its spans are of
// the next step); with the optimizer state on NVMe its stream begins here, on the step's thread,
// over pieces whose gradients and parameters are held_host's and held_out's. A thread that cannot
// start leaves the work to this one, at once.
static inline void zero_held_start(Zero *z) {
    z->held_landed = 1;
    if (z->held_host != z->held) {
        z->held_copy_t0 = trace_clock(z->trace);
        int copy = z->be.copy_to_host(z->be.ctx, z->held_host, z->held, z->st.host_elems * z->esize);
        if (z->held_async) { z->held_copy = copy; z->held_inflight = 1; z->held_landed = 0; }
        else zero_store_host_wait(&z->st, copy, "the held gradients' copy to the host (delayed update)");
    }
    zero_store_hand(&z->st, 1, z->trace ? z->trace->step + 1 : 0);
    if (z->where[MEM_MASTER] == LOC_NVME) {
        ZeroPiece *pcs = zero_piece_list(z, &z->held_npcs);
        for (int i = 0; i < z->held_npcs; i++) {
            size_t off = zero_shard_offset(z, pcs[i].u) + pcs[i].lo;
            pcs[i].at[MEM_GRADS] = zero_at(z, z->held_host, off);
            pcs[i].at[MEM_PARAMS] = zero_at(z, z->held_out, off);
        }
        z->held_pcs = pcs;
        zero_stream_begin(&z->st, 0);
    }
    z->held_started = 1;
    if (pthread_create(&z->held_thread, NULL, zero_held_main, z) == 0) { z->held_started = 2; return; }
    if (z->held_inflight) { // no helper: wait here and update on this thread
        zero_store_host_wait(&z->st, z->held_copy, "the held gradients' copy to the host (delayed update)");
        zero_held_landed(z);
    }
    zero_held_main(z);
}
static inline void zero_held_join(Zero *z) {
    if (z->held_inflight) { // not seen landed by the polls: wait for it, then let the helper go
        zero_store_host_wait(&z->st, z->held_copy, "the held gradients' copy to the host (delayed update)");
        zero_held_landed(z);
    }
    if (z->held_started == 2) pthread_join(z->held_thread, NULL);
    if (z->held_started) z->held_started = 1;
    if (!z->st.helper) return;
    zero_store_hand(&z->st, 0, 0); // the stores back to the step's thread; the helper's stream ends
    if (!z->held_pcs) return;
    zero_stream_end(&z->st, z->held_pcs, z->held_npcs);
    free(z->held_pcs);
    z->held_pcs = NULL;
}
// After the next step's backward (zero.h's zero_update, the held step's): waits for the helper
// (a "wait update" span: the host's update the step's thread waits for; on a traced GPU also a
// "gpu idle" span, core/trace.h's trace_device_idle: the device has nothing queued then), then puts each host unit's
// new parameters where the shard is (a copy to a device the host cannot address, its all-gather
// ordered after it; else in place) and calls unit_done(z, u) (stages 1 and 2: its all-gather).
static inline void zero_held_finish(Zero *z, void (*unit_done)(Zero *z, int u)) {
    double t0 = trace_begin(z->trace, "wait update", TRACE_OPTIMIZER, -1, 0.0);
    if (z->st.helper) zero_store_hand(&z->st, 2, 0); // (NVMe: what the helper waits for from now on is exposed)
    zero_held_join(z);
    trace_device_idle(z->trace, "gpu idle", t0, t0 + trace_end(z->trace, t0)); // (nothing queued meanwhile)
    z->held_started = 0;
    int staged = zero_store_of(&z->st, MEM_PARAMS)->staged, copy[2] = {-1, -1};
    for (int u = 0; u < z->st.host_units; u++) {
        const void *src = zero_at(z, z->held_out, zero_shard_offset(z, u));
        size_t bytes = zero_update_count(z, u) * z->esize;
        if (!staged) memcpy(zero_update_params(z, u), src, bytes);
        else {
            if (copy[u % 2] >= 0) zero_store_host_wait(&z->st, copy[u % 2], "a held update's parameters' copy to the device");
            copy[u % 2] = z->be.copy_to_device(z->be.ctx, zero_update_params(z, u), src, bytes);
            z->be.device_wait(z->be.ctx, copy[u % 2]);
        }
        unit_done(z, u);
    }
    for (int q = 0; q < 2; q++) // (held_out is written again by the next held update)
        if (copy[q] >= 0) zero_store_host_wait(&z->st, copy[q], "a held update's parameters' copy to the device");
}

#endif // ZERO_UPDATE_H
