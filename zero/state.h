// zero/state.h: what a ZeRO rank keeps (the Zero struct) and the partition arithmetic that says
// which elements are its: the ground the schedule (zero.h), ZeRO++'s setup (zero/pp_setup.h) and
// the update's walks (zero/update.h) stand on.
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
//   The update's elements. A rank updates, per unit, zero_update_count elements from
//   zero_update_begin (full-buffer coordinates): the whole padded unit under stage 0, else its
//   slice. Their gradient (zero_update_grads: the delayed update's held copy while z->from_held),
//   parameters (zero_update_params) and master weights and state arrays (zero_opt_unit: in full
//   under stage 0, else the shard; Twin-Flow's device part from st.host_units on) line up.
//   The struct's fields are documented where they are declared; zero.h's contract says what the
//   schedule does with them, and zero/store.h where each kind lives.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_STATE_H
#define ZERO_STATE_H

#include <stdint.h>
#include <stddef.h>
#include <pthread.h>
#include "core/gpt2.h"
#include "core/optimizer.h"
#include "mixed_precision.h"
#include "core/trace.h"
#include "core/flight.h"
#include "zero/store.h"
#include "zero/pp.h"

#define ZERO_ALIGN 16 // elements: every slice starts on a 64-byte boundary in fp32

enum { ZC_ALL_REDUCE, ZC_REDUCE_SCATTER, ZC_ALL_GATHER, ZC_NUM_COLLECTIVES };
static const char *const zero_collective_names[ZC_NUM_COLLECTIVES] = {"all_reduce", "reduce_scatter", "all_gather"};
static const char *const zero_wait_names[ZC_NUM_COLLECTIVES] = {"wait all_reduce", "wait reduce_scatter", "wait all_gather"};

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
    double *red;                   // an optimizer with per-tensor reductions (LAMB): its R sums per tensor
    int nred;                      // ... R x tensors of them (0: none)
    float *twin_master, *twin_state[OPT_MAX_SLICES]; // Twin-Flow: the device part of an offloaded shard
                                   // (units from st.host_units on; NULL without it): zero_opt_unit
    int where[MEM_KINDS];          // LOC_*: where each kind lives (zero_placement)
    ZeroStore st;                  // ... and each location's store (zero/store.h)
    // bounded buffers
    void *gather_embed, *gather_final, *gather_layer[2]; // stage 3
    void *bucket_embed, *bucket_final, *bucket_layer[2]; // stages 2, 3
    void *scatter_recv[3];         // a reduce-scatter's output before it is added to the shard
    // the delayed parameter update: the gradients this rank updates, held for the next step's
    // update (shard layout; counted as gradients), its OptStep, whether one is pending, and
    // whether zero_update reads them (zero_take_held)
    void *held;
    OptStep held_step;
    int held_pending, from_held;
    // ... its host part on a helper thread (zero/update.h's zero_held_start): the held gradients of
    // the host's units where the host reads them (held_host: a copy on a device the host cannot
    // address, else held itself), their new parameters until the step's backward is done
    // (held_out; both staging), the thread and whether it runs; held_sync (set by the caller, a
    // test's switch) keeps the synchronous update; held_async: the held gradients go to held_host
    // (pinned) by an asynchronous copy (held_copy, issued at held_copy_t0), in flight (held_inflight)
    // until the step's thread sees it land, and the helper waits on held_cv until then (held_landed)
    void *held_host, *held_out;
    ZeroPiece *held_pcs;           // with the optimizer state on NVMe: the helper's pieces (zero_held_start)
    int held_npcs;
    pthread_t held_thread;
    int held_started, held_sync, held_async, held_copy, held_inflight, held_landed;
    double held_copy_t0;
    pthread_mutex_t held_mu;
    pthread_cond_t held_cv;
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
    // ZeRO++ (zero/pp.h): qwZ on, hpZ's group (1: off), qgZ's bits (0: off), the block, ranks per host
    int qwz, hpz, qgz, per_host;
    size_t block;
    ZeroPPShape pp;
    void *qw_buf[4];               // qwZ's messages, per gather buffer (embeddings, final, the two layers')
    void *hp_second;               // hpZ's secondary shard (MEM_HPZ)
    void *qg_slot[3];              // qgZ's level 1, per receive slot; its sums and level 2, shared
    float *qg_sums;
    void *qg_shared;
    void *pp_dst[GPT2_MAX_UNITS];  // where a unit's gather lands
    int qw_land[GPT2_MAX_UNITS];   // its qwZ messages to dequantize there on arrival (the buffer's index + 1)
    int hp_keep[GPT2_MAX_UNITS];   // its arrival fills the unit's secondary part
    unsigned long hp_have[GPT2_MAX_UNITS]; // 1 + the forward whose gather filled it (0: none)
    int qg_todo[GPT2_MAX_UNITS];   // a qgZ reduction started: zero_finish_reduce finishes it
    double comm_inside, comm_across; // this step's bytes sent inside the host and across hosts
    double last_across;              // ... of the collective counted last
    double pending_across[GPT2_MAX_UNITS]; // the unit's collective in flight: its bytes across hosts
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

// --- the elements this rank updates ---------------------------------------------------

// The gradient of the elements this rank updates, for unit u: a pointer to the first of
// zero_update_count(z, u) elements, aligned with zero_update_params / the moments.
static inline size_t zero_update_begin(const Zero *z, int u) { return z->stage == 0 ? z->lay.unit_offset[u] : zero_slice_begin(z, u); }
static inline size_t zero_update_count(const Zero *z, int u) { return z->stage == 0 ? gpt2_unit_padded(&z->lay, u) : zero_slice(z, u); }
static inline void *zero_update_grads(const Zero *z, int u) {
    if (z->from_held) return zero_at(z, z->held, zero_shard_offset(z, u)); // the delayed update's
    return zero_at(z, z->grads, z->stage < 2 ? zero_update_begin(z, u) : zero_shard_offset(z, u));
}
static inline void *zero_update_params(const Zero *z, int u) {
    return z->params ? zero_at(z, z->params, z->stage == 3 ? zero_shard_offset(z, u) : zero_update_begin(z, u)) : NULL;
}
// The state arrays and master weights are laid out alike: in full under stage 0, else the shard;
// kind MEM_MASTER or MEM_STATE + k, unit u's first element (Twin-Flow: in the device part from
// st.host_units on). NULL for an array on NVMe: it has no address.
static inline float *zero_opt_unit(const Zero *z, int kind, int u) {
    int k = kind - MEM_STATE;
    if (u >= z->st.host_units) {
        float *t = kind == MEM_MASTER ? z->twin_master : z->twin_state[k];
        return t ? t + (zero_shard_offset(z, u) - z->st.host_elems) : NULL;
    }
    float *a = kind == MEM_MASTER ? z->master : z->state[k];
    return a ? a + (z->stage == 0 ? z->lay.unit_offset[u] : zero_shard_offset(z, u)) : NULL;
}

#endif // ZERO_STATE_H
