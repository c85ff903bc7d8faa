// zero/pp_setup.h: ZeRO++'s part of a rank's setup (zero_init's, and the planner's on its own
// Zero): whether the job can run it, which of qwZ, hpZ and qgZ are on, and the buffers they need.
// zero/pp.h has the mechanics (and their contract); zero.h's schedule decides when they run.
//
// Contract
//   zero_pp_problem: NULL when ZeroOptions' zeropp_* can run on this backend over `world` ranks,
//   else one line saying why not (the backend lacks ZeRO++'s entries, the hosts are not laid out
//   as consecutive ranks filling each, hpZ's group does not divide the ranks per host).
//   zero_pp_setup: each of qwZ (stage 3), hpZ (stage 3) and qgZ (stages 2, 3) only with more than
//   one rank; the block (default 2048); the ranks per host (the option, else the backend's
//   host_size; the world where neither divides it); and the shape zero/pp.h's functions take.
//   zero_pp_buffer_elems / zero_hpz_elems: what zero_pp_alloc allocates (through z->st, counted as
//   buffers and as hpz), in elements of the model's type, for the planner to predict to the byte;
//   zero_pp_free gives it back.
// No global state; compiles as C11 and as CUDA C++.
#ifndef ZERO_PP_SETUP_H
#define ZERO_PP_SETUP_H

#include <stdio.h>
#include "zero/backend.h"
#include "zero/pp.h"
#include "zero/state.h"
#include "zero/store.h"

// NULL when ZeRO++'s options (ZeroOptions' zeropp_*) can run on this backend over `world` ranks,
// else why not, in buf (one line for the caller to print once).
static inline const char *zero_pp_problem(const ZeroOptions *o, const ZeroBackend *be, int world, char *buf, size_t n) {
    int on = o->zeropp_qwz || o->zeropp_hpz > 1 || o->zeropp_qgz;
    if (!on) return NULL;
    if (!be->host_size || !be->group_all_gather || !be->group_all_to_all || !be->quantize || !be->dequantize ||
        !be->dequantize_add || !be->convert) {
        snprintf(buf, n, "ZeRO++ (--zeropp-qwz / --zeropp-hpz / --zeropp-qgz) is not implemented by this trainer's "
                         "communication backend yet");
        return buf;
    }
    int per_host = o->zeropp_per_host > 0 ? o->zeropp_per_host : be->host_size(be->ctx);
    if ((o->zeropp_hpz > 1 || o->zeropp_qgz) && world > 1 && per_host < 1) {
        snprintf(buf, n, "ZeRO++'s %s needs every host to run as many ranks, consecutive ranks filling each host "
                         "(mpirun's default --map-by slot); this job's hosts do not (ZERO_HOST_ID, cpu/mpi_backend.h)",
                 o->zeropp_hpz > 1 ? "--zeropp-hpz" : "--zeropp-qgz");
        return buf;
    }
    if (o->zeropp_hpz > 1 && (per_host % o->zeropp_hpz || world % o->zeropp_hpz)) {
        snprintf(buf, n, "--zeropp-hpz %d does not divide the %d ranks per host (hpZ's group stays inside a host)",
                 o->zeropp_hpz, per_host);
        return buf;
    }
    return NULL;
}

// ZeRO++'s settings into z (zero_init; the planner calls it on its own Zero): each only where its
// stage has what it changes and there is more than one rank.
static inline void zero_pp_setup(Zero *z, const ZeroOptions *o) {
    int multi = z->world > 1;
    z->qwz = multi && z->stage == 3 && o->zeropp_qwz;
    z->hpz = multi && z->stage == 3 && o->zeropp_hpz > 1 ? o->zeropp_hpz : 1;
    z->qgz = multi && z->stage >= 2 ? o->zeropp_qgz : 0;
    z->block = o->zeropp_block > 0 ? (size_t)o->zeropp_block : 2048;
    z->per_host = o->zeropp_per_host > 0 ? o->zeropp_per_host : z->be.host_size ? z->be.host_size(z->be.ctx) : 0;
    if (z->per_host < 1 || z->world % z->per_host) z->per_host = z->world;
    ZeroPPShape *p = &z->pp;
    p->qwz = z->qwz; p->hpz = z->hpz; p->qgz = z->qgz; p->rank = z->rank; p->world = z->world;
    p->per_host = z->per_host; p->dtype = z->dtype; p->esize = z->esize; p->block = z->block;
}
// ZeRO++'s buffers, in elements of the element type (zero_init allocates them as such):
// per gather buffer qwZ's messages, per receive slot qgZ's level 1, qgZ's shared part; and hpZ's
// secondary shard (MEM_HPZ), apart.
static inline size_t zero_pp_elems(const Zero *z, size_t bytes) { return (bytes + z->esize - 1) / z->esize; }
static inline size_t zero_pp_buffer_elems(const Zero *z) {
    size_t se = zero_slice(z, UNIT_EMBED), sf = zero_slice(z, gpt2_final_unit(&z->lay)), sl = zero_max_layer(z) / z->world;
    size_t n = 0, s0 = se > sf ? se : sf, smax = s0 > sl ? s0 : sl;
    if (z->qwz) n += zero_pp_elems(z, zpp_qw_bytes(&z->pp, se)) + zero_pp_elems(z, zpp_qw_bytes(&z->pp, sf)) +
                     2 * zero_pp_elems(z, zpp_qw_bytes(&z->pp, sl));
    if (z->qgz) n += zero_pp_elems(z, zpp_qg_slot_bytes(&z->pp, s0)) + 2 * zero_pp_elems(z, zpp_qg_slot_bytes(&z->pp, sl)) +
                     zero_pp_elems(z, zpp_qg_sums_bytes(&z->pp, smax)) +
                     zero_pp_elems(z, zpp_qg_shared_bytes(&z->pp, smax) - zpp_qg_sums_bytes(&z->pp, smax));
    return n;
}
static inline size_t zero_hpz_elems(const Zero *z) { return z->hpz > 1 ? z->lay.num_flat / (size_t)z->hpz : 0; }
static inline void zero_pp_alloc(Zero *z) {
    ZeroStore *st = &z->st;
    size_t se = zero_slice(z, UNIT_EMBED), sf = zero_slice(z, gpt2_final_unit(&z->lay)), sl = zero_max_layer(z) / z->world;
    size_t s0 = se > sf ? se : sf, smax = s0 > sl ? s0 : sl;
    if (z->qwz) {
        size_t s[4] = {se, sf, sl, sl};
        for (int i = 0; i < 4; i++) z->qw_buf[i] = zero_store_alloc(st, MEM_BUFFERS, zero_pp_elems(z, zpp_qw_bytes(&z->pp, s[i])));
    }
    if (z->qgz) {
        size_t s[3] = {s0, sl, sl};
        for (int i = 0; i < 3; i++)
            if (zpp_qg_slot_bytes(&z->pp, s[i])) z->qg_slot[i] = zero_store_alloc(st, MEM_BUFFERS, zero_pp_elems(z, zpp_qg_slot_bytes(&z->pp, s[i])));
        z->qg_sums = (float *)zero_store_alloc(st, MEM_BUFFERS, zero_pp_elems(z, zpp_qg_sums_bytes(&z->pp, smax)));
        size_t two = zpp_qg_shared_bytes(&z->pp, smax) - zpp_qg_sums_bytes(&z->pp, smax);
        if (two) z->qg_shared = zero_store_alloc(st, MEM_BUFFERS, zero_pp_elems(z, two));
    }
    if (z->hpz > 1) z->hp_second = zero_store_alloc(st, MEM_HPZ, zero_hpz_elems(z));
}
static inline void zero_pp_free(Zero *z) {
    void *buffers[] = {z->qw_buf[0], z->qw_buf[1], z->qw_buf[2], z->qw_buf[3], z->qg_slot[0],
                       z->qg_slot[1], z->qg_slot[2], z->qg_sums, z->qg_shared};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++) zero_store_free(&z->st, MEM_BUFFERS, buffers[i]);
    zero_store_free(&z->st, MEM_HPZ, z->hp_second);
}

#endif // ZERO_PP_SETUP_H
