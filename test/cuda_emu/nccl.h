// nccl.h, the emulator's (see cuda_runtime.h): NCCL's collectives over MPI, queued on the stream
// they are issued on and run when it gets there. As NCCL's, they are asynchronous to the host:
// when its stream gets there a collective copies what it sends out of device memory and starts
// non-blocking MPI requests into staging buffers of its own; the stream then waits until MPI
// says they are complete (polled by the host's event queries and syncs, which are what moves
// MPI), and the result lands in device memory. So a peer that never joins leaves the
// collective, and every event behind it, not ready; the host's watchdog sees that. NCCL's rules are checked: device buffers,
// counts within them, and in-place only in NCCL's exact layouts (all-reduce: send == recv;
// reduce-scatter: recv == send + rank * count; all-gather: send == recv + rank * count); any
// other overlap is an error. 16-bit sums are computed in fp32 and rounded per pair.
// ZeRO++'s pieces: ncclCommSplit (MPI_Comm_split over a control communicator the host alone uses,
// so no split can interleave with a queued collective), bytes (ncclInt8/ncclUint8) for
// all-gathers, and ncclSend/ncclRecv between ncclGroupStart and ncclGroupEnd, run as one queued
// item (non-blocking MPI sends and receives, complete together) on the group's one stream.
#pragma once
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 // MPI's C API only
#endif
#include <mpi.h>
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include <memory>

typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5, ncclFloat16 = 6,
               ncclHalf = 6, ncclFloat32 = 7, ncclFloat = 7, ncclFloat64 = 8, ncclDouble = 8, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct EmuNcclComm { MPI_Comm comm, ctl; int rank, nranks; };
typedef struct { int emulated; } ncclConfig_t;
typedef EmuNcclComm *ncclComm_t;

static inline const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }
static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) { memset(id, 0x42, sizeof(*id)); return ncclSuccess; }
static inline ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    int wr, ws;
    MPI_Comm_rank(MPI_COMM_WORLD, &wr);
    MPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (wr != rank || ws != nranks) emu_fatal("ncclCommInitRank(%d of %d) in MPI rank %d of %d", rank, nranks, wr, ws);
    *c = new EmuNcclComm{MPI_COMM_NULL, MPI_COMM_NULL, rank, nranks};
    MPI_Comm_dup(MPI_COMM_WORLD, &(*c)->comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &(*c)->ctl);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *config) {
    (void)config;
    MPI_Comm sub;
    MPI_Comm_split(c->ctl, color, key, &sub);
    int r, n;
    MPI_Comm_rank(sub, &r);
    MPI_Comm_size(sub, &n);
    *out = new EmuNcclComm{sub, MPI_COMM_NULL, r, n};
    MPI_Comm_dup(sub, &(*out)->ctl);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    emu_drain_all("ncclCommDestroy");
    MPI_Comm_free(&c->comm);
    MPI_Comm_free(&c->ctl);
    delete c;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t c) { (void)c; return ncclSuccess; }
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) { (void)c; *r = ncclSuccess; return ncclSuccess; }

static inline void emu_sum_bf16(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    __nv_bfloat16 *a = (__nv_bfloat16 *)in, *b = (__nv_bfloat16 *)inout;
    for (int i = 0; i < *len; i++) b[i] = __float2bfloat16_rn(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}
static inline void emu_sum_fp16(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)t;
    __half *a = (__half *)in, *b = (__half *)inout;
    for (int i = 0; i < *len; i++) b[i] = __float2half_rn(__half2float(a[i]) + __half2float(b[i]));
}
static inline size_t emu_nccl_size(ncclDataType_t t) {
    switch (t) {
    case ncclFloat: return 4;
    case ncclDouble: return 8;
    case ncclBfloat16: case ncclHalf: return 2;
    case ncclInt8: case ncclUint8: return 1;
    default: emu_fatal("NCCL data type %d is not emulated", (int)t);
    }
}
static inline MPI_Datatype emu_nccl_mpi_type(ncclDataType_t t) {
    return t == ncclFloat ? MPI_FLOAT : t == ncclDouble ? MPI_DOUBLE : t == ncclInt8 || t == ncclUint8 ? MPI_BYTE : MPI_UINT16_T;
}
static inline MPI_Op emu_nccl_op(ncclDataType_t t, ncclRedOp_t op) {
    static MPI_Op bf16 = MPI_OP_NULL, fp16 = MPI_OP_NULL;
    if (op != ncclSum) emu_fatal("NCCL reduction %d is not emulated", (int)op);
    if (t == ncclInt8 || t == ncclUint8) emu_fatal("NCCL sums of bytes are not emulated");
    if (t == ncclBfloat16) { if (bf16 == MPI_OP_NULL) MPI_Op_create(emu_sum_bf16, 1, &bf16); return bf16; }
    if (t == ncclHalf) { if (fp16 == MPI_OP_NULL) MPI_Op_create(emu_sum_fp16, 1, &fp16); return fp16; }
    return MPI_SUM;
}
static inline int count_too_big(size_t bytes) { return bytes / 2 > 2147483647u; }
static inline int emu_overlap(const void *a, size_t an, const void *b, size_t bn) {
    return (const char *)a < (const char *)b + bn && (const char *)b < (const char *)a + an;
}
static inline void emu_nccl_check(const char *fn, const void *send, size_t send_bytes, const void *recv, size_t recv_bytes, int in_place) {
    if (count_too_big(send_bytes) || count_too_big(recv_bytes)) emu_fatal("%s: counts beyond INT_MAX are not emulated", fn);
    if (send_bytes) emu_check_range(send, send_bytes, 1, fn, "send buffer");
    if (recv_bytes) emu_check_range(recv, recv_bytes, 1, fn, "receive buffer");
    if (!in_place && emu_overlap(send, send_bytes, recv, recv_bytes))
        emu_fatal("%s: send and receive buffers overlap without being NCCL's in-place layout", fn);
}
// A collective queued on stream s: post (run when the stream gets there, the device open) fills
// the staging buffers and starts the requests; once MPI has completed them all, each buffer that
// has a landing place (receives) is copied there.
struct EmuNet {
    std::vector<std::vector<char>> buf;
    std::vector<void *> land; // buf[k]'s destination in device memory, NULL: none (what is sent)
    std::vector<MPI_Request> req;
    int add(const void *from, size_t bytes, void *to) { // staging: a copy of `from`, or zeros
        buf.emplace_back(bytes);
        if (from) memcpy(buf.back().data(), from, bytes);
        land.push_back(to);
        return (int)buf.size() - 1;
    }
    MPI_Request *next() { req.push_back(MPI_REQUEST_NULL); return &req.back(); }
};
static inline void emu_net(cudaStream_t s, std::function<void(EmuNet &)> post) {
    emu_enqueue_net(s, [post] {
        auto net = std::make_shared<EmuNet>();
        net->req.reserve(64);
        post(*net);
        return std::function<bool()>([net] {
            int done = 0;
            MPI_Testall((int)net->req.size(), net->req.data(), &done, MPI_STATUSES_IGNORE);
            if (!done) return false;
            emu_device_open();
            for (size_t k = 0; k < net->buf.size(); k++)
                if (net->land[k]) memcpy(net->land[k], net->buf[k].data(), net->buf[k].size());
            emu_device_close();
            return true;
        });
    });
}
static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                  cudaStream_t s) {
    size_t bytes = count * emu_nccl_size(t);
    emu_nccl_check("ncclAllReduce", send, bytes, recv, bytes, send == recv);
    MPI_Op mop = emu_nccl_op(t, op);
    MPI_Datatype mt = emu_nccl_mpi_type(t);
    emu_net(s, [=](EmuNet &net) {
        int a = net.add(send, bytes, NULL), b = net.add(NULL, bytes, recv);
        MPI_Iallreduce(net.buf[a].data(), net.buf[b].data(), (int)count, mt, mop, c->comm, net.next());
    });
    return ncclSuccess;
}
static inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                      cudaStream_t s) {
    size_t esz = emu_nccl_size(t), bytes = count * esz;
    int in_place = (const char *)recv == (const char *)send + (size_t)c->rank * bytes;
    emu_nccl_check("ncclReduceScatter", send, bytes * c->nranks, recv, bytes, in_place);
    MPI_Op mop = emu_nccl_op(t, op);
    MPI_Datatype mt = emu_nccl_mpi_type(t);
    int n = c->nranks;
    emu_net(s, [=](EmuNet &net) { // (from a copy: MPI's in-place layout is not NCCL's)
        int a = net.add(send, bytes * n, NULL), b = net.add(NULL, bytes, recv);
        MPI_Ireduce_scatter_block(net.buf[a].data(), net.buf[b].data(), (int)count, mt, mop, c->comm, net.next());
    });
    return ncclSuccess;
}
static inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    size_t bytes = count * emu_nccl_size(t);
    int in_place = (const char *)send == (const char *)recv + (size_t)c->rank * bytes;
    emu_nccl_check("ncclAllGather", send, bytes, recv, bytes * c->nranks, in_place);
    MPI_Datatype mt = emu_nccl_mpi_type(t);
    emu_net(s, [=](EmuNet &net) { // (in place too: the send buffer is copied first)
        int a = net.add(send, bytes, NULL), b = net.add(NULL, bytes * c->nranks, recv);
        MPI_Iallgather(net.buf[a].data(), (int)count, mt, net.buf[b].data(), (int)count, mt, c->comm, net.next());
    });
    return ncclSuccess;
}

// Point-to-point, grouped: every ncclSend / ncclRecv between ncclGroupStart and ncclGroupEnd is
// collected and queued as one item (outside a group, each is a group of its own).
struct EmuP2p { int send; void *buf; size_t bytes; int peer; ncclComm_t comm; cudaStream_t stream; };
static inline std::vector<EmuP2p> &emu_p2p_ops() { static thread_local std::vector<EmuP2p> ops; return ops; }
static inline int &emu_group_depth() { static thread_local int depth = 0; return depth; }
static inline ncclResult_t ncclGroupStart() { emu_group_depth()++; return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd() {
    if (emu_group_depth() == 0) emu_fatal("ncclGroupEnd without ncclGroupStart");
    if (--emu_group_depth()) return ncclSuccess;
    std::vector<EmuP2p> ops;
    ops.swap(emu_p2p_ops());
    if (ops.empty()) return ncclSuccess;
    for (const EmuP2p &o : ops)
        if (o.stream != ops[0].stream) emu_fatal("ncclGroupEnd: sends and receives on several streams are not emulated");
    emu_net(ops[0].stream, [ops](EmuNet &net) {
        net.req.reserve(ops.size());
        for (const EmuP2p &o : ops) {
            int k = net.add(o.send ? o.buf : NULL, o.bytes, o.send ? NULL : o.buf);
            if (o.send) MPI_Isend(net.buf[k].data(), (int)o.bytes, MPI_BYTE, o.peer, 77, o.comm->comm, net.next());
            else MPI_Irecv(net.buf[k].data(), (int)o.bytes, MPI_BYTE, o.peer, 77, o.comm->comm, net.next());
        }
    });
    return ncclSuccess;
}
static inline ncclResult_t emu_p2p(int send, const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                                   cudaStream_t s) {
    const char *fn = send ? "ncclSend" : "ncclRecv";
    size_t bytes = count * emu_nccl_size(t);
    if (count_too_big(bytes)) emu_fatal("%s: counts beyond INT_MAX are not emulated", fn);
    if (peer < 0 || peer >= c->nranks) emu_fatal("%s: peer %d of a communicator of %d", fn, peer, c->nranks);
    if (bytes) emu_check_range(buf, bytes, 1, fn, send ? "send buffer" : "receive buffer");
    ncclGroupStart();
    emu_p2p_ops().push_back(EmuP2p{send, (void *)buf, bytes, peer, c, s});
    return ncclGroupEnd();
}
static inline ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return emu_p2p(1, buf, count, t, peer, c, s);
}
static inline ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
    return emu_p2p(0, buf, count, t, peer, c, s);
}
