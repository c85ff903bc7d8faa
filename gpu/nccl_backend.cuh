// gpu/nccl_backend.cuh: the ZeroBackend of the GPU trainer: NCCL collectives ordered against the
// compute stream with events, the watchdog, and device memory (allocation, copies through the host,
// the optimizer's update kernel) that zero.h asks for.
#ifndef GPU_NCCL_BACKEND_CUH
#define GPU_NCCL_BACKEND_CUH
#include "gpu/kernels.cuh"
#include "gpu/quant.cuh"
#include "run/job.h"
#include "run/verdict.h"

// ----------------------------------------------------------------------------------------
// Communication: the NCCL backend that zero.h drives. MPI only launched the processes and
// carried NCCL's unique id.
//
// Ordering. A collective is issued on the communication stream after an event recorded on
// the compute stream at that moment, so it sees every kernel the schedule enqueued before
// asking for it (the backward that produced a gradient; the last reader of a gather buffer it
// overwrites). wait() does not block the host: it makes the compute stream wait for the
// collective's completion event, so the next kernel that reads the result is ordered after
// it while the host runs ahead enqueuing work (gradient reductions overlap the backward;
// stage-3 gathers of the next layer overlap this one). All collectives share one stream and
// one communicator, issued in the schedule's order, the same on every rank.
//
// Watchdog. The host blocks only in gpu_sync(), which polls with --comm-timeout: when the
// device makes no progress that long (the collective it is held up in, or its computing
// between two, does not end: timed from the last completion the host saw), it names the oldest
// collective that has not completed,
// in the CPU trainer's words, and aborts the job (ncclCommAbort, then job_abort). NCCL's
// asynchronous errors (a peer gone) are checked at every poll and unit boundary.
//
// Flight recorder (core/flight.h, through the run's Hang). The host only queues a collective and
// its wait, so the recorder takes its completions from the device (f->device): each slot
// remembers the number of the collective it carries, and its completion event is polled, oldest
// first, where the host blocks anyway (the watchdog's wait, and reclaiming slots), never
// synchronising a stream; while the host blocks and the device is held up in a collective, the
// rank waits in that one (flight_device_wait). So a verdict names the collective the device is
// stuck in, not the last one the host asked for.
//
// ZeRO++ (zero/backend.h's host_size, group_all_gather, group_all_to_all, quantize, dequantize,
// dequantize_add, convert). Hosts: run/job.h's job_host_size (ZERO_HOST_ID, or shared memory).
// A group's communicator is split from the world's (ncclCommSplit) the first time it is used
// (every rank uses them in the schedule's order); its collectives are issued on the same
// communication stream as the others, so the one order holds. The all-to-all is grouped
// ncclSend/ncclRecv of bytes, one pair per member. The quantization kernels (gpu/quant.cuh) run
// on the compute stream, so a message is written before the collective that sends it starts,
// and is read after the wait() that orders the compute stream behind its arrival.

#define MAX_PENDING (GPT2_MAX_UNITS + 8)
#define MAX_COPIES 64
enum { SLOT_FREE, SLOT_INFLIGHT, SLOT_WAITED };
typedef struct NcclBackend {
    Gpu *gpu;                      // the device: its compute stream orders against the collectives
    ncclComm_t comm;
    cudaStream_t stream;           // communication
    int rank, world, step;
    int nodes;                     // hosts the job spans (run/job.h: how a job across hosts ends)
    double timeout;
    struct Hang *hang;             // the run's recorder and side channel: the watchdog's verdict (NULL: none)
    cudaEvent_t ready;             // recorded on compute before each collective
    cudaEvent_t done[MAX_PENDING]; // recorded on the comm stream after it
    int state[MAX_PENDING];
    char what[MAX_PENDING][112];
    unsigned long seq[MAX_PENDING], next_seq;
    int64_t fseq[MAX_PENDING];     // the flight recorder's number of the slot's collective
    int fpend[MAX_PENDING];        // ... whose completion the recorder has not been told yet
    double *d_scalars, *h_scalars; // sum_doubles' buffers (device, pinned host)
    int scalar_cap;
    size_t allocated;              // bytes asked of cudaMalloc through the backend's alloc
    size_t host_allocated;         // bytes of host memory (offloaded model states, staging)
    // copies between device and host memory for offloaded model states (zero.h), on their own
    // stream: a pool of completion events, a handle each
    cudaStream_t copy_stream;
    cudaEvent_t copy_ready, copy_done[MAX_COPIES];
    int copy_busy[MAX_COPIES];
    int block_waits;               // --trace: wait() blocks the host until the collective completes,
                                   // so that the trace's times are the device's
    int host_size;                 // ZeRO++: ranks per host (job_host_size), set with the communicator
    ZeroGroups groups;             // ZeRO++'s group communicators, split from comm on first use
    ncclComm_t group_comm[ZB_MAX_GROUPS];
} NcclBackend;

// waited: how long the host waited for it (the verdict's; an asynchronous error: the timeout)
static void comm_abort(NcclBackend *b, const char *what, const char *why, double waited) {
    fprintf(stderr, "error: rank %d: %s %s at step %d; a peer is stuck or gone (--comm-timeout); aborting the job\n",
            b->rank, what, why, b->step);
    hang_verdict(b->hang, what, waited, b->timeout);
    if (b->comm) ncclCommAbort(b->comm);
    job_abort(MPI_COMM_WORLD, b->nodes, 3);
}
static void comm_check_async(NcclBackend *b) {
    if (!b->comm) return;
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(b->comm, &r);
    if (r != ncclSuccess && r != ncclInProgress) {
        char why[160];
        snprintf(why, sizeof(why), "failed (%s)", ncclGetErrorString(r));
        comm_abort(b, "a collective", why, b->timeout);
    }
}
// The run's flight recorder once it is started, its completions the device's; NULL before.
static Flight *comm_flight(NcclBackend *b) {
    if (!b->hang || !b->hang->ready) return NULL;
    b->hang->flight.device = 1;
    return &b->hang->flight;
}
// Tell the recorder what the device completed: the slots' collectives oldest first (they complete
// in order, on one stream) up to the first not complete (waited_only: or not waited for yet),
// whose slot it returns (-1: none). A collective of several slots (ZeRO++'s) completes with its last.
static int comm_poll(NcclBackend *b, int waited_only) {
    Flight *f = comm_flight(b);
    for (;;) {
        int h = -1;
        for (int k = 0; k < MAX_PENDING; k++)
            if (b->fpend[k] && (h < 0 || b->seq[k] < b->seq[h])) h = k;
        if (h < 0 || (waited_only && b->state[h] != SLOT_WAITED)) return -1;
        if (cudaEventQuery(b->done[h]) != cudaSuccess) return h;
        b->fpend[h] = 0;
        int more = 0;
        for (int k = 0; k < MAX_PENDING; k++) more |= b->fpend[k] && b->fseq[k] == b->fseq[h];
        if (!more) flight_complete(f, b->fseq[h]);
    }
}
// Free the slots whose collective completed and was waited for.
static void comm_reclaim(NcclBackend *b) {
    comm_poll(b, 1);
    for (int h = 0; h < MAX_PENDING; h++)
        if (b->state[h] == SLOT_WAITED && cudaEventQuery(b->done[h]) == cudaSuccess) b->state[h] = SLOT_FREE;
}

// Block the host until `ev` (recorded on a stream) completes, within --comm-timeout.
static void wait_event_watchdog(NcclBackend *b, cudaEvent_t ev, const char *what) {
    double start = now_seconds();
    Flight *f = comm_flight(b);
    unsigned long held = ~0ul; // the collective the device is held up in (b->seq), ~0: not yet polled
    for (int spins = 0;; spins++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) { flight_device_resume(f); return; }
        if (e != cudaErrorNotReady) gpu_fatal(what, cudaGetErrorString(e), __FILE__, __LINE__);
        int h = comm_poll(b, 0);
        unsigned long at = h >= 0 ? b->seq[h] : ~0ul - 1;
        if (at != held) held = at, start = now_seconds(); // the device moved on: the timeout counts from here
        flight_device_wait(f, h >= 0 ? b->fseq[h] : -1); // (none held up: nothing changes)
        comm_check_async(b);
        double waited = now_seconds() - start;
        if (waited > b->timeout) {
            // name the oldest collective still running; otherwise the device was just slow
            int oldest = -1;
            for (int h = 0; h < MAX_PENDING; h++)
                if (b->state[h] != SLOT_FREE && cudaEventQuery(b->done[h]) == cudaErrorNotReady &&
                    (oldest < 0 || b->seq[h] < b->seq[oldest])) oldest = h;
            char why[64];
            snprintf(why, sizeof(why), "did not complete within %g s", b->timeout);
            comm_abort(b, oldest >= 0 ? b->what[oldest] : what, why, waited);
        }
        if (spins > 100) { struct timespec ts = {0, 20000}; nanosleep(&ts, NULL); }
    }
}
// The host waits for everything enqueued on the compute stream so far.
static void gpu_sync(NcclBackend *b, const char *what) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, b->gpu->compute));
    wait_event_watchdog(b, ev, what);
    CUDA_CHECK(cudaEventDestroy(ev));
    comm_reclaim(b);
}

static int comm_begin(NcclBackend *b, const char *kind) {
    int h = -1;
    for (int pass = 0; pass < 2 && h < 0; pass++) {
        if (pass == 1) comm_reclaim(b);
        for (int k = 0; k < MAX_PENDING; k++)
            if (b->state[k] == SLOT_FREE) { h = k; break; }
    }
    if (h < 0) { // every slot busy (a very deep model between two host syncs): wait for the oldest
        for (int k = 0; k < MAX_PENDING; k++)
            if (b->state[k] == SLOT_WAITED && (h < 0 || b->seq[k] < b->seq[h])) h = k;
        if (h < 0) {
            fprintf(stderr, "error: rank %d: more than %d collectives in flight, none waited for\n", b->rank, MAX_PENDING);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        wait_event_watchdog(b, b->done[h], b->what[h]);
    }
    if (b->fpend[h]) comm_poll(b, 0); // (complete: it was waited for)
    Flight *f = comm_flight(b);
    b->state[h] = SLOT_INFLIGHT;
    b->seq[h] = b->next_seq++;
    b->fseq[h] = f ? f->next : -1; // zero.h numbers it (flight_issue) as soon as this returns
    b->fpend[h] = 1;
    snprintf(b->what[h], sizeof(b->what[h]), "%s", kind);
    CUDA_CHECK(cudaEventRecord(b->ready, b->gpu->compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->stream, b->ready, 0));
    return h;
}
static int comm_end(NcclBackend *b, int h) {
    CUDA_CHECK(cudaEventRecord(b->done[h], b->stream));
    return h;
}
// zero.h's element types as NCCL's: its 16-bit sums round as they go, which is zero.h's
// contract (and what the CPU's MPI operations do one pair at a time).
static ncclDataType_t nccl_type(int dtype) {
    return dtype == ZC_BF16 ? ncclBfloat16 : dtype == ZC_FP16 ? ncclHalf : ncclFloat;
}
static int nccl_all_reduce(void *ctx, void *buf, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = comm_begin(b, "all_reduce");
    NCCL_CHECK(ncclAllReduce(buf, buf, n, nccl_type(dtype), ncclSum, b->comm, b->stream));
    return comm_end(b, h);
}
// In place exactly when recv == send + rank * n elements, in bytes: n * zc_dtype_size(dtype)
// each. That is NCCL's own convention (it compares the addresses), and zero.h's: nothing to
// check or move here, whatever the element size.
static int nccl_reduce_scatter(void *ctx, void *send, void *recv, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = comm_begin(b, "reduce_scatter");
    NCCL_CHECK(ncclReduceScatter(send, recv, n, nccl_type(dtype), ncclSum, b->comm, b->stream));
    return comm_end(b, h);
}
// In place exactly when send == recv + rank * n elements (bytes as above), again NCCL's convention.
static int nccl_all_gather(void *ctx, const void *send, void *recv, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = comm_begin(b, "all_gather");
    NCCL_CHECK(ncclAllGather(send, recv, n, nccl_type(dtype), b->comm, b->stream));
    return comm_end(b, h);
}
// Returns the time of the call, or with block_waits the time the collective completed.
static double nccl_wait(void *ctx, int h, const char *what) {
    NcclBackend *b = (NcclBackend *)ctx;
    snprintf(b->what[h], sizeof(b->what[h]), "%s", what);
    CUDA_CHECK(cudaStreamWaitEvent(b->gpu->compute, b->done[h], 0));
    if (b->block_waits) wait_event_watchdog(b, b->done[h], b->what[h]);
    b->state[h] = SLOT_WAITED;
    return trace_now();
}
static void nccl_set_step(void *ctx, int step) { ((NcclBackend *)ctx)->step = step; }
static void nccl_progress(void *ctx) { comm_check_async((NcclBackend *)ctx); } // NCCL progresses by itself
static void nccl_sum_doubles(void *ctx, double *x, int n) {
    NcclBackend *b = (NcclBackend *)ctx;
    if (n > b->scalar_cap) {
        if (b->d_scalars) { CUDA_CHECK(cudaFree(b->d_scalars)); CUDA_CHECK(cudaFreeHost(b->h_scalars)); }
        b->scalar_cap = n < 64 ? 64 : n;
        CUDA_CHECK(cudaMalloc(&b->d_scalars, (size_t)b->scalar_cap * sizeof(double)));
        CUDA_CHECK(cudaMallocHost(&b->h_scalars, (size_t)b->scalar_cap * sizeof(double)));
    }
    memcpy(b->h_scalars, x, (size_t)n * sizeof(double));
    // on the comm stream: after the collectives already issued, as on every other rank
    CUDA_CHECK(cudaMemcpyAsync(b->d_scalars, b->h_scalars, (size_t)n * sizeof(double), cudaMemcpyHostToDevice, b->stream));
    NCCL_CHECK(ncclAllReduce(b->d_scalars, b->d_scalars, (size_t)n, ncclDouble, ncclSum, b->comm, b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_scalars, b->d_scalars, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, b->stream));
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ev, b->stream));
    wait_event_watchdog(b, ev, "all_reduce of scalars (loss, norm, reports)");
    CUDA_CHECK(cudaEventDestroy(ev));
    // on one stream behind every collective started so far (zero.h numbered this one last): all complete
    flight_complete_all(comm_flight(b));
    for (int h = 0; h < MAX_PENDING; h++) b->fpend[h] = 0;
    memcpy(x, b->h_scalars, (size_t)n * sizeof(double));
}
// zero.h's memory, zeroed. `allocated` counts exactly the bytes asked for, as zero.h's `mem`
// does, so the start-up line compares like with like (a request for 0 bytes still gets a
// valid pointer: 1 byte, counted as 0).
static void *dev_alloc(void *ctx, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    void *p = NULL;
    size_t got = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, got);
    if (e != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        fprintf(stderr, "error: rank %d: cudaMalloc of %.1f MiB failed (%s; %.1f of %.1f MiB free); try a higher "
                        "--zero-stage, a smaller --batch, or ./train_gpt --plan\n",
                b->rank, got / 1048576.0, cudaGetErrorString(e), free_b / 1048576.0, total_b / 1048576.0);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    CUDA_CHECK(cudaMemset(p, 0, got));
    b->allocated += bytes;
    return p;
}
static void dev_free(void *ctx, void *p) { (void)ctx; CUDA_CHECK(cudaFree(p)); }
static void dev_zero(void *ctx, void *p, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, b->gpu->compute));
}
static void dev_add(void *ctx, void *dst, const void *src, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    double es = zc_dtype_size(dtype);
    KSpan span(b->gpu->prof, "gradient shard add (ZeRO)", 0.0, 3.0 * n * es);
    if (dtype == FLOATX_DTYPE && n % VEC == 0 && vec_ok(dst) && vec_ok(src)) {
        void (*add_packs)(floatX *, const floatX *, size_t) = add_floatx_kernel<VEC>;
        add_packs<<<grid_for(b->gpu, n / VEC, 256), 256, 0, b->gpu->compute>>>((floatX *)dst, (const floatX *)src, n);
    } else add_kernel<<<grid_for(b->gpu, n, 256), 256, 0, b->gpu->compute>>>(dst, src, n, dtype);
    LAUNCH_CHECK();
}


// Host <-> device copies on the compute stream, complete when they return.
static void d2h(NcclBackend *b, void *host, const void *dev, size_t bytes, const char *what) {
    CUDA_CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, b->gpu->compute));
    gpu_sync(b, what);
}
// The host side of to_host / from_host is fp32. fp32 buffers copy straight through; 16-bit ones
// are widened (exact) or rounded on the device, through an fp32 staging buffer taken from the
// stream-ordered pool on the compute stream and given back before the call returns. These
// copies stage one unit or slice at a time (initialisation, model files, checkpoints), so the
// staging is transient, outside the memory plan, and never exists in fp32 runs.
static float *staging_floats(NcclBackend *b, size_t n) {
    float *s = NULL;
    CUDA_CHECK(cudaMallocAsync((void **)&s, n * sizeof(float), b->gpu->compute));
    return s;
}
static void dev_to_host(void *ctx, float *host, const void *src, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    if (n == 0) return;
    if (dtype == ZC_F32) { d2h(b, host, src, n * sizeof(float), "a device-to-host copy"); return; }
    float *s = staging_floats(b, n);
    widen_kernel<<<grid_for(b->gpu, n, 256), 256, 0, b->gpu->compute>>>(s, src, n, dtype);
    LAUNCH_CHECK();
    d2h(b, host, s, n * sizeof(float), "a device-to-host copy");
    CUDA_CHECK(cudaFreeAsync(s, b->gpu->compute));
}
static void dev_from_host(void *ctx, void *dst, const float *host, size_t n, int dtype) {
    NcclBackend *b = (NcclBackend *)ctx;
    if (n == 0) return;
    float *s = dtype == ZC_F32 ? (float *)dst : staging_floats(b, n);
    CUDA_CHECK(cudaMemcpyAsync(s, host, n * sizeof(float), cudaMemcpyHostToDevice, b->gpu->compute));
    if (dtype != ZC_F32) {
        narrow_kernel<<<grid_for(b->gpu, n, 256), 256, 0, b->gpu->compute>>>(dst, s, n, dtype);
        LAUNCH_CHECK();
        CUDA_CHECK(cudaFreeAsync(s, b->gpu->compute));
    }
    gpu_sync(b, "a host-to-device copy"); // the host buffer may be reused at once
}
static void dev_update(void *ctx, const OptStep *step, float *p, float *const *state, const void *g, void *p16, size_t n,
                       int dtype, int decay) {
    NcclBackend *b = (NcclBackend *)ctx;
    // reads and writes the fp32 master weights and both moments; reads the gradient; writes the 16-bit copy
    double es = zc_dtype_size(dtype);
    KSpan span(b->gpu->prof, "optimizer update", 0.0, (double)n * (6.0 * 4 + es + (p16 ? es : 0.0)));
    optimizer_kernel<<<grid_for(b->gpu, n, 256), 256, 0, b->gpu->compute>>>(*step, p, state[0], state[1], g, p16, n, dtype,
                                                                            decay);
    LAUNCH_CHECK();
}

// Host memory for offloaded model states: page-locked (cudaMallocHost: the copy engines read and
// write it directly, and copies from it run asynchronously) or, without pin_memory, plain memory
// (CUDA then stages each copy through its own pinned buffers). Zeroed; counted.
static void *host_mem_alloc(void *ctx, size_t bytes, int pinned) {
    NcclBackend *b = (NcclBackend *)ctx;
    void *p = NULL;
    size_t got = bytes ? bytes : 1;
    if (pinned) {
        cudaError_t e = cudaMallocHost(&p, got);
        if (e != cudaSuccess) {
            fprintf(stderr, "error: rank %d: cudaMallocHost of %.1f MiB of pinned host memory failed (%s); try without "
                            "pin_memory, or a higher --zero-stage\n", b->rank, got / 1048576.0, cudaGetErrorString(e));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memset(p, 0, got);
    } else { // page-aligned, as pinned memory is: zero/store.h reads and writes NVMe with direct I/O into it
        if (posix_memalign(&p, 4096, got) != 0) {
            fprintf(stderr, "error: rank %d: out of host memory allocating %.1f MiB\n", b->rank, got / 1048576.0);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        memset(p, 0, got);
    }
    b->host_allocated += bytes;
    return p;
}
static void host_mem_free(void *ctx, void *p, int pinned) {
    (void)ctx;
    if (pinned) CUDA_CHECK(cudaFreeHost(p));
    else free(p);
}
// A copy on the copy stream after everything the compute stream has been handed so far.
static int copy_begin(NcclBackend *b) {
    int h = -1;
    for (int pass = 0; pass < 2 && h < 0; pass++)
        for (int k = 0; k < MAX_COPIES && h < 0; k++) {
            if (b->copy_busy[k] && pass == 1 && cudaEventQuery(b->copy_done[k]) == cudaSuccess) b->copy_busy[k] = 0;
            if (!b->copy_busy[k]) h = k;
        }
    if (h < 0) {
        fprintf(stderr, "error: rank %d: more than %d host-device copies in flight\n", b->rank, MAX_COPIES);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    b->copy_busy[h] = 1;
    CUDA_CHECK(cudaEventRecord(b->copy_ready, b->gpu->compute));
    CUDA_CHECK(cudaStreamWaitEvent(b->copy_stream, b->copy_ready, 0));
    return h;
}
static int copy_end(NcclBackend *b, int h) {
    CUDA_CHECK(cudaEventRecord(b->copy_done[h], b->copy_stream));
    return h;
}
static int dev_copy_to_host(void *ctx, void *host, const void *src, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = copy_begin(b);
    CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, b->copy_stream));
    return copy_end(b, h);
}
static int dev_copy_to_device(void *ctx, void *dst, const void *host, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    int h = copy_begin(b);
    CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, b->copy_stream));
    return copy_end(b, h);
}
static void dev_host_wait(void *ctx, int h, const char *what) {
    NcclBackend *b = (NcclBackend *)ctx;
    wait_event_watchdog(b, b->copy_done[h], what);
}
static int dev_copy_landed(void *ctx, int h) {
    NcclBackend *b = (NcclBackend *)ctx;
    cudaError_t e = cudaEventQuery(b->copy_done[h]);
    if (e == cudaErrorNotReady) return 0;
    CUDA_CHECK(e);
    return 1;
}
static void dev_device_wait(void *ctx, int h) {
    NcclBackend *b = (NcclBackend *)ctx;
    CUDA_CHECK(cudaStreamWaitEvent(b->gpu->compute, b->copy_done[h], 0));
}

// What zero.h cannot recover from (an NVMe file failing under the job): one line, every rank ends.
static void dev_fatal(void *ctx, const char *msg) {
    NcclBackend *b = (NcclBackend *)ctx;
    fprintf(stderr, "error: rank %d: %s\n", b->rank, msg);
    if (b->comm) ncclCommAbort(b->comm);
    job_abort(MPI_COMM_WORLD, b->nodes, 1);
}

// ZeRO++: hosts, groups (zero/backend.h), quantization on the device (gpu/quant.cuh)
static int nccl_host_size(void *ctx) { return ((NcclBackend *)ctx)->host_size; }
static ncclComm_t nccl_group(NcclBackend *b, int group, int g) {
    if (group == ZB_WORLD) return b->comm;
    char why[160];
    int fresh, color, key, i = zero_group_slot(&b->groups, group, g, b->rank, b->world, &fresh, &color, &key, why, sizeof(why));
    if (i < 0) {
        fprintf(stderr, "error: rank %d: %s\n", b->rank, why);
        job_abort(MPI_COMM_WORLD, b->nodes, 1);
    }
    if (fresh) NCCL_CHECK(ncclCommSplit(b->comm, color, key, &b->group_comm[i], NULL));
    return b->group_comm[i];
}
static int nccl_group_size(NcclBackend *b, int group, int g) {
    return group == ZB_WORLD ? b->world : group == ZB_INNER ? g : b->world / g;
}
static int nccl_group_all_gather(void *ctx, int group, int g, const void *send, void *recv, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    ncclComm_t c = nccl_group(b, group, g);
    int h = comm_begin(b, "all_gather (ZeRO++)");
    NCCL_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, c, b->stream));
    return comm_end(b, h);
}
static int nccl_group_all_to_all(void *ctx, int group, int g, const void *send, void *recv, size_t bytes) {
    NcclBackend *b = (NcclBackend *)ctx;
    ncclComm_t c = nccl_group(b, group, g);
    int n = nccl_group_size(b, group, g), h = comm_begin(b, "all_to_all (ZeRO++)");
    NCCL_CHECK(ncclGroupStart());
    for (int j = 0; j < n; j++) {
        NCCL_CHECK(ncclSend((const char *)send + (size_t)j * bytes, bytes, ncclUint8, j, c, b->stream));
        NCCL_CHECK(ncclRecv((char *)recv + (size_t)j * bytes, bytes, ncclUint8, j, c, b->stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    return comm_end(b, h);
}
static void nccl_free_groups(NcclBackend *b) {
    for (int i = 0; i < b->groups.n; i++) ncclCommDestroy(b->group_comm[i]);
    b->groups.n = 0;
}
static void dev_quantize(void *ctx, void *msg, const void *src, size_t n, int dtype, size_t block, int bits) {
    NcclBackend *b = (NcclBackend *)ctx;
    gq_quantize(b->gpu, b->gpu->compute, msg, src, n, dtype, block, bits);
}
static void dev_dequantize(void *ctx, void *dst, int dtype, const void *msg, size_t n, size_t block, int bits) {
    NcclBackend *b = (NcclBackend *)ctx;
    gq_dequantize(b->gpu, b->gpu->compute, dst, dtype, msg, n, block, bits);
}
static void dev_dequantize_add(void *ctx, float *acc, const void *msg, size_t n, size_t block, int bits) {
    NcclBackend *b = (NcclBackend *)ctx;
    gq_dequantize_add(b->gpu, b->gpu->compute, acc, msg, n, block, bits);
}
static void dev_convert(void *ctx, void *dst, int dst_dtype, const void *src, int src_dtype, size_t n) {
    NcclBackend *b = (NcclBackend *)ctx;
    gq_convert(b->gpu, b->gpu->compute, dst, dst_dtype, src, src_dtype, n);
}

static ZeroBackend nccl_backend(NcclBackend *b) {
    // (C++: every field named, in ZeroBackend's order)
    ZeroBackend be = {.ctx = b, .all_reduce = nccl_all_reduce, .reduce_scatter = nccl_reduce_scatter,
                      .all_gather = nccl_all_gather, .wait = nccl_wait, .set_step = nccl_set_step, .progress = nccl_progress,
                      .sum_doubles = nccl_sum_doubles, .alloc = dev_alloc, .free = dev_free, .zero = dev_zero, .add = dev_add,
                      .to_host = dev_to_host, .from_host = dev_from_host, .update = dev_update, .unified = 0,
                      .host_alloc = host_mem_alloc, .host_free = host_mem_free, .copy_to_host = dev_copy_to_host,
                      .copy_to_device = dev_copy_to_device, .host_wait = dev_host_wait, .device_wait = dev_device_wait,
                      .copy_landed = dev_copy_landed,
                      .fatal = dev_fatal, .host_size = nccl_host_size, .group_all_gather = nccl_group_all_gather,
                      .group_all_to_all = nccl_group_all_to_all, .quantize = dev_quantize, .dequantize = dev_dequantize,
                      .dequantize_add = dev_dequantize_add, .convert = dev_convert,
                      .reduce = NULL, // no per-tensor reduction pass (LAMB): config.h refuses it for this trainer
                      .host_update = NULL, .nvme_sim = NULL}; // (the CPU optimizer engine; NVMe's files)
    return be;
}

#endif // GPU_NCCL_BACKEND_CUH
