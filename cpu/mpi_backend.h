// cpu/mpi_backend.h: the ZeroBackend of the CPU trainer: MPI's non-blocking collectives (16-bit
// elements summed by our own MPI operations), the watchdog, and its compute memory (the host's:
// a unified backend) with the optimizer's update. It performs what zero.h hands it and decides
// nothing. ZeRO++'s part: which ranks share a host (MPI's shared-memory split, or ZERO_HOST_ID
// per rank, for tests posing as several hosts: mpi_find_hosts), communicators for its groups,
// byte all-gathers and all-to-alls, and core/quant.h's format on the host.
#ifndef CPU_MPI_BACKEND_H
#define CPU_MPI_BACKEND_H

#include <malloc.h>
#include <mpi.h>
#include "core/optimizer_engine.h"
#include "core/quant.h"
#include "zero.h"
#include "run/job.h"
#include "cpu/memory.h"
#include "cpu/openblas.h"
#include "run/verdict.h"

// ----------------------------------------------------------------------------------------
// Communication: the MPI backend that zero.h drives. It performs collectives, nothing more.

#define MAX_PENDING (GPT2_MAX_UNITS + 8)
typedef struct {
    MPI_Comm comm;
    int rank, world, step;
    int nodes;                      // hosts the job spans (job.h: how a job across hosts ends)
    double timeout;                 // --comm-timeout: seconds before the watchdog aborts
    struct Hang *hang;              // the run's recorder and side channel: the watchdog's verdict (NULL: none)
    MPI_Request req[MAX_PENDING];
    int busy[MAX_PENDING];
    char *move_from[MAX_PENDING], *move_to[MAX_PENDING]; // MPI's in-place reduce-scatter
    size_t move_bytes[MAX_PENDING];                      // leaves the result at the top
    double done_at[MAX_PENDING];   // when a test first found the collective complete (trace_now), 0 before
    MPI_Op sum16[3];                                     // sums of bf16 / fp16 elements
    // ZeRO++: ranks per host (mpi_find_hosts; 0: hosts not uniform and consecutive), and the
    // communicators of its groups, made the first time each is used (every rank uses them in
    // the same order: zero.h's schedule is the same on all)
    int host_size;
    ZeroGroups groups;
    MPI_Comm group_comm[ZB_MAX_GROUPS];
} MpiBackend;

// MPI has no 16-bit float types: 16-bit elements travel as MPI_UINT16_T and are summed by
// these operations, each pair of elements in fp32 and rounded back (mixed_precision.h's
// zc_add_array; the reduction order is MPI's, as the ring's is NCCL's).
static void mpi_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    zc_add_array(inout, in, (size_t)*len, ZC_BF16);
}
static void mpi_sum_fp16(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    zc_add_array(inout, in, (size_t)*len, ZC_FP16);
}
static MPI_Datatype mpi_type(int dtype) { return dtype == ZC_F32 ? MPI_FLOAT : MPI_UINT16_T; }
static MPI_Op mpi_sum(MpiBackend *b, int dtype) { return dtype == ZC_F32 ? MPI_SUM : b->sum16[dtype]; }

static int mpi_slot(MpiBackend *b) {
    for (int h = 0; h < MAX_PENDING; h++)
        if (!b->busy[h]) { b->busy[h] = 1; b->move_bytes[h] = 0; b->done_at[h] = 0.0; return h; }
    fprintf(stderr, "error: rank %d: more than %d collectives in flight\n", b->rank, MAX_PENDING);
    MPI_Abort(b->comm, 1);
    return -1;
}
static int mpi_all_reduce(void *ctx, void *buf, size_t n, int dtype) {
    MpiBackend *b = (MpiBackend *)ctx;
    int h = mpi_slot(b);
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(dtype), mpi_sum(b, dtype), b->comm, &b->req[h]);
    return h;
}
static int mpi_reduce_scatter(void *ctx, void *send, void *recv, size_t n, int dtype) {
    MpiBackend *b = (MpiBackend *)ctx;
    int h = mpi_slot(b);
    size_t bytes = n * zc_dtype_size(dtype);
    if ((char *)recv == (char *)send + (size_t)b->rank * bytes) {
        MPI_Ireduce_scatter_block(MPI_IN_PLACE, send, (int)n, mpi_type(dtype), mpi_sum(b, dtype), b->comm, &b->req[h]);
        b->move_from[h] = (char *)send; b->move_to[h] = (char *)recv; b->move_bytes[h] = bytes;
    } else {
        MPI_Ireduce_scatter_block(send, recv, (int)n, mpi_type(dtype), mpi_sum(b, dtype), b->comm, &b->req[h]);
    }
    return h;
}
static int mpi_all_gather(void *ctx, const void *send, void *recv, size_t n, int dtype) {
    MpiBackend *b = (MpiBackend *)ctx;
    int h = mpi_slot(b);
    if ((const char *)send == (char *)recv + (size_t)b->rank * n * zc_dtype_size(dtype))
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)n, mpi_type(dtype), b->comm, &b->req[h]);
    else
        MPI_Iallgather(send, (int)n, mpi_type(dtype), recv, (int)n, mpi_type(dtype), b->comm, &b->req[h]);
    return h;
}
// Waits by polling, so that a collective that never completes (a peer stuck or gone) ends
// the job with a message instead of a silent hang. Polling sleeps a little between tests so
// that ranks sharing cores leave them to those still computing.
static void mpi_wait_request(MpiBackend *b, MPI_Request *req, const char *what) {
    double start = MPI_Wtime();
    for (int spins = 0;; spins++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        double waited = MPI_Wtime() - start;
        if (waited > b->timeout) {
            fprintf(stderr, "error: rank %d: %s did not complete within %g s at step %d; "
                            "a peer is stuck or gone (--comm-timeout); aborting the job\n",
                    b->rank, what, b->timeout, b->step);
            hang_verdict(b->hang, what, waited, b->timeout);
            job_abort(b->comm, b->nodes, 3);
        }
        if (spins > 100) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); }
    }
}
// Returns when the collective completed: the first test that found it done (here, or in a
// progress poke before), the moment MPI had moved its data.
static double mpi_wait(void *ctx, int h, const char *what) {
    MpiBackend *b = (MpiBackend *)ctx;
    mpi_wait_request(b, &b->req[h], what);
    if (b->move_bytes[h] && b->move_to[h] != b->move_from[h])
        memmove(b->move_to[h], b->move_from[h], b->move_bytes[h]);
    if (b->done_at[h] == 0.0) b->done_at[h] = trace_now();
    b->busy[h] = 0;
    return b->done_at[h];
}
static void mpi_progress(void *ctx) {
    MpiBackend *b = (MpiBackend *)ctx;
    for (int h = 0; h < MAX_PENDING; h++) {
        int done = 0; // a completed request becomes MPI_REQUEST_NULL; mpi_wait then returns at once
        if (b->busy[h] && b->done_at[h] == 0.0) MPI_Test(&b->req[h], &done, MPI_STATUS_IGNORE);
        if (done) b->done_at[h] = trace_now();
    }
}
static void mpi_sum_doubles(void *ctx, double *x, int n) {
    MpiBackend *b = (MpiBackend *)ctx;
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, b->comm, &req);
    mpi_wait_request(b, &req, "all_reduce of scalars (loss, norm, reports)");
}
static void mpi_set_step(void *ctx, int step) { ((MpiBackend *)ctx)->step = step; }

// ----------------------------------------------------------------------------------------
// ZeRO++: hosts, groups, all-to-all and byte all-gathers (zero/backend.h)

// Which host each rank is on: ZERO_HOST_ID (an integer, set per rank: mpirun's MPMD form
// `mpirun -np 2 -x ZERO_HOST_ID=0 prog : -np 2 -x ZERO_HOST_ID=1 prog`) when every rank has it, so
// tests can pose as several hosts on one; else the ranks that share memory (MPI_COMM_TYPE_SHARED:
// OpenMPI's nodes, told apart by hostname, as test_multihost's namespaces are). host_size is the
// ranks per host when every host has as many and consecutive ranks fill each, else 0. Collective.
static void mpi_find_hosts(MpiBackend *b) { b->host_size = job_host_size(b->comm); } // run/job.h: the rule, shared with the GPU trainer
static int mpi_host_size(void *ctx) { return ((MpiBackend *)ctx)->host_size; }

static MPI_Comm mpi_group(MpiBackend *b, int group, int g) {
    if (group == ZB_WORLD) return b->comm;
    char why[160];
    int fresh, color, key, i = zero_group_slot(&b->groups, group, g, b->rank, b->world, &fresh, &color, &key, why, sizeof(why));
    if (i < 0) {
        fprintf(stderr, "error: rank %d: %s\n", b->rank, why);
        job_abort(b->comm, b->nodes, 1);
    }
    if (fresh) MPI_Comm_split(b->comm, color, key, &b->group_comm[i]);
    return b->group_comm[i];
}
static int mpi_group_all_gather(void *ctx, int group, int g, const void *send, void *recv, size_t bytes) {
    MpiBackend *b = (MpiBackend *)ctx;
    MPI_Comm c = mpi_group(b, group, g);
    int h = mpi_slot(b);
    MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c, &b->req[h]);
    return h;
}
static int mpi_group_all_to_all(void *ctx, int group, int g, const void *send, void *recv, size_t bytes) {
    MpiBackend *b = (MpiBackend *)ctx;
    MPI_Comm c = mpi_group(b, group, g);
    int h = mpi_slot(b);
    MPI_Ialltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c, &b->req[h]);
    return h;
}
static void mpi_free_groups(MpiBackend *b) {
    for (int i = 0; i < b->groups.n; i++) MPI_Comm_free(&b->group_comm[i]);
    b->groups.n = 0;
}
// ----------------------------------------------------------------------------------------
// Compute memory: ZeroBackend's alloc, free, zero, add, to_host, from_host and update. The CPU
// computes in the host's memory, so these are plain host memory, and to_host / from_host convert
// between the storage type and fp32 in place of a copy.

static void *compute_alloc(void *ctx, size_t bytes) { (void)ctx; return xcalloc_bytes(bytes); }
static void compute_free(void *ctx, void *p) { (void)ctx; free(p); }
static void compute_zero(void *ctx, void *p, size_t bytes) { (void)ctx; zero_bytes(p, bytes); }

static void compute_add(void *ctx, void *dst, const void *src, size_t n, int dtype) {
    (void)ctx;
    zc_add_array(dst, src, n, dtype);
}
static void compute_to_host(void *ctx, float *host, const void *src, size_t n, int dtype) { (void)ctx; zc_widen(host, src, n, dtype); }
static void compute_from_host(void *ctx, void *dst, const float *host, size_t n, int dtype) { (void)ctx; zc_narrow(dst, host, n, dtype); }

// ZeRO++'s quantization (core/quant.h) where the CPU computes: in place of a device's kernels.
static void compute_quantize(void *ctx, void *msg, const void *src, size_t n, int dtype, size_t block, int bits) {
    (void)ctx;
    zq_quantize(msg, src, n, dtype, block, bits);
}
static void compute_dequantize(void *ctx, void *dst, int dtype, const void *msg, size_t n, size_t block, int bits) {
    (void)ctx;
    zq_dequantize(dst, dtype, msg, n, block, bits);
}
static void compute_dequantize_add(void *ctx, float *acc, const void *msg, size_t n, size_t block, int bits) {
    (void)ctx;
    zq_dequantize_add(acc, msg, n, block, bits);
}
static void compute_convert(void *ctx, void *dst, int dst_dtype, const void *src, int src_dtype, size_t n) {
    (void)ctx;
    if (dst_dtype == src_dtype) memcpy(dst, src, n * zc_dtype_size(src_dtype));
    else if (dst_dtype == ZC_F32) zc_widen((float *)dst, src, n, src_dtype);
    else if (src_dtype == ZC_F32) zc_narrow(dst, (const float *)src, n, dst_dtype);
    else for (size_t i = 0; i < n; i++) zc_store(dst, i, zc_load(src, i, src_dtype), dst_dtype);
}

// The optimizer over one run of elements of one kind (zero.h walks the runs this rank owns):
// the CPU optimizer engine (core/optimizer_engine.h) on the arrays where they are.
static void compute_update(void *ctx, const OptStep *step, float *p, float *const *state, const void *g, void *p16, size_t n,
                        int dtype, int decay) {
    (void)ctx;
    optimizer_update_host(step, p, state, g, p16, n, dtype, decay);
}
// An optimizer's per-tensor reduction pass over one run (LAMB's norms): the same engine.
static void compute_reduce(void *ctx, const OptStep *step, const float *p, float *const *state, const void *g, size_t n,
                           int dtype, int decay, size_t phase, double *acc) {
    (void)ctx;
    optimizer_reduce_host(step, p, state, g, n, dtype, decay, phase, acc);
}

// What zero.h cannot recover from (an NVMe file failing under the job): one line, every rank ends.
static void mpi_fatal(void *ctx, const char *msg) {
    MpiBackend *b = (MpiBackend *)ctx;
    fprintf(stderr, "error: rank %d: %s\n", b->rank, msg);
    job_abort(b->comm, b->nodes, 1);
}

// Called before MPI_Init. OpenMPI's collectives on our 16-bit sums (libnbc's non-blocking ring
// with a user MPI_Op) malloc a temporary buffer as large as the message at every call and free it
// when done. glibc serves blocks over its mmap threshold (adaptive, at most 32 MB: wte's 77 MB
// bf16 gradient always) with a fresh mmap and unmaps them on free, so each step faulted in and
// zeroed ~250 MB of new pages per rank again; on this project's paravirtualised VM, where a page
// fault costs a hypercall, that and the copy into the cold pages took ~40% of a two-rank step
// (perf: ompi_datatype_sndrcv's memmove and exc_page_fault; d12 bf16 stage 0, 1 thread per
// rank: 995-1147 ms a step, against 594-659 ms with the heap kept). So every block comes from
// the heap (no mmap) and the heap is never trimmed: a freed buffer is reused by the next
// collective's. The trainer's own buffers are allocated once; what this keeps is OpenMPI's.
static void mpi_keep_heap(void) {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1); // (mallopt(3): -1 disables trimming)
}

// Called first, before anything else of the program runs, with main's argv. Those temporaries
// (above) then live in the heap, on 4 KB pages: where the kernel gives transparent huge pages
// only on request (THP "madvise", this project's VM), glibc asks for them for its heap only when
// told to at start-up (the tunable glibc.malloc.hugetlb=1), so a rank of a job of two or more
// runs itself again with that added to GLIBC_TUNABLES (cpu_exec_self, cpu/openblas.h). Two single-threaded ranks (d12 bf16, ZeRO-2) took 640 ms a
// step on 4 KB pages and 450 ms on huge ones: the reduce's sums and the copies between the
// processes walk the temporaries page by page, and on this paravirtualised VM each TLB miss is a
// two-level page walk. One rank has no such temporaries and is left as it is (the same step;
// peak RSS 2.78 against 2.81 GB with the tunable). Nothing is done where GLIBC_TUNABLES already
// names the tunable, the kernel's THP setting is not "madvise", or the job size is not in the
// environment (OpenMPI's OMPI_COMM_WORLD_SIZE, else PMI_SIZE); a failed execv carries on.
static void mpi_heap_huge_pages(char **argv) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE");
    if (!size) size = getenv("PMI_SIZE");
    const char *tun = getenv("GLIBC_TUNABLES");
    if (!size || atoi(size) < 2 || (tun && (strstr(tun, "glibc.malloc.hugetlb") || strlen(tun) > 900))) return;
    char mode[256] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return;
    size_t n = fread(mode, 1, sizeof mode - 1, f);
    fclose(f);
    mode[n] = 0;
    if (!strstr(mode, "[madvise]")) return;
    char val[1024];
    snprintf(val, sizeof val, "%s%sglibc.malloc.hugetlb=1", tun ? tun : "", tun && *tun ? ":" : "");
    setenv("GLIBC_TUNABLES", val, 1);
    cpu_exec_self(argv); // returns only on failure
}
// Rank 0's line on it, for a job of two or more ranks that runs with it
static void mpi_heap_report(int rank, int world) {
    const char *tun = getenv("GLIBC_TUNABLES");
    if (rank == 0 && world > 1 && tun && strstr(tun, "glibc.malloc.hugetlb=1"))
        printf("heap: transparent huge pages for MPI's temporaries (GLIBC_TUNABLES=%s)\n", tun);
}

// MPI's errors (a message truncated because the ranks started different collectives, a peer's
// connection lost) end the job as the watchdog does, with the verdict (run/verdict.h) first.
// OpenMPI reports a failed non-blocking collective on MPI_COMM_WORLD whatever its communicator,
// so the handler is world's, and finds the backend in the one piece of global state here: an
// error handler has nowhere else to look (MPI passes it the communicator and the code only).
static MpiBackend *mpi_errors_backend;
static void mpi_on_error(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(*code, msg, &len);
    MpiBackend *b = mpi_errors_backend;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "error: rank %d: MPI failed at step %d: %s; aborting the job\n", rank, b ? b->step : 0, msg);
    if (b) hang_verdict_error(b->hang, msg);
    job_abort(MPI_COMM_WORLD, b ? b->nodes : 1, 3);
}
static void mpi_handle_errors(MpiBackend *b) {
    MPI_Errhandler eh;
    mpi_errors_backend = b;
    MPI_Comm_create_errhandler(mpi_on_error, &eh);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh);
    MPI_Errhandler_free(&eh);
}

// The backend zero.h drives. It is unified: the memory the kernels compute in is the host's, so
// the slots for memory beside it (host_alloc, host_free and the asynchronous copies between host
// and device) stay NULL, and zero.h never calls them here: on a unified backend it places what an
// offload to the host would move in compute memory (zero_placement), and reads NVMe files
// straight into compute memory.
static ZeroBackend mpi_backend(MpiBackend *b) {
    ZeroBackend be = {.ctx = b, .all_reduce = mpi_all_reduce, .reduce_scatter = mpi_reduce_scatter,
                      .all_gather = mpi_all_gather, .wait = mpi_wait, .set_step = mpi_set_step, .progress = mpi_progress,
                      .sum_doubles = mpi_sum_doubles, .alloc = compute_alloc, .free = compute_free, .zero = compute_zero,
                      .add = compute_add, .to_host = compute_to_host, .from_host = compute_from_host,
                      .update = compute_update,
                      .unified = 1, // (above: no host slots, they stay NULL)
                      .fatal = mpi_fatal, .host_size = mpi_host_size, .group_all_gather = mpi_group_all_gather,
                      .group_all_to_all = mpi_group_all_to_all, .quantize = compute_quantize,
                      .dequantize = compute_dequantize, .dequantize_add = compute_dequantize_add,
                      .convert = compute_convert, .reduce = compute_reduce};
    return be;
}

#endif // CPU_MPI_BACKEND_H
