// zero/store.h: where a rank's model states live, and how they get to where they are used:
// placement, staging and the streamed update's pieces, behind one store per location (the device's
// and the host's here; NVMe's in zero/nvme_store.h).
//
// Contract
//   Placement (zero_placement). By default everything is in the backend's compute memory
//   ("device": the GPU's, or the CPU trainer's own). offload_optimizer = host (stages 1-3) puts
//   the fp32 master weights (kept even in fp32 runs: the update needs its parameters where it
//   runs) and the optimizer's state arrays in host memory (page-locked with pin_memory), and the
//   update runs there, on the CPU optimizer engine (optimizer_engine.h): unit by unit, the unit's
//   reduced gradient slice is copied to host staging, updated on the host, and its new 16-bit
//   parameters copied back, the copies of the next piece in flight while the host updates this
//   one. Twin-Flow (twin_device = 1 - DeepSpeed's offload_optimizer.ratio > 0, cpu offload only,
//   parameters not offloaded): the shard's first units, up to the nearest whole unit to a fraction
//   ratio of its elements (zero_twin_split), live and update on the host as above; the remaining
//   units' master weights and state arrays stay in device memory and are updated there by the
//   backend's kernel, launched before the host's part so that both run at once. Each kind's bytes
//   are counted once (mem[kind]); the device part of the offloaded kinds is zero_twin_bytes.
//   offload_param = host (stage 3) keeps this rank's 16-bit parameter shard in host memory
//   too: before a unit's all-gather its slice is copied to a device landing slice, and the update
//   writes the shard in place. offload_param without offload_optimizer (host or NVMe; DeepSpeed
//   takes it): the optimizer stays on the device with fp32 master weights (kept even in fp32
//   runs, as with any shard off the device) and the update runs there, rounding each unit's new
//   parameters into the unit's landing slice, which then goes where the shard lives, a piece at a
//   time (zero_store_write_back: copied into the host shard, or through the NVMe buffer sets to
//   the file). The gradients stay on the device. A backend whose compute memory
//   is the host's (unified) offloads nothing to the host: there is nowhere to move to. Staging is
//   bounded: two pieces of gradients and two of parameters on the host, one slice per gather
//   buffer on the device.
//   NVMe (ZeRO-Infinity): offload_optimizer = nvme (stages 1-3) keeps the master weights and the
//   state arrays in files, offload_param = nvme (stage 3) the parameter shard too; the NVMe store,
//   its buffer sets, host tier, read-ahead across the step boundary and failure rules are
//   zero/nvme_store.h's. This header sizes the pieces (zero_store_pieces) and the device's
//   staging (zero_store_staging_bytes); the NVMe store sizes its own (zero_nvme_shape,
//   zero_staging_bytes: the planner asks too).
//
//   The stores. Each location (zero/location.h) is one ZeroLocation, a table of what a kind's
//   memory there does: alloc and free (counted per kind), put and get (the host's fp32 in and
//   out, one unit's slice at a time: initialisation and checkpoints), prefetch and send (a unit's
//   parameter slice on its way to its all-gather: read ahead, then where the gather reads it),
//   and the streamed update's fetch, open and close of piece i (the gradient read, the master
//   weights and state arrays read and written, the parameters written: in place where the host
//   can address them, else through staging or a buffer set); and, where a store keeps more than
//   its kinds' memory (NVMe: files, buffer sets, reads in flight), that state (state[location],
//   of a type only that store knows), its own staging, its part of a stream's begin and end, a
//   poll at every unit boundary, which unit holds a gather slot (holder), its release, and its part
//   in handing the stores to the delayed update's helper thread and back (hand, zero_store_hand;
//   NULL: nothing). The
//   device's store is one of two: compute memory the host cannot address (the GPU: copies) or can
//   (unified: the CPU trainer). zero.h asks the kind's store and never which location it is.
//   Timeline (core/trace.h): the host's waits for a staging copy are "wait copy" spans (offload);
//   the NVMe store's spans: zero/nvme_store.h.
//   A ZeroStore is bound by zero_store_init (and zero_nvme_bind) to its Zero's backend, trace,
//   layout, placement and byte counts, so that Zero must not move afterwards.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_STORE_H
#define ZERO_STORE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "core/trace.h"
#include "mixed_precision.h"
#include "zero/backend.h"
#include "zero/location.h"

// The kinds of memory a rank holds. MEM_STATE + k is the optimizer's state array k (named by
// optimizer.h: "adam_m", "adam_v", "lion_m", ...). staging: the offload's transfer buffers in
// host memory. activations and workspace (what a trainer needs beyond these to compute: the CPU
// trainer's fp32 working copies in 16-bit runs) are counted by the trainer, and so are the
// activations a device trainer keeps in host memory (host_activations: the GPU trainer's
// checkpoints with cpu_checkpointing). hpz: ZeRO++ hpZ's secondary parameter shard (zero.h), the
// parameters partitioned over a host's group of ranks, in the element type.
enum { MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_STATE, MEM_BUFFERS = MEM_STATE + OPT_MAX_SLICES, MEM_STAGING,
       MEM_ACTIVATIONS, MEM_WORKSPACE, MEM_HOST_ACTIVATIONS, MEM_HPZ, MEM_KINDS };
// The kind's name in logs and plans; NULL for a state array the optimizer does not keep.
static inline const char *zero_memory_name(int optimizer, int kind) {
    static const char *const names[MEM_KINDS] = {"params", "grads", "master", "state0", "state1", "buffers", "staging",
                                                 "activations", "workspace", "host_activations", "hpz"};
    if (kind >= MEM_STATE && kind < MEM_STATE + OPT_MAX_SLICES) return optimizer_info(optimizer)->slice_names[kind - MEM_STATE];
    return names[kind];
}

// What a rank keeps, and where (zero_init).
typedef struct {
    int stage;             // 0-3
    int dtype;             // of parameters, gradients, buffers: ZC_F32, ZC_BF16, ZC_FP16
    int optimizer;         // optimizer.h's kind: its state arrays
    int offload_optimizer; // LOC_DEVICE (none), LOC_HOST or LOC_NVME: master weights and state arrays (stages 1-3)
    int offload_param;     // LOC_DEVICE (none), LOC_HOST or LOC_NVME: the 16-bit parameter shard (stage 3)
    int pin_memory;        // offloaded host memory page-locked
    int delayed_update;    // the delayed parameter update: a second gradient shard holds the one whose
                           // update waits a step (zero/update.h's zero_hold_update)
    double twin_device;    // Twin-Flow: 1 - offload_optimizer.ratio, the part of an offloaded (cpu) optimizer
                           // shard that stays on the device and is updated there (0: all of it offloaded)
    // NVMe: this rank's scratch directory (made and, at a clean exit, removed here), the buffer
    // sets the update streams through (>= 2; DeepSpeed's buffer_count), the piece in elements
    // (DeepSpeed's buffer_size), I/O threads and bytes per request (aio.thread_count, block_size)
    const char *nvme_dir;
    int nvme_buffers;
    size_t nvme_piece;
    int nvme_threads;
    size_t nvme_block;
    // ZeRO++ (zero.h): qwZ (1: stage 3's parameter all-gathers in int8 blocks), hpZ's group of
    // consecutive ranks (<= 1: off), qgZ's bits (0: off, 4, 8), the block (0: 2048), and the ranks
    // per host qgZ's hierarchy uses (0: the backend's host_size)
    int zeropp_qwz, zeropp_hpz, zeropp_qgz, zeropp_block, zeropp_per_host;
    // NVMe's host tier: bytes of the optimizer state kept in host memory instead of its files;
    // its read-ahead: bytes of host memory the next update's first pieces are read into during
    // the forward and backward (zero/nvme_store.h)
    size_t nvme_host_cache, nvme_readahead;
} ZeroOptions;
// Nothing offloaded; the rest as given.
static inline ZeroOptions zero_options(int stage, int dtype, int optimizer) {
    ZeroOptions o;
    memset(&o, 0, sizeof(o));
    o.stage = stage; o.dtype = dtype; o.optimizer = optimizer;
    return o;
}

// One piece of the streamed update: n elements of unit u's slice from element lo, and where each
// kind's elements are in memory (NULL: in a file).
typedef struct { int u; size_t lo, n; void *at[MEM_BUFFERS]; } ZeroPiece;

typedef struct ZeroStore ZeroStore;
typedef struct {
    void *(*alloc)(ZeroStore *s, int kind, size_t bytes); // counted in mem[kind]; NULL in a file
    void (*free)(ZeroStore *s, void *p);
    void (*put)(ZeroStore *s, int kind, int u, size_t lo, void *dst, const float *host, size_t n, int dtype);
    void (*get)(ZeroStore *s, int kind, int u, size_t lo, float *host, const void *src, size_t n, int dtype);
    void (*prefetch)(ZeroStore *s, int kind, int u);
    const void *(*send)(ZeroStore *s, int u, const void *at);
    void (*fetch)(ZeroStore *s, int kind, const ZeroPiece *pc, int i);
    void *(*open)(ZeroStore *s, int kind, const ZeroPiece *pc, int i);
    void (*close)(ZeroStore *s, int kind, const ZeroPiece *pc, int i);
    int staged; // the host cannot address it: the update's pieces and a gather's slices are copied
    void (*staging)(ZeroStore *s);                         // its host buffers (zero_store_staging)
    void (*begin)(ZeroStore *s);                           // a stream begins (zero_stream_begin)
    void (*end)(ZeroStore *s, const ZeroPiece *pcs, int P); // ... and ends, after the copies landed
    void (*poll)(ZeroStore *s);                            // a unit boundary (zero_store_poll)
    void (*release)(ZeroStore *s);                         // everything it holds (zero_store_close)
    int (*holder)(const ZeroStore *s, int u);              // zero_store_holder (NULL: -1)
    void (*hand)(ZeroStore *s, int phase);                 // the delayed update's helper (zero_store_hand)
} ZeroLocation;

struct ZeroStore {
    const ZeroLocation *loc[LOC_KINDS]; // each location's store (LOC_DEVICE: for this backend's memory)
    // bound to the owning Zero's
    const ZeroBackend *be;
    Trace *const *trace;
    const ParamLayout *lay;
    const int *where;              // LOC_*: where each kind lives (zero_placement's)
    size_t *mem;                   // bytes allocated, by kind
    int rank, world, nstate, pinned;
    size_t esize;
    // the update's host staging: two pieces of gradients on their way down, two of parameters on
    // their way up (copies in flight: d2h, h2d); device landing slices for a host or NVMe shard's
    // slice before its gather (embeddings, final LayerNorm, two layers: zero_store_slot)
    void *stage_grad[2], *stage_param[2], *land[4];
    int d2h[2], h2d[2];
    // what a location's store keeps beyond its kinds' memory (NULL: nothing): its own type,
    // known only to that store (the NVMe store's ZeroNvme: zero/nvme_store.h)
    void *state[LOC_KINDS];
    size_t piece;                  // the streamed update's piece, in elements
    int reading;                   // the stream is a read pass (an optimizer's reductions): nothing written
    int host_units;                // Twin-Flow: the offloaded optimizer kinds keep units [0, host_units) where
    size_t host_elems;             // they live, the rest of the shard (from element host_elems) on the device
    int fetched[MEM_KINDS];        // the streamed update: pieces fetched so far, per kind,
    int ahead[LOC_KINDS];          // and how far ahead of the one updated, per location
    unsigned long updates;         // updates streamed so far (not read passes)
    // the delayed update's helper thread streams the update now (zero/update.h's zero_held_start):
    // its gradients and parameters are host memory it reads and writes in place (pc->at), its spans
    // are trace spans of step helper_step (zero_store_span_*), and nothing else touches the stores
    int helper, helper_step;
};

// --- geometry ------------------------------------------------------------------------

static inline size_t zero_round(size_t n, size_t a) { return (n + a - 1) / a * a; }
static inline size_t zero_store_slice(const ZeroStore *s, int u) { return gpt2_unit_padded(s->lay, u) / (size_t)s->world; }
static inline size_t zero_store_layer_slice(const ZeroStore *s) { return gpt2_unit_padded(s->lay, 1) / (size_t)s->world; }
// Bytes of one element of a kind: fp32 for the master weights and optimizer state, the model's
// element type otherwise.
static inline size_t zero_store_elem(const ZeroStore *s, int kind) {
    return kind == MEM_MASTER || (kind >= MEM_STATE && kind < MEM_BUFFERS) ? sizeof(float) : s->esize;
}
// The gather buffer a unit's slice lands for (0 embeddings, 1 final LayerNorm, 2 + u % 2 a layer).
static inline int zero_store_slot(const ZeroStore *s, int u) {
    return u == UNIT_EMBED ? 0 : u == gpt2_final_unit(s->lay) ? 1 : 2 + u % 2;
}
static inline const ZeroLocation *zero_store_of(const ZeroStore *s, int kind) { return s->loc[s->where[kind]]; }

// --- placement ---------------------------------------------------------------------------

// Where each kind lives for these options (the planner asks too). unified: the backend's
// compute memory is the host's, so nothing moves to the host (NVMe is still below it).
static inline void zero_placement(const ZeroOptions *o, int unified, int where[MEM_KINDS]) {
    for (int k = 0; k < MEM_KINDS; k++) where[k] = LOC_DEVICE;
    if (!unified) where[MEM_STAGING] = where[MEM_HOST_ACTIVATIONS] = LOC_HOST;
    int opt = o->offload_optimizer, par = o->offload_param;
    if (unified && opt == LOC_HOST) opt = LOC_DEVICE;
    if (unified && par == LOC_HOST) par = LOC_DEVICE;
    if (opt != LOC_DEVICE && o->stage > 0)
        for (int k = MEM_MASTER; k < MEM_BUFFERS; k++) where[k] = opt;
    if (par != LOC_DEVICE && o->stage == 3) where[MEM_PARAMS] = par;
}
// Anything the update reads or writes is off the device: then fp32 master weights are kept, even
// in fp32 runs (the planner counts them too).
static inline int zero_streams(const int where[MEM_KINDS]) { return where[MEM_MASTER] != LOC_DEVICE || where[MEM_PARAMS] != LOC_DEVICE; }
// The update runs on the host, streamed (zero_update_streamed), when the optimizer state is off
// the device, or the parameter shard is and the host addresses the device's memory (unified).
// With only the shard off a device the host cannot address, it runs on the device and writes
// the shard back (zero_store_write_back).
static inline int zero_update_on_host(const int where[MEM_KINDS], int unified) {
    return where[MEM_MASTER] != LOC_DEVICE || (unified && where[MEM_PARAMS] != LOC_DEVICE);
}
static inline int zero_on_nvme(const int where[MEM_KINDS]) { return where[MEM_MASTER] == LOC_NVME || where[MEM_PARAMS] == LOC_NVME; }
// The delayed update's host part runs on a helper thread (zero/update.h), its NVMe traffic too, unless
// the parameter shard is on NVMe (its write-back streams through the buffer sets the next forward's
// gathers read from, on the step's thread): placement decides, so the planner asks too.
static inline int zero_held_threaded(const int where[MEM_KINDS], int delayed) {
    return delayed && where[MEM_PARAMS] != LOC_NVME;
}

// The geometry the arithmetic below needs, without binding a Zero (the planner's).
static inline void zero_store_shape(ZeroStore *s, const ParamLayout *lay, const int *where, int rank, int world,
                                    size_t esize, int nstate) {
    memset(s, 0, sizeof(*s));
    s->lay = lay; s->where = where; s->rank = rank; s->world = world; s->esize = esize; s->nstate = nstate;
}
// Twin-Flow's split (the planner asks too): with the optimizer offloaded to the host, the units
// whose master weights and state stay there are the shard's first host_units, the count whose
// elements come nearest to (1 - twin_device) of the shard (ties: fewer on the host); the rest stay
// on the device. Without it every unit's are where placement puts them (host_units = all).
static inline void zero_twin_split(ZeroStore *s, double twin_device) {
    int U = s->lay->num_units;
    size_t shard = s->lay->num_flat / (size_t)s->world, at = 0;
    s->host_units = U; s->host_elems = shard;
    if (s->where[MEM_MASTER] != LOC_HOST || !(twin_device > 0.0)) return;
    double want = (1.0 - twin_device) * (double)shard, best = want;
    int k = 0;
    for (int u = 0; u < U; u++) {
        at += zero_store_slice(s, u);
        if (fabs((double)at - want) < best) { best = fabs((double)at - want); k = u + 1; }
    }
    s->host_units = k;
    s->host_elems = 0;
    for (int u = 0; u < k; u++) s->host_elems += zero_store_slice(s, u);
}
// Twin-Flow: unit u's master weights and state of an offloaded kind stay on the device.
static inline int zero_twin_unit(const ZeroStore *s, int kind, int u) {
    return u >= s->host_units && kind >= MEM_MASTER && kind < MEM_BUFFERS;
}
// Bytes of the offloaded kinds kept on the device (a Zero's or the planner's count).
static inline size_t zero_twin_bytes(const ZeroStore *s) {
    size_t shard = s->lay->num_flat / (size_t)s->world;
    return s->host_units == s->lay->num_units ? 0 : (shard - s->host_elems) * sizeof(float) * (1 + (size_t)s->nstate);
}
// The piece the streamed update works in: a whole unit slice, unless something is on NVMe (then
// at most the buffer size, a multiple of 2048 elements so every piece starts NVME_ALIGN-aligned
// in its file at 2 or 4 bytes an element). (The NVMe store sizes its buffer sets, host tier and
// read-ahead: zero_nvme_shape.)
static inline void zero_store_pieces(ZeroStore *s, const ZeroOptions *o) {
    size_t e = gpt2_unit_padded(s->lay, UNIT_EMBED), l = gpt2_unit_padded(s->lay, 1);
    size_t slice = (e > l ? e : l) / (size_t)s->world;
    size_t want = o->nvme_piece ? o->nvme_piece : (size_t)1 << 24;
    s->piece = zero_on_nvme(s->where) ? zero_round(want < slice ? want : slice, 2048) : slice;
    zero_twin_split(s, o->twin_device);
}
// Bytes of the host staging a device's offloaded update needs (zero_staging_bytes adds the NVMe
// store's): two pieces of gradients, and two of parameters unless the parameter shard is off the
// device.
static inline size_t zero_store_staging_bytes(const ZeroStore *s, int unified) {
    size_t piece = s->piece, e = s->esize;
    if (unified || s->where[MEM_MASTER] == LOC_DEVICE) return 0;
    return 2 * piece * e + (s->where[MEM_PARAMS] == LOC_DEVICE ? 2 * piece * e : 0);
}
// Elements of the device landing slices a host or NVMe shard's slices are copied into before
// their gathers (embeddings, final LayerNorm, two layers), counted with zero.h's buffers.
static inline size_t zero_landing_floats(const ZeroStore *s, int unified) {
    if (unified || s->where[MEM_PARAMS] == LOC_DEVICE) return 0;
    return zero_store_slice(s, UNIT_EMBED) + zero_store_slice(s, gpt2_final_unit(s->lay)) + 2 * zero_store_layer_slice(s);
}

// --- NVMe and copies ---------------------------------------------------------------------

// A span of the update: the step's thread's (trace_begin, trace_end), or with the delayed update's
// helper streaming (s->helper) a trace span of its own lane, in its step, that syncs nothing.
static inline double zero_store_span_begin(ZeroStore *s, const char *name, int cat, int unit, double bytes) {
    return s->helper ? trace_clock(*s->trace) : trace_begin(*s->trace, name, cat, unit, bytes);
}
static inline double zero_store_span_end(ZeroStore *s, const char *name, int cat, int unit, double bytes, double t0) {
    if (!s->helper) return trace_end(*s->trace, t0);
    double t1 = trace_clock(*s->trace);
    trace_span_of(*s->trace, s->helper_step, name, cat, unit, bytes, t0, t1);
    return t1 - t0;
}

// The host waits for an offload copy (a "wait copy" span: time the update waited on the bus).
static inline void zero_store_host_wait(ZeroStore *s, int copy, const char *what) {
    double t0 = trace_begin(*s->trace, "wait copy", TRACE_OFFLOAD, -1, 0.0);
    s->be->host_wait(s->be->ctx, copy, what);
    trace_end(*s->trace, t0);
}
// The host's wait for a gradient piece's copy. (test_offload builds a variant with it defined
// away, to show the CUDA emulator catching the missing wait.)
#ifndef ZERO_HOST_WAIT
#define ZERO_HOST_WAIT(s, h, what) zero_store_host_wait((s), (h), (what))
#endif
// Unit u's slice (at, in host memory) where its all-gather can read it: on a staged device, copied
// to the unit's landing slice (*copy: the copy's handle, -1 when none).
static inline const void *zero_store_land(ZeroStore *s, int u, const void *at, int *copy) {
    *copy = -1;
    if (!s->loc[LOC_DEVICE]->staged) return at;
    void *landing = s->land[zero_store_slot(s, u)];
    *copy = s->be->copy_to_device(s->be->ctx, landing, at, zero_store_slice(s, u) * s->esize);
    s->be->device_wait(s->be->ctx, *copy);
    return landing;
}

// --- the stores --------------------------------------------------------------------------

// Compute memory, host-addressable or not (its put and get go through the backend's copies).
static inline void *zero_dev_alloc(ZeroStore *s, int kind, size_t bytes) {
    s->mem[kind] += bytes;
    return s->be->alloc(s->be->ctx, bytes);
}
static inline void zero_dev_free(ZeroStore *s, void *p) { if (p) s->be->free(s->be->ctx, p); }
static inline void zero_dev_put(ZeroStore *s, int kind, int u, size_t lo, void *dst, const float *host, size_t n, int dtype) {
    (void)kind; (void)u; (void)lo;
    s->be->from_host(s->be->ctx, dst, host, n, dtype);
}
static inline void zero_dev_get(ZeroStore *s, int kind, int u, size_t lo, float *host, const void *src, size_t n, int dtype) {
    (void)kind; (void)u; (void)lo;
    s->be->to_host(s->be->ctx, host, src, n, dtype);
}
static inline void zero_no_prefetch(ZeroStore *s, int kind, int u) { (void)s; (void)kind; (void)u; }
static inline const void *zero_send_in_place(ZeroStore *s, int u, const void *at) { (void)s; (void)u; return at; }
static inline void zero_no_piece(ZeroStore *s, int kind, const ZeroPiece *pc, int i) { (void)s; (void)kind; (void)pc; (void)i; }
static inline void *zero_piece_in_place(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    (void)s; (void)i;
    return pc->at[kind];
}
// The update's pieces on a device the host cannot address: a gradient piece is copied down into
// one of two staging pieces (alternating), a parameter piece written into one and copied up.
static inline void zero_dev_fetch(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    if (kind == MEM_GRADS) s->d2h[i % 2] = s->be->copy_to_host(s->be->ctx, s->stage_grad[i % 2], pc->at[kind], pc->n * s->esize);
}
static inline void *zero_dev_open(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    (void)pc;
    if (kind == MEM_GRADS) {
        ZERO_HOST_WAIT(s, s->d2h[i % 2], "a gradient piece's copy to the host (offloaded update)");
        return s->stage_grad[i % 2];
    }
    if (s->h2d[i % 2] >= 0) zero_store_host_wait(s, s->h2d[i % 2], "a parameter piece's copy to the device");
    return s->stage_param[i % 2];
}
static inline void zero_dev_close(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    if (kind != MEM_PARAMS) return;
    s->h2d[i % 2] = s->be->copy_to_device(s->be->ctx, pc->at[kind], s->stage_param[i % 2], pc->n * s->esize);
    s->be->device_wait(s->be->ctx, s->h2d[i % 2]);
}
// Memory the host addresses (host memory, or a unified backend's compute memory): in place.
static inline void zero_host_put(ZeroStore *s, int kind, int u, size_t lo, void *dst, const float *host, size_t n, int dtype) {
    (void)s; (void)kind; (void)u; (void)lo;
    zc_narrow(dst, host, n, dtype);
}
static inline void zero_host_get(ZeroStore *s, int kind, int u, size_t lo, float *host, const void *src, size_t n, int dtype) {
    (void)s; (void)kind; (void)u; (void)lo;
    zc_widen(host, src, n, dtype);
}
static inline void *zero_host_alloc(ZeroStore *s, int kind, size_t bytes) {
    s->mem[kind] += bytes;
    return s->be->host_alloc(s->be->ctx, bytes, s->pinned);
}
static inline void zero_host_free(ZeroStore *s, void *p) { if (p) s->be->host_free(s->be->ctx, p, s->pinned); }
static inline const void *zero_host_send(ZeroStore *s, int u, const void *at) {
    int copy;
    return zero_store_land(s, u, at, &copy);
}

// (Every field named, in ZeroLocation's order: C++ wants them all.)
static const ZeroLocation zero_device_store = {.alloc = zero_dev_alloc, .free = zero_dev_free, .put = zero_dev_put,
                                               .get = zero_dev_get, .prefetch = zero_no_prefetch,
                                               .send = zero_send_in_place, .fetch = zero_dev_fetch,
                                               .open = zero_dev_open, .close = zero_dev_close, .staged = 1,
                                               .staging = NULL, .begin = NULL, .end = NULL, .poll = NULL,
                                               .release = NULL, .holder = NULL, .hand = NULL};
static const ZeroLocation zero_unified_store = {.alloc = zero_dev_alloc, .free = zero_dev_free, .put = zero_host_put,
                                                .get = zero_host_get, .prefetch = zero_no_prefetch,
                                                .send = zero_send_in_place, .fetch = zero_no_piece,
                                                .open = zero_piece_in_place, .close = zero_no_piece, .staged = 0,
                                                .staging = NULL, .begin = NULL, .end = NULL, .poll = NULL,
                                                .release = NULL, .holder = NULL, .hand = NULL};
static const ZeroLocation zero_host_store = {.alloc = zero_host_alloc, .free = zero_host_free, .put = zero_host_put,
                                             .get = zero_host_get, .prefetch = zero_no_prefetch,
                                             .send = zero_host_send, .fetch = zero_no_piece,
                                             .open = zero_piece_in_place, .close = zero_no_piece, .staged = 0,
                                             .staging = NULL, .begin = NULL, .end = NULL, .poll = NULL,
                                             .release = NULL, .holder = NULL, .hand = NULL};
// Each bound store's hook of that name, where it has one (loc[LOC_NVME]: bound by zero/nvme_store.h).
#define ZERO_EACH_STORE(s, hook, ...) \
    for (int l_ = 0; l_ < LOC_KINDS; l_++)   \
        if ((s)->loc[l_] && (s)->loc[l_]->hook) (s)->loc[l_]->hook(__VA_ARGS__)

// --- the store's life ----------------------------------------------------------------------

// Binds the store to its Zero's backend, trace, layout, placement and counts, and sizes the
// pieces; the NVMe store is bound (and this rank's files opened) by zero_nvme_bind.
static inline void zero_store_init(ZeroStore *s, const ZeroBackend *be, Trace *const *trace, const ParamLayout *lay,
                                   const int *where, size_t *mem, int rank, int world, size_t esize, int nstate,
                                   const ZeroOptions *o) {
    zero_store_shape(s, lay, where, rank, world, esize, nstate);
    s->be = be; s->trace = trace; s->mem = mem; s->pinned = o->pin_memory;
    s->loc[LOC_DEVICE] = be->unified ? &zero_unified_store : &zero_device_store;
    s->loc[LOC_HOST] = &zero_host_store;
    zero_store_pieces(s, o);
    s->ahead[LOC_DEVICE] = s->ahead[LOC_HOST] = 1;                 // two staging pieces (NVMe's: zero_nvme_bind)
    s->d2h[0] = s->d2h[1] = s->h2d[0] = s->h2d[1] = -1;
}

// n elements of a kind, where the kind lives (NVMe: in its file; NULL), and back.
static inline void *zero_store_alloc(ZeroStore *s, int kind, size_t n) {
    return zero_store_of(s, kind)->alloc(s, kind, n * zero_store_elem(s, kind));
}
static inline void zero_store_free(ZeroStore *s, int kind, void *p) { zero_store_of(s, kind)->free(s, p); }

// The staging zero_staging_bytes counts, and the landing slices zero_landing_floats counts.
static inline void zero_store_staging(ZeroStore *s) {
    const ZeroLocation *st = zero_store_of(s, MEM_STAGING);
    size_t piece = s->piece, e = s->esize;
    if (s->loc[LOC_DEVICE]->staged && s->where[MEM_MASTER] != LOC_DEVICE)
        for (int i = 0; i < 2; i++) {
            s->stage_grad[i] = st->alloc(s, MEM_STAGING, piece * e);
            if (s->where[MEM_PARAMS] == LOC_DEVICE) s->stage_param[i] = st->alloc(s, MEM_STAGING, piece * e);
        }
    ZERO_EACH_STORE(s, staging, s);
}
static inline void zero_store_landing(ZeroStore *s) {
    if (!zero_landing_floats(s, !s->loc[LOC_DEVICE]->staged)) return;
    size_t n[4] = {zero_store_slice(s, UNIT_EMBED), zero_store_slice(s, gpt2_final_unit(s->lay)),
                   zero_store_layer_slice(s), zero_store_layer_slice(s)};
    for (int q = 0; q < 4; q++) s->land[q] = s->loc[LOC_DEVICE]->alloc(s, MEM_BUFFERS, n[q] * s->esize);
}
// Frees the staging and landing slices, and what each store holds (NVMe: its files, removed).
static inline void zero_store_close(ZeroStore *s) {
    const ZeroLocation *st = zero_store_of(s, MEM_STAGING);
    ZERO_EACH_STORE(s, release, s);
    for (int i = 0; i < 2; i++) { st->free(s, s->stage_grad[i]); st->free(s, s->stage_param[i]); }
    for (int q = 0; q < 4; q++) s->loc[LOC_DEVICE]->free(s, s->land[q]);
}

// --- what zero.h asks --------------------------------------------------------------------

// The host's fp32 into a kind's n elements at dst (unit u's slice from element lo), and out.
static inline void zero_put(ZeroStore *s, int kind, int u, size_t lo, void *dst, const float *host, size_t n, int dtype) {
    (zero_twin_unit(s, kind, u) ? s->loc[LOC_DEVICE] : zero_store_of(s, kind))->put(s, kind, u, lo, dst, host, n, dtype);
}
static inline void zero_get(ZeroStore *s, int kind, int u, size_t lo, float *host, const void *src, size_t n, int dtype) {
    (zero_twin_unit(s, kind, u) ? s->loc[LOC_DEVICE] : zero_store_of(s, kind))->get(s, kind, u, lo, host, src, n, dtype);
}
// A shard's unit u on its way to its all-gather: the unit whose gather must be done before its
// slot is reused (-1: none), the read ahead, and where the gather sends from (at: the shard's
// slice where it lives in memory).
static inline int zero_store_holder(const ZeroStore *s, int u) {
    const ZeroLocation *l = zero_store_of(s, MEM_PARAMS); // (only NVMe's prefetch fills a slot)
    return l->holder ? l->holder(s, u) : -1;
}
static inline void zero_store_prefetch(ZeroStore *s, int u) { zero_store_of(s, MEM_PARAMS)->prefetch(s, MEM_PARAMS, u); }
static inline const void *zero_store_send(ZeroStore *s, int u, const void *at) { return zero_store_of(s, MEM_PARAMS)->send(s, u, at); }

// The device update's result for unit u's slice (dev: in the device's memory, the slice's
// landing slice, zero_store_landing_of) to where the shard lives (at: the shard's slice in host
// memory; NULL on NVMe), a piece at a time: each piece opened where the host addresses it, copied
// into it from the device, and closed back (NVMe: written to the file behind, through the buffer
// sets). Between zero_stream_begin and zero_stream_end (NVMe: the writes drain behind it).
static inline void *zero_store_landing_of(const ZeroStore *s, int u) { return s->land[zero_store_slot(s, u)]; }
static inline void zero_store_write_back(ZeroStore *s, int u, void *at, const void *dev) {
    const ZeroLocation *l = zero_store_of(s, MEM_PARAMS);
    size_t n = zero_store_slice(s, u);
    for (size_t lo = 0; lo < n; lo += s->piece) {
        ZeroPiece pc;
        memset(&pc, 0, sizeof(pc));
        pc.u = u; pc.lo = lo; pc.n = n - lo < s->piece ? n - lo : s->piece;
        pc.at[MEM_PARAMS] = at ? (char *)at + lo * s->esize : NULL;
        int i = s->fetched[MEM_PARAMS]++; // the pieces written so far this update: the buffer sets rotate
        void *host = l->open(s, MEM_PARAMS, &pc, i);
        int copy = s->be->copy_to_host(s->be->ctx, host, (const char *)dev + lo * s->esize, pc.n * s->esize);
        zero_store_host_wait(s, copy, "an updated parameter piece's copy to the host");
        l->close(s, MEM_PARAMS, &pc, i);
    }
}

// The streamed update. begin: a parameter read in flight must not cross the update's writes.
// open: piece i of every kind the update touches (gradients, master weights, state arrays,
// parameters) where the host addresses it, each kind's next pieces fetched ahead (two staging
// pieces: one ahead; nbuf buffer sets: nbuf - 2). close: piece i goes back where it lives.
// end: every copy has landed (NVMe's writes may drain behind).
// A read pass (reading: an optimizer's per-tensor reductions before its update) opens the gradient,
// master weights and state arrays the same way, leaves the parameters alone and closes nothing
// back: with NVMe it reads the master weights and state arrays once more, and writes nothing.
// With the delayed update's helper streaming (s->helper), the gradients and parameters are the
// helper's host memory (pc->at), opened in place whatever their store (zero_stream_store).
static inline const ZeroLocation *zero_stream_store(const ZeroStore *s, int kind) {
    return s->helper && (kind == MEM_GRADS || kind == MEM_PARAMS) ? &zero_host_store : zero_store_of(s, kind);
}
static inline int zero_stream_kinds(const ZeroStore *s, int *kinds) {
    int n = 0;
    kinds[n++] = MEM_GRADS;
    kinds[n++] = MEM_MASTER;
    for (int k = 0; k < s->nstate; k++) kinds[n++] = MEM_STATE + k;
    if (!s->reading) kinds[n++] = MEM_PARAMS;
    return n;
}
static inline void zero_stream_begin(ZeroStore *s, int reading) {
    s->reading = reading;
    for (int k = 0; k < MEM_KINDS; k++) s->fetched[k] = 0;
    ZERO_EACH_STORE(s, begin, s); // (NVMe: the pieces read ahead across the step boundary count as fetched)
    s->d2h[0] = s->d2h[1] = s->h2d[0] = s->h2d[1] = -1;
}
static inline void zero_stream_open(ZeroStore *s, const ZeroPiece *pcs, int P, int i, void *at[MEM_BUFFERS]) {
    int kinds[3 + OPT_MAX_SLICES], K = zero_stream_kinds(s, kinds);
    for (int j = 0; j < K; j++) {
        int kind = kinds[j];
        const ZeroLocation *l = zero_stream_store(s, kind);
        for (; s->fetched[kind] <= i + s->ahead[s->where[kind]] && s->fetched[kind] < P; s->fetched[kind]++)
            l->fetch(s, kind, &pcs[s->fetched[kind]], s->fetched[kind]);
    }
    for (int j = 0; j < K; j++) at[kinds[j]] = zero_stream_store(s, kinds[j])->open(s, kinds[j], &pcs[i], i);
}
static inline void zero_stream_close(ZeroStore *s, const ZeroPiece *pc, int i) {
    int kinds[3 + OPT_MAX_SLICES], K = s->reading ? 0 : zero_stream_kinds(s, kinds);
    for (int j = 1; j < K; j++) // (the gradient is only read)
        zero_stream_store(s, kinds[j])->close(s, kinds[j], pc, i);
}
static inline void zero_stream_end(ZeroStore *s, const ZeroPiece *pcs, int P) {
    for (int q = 0; q < 2; q++)
        if (s->h2d[q] >= 0) zero_store_host_wait(s, s->h2d[q], "a parameter piece's copy to the device");
    if (!s->reading) s->updates++; // (not the per-tensor reductions' read-only pass)
    s->reading = 0;
    ZERO_EACH_STORE(s, end, s, pcs, P); // (NVMe: its writes land, the next update's first reads start)
}
// At a unit boundary of the forward and backward (zero.h's zero_progress): each store's poll; none
// while the delayed update's helper streams (the stores are its then).
static inline void zero_store_poll(ZeroStore *s) {
    if (!s->helper) ZERO_EACH_STORE(s, poll, s);
}
// The delayed update's helper thread and the stores (zero/update.h): it takes the stream (phase 1,
// before zero_stream_begin: from then on its I/O is counted apart, in trace step `step`), the
// step's thread waits for it (2: what the helper waits for from then on is exposed), the step's
// thread has them back (0, after the join, before zero_stream_end: its counts join the step's, and
// a failure the helper met ends the job here). Each store's hand.
static inline void zero_store_hand(ZeroStore *s, int phase, int step) {
    if (phase == 1) { s->helper = 1; s->helper_step = step; }
    ZERO_EACH_STORE(s, hand, s, phase);
    if (phase == 0) s->helper = 0;
}

#endif // ZERO_STORE_H
