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
//   Accounting. Every collective's bytes are counted in the ring model (all-gather or
//   reduce-scatter of M bytes over N ranks: M(N-1)/N; all-reduce: twice that), and every
//   buffer this header asks the backend to allocate is counted by kind and by where it lives.
//   Timeline (core/trace.h, z->trace, NULL: none). Each collective is a span from its issue to
//   its completion (as the backend's wait reports it), named all_gather, reduce_scatter or
//   all_reduce, with its unit and the bytes counted above; the time the caller's thread spends
//   blocked in a wait (or in a progress poke while collectives are in flight: MPI moves data
//   inside those calls) is a "wait" span; each unit's update is an "update" span. Offload:
//   the host's waits for a staging copy are "wait copy" spans (offload); NVMe: each read and
//   write is a span from its submission to its completion and each wait for one a "wait nvme"
//   span (nvme).
//   Flight recorder (core/flight.h, z->flight, NULL: none). Every collective this header starts,
//   and every sum of scalars (zero_sum_doubles, zero_sum_scalars), is numbered in start order and
//   recorded with its unit, bytes, step and micro-step; the waits for them mark the rank as
//   waiting. A watchdog's verdict reads it (run/verdict.h).
//
//   Where the model states live (ZeRO-Offload). By default everything is in the backend's
//   compute memory ("device": the GPU's, or the CPU trainer's own). offload_optimizer = host
//   (stages 1-3) puts the fp32 master weights (kept even in fp32 runs: the update needs its
//   parameters where it runs) and the optimizer's state arrays in host memory (page-locked with
//   pin_memory), and the update runs there, on the CPU optimizer engine (optimizer_engine.h):
//   unit by unit, the unit's reduced gradient slice is copied to host staging, updated on the
//   host, and its new 16-bit parameters copied back and (stages 1, 2) all-gathered, the copies
//   of the next unit in flight while the host updates this one. offload_param = host (stage 3)
//   keeps this rank's 16-bit parameter shard in host memory too: before a unit's all-gather its
//   slice is copied to a device staging slice, and the update writes the shard in place. The
//   gradients stay on the device. A backend whose compute memory is the host's (unified)
//   offloads nothing to the host: there is nowhere to move to. Staging is bounded: two unit
//   slices of gradients and two of parameters on the host, one slice per gather buffer on the
//   device.
//
//   NVMe (ZeRO-Infinity). offload_optimizer = nvme (stages 1-3) keeps the master weights and the
//   state arrays in files, one per array, in this rank's directory; offload_param = nvme (stage
//   3) the parameter shard too; both trainers (a unified backend too: NVMe is below its memory).
//   Each unit's slice starts at an NVME_ALIGN-aligned offset, and everything is read and written
//   with direct I/O (core/nvme.h) in pieces of at most `piece` elements: the update streams the
//   pieces through `nbuf` host buffer sets, reading ahead nbuf - 2 pieces while it updates one
//   and writes the last one behind. A shard on NVMe is read into a host slice per gather buffer
//   before its all-gather, the next unit's read issued while this one computes. Host memory for
//   all this is the staging kind, bounded by the buffer settings; the files' bytes are counted
//   per kind, where = nvme. An I/O error, or a file deleted or truncated under the job, ends it
//   through the backend's fatal() with one line.
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
#include "core/optimizer_engine.h"
#include "core/nvme.h"
#include "mixed_precision.h"
#include "core/trace.h"
#include "core/flight.h"

#define ZERO_ALIGN 16 // elements: every slice starts on a 64-byte boundary in fp32
#define ZERO_MAX_BUFS 16 // NVMe buffer sets at most

enum { ZC_ALL_REDUCE, ZC_REDUCE_SCATTER, ZC_ALL_GATHER, ZC_NUM_COLLECTIVES };
static const char *const zero_collective_names[ZC_NUM_COLLECTIVES] = {"all_reduce", "reduce_scatter", "all_gather"};
static const char *const zero_wait_names[ZC_NUM_COLLECTIVES] = {"wait all_reduce", "wait reduce_scatter", "wait all_gather"};

// The kinds of memory a rank holds. MEM_STATE + k is the optimizer's state array k (named by
// optimizer.h: "adam_m", "adam_v", "lion_m", ...). staging: the offload's transfer buffers in
// host memory. activations and workspace (what a trainer needs beyond these to compute: the CPU
// trainer's fp32 working copies in 16-bit runs) are counted by the trainer, and so are the
// activations a device trainer keeps in host memory (host_activations: the GPU trainer's
// checkpoints with cpu_checkpointing).
enum { MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_STATE, MEM_BUFFERS = MEM_STATE + OPT_MAX_SLICES, MEM_STAGING,
       MEM_ACTIVATIONS, MEM_WORKSPACE, MEM_HOST_ACTIVATIONS, MEM_KINDS };
// The kind's name in logs and plans; NULL for a state array the optimizer does not keep.
static inline const char *zero_memory_name(int optimizer, int kind) {
    static const char *const names[MEM_KINDS] = {"params", "grads", "master", "state0", "state1", "buffers", "staging",
                                                 "activations", "workspace", "host_activations"};
    if (kind >= MEM_STATE && kind < MEM_STATE + OPT_MAX_SLICES) return optimizer_info(optimizer)->slice_names[kind - MEM_STATE];
    return names[kind];
}

// Where memory lives: the backend's compute memory, host memory, or files on NVMe.
enum { LOC_DEVICE, LOC_HOST, LOC_NVME, LOC_KINDS };
static const char *const zero_location_names[LOC_KINDS] = {"device", "host", "nvme"};

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
    // zeroed (and on a unified backend aligned to NVME_ALIGN: direct I/O reads into it), and
    // touched by this header only through these calls.
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
    // Host memory and asynchronous copies, for model states offloaded from the compute memory
    // (the GPU trainer). A backend whose compute memory is the host's (the CPU trainer) sets
    // `unified` and may leave these NULL: nothing is ever offloaded from it.
    int unified;
    void *(*host_alloc)(void *ctx, size_t bytes, int pinned); // zeroed, NVME_ALIGN-aligned; pinned: page-locked
    void (*host_free)(void *ctx, void *p, int pinned);
    // Copies on a copy stream, each ordered after everything the compute stream has been handed
    // so far. The handle is waited for by the host (host_wait: the data has landed in host memory,
    // or the host buffer may be written again) or by the compute stream (device_wait: what is
    // enqueued after it reads the copied data).
    int (*copy_to_host)(void *ctx, void *host, const void *src, size_t bytes);
    int (*copy_to_device)(void *ctx, void *dst, const void *host, size_t bytes);
    void (*host_wait)(void *ctx, int copy, const char *what);
    void (*device_wait)(void *ctx, int copy);
    // Ends the job after printing one line ("error: rank R: " + msg): what zero.h cannot recover
    // from (an NVMe file that fails under a running job).
    void (*fatal)(void *ctx, const char *msg);
} ZeroBackend;

// What a rank keeps, and where (zero_init).
typedef struct {
    int stage;             // 0-3
    int dtype;             // of parameters, gradients, buffers: ZC_F32, ZC_BF16, ZC_FP16
    int optimizer;         // optimizer.h's kind: its state arrays
    int offload_optimizer; // LOC_DEVICE (none) or LOC_HOST: master weights and state arrays (stages 1-3)
    int offload_param;     // LOC_DEVICE (none), LOC_HOST or LOC_NVME: the 16-bit parameter shard (stage 3)
    int pin_memory;        // offloaded host memory page-locked
    // NVMe: this rank's scratch directory (made and, at a clean exit, removed here), the buffer
    // sets the update streams through (>= 2; DeepSpeed's buffer_count), the piece in elements
    // (DeepSpeed's buffer_size), I/O threads and bytes per request (aio.thread_count, block_size)
    const char *nvme_dir;
    int nvme_buffers;
    size_t nvme_piece;
    int nvme_threads;
    size_t nvme_block;
} ZeroOptions;
// Nothing offloaded; the rest as given.
static inline ZeroOptions zero_options(int stage, int dtype, int optimizer) {
    ZeroOptions o;
    memset(&o, 0, sizeof(o));
    o.stage = stage; o.dtype = dtype; o.optimizer = optimizer;
    return o;
}

typedef struct {
    int stage, rank, world;
    int dtype;                     // of parameters, gradients, buffers: ZC_F32, ZC_BF16, ZC_FP16
    size_t esize;                  // its bytes
    ParamLayout lay;               // padded for this world size
    ZeroBackend be;
    // the model states this rank keeps
    void *params;                  // full (stages 0-2) or shard (stage 3)
    void *grads;                   // full (stages 0, 1) or shard accumulator (stages 2, 3)
    float *master;                 // mixed precision (or an offloaded fp32 optimizer): fp32 weights, full
                                   // (stage 0) or shard; else NULL (and NULL on NVMe)
    int has_master;                // master weights are kept (wherever they are)
    int optimizer, nstate;         // optimizer.h's kind, and its number of state arrays
    float *state[OPT_MAX_SLICES];  // its state arrays: full (stage 0) or shard
    int where[MEM_KINDS];          // LOC_*: where each kind lives
    int pinned;                    // host memory page-locked
    // offload staging (host): two unit slices of gradients on their way to the host update, two
    // of updated parameters on their way back; (device) a slice per gather buffer for a host shard
    void *stage_grad[2], *stage_param[2];
    void *stage_dev_embed, *stage_dev_final, *stage_dev_layer[2];
    // NVMe: the files, each unit's slice's byte offset in an fp32 file and in the parameter file,
    // the streamed update's pieces and buffer sets, and a host slice per gather buffer for a
    // shard on NVMe (the unit it holds, its read and the copy that reads it, tickets/handles)
    Nvme *nvme;
    int nvme_file[MEM_KINDS];
    size_t off4[GPT2_MAX_UNITS + 1], offp[GPT2_MAX_UNITS + 1];
    size_t piece;
    int nbuf;
    float *buf_master[ZERO_MAX_BUFS], *buf_state[ZERO_MAX_BUFS][OPT_MAX_SLICES];
    void *buf_param[ZERO_MAX_BUFS];
    int buf_write[ZERO_MAX_BUFS][2 + OPT_MAX_SLICES];
    void *pslot[4];
    int pslot_unit[4], pslot_read[4], pslot_copy[4];
    unsigned long pslot_gen[4], updates; // a slot holds the parameters of update `gen`
    // bounded buffers
    void *gather_embed, *gather_final, *gather_layer[2]; // stage 3
    void *bucket_embed, *bucket_final, *bucket_layer[2]; // stages 2, 3
    void *scatter_recv[3];         // a reduce-scatter's output before it is added to the shard
    // schedule state
    int micro, accum;              // current micro-step (0-based) and how many per step
    int grads_written;             // set by the caller: its backward writes a fresh gradient (see above)
    int pending[GPT2_MAX_UNITS];   // handle of the unit's collective in flight, or -1
    int pending_recv[GPT2_MAX_UNITS]; // which scatter_recv buffer the unit's reduce-scatter uses
    int gathered[GPT2_MAX_UNITS];  // stage 3: the unit's parameters are (being) gathered in its buffer
    int layer_buffer[GPT2_MAX_UNITS]; // stage 3: which gather_layer a gathered layer is in
    int buffer_layer[2];           // ... and the layer each holds (-1: none)
    int in_use;                    // the layer zero_params handed out last (its buffer is not refilled)
    int unclaimed[GPT2_MAX_UNITS]; // stage 3: a layer prefetched, not asked for yet (pending: its all-gather)
    int step;                      // for the watchdog's message
    Trace *trace;                  // the rank's timeline (core/trace.h), or NULL
    Flight *flight;                // the rank's flight recorder (core/flight.h), or NULL
    int64_t pending_seq[GPT2_MAX_UNITS]; // the unit's collective in flight: its number there,
    int pending_kind[GPT2_MAX_UNITS];     // the unit's collective in flight: ZC_*,
    double pending_bytes[GPT2_MAX_UNITS]; // its bytes (ring model),
    double issued[GPT2_MAX_UNITS];        // and when it was started (trace_clock)
    unsigned long forwards;        // forward passes begun: a unit's values are the same within one
    // accounting
    size_t mem[MEM_KINDS];         // bytes allocated, by kind (where[kind] says where)
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
static inline void *zero_at(const Zero *z, const void *p, size_t i) { return p ? (char *)p + i * z->esize : NULL; }

// Bytes of one element of a kind: fp32 for the master weights and optimizer state, z->dtype
// otherwise.
static inline size_t zero_elem(const Zero *z, int kind) {
    return kind == MEM_MASTER || (kind >= MEM_STATE && kind < MEM_BUFFERS) ? sizeof(float) : z->esize;
}
static inline size_t zero_round(size_t n, size_t a) { return (n + a - 1) / a * a; }
// n elements of a kind, where the kind lives (NVMe: in its file, whose bytes, its slices padded
// to NVME_ALIGN, are counted; NULL).
static inline size_t zero_nvme_file_bytes(const Zero *z, int kind);
static inline void *zero_alloc(Zero *z, int kind, size_t n) {
    size_t bytes = n * zero_elem(z, kind);
    if (z->where[kind] == LOC_NVME) { z->mem[kind] += zero_nvme_file_bytes(z, kind); return NULL; }
    z->mem[kind] += bytes;
    if (z->where[kind] == LOC_HOST) return z->be.host_alloc(z->be.ctx, bytes, z->pinned);
    return z->be.alloc(z->be.ctx, bytes);
}
// Host staging: the process's memory on a unified backend, else host memory (pinned on request).
static inline void *zero_alloc_staging(Zero *z, size_t bytes) {
    z->mem[MEM_STAGING] += bytes;
    if (z->where[MEM_STAGING] == LOC_HOST) return z->be.host_alloc(z->be.ctx, bytes, z->pinned);
    return z->be.alloc(z->be.ctx, bytes);
}
static inline void zero_free_at(Zero *z, int loc, void *p) {
    if (!p) return;
    if (loc == LOC_HOST) z->be.host_free(z->be.ctx, p, z->pinned);
    else z->be.free(z->be.ctx, p);
}
// The master weights and state arrays are not in compute memory (host or NVMe); the parameter
// shard is in host memory; on NVMe.
static inline int zero_offloads_optimizer(const Zero *z) { return z->where[MEM_MASTER] != LOC_DEVICE; }
// The update streams (zero_update_streamed) when anything it reads or writes is off the device.
static inline int zero_streams_update(const Zero *z) { return z->where[MEM_MASTER] != LOC_DEVICE || z->where[MEM_PARAMS] != LOC_DEVICE; }
static inline int zero_nvme(const Zero *z, int kind) { return z->where[kind] == LOC_NVME; }

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

// The piece the streamed update works in: a whole unit slice, unless something is on NVMe (then
// at most the buffer size, a multiple of 2048 elements so every piece starts NVME_ALIGN-aligned
// in its file at 2 or 4 bytes an element); and the buffer sets.
static inline void zero_pieces(Zero *z, const ZeroOptions *o) {
    size_t slice = zero_max_unit(z) / z->world;
    int nvme = z->where[MEM_MASTER] == LOC_NVME || z->where[MEM_PARAMS] == LOC_NVME;
    size_t want = o->nvme_piece ? o->nvme_piece : (size_t)1 << 24;
    z->piece = nvme ? zero_round(want < slice ? want : slice, 2048) : slice;
    z->nbuf = o->nvme_buffers < 2 ? 2 : o->nvme_buffers > ZERO_MAX_BUFS ? ZERO_MAX_BUFS : o->nvme_buffers;
}
// Bytes of the host staging these placements need (the planner predicts with it):
//   a device's offloaded update: two pieces of gradients, and two of parameters unless the
//     parameter shard is off the device;
//   the optimizer state on NVMe: nbuf sets of (master + state arrays) pieces;
//   a shard on NVMe: nbuf pieces of parameters (the update writes them there), and one slice per
//     gather buffer (embeddings, final LayerNorm, two layers).
static inline size_t zero_staging_bytes(const Zero *z, const int where[MEM_KINDS], int unified) {
    size_t b = 0, piece = z->piece, e = z->esize;
    if (!unified && where[MEM_MASTER] != LOC_DEVICE)
        b += 2 * piece * e + (where[MEM_PARAMS] == LOC_DEVICE ? 2 * piece * e : 0);
    if (where[MEM_MASTER] == LOC_NVME) b += (size_t)z->nbuf * piece * 4 * (1 + (size_t)z->nstate);
    if (where[MEM_PARAMS] == LOC_NVME) {
        b += (size_t)z->nbuf * piece * e;
        int F = gpt2_final_unit(&z->lay);
        b += zero_round(zero_slice(z, UNIT_EMBED) * e, NVME_ALIGN) + zero_round(zero_slice(z, F) * e, NVME_ALIGN) +
             2 * zero_round(zero_max_layer(z) / z->world * e, NVME_ALIGN);
    }
    return b;
}

// NVMe: each unit's slice's byte offset in a file of e-byte elements, every slice padded to
// NVME_ALIGN; the file's bytes.
static inline void zero_nvme_offsets(const Zero *z, size_t e, size_t *off) {
    off[0] = 0;
    for (int u = 0; u < z->lay.num_units; u++) off[u + 1] = off[u] + zero_round(zero_slice(z, u) * e, NVME_ALIGN);
}
static inline size_t *zero_nvme_off(Zero *z, int kind) { return zero_elem(z, kind) == 4 ? z->off4 : z->offp; }
// A kind's file on NVMe: this rank's slices of every unit, each padded to NVME_ALIGN (the planner
// asks too, before any Zero is initialised).
static inline size_t zero_nvme_file_bytes(const Zero *z, int kind) {
    size_t e = zero_elem(z, kind), b = 0;
    for (int u = 0; u < z->lay.num_units; u++) b += zero_round(zero_slice(z, u) * e, NVME_ALIGN);
    return b;
}
static inline void zero_nvme_fail(Zero *z) {
    char msg[1200];
    snprintf(msg, sizeof(msg), "NVMe offload: %s; the job stops (the last checkpoint is untouched)", z->nvme->err);
    z->be.fatal(z->be.ctx, msg);
}
// Starts a transfer of n elements of a kind's unit u from element lo of its slice (bytes padded
// to NVME_ALIGN; buf holds them); returns the ticket.
static inline int zero_nvme_io(Zero *z, int kind, int u, size_t lo, size_t n, void *buf, int writing) {
    size_t e = zero_elem(z, kind), bytes = zero_round(n * e, NVME_ALIGN);
    z->nvme->trace = z->trace; // (core/nvme.h draws each transfer in the trace as it completes)
    return nvme_submit(z->nvme, z->nvme_file[kind], buf, bytes, zero_nvme_off(z, kind)[u] + lo * e, writing, u);
}
// Waits for a transfer (-1: none; one waited for before: at once); in the trace, the time it
// blocked the caller ("wait nvme": exposed I/O).
static inline void zero_nvme_wait(Zero *z, int ticket) {
    if (ticket < 0) return;
    double t0 = trace_begin(z->trace, "wait nvme", TRACE_NVME, -1, 0.0);
    int bad = nvme_wait(z->nvme, ticket);
    trace_end(z->trace, t0);
    if (bad) zero_nvme_fail(z);
}

// Sets up the partition and allocates this rank's model states and buffers (ZeroOptions: the
// stage, the element type, the optimizer, what is offloaded, and where NVMe files go).
static inline void zero_init(Zero *z, const GPT2Config *cfg, int rank, int world, const ZeroOptions *o, ZeroBackend be) {
    memset(z, 0, sizeof(*z));
    int stage = o->stage, dtype = o->dtype;
    z->stage = stage; z->rank = rank; z->world = world; z->be = be;
    z->dtype = dtype; z->esize = zc_dtype_size(dtype);
    z->optimizer = o->optimizer;
    z->nstate = optimizer_info(o->optimizer)->slices;
    z->pinned = o->pin_memory;
    zero_placement(o, be.unified, z->where);
    if (!be.unified && z->where[MEM_PARAMS] != LOC_DEVICE && z->where[MEM_MASTER] == LOC_DEVICE)
        be.fatal(be.ctx, "--offload-param needs the optimizer offloaded as well (the update that writes the offloaded "
                         "parameters runs where the optimizer state is)");
    gpt2_layout_init(&z->lay, cfg, (size_t)world * ZERO_ALIGN);
    zero_pieces(z, o);
    for (int k = 0; k < MEM_KINDS; k++) z->nvme_file[k] = -1;
    for (int i = 0; i < 4; i++) { z->pslot_unit[i] = -1; z->pslot_read[i] = -1; z->pslot_copy[i] = -1; }
    if (zero_nvme(z, MEM_MASTER) || zero_nvme(z, MEM_PARAMS)) { // this rank's files: the kinds on NVMe
        z->nvme = (Nvme *)calloc(1, sizeof(Nvme));
        char err[1024];
        if (!z->nvme || nvme_open(z->nvme, o->nvme_dir, o->nvme_threads, o->nvme_block, err, sizeof(err))) {
            char msg[1100];
            snprintf(msg, sizeof(msg), "NVMe offload: %s", z->nvme ? err : "out of memory");
            be.fatal(be.ctx, msg);
        }
        zero_nvme_offsets(z, 4, z->off4);
        zero_nvme_offsets(z, z->esize, z->offp);
        static const char *const names[MEM_KINDS] = {"params.bin", "grads.bin", "master.bin", "state0.bin", "state1.bin"};
        for (int k = MEM_PARAMS; k < MEM_BUFFERS; k++) {
            if (!zero_nvme(z, k) || (k >= MEM_STATE && k - MEM_STATE >= z->nstate)) continue;
            z->nvme_file[k] = nvme_file(z->nvme, names[k], zero_nvme_off(z, k)[z->lay.num_units]);
            if (z->nvme_file[k] < 0) zero_nvme_fail(z);
        }
    }
    size_t full = z->lay.num_flat, shard = zero_shard_size(z);
    z->params = zero_alloc(z, MEM_PARAMS, stage == 3 ? shard : full);
    z->grads = zero_alloc(z, MEM_GRADS, stage >= 2 ? shard : full);
    z->has_master = dtype != ZC_F32 || zero_streams_update(z); // a streamed update needs its fp32 weights in its memory
    if (z->has_master) z->master = (float *)zero_alloc(z, MEM_MASTER, stage == 0 ? full : shard);
    for (int k = 0; k < z->nstate; k++) z->state[k] = (float *)zero_alloc(z, MEM_STATE + k, stage == 0 ? full : shard);
    // staging, as zero_staging_bytes counts it
    size_t piece = z->piece, e = z->esize;
    if (!be.unified && zero_offloads_optimizer(z))
        for (int i = 0; i < 2; i++) {
            z->stage_grad[i] = zero_alloc_staging(z, piece * e);
            if (z->where[MEM_PARAMS] == LOC_DEVICE) z->stage_param[i] = zero_alloc_staging(z, piece * e);
        }
    for (int b = 0; b < z->nbuf; b++) {
        if (zero_nvme(z, MEM_MASTER)) {
            z->buf_master[b] = (float *)zero_alloc_staging(z, piece * 4);
            for (int k = 0; k < z->nstate; k++) z->buf_state[b][k] = (float *)zero_alloc_staging(z, piece * 4);
        }
        if (zero_nvme(z, MEM_PARAMS)) z->buf_param[b] = zero_alloc_staging(z, piece * e);
        for (int k = 0; k < 2 + OPT_MAX_SLICES; k++) z->buf_write[b][k] = -1;
    }
    if (zero_nvme(z, MEM_PARAMS)) {
        int F = gpt2_final_unit(&z->lay);
        size_t n[4] = {zero_slice(z, UNIT_EMBED), zero_slice(z, F), zero_max_layer(z) / world, zero_max_layer(z) / world};
        for (int i = 0; i < 4; i++) {
            z->pslot[i] = zero_alloc_staging(z, zero_round(n[i] * e, NVME_ALIGN));
        }
    }
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
    if (!be.unified && z->where[MEM_PARAMS] != LOC_DEVICE) { // a host shard's slice lands here before its gather
        z->stage_dev_embed = zero_alloc(z, MEM_BUFFERS, zero_slice(z, UNIT_EMBED));
        z->stage_dev_final = zero_alloc(z, MEM_BUFFERS, zero_slice(z, F));
        for (int i = 0; i < 2; i++) z->stage_dev_layer[i] = zero_alloc(z, MEM_BUFFERS, zero_max_layer(z) / world);
    }
    for (int u = 0; u < GPT2_MAX_UNITS; u++) z->pending[u] = -1;
    z->buffer_layer[0] = z->buffer_layer[1] = z->in_use = -1;
}

// Elements of the bounded buffers zero_init allocates: gradient buckets and reduce-scatter
// receive slices (stages 2, 3), gather buffers (stage 3), the device slices a host or NVMe shard
// is copied into before its gather. The planner predicts with it. (where: zero_placement's.)
static inline size_t zero_buffer_floats(const Zero *z, const int where[MEM_KINDS], int unified) {
    size_t embed = gpt2_unit_padded(&z->lay, UNIT_EMBED), fin = gpt2_unit_padded(&z->lay, gpt2_final_unit(&z->lay));
    size_t n = 0;
    if (z->stage >= 2) n += embed + fin + 2 * zero_max_layer(z)                          // buckets
                            + zero_slice(z, UNIT_EMBED) + 2 * (zero_max_layer(z) / z->world); // receive slices
    if (z->stage == 3) n += embed + fin + 2 * zero_max_layer(z);                         // gather buffers
    if (!unified && where[MEM_PARAMS] != LOC_DEVICE)                                     // landing slices
        n += zero_slice(z, UNIT_EMBED) + zero_slice(z, gpt2_final_unit(&z->lay)) + 2 * (zero_max_layer(z) / z->world);
    return n;
}

static inline void zero_free(Zero *z) {
    void *all[] = {z->params, z->grads, z->master, z->state[0], z->state[1]};
    int kind[] = {MEM_PARAMS, MEM_GRADS, MEM_MASTER, MEM_STATE, MEM_STATE + 1};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) zero_free_at(z, z->where[kind[i]], all[i]);
    int sl = z->where[MEM_STAGING];
    for (int i = 0; i < 2; i++) { zero_free_at(z, sl, z->stage_grad[i]); zero_free_at(z, sl, z->stage_param[i]); }
    for (int b = 0; b < z->nbuf; b++) {
        zero_free_at(z, sl, z->buf_master[b]);
        zero_free_at(z, sl, z->buf_param[b]);
        for (int k = 0; k < OPT_MAX_SLICES; k++) zero_free_at(z, sl, z->buf_state[b][k]);
    }
    for (int i = 0; i < 4; i++) zero_free_at(z, sl, z->pslot[i]);
    void *buffers[] = {z->gather_embed, z->gather_final, z->gather_layer[0], z->gather_layer[1], z->bucket_embed,
                       z->bucket_final, z->bucket_layer[0], z->bucket_layer[1], z->scatter_recv[0], z->scatter_recv[1],
                       z->scatter_recv[2], z->stage_dev_embed, z->stage_dev_final, z->stage_dev_layer[0],
                       z->stage_dev_layer[1]};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) zero_free_at(z, LOC_DEVICE, buffers[i]);
    if (z->nvme) { nvme_close(z->nvme, 1); free(z->nvme); z->nvme = NULL; } // scratch: removed
}

// Copies between a kind's memory and the host's fp32 (initialisation, checkpoints): through the
// backend for compute memory, directly for host memory. For a kind on NVMe, u and lo say which
// elements (unit u's slice, from element lo to its end), read or written through the file a piece
// at a time, synchronously.
static inline void zero_nvme_sync(Zero *z, int kind, int u, size_t lo, float *host, size_t n, int dtype, int writing) {
    // through the first buffer set, a piece at a time (no update is streaming meanwhile); only the
    // range's last piece may end off NVME_ALIGN, and callers hand whole slices
    void *buf = kind == MEM_PARAMS ? z->buf_param[0] : kind == MEM_MASTER ? (void *)z->buf_master[0]
                                                                           : (void *)z->buf_state[0][kind - MEM_STATE];
    for (int s = 0; s < 4 && writing && kind == MEM_PARAMS; s++) { // what the slots hold is stale now
        if (z->pslot_read[s] >= 0) zero_nvme_wait(z, z->pslot_read[s]);
        z->pslot_read[s] = -1;
        z->pslot_unit[s] = -1;
    }
    for (size_t at = 0; at < n; at += z->piece) {
        size_t m = n - at < z->piece ? n - at : z->piece;
        if (writing) zc_narrow(buf, host + at, m, dtype);
        zero_nvme_wait(z, zero_nvme_io(z, kind, u, lo + at, m, buf, writing));
        if (!writing) zc_widen(host + at, buf, m, dtype);
    }
}static inline void zero_put(Zero *z, int kind, int u, size_t lo, void *dst, const float *host, size_t n, int dtype) {
    if (z->where[kind] == LOC_NVME) zero_nvme_sync(z, kind, u, lo, (float *)host, n, dtype, 1);
    else if (z->where[kind] == LOC_HOST || z->be.unified) zc_narrow(dst, host, n, dtype);
    else z->be.from_host(z->be.ctx, dst, host, n, dtype);
}
static inline void zero_get(Zero *z, int kind, int u, size_t lo, float *host, const void *src, size_t n, int dtype) {
    if (z->where[kind] == LOC_NVME) zero_nvme_sync(z, kind, u, lo, host, n, dtype, 0);
    else if (z->where[kind] == LOC_HOST || z->be.unified) zc_widen(host, src, n, dtype);
    else z->be.to_host(z->be.ctx, host, src, n, dtype);
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
    return bytes;
}

// Unit u's collective `kind` is about to start (its padded elements): 0 when it is not to be
// (core/flight.h's test-only fault hook), after --check-collectives' check.
static inline int zero_starts(Zero *z, int kind, int u) {
    return flight_start(z->flight, kind, u, (double)gpt2_unit_padded(&z->lay, u) * z->esize, z->dtype, z->step, z->micro);
}
// Unit u's collective `kind` over its n_full padded elements was started at t_issue: it is in
// flight (handle), counted, and remembered for the trace until zero_wait.
static inline void zero_issued(Zero *z, int u, int kind, size_t n_full, double t_issue, int handle) {
    if (handle < 0) return; // skipped (core/flight.h's test-only fault hook): nothing in flight
    z->pending_seq[u] = flight_issue(z->flight, kind, u, (double)n_full * z->esize, z->dtype, z->step, z->micro);
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
    flight_wait(z->flight, z->pending_seq[u]);
    double done = z->be.wait(z->be.ctx, z->pending[u], desc);
    flight_done(z->flight, z->pending_seq[u]);
    trace_end(z->trace, w0);
    trace_span(z->trace, zero_collective_names[kind], TRACE_COMM, u, z->pending_bytes[u], z->issued[u], done);
    z->pending[u] = -1;
}

// The host waits for an offload copy (a "wait copy" span: time the update waited on the bus).
static inline void zero_host_wait(Zero *z, int copy, const char *what) {
    double t0 = trace_begin(z->trace, "wait copy", TRACE_OFFLOAD, -1, 0.0);
    z->be.host_wait(z->be.ctx, copy, what);
    trace_end(z->trace, t0);
}

// A shard on NVMe: unit u's slice in the host slot of its gather buffer, read from its file
// (started here unless it is there, or on its way, for the parameters of the last update). The
// slot's previous unit must be done with it: its all-gather (which reads it on a unified
// backend) and its copy to the device.
static inline int zero_pslot_of(const Zero *z, int u) {
    return u == UNIT_EMBED ? 0 : u == gpt2_final_unit(&z->lay) ? 1 : 2 + u % 2;
}
static inline void zero_wait(Zero *z, int u, const char *what);
static inline void zero_param_read(Zero *z, int u) {
    int s = zero_pslot_of(z, u);
    if (z->pslot_unit[s] == u && z->pslot_gen[s] == z->updates) return;
    if (z->pslot_copy[s] >= 0) zero_host_wait(z, z->pslot_copy[s], "a parameter slice's copy to the device");
    z->pslot_copy[s] = -1;
    int v = z->pslot_unit[s]; // its all-gather may still read the slot (unified) unless it was waited for: a
                              // layer prefetched and not yet asked for (otherwise v's pending may be its reduce-scatter)
    if (v >= 0 && zero_is_layer(z, v) && z->unclaimed[v]) zero_wait(z, v, "all_gather");
    if (z->pslot_read[s] >= 0) zero_nvme_wait(z, z->pslot_read[s]);
    z->pslot_read[s] = zero_nvme_io(z, MEM_PARAMS, u, 0, zero_slice(z, u), z->pslot[s], 0);
    z->pslot_unit[s] = u;
    z->pslot_gen[s] = z->updates;
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
    const void *send = z->params ? zero_at(z, z->params, zero_shard_offset(z, u)) : NULL;
    int slot = zero_pslot_of(z, u);
    if (zero_nvme(z, MEM_PARAMS)) { // the slice from its file into the slot's host buffer
        zero_param_read(z, u);
        zero_nvme_wait(z, z->pslot_read[slot]);
        z->pslot_read[slot] = -1;
        send = z->pslot[slot];
    }
    if (!z->be.unified && z->where[MEM_PARAMS] != LOC_DEVICE) { // a host slice goes to the device first
        void *landing = u == UNIT_EMBED ? z->stage_dev_embed : u == gpt2_final_unit(&z->lay) ? z->stage_dev_final
                                                                                              : z->stage_dev_layer[u % 2];
        int h = z->be.copy_to_device(z->be.ctx, landing, send, zero_slice(z, u) * z->esize);
        z->be.device_wait(z->be.ctx, h);
        if (zero_nvme(z, MEM_PARAMS)) z->pslot_copy[slot] = h; // the slot is free again once this copy has run
        send = landing;
    }
    double t0 = trace_clock(z->trace);
    int h = !zero_starts(z, ZC_ALL_GATHER, u) ? -1 : z->be.all_gather(z->be.ctx, send, zero_gather_buffer(z, u), zero_slice(z, u), z->dtype);
    zero_issued(z, u, ZC_ALL_GATHER, gpt2_unit_padded(&z->lay, u), t0, h);
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
    // a shard on NVMe: the unit after next, in this direction, starts its read into u's slot
    int ahead = next + (next - u);
    if (zero_nvme(z, MEM_PARAMS) && next >= 0 && (next - u == 1 || next - u == -1) && zero_is_layer(z, ahead) &&
        zero_is_layer(z, u))
        zero_param_read(z, ahead);
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
    int h = !zero_starts(z, ZC_REDUCE_SCATTER, u) ? -1 : z->be.reduce_scatter(z->be.ctx, zero_bucket(z, u), z->scatter_recv[r], zero_slice(z, u), z->dtype);
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
    return z->params ? zero_at(z, z->params, z->stage == 3 ? zero_shard_offset(z, u) : zero_update_begin(z, u)) : NULL;
}
// The state arrays and master weights are laid out alike: in full under stage 0, else the shard.
// (NULL for an array on NVMe: it has no address.)
static inline float *zero_update_moment(const Zero *z, const float *moment, int u) {
    return moment ? (float *)moment + (z->stage == 0 ? z->lay.unit_offset[u] : zero_shard_offset(z, u)) : NULL;
}

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
// The offloaded update (zero_streams_update), streamed in pieces of at most z->piece elements
// of one unit's slice (a whole slice unless something is on NVMe). For each piece:
//   the gradient: on a unified backend read where it is; else copied to a host staging piece
//     (two, alternating: the piece after next's copy starts when this one is consumed);
//   the master weights and state arrays: in host memory, updated in place; on NVMe, read into the
//     piece's buffer set (nbuf sets: the reads of the next nbuf - 2 pieces in flight while this one
//     updates, each waiting for its set's previous write) and written back behind;
//   the new parameters, written by the CPU optimizer engine: straight into the parameter memory on
//     a unified backend or into a host shard; into a staging piece copied back to the device; or
//     into the buffer set and written to the parameter file.
// After a unit's last piece, stages 1 and 2 start its all-gather. Frozen runs (padding, unused
// vocabulary rows) are written as the zeros they are, since staging is reused.
static inline void zero_update_host_segment(const ParamSegment *seg, void *ctx) {
    ZeroUpdateRun *r = (ZeroUpdateRun *)ctx;
    Zero *z = r->z;
    size_t lo = seg->begin - r->base, n = seg->end - seg->begin;
    if (seg->kind == SEG_FROZEN) {
        if (r->p16) memset(zero_at(z, r->p16, lo), 0, n * z->esize);
        return;
    }
    float *state[OPT_MAX_SLICES] = {NULL};
    for (int k = 0; k < z->nstate; k++) state[k] = r->state[k] + lo;
    optimizer_update_host(r->step, r->p + lo, state, zero_at(z, r->g, lo), r->p16 ? zero_at(z, r->p16, lo) : NULL, n,
                          z->dtype, seg->kind == SEG_DECAY);
}
// The host's wait for a gradient piece's copy. (test_offload builds a variant with it defined
// away, to show the CUDA emulator catching the missing wait.)
#ifndef ZERO_HOST_WAIT
#define ZERO_HOST_WAIT(z, h, what) zero_host_wait((z), (h), (what))
#endif
typedef struct { int u; size_t lo, n; } ZeroPiece;
// The pieces, unit by unit (a malloc'd list of *count).
static inline ZeroPiece *zero_piece_list(const Zero *z, int *count) {
    int P = 0;
    for (int u = 0; u < z->lay.num_units; u++) P += (int)((zero_slice(z, u) + z->piece - 1) / z->piece);
    ZeroPiece *list = (ZeroPiece *)malloc((size_t)P * sizeof(ZeroPiece));
    if (!list) z->be.fatal(z->be.ctx, "out of host memory for the offloaded update's piece list");
    P = 0;
    for (int u = 0; u < z->lay.num_units; u++)
        for (size_t lo = 0, n = zero_slice(z, u); lo < n; lo += z->piece) {
            ZeroPiece pc = {u, lo, n - lo < z->piece ? n - lo : z->piece};
            list[P++] = pc;
        }
    *count = P;
    return list;
}
// Piece j's optimizer state from NVMe into its buffer set, once the set's last write is done.
static inline void zero_stream_read(Zero *z, const ZeroPiece *pc, int j, int *reads) {
    int b = j % z->nbuf;
    for (int k = 0; k < 2 + OPT_MAX_SLICES; k++) { zero_nvme_wait(z, z->buf_write[b][k]); z->buf_write[b][k] = -1; }
    reads[b * (1 + OPT_MAX_SLICES)] = zero_nvme_io(z, MEM_MASTER, pc->u, pc->lo, pc->n, z->buf_master[b], 0);
    for (int k = 0; k < z->nstate; k++)
        reads[b * (1 + OPT_MAX_SLICES) + 1 + k] = zero_nvme_io(z, MEM_STATE + k, pc->u, pc->lo, pc->n, z->buf_state[b][k], 0);
}
static inline void zero_update_streamed(Zero *z, const OptStep *step) {
    int P, U = z->lay.num_units, unified = z->be.unified, nvme_opt = zero_nvme(z, MEM_MASTER);
    int par = z->where[MEM_PARAMS], d2h[2] = {-1, -1}, h2d[2] = {-1, -1};
    int reads[ZERO_MAX_BUFS * (1 + OPT_MAX_SLICES)];
    ZeroPiece *pcs = zero_piece_list(z, &P);
    for (int s = 0; s < 4; s++) // a parameter read in flight must not cross the update's writes
        if (z->pslot_read[s] >= 0) { zero_nvme_wait(z, z->pslot_read[s]); z->pslot_read[s] = -1; z->pslot_unit[s] = -1; }
    int ahead = nvme_opt ? (z->nbuf - 2 > 0 ? z->nbuf - 2 : 0) : 0, issued = 0;
    double t_unit = 0.0;
    for (int j = 0; j < 2 && j < P && !unified; j++)
        d2h[j] = z->be.copy_to_host(z->be.ctx, z->stage_grad[j], zero_at(z, zero_update_grads(z, pcs[j].u), pcs[j].lo),
                                    pcs[j].n * z->esize);
    for (int i = 0; i < P; i++) {
        const ZeroPiece *pc = &pcs[i];
        int b = i % z->nbuf, s = i % 2, u = pc->u;
        if (pc->lo == 0) // the unit's update: a span over its pieces
            t_unit = trace_begin(z->trace, "update", TRACE_OPTIMIZER, u,
                                 zero_update_bytes_per_element(z) * (double)zero_update_count(z, u));
        size_t begin = zero_update_begin(z, u) + pc->lo, off = zero_shard_offset(z, u) + pc->lo;
        if (nvme_opt) {
            for (; issued <= i + ahead && issued < P; issued++) zero_stream_read(z, &pcs[issued], issued, reads);
            for (int k = 0; k < 1 + z->nstate; k++) zero_nvme_wait(z, reads[b * (1 + OPT_MAX_SLICES) + k]);
        }
        ZeroUpdateRun r = {z, begin, nvme_opt ? z->buf_master[b] : z->master + off, {NULL}, NULL, NULL, step};
        for (int k = 0; k < z->nstate; k++) r.state[k] = nvme_opt ? z->buf_state[b][k] : z->state[k] + off;
        if (unified) r.g = zero_at(z, zero_update_grads(z, u), pc->lo);
        else { ZERO_HOST_WAIT(z, d2h[s], "a gradient piece's copy to the host (offloaded update)"); r.g = z->stage_grad[s]; }
        if (par == LOC_NVME) { // (with the state on NVMe, the set's last write was waited for before its read)
            zero_nvme_wait(z, z->buf_write[b][1 + OPT_MAX_SLICES]);
            r.p16 = z->buf_param[b];
        }
        else if (unified || par == LOC_HOST) r.p16 = zero_at(z, zero_update_params(z, u), pc->lo);
        else {
            if (h2d[s] >= 0) zero_host_wait(z, h2d[s], "a parameter piece's copy to the device");
            r.p16 = z->stage_param[s];
        }
        gpt2_for_each_segment(&z->lay, begin, begin + pc->n, zero_update_host_segment, &r);
        if (nvme_opt) { // written behind
            z->buf_write[b][0] = zero_nvme_io(z, MEM_MASTER, u, pc->lo, pc->n, z->buf_master[b], 1);
            for (int k = 0; k < z->nstate; k++)
                z->buf_write[b][1 + k] = zero_nvme_io(z, MEM_STATE + k, u, pc->lo, pc->n, z->buf_state[b][k], 1);
        }
        if (par == LOC_NVME) {
            z->buf_write[b][1 + OPT_MAX_SLICES] = zero_nvme_io(z, MEM_PARAMS, u, pc->lo, pc->n, z->buf_param[b], 1);
        } else if (!unified && par == LOC_DEVICE) {
            h2d[s] = z->be.copy_to_device(z->be.ctx, zero_at(z, zero_update_params(z, u), pc->lo), r.p16, pc->n * z->esize);
            z->be.device_wait(z->be.ctx, h2d[s]);
        }
        if (!unified && i + 2 < P) // the staging piece is free again: the piece after next's gradient
            d2h[s] = z->be.copy_to_host(z->be.ctx, z->stage_grad[s], zero_at(z, zero_update_grads(z, pcs[i + 2].u), pcs[i + 2].lo),
                                        pcs[i + 2].n * z->esize);
        if (pc->lo + pc->n == zero_slice(z, u)) { trace_end(z->trace, t_unit); zero_gather_updated_unit(z, u); }
    }
    free(pcs);
    for (int b = 0; b < z->nbuf; b++)
        for (int k = 0; k < 2 + OPT_MAX_SLICES; k++) { zero_nvme_wait(z, z->buf_write[b][k]); z->buf_write[b][k] = -1; }
    for (int s = 0; s < 2; s++)
        if (h2d[s] >= 0) zero_host_wait(z, h2d[s], "a parameter piece's copy to the device");
    for (int u = 0; u < U; u++) zero_wait(z, u, "all_gather (updated parameters)");
    z->updates++;
}

static inline void zero_update(Zero *z, const OptStep *step) {
    if (zero_streams_update(z)) { zero_update_streamed(z, step); return; }
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
    if (z->stage == 3) zero_put(z, MEM_PARAMS, u, 0, zero_at(z, z->params, zero_shard_offset(z, u)), unit_host + begin, n, z->dtype);
    else zero_put(z, MEM_PARAMS, u, 0, zero_at(z, z->params, z->lay.unit_offset[u]), unit_host, padded, z->dtype);
    if (!z->has_master) return;
    if (z->stage == 0) zero_put(z, MEM_MASTER, u, 0, zero_update_moment(z, z->master, u), unit_host, padded, ZC_F32);
    else zero_put(z, MEM_MASTER, u, 0, zero_update_moment(z, z->master, u), unit_host + begin, n, ZC_F32);
}

// This rank's slice of unit u's weights into host (fp32): the master weights in mixed
// precision (what checkpoints keep: rounding them again gives the parameters), else the
// parameters.
static inline void zero_get_slice(Zero *z, int u, float *host) {
    size_t n = zero_slice(z, u);
    if (z->has_master) {
        size_t off = z->stage == 0 ? zero_slice_begin(z, u) : zero_shard_offset(z, u);
        zero_get(z, MEM_MASTER, u, 0, host, z->master ? z->master + off : NULL, n, ZC_F32);
    } else {
        size_t off = z->stage == 3 ? zero_shard_offset(z, u) : zero_slice_begin(z, u);
        zero_get(z, MEM_PARAMS, u, 0, host, z->params ? zero_at(z, z->params, off) : NULL, n, z->dtype);
    }
}

// State array k's share of unit u: this rank's slice into host (fp32), and from a whole
// padded unit (host, fp32) what this rank keeps (every element under stage 0, else its slice).
static inline void zero_get_state_slice(Zero *z, int k, int u, float *host) {
    size_t off = z->stage == 0 ? zero_slice_begin(z, u) : zero_shard_offset(z, u);
    zero_get(z, MEM_STATE + k, u, 0, host, z->state[k] ? z->state[k] + off : NULL, zero_slice(z, u), ZC_F32);
}
static inline void zero_set_state_unit(Zero *z, int k, int u, const float *unit_host) {
    if (z->stage == 0)
        zero_put(z, MEM_STATE + k, u, 0, zero_update_moment(z, z->state[k], u), unit_host, gpt2_unit_padded(&z->lay, u), ZC_F32);
    else
        zero_put(z, MEM_STATE + k, u, 0, zero_update_moment(z, z->state[k], u), unit_host + (size_t)z->rank * zero_slice(z, u),
                        zero_slice(z, u), ZC_F32);
}

// Zero the gradient accumulators at the start of a step; reset the step's counters.
static inline void zero_begin_step(Zero *z, int step) {
    z->step = step;
    z->be.set_step(z->be.ctx, step);
    if (z->stage >= 2 || !z->grads_written)
        z->be.zero(z->be.ctx, z->grads, (z->stage >= 2 ? zero_shard_size(z) : z->lay.num_flat) * z->esize);
    for (int k = 0; k < ZC_NUM_COLLECTIVES; k++) z->comm[k] = 0.0;
    if (z->nvme && nvme_check(z->nvme)) zero_nvme_fail(z); // a file deleted or truncated under the job
}

// NVMe traffic since the last call: bytes read and written, ms with I/O in flight, and ms the
// step waited for it (all 0 without NVMe).
typedef struct { double read, written, busy_ms, exposed_ms; } ZeroNvmeStats;
static inline ZeroNvmeStats zero_nvme_stats(Zero *z) {
    ZeroNvmeStats st = {0, 0, 0, 0};
    if (!z->nvme) return st;
    nvme_take_stats(z->nvme, &st.read, &st.written, &st.busy_ms, &st.exposed_ms);
    st.busy_ms *= 1e3;
    st.exposed_ms *= 1e3;
    return st;
}

// --- theory, for the reports beside the measurements -------------------------------------

// Bytes communicated per rank per step (one micro-step), textbook: 2P(N-1)/N elements for
// stages 0-2, 3P(N-1)/N for stage 3, of elem_bytes each.
static inline double zero_theory_comm(int stage, double P, int N, double elem_bytes) {
    return (stage == 3 ? 3.0 : 2.0) * P * elem_bytes * (N - 1) / N;
}

#endif // ZERO_H
