// gpu/colsum.cuh: the GPU trainer's column sums: LayerNorm's backward (input gradient, dw, db)
// and matmul bias gradients, deterministic (fixed summation order, no atomics) and sized to keep
// HBM busy (issue 39). Device code only; gpu/matmul.cuh's column_grads picks the grids and
// launches them. Each kernel's CPU twin is train_gpt_cpu.c's (test_gpu_emu); test_gpu_colsum
// checks them against an fp64 numpy reference at awkward shapes.
#ifndef GPU_COLSUM_CUH
#define GPU_COLSUM_CUH
#include "gpu/kernels.cuh"

// LayerNorm's backward and the column sums of parameter gradients (LayerNorm dw/db, matmul bias
// gradients), deterministic and without atomics, in two kernels each: a partials kernel gives
// each block a range of rows and writes that range's column sums in fp32 to a scratch buffer (one
// row of partial sums per block); column_finish_kernel adds the blocks' partials in block order
// and rounds each sum into the gradient once. gpu/matmul.cuh's column_grads picks the grids.
//   LayerNorm: column_partials_kernel (x != NULL), the input gradient in the same pass.
//   Bias: bias_partials_kernel, a slab of 32 x V columns per block of CS_BIAS_WARPS warps.
// The partials cost parts x columns x 4 bytes each way (at d12, B=16, T=1024 on 132 SMs a
// LayerNorm's 512 x 1536 are 3.1 MB, 6% of the 101 MB its backward moves; a bias's are under
// 0.6 MB, 2% of the dout it reads at C = 768).
#define CS_TILE 8       // rows a thread has in flight at a time (16-byte loads); one per warp in the LayerNorm part
#define CS_LN_THREADS 256
#define CS_LN_BLOCKS_PER_SM 4 // blocks resident per SM (__launch_bounds__ caps the registers at 64 to fit)
#define CS_LN_MIN_ROWS 16     // a LayerNorm block's rows at least: its partials (2C fp32) are 2 / rows of its traffic

// column_partials_kernel (the LayerNorm's): rows [blockIdx.x * rows, + rows) of N; columns by
// slabs of blockDim.x * V (grid.y = ceil(C / (blockDim.x * V)) slabs) (V = VEC where C % VEC == 0
// and every pointer is 16-byte aligned, else 1). CS_LN_THREADS threads.
//   dinp (N,C) += through the normalisation (ACCUMULATES: the input is the residual stream), one
//   warp per row over the whole row (the slab-0 blocks only), two passes as the CPU (the row's
//   two sums, then the update; the second pass reads the row from L1); and partial
//   (gridDim.x, 2C) = this block's [sum_n (x - mean) * rstd * dout | sum_n dout] over its rows.
// The column sums: the slab's P packs of V columns (P = blockDim.x but in the last slab) are
// shared by G = blockDim.x / P groups of P threads (at C = 768, V = 8: P = 96, G = 2, so 192
// threads sum rather than 96): thread g * P + i owns pack i, columns c0 = (y * blockDim.x + i) * V
// .. c0 + V - 1, and takes the tile's rows t0 + g, t0 + g + G, ... in increasing order, its loads
// unrolled (16-byte loads in flight for ILP), into V fp32 accumulators per sum. At the end the
// groups meet in shared memory and group 0 adds groups 1 .. G-1 in order: the order is fixed, so
// the partials are bitwise reproducible. The warps of the LayerNorm part are independent (whole
// warps enter a row, so the shuffles see full warps). Threads past the G groups sum nothing but
// never return early: every thread reaches the one __syncthreads. Bounds: rows clamp to N,
// columns to C (c0 + V <= C as C % V == 0).
// Bytes: dout, x and dinp read once (the column sums' second reading of dout and x comes from
// L1/L2), dinp written once, w read per row from L1: 4 N C floatX from HBM, plus the partials.
template <int V>
static __global__ void __launch_bounds__(CS_LN_THREADS, CS_LN_BLOCKS_PER_SM)
column_partials_kernel(float *__restrict__ partial, floatX *__restrict__ dinp, const floatX *__restrict__ dout,
                       const floatX *__restrict__ x, const floatX *__restrict__ w, const float *__restrict__ mean,
                       const float *__restrict__ rstd, int N, int C, int rows) {
    int r0 = blockIdx.x * rows, r1 = min(r0 + rows, N);
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP, nwarps = blockDim.x / WARP;
    int packs = (C + V - 1) / V - blockIdx.y * blockDim.x, P = min(packs, (int)blockDim.x), G = blockDim.x / P;
    int grp = threadIdx.x / P, pi = threadIdx.x % P, c0 = (blockIdx.y * blockDim.x + pi) * V;
    __shared__ float sh[CS_LN_THREADS * 2 * V]; // groups 1 .. G-1: (G - 1) * P <= blockDim.x threads' 2V sums
    float aw[V], ab[V];
#pragma unroll
    for (int k = 0; k < V; k++) aw[k] = ab[k] = 0.0f;
    for (int t0 = r0; t0 < r1; t0 += CS_TILE) {
        int t1 = min(t0 + CS_TILE, r1);
        if (blockIdx.y == 0) // the LayerNorm's input gradient, a warp per row (warp-uniform branch)
            for (int row = t0 + warp; row < t1; row += nwarps) {
                const floatX *xr = x + (size_t)row * C, *dr = dout + (size_t)row * C;
                floatX *di = dinp + (size_t)row * C;
                float m = mean[row], s = rstd[row], dm = 0.0f, dnm = 0.0f;
#pragma unroll 2
                for (int c = lane * V; c < C; c += WARP * V) {
                    Pack<V> wv = load_pack<V>(w + c), dv = load_pack<V>(dr + c), xv = load_pack<V>(xr + c);
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        float dnorm = to_float(wv.v[k]) * to_float(dv.v[k]);
                        dm += dnorm;
                        dnm += dnorm * (to_float(xv.v[k]) - m) * s;
                    }
                }
                dm = warp_sum(dm) / C;
                dnm = warp_sum(dnm) / C;
                for (int c = lane * V; c < C; c += WARP * V) {
                    Pack<V> wv = load_pack<V>(w + c), dv = load_pack<V>(dr + c), xv = load_pack<V>(xr + c),
                            iv = load_pack<V>(di + c);
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        float norm = (to_float(xv.v[k]) - m) * s;
                        iv.v[k] = to_floatX(to_float(iv.v[k]) + (to_float(wv.v[k]) * to_float(dv.v[k]) - dm - norm * dnm) * s);
                    }
                    store_pack<V>(di + c, iv);
                }
            }
        if (grp < G) { // this thread's columns over its group's rows of the tile, in row order
#pragma unroll
            for (int i = 0; i < CS_TILE; i++) {
                int row = t0 + grp + i * G;
                if (row < t1) {
                    Pack<V> dv = load_pack<V>(dout + (size_t)row * C + c0), xv = load_pack<V>(x + (size_t)row * C + c0);
                    float m = mean[row], s = rstd[row];
#pragma unroll
                    for (int k = 0; k < V; k++) {
                        float d = to_float(dv.v[k]);
                        ab[k] += d;
                        aw[k] += (to_float(xv.v[k]) - m) * s * d;
                    }
                }
            }
        }
    }
    if (grp >= 1 && grp < G) {
        float *q = sh + ((grp - 1) * P + pi) * 2 * V;
#pragma unroll
        for (int k = 0; k < V; k++) { q[k] = aw[k]; q[V + k] = ab[k]; }
    }
    __syncthreads();
    if (grp == 0) {
        for (int g = 1; g < G; g++) {
            const float *q = sh + ((g - 1) * P + pi) * 2 * V;
#pragma unroll
            for (int k = 0; k < V; k++) { aw[k] += q[k]; ab[k] += q[V + k]; }
        }
        float *p = partial + (size_t)blockIdx.x * 2 * C;
#pragma unroll
        for (int k = 0; k < V; k++) {
            p[c0 + k] = aw[k];
            p[C + c0 + k] = ab[k];
        }
    }
}

// bias_partials_kernel: partial (gridDim.x, C) = the column sums of dout (N,C) over the block's
// rows [blockIdx.x * rows, + rows), fp32. A block is CS_BIAS_WARPS warps over one slab of
// WARP * V columns (grid.y = ceil(C / (WARP * V)) slabs): lane l owns the V columns
// c0 = (y * WARP + l) * V .. c0 + V - 1 (V = VEC where C % VEC == 0 and dout is 16-byte aligned,
// else 1), and warp w takes the rows r0 + w, r0 + w + CS_BIAS_WARPS, ... in increasing order,
// CS_TILE 16-byte loads issued before any is summed (full tiles without a per-row test; the last,
// partial tile with one), into V fp32 accumulators. The warps' sums then meet in shared memory
// and thread j adds column j's CS_BIAS_WARPS sums in warp order: the order is fixed, so the
// partials are bitwise reproducible; no atomics. Bytes: N C floatX read once, parts x C fp32
// written. Occupancy: CS_BIAS_BLOCKS_PER_SM blocks of 8 warps per SM (__launch_bounds__ caps the
// registers at 64 so that 32 warps fit), each thread with CS_TILE x 16 bytes in flight.
// Bounds: rows clamp to N; a lane past C (only in the last slab) loads nothing but reaches the
// __syncthreads; columns past C are not written (c0 + V <= C when c0 < C, as C % V == 0).
#define CS_BIAS_WARPS 8
#define CS_BIAS_BLOCKS_PER_SM 4
template <int V>
static __global__ void __launch_bounds__(CS_BIAS_WARPS * WARP, CS_BIAS_BLOCKS_PER_SM)
bias_partials_kernel(float *__restrict__ partial, const floatX *__restrict__ dout, int N, int C, int rows) {
    __shared__ float sh[CS_BIAS_WARPS][WARP * V];
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int r1 = min(blockIdx.x * rows + rows, N), c0 = (blockIdx.y * WARP + lane) * V;
    float a[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = 0.0f;
    if (c0 < C) {
        int row = blockIdx.x * rows + warp;
        const size_t step = (size_t)CS_BIAS_WARPS * C;
        const floatX *p = dout + (size_t)row * C + c0; // only read while row < r1
        for (; row + (CS_TILE - 1) * CS_BIAS_WARPS < r1; row += CS_TILE * CS_BIAS_WARPS, p += CS_TILE * step) {
            Pack<V> v[CS_TILE];
#pragma unroll
            for (int i = 0; i < CS_TILE; i++) v[i] = load_pack<V>(p + i * step);
#pragma unroll
            for (int i = 0; i < CS_TILE; i++)
#pragma unroll
                for (int k = 0; k < V; k++) a[k] += to_float(v[i].v[k]);
        }
        if (row < r1) { // fewer than CS_TILE rows left for this warp
            Pack<V> v[CS_TILE];
#pragma unroll
            for (int i = 0; i < CS_TILE; i++)
                if (row + i * CS_BIAS_WARPS < r1) v[i] = load_pack<V>(p + i * step);
#pragma unroll
            for (int i = 0; i < CS_TILE; i++)
                if (row + i * CS_BIAS_WARPS < r1)
#pragma unroll
                    for (int k = 0; k < V; k++) a[k] += to_float(v[i].v[k]);
        }
    }
#pragma unroll
    for (int k = 0; k < V; k++) sh[warp][lane * V + k] = a[k];
    __syncthreads();
    for (int j = threadIdx.x; j < WARP * V; j += blockDim.x) {
        int c = blockIdx.y * WARP * V + j;
        if (c < C) {
            float t = 0.0f;
#pragma unroll
            for (int w = 0; w < CS_BIAS_WARPS; w++) t += sh[w][j];
            partial[(size_t)blockIdx.x * C + c] = t;
        }
    }
}

// column_finish_kernel: the gradients (dw (C) then db (C) when dw != NULL: 2C columns; db (C)
// alone otherwise) += the sums over `parts` rows of partial (parts, columns), fp32, one rounding.
// A CS_FINISH_X x CS_FINISH_Y block per CS_FINISH_X columns (grid ceil(columns / CS_FINISH_X),
// 96 blocks for 768 columns): thread (tx, ty) adds rows ty, ty + CS_FINISH_Y, ... of column tx,
// four loads in flight (a warp reads four 32-byte sectors), then thread (tx, 0) adds the
// CS_FINISH_Y sums in order from shared memory: the order is fixed. Bytes: parts x columns fp32
// read, the gradient read and written. Threads past the last column add nothing but reach the
// __syncthreads.
#define CS_FINISH_X 8
#define CS_FINISH_Y 32
static __global__ void __launch_bounds__(CS_FINISH_X * CS_FINISH_Y)
column_finish_kernel(floatX *dw, floatX *db, const float *__restrict__ partial, int parts, int C) {
    __shared__ float sh[CS_FINISH_Y][CS_FINISH_X + 1];
    int tx = threadIdx.x, ty = threadIdx.y, cols = dw ? 2 * C : C, j = blockIdx.x * CS_FINISH_X + tx;
    float a = 0.0f;
    if (j < cols) {
        int p = ty;
        for (; p + 3 * CS_FINISH_Y < parts; p += 4 * CS_FINISH_Y) {
            float v0 = partial[(size_t)p * cols + j], v1 = partial[(size_t)(p + CS_FINISH_Y) * cols + j],
                  v2 = partial[(size_t)(p + 2 * CS_FINISH_Y) * cols + j], v3 = partial[(size_t)(p + 3 * CS_FINISH_Y) * cols + j];
            a += v0; a += v1; a += v2; a += v3;
        }
        for (; p < parts; p += CS_FINISH_Y) a += partial[(size_t)p * cols + j];
    }
    sh[ty][tx] = a;
    __syncthreads();
    if (ty == 0 && j < cols) {
        float t = 0.0f;
        for (int k = 0; k < CS_FINISH_Y; k++) t += sh[k][tx];
        floatX *g = dw && j < C ? dw + j : db + (dw ? j - C : j);
        *g = to_floatX(to_float(*g) + t);
    }
}

#endif // GPU_COLSUM_CUH
