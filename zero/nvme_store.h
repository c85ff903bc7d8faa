// zero/nvme_store.h: the NVMe store (ZeRO-Infinity): model states in files on NVMe, read and
// written with direct I/O (core/nvme.h), behind zero/store.h's per-location interface
// (ZeroLocation: zero_nvme_store, bound to a ZeroStore by zero_nvme_bind).
//
// Contract
//   offload_optimizer = nvme (stages 1-3) keeps the master weights and the
//   state arrays in files, one per array, in this rank's directory; offload_param = nvme (stage
//   3) the parameter shard too; both trainers (a unified backend too: NVMe is below its memory).
//   Each unit's slice starts at an NVME_ALIGN-aligned offset, and everything is read and written
//   with direct I/O (core/nvme.h) in pieces of at most `piece` elements: the update streams the
//   pieces through `nbuf` host buffer sets, reading ahead nbuf - 2 pieces while it updates one
//   and writes the last one behind. Across the step boundary: the optimizer state's last writes
//   drain behind the next forward (zero_stream_end waits only for the parameters' writes, which
//   the next gathers read), and zero_store_poll, called at every unit boundary of the forward
//   and backward, starts the next update's reads of its first nbuf - 1 pieces as soon as their
//   buffer sets' writes are done, without blocking; the update then finds them in flight or
//   done. A checkpoint's get or put first waits for every transfer and drops those reads (a
//   put changes the files under them; the poll starts them again). The host tier
//   (nvme_host_cache bytes): the last units' slices of the master weights and state arrays (the
//   first whole pieces of one more slice) stay in host memory, counted as staging, and the
//   update works on them in place; the files hold only the rest. A shard on NVMe is read into a host slot per gather buffer
//   before its all-gather, the next unit's read issued while this one computes. Host memory for
//   all this is the staging kind, bounded by the buffer settings; the files' bytes are counted
//   per kind, where = nvme. An I/O error, or a file deleted or truncated under the job, ends it
//   through the backend's fatal() with one line.
//   Sizes (pieces, buffer sets, the host tier, staging bytes) are zero/store.h's, so that the
//   planner predicts them; each file's bytes are zero_nvme_file_bytes.
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

// --- the files ---------------------------------------------------------------------------

// A kind's file on NVMe: this rank's slices of every unit (less what the host tier keeps), each
// padded to NVME_ALIGN (the planner asks too, before any Zero is initialised); and each slice's
// byte offset in it.
static inline size_t zero_nvme_filed(const ZeroStore *s, int kind, int u) {
    return zero_store_slice(s, u) - (kind == MEM_PARAMS ? 0 : s->cached[u]);
}
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

static inline void zero_nvme_fail(ZeroStore *s) {
    char msg[1200];
    snprintf(msg, sizeof(msg), "NVMe offload: %s; the job stops (the last checkpoint is untouched)", s->nvme->err);
    s->be->fatal(s->be->ctx, msg);
}
// Starts a transfer of n elements of a kind's unit u from element lo of its slice (bytes padded
// to NVME_ALIGN; buf holds them); returns the ticket.
static inline int zero_nvme_io(ZeroStore *s, int kind, int u, size_t lo, size_t n, void *buf, int writing) {
    size_t e = zero_store_elem(s, kind), bytes = zero_round(n * e, NVME_ALIGN);
    s->nvme->trace = *s->trace; // (core/nvme.h draws each transfer in the trace as it completes)
    size_t at = kind == MEM_PARAMS ? s->offp[u] + lo * e : s->offo[u] + (lo - s->cached[u]) * e;
    return nvme_submit(s->nvme, s->file[kind], buf, bytes, at, writing, u);
}
// Waits for a transfer (-1: none; one waited for before: at once); in the trace, the time it
// blocked the caller ("wait nvme": exposed I/O).
static inline void zero_nvme_wait(ZeroStore *s, int ticket) {
    if (ticket < 0) return;
    double t0 = trace_begin(*s->trace, "wait nvme", TRACE_NVME, -1, 0.0);
    int bad = nvme_wait(s->nvme, ticket);
    trace_end(*s->trace, t0);
    if (bad) zero_nvme_fail(s);
}

// NVMe: files; checkpoints read and write through the first buffer set, a piece at a time
// (synchronously: no update is streaming meanwhile); only the range's last piece may end off
// NVME_ALIGN, and callers hand whole slices.
static inline void *zero_nvme_alloc(ZeroStore *s, int kind, size_t bytes) {
    (void)bytes;
    s->mem[kind] += zero_nvme_file_bytes(s, kind);
    return NULL;
}
static inline void zero_nvme_free(ZeroStore *s, void *p) { (void)s; (void)p; }
static inline void *zero_nvme_buf(ZeroStore *s, int kind, int b) {
    return kind == MEM_PARAMS ? s->buf_param[b] : kind == MEM_MASTER ? (void *)s->buf_master[b] : (void *)s->buf_state[b][kind - MEM_STATE];
}
// Every buffer set's reads and writes done; the next update's reads started ahead are dropped
// (started again by zero_store_poll): a checkpoint goes through buffer set 0, and a load changes
// the files under them.
static inline void zero_nvme_quiesce(ZeroStore *s) {
    for (int b = 0; b < s->nbuf; b++)
        for (int k = 0; k < 2 + OPT_MAX_SLICES; k++) {
            zero_nvme_wait(s, s->buf_read[b][k]);
            zero_nvme_wait(s, s->buf_write[b][k]);
            s->buf_read[b][k] = s->buf_write[b][k] = -1;
        }
    s->prefetched = 0;
}
static inline void zero_nvme_sync(ZeroStore *s, int kind, int u, size_t lo, float *host, size_t n, int dtype, int writing) {
    void *buf = zero_nvme_buf(s, kind, 0);
    zero_nvme_quiesce(s);
    for (int q = 0; q < 4 && writing && kind == MEM_PARAMS; q++) { // what the slots hold is stale now
        if (s->pslot_read[q] >= 0) zero_nvme_wait(s, s->pslot_read[q]);
        s->pslot_read[q] = -1;
        s->pslot_unit[q] = -1;
    }
    for (size_t at = 0, m; at < n; at += m) {
        m = n - at < s->piece ? n - at : s->piece;
        float *c = zero_cache_at(s, kind, u, lo + at);
        if (c) { // in the host tier (up to its end in this slice)
            if (m > s->cached[u] - (lo + at)) m = s->cached[u] - (lo + at);
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
    int q = zero_store_slot(s, u);
    if (kind != MEM_PARAMS || (s->pslot_unit[q] == u && s->pslot_gen[q] == s->updates)) return;
    if (s->pslot_copy[q] >= 0) zero_store_host_wait(s, s->pslot_copy[q], "a parameter slice's copy to the device");
    s->pslot_copy[q] = -1;
    if (s->pslot_read[q] >= 0) zero_nvme_wait(s, s->pslot_read[q]);
    s->pslot_read[q] = zero_nvme_io(s, MEM_PARAMS, u, 0, zero_store_slice(s, u), s->pslot[q], 0);
    s->pslot_unit[q] = u;
    s->pslot_gen[q] = s->updates;
}
static inline const void *zero_nvme_send(ZeroStore *s, int u, const void *at) {
    (void)at;
    int q = zero_store_slot(s, u);
    zero_nvme_prefetch(s, MEM_PARAMS, u);
    zero_nvme_wait(s, s->pslot_read[q]);
    s->pslot_read[q] = -1;
    return zero_store_land(s, u, s->pslot[q], &s->pslot_copy[q]); // the slot is free again once that copy has run
}
// The update's pieces: the master weights and state arrays read into piece i's buffer set (once
// the set's last write is done) and written back behind; the parameters written into it (once
// its last parameter write is done) and to their file.
static inline void zero_nvme_fetch(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    if (kind == MEM_PARAMS || zero_cache_at(s, kind, pc->u, pc->lo)) return;
    int b = i % s->nbuf, q = zero_store_bufslot(kind);
    zero_nvme_wait(s, s->buf_write[b][q]);
    s->buf_write[b][q] = -1;
    s->buf_read[b][q] = zero_nvme_io(s, kind, pc->u, pc->lo, pc->n, zero_nvme_buf(s, kind, b), 0);
}
static inline void *zero_nvme_open(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    float *c = zero_cache_at(s, kind, pc->u, pc->lo);
    if (c) return c; // the host tier: updated in place
    int b = i % s->nbuf, q = zero_store_bufslot(kind);
    zero_nvme_wait(s, kind == MEM_PARAMS ? s->buf_write[b][q] : s->buf_read[b][q]);
    return zero_nvme_buf(s, kind, b);
}
static inline void zero_nvme_close(ZeroStore *s, int kind, const ZeroPiece *pc, int i) {
    if (zero_cache_at(s, kind, pc->u, pc->lo)) return;
    int b = i % s->nbuf;
    s->buf_write[b][zero_store_bufslot(kind)] = zero_nvme_io(s, kind, pc->u, pc->lo, pc->n, zero_nvme_buf(s, kind, b), 1);
}
// --- its part of the store's life ----------------------------------------------------------

// At a unit boundary of the forward and backward: the next update's reads whose buffer sets are
// free start, in order, without waiting.
static inline void zero_nvme_poll(ZeroStore *s) {
    double before = s->nvme ? s->nvme->bytes_read : 0.0;
    while (s->nvme && s->prefetched < s->nnext) {
        int i = s->prefetched, b = i % s->nbuf, free = 1;
        for (int k = 0; k < 1 + s->nstate; k++) free = free && nvme_done(s->nvme, s->buf_write[b][k]);
        if (!free) break;
        s->nvme->step_ahead = 1;
        for (int k = 0; k < 1 + s->nstate; k++) zero_nvme_fetch(s, MEM_MASTER + k, &s->next[i], i);
        s->nvme->step_ahead = 0;
        s->prefetched++;
    }
    // their bytes count in the step of the update that uses them (zero_stream_begin), not in
    // whichever step the reads happened to start in: the log's per-step bytes stay exact
    if (s->nvme) { s->ahead_read += s->nvme->bytes_read - before; s->nvme->bytes_read = before; }
}
// Host buffers: nbuf buffer sets of a piece of each kind on NVMe, the host tier (zeroed; put
// initialises it), a slot per gather buffer for a shard on NVMe (zero_staging_bytes counts them).
static inline void zero_nvme_staging(ZeroStore *s) {
    const ZeroLocation *st = zero_store_of(s, MEM_STAGING);
    size_t piece = s->piece, e = s->esize;
    for (int b = 0; b < s->nbuf; b++) {
        if (s->where[MEM_MASTER] == LOC_NVME) {
            s->buf_master[b] = (float *)st->alloc(s, MEM_STAGING, piece * 4);
            for (int k = 0; k < s->nstate; k++) s->buf_state[b][k] = (float *)st->alloc(s, MEM_STAGING, piece * 4);
        }
        if (s->where[MEM_PARAMS] == LOC_NVME) s->buf_param[b] = st->alloc(s, MEM_STAGING, piece * e);
    }
    for (int k = 0; k < 1 + s->nstate && zero_cache_elems(s); k++) { // the host tier (initialised by put)
        s->cache[k] = (float *)st->alloc(s, MEM_STAGING, zero_cache_elems(s) * 4);
        memset(s->cache[k], 0, zero_cache_elems(s) * 4);
    }
    if (s->where[MEM_PARAMS] == LOC_NVME) {
        size_t n[4] = {zero_store_slice(s, UNIT_EMBED), zero_store_slice(s, gpt2_final_unit(s->lay)),
                       zero_store_layer_slice(s), zero_store_layer_slice(s)};
        for (int q = 0; q < 4; q++) s->pslot[q] = st->alloc(s, MEM_STAGING, zero_round(n[q] * e, NVME_ALIGN));
    }
}
// A stream begins: the bytes read ahead for it count now (zero_nvme_poll), a parameter read in
// flight must not cross the update's writes, and the pieces read ahead count as fetched.
static inline void zero_nvme_begin(ZeroStore *s) {
    if (s->nvme) { s->nvme->bytes_read += s->ahead_read; s->ahead_read = 0.0; }
    for (int q = 0; q < 4; q++)
        if (s->pslot_read[q] >= 0) { zero_nvme_wait(s, s->pslot_read[q]); s->pslot_read[q] = -1; s->pslot_unit[q] = -1; }
    for (int k = MEM_MASTER; k < MEM_MASTER + 1 + s->nstate; k++) // read ahead across the step boundary
        if (s->where[k] == LOC_NVME) s->fetched[k] = s->prefetched;
    s->nnext = s->prefetched = 0;
}
// A stream ends: the parameters' writes land before the next gathers read them; the optimizer
// state's writes drain behind the next forward, and the next update's first pieces are read ahead
// into the buffer sets they free (all but one: the update's own read-ahead starts its next piece there).
static inline void zero_nvme_end(ZeroStore *s, const ZeroPiece *pcs, int P) {
    if (s->where[MEM_PARAMS] == LOC_NVME)
        for (int b = 0; b < s->nbuf; b++) {
            int q = zero_store_bufslot(MEM_PARAMS);
            zero_nvme_wait(s, s->buf_write[b][q]);
            s->buf_write[b][q] = -1;
        }
    s->nnext = s->where[MEM_MASTER] == LOC_NVME ? (P < s->nbuf - 1 ? P : s->nbuf - 1) : 0;
    for (int i = 0; i < s->nnext; i++) s->next[i] = pcs[i];
    s->prefetched = 0;
    zero_nvme_poll(s);
}
// Its buffers freed once every transfer is done (writes behind may still read them; the trace may
// be gone), and the files closed (removed: scratch).
static inline void zero_nvme_release(ZeroStore *s) {
    const ZeroLocation *st = zero_store_of(s, MEM_STAGING);
    for (int b = 0; b < s->nbuf && s->nvme; b++)
        for (int k = 0; k < 2 + OPT_MAX_SLICES; k++) { nvme_wait(s->nvme, s->buf_read[b][k]); nvme_wait(s->nvme, s->buf_write[b][k]); }
    for (int k = 0; k < 1 + OPT_MAX_SLICES; k++) st->free(s, s->cache[k]);
    for (int b = 0; b < s->nbuf; b++) {
        st->free(s, s->buf_master[b]);
        st->free(s, s->buf_param[b]);
        for (int k = 0; k < OPT_MAX_SLICES; k++) st->free(s, s->buf_state[b][k]);
    }
    for (int q = 0; q < 4; q++) st->free(s, s->pslot[q]);
    if (s->nvme) { nvme_close(s->nvme, 1); free(s->nvme); s->nvme = NULL; }
}

static const ZeroLocation zero_nvme_store = {.alloc = zero_nvme_alloc, .free = zero_nvme_free, .put = zero_nvme_put,
                                             .get = zero_nvme_get, .prefetch = zero_nvme_prefetch,
                                             .send = zero_nvme_send, .fetch = zero_nvme_fetch, .open = zero_nvme_open,
                                             .close = zero_nvme_close, .staged = 0, .staging = zero_nvme_staging,
                                             .begin = zero_nvme_begin, .end = zero_nvme_end, .poll = zero_nvme_poll,
                                             .release = zero_nvme_release};

// Binds the NVMe store to s (after zero_store_init) and opens this rank's files (the kinds on NVMe).
static inline void zero_nvme_bind(ZeroStore *s, const ZeroOptions *o) {
    s->loc[LOC_NVME] = &zero_nvme_store;
    if (!zero_on_nvme(s->where)) return;
    if (!o->nvme_dir) { s->be->fatal(s->be->ctx, "NVMe offload: no directory for the files (--nvme-path)"); return; }
    s->nvme = (Nvme *)calloc(1, sizeof(Nvme));
    char err[1024];
    if (!s->nvme || nvme_open(s->nvme, o->nvme_dir, o->nvme_threads, o->nvme_block, err, sizeof(err))) {
        char msg[1100];
        snprintf(msg, sizeof(msg), "NVMe offload: %s", s->nvme ? err : "out of memory");
        s->be->fatal(s->be->ctx, msg);
    }
    zero_nvme_offsets(s, MEM_MASTER, s->offo);
    zero_nvme_offsets(s, MEM_PARAMS, s->offp);
    static const char *const names[MEM_KINDS] = {"params.bin", "grads.bin", "master.bin", "state0.bin", "state1.bin"};
    for (int k = MEM_PARAMS; k < MEM_BUFFERS; k++) {
        if (s->where[k] != LOC_NVME || (k >= MEM_STATE && k - MEM_STATE >= s->nstate)) continue;
        s->file[k] = nvme_file(s->nvme, names[k], (k == MEM_PARAMS ? s->offp : s->offo)[s->lay->num_units]);
        if (s->file[k] < 0) zero_nvme_fail(s);
    }
}

// NVMe traffic since the last call: bytes read and written, ms with I/O in flight, and ms the
// step waited for it (all 0 without NVMe).
typedef struct { double read, written, busy_ms, exposed_ms; } ZeroNvmeStats;
static inline ZeroNvmeStats zero_store_nvme_stats(ZeroStore *s) {
    ZeroNvmeStats st = {0, 0, 0, 0};
    if (!s->nvme) return st;
    nvme_take_stats(s->nvme, &st.read, &st.written, &st.busy_ms, &st.exposed_ms);
    st.busy_ms *= 1e3;
    st.exposed_ms *= 1e3;
    return st;
}
// A file deleted or truncated under the job ends it.
static inline void zero_store_check(ZeroStore *s) {
    if (s->nvme && nvme_check(s->nvme)) zero_nvme_fail(s);
}

#endif // ZERO_NVME_STORE_H
