// zero/nvme_store.h: the NVMe store (ZeRO-Infinity): model states in files on NVMe, read and
// written with direct I/O (core/nvme.h), behind zero/store.h's per-location interface
// (ZeroLocation: zero_nvme_store, bound to a ZeroStore by zero_nvme_bind; its state, ZeroNvme,
// in the store's state[LOC_NVME]).
//
// Contract
//   offload_optimizer = nvme (stages 1-3) keeps the master weights and the
//   state arrays in files, one per array, in this rank's directory; offload_param = nvme (stage
//   3) the parameter shard too; both trainers (a unified backend too: NVMe is below its memory).
//   Each unit's slice starts at an NVME_ALIGN-aligned offset, and everything is read and written
//   with direct I/O (core/nvme.h) in pieces of at most `piece` elements: the update streams the
//   pieces through `nbuf` host buffer sets, reading ahead nbuf - 2 pieces while it updates one
//   and writes the last one behind. Across the step boundary: the update's last writes drain behind
//   the next forward (zero_stream_end waits for none: a parameter slice's read first waits for its
//   unit's writes still in flight), and zero_store_poll, called at every unit boundary of the
//   forward and backward, starts the next update's reads of its first pieces as soon as the memory
//   they go to is free (its write behind done), in order and without blocking; the update then
//   finds them in flight or done. Those first pieces: the read-ahead area's, then nbuf more, one in
//   each buffer set (the update's first fetch into a set waits for that set's first write anyway).
//   The read-ahead area (nvme_readahead bytes): narea whole pieces of the master
//   weights and state arrays (the stream's first narea pieces, which zero_nvme_shape keeps
//   outside the host tier), host memory of their own: the update works on them in place there
//   and writes them back from there in the background (core/nvme.h runs those writes only when
//   no read or other write is queued: only the next step's reads into the area wait for them),
//   and the buffer sets serve the pieces after them (piece i >= narea: set i % nbuf). None with
//   the delayed update on its helper thread (zero/store.h's zero_held_threaded): that update runs
//   during the forward and backward itself, the stream begun and ended by the step's thread and
//   its pieces opened, fetched, waited for and closed by the helper (zero_nvme_hand: its I/O counted
//   at the join, its waits exposed only while the step's thread waits for it, an I/O error it met
//   ending the job from the step's thread; no polls meanwhile). A
//   checkpoint's get or put first waits for every transfer (the writes draining behind too) and
//   drops the reads ahead (a put changes the files under them; the poll starts them again). The host tier
//   (nvme_host_cache bytes): the last units' slices of the master weights and state arrays (the
//   first whole pieces of one more slice) stay in host memory, counted as staging, and the
//   update works on them in place; the files hold only the rest. A shard on NVMe is read into a
//   host slot per gather buffer before its all-gather, the next unit's read issued while this
//   one computes; the unit the gathers asked each slot for first since the last update (the next
//   forward's first in that slot, as the schedule in zero.h asks them: today the embeddings, the
//   first two layers, the final LayerNorm) is copied into its slot by the update as it writes it,
//   so it is not read back. Host memory for all this is the staging kind,
//   bounded by the buffer settings and the two budgets; the files' bytes are counted per kind,
//   where = nvme. An I/O error, or a file deleted or truncated under the job, ends it through
//   the backend's fatal() with one line. A backend with nvme_sim (the step-time model's,
//   zero/backend.h) gets the same schedule on a simulated device: no files, no data moved.
//   Sizes (buffer sets, the host tier, the read-ahead area: zero_nvme_shape; staging bytes:
//   zero_staging_bytes; each file's bytes: zero_nvme_file_bytes) are computed here without a
//   bound Zero, so that the planner predicts them.
//   Accounting (zero_store_nvme_stats): each update's reads count in the step of that update,
//   wherever they started; `ahead` is the bytes of them started before it (by the poll). A held
//   update on the helper thread is the step's that joins it: its bytes, busy time and waits
//   (exposed: those while the step's thread waited for it), and ahead: its reads started before
//   the step's thread began to wait.
//   Timeline (core/trace.h): each NVMe read and write is a span from its submission to its
//   completion (core/nvme.h) and each wait for one a "wait nvme" span.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_NVME_STORE_H
#define ZERO_NVME_STORE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/gpt2.h"
#include "core/nvme.h"
#include "core/optimizer.h"
#include "core/trace.h"
#include "mixed_precision.h"
#include "zero/backend.h"
#include "zero/location.h"
#include "zero/store.h"

#define ZERO_MAX_BUFS 16 // buffer sets at most
#define ZERO_NVME_Q (2 + OPT_MAX_SLICES) // ticket slots per piece: master 0, state k 1 + k, parameters 1 + OPT_MAX_SLICES

// The NVMe store's state (a ZeroStore's state[LOC_NVME]).
typedef struct {
    Nvme *io;                      // the files' I/O (NULL: nothing on NVMe, a planner's shape)
    int file[MEM_KINDS];           // each kind's file
    // each unit's slice's byte offset in an fp32 file (offo: its file part's) and in the parameter file
    size_t offo[GPT2_MAX_UNITS + 1], offp[GPT2_MAX_UNITS + 1];
    // the host tier: unit u's first cached[u] elements of the master weights and state arrays
    // live in host memory (cache[0]: master, cache[1 + k]: state k, from element cache_at[u])
    size_t cached[GPT2_MAX_UNITS], cache_at[GPT2_MAX_UNITS + 1];
    float *cache[1 + OPT_MAX_SLICES];
    // the buffer sets (reads and writes in flight per set and ticket slot)
    int nbuf;
    float *buf_master[ZERO_MAX_BUFS], *buf_state[ZERO_MAX_BUFS][OPT_MAX_SLICES];
    void *buf_param[ZERO_MAX_BUFS];
    int buf_read[ZERO_MAX_BUFS][ZERO_NVME_Q], buf_write[ZERO_MAX_BUFS][ZERO_NVME_Q];
    int buf_punit[ZERO_MAX_BUFS];  // the unit of each set's last parameter write (-1: none)
    // the read-ahead area: narea pieces per array (area[0]: master, area[1 + k]: state k), and
    // each piece's reads and writes in flight (narea x ZERO_NVME_Q)
    int narea;
    float *area[1 + OPT_MAX_SLICES];
    int *area_read, *area_write;
    // across the step boundary: the next update's first pieces (nnext of at most narea + nbuf)
    // and how many of their reads have started (prefetched)
    ZeroPiece *next;
    int nnext, prefetched;
    double ahead_read;             // bytes read ahead for the next update, counted when it starts
    double ahead_step;             // ... of the updates since the last zero_store_nvme_stats
    int ahead_for;                 // the trace's step whose update they are for (zero_nvme_end)
    // a host slot per gather buffer for a shard on NVMe: the unit it holds, its read, the copy
    // that reads it (tickets/handles), and the update whose parameters it holds
    void *pslot[4];
    int pslot_unit[4], pslot_read[4], pslot_copy[4];
    unsigned long pslot_gen[4];
    // per slot, the first unit the gathers asked for since the last update began (-1: none yet),
    // and the one this update copies into it (zero_nvme_keep): the schedule's, as it ran
    int pslot_first[4], pslot_keep[4];
    int helper_failed;             // a wait of the delayed update's helper met an I/O error (zero_nvme_hand)
} ZeroNvme;

static inline ZeroNvme *zero_nvme_of(const ZeroStore *s) { return (ZeroNvme *)s->state[LOC_NVME]; }
// The I/O behind a store (NULL: nothing on NVMe): whether to log NVMe traffic, and its mode.
static inline const Nvme *zero_store_nvme(const ZeroStore *s) { return zero_nvme_of(s) ? zero_nvme_of(s)->io : NULL; }
// A ticket slot of a kind.
static inline int zero_nvme_q(int kind) { return kind == MEM_PARAMS ? 1 + OPT_MAX_SLICES : kind - MEM_MASTER; }

// --- sizes (the planner asks too, before any Zero is initialised) -------------------------

// Unit u's slice of a kind in its file (less what the host tier keeps).
static inline size_t zero_nvme_filed(const ZeroStore *s, int kind, int u) {
    return zero_store_slice(s, u) - (kind == MEM_PARAMS ? 0 : zero_nvme_of(s)->cached[u]);
}
// The buffer sets; the host tier, from the last unit back: whole slices while the budget lasts,
// then the first whole pieces of one more slice (so that every piece is either cached or in its
// file); the read-ahead area: whole pieces of every array while the budget lasts, at most the
// stream's pieces before the first one the host tier holds. Binds nv to s (state[LOC_NVME]).
static inline void zero_nvme_shape(ZeroStore *s, ZeroNvme *nv, const ZeroOptions *o) {
    memset(nv, 0, sizeof(*nv));
    s->state[LOC_NVME] = nv;
    nv->nbuf = o->nvme_buffers < 2 ? 2 : o->nvme_buffers > ZERO_MAX_BUFS ? ZERO_MAX_BUFS : o->nvme_buffers;
    s->ahead[LOC_NVME] = nv->nbuf - 2; // the update reads nbuf - 2 pieces ahead
    int U = s->lay->num_units, opt = s->where[MEM_MASTER] == LOC_NVME;
    size_t arrays = 1 + (size_t)s->nstate, left = opt ? o->nvme_host_cache / (4 * arrays) : 0;
    for (int u = U - 1; u >= 0; u--) {
        size_t n = zero_store_slice(s, u), c = n <= left ? n : left / s->piece * s->piece;
        nv->cached[u] = c;
        left -= c;
    }
    nv->cache_at[0] = 0;
    for (int u = 0; u < U; u++) nv->cache_at[u + 1] = nv->cache_at[u] + nv->cached[u];
    // (none with the delayed update on its helper thread: that update itself runs during the forward)
    int threaded = zero_held_threaded(s->where, o->delayed_update);
    size_t lead = 0, want = opt && !threaded ? o->nvme_readahead / (s->piece * 4 * arrays) : 0;
    for (int u = 0; u < s->host_units && !nv->cached[u]; u++) lead += (zero_store_slice(s, u) + s->piece - 1) / s->piece;
    nv->narea = (int)(want < lead ? want : lead);
}
// Elements of the host tier per array (master weights, each state array).
static inline size_t zero_cache_elems(const ZeroNvme *nv, const ZeroStore *s) { return nv->cache_at[s->lay->num_units]; }
// Where element lo of unit u's slice of a kind is in the host tier; NULL when in its file.
static inline float *zero_cache_at(const ZeroNvme *nv, int kind, int u, size_t lo) {
    if (kind < MEM_MASTER || kind >= MEM_BUFFERS || lo >= nv->cached[u]) return NULL;
    return nv->cache[kind - MEM_MASTER] + nv->cache_at[u] + lo;
}
// A kind's file on NVMe: this rank's slices of every unit (less what the host tier keeps), each
// padded to NVME_ALIGN; and each slice's byte offset in it.
static inline void zero_nvme_offsets(const ZeroStore *s, int kind, size_t *off) {
    off[0] = 0;
    for (int u = 0; u < s->lay->num_units; u++)
        off[u + 1] = off[u] + zero_round(zero_nvme_filed(s, kind, u) * zero_store_elem(s, kind), NVME_ALIGN);
}
static inline size_t zero_nvme_file_bytes(const ZeroStore *s, int kind) {
    size_t off[GPT2_MAX_UNITS + 1];
    zero_nvme_offsets(s, kind, off);
    return off[s->lay->num_units];
}
// Bytes of the host staging these placements need (the planner predicts with it): the device's
// (zero_store_staging_bytes), and
//   the optimizer state on NVMe: nbuf sets and the read-ahead area's narea pieces of (master +
//     state arrays), and the host tier (master + state arrays of the cached elements);
//   a shard on NVMe: nbuf pieces of parameters (the update writes them there), and one slice per
//     gather buffer (embeddings, final LayerNorm, two layers).
// Bytes of the host tier and of the read-ahead area (master + state arrays; 0 without the optimizer
// state on NVMe): what --nvme-host-cache and --nvme-readahead really take (the planner reports these).
static inline size_t zero_nvme_cache_bytes(const ZeroNvme *nv, const ZeroStore *s) {
    return s->where[MEM_MASTER] == LOC_NVME ? zero_cache_elems(nv, s) * 4 * (1 + (size_t)s->nstate) : 0;
}
static inline size_t zero_nvme_area_bytes(const ZeroNvme *nv, const ZeroStore *s) {
    return s->where[MEM_MASTER] == LOC_NVME ? (size_t)nv->narea * s->piece * 4 * (1 + (size_t)s->nstate) : 0;
}
static inline size_t zero_staging_bytes(const ZeroStore *s, int unified) {
    const ZeroNvme *nv = zero_nvme_of(s);
    size_t b = zero_store_staging_bytes(s, unified), piece = s->piece, e = s->esize;
    if (!nv) return b;
    b += zero_nvme_cache_bytes(nv, s) + zero_nvme_area_bytes(nv, s);
    if (s->where[MEM_MASTER] == LOC_NVME) b += (size_t)nv->nbuf * piece * 4 * (1 + (size_t)s->nstate);
    if (s->where[MEM_PARAMS] == LOC_NVME) {
        b += (size_t)nv->nbuf * piece * e;
        b += zero_round(zero_store_slice(s, UNIT_EMBED) * e, NVME_ALIGN) +
             zero_round(zero_store_slice(s, gpt2_final_unit(s->lay)) * e, NVME_ALIGN) +
             2 * zero_round(zero_store_layer_slice(s) * e, NVME_ALIGN);
    }
    return b;
}

// --- transfers -----------------------------------------------------------------------------

static inline void zero_nvme_fail(ZeroStore *s) {
    char msg[1200];
    snprintf(msg, sizeof(msg), "NVMe offload: %s; the job stops (the last checkpoint is untouched)", zero_nvme_of(s)->io->err);
    s->be->fatal(s->be->ctx, msg);
}
// Starts a transfer of n elements of a kind's unit u from element lo of its slice (bytes padded
// to NVME_ALIGN; buf holds them); returns the ticket.
static inline int zero_nvme_io(ZeroStore *s, int kind, int u, size_t lo, size_t n, void *buf, int writing) {
    ZeroNvme *nv = zero_nvme_of(s);
    size_t e = zero_store_elem(s, kind), bytes = zero_round(n * e, NVME_ALIGN);
    nv->io->trace = *s->trace; // (core/nvme.h draws each transfer in the trace as it completes)
    size_t at = kind == MEM_PARAMS ? nv->offp[u] + lo * e : nv->offo[u] + (lo - nv->cached[u]) * e;
    return nvme_submit(nv->io, nv->file[kind], buf, bytes, at, writing, u);
}
// Waits for a transfer (-1: none; one waited for before: at once); in the trace, the time it
// blocked the caller ("wait nvme": exposed I/O, or on the delayed update's helper, its own lane's).
// The helper leaves a failure to the step's thread (zero_nvme_hand): it calls no backend entry.
static inline void zero_nvme_wait(ZeroStore *s, int ticket) {
    if (ticket < 0) return;
    double t0 = zero_store_span_begin(s, "wait nvme", TRACE_NVME, -1, 0.0);
    int bad = nvme_wait(zero_nvme_of(s)->io, ticket);
    zero_store_span_end(s, "wait nvme", TRACE_NVME, -1, 0.0, t0);
    if (bad && s->helper) zero_nvme_of(s)->helper_failed = 1;
    else if (bad) zero_nvme_fail(s);
}
// Buffer set b's piece of a kind.
static inline void *zero_nvme_set(ZeroNvme *nv, int kind, int b) {
    return kind == MEM_PARAMS ? nv->buf_param[b] : kind == MEM_MASTER ? (void *)nv->buf_master[b] : (void *)nv->buf_state[b][kind - MEM_STATE];
}
// Where the stream's piece i of a kind is in host memory: its read-ahead area piece (the
// optimizer state's first narea pieces) or buffer set i % nbuf; and the ticket of its read or
// write in flight there.
static inline int zero_nvme_in_area(const ZeroNvme *nv, int kind, int i) { return kind != MEM_PARAMS && i < nv->narea; }
static inline void *zero_nvme_buf(ZeroStore *s, int kind, int i) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (zero_nvme_in_area(nv, kind, i)) return nv->area[kind - MEM_MASTER] + (size_t)i * s->piece;
    return zero_nvme_set(nv, kind, i % nv->nbuf);
}
static inline int *zero_nvme_ticket(ZeroNvme *nv, int kind, int i, int writing) {
    int q = zero_nvme_q(kind);
    if (zero_nvme_in_area(nv, kind, i)) return (writing ? nv->area_write : nv->area_read) + (size_t)i * ZERO_NVME_Q + q;
    int b = i % nv->nbuf; // (no conditional over the two arrays: g++ -O1 with ASan calls that maybe-uninitialized)
    return writing ? &nv->buf_write[b][q] : &nv->buf_read[b][q];
}

// --- the store -----------------------------------------------------------------------------

// NVMe: files; checkpoints read and write through the first buffer set, a piece at a time
// (synchronously: no update is streaming meanwhile); only the range's last piece may end off
// NVME_ALIGN, and callers hand whole slices.
static inline void *zero_nvme_alloc(ZeroStore *s, int kind, size_t bytes) {
    (void)bytes;
    s->mem[kind] += zero_nvme_file_bytes(s, kind);
    return NULL;
}
static inline void zero_nvme_free(ZeroStore *s, void *p) { (void)s; (void)p; }
// Every transfer done; the next update's reads started ahead are dropped (started again by
// zero_store_poll): a checkpoint goes through buffer set 0, and a load changes the files under them.
static inline void zero_nvme_quiesce(ZeroStore *s) {
    ZeroNvme *nv = zero_nvme_of(s);
    for (int b = 0; b < nv->nbuf; b++)
        for (int q = 0; q < ZERO_NVME_Q; q++) {
            zero_nvme_wait(s, nv->buf_read[b][q]);
            zero_nvme_wait(s, nv->buf_write[b][q]);
            nv->buf_read[b][q] = nv->buf_write[b][q] = -1;
        }
    for (size_t t = 0; t < (size_t)nv->narea * ZERO_NVME_Q; t++) {
        zero_nvme_wait(s, nv->area_read[t]);
        zero_nvme_wait(s, nv->area_write[t]);
        nv->area_read[t] = nv->area_write[t] = -1;
    }
    nv->prefetched = 0;
}
static inline void zero_nvme_sync(ZeroStore *s, int kind, int u, size_t lo, float *host, size_t n, int dtype, int writing) {
    ZeroNvme *nv = zero_nvme_of(s);
    void *buf = zero_nvme_set(nv, kind, 0);
    zero_nvme_quiesce(s);
    for (int q = 0; q < 4 && writing && kind == MEM_PARAMS; q++) { // what the slots hold is stale now
        if (nv->pslot_read[q] >= 0) zero_nvme_wait(s, nv->pslot_read[q]);
        nv->pslot_read[q] = -1;
        nv->pslot_unit[q] = -1;
    }
    for (size_t at = 0, m; at < n; at += m) {
        m = n - at < s->piece ? n - at : s->piece;
        float *c = zero_cache_at(nv, kind, u, lo + at);
        if (c) { // in the host tier (up to its end in this slice)
            if (m > nv->cached[u] - (lo + at)) m = nv->cached[u] - (lo + at);
            if (writing) zc_narrow(c, host + at, m, dtype);
            else zc_widen(host + at, c, m, dtype);
            continue;
        }
        if (writing) zc_narrow(buf, host + at, m, dtype);
        zero_nvme_wait(s, zero_nvme_io(s, kind, u, lo + at, m, buf, writing));
        if (!writing) zc_widen(host + at, buf, m, dtype);
    }
}
static inline void zero_nvme_put(ZeroStore *s, int kind, int u, size_t lo, void *dst, const float *host, size_t n, int dtype) {
    (void)dst;
    zero_nvme_sync(s, kind, u, lo, (float *)host, n, dtype, 1);
}
static inline void zero_nvme_get(ZeroStore *s, int kind, int u, size_t lo, float *host, const void *src, size_t n, int dtype) {
    (void)src;
    zero_nvme_sync(s, kind, u, lo, host, n, dtype, 0);
}
// A shard on NVMe: unit u's slice into the host slot of its gather buffer, read from its file
// (started here unless it is there, or on its way, for the parameters of the last update). The
// slot's previous unit must be done with it: its copy to the device here, its all-gather (which
// reads it on a unified backend) by the caller (zero_store_holder).
static inline void zero_nvme_prefetch(ZeroStore *s, int kind, int u) {
    ZeroNvme *nv = zero_nvme_of(s);
    int q = zero_store_slot(s, u), w = zero_nvme_q(MEM_PARAMS);
    if (kind != MEM_PARAMS) return;
    if (nv->pslot_first[q] < 0) nv->pslot_first[q] = u;
    if (nv->pslot_unit[q] == u && nv->pslot_gen[q] == s->updates) return;
    if (nv->pslot_copy[q] >= 0) zero_store_host_wait(s, nv->pslot_copy[q], "a parameter slice's copy to the device");
    nv->pslot_copy[q] = -1;
    if (nv->pslot_read[q] >= 0) zero_nvme_wait(s, nv->pslot_read[q]);
    for (int b = 0; b < nv->nbuf; b++) // u's writes still draining land first (core/nvme.h runs reads before writes)
        if (nv->buf_punit[b] == u) {
            zero_nvme_wait(s, nv->buf_write[b][w]);
            nv->buf_write[b][w] = nv->buf_punit[b] = -1;
        }
    nv->pslot_read[q] = zero_nvme_io(s, MEM_PARAMS, u, 0, zero_store_slice(s, u), nv->pslot[q], 0);
    nv->pslot_unit[q] = u;
    nv->pslot_gen[q] = s->updates;
}
static inline const void *zero_nvme_send(ZeroStore *s, int u, const void *at) {
    (void)at;
    ZeroNvme *nv = zero_nvme_of(s);
    int q = zero_store_slot(s, u);
    zero_nvme_prefetch(s, MEM_PARAMS, u);
    zero_nvme_wait(s, nv->pslot_read[q]);
    nv->pslot_read[q] = -1;
    return zero_store_land(s, u, nv->pslot[q], &nv->pslot_copy[q]); // the slot is free again once that copy has run
}
// The unit whose gather must be done before unit u's slot is reused (-1: none).
static inline int zero_nvme_holder(const ZeroStore *s, int u) {
    const ZeroNvme *nv = zero_nvme_of(s);
    if (!nv) return -1;
    int q = zero_store_slot(s, u);
    return nv->pslot_unit[q] == u && nv->pslot_gen[q] == s->updates ? -1 : nv->pslot_unit[q];
}
// The update's pieces: the master weights and state arrays read into piece i's memory (its area
// piece or buffer set, once its last write is done) and written back behind; the parameters
// written into their buffer set (once its last parameter write is done) and to their file.
static inline void zero_nvme_fetch(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (kind == MEM_PARAMS || zero_cache_at(nv, kind, pc->u, pc->lo)) return;
    int *w = zero_nvme_ticket(nv, kind, i, 1);
    zero_nvme_wait(s, *w);
    *w = -1;
    *zero_nvme_ticket(nv, kind, i, 0) = zero_nvme_io(s, kind, pc->u, pc->lo, pc->n, zero_nvme_buf(s, kind, i), 0);
}
static inline void *zero_nvme_open(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    ZeroNvme *nv = zero_nvme_of(s);
    float *c = zero_cache_at(nv, kind, pc->u, pc->lo);
    if (c) return c; // the host tier: updated in place
    zero_nvme_wait(s, *zero_nvme_ticket(nv, kind, i, kind == MEM_PARAMS));
    return zero_nvme_buf(s, kind, i);
}
// An updated parameter piece of the unit the gathers asked its slot for first since the last
// update (zero_nvme_prefetch notes it; zero_nvme_begin hands it to this update: the next forward
// asks in the same order) is copied into that slot too, so that the slot holds, once the unit's
// last piece is in, what the file will: no read. Nothing reads the slots during an update (stage
// 3 gathers none then; a copy to the device still running from one is waited for).
static inline void zero_nvme_keep(ZeroStore *s, const ZeroPiece *pc, const void *buf) {
    ZeroNvme *nv = zero_nvme_of(s);
    int u = pc->u, q = zero_store_slot(s, u);
    if (nv->pslot_keep[q] != u) return;
    if (pc->lo == 0) {
        if (nv->pslot_copy[q] >= 0) zero_store_host_wait(s, nv->pslot_copy[q], "a parameter slice's copy out");
        zero_nvme_wait(s, nv->pslot_read[q]);
        nv->pslot_copy[q] = nv->pslot_read[q] = nv->pslot_unit[q] = -1;
    }
    if (!nv->io->sim) memcpy((char *)nv->pslot[q] + pc->lo * s->esize, buf, pc->n * s->esize); // (simulated: no data)
    if (pc->lo + pc->n == zero_store_slice(s, u)) { nv->pslot_unit[q] = u; nv->pslot_gen[q] = s->updates + 1; }
}
static inline void zero_nvme_close(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (zero_cache_at(nv, kind, pc->u, pc->lo)) return;
    if (kind == MEM_PARAMS) {
        zero_nvme_keep(s, pc, zero_nvme_buf(s, kind, i));
        nv->buf_punit[i % nv->nbuf] = pc->u;
    }
    int later = zero_nvme_in_area(nv, kind, i); // (the area's writes are waited for only by the next step's reads: in the background)
    *zero_nvme_ticket(nv, kind, i, 1) = zero_nvme_io(s, kind, pc->u, pc->lo, pc->n, zero_nvme_buf(s, kind, i), later ? 2 : 1);
}

// --- its part of the store's life ----------------------------------------------------------

// At a unit boundary of the forward and backward: the next update's reads whose memory is free
// (its write done) start, in order, while core/nvme.h takes them without blocking.
static inline void zero_nvme_poll(ZeroStore *s) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv || !nv->io) return;
    double before = nv->io->bytes_read;
    int arrays = 1 + s->nstate;
    while (nv->prefetched < nv->nnext) {
        int i = nv->prefetched, free = 1;
        for (int k = 0; k < arrays; k++) free = free && nvme_done(nv->io, *zero_nvme_ticket(nv, MEM_MASTER + k, i, 1));
        if (!free || !nvme_room(nv->io, arrays, zero_round(nv->next[i].n * 4, NVME_ALIGN), 0)) break;
        // (read at the update's end: the next step's; in its forward and backward: this one's)
        nv->io->step_ahead = *s->trace && nv->ahead_for > (*s->trace)->step ? nv->ahead_for - (*s->trace)->step : 0;
        for (int k = 0; k < arrays; k++) zero_nvme_fetch(s, MEM_MASTER + k, &nv->next[i], i);
        nv->io->step_ahead = 0;
        nv->prefetched++;
    }
    // their bytes count in the step of the update that uses them (zero_stream_begin), not in
    // whichever step the reads happened to start in: the log's per-step bytes stay exact
    nv->ahead_read += nv->io->bytes_read - before;
    nv->io->bytes_read = before;
}
// Host buffers: nbuf buffer sets of a piece of each kind on NVMe, the read-ahead area, the host
// tier (zeroed; put initialises it), a slot per gather buffer for a shard on NVMe
// (zero_staging_bytes counts them); and the list of the next update's first pieces.
static inline void zero_nvme_staging(ZeroStore *s) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv) return;
    const ZeroLocation *st = zero_store_of(s, MEM_STAGING);
    size_t piece = s->piece, e = s->esize, ce = zero_cache_elems(nv, s);
    for (int b = 0; b < nv->nbuf; b++) {
        if (s->where[MEM_MASTER] == LOC_NVME) {
            nv->buf_master[b] = (float *)st->alloc(s, MEM_STAGING, piece * 4);
            for (int k = 0; k < s->nstate; k++) nv->buf_state[b][k] = (float *)st->alloc(s, MEM_STAGING, piece * 4);
        }
        if (s->where[MEM_PARAMS] == LOC_NVME) nv->buf_param[b] = st->alloc(s, MEM_STAGING, piece * e);
    }
    for (int k = 0; k < 1 + s->nstate && nv->narea; k++) nv->area[k] = (float *)st->alloc(s, MEM_STAGING, (size_t)nv->narea * piece * 4);
    for (int k = 0; k < 1 + s->nstate && ce; k++) // the host tier (zeroed by the backend; initialised by put)
        nv->cache[k] = (float *)st->alloc(s, MEM_STAGING, ce * 4);
    if (s->where[MEM_PARAMS] == LOC_NVME) {
        size_t n[4] = {zero_store_slice(s, UNIT_EMBED), zero_store_slice(s, gpt2_final_unit(s->lay)),
                       zero_store_layer_slice(s), zero_store_layer_slice(s)};
        for (int q = 0; q < 4; q++) nv->pslot[q] = st->alloc(s, MEM_STAGING, zero_round(n[q] * e, NVME_ALIGN));
    }
    size_t tickets = (size_t)nv->narea * ZERO_NVME_Q;
    nv->next = (ZeroPiece *)calloc((size_t)(nv->narea + nv->nbuf), sizeof(ZeroPiece));
    nv->area_read = (int *)malloc((tickets + 1) * sizeof(int));
    nv->area_write = (int *)malloc((tickets + 1) * sizeof(int));
    if (!nv->next || !nv->area_read || !nv->area_write) { s->be->fatal(s->be->ctx, "NVMe offload: out of host memory"); return; }
    for (size_t t = 0; t < tickets; t++) nv->area_read[t] = nv->area_write[t] = -1;
}
// A stream begins: the bytes read ahead for it count now (zero_nvme_poll), a parameter read in
// flight must not cross the update's writes, and the pieces read ahead count as fetched.
static inline void zero_nvme_begin(ZeroStore *s) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv) return;
    if (nv->io) { // (counted in the step the trace gave them: read for a later step than this one, they are the
                  // helper's update's, counted with its I/O and read ahead as of nvme_expose: zero_nvme_hand)
        int later = s->helper && (!*s->trace || nv->ahead_for > (*s->trace)->step);
        nvme_count(nv->io, nv->ahead_read, later);
        if (!later) nv->ahead_step += nv->ahead_read;
        nv->ahead_read = 0.0;
    }
    for (int q = 0; q < 4; q++) {
        if (nv->pslot_read[q] >= 0) { zero_nvme_wait(s, nv->pslot_read[q]); nv->pslot_read[q] = -1; nv->pslot_unit[q] = -1; }
        if (!s->reading) { nv->pslot_keep[q] = nv->pslot_first[q]; nv->pslot_first[q] = -1; } // (not a read pass)
    }
    for (int k = MEM_MASTER; k < MEM_MASTER + 1 + s->nstate; k++) // read ahead across the step boundary
        if (s->where[k] == LOC_NVME) s->fetched[k] = nv->prefetched;
    nv->nnext = nv->prefetched = 0;
}
// A stream ends: every write drains behind the next forward (a parameter write before the read
// of its unit's slice: zero_nvme_prefetch), and the next update's first pieces are read ahead
// into the read-ahead area and every buffer set as their writes free them (an update reading
// nbuf - 2 ahead first fetches into a set once it has written its first piece from it: none is
// worth keeping free).
static inline void zero_nvme_end(ZeroStore *s, const ZeroPiece *pcs, int P) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv) return;
    int ahead = nv->narea + nv->nbuf;
    nv->nnext = s->where[MEM_MASTER] == LOC_NVME ? (P < ahead ? P : ahead) : 0;
    for (int i = 0; i < nv->nnext; i++) nv->next[i] = pcs[i];
    nv->prefetched = 0;
    nv->ahead_for = *s->trace ? (*s->trace)->step + 1 : 0;
    zero_nvme_poll(s);
}
// The delayed update's helper thread streams the update (zero/store.h's zero_store_hand): phase 1,
// its I/O counted apart (core/nvme.h's nvme_defer); 2, the step's thread waits for it: its waits are
// exposed from now, and the bytes it has read so far were read ahead, during the forward and
// backward (nvme_ahead); 0, its counts join the step's, or the error it met ends the job.
static inline void zero_nvme_hand(ZeroStore *s, int phase) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv || !nv->io) return;
    if (phase == 1) nvme_defer(nv->io, 1, s->helper_step);
    if (phase == 2) nv->ahead_step += nvme_expose(nv->io);
    if (phase != 0) return;
    if (nv->helper_failed) zero_nvme_fail(s);
    nvme_defer(nv->io, 0, 0);
}
// Its buffers freed once every transfer is done (writes behind may still read them; the trace may
// be gone), and the files closed (removed: scratch).
static inline void zero_nvme_release(ZeroStore *s) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv) return;
    const ZeroLocation *st = zero_store_of(s, MEM_STAGING);
    for (int b = 0; b < nv->nbuf && nv->io; b++)
        for (int q = 0; q < ZERO_NVME_Q; q++) { nvme_wait(nv->io, nv->buf_read[b][q]); nvme_wait(nv->io, nv->buf_write[b][q]); }
    for (size_t t = 0; nv->io && nv->area_read && t < (size_t)nv->narea * ZERO_NVME_Q; t++) {
        nvme_wait(nv->io, nv->area_read[t]);
        nvme_wait(nv->io, nv->area_write[t]);
    }
    for (int k = 0; k < 1 + OPT_MAX_SLICES; k++) { st->free(s, nv->cache[k]); st->free(s, nv->area[k]); }
    for (int b = 0; b < nv->nbuf; b++) {
        st->free(s, nv->buf_master[b]);
        st->free(s, nv->buf_param[b]);
        for (int k = 0; k < OPT_MAX_SLICES; k++) st->free(s, nv->buf_state[b][k]);
    }
    for (int q = 0; q < 4; q++) st->free(s, nv->pslot[q]);
    if (nv->io) { nvme_close(nv->io, 1); free(nv->io); }
    free(nv->next); free(nv->area_read); free(nv->area_write);
    free(nv);
    s->state[LOC_NVME] = NULL;
}

static const ZeroLocation zero_nvme_store = {.alloc = zero_nvme_alloc, .free = zero_nvme_free, .put = zero_nvme_put,
                                             .get = zero_nvme_get, .prefetch = zero_nvme_prefetch,
                                             .send = zero_nvme_send, .fetch = zero_nvme_fetch, .open = zero_nvme_open,
                                             .close = zero_nvme_close, .staged = 0, .staging = zero_nvme_staging,
                                             .begin = zero_nvme_begin, .end = zero_nvme_end, .poll = zero_nvme_poll,
                                             .release = zero_nvme_release, .holder = zero_nvme_holder,
                                             .hand = zero_nvme_hand};

// Binds the NVMe store to s (after zero_store_init): its state shaped, this rank's files opened
// (the kinds on NVMe).
static inline void zero_nvme_bind(ZeroStore *s, const ZeroOptions *o) {
    s->loc[LOC_NVME] = &zero_nvme_store;
    if (!zero_on_nvme(s->where)) return;
    const NvmeSim *sim = s->be->nvme_sim; // (a simulated device: no directory, no files)
    if (!o->nvme_dir && !sim) {
        s->be->fatal(s->be->ctx, "NVMe offload: no directory for the files (--nvme-path)");
        return;
    }
    ZeroNvme *nv = (ZeroNvme *)malloc(sizeof(ZeroNvme));
    if (!nv) { s->be->fatal(s->be->ctx, "NVMe offload: out of host memory"); return; }
    zero_nvme_shape(s, nv, o);
    for (int k = 0; k < MEM_KINDS; k++) nv->file[k] = -1;
    for (int q = 0; q < 4; q++) {
        nv->pslot_unit[q] = nv->pslot_read[q] = nv->pslot_copy[q] = -1;
        nv->pslot_first[q] = nv->pslot_keep[q] = -1;
    }
    for (int b = 0; b < ZERO_MAX_BUFS; b++) {
        nv->buf_punit[b] = -1;
        for (int q = 0; q < ZERO_NVME_Q; q++) nv->buf_read[b][q] = nv->buf_write[b][q] = -1;
    }
    nv->io = (Nvme *)calloc(1, sizeof(Nvme));
    char err[1024];
    if (nv->io && sim) nv->io->sim = sim;
    else if (!nv->io || nvme_open(nv->io, o->nvme_dir, o->nvme_threads, o->nvme_block, err, sizeof(err))) {
        char msg[1100];
        snprintf(msg, sizeof(msg), "NVMe offload: %s", nv->io ? err : "out of memory");
        s->be->fatal(s->be->ctx, msg);
    }
    zero_nvme_offsets(s, MEM_MASTER, nv->offo);
    zero_nvme_offsets(s, MEM_PARAMS, nv->offp);
    static const char *const names[MEM_KINDS] = {"params.bin", "grads.bin", "master.bin", "state0.bin", "state1.bin"};
    for (int k = MEM_PARAMS; k < MEM_BUFFERS; k++) {
        if (s->where[k] != LOC_NVME || (k >= MEM_STATE && k - MEM_STATE >= s->nstate)) continue;
        if (sim) { nv->file[k] = k; continue; }
        nv->file[k] = nvme_file(nv->io, names[k], (k == MEM_PARAMS ? nv->offp : nv->offo)[s->lay->num_units]);
        if (nv->file[k] < 0) zero_nvme_fail(s);
    }
}

// NVMe traffic since the last call: bytes read and written, ms with I/O in flight, ms the step
// waited for it, and bytes of its updates' reads started ahead, during the forward and backward
// (all 0 without NVMe).
typedef struct { double read, written, busy_ms, exposed_ms, ahead; } ZeroNvmeStats;
static inline ZeroNvmeStats zero_store_nvme_stats(ZeroStore *s) {
    ZeroNvmeStats st = {0, 0, 0, 0, 0};
    ZeroNvme *nv = zero_nvme_of(s);
    if (!nv || !nv->io) return st;
    nvme_take_stats(nv->io, &st.read, &st.written, &st.busy_ms, &st.exposed_ms);
    st.busy_ms *= 1e3;
    st.exposed_ms *= 1e3;
    st.ahead = nv->ahead_step;
    nv->ahead_step = 0.0;
    return st;
}
// A file deleted or truncated under the job ends it.
static inline void zero_store_check(ZeroStore *s) {
    ZeroNvme *nv = zero_nvme_of(s);
    if (nv && nv->io && nvme_check(nv->io)) zero_nvme_fail(s);
}

#endif // ZERO_NVME_STORE_H
