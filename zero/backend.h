// zero/backend.h: what a backend performs for ZeRO (ZeroBackend): the seam that MPI
// (cpu/mpi_backend.h), NCCL (gpu/nccl_backend.cuh) and the step-time model's simulated backend
// (run/timemodel.h) fill in, and zero.h and its stores (zero/store.h) drive.
//
// Contract
//   The backend performs what it is handed: non-blocking collectives identified by a small
//   integer, a wait and a progress poke, a blocking sum of a few doubles, memory (allocate, zero,
//   add), copies to and from the host, the optimizer's element update and its per-tensor reduction
//   pass (optional), and for a backend whose
//   compute memory is not the host's, host memory and asynchronous copies; a simulated machine's
//   host update and NVMe device. It never decides what to communicate, nor where a model state lives.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_BACKEND_H
#define ZERO_BACKEND_H

#include <stddef.h>
#include <stdio.h>
#include "core/optimizer.h"
#include "mixed_precision.h"

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
    // Whether a copy has landed (1) or not yet (0), without blocking: the step's thread polls the
    // delayed update's held gradients with it at unit boundaries. Copies land in the order they were
    // handed; a handle whose copy landed may be reused by a later one (it then answers for that one,
    // which lands after it). NULL: the caller waits with host_wait instead.
    int (*copy_landed)(void *ctx, int copy);
    // Ends the job after printing one line ("error: rank R: " + msg): what zero.h cannot recover
    // from (an NVMe file that fails under a running job).
    void (*fatal)(void *ctx, const char *msg);
    // ZeRO++ (zero.h's qwZ, hpZ, qgZ). NULL in a backend without them: zero_init then refuses
    // ZeRO++ in one line (zero_pp_problem).
    //   host_size: ranks per host, where every host has as many and consecutive ranks fill each
    //     host (rank r on host r / host_size); 0 when the hosts are not laid out so. The MPI backend
    //     asks MPI (MPI_Comm_split_type shared), or reads ZERO_HOST_ID (cpu/mpi_backend.h).
    //   Groups, for a group size g dividing the world: ZB_INNER, the g consecutive ranks
    //     r - r % g .. r - r % g + g - 1 (a host's, with g = host_size); ZB_OUTER, the world / g
    //     ranks r % g, r % g + g, ... (one per host). A member's index in its group: r % g (inner),
    //     r / g (outer). ZB_WORLD: every rank (g ignored).
    //   group_all_gather: each member's `bytes` bytes of send land at recv + index * bytes on every
    //     member (raw bytes: quantized messages, or 16-bit elements); send may not overlap recv.
    //   group_all_to_all: send holds one `bytes`-byte message per member, in index order; the one
    //     for member j reaches j, and member i's for this rank lands at recv + i * bytes.
    //   Both are non-blocking and return a handle waited for with wait(), as the collectives above.
    int (*host_size)(void *ctx);
    int (*group_all_gather)(void *ctx, int group, int g, const void *send, void *recv, size_t bytes);
    int (*group_all_to_all)(void *ctx, int group, int g, const void *send, void *recv, size_t bytes);
    // core/quant.h's format, on buffers in compute memory, complete when they return (or ordered
    // before the next collective on a device backend): msg <- n elements of src (dtype);
    // dst (dtype) <- msg; acc (fp32) += msg's values. convert: n elements of src (src_dtype) into
    // dst (dst_dtype), widened exactly or rounded to nearest even (qgZ's fp32 sums and back).
    void (*quantize)(void *ctx, void *msg, const void *src, size_t n, int dtype, size_t block, int bits);
    void (*dequantize)(void *ctx, void *dst, int dtype, const void *msg, size_t n, size_t block, int bits);
    void (*dequantize_add)(void *ctx, float *acc, const void *msg, size_t n, size_t block, int bits);
    void (*convert)(void *ctx, void *dst, int dst_dtype, const void *src, int src_dtype, size_t n);
    // An optimizer's per-tensor reduction pass over n elements of one tensor (optimizer.h's
    // reductions; optimizer_engine.h's optimizer_reduce_host and its block rule, phase included):
    // adds its sums into acc (host memory), writing nothing else. NULL: the backend cannot, and
    // an optimizer with reductions is refused (the GPU trainer's, today).
    void (*reduce)(void *ctx, const OptStep *step, const float *p, float *const *state, const void *g, size_t n,
                   int dtype, int decay, size_t phase, double *acc);
    // A simulated machine (the step-time model, run/timemodel.h), whose memory is never touched:
    //   host_update: the streamed update's host part over n elements, as `update` (frozen runs: not
    //     called); NULL, as in every trainer: the CPU optimizer engine (optimizer_engine.h) does it,
    //     and writes frozen runs as zeros.
    //   nvme_sim: NVMe transfers on a simulated device (core/nvme.h's NvmeSim: no directory, files or
    //     data); NULL, as in every trainer: files under ZeroOptions.nvme_dir.
    void (*host_update)(void *ctx, const OptStep *step, float *p, float *const *state, const void *g, void *p16,
                        size_t n, int dtype, int decay);
    const struct NvmeSim *nvme_sim;
} ZeroBackend;

enum { ZB_WORLD, ZB_INNER, ZB_OUTER }; // ZeRO++'s groups (above)

// ZeRO++'s groups as a backend that makes them by splitting the world (MPI_Comm_split,
// ncclCommSplit) keeps them: the (group, g) pairs made so far, the backend's handle for pair i at
// its own index i. zero_group_slot: the index of (group, g), or, when it is new (*fresh = 1),
// the next index and this rank's color (which group) and key (its index there) to split with;
// -1 and one line in why when it cannot be made (g does not divide the world, or the table is full).
#define ZB_MAX_GROUPS 8
typedef struct { int n, group[ZB_MAX_GROUPS], g[ZB_MAX_GROUPS]; } ZeroGroups;
static inline int zero_group_slot(ZeroGroups *t, int group, int g, int rank, int world, int *fresh, int *color, int *key,
                                  char *why, size_t nwhy) {
    *fresh = 0;
    for (int i = 0; i < t->n; i++)
        if (t->group[i] == group && t->g[i] == g) return i;
    if (t->n == ZB_MAX_GROUPS || g < 1 || world % g) {
        snprintf(why, nwhy, "ZeRO++ group of %d ranks over a world of %d (or more than %d groups)", g, world, ZB_MAX_GROUPS);
        return -1;
    }
    *fresh = 1;
    *color = group == ZB_INNER ? rank / g : rank % g;
    *key = group == ZB_INNER ? rank % g : rank / g;
    t->group[t->n] = group; t->g[t->n] = g;
    return t->n++;
}

#endif // ZERO_BACKEND_H
