/*
gemm_bf16.h: bf16 x bf16 -> fp32 matrix multiply for the CPU trainer's mixed-precision mode, and
with the same driver fp32 x fp32 -> fp32 (gemm_f32, AVX-512 only) for its fp32 and fp16 runs.
CPU only, stb-style (everything static), C11, OpenMP-parallel when compiled with -fopenmp.

What it computes (row-major, like cblas_sgemm with alpha = 1)
    C (M,N) = beta * C + op(A) · op(B)        op(A) is (M,K), op(B) is (K,N)
    transA = 0: A is (M,K), element (m,k) at A[m*lda + k]    transA = 1: A is (K,M), at A[k*lda + m]
    transB = 0: B is (K,N), element (k,n) at B[k*ldb + n]    transB = 1: B is (N,K), at B[n*ldb + k]
  A and B are bf16 (bf16_t bit patterns from mixed_precision.h), C is fp32. Products of two bf16
  are exact in fp32, so the only rounding is the fp32 accumulation (order: see "Determinism").
  beta = 0 overwrites C without reading it (NaN/garbage there is ignored); beta = 1 accumulates;
  any other beta scales C first (a separate pass). K = 0 gives C = beta * C.
  The three products of a linear layer (w is (OC,C) like PyTorch's Linear.weight; N tokens):
    forward          out  (N,OC) (+)= inp (N,C) · wᵀ     gemm_bf16_forward         (0,1, N, OC, C)
    backward data    dinp (N,C)  (+)= dout (N,OC) · w    gemm_bf16_backward_data   (0,0, N, C, OC)
    backward weight  dw   (OC,C) (+)= doutᵀ · inp        gemm_bf16_backward_weight (1,0, OC, C, N)

API
    int  gemm_bf16(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc)   fastest path, own scratch
    int  gemm_bf16_ex(path, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, scratch, bytes)
    int  gemm_bf16_forward / _backward_data / _backward_weight(const GemmBf16Ctx *ctx or NULL, ...)
    int  gemm_bf16_forward_bias(ctx, out, inp, w, bias, N, C, OC)   out = bias + inp · wᵀ
    int  gemm_bf16_forward_round(ctx, out, out16, out32, inp, w, bias, N, C, OC)   the same (bias may be
         NULL), each value rounded to bf16 as it is stored: into out16, and out holds it widened
         (out32 1) or is scratch (out32 0): a 16-bit run's activation without a pass over it
    int  gemm_bf16_acc16(path, transA, transB, M, N, K, A, lda, B, ldb, beta, C16, ldc, scratch, bytes)
    int  gemm_bf16_backward_weight_acc16(ctx, dw16, dout, inp, N, C, OC, beta)
         C is bf16 and the product is added into it (beta 1) or stored (beta 0), rounded once
         per element (see there): a 16-bit gradient accumulates a weight's gradient without an
         fp32 buffer in between, and its first contribution needs no zeroed buffer.
    int  gemm_bf16_acc16_split(..., beta, C16, ldc, split, C32, ldc32, ...), gemm_bf16_backward_weight_split
         the same, but the rows flagged in split get their fp32 sums in C32 instead.
    int  gemm_bf16_path_supported(path)    GemmBf16Path gemm_bf16_best_path(void)
    const char *gemm_bf16_path_name(path)
    size_t gemm_bf16_scratch_bytes(M, N, K)    gemm_bf16_acc16_scratch_bytes(M, N, K)
    size_t gemm_bf16_linear_scratch_bytes(N, C, OC, threads)   enough for a linear layer's three
  A call given less scratch than it needs (NULL included) allocates its own and frees it.
    size_t gemm_bf16_scratch_bytes_t(transA, transB, M, N, K)   the SIMD paths' exact need (they
         read some operands in place: see "Tiling"); gemm_bf16_scratch_bytes covers every path
  fp32 operands (gemm_f32: the same contracts with float A and B; -1 where !gemm_f32_supported()):
    int  gemm_f32_ex(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, scratch, bytes)
    int  gemm_f32_forward / _forward_bias / _backward_data / _backward_weight(ctx, ...)  (ctx's path: AUTO)
    int  gemm_f32_supported(void)    size_t gemm_f32_scratch_bytes(transA, transB, M, N, K)
    size_t gemm_f32_linear_scratch_bytes(N, C, OC, threads)
  All return 0 on success and -1 (touching nothing) on bad arguments (negative sizes or sizes
  over INT_MAX - 64, leading dimensions too small, NULL pointers, transA/transB not 0 or 1), on a
  path this machine cannot run, or when the scratch could not be allocated.

Paths, chosen at run time (GEMM_BF16_AUTO = the first supported of AMX, AVX512-BF16, scalar)
  AMX         TDPBF16PS on 16x16 fp32 tiles: needs CPUID AMX-TILE + AMX-BF16, the OS enabling
              the tile state in XCR0, AVX512-F/BW/VL (used for packing), and on Linux the
              arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) permission, which
              gemm_bf16_path_supported asks for on first use.
  AVX512BF16  VDPBF16PS on zmm registers: needs AVX512-F/BW/VL + AVX512-BF16 and the OS saving zmm.
  SCALAR      portable C (bf16 -> fp32, fp32 multiply-add), any compiler, any CPU.
  The ISA-specific functions carry __attribute__((target(...))), so the header compiles with any
  -march (no -mamx-* needed) and only calls them after detection. Tile instructions are written as
  inline asm (binutils >= 2.36), so gcc's AMX intrinsics headers are not needed either.
  Numerics: VDPBF16PS and TDPBF16PS treat bf16 subnormal inputs (|x| < 2^-126) as zero and flush
  subnormal results, whatever MXCSR says; the scalar path follows MXCSR. Otherwise all paths
  compute the same exact products and differ only in fp32 summation order.

Tiling, and why
  Both SIMD instructions want K in pairs: each 32-bit lane of the "B" operand holds (B[k][n],
  B[k+1][n]) ("VNNI" layout), while the "A" operand holds 32 consecutive k of one row m. Neither
  row-major layout of the three transformer products is that, and the ragged edges need zero
  padding, so both operands are packed into 16-row strips of 1 KB tiles (one strip = 16 rows x
  all k of a K block, tiles consecutive along k):
    A side:  tile = 16 rows m x 32 k, row-major (64-byte rows)               = AMX "A" tile
    B side:  tile = 16 k-pairs x 16 columns n x 2 (64-byte rows)             = AMX "B" tile
  Rows/columns past M/N and k past K are packed as zeros; the results there are never stored.
  Packing is a row copy, a 16x16 32-bit transpose, or an interleave of row pairs (+ transpose),
  in AVX-512 registers with masked loads at the edges, depending on the operand's orientation.
  An A whose k runs down its source's rows (transA = 1: a weight gradient's doutᵀ) is the
  exception on the AVX-512 paths: its strips are packed like B strips (k-pairs interleaved, 16
  rows per 64-byte line, no transpose) and its kernel steps 64 bytes from one k-pair to the next
  instead of 4 (kernel_t); the sums are the same, bit for bit (test_gemm_bf16 checks it).
  One C micro-tile is 32x32 = 2x2 AMX tiles: 4 accumulator tiles + 2 A + 2 B tiles is all 8 tile
  registers (the best loads-per-TDPBF16PS ratio 8 tiles allow); per 32 k it loads 4 KB and issues
  4 TDPBF16PS (16x16x32 each). The AVX512-BF16 and scalar micro-kernels read the same packed data
  (AVX512-BF16: passes of 12, 12 and 8 rows x 32 columns, 24 zmm accumulators, the A pair
  broadcast from memory), so all paths share one driver. fp32 operands use the same driver with
  tiles of the same bytes: 16 rows x 16 k, each 32-bit lane one fp32 where bf16 has a k-pair (A
  tile rows of 16 k; B tile rows of 16 columns at one k, no interleave), and the AVX512-BF16
  kernel's body with VFMADD for VDPBF16PS.
  Loop nest: the side with the smaller extent (M or N: the tokens side of a transformer's
  products, 256 at B=4,T=64, or C=768 for the weight gradient) is "resident": it is packed whole
  (all of K, up to RC rows per pass) by all threads together, then stays in L2 (<= 1.5 MB for
  GPT-2 124M at B=4,T=64, except the LM head's backward-data product: 26 MB). The other side is
  "streamed" (the weights, the 50304-row LM head): its chunks of SC rows are the OpenMP work items
  (dynamic schedule, so a busy or descheduled core simply does fewer), each packed KC of K at a
  time by the thread that takes it, right before use, from memory into L1/L2. So every element of
  a big weight is read from DRAM once per call and its packed copy never goes back to DRAM. A
  streamed side read across its rows (the weight of the backward-data product: 32 bytes of each
  row per strip, rows 1.5-6 KB apart) is packed two strips (one cache line of each row) at a
  time, and the lines of the block a thread packs next are requested while its kernels compute
  with the current one (zc_gb_ahead): the hardware prefetchers do not follow that pattern.
  Two operands are not packed at all where K (and the rows) come in whole tiles: the weight of
  the forward (its rows are A tiles of the transposed product, "wdirect") and a row-major
  resident A such as the backward-data product's dout ("adirect", unless its rows are a multiple
  of 4 KB long: see zc_gb_direct); the kernels read them in place (and an in-place resident A
  needs no buffer: gemm_bf16_scratch_bytes_t leaves it out).
  Within a chunk, C is accumulated in the tiles over a K block, loaded/stored once per K block.
  No barriers (for rext <= RC): threads claim resident strips with an atomic flag per strip and
  wait only for strips another thread is in the middle of packing, then take chunks; the join at
  the end of the parallel region is the only point where everyone waits for everyone. (With 2
  cores shared with other busy processes, one barrier per call made calls up to 10x slower:
  whenever one thread was descheduled, the other waited out a scheduler time slice.)
  When the resident block does not fit in L2 (> GEMM_BF16_RES_L2_BYTES), each work item would
  re-read it from memory, so chunks are widened to about two per thread.

Determinism
  Every C element is computed by one thread, summing over K in the same order whatever the thread
  count, schedule or chunk width: results are bitwise identical across runs and OMP_NUM_THREADS
  (the order does depend on the path and on GEMM_BF16_KC).

Scratch memory (ownership)
  Packing needs gemm_bf16_scratch_bytes(M,N,K) bytes: ~2*min(M,N)*K for the resident side plus
  ~2*SC*KC per thread (it depends on omp_get_max_threads() at the time of the call); the SIMD
  paths need gemm_bf16_scratch_bytes_t(...) of it (fp32: twice the bytes per element). For GPT-2
  124M at B=4,T=64 and 2 threads: 0.6-2.2 MB (fp32 1.2-4.3 MB) for every product.
  Pass a buffer of at least that size to gemm_bf16_ex (or in GemmBf16Ctx) to avoid a malloc/free
  per call: the caller owns it, it needs no alignment or initialisation, and it must not be used
  by two calls at once. NULL, or a buffer that is too small, makes the call malloc and free its
  own (still correct, just a large malloc per call).

Threads
  Parallel over OpenMP threads (a team of omp_get_max_threads(); one thread below
  GEMM_BF16_SERIAL_FLOPS). Called from inside a parallel region it runs on the calling thread
  (nesting off). Each thread configures the AMX tiles at the start of the region and releases
  them (TILERELEASE) at the end, so no tile state outlives a call.

Hidden state (the only static data; one copy per translation unit, all idempotent)
  - the CPUID/XGETBV feature bits, computed once;
  - whether the kernel granted AMX permission. The permission itself is per process and
    permanent (Linux offers no way to drop it); asking again is harmless. These are written with
    atomic stores, so concurrent first calls are race-free (they may both ask).

Tunables (#define before including; the first three multiples of 32)
  GEMM_BF16_KC (K block, 768), GEMM_BF16_RC (resident rows per pass, 768), GEMM_BF16_SC (streamed
  chunk = work item, 64), GEMM_BF16_RES_L2_BYTES (1 MB, see above), GEMM_BF16_SERIAL_FLOPS
  (2*M*N*K below which the call stays on one thread, 4e6), GEMM_BF16_STREAM_BYTES (a C of more
  bytes than this, 32e6, that the call only writes goes out with streaming stores: see the driver).
*/
#ifndef ZC_GEMM_BF16_H
#define ZC_GEMM_BF16_H

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include "mixed_precision.h"
#ifdef _OPENMP
#include <omp.h>
#define ZC_GB_PRAGMA(x) _Pragma(#x)
#else
#define ZC_GB_PRAGMA(x)
#endif

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define ZC_GB_X86 1
#include <immintrin.h>
#include <cpuid.h>
#define ZC_GB_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#define ZC_GB_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define ZC_GB_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,amx-tile,amx-bf16")))
#endif

#ifndef GEMM_BF16_KC
#define GEMM_BF16_KC 768
#endif
#ifndef GEMM_BF16_RC
#define GEMM_BF16_RC 768
#endif
#ifndef GEMM_BF16_SC
#define GEMM_BF16_SC 64
#endif
#ifndef GEMM_BF16_RES_L2_BYTES
#define GEMM_BF16_RES_L2_BYTES (1 << 20)
#endif
#ifndef GEMM_BF16_STREAM_BYTES
#define GEMM_BF16_STREAM_BYTES 32e6
#endif
#ifndef GEMM_BF16_SERIAL_FLOPS
#define GEMM_BF16_SERIAL_FLOPS 4000000.0
#endif
// The allocation a call makes when its scratch is short (a test counts them)
#ifndef ZC_GB_MALLOC
#define ZC_GB_MALLOC(n) malloc(n)
#endif
#ifdef __cplusplus
#define ZC_GB_STATIC_ASSERT static_assert
#else
#define ZC_GB_STATIC_ASSERT _Static_assert
#endif
ZC_GB_STATIC_ASSERT(GEMM_BF16_KC >= 32 && GEMM_BF16_KC % 32 == 0, "GEMM_BF16_KC: positive multiple of 32");
ZC_GB_STATIC_ASSERT(GEMM_BF16_RC >= 32 && GEMM_BF16_RC % 32 == 0, "GEMM_BF16_RC: positive multiple of 32");
ZC_GB_STATIC_ASSERT(GEMM_BF16_SC >= 32 && GEMM_BF16_SC % 32 == 0, "GEMM_BF16_SC: positive multiple of 32");

typedef enum {
    GEMM_BF16_AUTO = 0,        // the fastest supported path
    GEMM_BF16_SCALAR = 1,      // portable C
    GEMM_BF16_AVX512BF16 = 2,  // VDPBF16PS
    GEMM_BF16_AMX = 3,         // TDPBF16PS
} GemmBf16Path;

// Options for the three layer wrappers; a NULL pointer means {GEMM_BF16_AUTO, NULL, 0}.
typedef struct {
    GemmBf16Path path;
    void *scratch;          // caller-owned, >= gemm_bf16_scratch_bytes(...) to avoid malloc
    size_t scratch_bytes;
} GemmBf16Ctx;

// ----------------------------------------------------------------------------
// run-time detection

#define ZC_GB_F_AVX512 1u   // AVX512-F/BW/VL usable (CPU + OS)
#define ZC_GB_F_BF16 2u     // ... and AVX512-BF16
#define ZC_GB_F_AMX 4u      // AMX-TILE + AMX-BF16 in the CPU and XCR0 (permission not included)
#define ZC_GB_F_VALID 0x100u

static inline unsigned zc_gb_cpu_features(void) {
    static unsigned cached;  // 0 = not computed yet
    unsigned f = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (f) return f & ~ZC_GB_F_VALID;
    f = ZC_GB_F_VALID;
#ifdef ZC_GB_X86
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(1, 0, a, b, c, d);
        if (c & (1u << 27)) {  // OSXSAVE: XGETBV is usable
            uint32_t lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            uint64_t xcr0 = ((uint64_t)hi << 32) | lo;
            unsigned max7, b7, d7, a71 = 0, b71, c71, d71;
            __cpuid_count(7, 0, max7, b7, c, d7);
            if (max7 >= 1) __cpuid_count(7, 1, a71, b71, c71, d71);  // AVX512-BF16 is in 7.1
            (void)b71; (void)c71; (void)d71;
            int avx512 = (b7 >> 16 & 1) && (b7 >> 30 & 1) && (b7 >> 31 & 1)  // F, BW, VL
                         && (xcr0 & 0xE6u) == 0xE6u;                         // SSE, AVX, opmask, zmm
            if (avx512) f |= ZC_GB_F_AVX512;
            if (avx512 && (a71 >> 5 & 1)) f |= ZC_GB_F_BF16;
            if (avx512 && (d7 >> 24 & 1) && (d7 >> 22 & 1)              // AMX-TILE, AMX-BF16
                && (xcr0 & 0x60000u) == 0x60000u)                         // XTILECFG, XTILEDATA
                f |= ZC_GB_F_AMX;
        }
    }
#endif
    __atomic_store_n(&cached, f, __ATOMIC_RELEASE);
    return f & ~ZC_GB_F_VALID;
}

// Linux (>= 5.16) keeps the 8 KB tile data state disabled (XFD) until the process asks for it;
// the first tile instruction without permission is a SIGILL. Raw syscall so that the header does
// not depend on _GNU_SOURCE for syscall(2). Other OSes: assume enabled if XCR0 says so.
static inline int zc_gb_amx_permission(void) {
    static int state;  // 0 = not asked yet, 1 = granted, -1 = refused
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (s) return s > 0;
#if defined(ZC_GB_X86) && defined(__linux__)
    long ret;
    __asm__ volatile("syscall" : "=a"(ret)
                     : "a"(158L /* SYS_arch_prctl */), "D"(0x1023L /* ARCH_REQ_XCOMP_PERM */),
                       "S"(18L /* XFEATURE_XTILEDATA */)
                     : "rcx", "r11", "memory");
    s = ret == 0 ? 1 : -1;
#elif defined(ZC_GB_X86)
    s = 1;
#else
    s = -1;
#endif
    __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    return s > 0;
}

static inline int gemm_bf16_path_supported(GemmBf16Path p) {
    switch (p) {
    case GEMM_BF16_AUTO: case GEMM_BF16_SCALAR: return 1;
    case GEMM_BF16_AVX512BF16: return (zc_gb_cpu_features() & ZC_GB_F_BF16) != 0;
    case GEMM_BF16_AMX: return (zc_gb_cpu_features() & ZC_GB_F_AMX) && zc_gb_amx_permission();
    }
    return 0;
}

static inline GemmBf16Path gemm_bf16_best_path(void) {
    if (gemm_bf16_path_supported(GEMM_BF16_AMX)) return GEMM_BF16_AMX;
    if (gemm_bf16_path_supported(GEMM_BF16_AVX512BF16)) return GEMM_BF16_AVX512BF16;
    return GEMM_BF16_SCALAR;
}

// gemm_f32 runs on AVX-512 (F/BW/VL) only; elsewhere it refuses its calls.
static inline int gemm_f32_supported(void) { return (zc_gb_cpu_features() & ZC_GB_F_AVX512) != 0; }

static inline const char *gemm_bf16_path_name(GemmBf16Path p) {
    switch (p) {
    case GEMM_BF16_AUTO: return "auto";
    case GEMM_BF16_SCALAR: return "scalar";
    case GEMM_BF16_AVX512BF16: return "avx512bf16";
    case GEMM_BF16_AMX: return "amx";
    }
    return "?";
}

// ----------------------------------------------------------------------------
// packing. A "strip" is 16 rows r0..r0+15 of a logical (R x K) operand E(r,k) over nkt k-tiles
// starting at k0, stored as nkt consecutive 1 KB tiles. bf16 (512 elements, 32 k per tile):
//   vnni = 0:  tile[i*32 + j]            = E(r0+i, kt*32+j)       (A side: rows m)
//   vnni = 1:  tile[p*32 + i*2 + h]      = E(r0+i, kt*32+2p+h)    (B side: columns n)
// fp32 (256 elements, 16 k per tile; vnni then only says which side):
//   vnni = 0:  tile[i*16 + j]            = E(r0+i, kt*16+j)       (A side: rows m)
//   vnni = 1:  tile[j*16 + i]            = E(r0+i, kt*16+j)       (B side: columns n)
// E(r,k) = kcontig ? src[r*ld + k] : src[k*ld + r], zero for r >= R or k >= K.

// Lines a kernel call asks for while it runs (see zc_gb_ahead): a block of rows `ld` bytes
// apart, `lines` cache lines of each, `total` lines spread over `calls` kernel calls, a few per
// k-tile of the kernel's loop (zc_gb_ahead_tick), up to `upto` by the end of the current call.
typedef struct {
    const char *src;    // the first row's first column, or NULL: nothing to ask for
    size_t ld;          // bytes
    int lines;          // cache lines per row
    long total, done;   // lines in all, asked for so far
    int calls, call;    // kernel calls to spread them over, made so far
    const char *row;    // the row of the next line to ask for, and that line in it (no division
    int line;           // per line: a 64-bit idiv per prefetch was a third of the driver's time)
    long upto;          // lines asked for by the end of the current call
    int quota;          // lines per tick
} ZcGbAhead;

// Asks for up to n more of the lines (not beyond upto)
static inline void zc_gb_ahead_issue(ZcGbAhead *a, long n) {
#ifdef ZC_GB_X86
    for (const long end = a->done + n < a->upto ? a->done + n : a->upto; a->done < end; a->done++) {
        _mm_prefetch(a->row + (size_t)a->line * 64, _MM_HINT_T2);
        if (++a->line == a->lines) a->line = 0, a->row += a->ld;
    }
#else
    (void)a; (void)n;
#endif
}
// Inside a kernel's k loop: a few lines per k-tile. A whole call's share at once filled the
// core's queue of misses, and the driver then stalled on its own prefetch instructions.
static inline void zc_gb_ahead_tick(ZcGbAhead *a) {
    if (a && a->done < a->upto) zc_gb_ahead_issue(a, a->quota);
}

typedef void (*ZcGbPackFn)(void *dst, const void *src, size_t ld, int kcontig, int vnni,
                           int R, int K, int r0, int k0, int nkt);
// Micro-kernel: the 32x32 block of C at C[0], valid part mv x nv (either may exceed 32), from two
// A strips at pa and pa + sa and two B strips at pb and pb + sb (strides in elements), nkt k-tiles;
// acc = 0: C = product, 1: C += product.
typedef void (*ZcGbKernelFn)(const void *pa, size_t sa, const void *pb, size_t sb, int nkt,
                             float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf);
// The same with the A side read in place from a row-major matrix instead of packed strips (row
// i's k-tile kt at a + i * lda + kt * (k per tile); K in whole tiles).
typedef void (*ZcGbInplaceFn)(const void *a, size_t lda, const void *pb, size_t sb, int nkt,
                              float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf);
// Two B-side strips at once of an operand read across its rows (kcontig 0): rows r0..r0+31 into
// the strips at dst and dst + sstride (elements).
typedef void (*ZcGbPack2Fn)(void *dst, size_t sstride, const void *src, size_t ld, int R, int K, int r0, int k0,
                            int nkt);

static inline void zc_gb_pack_scalar(void *dstv, const void *srcv, size_t ld, int kcontig,
                                     int vnni, int R, int K, int r0, int k0, int nkt) {
    bf16_t *dst = (bf16_t *)dstv;
    const bf16_t *src = (const bf16_t *)srcv;
    for (int kt = 0; kt < nkt; kt++) {
        bf16_t *d = dst + (size_t)kt * 512;
        for (int i = 0; i < 16; i++) {
            int r = r0 + i;
            for (int j = 0; j < 32; j++) {
                int k = k0 + kt * 32 + j;
                bf16_t v = 0;
                if (r < R && k < K) v = kcontig ? src[(size_t)r * ld + k] : src[(size_t)k * ld + r];
                d[vnni ? (j >> 1) * 32 + i * 2 + (j & 1) : i * 32 + j] = v;
            }
        }
    }
}

// Writes the valid (mv x nv, clipped to 16x16) part of a 16x16 fp32 tile into C.
static inline void zc_gb_tile_out(float *C, size_t ldc, const float *t, int mv, int nv) {
    mv = mv < 16 ? mv : 16; nv = nv < 16 ? nv : 16;
    for (int i = 0; i < mv; i++) memcpy(C + (size_t)i * ldc, t + i * 16, (size_t)nv * sizeof(float));
}
// The reverse, zero-filling the rest.
static inline void zc_gb_tile_in(float *t, const float *C, size_t ldc, int mv, int nv) {
    memset(t, 0, 256 * sizeof(float));
    mv = mv < 16 ? mv : 16; nv = nv < 16 ? nv : 16;
    for (int i = 0; i < mv; i++) memcpy(t + i * 16, C + (size_t)i * ldc, (size_t)nv * sizeof(float));
}

// gemm_bf16_acc16's epilogue (ZcGbAddFn): C16 (mv x nv of a 32 x 32 block, row stride ldc) =
// f32_to_bf16(bf16_to_f32(C16) + t) (add 1) or f32_to_bf16(t) (add 0: C16 is not read; add 2:
// the same, whole 64-byte aligned rows written with streaming stores), t the block's fp32 sums
// (row stride 32), mv, nv <= 32.
typedef void (*ZcGbAddFn)(bf16_t *C16, size_t ldc, const float *t, int mv, int nv, int add);
static inline void zc_gb_add_bf16_scalar(bf16_t *C16, size_t ldc, const float *t, int mv, int nv, int add) {
    for (int i = 0; i < mv; i++)
        for (int j = 0; j < nv; j++) {
            bf16_t *d = C16 + (size_t)i * ldc + j;
            *d = f32_to_bf16(add == 1 ? bf16_to_f32(*d) + t[i * 32 + j] : t[i * 32 + j]);
        }
}

static inline float zc_gb_f32(bf16_t h) {  // widening is exact; NaN quieting is irrelevant here
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Portable micro-kernel (ZcGbKernelFn): C accumulated in a local 32x32 fp32 block.
static inline void zc_gb_kernel_scalar(const void *pav, size_t sa, const void *pbv, size_t sb, int nkt,
                                       float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf) {
    (void)pf; // (the driver asks for the call's lines after it)
    const bf16_t *pa = (const bf16_t *)pav, *pb = (const bf16_t *)pbv;
    int mr = mv < 32 ? mv : 32, nr = nv < 32 ? nv : 32;
    float c[32][32];
    memset(c, 0, sizeof c);
    for (int kt = 0; kt < nkt; kt++) {
        for (int m = 0; m < mr; m++) {
            const bf16_t *a = pa + (size_t)(m >> 4) * sa + (size_t)kt * 512 + (m & 15) * 32;
            for (int p = 0; p < 16; p++) {
                float a0 = zc_gb_f32(a[2 * p]), a1 = zc_gb_f32(a[2 * p + 1]);
                for (int h = 0; h < 2; h++) {
                    const bf16_t *b = pb + (size_t)h * sb + (size_t)kt * 512 + p * 32;
                    float *cr = c[m] + 16 * h;
                    for (int n = 0; n < 16; n++)
                        cr[n] += a0 * zc_gb_f32(b[2 * n]) + a1 * zc_gb_f32(b[2 * n + 1]);
                }
            }
        }
    }
    for (int m = 0; m < mr; m++) {
        float *cr = C + (size_t)m * ldc;
        if (acc) for (int n = 0; n < nr; n++) cr[n] += c[m][n];
        else for (int n = 0; n < nr; n++) cr[n] = c[m][n];
    }
}

#ifdef ZC_GB_X86
// In-register transpose of 16x16 32-bit elements: four rounds of swapping the off-diagonal
// b x b blocks (b = 1, 2, 4, 8), each pair of rows with two VPERMT2D.
ZC_GB_TARGET_AVX512 static inline void zc_gb_transpose16_epi32(__m512i v[16]) {
    static const int32_t idx[4][2][16] = {
        {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
         {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
        {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
         {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
        {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
         {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
        {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
         {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    };
    for (int s = 0; s < 4; s++) {
        int b = 1 << s;
        __m512i lo = _mm512_loadu_si512((const void *)idx[s][0]);
        __m512i hi = _mm512_loadu_si512((const void *)idx[s][1]);
        for (int i = 0; i < 16; i++) {
            if (i & b) continue;
            __m512i x = v[i], y = v[i + b];
            v[i] = _mm512_permutex2var_epi32(x, lo, y);
            v[i + b] = _mm512_permutex2var_epi32(x, hi, y);
        }
    }
}

// Same contract as zc_gb_pack_scalar. Edges use masked loads (masked-out lanes never fault).
//   vnni=0, kcontig: row copy          vnni=1, !kcontig: interleave rows k, k+1
//   vnni=1, kcontig: 32-bit transpose  vnni=0, !kcontig: interleave, then 32-bit transpose
ZC_GB_TARGET_AVX512 static inline void zc_gb_pack_avx512(void *dstv, const void *srcv, size_t ld,
                                                  int kcontig, int vnni, int R, int K, int r0,
                                                  int k0, int nkt) {
    bf16_t *dst = (bf16_t *)dstv;
    const bf16_t *src = (const bf16_t *)srcv;
    int nr = R - r0;
    nr = nr < 0 ? 0 : nr > 16 ? 16 : nr;
    const __m512i zero = _mm512_setzero_si512();
    for (int kt = 0; kt < nkt; kt++) {
        bf16_t *d = dst + (size_t)kt * 512;
        int kk = k0 + kt * 32;
        int nk = K - kk;
        nk = nk < 0 ? 0 : nk > 32 ? 32 : nk;
        __m512i v[16];
        if (nr == 0 || nk == 0) {
            for (int i = 0; i < 16; i++) v[i] = zero;
        } else if (kcontig) {
            __mmask32 km = nk == 32 ? 0xFFFFFFFFu : (1u << nk) - 1u;
            for (int i = 0; i < 16; i++)
                v[i] = i < nr ? _mm512_maskz_loadu_epi16(km, src + (size_t)(r0 + i) * ld + kk) : zero;
            if (vnni) zc_gb_transpose16_epi32(v);
        } else {
            __mmask16 rm = nr == 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1u);
            for (int p = 0; p < 16; p++) {
                __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
                if (2 * p < nk) lo = _mm256_maskz_loadu_epi16(rm, src + (size_t)(kk + 2 * p) * ld + r0);
                if (2 * p + 1 < nk) hi = _mm256_maskz_loadu_epi16(rm, src + (size_t)(kk + 2 * p + 1) * ld + r0);
                v[p] = _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                                       _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
            }
            if (!vnni) zc_gb_transpose16_epi32(v);
        }
        for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(d + i * 32), v[i]);
    }
}

// zc_gb_pack_avx512 (kcontig 0, vnni 1) of two strips at once: rows r0..r0+31 into the strips at
// dst and dst + sstride. Each k-pair of src's rows is read as two 64-byte loads (32 columns: a
// whole cache line of each row, when aligned), and a VPERMT2W per strip interleaves them.
// Packed one strip at a time, each row's line was read for its first 16 columns and read again
// for the other 16 only after the rest of the K block, by when a weight's rows (1.5-6 KB apart,
// so in few cache sets) had pushed it out.
ZC_GB_TARGET_AVX512 static inline void zc_gb_pack2_vnni_avx512(void *dstv, size_t sstride, const void *srcv, size_t ld,
                                                         int R, int K, int r0, int k0, int nkt) {
    bf16_t *dst = (bf16_t *)dstv;
    const bf16_t *src = (const bf16_t *)srcv;
    int nr = R - r0;
    nr = nr < 0 ? 0 : nr > 32 ? 32 : nr;
    const __mmask32 rm = nr == 32 ? 0xFFFFFFFFu : (__mmask32)((1u << nr) - 1u);
    static const int16_t il[2][32] = {
        {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39, 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
        {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55, 24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
    const __m512i lo = _mm512_loadu_si512((const void *)il[0]), hi = _mm512_loadu_si512((const void *)il[1]);
    for (int kt = 0; kt < nkt; kt++) {
        bf16_t *d0 = dst + (size_t)kt * 512, *d1 = d0 + sstride;
        for (int p = 0; p < 16; p++) {
            const int k = k0 + kt * 32 + 2 * p;
            __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
            if (nr > 0 && k < K) a = _mm512_maskz_loadu_epi16(rm, src + (size_t)k * ld + r0);
            if (nr > 0 && k + 1 < K) b = _mm512_maskz_loadu_epi16(rm, src + (size_t)(k + 1) * ld + r0);
            _mm512_storeu_si512((void *)(d0 + p * 32), _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512((void *)(d1 + p * 32), _mm512_permutex2var_epi16(a, hi, b));
        }
    }
}

// bf16_to_f32 and f32_to_bf16 (round to nearest even on the bits; NaN keeps its top payload,
// quiet), 16 lanes at a time with the same integer steps, so bit for bit the same.
ZC_GB_TARGET_AVX512 static inline __m512i zc_gb_round16_avx512(__m512 x) {  // -> 16 bf16 in the low halves
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i quiet16 = _mm512_set1_epi32(0x0040), half = _mm512_set1_epi32(0x7FFF), one = _mm512_set1_epi32(1);
    __m512i v = _mm512_castps_si512(x);
    __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(v, abs_mask), inf);
    __m512i r = _mm512_add_epi32(v, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(v, 16), one)));
    r = _mm512_srli_epi32(r, 16);
    return _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(v, 16), quiet16);
}
ZC_GB_TARGET_AVX512 static inline __m512 zc_gb_widen16_avx512(__m256i h) {  // 16 bf16 -> fp32, NaNs quiet
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i quiet32 = _mm512_set1_epi32(0x00400000);
    __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    u = _mm512_mask_or_epi32(u, _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs_mask), inf), u, quiet32);
    return _mm512_castsi512_ps(u);
}
// One row of a block: 32 fp32 (a: columns 0-15, b: 16-31) rounded to their 32 bf16, in order
// (f32_to_bf16 bit for bit), as one vector: the words 0, 2, 4, ... of two rounded vectors.
ZC_GB_TARGET_AVX512 static inline __m512i zc_gb_row16_avx512(__m512 a, __m512 b) {
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32,
                                          30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_epi16(zc_gb_round16_avx512(a), even, zc_gb_round16_avx512(b));
}
// The same where the CPU has AVX512-BF16: VCVTNE2PS2BF16 rounds both vectors in one instruction,
// to nearest even with NaNs quieted and their top payload kept, as f32_to_bf16 does, except that
// it reads fp32 subnormal inputs as zero. A row holding one (0 < |x| < 2^-126: rare, and
// test_gemm_bf16 makes such rows) is rounded the integer way instead. In a weight gradient's
// acc16 epilogue this took its share of the product from 8.4% to 5.0%, and with the C16 rows
// prefetched into L2 (the driver) to ~4% (perf, one thread, GPT-2's qkv shape).
ZC_GB_TARGET_BF16 static inline __m512i zc_gb_row16_avx512bf16(__m512 a, __m512 b) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), top = _mm512_set1_epi32(0x007FFFFF), one = _mm512_set1_epi32(1);
    // subnormal lanes: |x| - 1 < 0x7FFFFF, unsigned (zero wraps around to the top)
    const __mmask16 sa = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(a), abs_mask), one), top);
    const __mmask16 sb = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(_mm512_castps_si512(b), abs_mask), one), top);
    if (__builtin_expect(sa | sb, 0)) return zc_gb_row16_avx512(a, b);
    return (__m512i)_mm512_cvtne2ps_pbh(b, a);
}

// zc_gb_add_bf16_scalar, with the same integer steps as bf16_to_f32 (quiet NaNs) and the rounding
// above, so the results are bit-identical to it; only the fp32 add is a float instruction. A
// whole row of the block (32 columns, one cache line of C16) is rounded in registers and written
// with one plain 64-byte store: GCC turns the narrowing then a 32-byte store into VPMOVDW to
// memory, which Zen 4 executes slowly enough that perf put most of this function on it. (Other
// widths, 16 lanes at a time, the integer way.) One function per row rounding (ROW16).
#define ZC_GB_ADD_BF16(NAME, TARGET, ROW16)                                                                  \
    TARGET static inline void NAME(bf16_t *C16, size_t ldc, const float *t, int mv, int nv, int add) {       \
        for (int i = 0; i < mv; i++) {                                                                       \
            bf16_t *d = C16 + (size_t)i * ldc;                                                               \
            if (nv == 32) {                                                                                  \
                __m512 x0 = _mm512_loadu_ps(t + i * 32), x1 = _mm512_loadu_ps(t + i * 32 + 16);             \
                if (add == 1) {                                                                              \
                    __m512i h = _mm512_loadu_si512((const void *)d);                                         \
                    x0 = _mm512_add_ps(zc_gb_widen16_avx512(_mm512_castsi512_si256(h)), x0);                 \
                    x1 = _mm512_add_ps(zc_gb_widen16_avx512(_mm512_extracti64x4_epi64(h, 1)), x1);           \
                }                                                                                            \
                __m512i r = ROW16(x0, x1);                                                                   \
                if (add == 2 && !((uintptr_t)d & 63)) _mm512_stream_si512((__m512i *)d, r);                  \
                else _mm512_storeu_si512((void *)d, r);                                                      \
                continue;                                                                                    \
            }                                                                                                \
            for (int j = 0; j < nv; j += 16) {                                                               \
                int n = nv - j < 16 ? nv - j : 16;                                                           \
                __mmask16 m = n == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);                     \
                __m512 x = _mm512_maskz_loadu_ps(m, t + i * 32 + j);                                         \
                if (add == 1) x = _mm512_add_ps(zc_gb_widen16_avx512(_mm256_maskz_loadu_epi16(m, d + j)), x); \
                _mm256_mask_storeu_epi16(d + j, m, _mm512_cvtepi32_epi16(zc_gb_round16_avx512(x)));          \
            }                                                                                                \
        }                                                                                                    \
    }
ZC_GB_ADD_BF16(zc_gb_add_bf16_avx512, ZC_GB_TARGET_AVX512, zc_gb_row16_avx512)
ZC_GB_ADD_BF16(zc_gb_add_bf16_avx512bf16, ZC_GB_TARGET_BF16, zc_gb_row16_avx512bf16)

// The SIMD micro-kernels (AVX512-BF16, and fp32 for gemm_f32) share one body. The 32 x 32 block
// goes in passes of 12, 12 and 8 rows (those that hold valid rows), each R rows x 32 columns in
// 2R zmm accumulators: 12 rows are 24 of them, as many as leave registers for B's two vectors and
// the broadcast (on Zen 5 the 12-row pass ran at the peak, 8-row passes at ~94% of it: fewer
// loads of B per multiply-add). Both types' tiles have the same bytes: a 1 KB tile is 16 rows of
// 64 bytes, 16 lanes of 32 bits each, a k-pair of bf16 or one fp32, so a pass is the same code
// but for its multiply-add, FMA(c, a, b): VDPBF16PS or VFMADD. Each C element is its block's
// products summed in k order, then stored or (acc) added to C. The A side: rows 0-15 at pa,
// rows 16-31 at pa + sa, row i's k-tile kt at i * arow + kt * astep bytes from there (packed
// strips: 64 and 1024; a row-major matrix read in place: its leading dimension and 64), and its
// k-pair (fp32: k) p at p * pstep bytes from there (4; 64 in an A strip packed like a B strip).
// The core is inlined into each packed kernel's wrapper, where those strides are constants and
// the loops over rows are unrolled: every A row's address is then a strip's base plus a constant
// displacement, and its accumulators stay in registers to the store. As one function for all
// strides it kept 12 row pointers in registers (spilling loop state to the stack and to xmm),
// and its stores went through a copy of the accumulators on the stack: in cache, one core, 8 or
// 24 k-tiles, 202-215 -> 222-232 GFLOP/s (of ~233); 12 layers' weight gradients (K = 256), one
// thread, 234-244 -> 211-215 ms. The arithmetic and its order are the same.
#define ZC_GB_PASS(G, R, FMA)                                                                                  \
    if ((G) < mv) {                                                                                            \
        __m512 c0[R], c1[R];                                                                                   \
        const char *ar[R];                                                                                     \
        _Pragma("GCC unroll 12") for (int i = 0; i < (R); i++) {                                               \
            ar[i] = pa + (size_t)(((G) + i) >> 4) * sa + (size_t)(((G) + i) & 15) * arow;                      \
            c0[i] = _mm512_setzero_ps();                                                                       \
            c1[i] = _mm512_setzero_ps();                                                                       \
        }                                                                                                      \
        for (int kt = 0; kt < nkt; kt++) {                                                                     \
            zc_gb_ahead_tick(pf);                                                                              \
            const char *b0 = pb + (size_t)kt * 1024, *b1 = b0 + sb;                                            \
            const size_t ko = (size_t)kt * astep;                                                              \
            for (int p = 0; p < 16; p++) {                                                                     \
                const __m512 x0 = _mm512_loadu_ps(b0 + 64 * p), x1 = _mm512_loadu_ps(b1 + 64 * p);             \
                _Pragma("GCC unroll 12") for (int i = 0; i < (R); i++) {                                       \
                    float w;                                                                                   \
                    memcpy(&w, ar[i] + ko + pstep * p, 4);                                                     \
                    const __m512 y = _mm512_set1_ps(w);                                                        \
                    c0[i] = FMA(c0[i], y, x0);                                                                 \
                    c1[i] = FMA(c1[i], y, x1);                                                                 \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
        _Pragma("GCC unroll 12") for (int i = 0; i < (R); i++) {                                               \
            if ((G) + i >= mv) break;                                                                          \
            float *cr = C + (size_t)((G) + i) * ldc;                                                           \
            __m512 r0 = c0[i], r1 = c1[i];                                                                     \
            if (acc) {                                                                                         \
                r0 = _mm512_add_ps(r0, _mm512_maskz_loadu_ps(mk0, cr));                                        \
                if (mk1) r1 = _mm512_add_ps(r1, _mm512_maskz_loadu_ps(mk1, cr + 16));                          \
            }                                                                                                  \
            _mm512_mask_storeu_ps(cr, mk0, r0);                                                                \
            if (mk1) _mm512_mask_storeu_ps(cr + 16, mk1, r1);                                                  \
        }                                                                                                      \
    }
#define ZC_GB_KERNEL_BODY(FMA)                                                                                 \
    int nc = nv < 32 ? nv : 32;                                                                                \
    __mmask16 mk0 = nc >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nc) - 1u);                               \
    __mmask16 mk1 = nc >= 32 ? (__mmask16)0xFFFF : nc <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nc - 16)) - 1u); \
    ZC_GB_PASS(0, 12, FMA)                                                                                     \
    ZC_GB_PASS(12, 12, FMA)                                                                                    \
    ZC_GB_PASS(24, 8, FMA)
#define ZC_GB_FMA_BF16(c, a, b) _mm512_dpbf16_ps((c), (__m512bh)(a), (__m512bh)(b))
#define ZC_GB_FMA_F32(c, a, b) _mm512_fmadd_ps((a), (b), (c))
ZC_GB_TARGET_BF16 static inline __attribute__((always_inline)) void zc_gb_kernel_avx512bf16_core(const char *pa, size_t sa, size_t arow, size_t astep,
                                                                  size_t pstep, const char *pb, size_t sb, int nkt,
                                                                  float *C, size_t ldc, int mv, int nv, int acc,
                                                                  ZcGbAhead *pf) {
    ZC_GB_KERNEL_BODY(ZC_GB_FMA_BF16)
}

// An A read in place (zc_gb_inplace_*) has a run-time row stride, so its addresses cannot be
// folded: such calls go to one out-of-line copy of the core with every stride a variable (inlined
// into its wrapper instead, GPT-2's forward and backward-data products ran ~1-2% slower).
ZC_GB_TARGET_BF16 static __attribute__((noinline)) void zc_gb_kernel_avx512bf16_ool(const char *pa, size_t sa, size_t arow, size_t astep,
                                                                                 size_t pstep, const char *pb, size_t sb, int nkt,
                                                                                 float *C, size_t ldc, int mv, int nv, int acc,
                                                                                 ZcGbAhead *pf) {
    zc_gb_kernel_avx512bf16_core(pa, sa, arow, astep, pstep, pb, sb, nkt, C, ldc, mv, nv, acc, pf);
}
ZC_GB_TARGET_BF16 static inline void zc_gb_kernel_avx512bf16(const void *pa, size_t sa, const void *pb,
                                                             size_t sb, int nkt, float *C, size_t ldc,
                                                             int mv, int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_avx512bf16_core((const char *)pa, sa * 2, 64, 1024, 4, (const char *)pb, sb * 2, nkt, C, ldc, mv, nv, acc, pf);
}
// The same with the A strips packed like B strips (k-pair p of row i at p * 64 + i * 4 bytes of a
// tile: zc_gb_pack_avx512 with vnni 1, or zc_gb_pack2_vnni_avx512): an A whose k runs down its
// source's rows (transA, a weight gradient's doutᵀ) is then interleaved, not also transposed.
ZC_GB_TARGET_BF16 static inline void zc_gb_kernel_t_avx512bf16(const void *pa, size_t sa, const void *pb,
                                                               size_t sb, int nkt, float *C, size_t ldc,
                                                               int mv, int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_avx512bf16_core((const char *)pa, sa * 2, 4, 1024, 64, (const char *)pb, sb * 2, nkt, C, ldc, mv, nv, acc, pf);
}
ZC_GB_TARGET_BF16 static inline void zc_gb_inplace_avx512bf16(const void *a, size_t lda, const void *pb, size_t sb,
                                                              int nkt, float *C, size_t ldc, int mv, int nv, int acc,
                                                              ZcGbAhead *pf) {
    zc_gb_kernel_avx512bf16_ool((const char *)a, 32 * lda, 2 * lda, 64, 4, (const char *)pb, sb * 2, nkt, C, ldc, mv, nv, acc, pf);
}

// AMX. Tiles 0-3: C (0,0) (0,1) (1,0) (1,1); 4-5: A rows 0-15, 16-31; 6-7: B columns 0-15, 16-31.
// Inline asm with "memory" clobbers (the compiler must not move packing stores or C accesses
// across tile loads/stores, which it cannot see through).
#define ZC_GB_TLOAD(t, base, stride) \
    __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #t ::"r"(base), "r"((long)(stride)) : "memory")
#define ZC_GB_TSTORE(t, base, stride) \
    __asm__ volatile("tilestored %%tmm" #t ", (%0,%1,1)" ::"r"(base), "r"((long)(stride)) : "memory")
#define ZC_GB_TZERO(t) __asm__ volatile("tilezero %%tmm" #t ::)
#define ZC_GB_TDP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} ZcGbTileCfg;

ZC_GB_TARGET_AMX static inline void zc_gb_amx_begin(void) {
    ZcGbTileCfg cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) { cfg.colsb[t] = 64; cfg.rows[t] = 16; }
    __asm__ volatile("ldtilecfg %0" ::"m"(cfg) : "memory");
}
ZC_GB_TARGET_AMX static inline void zc_gb_amx_end(void) { __asm__ volatile("tilerelease" ::: "memory"); }

#define ZC_GB_AMX_CIN(t, r, c) do { \
        if (!acc) ZC_GB_TZERO(t); \
        else if (mv >= (r) + 16 && nv >= (c) + 16) ZC_GB_TLOAD(t, C + (size_t)(r) * ldc + (c), ldc * 4); \
        else { \
            if (mv > (r) && nv > (c)) zc_gb_tile_in(buf, C + (size_t)(r) * ldc + (c), ldc, mv - (r), nv - (c)); \
            else memset(buf, 0, sizeof buf); \
            ZC_GB_TLOAD(t, buf, 64); \
        } \
    } while (0)
#define ZC_GB_AMX_COUT(t, r, c) do { \
        if (mv >= (r) + 16 && nv >= (c) + 16) ZC_GB_TSTORE(t, C + (size_t)(r) * ldc + (c), ldc * 4); \
        else if (mv > (r) && nv > (c)) { \
            ZC_GB_TSTORE(t, buf, 64); \
            zc_gb_tile_out(C + (size_t)(r) * ldc + (c), ldc, buf, mv - (r), nv - (c)); \
        } \
    } while (0)

// The A tiles are k-tile kt of rows 0-15 at pa + kt * astep and of rows 16-31 at pa + sa + kt * astep,
// their rows astride bytes apart: packed strips (astep 512, astride 64), or a row-major matrix
// read in place (astep 32, astride its leading dimension in bytes).
ZC_GB_TARGET_AMX static inline void zc_gb_kernel_amx_core(const bf16_t *pa, size_t sa, size_t astep, long astride,
                                                          const bf16_t *pb, size_t sb, int nkt, float *C, size_t ldc,
                                                          int mv, int nv, int acc, ZcGbAhead *pf) {
    const bf16_t *a0 = pa, *a1 = pa + sa, *b0 = pb, *b1 = pb + sb;
    float buf[256] __attribute__((aligned(64)));
    ZC_GB_AMX_CIN(0, 0, 0);
    ZC_GB_AMX_CIN(1, 0, 16);
    ZC_GB_AMX_CIN(2, 16, 0);
    ZC_GB_AMX_CIN(3, 16, 16);
    for (int kt = 0; kt < nkt; kt++) {
        size_t o = (size_t)kt * 512, oa = (size_t)kt * astep;
        zc_gb_ahead_tick(pf);
        ZC_GB_TLOAD(4, a0 + oa, astride);
        ZC_GB_TLOAD(6, b0 + o, 64);
        ZC_GB_TDP(0, 4, 6);
        ZC_GB_TLOAD(7, b1 + o, 64);
        ZC_GB_TDP(1, 4, 7);
        ZC_GB_TLOAD(5, a1 + oa, astride);
        ZC_GB_TDP(2, 5, 6);
        ZC_GB_TDP(3, 5, 7);
    }
    ZC_GB_AMX_COUT(0, 0, 0);
    ZC_GB_AMX_COUT(1, 0, 16);
    ZC_GB_AMX_COUT(2, 16, 0);
    ZC_GB_AMX_COUT(3, 16, 16);
}
ZC_GB_TARGET_AMX static inline void zc_gb_kernel_amx(const void *pa, size_t sa, const void *pb,
                                                     size_t sb, int nkt, float *C, size_t ldc, int mv,
                                                     int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_amx_core((const bf16_t *)pa, sa, 512, 64, (const bf16_t *)pb, sb, nkt, C, ldc, mv, nv, acc, pf);
}
ZC_GB_TARGET_AMX static inline void zc_gb_inplace_amx(const void *a, size_t lda, const void *pb, size_t sb, int nkt,
                                                      float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_amx_core((const bf16_t *)a, 16 * lda, 32, (long)lda * 2, (const bf16_t *)pb, sb, nkt, C, ldc, mv, nv, acc, pf);
}

// fp32 operands (gemm_f32): tiles of 16 rows x 16 k (see "packing"), the same 1 KB as bf16's.
// Same contract as zc_gb_pack_scalar, masked loads at the edges: a row copy where the source
// runs along the tile's rows (A side from k-contiguous rows, B side from rows of k), else a 16 x
// 16 transpose.
ZC_GB_TARGET_AVX512 static inline void zc_gb_pack_f32_avx512(void *dstv, const void *srcv, size_t ld, int kcontig,
                                                             int vnni, int R, int K, int r0, int k0, int nkt) {
    float *dst = (float *)dstv;
    const float *src = (const float *)srcv;
    int nr = R - r0;
    nr = nr < 0 ? 0 : nr > 16 ? 16 : nr;
    for (int kt = 0; kt < nkt; kt++) {
        float *d = dst + (size_t)kt * 256;
        int kk = k0 + kt * 16, nk = K - kk;
        nk = nk < 0 ? 0 : nk > 16 ? 16 : nk;
        __m512i v[16];
        if (nr == 0 || nk == 0) {
            for (int i = 0; i < 16; i++) v[i] = _mm512_setzero_si512();
        } else if (kcontig) { // v[i]: row r0 + i, k kk..kk+15
            __mmask16 km = nk == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nk) - 1u);
            for (int i = 0; i < 16; i++)
                v[i] = i < nr ? _mm512_maskz_loadu_epi32(km, src + (size_t)(r0 + i) * ld + kk) : _mm512_setzero_si512();
            if (vnni) zc_gb_transpose16_epi32(v);
        } else { // v[j]: k = kk + j, rows r0..r0+15
            __mmask16 rm = nr == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
            for (int j = 0; j < 16; j++)
                v[j] = j < nk ? _mm512_maskz_loadu_epi32(rm, src + (size_t)(kk + j) * ld + r0) : _mm512_setzero_si512();
            if (!vnni) zc_gb_transpose16_epi32(v);
        }
        for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(d + i * 16), v[i]);
    }
}

// The fp32 micro-kernel: the AVX512-BF16 one's body with VFMADD (each product rounded into its sum).
ZC_GB_TARGET_AVX512 static inline __attribute__((always_inline)) void zc_gb_kernel_f32_core(const char *pa, size_t sa, size_t arow, size_t astep,
                                                             size_t pstep, const char *pb, size_t sb, int nkt, float *C,
                                                             size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf) {
    ZC_GB_KERNEL_BODY(ZC_GB_FMA_F32)
}
// (in-place A: out of line, see zc_gb_kernel_avx512bf16_ool)
ZC_GB_TARGET_AVX512 static __attribute__((noinline)) void zc_gb_kernel_f32_ool(const char *pa, size_t sa, size_t arow, size_t astep,
                                                                            size_t pstep, const char *pb, size_t sb, int nkt,
                                                                            float *C, size_t ldc, int mv, int nv, int acc,
                                                                            ZcGbAhead *pf) {
    zc_gb_kernel_f32_core(pa, sa, arow, astep, pstep, pb, sb, nkt, C, ldc, mv, nv, acc, pf);
}
ZC_GB_TARGET_AVX512 static inline void zc_gb_kernel_f32(const void *pa, size_t sa, const void *pb, size_t sb, int nkt,
                                                        float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_f32_core((const char *)pa, sa * 4, 64, 1024, 4, (const char *)pb, sb * 4, nkt, C, ldc, mv, nv, acc, pf);
}
ZC_GB_TARGET_AVX512 static inline void zc_gb_kernel_t_f32(const void *pa, size_t sa, const void *pb, size_t sb, int nkt,
                                                          float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_f32_core((const char *)pa, sa * 4, 4, 1024, 64, (const char *)pb, sb * 4, nkt, C, ldc, mv, nv, acc, pf);
}
ZC_GB_TARGET_AVX512 static inline void zc_gb_inplace_f32(const void *a, size_t lda, const void *pb, size_t sb, int nkt,
                                                         float *C, size_t ldc, int mv, int nv, int acc, ZcGbAhead *pf) {
    zc_gb_kernel_f32_ool((const char *)a, 64 * lda, 4 * lda, 64, 4, (const char *)pb, sb * 4, nkt, C, ldc, mv, nv, acc, pf);
}

// A 32 x 32 fp32 block transposed between C (rows m, mv <= 32 of them valid, row stride ldc) and
// t (rows n, 32 apart): in (out 0), t = C^T (invalid rows of C read as 0); out (1, or 2 with
// streaming stores for the 64-byte aligned rows), C = t^T (valid rows only), and on the way
// (r16, see zc_gb_run) each value x rounded to bf16 (f32_to_bf16, bit for bit) into C16 (the same
// layout and row stride as C; NULL: none), and C given that value widened (r16 1) or not
// written at all (r16 2).
// (out: bias, NULL or the block's 32 column values, added to each sum as it goes out)
ZC_GB_TARGET_AVX512 static inline void zc_gb_tblock(float *t, float *C, size_t ldc, int mv, int out, bf16_t *C16, int r16,
                                                    const float *bias) {
    if (!out) {
        for (int q = 0; q < 4; q++) {
            const int r = (q >> 1) * 16, c = (q & 1) * 16;  // quadrant of C: rows m r.., columns n c..
            __m512i v[16];
            for (int i = 0; i < 16; i++)
                v[i] = r + i < mv ? _mm512_loadu_si512((const void *)(C + (size_t)(r + i) * ldc + c)) : _mm512_setzero_si512();
            zc_gb_transpose16_epi32(v);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(t + (c + i) * 32 + r), v[i]);
        }
        return;
    }
    // words 0, 2, ..., 62 of two vectors of 16 rounded lanes (zc_gb_round16_avx512): one row's 32
    // bf16, stored as one whole 64-byte line (two half-line stores per row were a fifth of a
    // rounded forward's time outside the kernels)
    const __m512i even = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32,
                                          30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps(), b1 = bias ? _mm512_loadu_ps(bias + 16) : b0;
    for (int r = 0; r < 32 && r < mv; r += 16) {  // rows m r..r+15: both quadrants' columns (n 0.., 16..)
        __m512i v[16], w[16];
        for (int i = 0; i < 16; i++) v[i] = _mm512_loadu_si512((const void *)(t + i * 32 + r));
        for (int i = 0; i < 16; i++) w[i] = _mm512_loadu_si512((const void *)(t + (16 + i) * 32 + r));
        zc_gb_transpose16_epi32(v);
        zc_gb_transpose16_epi32(w);
        for (int i = 0; i < 16 && r + i < mv; i++) {
            float *dst = C + (size_t)(r + i) * ldc;
            __m512i a = v[i], b = w[i];
            if (bias) a = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), b0)),
                      b = _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(b), b1));
            if (r16) {
                const __m512i ha = zc_gb_round16_avx512(_mm512_castsi512_ps(a)), hb = zc_gb_round16_avx512(_mm512_castsi512_ps(b));
                // (a permute and a plain store, not VPMOVDW to memory: see zc_gb_add_bf16_avx512)
                if (C16) _mm512_storeu_si512((void *)(C16 + (size_t)(r + i) * ldc), _mm512_permutex2var_epi16(ha, even, hb));
                if (r16 == 2) continue;
                a = _mm512_slli_epi32(ha, 16), b = _mm512_slli_epi32(hb, 16); // widening: the rounding left a NaN quiet already
            }
            if (out == 2 && !((uintptr_t)dst & 63)) {
                _mm512_stream_si512((__m512i *)dst, a);
                _mm512_stream_si512((__m512i *)(dst + 16), b);
            } else {
                _mm512_storeu_si512((void *)dst, a);
                _mm512_storeu_si512((void *)(dst + 16), b);
            }
        }
    }
}
#endif  // ZC_GB_X86

// ----------------------------------------------------------------------------
// driver

static inline int zc_gb_round32(int x) { return (x + 31) & ~31; }
static inline int zc_gb_min(int a, int b) { return a < b ? a : b; }

typedef struct {
    int nt;          // threads
    int a_res;       // 1: A is the resident side (M <= N), 0: B is
    int rc, kc, sc;  // resident rows per pass, K block, streamed chunk (multiples of 32)
    size_t res_elems, str_elems;  // resident buffer, per-thread streamed buffer (bf16 elements)
    size_t bytes;    // scratch needed, including 64 bytes of alignment slack
} ZcGbPlan;

// Which operand a SIMD path reads in place instead of packing it (see the driver): the weight of
// a linear layer's forward (wdirect), or a row-major resident A (adirect). inplace: the path can
// (AVX512-BF16, AMX, fp32; not the scalar path); c16: gemm_bf16_acc16; tk: the k of one tile.
// A pass of the AVX-512 kernels reads 12 rows of an in-place A side by side, one 64-byte line of
// each per k-tile. Rows whose length is a multiple of 4 KB (fp32 K = 3072: GPT-2's fc
// backward-data product) all fall in one set of a 64-set L1, whose 8 ways do not hold 12 of
// them: such an A is packed instead (that product, two threads, 8 alternating runs: median
// 7.97 -> ~7.5 ms). Rows spread over two sets (bf16 K = 3072) stay in place: packed, the same
// product on two threads took 3.2-3.5 -> 3.7-4.3 ms. (Judged on K, the length of a contiguous
// row, not on the caller's lda, so that the scratch sizes, which do not see lda, agree with the
// call.) The forward's weight stays in place at any row length: packing it, a transpose, cost
// more than the conflicts (fp32 fcproj, one thread).
typedef struct { int wdirect, adirect; } ZcGbDirect;
static inline ZcGbDirect zc_gb_direct(int inplace, int c16, int transA, int transB, int M, int N, int K, int tk) {
    ZcGbDirect d;
    const unsigned lines = (unsigned)K / (unsigned)tk; // 64-byte lines in a row of K (a tile's row: tk k, 64 bytes)
    const unsigned low = lines & (0u - lines), sets = lines == 0 || low >= 64 ? 1 : 64 / low; // L1 sets its rows spread over
    d.wdirect = inplace && !c16 && transB && M <= N && K % tk == 0 && N % 32 == 0 && M <= GEMM_BF16_RC;
    d.adirect = inplace && M <= N && !transA && !d.wdirect && K % tk == 0 && M % 32 == 0 && sets >= 2;
    return d;
}

// full_k: one K block of all of K (gemm_bf16_acc16 needs each C element's whole sum before it
// rounds it into C). threads: the OpenMP threads a call may use (products under
// GEMM_BF16_SERIAL_FLOPS run on one). esize: the operands' element size (2: bf16, 4: fp32).
// a_inplace: the resident A is read in place (adirect), so it needs no buffer.
static inline ZcGbPlan zc_gb_plan(int M, int N, int K, int full_k, int threads, int esize, int a_inplace) {
    ZcGbPlan p;
    int nt = 2.0 * M * N * K >= GEMM_BF16_SERIAL_FLOPS ? threads : 1;
    if (nt < 1) nt = 1;
    p.nt = nt;
    p.a_res = M <= N;
    int rext = p.a_res ? M : N, sext = p.a_res ? N : M;
    if (rext < 1) rext = 1;
    if (sext < 1) sext = 1;
    int kp = zc_gb_round32(K > 0 ? K : 1);
    p.rc = zc_gb_min(GEMM_BF16_RC, zc_gb_round32(rext));
    p.kc = full_k ? kp : zc_gb_min(GEMM_BF16_KC, kp);
    p.res_elems = a_inplace ? 0 : (size_t)p.rc * kp;
    // Each work item re-reads the whole resident block (packed or in place). When that does not
    // fit in L2 (the LM head's backward-data product: 256 x 50304), use fewer, wider items:
    // about 2 per thread, each thread's chunk within that L2 budget too (with all of K in one
    // block, as for the LM head's weight gradient at many tokens, a chunk of half the vocabulary
    // would be hundreds of MB).
    p.sc = GEMM_BF16_SC;
    if ((size_t)p.rc * kp * esize > GEMM_BF16_RES_L2_BYTES) {
        int wide = zc_gb_round32((sext + 2 * nt - 1) / (2 * nt));
        int cap = (int)(GEMM_BF16_RES_L2_BYTES / ((size_t)p.kc * esize)) & ~31;
        if (wide > cap) wide = cap;
        if (wide > p.sc) p.sc = wide;
    }
    p.sc = zc_gb_min(p.sc, zc_gb_round32(sext));
    p.str_elems = (size_t)p.sc * p.kc;
    p.bytes = (p.res_elems + (size_t)nt * p.str_elems) * esize + 64;
    return p;
}

// The threads a call made here would use: OpenMP's count for a new team, 1 inside one.
static inline int zc_gb_threads(void) {
#ifdef _OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}

// The scratch a call on the SIMD paths needs with these transpositions (what it reads in place
// it does not pack: for a linear layer's backward-data product, the 16-bit dout, up to 26 MB for
// the LM head); bf16 (esize 2) or fp32 (4); acc16: gemm_bf16_acc16.
static inline size_t zc_gb_scratch(int esize, int acc16, int transA, int transB, int M, int N, int K, int threads) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    ZcGbDirect d = zc_gb_direct(1, acc16, transA, transB, M, N, K, esize == 4 ? 16 : 32);
    return zc_gb_plan(M, N, K, acc16, threads, esize, d.adirect).bytes;
}
// Enough for any call of that size on any path (the scalar path packs every operand).
static inline size_t gemm_bf16_scratch_bytes(int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return zc_gb_plan(M, N, K, 0, zc_gb_threads(), 2, 0).bytes;
}
static inline size_t gemm_bf16_acc16_scratch_bytes(int M, int N, int K) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    return zc_gb_plan(M, N, K, 1, zc_gb_threads(), 2, 0).bytes;
}
// gemm_bf16_ex's need on the AVX512-BF16 and AMX paths, given the transpositions (at most
// gemm_bf16_scratch_bytes).
static inline size_t gemm_bf16_scratch_bytes_t(int transA, int transB, int M, int N, int K) {
    return zc_gb_scratch(2, 0, transA, transB, M, N, K, zc_gb_threads());
}
// gemm_f32_ex's need (it runs on AVX-512 only).
static inline size_t gemm_f32_scratch_bytes(int transA, int transB, int M, int N, int K) {
    return zc_gb_scratch(4, 0, transA, transB, M, N, K, zc_gb_threads());
}
// Scratch that serves all three products of a linear layer (the forward, backward_data and
// backward_weight wrappers) over N rows, C inputs, OC outputs, on the SIMD paths, for calls made
// with up to `threads` OpenMP threads: a caller that allocates it once never has gemm_bf16
// allocate memory of its own. esize 2: gemm_bf16's (acc16 included), 4: gemm_f32's.
static inline size_t zc_gb_linear_scratch(int esize, int N, int C, int OC, int threads) {
    if (N <= 0 || C <= 0 || OC <= 0) return 0;
    size_t most = 0;
    const int nts[2] = {1, threads > 1 ? threads : 1};  // a call inside a parallel region runs on one
    for (int t = 0; t < 2; t++) {
        size_t b[4] = {zc_gb_scratch(esize, 0, 0, 1, N, OC, C, nts[t]), zc_gb_scratch(esize, 0, 0, 0, N, C, OC, nts[t]),
                       zc_gb_scratch(esize, 0, 1, 0, OC, C, N, nts[t]),
                       esize == 2 ? zc_gb_scratch(esize, 1, 1, 0, OC, C, N, nts[t]) : 0};
        for (int i = 0; i < 4; i++) most = b[i] > most ? b[i] : most;
    }
    return most;
}
static inline size_t gemm_bf16_linear_scratch_bytes(int N, int C, int OC, int threads) {
    return zc_gb_linear_scratch(2, N, C, OC, threads);
}

// A streamed operand read across its rows (kcontig 0: a weight for the backward-data product,
// dout for a weight gradient) is a column block of rows that lie a row's length apart, which the
// hardware prefetchers do not follow. So while the kernels compute with one packed block, the
// thread asks for the lines of the block it will pack next, a share during each kernel call:
// the chunk's next K block, or else the first K block of the chunk nt further on (with the
// dynamic schedule a guess, and a wrong guess only costs the requests: the other thread reads
// that block soon). Into L2 (PREFETCHT2): pulled into L1 this early, the lines evicted each other.
static inline ZcGbAhead zc_gb_ahead(const void *ssrc, size_t sld, int esize, int skc, int sext, int K, int KC, int SC,
                                    int s0, int k0, int nt, int calls) {
    ZcGbAhead a = {NULL, sld * esize, 0, 0, 0, calls > 0 ? calls : 1, 0, NULL, 0, 0, 0};
    int nk0 = k0 + KC, ns0 = s0;
    if (nk0 >= K) nk0 = 0, ns0 = s0 + nt * SC;
    if (skc || ns0 >= sext) return a;
    a.src = (const char *)ssrc + ((size_t)nk0 * sld + ns0) * esize;
    a.lines = (zc_gb_min(SC, sext - ns0) * esize + 63) / 64;
    a.row = a.src;
    a.total = (long)zc_gb_min(KC, K - nk0) * a.lines;
    return a;
}

// Before a kernel call that makes `ticks` zc_gb_ahead_tick calls: this call's share of the lines
// (NULL: none to ask for, or the driver asks for them itself); after it, zc_gb_ahead_rest asks
// for what its ticks left (a kernel that does not tick, the scalar one, leaves all of it).
static inline ZcGbAhead *zc_gb_ahead_begin(ZcGbAhead *a, int ticks) {
    if (!a->src) return NULL;
    a->upto = a->total * ++a->call / a->calls;
    a->quota = (int)((a->upto - a->done + ticks - 1) / (ticks > 0 ? ticks : 1));
    return a;
}
static inline void zc_gb_ahead_rest(ZcGbAhead *a) {
    if (a->src) zc_gb_ahead_issue(a, a->upto - a->done);
}

static inline void zc_gb_pause(void) {
#ifdef ZC_GB_X86
    __builtin_ia32_pause();
#endif
}

static inline int zc_gb_thread_num(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// The rounding epilogue (r16 1 or 2, see zc_gb_run) as a pass over C (M x N, row stride ldc), on
// nt threads: each x to f32_to_bf16(x) in R16 (same layout; NULL: none), and with r16 1, C =
// bf16_to_f32 of that.
static inline void zc_gb_round_rows(float *C, bf16_t *R16, int ldc, int M, int N, int r16, int nt) {
    (void)nt;
    ZC_GB_PRAGMA(omp parallel for schedule(static) num_threads(nt) if (nt > 1))
    for (int m = 0; m < M; m++) {
        float *c = C + (size_t)m * ldc;
        bf16_t *h = R16 ? R16 + (size_t)m * ldc : NULL;
        for (int n = 0; n < N; n++) {
            bf16_t v = f32_to_bf16(c[n]);
            if (h) h[n] = v;
            if (r16 == 1) c[n] = bf16_to_f32(v);
        }
    }
}

// What the driver needs of an element type: its size, the k of one tile (a tile is 16 rows x tk
// k, 1 KB), its packing and its kernels.
typedef struct {
    int esize, tk;
    ZcGbPackFn pack;
    ZcGbPack2Fn pack2;      // two B-side strips of a k-major operand at once, or NULL (one at a time)
    ZcGbKernelFn kernel;
    ZcGbInplaceFn inplace;  // the A side read in place, or NULL (always packed)
    ZcGbKernelFn kernel_t;  // A strips packed like B strips (an A read across its rows), or NULL
} ZcGbElem;

// The driver of gemm_bf16_ex (C16 NULL: fp32 C with beta) and gemm_bf16_acc16 (C NULL, beta 1
// or 0: each element's sum over all of K rounded into C16, added to it with beta 1; rows m with
// split[m] != 0, when split is given, get their fp32 sums stored in C32 instead); with f32, of
// gemm_f32_ex (A and B fp32, path GEMM_BF16_AUTO: the AVX-512 kernels; C16 NULL). r16 1 or 2 (else
// 0, R16 NULL): gemm_bf16_forward_round's epilogue, each element's final value rounded to bf16
// into R16 (NULL: none; required with 2), and C holding that value widened (1) or scratch (2).
static inline int zc_gb_run(GemmBf16Path path, int f32, int transA, int transB, int M, int N, int K,
                            const void *A, int lda, const void *B, int ldb, float beta,
                            float *C, bf16_t *C16, int ldc, const uint8_t *split, float *C32, int ldc32,
                            const float *bias, bf16_t *R16, int r16, void *scratch, size_t scratch_bytes) {
    if (M < 0 || N < 0 || K < 0 || M > INT_MAX - 64 || N > INT_MAX - 64 || K > INT_MAX - 64) return -1;
    if ((transA != 0 && transA != 1) || (transB != 0 && transB != 1)) return -1;
    if (lda < (transA ? (M > 1 ? M : 1) : (K > 1 ? K : 1))) return -1;
    if (ldb < (transB ? (K > 1 ? K : 1) : (N > 1 ? N : 1))) return -1;
    if (ldc < (N > 1 ? N : 1)) return -1;
    if (C16 && beta != 0.0f && beta != 1.0f) return -1;
    if (bias && (C16 || beta != 0.0f)) return -1;
    if (r16 < 0 || r16 > 2 || (r16 && (C16 || f32)) || (r16 == 2 && !R16) || (!r16 && R16)) return -1;
    if (f32 && (C16 || path != GEMM_BF16_AUTO || !gemm_f32_supported())) return -1;
    if (path == GEMM_BF16_AUTO) path = f32 ? GEMM_BF16_AVX512BF16 : gemm_bf16_best_path();
    else if (!gemm_bf16_path_supported(path)) return -1;
    if (M == 0 || N == 0) return 0;
    if ((!C && !C16) || (K > 0 && (!A || !B)) || (split && (!C32 || ldc32 < N))) return -1;
    if (C16 && K == 0) {  // adds nothing (beta 0: C16 = 0); the split rows' sums are zeros
        for (int m = 0; m < M; m++) {
            if (split && split[m]) memset(C32 + (size_t)m * ldc32, 0, (size_t)N * sizeof(float));
            if (beta == 0.0f) memset(C16 + (size_t)m * ldc, 0, (size_t)N * sizeof(bf16_t));
        }
        return 0;
    }

    ZcGbElem el = {2, 32, zc_gb_pack_scalar, NULL, zc_gb_kernel_scalar, NULL, NULL};
    ZcGbAddFn add_bf16 = zc_gb_add_bf16_scalar;
#ifdef ZC_GB_X86
    if (f32) el = (ZcGbElem){4, 16, zc_gb_pack_f32_avx512, NULL, zc_gb_kernel_f32, zc_gb_inplace_f32, zc_gb_kernel_t_f32};
    else if (path == GEMM_BF16_AVX512BF16)
        el = (ZcGbElem){2, 32, zc_gb_pack_avx512, zc_gb_pack2_vnni_avx512, zc_gb_kernel_avx512bf16, zc_gb_inplace_avx512bf16,
                        zc_gb_kernel_t_avx512bf16};
    else if (path == GEMM_BF16_AMX)
        el = (ZcGbElem){2, 32, zc_gb_pack_avx512, zc_gb_pack2_vnni_avx512, zc_gb_kernel_amx, zc_gb_inplace_amx, NULL};
    // acc16's rounding on VCVTNE2PS2BF16 where the CPU has it (zc_gb_row16_avx512bf16; AMX machines
    // have it too, but the AMX path does not require it)
    if (path != GEMM_BF16_SCALAR)
        add_bf16 = zc_gb_cpu_features() & ZC_GB_F_BF16 ? zc_gb_add_bf16_avx512bf16 : zc_gb_add_bf16_avx512;
#endif
    const int amx = path == GEMM_BF16_AMX && !f32, es = el.esize, TK = el.tk, TE = 16 * TK; // TE: elements per tile
    const int ticks = amx ? 1 : 3; // zc_gb_ahead_tick calls per k-tile of a 32 x 32 block (AVX-512: a pass of rows each)

    const ZcGbDirect dir = zc_gb_direct(el.inplace != NULL, C16 != NULL, transA, transB, M, N, K, TK);
    const ZcGbPlan pl = zc_gb_plan(M, N, K, C16 != NULL, zc_gb_threads(), es, dir.adirect);
    void *mem = NULL;
    if (K > 0 && (!scratch || scratch_bytes < pl.bytes)) {
        mem = ZC_GB_MALLOC(pl.bytes);
        if (!mem) return -1;
        scratch = mem;
    }

    // beta other than 0 and 1: scale C once, then accumulate
    if (beta != 0.0f && beta != 1.0f) {
        ZC_GB_PRAGMA(omp parallel for schedule(static) num_threads(pl.nt) if (pl.nt > 1))
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) C[(size_t)m * ldc + n] *= beta;
        beta = 1.0f;
    }
    if (K == 0) {
        if (beta == 0.0f) {
            for (int m = 0; m < M; m++) {
                if (bias) memcpy(C + (size_t)m * ldc, bias, (size_t)N * sizeof(float));
                else memset(C + (size_t)m * ldc, 0, (size_t)N * sizeof(float));
            }
        }
        return 0; // (no rounding to do: only gemm_bf16_forward_round asks for it, and its K >= 1)
    }

    // A side: rows m, E(m,k) = A(m,k), packed as A tiles. B side: "rows" n, E(n,k) = B(k,n),
    // packed as VNNI tiles. The resident side is packed whole (all of K, up to RC rows per pass);
    // the streamed side chunk by chunk, KC at a time, by the thread that computes with it.
    const int a_res = pl.a_res;
    const void *rsrc = a_res ? A : B, *ssrc = a_res ? B : A;
    const size_t rld = (size_t)(a_res ? lda : ldb), sld = (size_t)(a_res ? ldb : lda);
    const int rkc = a_res ? !transA : transB, skc = a_res ? transB : !transA;
    const int rext = a_res ? M : N, sext = a_res ? N : M;
    const int RC = pl.rc, KC = pl.kc, SC = pl.sc, nt = pl.nt;
    (void)nt;  // unused without OpenMP
    const int nKt = (K + TK - 1) / TK;
    const size_t rstrip = (size_t)nKt * TE;  // resident strip stride (elements)
    const int nchunks = (sext + SC - 1) / SC;
    int acc0 = !C16 && beta != 0.0f;  // acc16 sums into a zeroed local block
    const int add16 = C16 && beta != 0.0f;  // acc16: add the block's sums to C16, or only store them
    char *rbuf = (char *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63); // (element offsets times es)
    char *sbuf0 = rbuf + pl.res_elems * es;
    const size_t ldcz = (size_t)ldc;
    // A linear layer's forward, C (M,N) (+)= A · Bᵀ with B (N,K) row-major (the weight): B's
    // rows, read in place, are already the A side of the transposed product Cᵀ = B · Aᵀ (AMX A
    // tiles; AVX512-BF16 broadcasts k-pairs from rows). So instead of packing (transposing) every
    // element of the weight on every call, the resident side A is packed as Cᵀ's B operand, each
    // 32 x 32 block of Cᵀ goes through a local block, transposed on the way in (beta 1) and out,
    // and each sum is formed from the same products in the same order as on the packed path,
    // with all of K in one pass (no K blocks). Needs whole tiles of B: K a multiple of the tile's
    // k, N of 32 (GPT-2's are); rows of B are streamed from memory a block ahead.
    const int wdirect = dir.wdirect;
    // A (M,K) row-major and resident (the backward-data product's dout, the tokens' rows): its
    // rows are already A tiles when read in place (row i's k-tile kt at i * lda + kt * TK, as the
    // direct forward reads the weight), so it is not packed. A packed copy cost a pass over A and,
    // on two threads, a copy written by one core and read by both. Needs whole tiles: K a
    // multiple of the tile's k, M of 32 (GPT-2's are).
    const int adirect = dir.adirect;
    // An A read across its rows (transA: the weight gradient's doutᵀ, whose k, the tokens, runs
    // down dout's rows) is packed the way the B side is, k-pairs of two source rows interleaved,
    // with no transpose after it, where the path has a kernel that reads A strips so (kernel_t):
    // the same products in the same order. The transposing pack took 5-7% of such a product.
    const int a_il = el.kernel_t && transA && !wdirect;
    const ZcGbKernelFn kern = a_il ? el.kernel_t : el.kernel;
    // A C larger than the caches that is only written, never read (the LM head's logits, 51 MB at
    // B=4, T=64, from the direct forward; the tied embedding's fresh 16-bit gradient, 77 MB, from
    // acc16 with beta 0), goes out with streaming stores: each row of a block is whole 64-byte
    // lines, so no line of C is read from memory only to be overwritten (the rows, 201 KB or
    // 1.5 KB apart, were a miss per line that the stores waited for), and C does not evict the
    // operands. (A row that is not 64-byte aligned is stored as usual.)
    const int stream = (wdirect && (double)M * N * sizeof(float) > GEMM_BF16_STREAM_BYTES) ||
                       (C16 && !add16 && (double)M * N * sizeof(bf16_t) > GEMM_BF16_STREAM_BYTES);
    const int mode16 = add16 ? 1 : stream ? 2 : 0; // add_bf16's add
    // bias (C = bias + product): the direct forward starts each transposed block's sums from the
    // bias; elsewhere every row of C starts as the bias and the product accumulates (the same
    // arithmetic either way: each sum starts from its bias value)
    if (bias && !wdirect) {
        for (int m = 0; m < M; m++) memcpy(C + (size_t)m * ldc, bias, (size_t)N * sizeof(float));
        acc0 = 1;
    }

    // Resident strips are packed cooperatively without a barrier: each thread claims unpacked
    // strips (starting at its own offset), packs them, marks them done, then waits only for
    // strips another thread is still packing. A thread that the OS has not scheduled yet holds up
    // nobody (a barrier would make everyone wait for it, which on a busy machine costs whole
    // scheduler time slices per call). State per strip: 0 free, 1 being packed, 2 packed.
    int rstate[GEMM_BF16_RC / 16];
    memset(rstate, 0, sizeof rstate);

    ZC_GB_PRAGMA(omp parallel num_threads(nt) if (nt > 1))
    {
        const int tid = zc_gb_thread_num();
        char *sbuf = sbuf0 + (size_t)tid * pl.str_elems * es;
        float cblk[32 * 32] __attribute__((aligned(64)));
#ifdef ZC_GB_X86
        if (amx) zc_gb_amx_begin();
#endif
        for (int r0 = 0; r0 < rext; r0 += RC) {
            const int rc = zc_gb_min(RC, zc_gb_round32(rext - r0)), nstrips = rc / 16;
            if (r0 > 0) {  // a further pass (rext > RC): everyone is done with the previous block
                ZC_GB_PRAGMA(omp barrier)
                ZC_GB_PRAGMA(omp single)
                memset(rstate, 0, sizeof rstate);
                // (implicit barrier after single)
            }
            const int first = (int)((long)tid * nstrips / nt);
            for (int i = 0; i < nstrips && !adirect; i++) {
                const int t = (first + i) % nstrips;
                int expect = 0;
                if (__atomic_compare_exchange_n(&rstate[t], &expect, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                    el.pack(rbuf + t * rstrip * es, rsrc, rld, rkc, wdirect || !a_res || a_il, rext, K, r0 + 16 * t, 0, nKt);
                    __atomic_store_n(&rstate[t], 2, __ATOMIC_RELEASE);
                }
            }
            for (int t = 0; t < nstrips && !adirect; t++)
                while (__atomic_load_n(&rstate[t], __ATOMIC_ACQUIRE) != 2) zc_gb_pause();
            ZC_GB_PRAGMA(omp for schedule(dynamic, 1) nowait)
            for (int ch = 0; ch < nchunks; ch++) {
                const int s0 = ch * SC, sc = zc_gb_min(SC, zc_gb_round32(sext - s0));
#ifdef ZC_GB_X86
                for (int sb = 0; wdirect && sb < sc; sb += 32) {
                    const char *w = (const char *)B + (size_t)(s0 + sb) * ldb * es;
                    // The block this thread computes next: the chunk's next 32 rows of B, or
                    // after its last, the first of the chunk nt further on (with the dynamic
                    // schedule a guess, right while the threads take turns). (Asking for the
                    // global next 32 rows, as this did, asked for the other thread's rows
                    // after each chunk's last block: its first block came from memory.)
                    const int nxt = sb + 32 < sc ? s0 + sb + 32 : (ch + nt) * SC;
                    // its 32 rows of B, a share during each kernel call (zc_gb_ahead_tick), into L2
                    // (lpr 64-byte lines a row)
                    const int lpr = K * es / 64;
                    const char *wn = nxt < N ? (const char *)B + (size_t)nxt * ldb * es : NULL;
                    ZcGbAhead fw = {wn, (size_t)ldb * es, lpr, 32L * lpr, 0, rc / 32, 0, wn, 0, 0, 0};
                    for (int rb = 0; rb < rc; rb += 32) {
                        float *c = C + (size_t)(r0 + rb) * ldcz + s0 + sb;
                        const int mv = zc_gb_min(32, M - r0 - rb);
                        // The next block's rows of C (two lines each) and of the rounded copy R16
                        // (one), which it writes when its kernel is done: C is usually a fresh
                        // activation (GPT-2's qkv: 2.4 MB), and a store to a line that is not in
                        // the cache waits for the line to be read. Into L2: asked into L1
                        // (PREFETCHW), the lines were pushed out again by the kernel's own 48 KB
                        // of weight rows, and perf put ~30% of the epilogue on stores waiting for
                        // them (12 layers' forwards, one thread, 6 alternating runs: medians 228
                        // -> 216.5 ms). (Not when C is streamed: those stores read nothing.)
                        const int nrb = rb + 32 < rc ? rb + 32 : 0, ncol = rb + 32 < rc ? s0 + sb : nxt;
                        if (!stream && ncol < N)
                            for (int i = 0; i < zc_gb_min(32, M - r0 - nrb); i++) {
                                const size_t o = (size_t)(r0 + nrb + i) * ldcz + ncol;
                                if (r16 != 2) {
                                    __builtin_prefetch(C + o, 0, 2);
                                    __builtin_prefetch(C + o + 16, 0, 2);
                                }
                                if (R16) __builtin_prefetch(R16 + o, 0, 2);
                            }
                        // The bias: the AVX-512 kernels form each block's sums from zero and then
                        // add what the block held (C + sum), so adding the bias on the way out is
                        // the same arithmetic, without a 4 KB fill and its reload per block. AMX
                        // tiles start from what they load: the bias goes in first there.
                        if (bias && amx)
                            for (int i = 0; i < 32; i++)
                                for (int j = 0; j < 32; j++) cblk[i * 32 + j] = bias[s0 + sb + i];
                        else if (acc0) zc_gb_tblock(cblk, c, ldcz, mv, 0, NULL, 0, NULL);
                        const char *pr = rbuf + (size_t)(rb / 16) * rstrip * es;
                        const int acc = acc0 || (bias && amx);
                        el.inplace(w, (size_t)ldb, pr, rstrip, nKt, cblk, 32, 32, 32, acc, zc_gb_ahead_begin(&fw, nKt * ticks));
                        zc_gb_ahead_rest(&fw);
                        zc_gb_tblock(cblk, c, ldcz, mv, stream ? 2 : 1, R16 ? R16 + (size_t)(r0 + rb) * ldcz + s0 + sb : NULL,
                                     r16, bias && !amx ? bias + s0 + sb : NULL);
                    }
                }
                if (wdirect) continue;
#endif
                for (int k0 = 0; k0 < K; k0 += KC) {
                    const int nkt = zc_gb_min(KC / TK, nKt - k0 / TK);
                    const size_t sstrip = (size_t)nkt * TE;
                    if (el.pack2 && !skc && (a_res || a_il))  // (sc is a multiple of 32)
                        for (int t = 0; t < sc / 16; t += 2)
                            el.pack2(sbuf + t * sstrip * es, sstrip, ssrc, sld, sext, K, s0 + 16 * t, k0, nkt);
                    else
                        for (int t = 0; t < sc / 16; t++)
                            el.pack(sbuf + t * sstrip * es, ssrc, sld, skc, a_res || a_il, sext, K, s0 + 16 * t, k0, nkt);
                    const int acc = acc0 || k0 > 0;
                    ZcGbAhead ahead = zc_gb_ahead(ssrc, sld, es, skc, sext, K, KC, SC, s0, k0, nt, (sc / 32) * (rc / 32));
                    for (int sb = 0; sb < sc; sb += 32) {
                        const char *ps = sbuf + (size_t)(sb / 16) * sstrip * es;
                        for (int rb = 0; rb < rc; rb += 32) {
                            ZcGbAhead *pf = zc_gb_ahead_begin(&ahead, nkt * ticks);
                            const char *pr = rbuf + ((size_t)(rb / 16) * rstrip + (size_t)(k0 / TK) * TE) * es;
                            const int row0 = a_res ? r0 + rb : s0 + sb, col0 = a_res ? s0 + sb : r0 + rb;
                            if (row0 >= M || col0 >= N) continue;
                            // acc16: the block's whole sum (one K block) in a local tile, then added
                            float *c = C16 ? cblk : C + (size_t)row0 * ldcz + col0;
                            const size_t ldk = C16 ? 32 : ldcz;
                            const int mv = zc_gb_min(M - row0, C16 ? 32 : M), nv = zc_gb_min(N - col0, C16 ? 32 : N);
                            // The block's 32 rows of C16 lie a row apart in memory (a weight
                            // gradient, read once): ask for them now, so that they arrive while
                            // the kernel computes instead of one miss at a time in the add. Into
                            // L2: the kernel's operands at K = 256 (32 KB) filled L1 and pushed
                            // them out again (perf put a third of the add on its first load; with
                            // PREFETCHT1, a weight gradient's product took ~1.5% less time).
                            // (Not when they are streamed: they are not read at all.)
                            if (C16 && !stream)
                                for (int i = 0; i < zc_gb_min(mv, 32); i++)
                                    __builtin_prefetch(C16 + (size_t)(row0 + i) * ldcz + col0, 0, 2);
                            // Likewise the next block's rows of C (fp32: two lines a row), which
                            // its kernel loads (beta 1, K blocks) or at least stores; into L2 for
                            // the same reason (12 layers' backward-data products, one thread,
                            // medians 232 -> 225.5 ms; an fp32 weight gradient 12.4 -> 11.5 ms).
                            else if (rb + 32 < rc) {
                                const int nrow = a_res ? row0 + 32 : row0, ncol = a_res ? col0 : col0 + 32;
                                if (nrow < M && ncol < N)
                                    for (int i = 0; i < zc_gb_min(M - nrow, 32); i++) {
                                        const float *q = C + (size_t)(nrow + i) * ldcz + ncol;
                                        __builtin_prefetch(q, 0, 2);
                                        __builtin_prefetch(q + 16, 0, 2);
                                    }
                            }
#ifdef ZC_GB_X86
                            if (adirect)
                                el.inplace((const char *)A + ((size_t)(r0 + rb) * lda + k0) * es, (size_t)lda, ps, sstrip, nkt, c,
                                           ldk, mv, nv, acc, pf);
                            else
#endif
                            if (a_res) kern(pr, rstrip, ps, sstrip, nkt, c, ldk, mv, nv, acc, pf);
                            else kern(ps, sstrip, pr, rstrip, nkt, c, ldk, mv, nv, acc, pf);
                            zc_gb_ahead_rest(&ahead);
                            if (C16 && !split) add_bf16(C16 + (size_t)row0 * ldcz + col0, ldcz, cblk, mv, nv, mode16);
                            else if (C16) // (each run of rows not in split in one call: a call per row cost the LM head ~4 ms a step)
                                for (int i = 0, j; i < mv; i = j) {
                                    if (split[row0 + i]) {
                                        memcpy(C32 + (size_t)(row0 + i) * ldc32 + col0, cblk + i * 32, (size_t)nv * sizeof(float));
                                        if (!add16) memset(C16 + (size_t)(row0 + i) * ldcz + col0, 0, (size_t)nv * sizeof(bf16_t));
                                        j = i + 1;
                                        continue;
                                    }
                                    for (j = i + 1; j < mv && !split[row0 + j]; j++) {}
                                    add_bf16(C16 + (size_t)(row0 + i) * ldcz + col0, ldcz, cblk + i * 32, j - i, nv, mode16);
                                }
                        }
                    }
                }
            }
        }
#ifdef ZC_GB_X86
        if (stream) _mm_sfence(); // the streaming stores are weakly ordered: visible before the join
        if (amx) zc_gb_amx_end();
#endif
    }
    (void)amx;
    free(mem);
    // The rounding epilogue where the direct forward did not do it on the way out
    if (r16 && !wdirect) zc_gb_round_rows(C, R16, ldc, M, N, r16, pl.nt);
    return 0;
}

static inline int gemm_bf16_ex(GemmBf16Path path, int transA, int transB, int M, int N, int K,
                               const bf16_t *A, int lda, const bf16_t *B, int ldb, float beta,
                               float *C, int ldc, void *scratch, size_t scratch_bytes) {
    return zc_gb_run(path, 0, transA, transB, M, N, K, A, lda, B, ldb, beta, C, NULL, ldc, NULL, NULL, 0, NULL, NULL, 0, scratch, scratch_bytes);
}

// C (bf16, M x N) = round(beta C + op(A) · op(B)), beta 1 or 0: each element's product summed
// over all of K in fp32, then (beta 1) added to the element widened, and rounded to nearest even
// (f32_to_bf16). That is gemm_bf16_ex with beta 0 into an fp32 buffer followed by that add, bit
// for bit, without the buffer's memory traffic (where K > GEMM_BF16_KC the non-AMX paths sum the
// K blocks in another order than gemm_bf16_ex: this sums all of K in one block). beta 0 only
// stores the rounded sums (C is not read: a gradient's first contribution needs no zeroed
// buffer); any other beta is refused. K = 0 leaves C as it is (beta 1) or zeroes it (beta 0).
static inline int gemm_bf16_acc16(GemmBf16Path path, int transA, int transB, int M, int N, int K,
                                  const bf16_t *A, int lda, const bf16_t *B, int ldb, float beta, bf16_t *C, int ldc,
                                  void *scratch, size_t scratch_bytes) {
    return zc_gb_run(path, 0, transA, transB, M, N, K, A, lda, B, ldb, beta, NULL, C, ldc, NULL, NULL, 0, NULL, NULL, 0, scratch, scratch_bytes);
}
// gemm_bf16_acc16, except that the rows m of C with split[m] != 0 (split: M flags) are set to
// beta C (left as they are, or zeroed) and their fp32 sums stored in C32 (M x N, row stride
// ldc32) instead: for a gradient whose rows still have other contributions to collect in fp32
// (the tied embedding's rows of the batch's tokens) while the rest is final.
static inline int gemm_bf16_acc16_split(GemmBf16Path path, int transA, int transB, int M, int N, int K,
                                        const bf16_t *A, int lda, const bf16_t *B, int ldb, float beta, bf16_t *C, int ldc,
                                        const uint8_t *split, float *C32, int ldc32, void *scratch, size_t scratch_bytes) {
    if (!split) return -1;
    return zc_gb_run(path, 0, transA, transB, M, N, K, A, lda, B, ldb, beta, NULL, C, ldc, split, C32, ldc32, NULL, NULL, 0, scratch, scratch_bytes);
}

static inline int gemm_bf16(int transA, int transB, int M, int N, int K, const bf16_t *A, int lda,
                            const bf16_t *B, int ldb, float beta, float *C, int ldc) {
    return gemm_bf16_ex(GEMM_BF16_AUTO, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc, NULL, 0);
}

// out (N,OC) (+)= inp (N,C) · wᵀ, w (OC,C)
static inline int gemm_bf16_forward(const GemmBf16Ctx *ctx, float *out, const bf16_t *inp,
                                    const bf16_t *w, int N, int C, int OC, float beta) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    return gemm_bf16_ex(ctx->path, 0, 1, N, OC, C, inp, C, w, C, beta, out, OC, ctx->scratch, ctx->scratch_bytes);
}
// out (N,OC) = bias (OC, every row) + inp (N,C) · wᵀ: bit for bit the bias copied into every row
// of out and gemm_bf16_forward with beta 1 (each sum starts from its bias value), without that
// pass over out (the direct forward starts its local blocks' sums from the bias instead of
// loading and transposing out)
static inline int gemm_bf16_forward_bias(const GemmBf16Ctx *ctx, float *out, const bf16_t *inp, const bf16_t *w,
                                         const float *bias, int N, int C, int OC) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    if (!bias) return -1;
    return zc_gb_run(ctx->path, 0, 0, 1, N, OC, C, inp, C, w, C, 0.0f, out, NULL, OC, NULL, NULL, 0, bias, NULL, 0, ctx->scratch,
                     ctx->scratch_bytes);
}
// The forward of a layer whose output is rounded to bf16 (a 16-bit run's activation): out (N,OC)
// = bias + inp (N,C) · wᵀ (bias NULL: the product alone), each value x then rounded: out16 (N,OC;
// NULL: none) = f32_to_bf16(x), and out = bf16_to_f32(f32_to_bf16(x)) (out32 1), or out only
// scratch, its contents unspecified, where nothing reads the fp32 values (out32 0; needs out16).
// Bit for bit gemm_bf16_forward(_bias) followed by that pass over out, which the direct forward
// (GPT-2's shapes: see the driver) does as it stores each block, from registers, and with out32
// 0 without storing the fp32 block at all.
static inline int gemm_bf16_forward_round(const GemmBf16Ctx *ctx, float *out, bf16_t *out16, int out32, const bf16_t *inp,
                                          const bf16_t *w, const float *bias, int N, int C, int OC) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    return zc_gb_run(ctx->path, 0, 0, 1, N, OC, C, inp, C, w, C, 0.0f, out, NULL, OC, NULL, NULL, 0, bias, out16, out32 ? 1 : 2,
                     ctx->scratch, ctx->scratch_bytes);
}
// dinp (N,C) (+)= dout (N,OC) · w
static inline int gemm_bf16_backward_data(const GemmBf16Ctx *ctx, float *dinp, const bf16_t *dout,
                                          const bf16_t *w, int N, int C, int OC, float beta) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    return gemm_bf16_ex(ctx->path, 0, 0, N, C, OC, dout, OC, w, C, beta, dinp, C, ctx->scratch, ctx->scratch_bytes);
}
// dw (OC,C) (+)= doutᵀ · inp   (sum over the N tokens; beta = 1 accumulates gradients)
static inline int gemm_bf16_backward_weight(const GemmBf16Ctx *ctx, float *dw, const bf16_t *dout,
                                            const bf16_t *inp, int N, int C, int OC, float beta) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    return gemm_bf16_ex(ctx->path, 1, 0, OC, C, N, dout, OC, inp, C, beta, dw, C, ctx->scratch, ctx->scratch_bytes);
}

// dw (OC,C) bf16 = round(beta dw + doutᵀ · inp): the weight gradient rounded straight into 16
// bits (beta 1 accumulates, beta 0 writes the first contribution)
static inline int gemm_bf16_backward_weight_acc16(const GemmBf16Ctx *ctx, bf16_t *dw, const bf16_t *dout,
                                                  const bf16_t *inp, int N, int C, int OC, float beta) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    return gemm_bf16_acc16(ctx->path, 1, 0, OC, C, N, dout, OC, inp, C, beta, dw, C, ctx->scratch, ctx->scratch_bytes);
}

// The same with the rows of split (OC flags) stored in fp32 into dw32 (OC,C) instead
static inline int gemm_bf16_backward_weight_split(const GemmBf16Ctx *ctx, bf16_t *dw, const uint8_t *split, float *dw32,
                                                  const bf16_t *dout, const bf16_t *inp, int N, int C, int OC, float beta) {
    GemmBf16Ctx d = {GEMM_BF16_AUTO, NULL, 0};
    if (!ctx) ctx = &d;
    return gemm_bf16_acc16_split(ctx->path, 1, 0, OC, C, N, dout, OC, inp, C, beta, dw, C, split, dw32, C, ctx->scratch,
                                 ctx->scratch_bytes);
}

// ----------------------------------------------------------------------------
// fp32 operands: the same driver with fp32 tiles and an FMA micro-kernel (AVX-512 only)

// C (M,N) = beta * C + op(A) · op(B), A and B fp32: gemm_bf16_ex's contract and driver (scratch,
// threads, determinism), each C element summed in fp32 over k in order within a K block
// (vfmadd: one rounding per product and sum), the K blocks' sums added to C in order. -1 where
// gemm_f32_supported() says no.
static inline int gemm_f32_ex(int transA, int transB, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                              float beta, float *C, int ldc, void *scratch, size_t scratch_bytes) {
    return zc_gb_run(GEMM_BF16_AUTO, 1, transA, transB, M, N, K, A, lda, B, ldb, beta, C, NULL, ldc, NULL, NULL, 0, NULL,
                     NULL, 0, scratch, scratch_bytes);
}
// The layer wrappers, as gemm_bf16's (ctx: its scratch, or NULL; its path must be GEMM_BF16_AUTO).
static inline int zc_gb_f32_layer(const GemmBf16Ctx *ctx, int transA, int transB, int M, int N, int K, const float *A, int lda,
                                  const float *B, int ldb, float beta, float *C, int ldc, const float *bias) {
    if (ctx && ctx->path != GEMM_BF16_AUTO) return -1;
    return zc_gb_run(GEMM_BF16_AUTO, 1, transA, transB, M, N, K, A, lda, B, ldb, beta, C, NULL, ldc, NULL, NULL, 0, bias,
                     NULL, 0, ctx ? ctx->scratch : NULL, ctx ? ctx->scratch_bytes : 0);
}
// out (N,OC) (+)= inp (N,C) · wᵀ, w (OC,C)
static inline int gemm_f32_forward(const GemmBf16Ctx *ctx, float *out, const float *inp, const float *w, int N, int C, int OC,
                                   float beta) {
    return zc_gb_f32_layer(ctx, 0, 1, N, OC, C, inp, C, w, C, beta, out, OC, NULL);
}
// out (N,OC) = bias (OC, every row) + inp (N,C) · wᵀ (bit for bit the bias in every row and beta 1)
static inline int gemm_f32_forward_bias(const GemmBf16Ctx *ctx, float *out, const float *inp, const float *w, const float *bias,
                                        int N, int C, int OC) {
    return bias ? zc_gb_f32_layer(ctx, 0, 1, N, OC, C, inp, C, w, C, 0.0f, out, OC, bias) : -1;
}
// dinp (N,C) (+)= dout (N,OC) · w
static inline int gemm_f32_backward_data(const GemmBf16Ctx *ctx, float *dinp, const float *dout, const float *w, int N, int C,
                                         int OC, float beta) {
    return zc_gb_f32_layer(ctx, 0, 0, N, C, OC, dout, OC, w, C, beta, dinp, C, NULL);
}
// dw (OC,C) (+)= doutᵀ · inp   (beta 0: the first contribution, dw not read)
static inline int gemm_f32_backward_weight(const GemmBf16Ctx *ctx, float *dw, const float *dout, const float *inp, int N, int C,
                                           int OC, float beta) {
    return zc_gb_f32_layer(ctx, 1, 0, OC, C, N, dout, OC, inp, C, beta, dw, C, NULL);
}
// Scratch that serves all three fp32 products of a linear layer (as gemm_bf16_linear_scratch_bytes).
static inline size_t gemm_f32_linear_scratch_bytes(int N, int C, int OC, int threads) {
    return zc_gb_linear_scratch(4, N, C, OC, threads);
}

#endif  // ZC_GEMM_BF16_H
