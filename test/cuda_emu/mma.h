// mma.h, the emulator's (see cuda_runtime.h): the part of nvcuda::wmma that 16x16x16 tiles with
// bf16/fp16 operands and fp32 accumulators use. On hardware a fragment is spread over the warp's
// 32 lanes in a layout the programming guide leaves unspecified, so a correct program never
// depends on it; here every lane holds the whole 16x16 tile, which any correct program cannot
// tell apart. What the emulator checks on the way:
//   - mma_sync is warp-collective: the lanes meet there, and every lane must hold the same
//     operands (a lane that loaded shared memory before another lane finished writing it, a
//     missing __syncwarp, holds different ones: an error naming the kernel);
//   - store_matrix_sync writes from each lane only the elements that lane "owns" (element e
//     belongs to lane e % 32), so a lane that reads the stored tile before the others have
//     stored (no __syncwarp in between) reads stale values and the results show it.
//   - the pointer and leading dimension of every load and store are what the hardware needs:
//     32-byte (256-bit) aligned, ldm a multiple of 16 bytes.
// Products are exact in fp32 and summed in k order, as tensor cores' fp32 accumulation is
// close to (not necessarily equal to) on hardware.
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 fragments only");
    float v[16][16]; // [row][col] of the tile: A is m x k, B is k x n, the accumulator m x n
};

static inline float emu_wmma_load(const __nv_bfloat16 &x) { return __bfloat162float(x); }
static inline float emu_wmma_load(const __half &x) { return __half2float(x); }

static inline void emu_wmma_check(const void *p, unsigned ldm, size_t elem, const char *fn) {
    if ((uintptr_t)p % 32)
        emu_fatal("%s in %s: pointer %p is not 32-byte aligned (WMMA needs 256-bit aligned tiles: __align__ the shared arrays)",
                  fn, emu_k.kernel, p);
    if (ldm * elem % 16) emu_fatal("%s in %s: ldm %u is not a multiple of 16 bytes", fn, emu_k.kernel, ldm);
}
template <class Use, class T, class Layout> static inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float x) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = x;
}
template <class Use, class T, class Layout>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator load needs its layout");
    emu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.v[r][c] = emu_wmma_load(std::is_same<Layout, row_major>::value ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm, layout_t l) {
    emu_wmma_check(p, ldm, sizeof(float), "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.v[r][c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t l) {
    emu_wmma_check(p, ldm, sizeof(float), "store_matrix_sync");
    unsigned lane = emu_lane();
    for (int e = (int)lane; e < 256; e += 32) {
        int r = e / 16, c = e % 16;
        (l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.v[r][c];
    }
}

// The warp's lanes meet; every lane's operands must equal lane 0's; lane 0's product is computed
// once (by whichever lane gets there first) and copied by all.
struct EmuMma { const float *a, *b, *c; float d[16][16]; int done; };
static EmuMma emu_mma_slot[32]; // by warp within the block
template <class TA, class LA, class TB, class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, TA, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, TB, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c) {
    unsigned lane = emu_lane(), w = (unsigned)emu_k.cur->linear / 32;
    EmuMma *s = &emu_mma_slot[w];
    if (lane == 0) { s->a = &a.v[0][0]; s->b = &b.v[0][0]; s->c = &c.v[0][0]; s->done = 0; }
    emu_warp_barrier();
    if (memcmp(s->a, &a.v[0][0], sizeof(a.v)) || memcmp(s->b, &b.v[0][0], sizeof(b.v)) || memcmp(s->c, &c.v[0][0], sizeof(c.v)))
        emu_fatal("mma_sync in %s (block %u,%u,%u, warp %u): lane %u holds other operands than lane 0 (shared memory read "
                  "before another lane wrote it: a missing __syncwarp or __syncthreads?)", emu_k.kernel, emu_k.block_idx.x,
                  emu_k.block_idx.y, emu_k.block_idx.z, w, lane);
    if (!s->done) {
        const float(*A)[16] = (const float(*)[16])s->a, (*B)[16] = (const float(*)[16])s->b, (*C)[16] = (const float(*)[16])s->c;
        for (int r = 0; r < 16; r++)
            for (int col = 0; col < 16; col++) {
                float acc = C[r][col];
                for (int k = 0; k < 16; k++) acc += A[r][k] * B[k][col];
                s->d[r][col] = acc;
            }
        s->done = 1;
    }
    emu_warp_barrier(); // lane 0's operands stay alive (it waits here) until every lane compared
    memcpy(&d.v[0][0], &s->d[0][0], sizeof(d.v));
    emu_warp_barrier(); // nobody starts the next mma (rewriting the slot) before all have copied
}
} // namespace wmma
} // namespace nvcuda
