// zero/pp.h: ZeRO++'s collectives (Wang et al. 2023, arXiv 2306.10209) for zero.h's schedule:
// the quantized parameter all-gather (qwZ), hpZ's secondary shard and its gather inside a host,
// and qgZ's hierarchical all-to-all reduction of quantized gradients. zero.h decides when; this
// header says how, over the backend's groups and quantization (zero/backend.h), on buffers zero.h
// allocates with the sizes given here.
//
// Contract
//   Ranks: N = world, L = ranks per host (consecutive ranks fill a host), H = N / L hosts; rank
//   r = h L + l. A unit of `pad` elements has slices of s = pad / N; rank r owns slice r.
//   qwZ (stage 3, int8, block B). A rank quantizes its own slice (core/quant.h: one fp32 scale per
//     B elements, the scales sent with the codes), the ranks all-gather the messages (each
//     zq_bytes(s, B, 8) bytes), and every slice but its own is dequantized into the gather buffer
//     on arrival; its own is copied exact. Error: each element within half a quantization step
//     of its block (quant.h's bound).
//   hpZ (stage 3, group G dividing L). The secondary shard: the parameters partitioned over the G
//     ranks r - r % G .. (a host's), pad / G elements of each unit at unit_offset / G, in the
//     element type (2 Psi / G bytes per rank in 16 bits). It is copied out of the forward's
//     all-gather (whatever that delivered: exact, or qwZ's dequantized values), and a re-gather of
//     the unit within the same forward (the backward's, a recompute's) all-gathers it inside the
//     group instead of across the world: the same values, so hpZ alone is bit-identical to ZeRO-3.
//   qgZ (stages 2, 3; int4 or int8, block B). Replaces the gradient reduce-scatter. Level 1 (when
//     L > 1): for each local peer j, the H slices h' L + j (each quantized on its own, H messages
//     of zq_bytes(s, B, bits)) go to peer j in one all-to-all inside the host; each rank sums the L
//     received versions of its H slices in fp32 (in peer order: the same bits on every rank).
//     With L = 1 the slices are widened to fp32 exact. Level 2 (when H > 1): the H fp32 sums are
//     quantized again and exchanged by an all-to-all across hosts among the ranks of local index
//     l; each rank sums the H received versions of its own slice r in fp32 (in host order). The
//     sum is rounded once to the element type into the receive slice zero.h adds to the shard.
//     zero.h starts level 2 when it finishes the unit's reduction and waits for it there, numbered
//     in the flight recorder (core/flight.h) as the unit's reduce_scatter, so a hang in it is named.
//     Bytes a rank sends: level 1 (L - 1) H q(s), inside the host; level 2 (H - 1) q(s), across
//     hosts, where q(s) = zq_bytes(s, B, bits) ~ s bits / 8: int4 sends a quarter of a 16-bit
//     reduce-scatter's bytes across hosts.
//   Error of qgZ: level 1 adds at most sum over peers of half a step of each peer's block; level 2
//     half a step of the partial sums' blocks; then one rounding to the element type.
//   Buffers (zpp_*_bytes): per gather buffer, qwZ's own message and the N received; per reduce
//     receive slot, qgZ's level-1 send and receive; shared by the slots (level 2 runs inside the
//     finish, one unit at a time), the fp32 sums and level 2's send and receive.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_PP_H
#define ZERO_PP_H

#include <stddef.h>
#include "core/quant.h"
#include "mixed_precision.h"
#include "zero/backend.h"

typedef struct {
    int qwz, hpz, qgz;          // qwZ on; hpZ's group (1: off); qgZ's bits (0: off)
    int rank, world, per_host;  // L = per_host (world when unknown: one host)
    int dtype;
    size_t esize, block;
} ZeroPPShape;

static inline size_t zpp_round8(size_t b) { return (b + 7) / 8 * 8; }
// qwZ: one slice's message, and a gather buffer's messages (its own and the world's)
static inline size_t zpp_qw_msg(const ZeroPPShape *p, size_t s) { return zpp_round8(zq_bytes(s, p->block, 8)); }
static inline size_t zpp_qw_bytes(const ZeroPPShape *p, size_t s) { return p->qwz ? (size_t)(p->world + 1) * zpp_qw_msg(p, s) : 0; }
// qgZ: one slice's message; level 1's send and receive for a slot (L messages of H slices each)
static inline size_t zpp_qg_msg(const ZeroPPShape *p, size_t s) { return zpp_round8(zq_bytes(s, p->block, p->qgz)); }
static inline size_t zpp_qg_slot_bytes(const ZeroPPShape *p, size_t s) {
    int L = p->per_host, H = p->world / L;
    return p->qgz && L > 1 ? 2 * (size_t)L * H * zpp_qg_msg(p, s) : 0;
}
// ... and the shared part: fp32 sums of H slices and of one, then level 2's send and receive
static inline size_t zpp_qg_sums_bytes(const ZeroPPShape *p, size_t s) {
    return p->qgz ? zpp_round8(((size_t)(p->world / p->per_host) + 1) * s * sizeof(float)) : 0;
}
static inline size_t zpp_qg_shared_bytes(const ZeroPPShape *p, size_t s) {
    int H = p->world / p->per_host;
    return zpp_qg_sums_bytes(p, s) + (p->qgz && H > 1 ? 2 * (size_t)H * zpp_qg_msg(p, s) : 0);
}

// ---- qwZ -------------------------------------------------------------------------------

// Start unit's quantized all-gather: own (s elements, exact) into gather + rank s, and the
// messages. buf: zpp_qw_bytes(s): [own message | N received].
static inline int zpp_qw_start(const ZeroPPShape *p, const ZeroBackend *be, const void *own, void *gather, size_t s,
                               void *buf) {
    size_t m = zpp_qw_msg(p, s);
    be->convert(be->ctx, (char *)gather + (size_t)p->rank * s * p->esize, p->dtype, own, p->dtype, s);
    be->quantize(be->ctx, buf, own, s, p->dtype, p->block, 8);
    return be->group_all_gather(be->ctx, ZB_WORLD, 1, buf, (char *)buf + m, m);
}
// It landed: every other rank's slice dequantized into the gather buffer.
static inline void zpp_qw_land(const ZeroPPShape *p, const ZeroBackend *be, void *gather, size_t s, const void *buf) {
    size_t m = zpp_qw_msg(p, s);
    for (int q = 0; q < p->world; q++)
        if (q != p->rank)
            be->dequantize(be->ctx, (char *)gather + (size_t)q * s * p->esize, p->dtype, (const char *)buf + (size_t)(q + 1) * m,
                           s, p->block, 8);
}

// ---- hpZ -------------------------------------------------------------------------------

// The unit's part of the secondary shard (pad / G elements at `second`) from its gathered whole.
static inline void zpp_hp_keep(const ZeroPPShape *p, const ZeroBackend *be, void *second, const void *gather, size_t pad) {
    size_t part = pad / (size_t)p->hpz;
    be->convert(be->ctx, second, p->dtype, (const char *)gather + (size_t)(p->rank % p->hpz) * part * p->esize, p->dtype,
                part);
}
// The re-gather inside the group: the G parts into the gather buffer.
static inline int zpp_hp_gather(const ZeroPPShape *p, const ZeroBackend *be, const void *second, void *gather, size_t pad) {
    size_t part = pad / (size_t)p->hpz;
    return be->group_all_gather(be->ctx, ZB_INNER, p->hpz, second, gather, part * p->esize);
}

// ---- qgZ -------------------------------------------------------------------------------

// Start the reduction of a bucket (N s elements): level 1's all-to-all inside the host (returns
// its handle); with L = 1 nothing (-1): the finish widens the bucket, which stays untouched until then.
static inline int zpp_qg_start(const ZeroPPShape *p, const ZeroBackend *be, const void *bucket, size_t s, void *slot) {
    int L = p->per_host, H = p->world / L;
    if (L == 1) return -1;
    size_t m = zpp_qg_msg(p, s);
    char *send = (char *)slot;
    for (int j = 0; j < L; j++)
        for (int h = 0; h < H; h++)
            be->quantize(be->ctx, send + ((size_t)j * H + h) * m, (const char *)bucket + ((size_t)h * L + j) * s * p->esize,
                         s, p->dtype, p->block, p->qgz);
    return be->group_all_to_all(be->ctx, ZB_INNER, L, send, send + (size_t)L * H * m, (size_t)H * m);
}
// After level 1 landed: sum it. With one host, round the sum into out (s elements of the element
// type) and return -1: done. Else quantize the H partial sums and, when `go` (zero.h's flight
// recorder let it start), start level 2's all-to-all across hosts and return its handle (-1 when
// not started); zpp_qg_land finishes once it has landed.
static inline int zpp_qg_level2(const ZeroPPShape *p, const ZeroBackend *be, const void *bucket, size_t s, const void *slot,
                                float *sums, void *shared2, void *out, int go) {
    int L = p->per_host, H = p->world / L;
    size_t m = zpp_qg_msg(p, s);
    if (L == 1) be->convert(be->ctx, sums, ZC_F32, bucket, p->dtype, (size_t)H * s); // slice h' is rank h''s
    else {
        const char *recv = (const char *)slot + (size_t)L * H * m;
        be->zero(be->ctx, sums, (size_t)H * s * sizeof(float));
        for (int i = 0; i < L; i++)
            for (int h = 0; h < H; h++) be->dequantize_add(be->ctx, sums + (size_t)h * s, recv + ((size_t)i * H + h) * m, s, p->block, p->qgz);
    }
    if (H == 1) {
        be->convert(be->ctx, out, p->dtype, sums, ZC_F32, s);
        return -1;
    }
    if (!go) return -1;
    char *send = (char *)shared2, *recv = send + (size_t)H * m;
    for (int h = 0; h < H; h++) be->quantize(be->ctx, send + (size_t)h * m, sums + (size_t)h * s, s, ZC_F32, p->block, p->qgz);
    return be->group_all_to_all(be->ctx, ZB_OUTER, L, send, recv, m);
}
// Level 2 landed: this rank's slice summed over the H hosts' versions in fp32, rounded into out.
static inline void zpp_qg_land(const ZeroPPShape *p, const ZeroBackend *be, size_t s, float *sums, const void *shared2,
                               void *out) {
    int H = p->world / p->per_host;
    size_t m = zpp_qg_msg(p, s);
    const char *recv = (const char *)shared2 + (size_t)H * m;
    float *mine = sums + (size_t)H * s;
    be->zero(be->ctx, mine, s * sizeof(float));
    for (int h = 0; h < H; h++) be->dequantize_add(be->ctx, mine, recv + (size_t)h * m, s, p->block, p->qgz);
    be->convert(be->ctx, out, p->dtype, mine, ZC_F32, s);
}

// Bytes a rank sends, inside its host and across hosts: a world collective in which it receives
// one `m`-byte piece from every other rank (all-gather, reduce-scatter; an all-reduce twice that).
static inline void zpp_split_world(const ZeroPPShape *p, double m, double *inside, double *across) {
    int L = p->per_host >= 1 ? p->per_host : p->world; // (a Zero that zero_init did not set up: one host)
    *inside += (double)(L - 1) * m;
    *across += (double)(p->world - L) * m;
}

#endif // ZERO_PP_H
