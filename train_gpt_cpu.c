// train_gpt_cpu.c: GPT-2 training on the CPU, in one file you can read top to bottom.
//
// Sections: kernels (forward and backward of every op, OpenMP + OpenBLAS), the MPI backend
// that performs zero.h's collectives, the model's storage (activations, gradient norm, AdamW
// over this rank's partition, parameters in and out), and main. What is not CPU-specific is
// shared with the GPU trainer: the passes over the kernels (model.h), the run with its loop
// (trainer.h), ZeRO (zero.h), the model description (gpt2.h), options, data, checkpoints.
//
// It is also the oracle: test/reference_gpt2.py checks its loss and every gradient against an
// independent PyTorch implementation, and every kernel's backward is checked against finite
// differences (test/test_kernels.c, which includes this file with TESTING defined).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <strings.h>
#include <unistd.h>
#include <omp.h>
#include <cblas.h>
#include <mpi.h>

#include "core/gpt2.h"
#include "run/config.h"
#include "core/optimizer.h"
#include "core/optimizer_engine.h"
#include "zero.h"
#include "run/planner.h"
#include "dataloader.h"
#include "data/tokenizer.h"
#include "run/ds_config.h"
#include "run/checkpoint.h"
#include "mixed_precision.h"
#include "cpu/gemm_bf16.h"
#include "cpu/workspace.h"
#include "cpu/openblas.h"
#include "cpu/head_gemm.h"

// ----------------------------------------------------------------------------------------
// Utilities

// Zeroed memory for the model's buffers, page-aligned. Those of 2 MB and more are 2 MB-aligned and asked
// to be backed by transparent huge pages: the kernels stream through hundreds of MB (AdamW,
// the LM head's weights and logits, whose rows lie 200 KB apart) and with 4 KB pages spend a
// good part of that in TLB misses. (A hint: where the kernel says no, pages stay 4 KB.)
#define HUGE_PAGE ((size_t)2 << 20)
static void *xcalloc_bytes(size_t bytes) {
    void *p = NULL;
    if (bytes < HUGE_PAGE) { // page-aligned: zero.h reads and writes NVMe with direct I/O into these
        if (posix_memalign(&p, 4096, bytes ? bytes : 1) != 0) {
            fprintf(stderr, "error: out of memory allocating %zu bytes\n", bytes);
            exit(1);
        }
    } else {
        size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
        if (posix_memalign(&p, HUGE_PAGE, rounded) != 0) {
            fprintf(stderr, "error: out of memory allocating %zu bytes\n", bytes);
            exit(1);
        }
        madvise(p, rounded, MADV_HUGEPAGE);
    }
    memset(p, 0, bytes);
    return p;
}
static float *xcalloc_floats(size_t n) { return (float *)xcalloc_bytes(n * sizeof(float)); }

// ----------------------------------------------------------------------------------------
// Kernels. Shapes: B batch, T time, C channels, NH heads, V vocabulary (Vp padded).
// Backward kernels ACCUMULATE (+=) into parameter gradients, because gradients accumulate
// over micro-steps, and OVERWRITE activation gradients unless their comment says otherwise.
// The one exception is matmul_backward's weight gradient in a range the context marks fresh.

// The kernels' context. bf16 runs' matmuls (below) round their operands into a staging area,
// the trainer's (gpt2_build sizes it: cpu_workspace_bytes), and so is gemm_bf16's packing
// scratch, which holds enough for every matmul of the model, so that gemm_bf16 never
// allocates on its own. Both reach the matmuls through the context.
// Weight gradients skip the fp32 accumulator in bf16 runs on gemm_bf16: each weight's product is
// rounded straight into its 16-bit gradient (gemm_bf16_acc16), bit for bit what accumulating it
// in fp32 and rounding that into the 16-bit gradient gives (one product per weight per
// micro-step), without writing, zeroing and re-reading 4 bytes of fp32 per weight. The tied
// embedding's rows of the batch's tokens are the exception: the token lookup's gradient adds to
// them at the end of the backward, so the LM head leaves their fp32 sums in the accumulator
// (gemm_bf16_acc16_split), and only those rows are rounded in when the unit is done.
// And a unit's gradient on its first micro-step of an optimizer step holds nothing yet (zero.h
// does not zero it: zero_grads_fresh), so its weight products store their sums instead of adding
// them to a zeroed buffer (gemm_bf16 with beta 0), which saves zeroing the gradient and
// reading it back, ~all of its bytes; the rest of a fresh unit is zeroed by gpt2_unit_grads, or
// (16-bit) stored rather than added by gpt2_unit_grads_done.
// While a unit's backward runs, the context describes its gradient as the kernels see it,
// [acc, acc + n) (set by gpt2_unit_grads, cleared by gpt2_unit_grads_done): entry 0 the
// embeddings, entry 1 the layer (or final LayerNorm) in progress. fresh: the products overwrite
// it. g16: the 16-bit gradient it maps onto when the weights go straight into 16 bits (then the
// embeddings' entry is wte only, with `rows`: one flag per vocabulary row, set for the batch's
// tokens), else NULL.
typedef struct { const float *acc; size_t n; int fresh; bf16_t *g16; const uint8_t *rows; } GradsOpen;

// The kernels' per-run context (model.h hands it to every kernel; most need none of it).
typedef struct {
    bf16_t *staging;             // bf16 runs: the matmuls' rounded operands
    size_t staging_elems;
    int via_sgemm;               // bf16 products through sgemm on rounded operands (no AMX/AVX512-BF16)
    int f32_gemm;                // fp32 products (fp32 and fp16 runs) on gemm_f32 (AVX-512); else OpenBLAS sgemm
    int head_simd;               // the attention heads' products on cpu/head_gemm.h's AVX-512 kernel; else sgemm
    GemmBf16Ctx gemm;            // gemm_bf16's path and packing scratch
    GradsOpen grads[2];          // the gradients the backward is writing, by range (above)
    // bf16 runs on gemm_bf16: the layer in progress's fp32 activations whose bf16 values are
    // stored already (what the run keeps in 16 bits, by A_* index; f32 NULL: none). A matmul
    // whose input is one of them reads the 16-bit copy instead of rounding the input again.
    struct { const float *f32; const bf16_t *x16; } stored16[NUM_ACTIVATIONS];
    // bf16 runs on gemm_bf16: the fp32 tensor whose gradient the loss left in the staging as the
    // LM head backward's bf16 dout (the logits; NULL: none). Any matmul clears it: it reuses the
    // staging.
    const float *dout16_in_staging;
    // bf16 runs on gemm_bf16, while a layer's forward runs: the layer's tensors that are only
    // ever read through their stored 16 bits (reads_stored16_only; by A_* index, f32 NULL where
    // not), which gpt2_act_rounded would narrow into x16 after the kernel that produced them.
    // A kernel that finds its output here writes x16 itself and not the fp32 tensor at all (the
    // forward matmul of fc, 3 MB of fp32 a layer at B=4, T=64, and GELU) and sets done, and
    // gpt2_act_rounded leaves it at that.
    struct { float *f32; bf16_t *x16; int done; } out16[NUM_ACTIVATIONS];
    // bf16 runs: GELU of every bf16 value, rounded to bf16, and GELU's derivative of every bf16
    // value (65536 entries each, indexed by the bits; gelu_tables_alloc), else NULL. GELU reads
    // them wherever stored16 holds its input (only bf16 runs have stored copies).
    bf16_t *gelu16;
    float *gelu_grad32;
} CpuKernels;

// The out16 entry of a tensor a kernel is about to write (p), or -1: the kernel writes the fp32
// tensor, and gpt2_act_rounded rounds or narrows it afterwards
static int out16_index(const CpuKernels *k, const float *p) {
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (k->out16[i].f32 == p) return i;
    return -1;
}

// out (B,T,C) = wte[inp[b,t]] + wpe[t]; inp (B,T) token ids; wte (Vp,C); wpe (maxT,C)
static void encoder_forward(CpuKernels *k, float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
    (void)k;
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)inp[b * T + t] * C, *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
}

// dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout
static void encoder_backward(CpuKernels *k, float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
    (void)k;
    // Parallel over channel blocks: two positions with the same token then never race.
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 32) {
        int c1 = c0 + 32 < C ? c0 + 32 : C;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                float *we = dwte + (size_t)inp[b * T + t] * C, *pe = dwpe + (size_t)t * C;
                for (int c = c0; c < c1; c++) { we[c] += d[c]; pe[c] += d[c]; }
            }
    }
}

// out (N,C) = (inp - mean) * rstd * w + b per row; mean, rstd (N) kept for the backward
static void layernorm_forward(CpuKernels *k, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
    (void)k;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float m = 0.0f, v = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float s = 1.0f / sqrtf(v / C + 1e-5f);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * w[c] + b[c];
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp (N,C) += through the normalisation; dw, db (C) += ; dout (N,C)
// dinp accumulates because the LayerNorm input is the residual stream, whose gradient sums.
static void layernorm_backward(CpuKernels *k, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C) {
    (void)k;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], s = rstd[n], dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int c = 0; c < C; c++) {
            float dnorm = w[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * (x[c] - m) * s;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        float *di = dinp + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - m) * s;
            di[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    // Parameter gradients sum over rows: parallel over channel blocks, rows inner.
#pragma omp parallel for
    for (int c0 = 0; c0 < C; c0 += 32) {
        int c1 = c0 + 32 < C ? c0 + 32 : C;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            for (int c = c0; c < c1; c++) {
                dw[c] += (x[c] - m) * s * d[c];
                db[c] += d[c];
            }
        }
    }
}

// Matmuls. fp32 and fp16 runs multiply in fp32 (fp16 values widen exactly): gemm_f32 (gemm_bf16.h's
// driver with an FMA kernel) where the CPU has AVX-512, else OpenBLAS sgemm; ZEROC_F32_MATMUL=sgemm
// chooses OpenBLAS anywhere (the tests compare the two). gemm_f32 writes a fresh weight gradient
// with beta 0 (the context's `fresh`), so that nothing zeroes it first. bf16 runs pass w16, the weight's bf16 copy, and multiply bf16 x bf16 -> fp32: the activation
// operands are rounded to bf16 into the staging area on the way (the activations' 16-bit
// storage holds the same values), the products are exact and accumulate in fp32. That is
// gemm_bf16.h on AMX tiles or AVX512-BF16 where the CPU has them; elsewhere (its scalar path is
// ~6x slower than sgemm) the same products through sgemm: the rounded operands as fp32 in the
// same staging bytes (in row blocks where they do not fit at once) against the fp32 view of the
// weights. ZEROC_BF16_MATMUL=sgemm chooses that fallback anywhere (the tests compare the two).
static const GradsOpen *grads_open_of(const CpuKernels *k, const float *dw) {
    for (int i = 0; i < 2; i++) {
        uintptr_t at = (uintptr_t)dw, lo = (uintptr_t)k->grads[i].acc;
        if (k->grads[i].acc && at >= lo && at < lo + k->grads[i].n * sizeof(float)) return &k->grads[i];
    }
    return NULL;
}

// The stored bf16 copy of activation p, or NULL
static const bf16_t *stored_bf16(const CpuKernels *k, const float *p) {
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (k->stored16[i].f32 == p) return k->stored16[i].x16;
    return NULL;
}

static void die_gemm(void) { fprintf(stderr, "error: gemm_bf16 refused its arguments\n"); exit(1); }
// The workspace's scratch must serve every call (else gemm_bf16 would allocate memory that the
// accounting does not see): a call it would not serve is a bug in cpu_bf16_matmul_scratch_bytes.
static void check_gemm_scratch(const CpuKernels *k, size_t need) {
    if (need <= k->gemm.scratch_bytes) return;
    fprintf(stderr, "error: a matmul needs %zu bytes of scratch, the workspace holds %zu\n", need, k->gemm.scratch_bytes);
    exit(1);
}

// dst = src rounded to bf16 and widened again: bf16 values in fp32 form (n)
static void round_to_bf16(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
}

// out (N,OC) = inp (N,C) . w^T + bias, w (OC,C) as in PyTorch's Linear; bias (OC) or NULL;
// w16: w in bf16, or NULL.
static void matmul_forward(CpuKernels *k, float *out, const float *inp, const float *w, const void *w16, const float *bias,
                           int N, int C, int OC) {
    if (w16 && !k->via_sgemm) { // (each sum starts from its bias, as below)
        const bf16_t *inp16 = stored_bf16(k, inp);
        const int o16 = out16_index(k, out); // (its bf16 values only, as each block is stored: out16)
        k->dout16_in_staging = NULL;
        if (!inp16) f32_to_bf16_array(k->staging, inp, (size_t)N * C), inp16 = k->staging;
        check_gemm_scratch(k, gemm_bf16_scratch_bytes_t(0, 1, N, OC, C));
        if (o16 >= 0) {
            if (gemm_bf16_forward_round(&k->gemm, out, k->out16[o16].x16, 0, inp16, (const bf16_t *)w16, bias, N, C, OC))
                die_gemm();
            k->out16[o16].done = 1;
        } else if (bias ? gemm_bf16_forward_bias(&k->gemm, out, inp16, (const bf16_t *)w16, bias, N, C, OC)
                        : gemm_bf16_forward(&k->gemm, out, inp16, (const bf16_t *)w16, N, C, OC, 0.0f))
            die_gemm();
        return;
    }
    if (!w16 && k->f32_gemm) {
        check_gemm_scratch(k, gemm_f32_scratch_bytes(0, 1, N, OC, C));
        if (bias ? gemm_f32_forward_bias(&k->gemm, out, inp, w, bias, N, C, OC) : gemm_f32_forward(&k->gemm, out, inp, w, N, C, OC, 0.0f))
            die_gemm();
        return;
    }
    if (bias) { // start from the bias, and let the product add to it
#pragma omp parallel for
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    }
    if (w16) { // (N*C floats always fit: the staging holds N*5C bf16)
        round_to_bf16((float *)k->staging, inp, (size_t)N * C);
        inp = (const float *)k->staging;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
}

// dbias (OC) += the column sums of dout (N,OC), over rows in order, each thread owning one
// contiguous range of columns (whole 64-byte lines) and reading its part of every row in turn:
// long runs the prefetchers follow, where narrow column blocks read 256 bytes of each row
// several KB apart. With dout16 (else NULL), dout16 (N,OC) = dout rounded to bf16 in the same pass.
static void round_bf16_sum_columns(bf16_t *dout16, float *dbias, const float *dout, int N, int OC) {
#pragma omp parallel if ((size_t)N * OC >= ZC_MP_OMP_MIN)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int per = ((OC + nt - 1) / nt + 15) / 16 * 16;
        int o0 = t * per, o1 = o0 + per < OC ? o0 + per : OC;
        for (int n = 0; n < N && o0 < o1; n++) {
            const float *d = dout + (size_t)n * OC;
            if (dout16) zc_f32_to_bf16_block(dout16 + (size_t)n * OC + o0, d + o0, (size_t)(o1 - o0));
            for (int o = o0; o < o1; o++) dbias[o] += d[o];
        }
    }
}

// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += dout^T . inp (= where the context marks dw fresh);
// dbias (OC) += column sums of dout
static void matmul_backward(CpuKernels *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, const void *w16, int N, int C, int OC) {
    const GradsOpen *gu = grads_open_of(k, dw);
    const float beta = gu && gu->fresh ? 0.0f : 1.0f;
    if (w16 && !k->via_sgemm) {
        bf16_t *dout16 = k->staging;
        const bf16_t *inp16 = stored_bf16(k, inp);
        int rounded = !dbias && k->dout16_in_staging == dout; // (the loss's, below)
        k->dout16_in_staging = NULL;
        if (dbias) round_bf16_sum_columns(dout16, dbias, dout, N, OC);
        else if (!rounded) f32_to_bf16_array(dout16, dout, (size_t)N * OC);
        if (!inp16) f32_to_bf16_array(k->staging + (size_t)N * OC, inp, (size_t)N * C), inp16 = k->staging + (size_t)N * OC;
        check_gemm_scratch(k, gemm_bf16_scratch_bytes_t(0, 0, N, C, OC));
        if (gemm_bf16_backward_data(&k->gemm, dinp, dout16, (const bf16_t *)w16, N, C, OC, 0.0f)) die_gemm();
        const GradsOpen *d = gu && gu->g16 ? gu : NULL;
        check_gemm_scratch(k, d ? gemm_bf16_acc16_scratch_bytes(OC, C, N) : gemm_bf16_scratch_bytes(OC, C, N));
        if (d && d->rows) { // the LM head: the batch's rows stay in fp32
            if (gemm_bf16_backward_weight_split(&k->gemm, d->g16 + (dw - d->acc), d->rows, dw, dout16, inp16, N, C, OC, beta))
                die_gemm();
        } else if (d) {
            if (gemm_bf16_backward_weight_acc16(&k->gemm, d->g16 + (dw - d->acc), dout16, inp16, N, C, OC, beta)) die_gemm();
        } else if (gemm_bf16_backward_weight(&k->gemm, dw, dout16, inp16, N, C, OC, beta)) die_gemm();
    } else if (w16) { // rows of dout and inp rounded, as many as fit in the staging's bytes as fp32
        int rows = (int)(k->staging_elems / 2 / ((size_t)OC + C));
        for (int r0 = 0; r0 < N; r0 += rows) {
            int r = N - r0 < rows ? N - r0 : rows;
            float *d32 = (float *)k->staging, *i32 = d32 + (size_t)r * OC;
            round_to_bf16(d32, dout + (size_t)r0 * OC, (size_t)r * OC);
            round_to_bf16(i32, inp + (size_t)r0 * C, (size_t)r * C);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, C, OC, 1.0f, d32, OC, w, C, 0.0f, dinp + (size_t)r0 * C, C);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, r, 1.0f, d32, OC, i32, C, r0 ? 1.0f : beta, dw, C);
        }
    } else if (k->f32_gemm) {
        check_gemm_scratch(k, gemm_f32_scratch_bytes(0, 0, N, C, OC));
        check_gemm_scratch(k, gemm_f32_scratch_bytes(1, 0, OC, C, N));
        if (gemm_f32_backward_data(&k->gemm, dinp, dout, w, N, C, OC, 0.0f) ||
            gemm_f32_backward_weight(&k->gemm, dw, dout, inp, N, C, OC, beta))
            die_gemm();
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, beta, dw, C);
    }
    if (dbias && !(w16 && !k->via_sgemm)) // (the gemm_bf16 path added them while it rounded dout)
        round_bf16_sum_columns(NULL, dbias, dout, N, OC);
}

// Causal self-attention. qkv (B,T,3C) holds q, k, v each (NH heads of hs = C/NH channels);
// out (B,T,C) the heads' outputs side by side; att (B,NH,T,T) the softmax probabilities, row t
// in columns 0..t and zero after (the backward multiplies whole blocks of it).
// The products per head (q.kᵀ and att.v; in the backward attᵀ.dout, dout.vᵀ, ds.k and dsᵀ.q,
// ds the scores' gradient) are head_gemm calls (cpu/head_gemm.h: each element one FMA chain in k
// order, which is how OpenBLAS sums where k fits its K block: at T=64 its results, bit for bit)
// on strided views of qkv, in blocks of rows along the diagonal, and within a block each call
// skips what the causal mask makes zero or unneeded (rows r0..r1 only reach columns 0..r1, and
// row t of a block only columns 0..t). As sgemm calls they computed all of each block, the
// scores (q.kᵀ, dout.vᵀ) through OpenBLAS's packing kernel: 7 + 11 ms of a d12 B=4 T=64 step,
// on 1/4 of its matrix FLOPs.
// The heads are the parallel work: one (b, h) per item, its products and softmax on one thread
// (OpenBLAS, where it is the fallback, runs a call made inside a parallel region on that thread
// alone). Each of those products is small (T=64: 64 x 64 x 64), too small for two threads to
// share, and made one after another from outside they kept one core waiting through all of them.
#define ATT_BLOCK 128
static int block_end(int r0, int rows, int T) { return r0 + rows < T ? r0 + rows : T; }

// One head's forward: att_bh (T,T) of head h of batch row b, out_b (T,C), qkv_b (T,3C).
static void attention_head_forward(int simd, float *out_b, float *att_bh, const float *qkv_b, int h, int T, int C, int hs,
                                   float scale) {
    const int C3 = 3 * C;
    const float *q = qkv_b + h * hs, *v = qkv_b + 2 * C + h * hs;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) { // scores: att[r0..r1, 0..r1] = scale q[r0..r1] . k[0..r1]ᵀ
        int r1 = block_end(r0, ATT_BLOCK, T);
        head_gemm(simd, 0, 1, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3, q + C, C3, att_bh + (size_t)r0 * T, T,
                  HG_C_LOWER, r0);
    }
    for (int t = 0; t < T; t++) { // softmax over columns 0..t of each row; zero beyond
        float *a = att_bh + (size_t)t * T;
        float maxv = -INFINITY, sum = 0.0f;
        // The maximum is exact in any order, and so are the exponentials (one at a time, in
        // vectors or not): only their sum is a chain in column order. (With the sum in the same
        // loop, none of it was vectorised.)
#pragma omp simd reduction(max : maxv)
        for (int t2 = 0; t2 <= t; t2++) maxv = a[t2] > maxv ? a[t2] : maxv;
#pragma omp simd
        for (int t2 = 0; t2 <= t; t2++) a[t2] = gpt2_exp(a[t2] - maxv);
        for (int t2 = 0; t2 <= t; t2++) sum += a[t2];
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++) a[t2] *= inv;
        for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
    }
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) { // out[r0..r1] = att[r0..r1, 0..r1] . v[0..r1]
        int r1 = block_end(r0, ATT_BLOCK, T);
        head_gemm(simd, 0, 0, r1 - r0, hs, r1, 1.0f, att_bh + (size_t)r0 * T, T, v, C3, out_b + (size_t)r0 * C + h * hs, C,
                  HG_A_LOWER, r0);
    }
}

static void attention_forward(CpuKernels *k, float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            attention_head_forward(k->head_simd, out + (size_t)b * T * C, att + ((size_t)b * NH + h) * T * T,
                                   qkv + (size_t)b * T * 3 * C, h, T, C, hs, scale);
}

// One head's backward: dqkv_b (T,3C) of batch row b gets head h's dq, dk, dv; att_bh (T,T) is
// overwritten with the scores' gradient; datt, `rows` x T floats of scratch.
static void attention_head_backward(int simd, float *dqkv_b, float *att_bh, const float *dout_b, const float *qkv_b,
                                    float *datt, int rows, int h, int T, int C, int hs, float scale) {
    const int C3 = 3 * C;
    const float *q = qkv_b + h * hs;
    for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) { // dv[c0..c1] = att[c0..T, c0..c1]ᵀ . dout[c0..T]
        int c1 = block_end(c0, ATT_BLOCK, T);
        head_gemm(simd, 1, 0, c1 - c0, hs, T - c0, 1.0f, att_bh + (size_t)c0 * T + c0, T, dout_b + (size_t)c0 * C + h * hs, C,
                  dqkv_b + (size_t)c0 * C3 + 2 * C + h * hs, C3, HG_A_UPPER, 0);
    }
    for (int r0 = 0; r0 < T; r0 += rows) { // datt[r0..r1] = dout[r0..r1] . v[0..r1]ᵀ, in the scratch
        int r1 = block_end(r0, rows, T);
        float *a = att_bh + (size_t)r0 * T;
        head_gemm(simd, 0, 1, r1 - r0, r1, hs, 1.0f, dout_b + (size_t)r0 * C + h * hs, C, q + 2 * C, C3, datt, T, HG_C_LOWER, r0);
        for (int t = r0; t < r1; t++) { // att[t] := scale * att[t] * (datt - att[t] . datt), columns 0..t
            float *at = a + (size_t)(t - r0) * T;
            const float *dt = datt + (size_t)(t - r0) * T;
            float weighted = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) weighted += at[t2] * dt[t2];
            for (int t2 = 0; t2 <= t; t2++) at[t2] *= (dt[t2] - weighted) * scale;
        }
    }
    float *dq = dqkv_b + h * hs;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = block_end(r0, ATT_BLOCK, T);
        // dq[r0..r1] = ds[r0..r1, 0..r1] . k[0..r1];  dk[r0..r1] = ds[r0..T, r0..r1]ᵀ . q[r0..T]
        head_gemm(simd, 0, 0, r1 - r0, hs, r1, 1.0f, att_bh + (size_t)r0 * T, T, q + C, C3, dq + (size_t)r0 * C3, C3, HG_A_LOWER,
                  r0);
        head_gemm(simd, 1, 0, r1 - r0, hs, T - r0, 1.0f, att_bh + (size_t)r0 * T + r0, T, q + (size_t)r0 * C3, C3,
                  dq + C + (size_t)r0 * C3, C3, HG_A_UPPER, 0);
    }
}

// dqkv (B,T,3C) from dout (B,T,C), the saved qkv and att, which it overwrites with the
// gradient of the scores; out, the forward's output, is dead by now (the GPU version reads it)
// and holds blocks of datt = dout . vᵀ meanwhile: each thread its own share of its B*T*C
// floats, `rows` rows of T (at most ATT_BLOCK). dv first, while att still holds the probabilities.
static void attention_backward(CpuKernels *k, float *dqkv, float *att, const float *dout, const float *qkv, float *out,
                               int B, int T, int C, int NH) {
    int hs = C / NH, nt = omp_get_max_threads();
    if (nt > B * C) nt = B * C;
    int rows = B * C / nt < ATT_BLOCK ? B * C / nt : ATT_BLOCK;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nt)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            attention_head_backward(k->head_simd, dqkv + (size_t)b * T * 3 * C, att + ((size_t)b * NH + h) * T * T,
                                    dout + (size_t)b * T * C, qkv + (size_t)b * T * 3 * C,
                                    out + (size_t)omp_get_thread_num() * rows * T, rows, h, T, C, hs, scale);
}

// GELU elementwise (gpt2_gelu in gpt2.h, shared with the GPU kernels); (n) -> (n)
// A bf16 run's GELU reads a bf16 input, which has only 65536 values: its GELU (rounded to bf16,
// as the forward stores it) and its derivative are looked up, computed once per run by the same
// functions (CPU_GELU_TABLES_BYTES, cpu/workspace.h): the same bits, without the exponential and
// the division per element that made each pass compute-bound.
// k's tables, allocated (CPU_GELU_TABLES_BYTES, one block: free(k->gelu16) frees both) and filled.
static void gelu_tables_alloc(CpuKernels *k) {
    k->gelu16 = (bf16_t *)xcalloc_bytes(CPU_GELU_TABLES_BYTES);
    k->gelu_grad32 = (float *)(k->gelu16 + 65536);
    for (uint32_t h = 0; h < 65536; h++) {
        float x = bf16_to_f32((bf16_t)h);
        k->gelu16[h] = f32_to_bf16(gpt2_gelu(x));
        k->gelu_grad32[h] = gpt2_gelu_grad(x);
    }
}
static void gelu_forward(CpuKernels *k, float *out, const float *inp, size_t n) {
    const bf16_t *inp16 = stored_bf16(k, inp); // (as in the backward, below)
    const int o16 = out16_index(k, out);
    if (inp16 && o16 >= 0) { // only its bf16 values (out16), looked up
        bf16_t *h16 = k->out16[o16].x16;
        const bf16_t *g = k->gelu16;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) h16[i] = g[inp16[i]];
        k->out16[o16].done = 1;
        return;
    }
    if (inp16) {
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) out[i] = gpt2_gelu(bf16_to_f32(inp16[i]));
        return;
    }
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) out[i] = gpt2_gelu(inp[i]);
}
// dinp = gelu'(inp) * dout, elementwise; dinp may be the same buffer as dout. Where the context
// holds inp's stored bf16 copy (bf16 runs, which always have the tables), it looks the derivative
// of what inp is, widened, up.
static void gelu_backward(CpuKernels *k, float *dinp, const float *inp, const float *dout, size_t n) {
    const bf16_t *inp16 = stored_bf16(k, inp);
    if (inp16) {
        const float *g = k->gelu_grad32;
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) dinp[i] = g[inp16[i]] * dout[i];
        return;
    }
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dinp[i] = gpt2_gelu_grad(inp[i]) * dout[i];
}

// out = a + b, elementwise (n): the residual connections
static void residual_forward(CpuKernels *k, float *out, const float *a, const float *b, size_t n) {
    (void)k;
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
// Zeroing is memory-bound (gradient accumulators of hundreds of MB): one memset per thread on
// large buffers, so that the second core's bandwidth is not left idle.
static void zero_bytes(void *p, size_t bytes) {
    size_t chunk = (size_t)1 << 20, nchunks = (bytes + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t i = 0; i < nchunks; i++) memset((char *)p + i * chunk, 0, i + 1 < nchunks ? chunk : bytes - i * chunk);
}
static void zero_fill(CpuKernels *k, float *p, size_t n) { (void)k; zero_bytes(p, n * sizeof(float)); }

// The LM head's loss, fused: for each of N rows of logits (N,Vp), the softmax over the first V
// columns (padded columns never enter it), the cross-entropy against targets (N) into losses (N),
// and, when dloss != 0, the gradient dloss * (softmax - onehot) written over the logits in
// place (padded columns get 0), so no second (N,Vp) buffer is ever needed. Each exponential is
// computed once: the sum's pass leaves it in place of its logit, and the gradient's pass scales it.
// With g16 (else NULL; dloss != 0) the gradient goes to g16 (N,Vp) instead, rounded to bf16 (the
// same fp32 values, then f32_to_bf16), and the logits are left holding the exponentials: the bf16
// LM head backward reads only that, and a separate pass rounding 51 MB of fp32 gradient (d12,
// B=4, T=64) is saved.
#define CE_CHUNK 1024
static void crossentropy_softmax_fused(float *logits, float *losses, const int *targets,
                                       int N, int V, int Vp, float dloss, bf16_t *g16) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *l = logits + (size_t)n * Vp;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int i = 0; i < V; i++) maxv = l[i] > maxv ? l[i] : maxv;
        int tgt = targets[n];
        float sum = 0.0f, ltgt = l[tgt];
        if (dloss != 0.0f) { // each e^(l - max) is left in place, and the gradient scales it
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < V; i++) {
                float e = gpt2_exp(l[i] - maxv);
                l[i] = e;
                sum += e;
            }
        } else { // the logits stay (the sampler reads them)
#pragma omp simd reduction(+ : sum)
            for (int i = 0; i < V; i++) sum += gpt2_exp(l[i] - maxv);
        }
        losses[n] = logf(sum) + maxv - ltgt;
        if (dloss != 0.0f) { // in chunks, over the logits in place or through buf into g16
            float inv = 1.0f / sum, buf[CE_CHUNK];
            for (int i0 = 0; i0 < Vp; i0 += CE_CHUNK) {
                int i1 = i0 + CE_CHUNK < Vp ? i0 + CE_CHUNK : Vp;
                int iv = i1 < V ? i1 : V > i0 ? V : i0; // [i0, iv): real columns; [iv, i1): padding
                float *d = g16 ? buf : l + i0;
#pragma omp simd
                for (int i = i0; i < iv; i++) d[i - i0] = l[i] * inv * dloss;
                for (int i = iv; i < i1; i++) d[i - i0] = 0.0f;
                if (tgt >= i0 && tgt < i1) d[tgt - i0] -= dloss;
                if (g16) zc_f32_to_bf16_block(g16 + (size_t)n * Vp + i0, buf, (size_t)(i1 - i0));
            }
        }
    }
}

// dst (of type dtype) += src (fp32), rounded to dtype: gradients accumulate so; with add 0,
// dst = src rounded (a gradient's first contribution). (One loop per type, so that each
// vectorises.)
static void add_to(void *dst, const float *src, size_t n, int dtype, int add) {
    if (!add) zc_narrow(dst, src, n, dtype);
    else if (dtype == ZC_F32) {
        float *d = (float *)dst;
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) d[i] += src[i];
    } else if (dtype == ZC_BF16) {
        bf16_t *d = (bf16_t *)dst;
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + src[i]);
    } else {
        fp16_t *d = (fp16_t *)dst;
#pragma omp parallel for
        for (size_t i = 0; i < n; i++) d[i] = f32_to_fp16(fp16_to_f32(d[i]) + src[i]);
    }
}
#include "cpu/mpi_backend.h"

// ----------------------------------------------------------------------------------------
// The model. Where parameters, gradients and optimizer state live is ZeRO's business: the
// forward and backward ask for each unit's parameters and gradients as they go (model.h).
//
// The kernels above compute in fp32. In a 16-bit run (bf16, fp16) ZeRO keeps parameters,
// gradients and buffers in 16 bits and the activations of every layer are stored in 16 bits,
// so the storage hooks below convert at the edges: a unit's parameters are widened into an
// fp32 view when the passes reach it (bf16 matmuls read the 16-bit weights themselves), its
// gradient accumulates in fp32 and is rounded into ZeRO's 16-bit buffer when the backward is
// done with it, and each layer computes in an fp32 slot: every activation that a later kernel
// reads is rounded to 16 bits as soon as it is produced (gpt2_act_rounded), and what the run keeps
// for the backward (cpu/workspace.h: every layer's tensors, or with recompute what that keeps) is
// stored in 16 bits then and widened again for the backward or a recompute. (The GPU trainer's
// kernels read and write 16 bits directly; there these hooks pass ZeRO's pointers through.) In
// fp32 they pass through here too.

enum { VIEW_EMBED, VIEW_FINAL, VIEW_LAYER0, VIEW_LAYER1, NUM_VIEWS };

typedef struct {
    GPT2Config cfg;
    Zero z;                        // parameters, gradients, optimizer state, ZeRO buffers
    int dtype, mixed;              // ZC_F32 / ZC_BF16 / ZC_FP16; mixed = dtype != ZC_F32
    GPT2Recompute recompute;       // what the forward keeps, what the backward recomputes (gpt2.h)
    Activations acts;              // fp32, laid out as cpu_activation_slots says
    float *acts_memory;
    uint16_t *acts16;              // 16-bit runs: what they keep in 16 bits (cpu_kept16_offset)
    int slot_layer[2];             // without recompute, 16-bit: the layer the fp32 slot holds (-1: none)
    float *view[NUM_VIEWS];        // 16-bit runs: fp32 views of units' parameters
    int view_unit[NUM_VIEWS];
    unsigned long view_forward[NUM_VIEWS]; // ...valid while zero.h's forward count is unchanged
    float *gacc_embed, *gacc_final, *gacc_layer; // 16-bit runs: fp32 gradient accumulators
    void *grad_target[GPT2_MAX_UNITS];           // where a unit's fp32 gradient is rounded into
    CpuKernels kern;               // the kernels' context: the bf16 staging and scratch, direct gradients
    void *gemm_scratch;            // bf16 runs: gemm_bf16's packing scratch (kern.gemm)
    uint8_t *batch_rows;           // bf16 runs: a flag per vocabulary row, set for the batch's tokens
    size_t bytes_activations;
    int B, T;                      // the largest batch the activations hold
    int *inputs, *targets;         // (B,T)
    const int *dev_inputs, *dev_targets; // where the kernels read the batch: here, the same arrays
    int batch_n;                   // B*T of the batch uploaded last
} GPT2;

static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int rank, int world, const ZeroOptions *zo,
                       GPT2Recompute recompute, ZeroBackend be) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    int dtype = zo->dtype;
    m->dtype = dtype;
    m->mixed = dtype != ZC_F32;
    m->recompute = recompute;
    zero_init(&m->z, cfg, rank, world, zo, be);
    m->z.grads_written = 1; // the hooks below write a fresh gradient (gpt2_unit_grads): no zeroing
    // Every allocation below is counted as it is made; the planner predicts the totals
    // (cpu_activation_bytes, cpu_workspace_bytes) and test_planner compares the two.
    size_t *act = &m->z.mem[MEM_ACTIVATIONS], *work = &m->z.mem[MEM_WORKSPACE];
    int slots[NUM_ACTIVATIONS];
    cpu_activation_slots(cfg, recompute, m->mixed, slots);
    size_t act_floats = cpu_activation_floats(cfg, B, T, recompute, m->mixed);
    m->acts_memory = xcalloc_floats(act_floats);
    *act += act_floats * sizeof(float);
    gpt2_activations_wire(&m->acts, m->acts_memory, cfg, B, T, slots);
    m->slot_layer[0] = m->slot_layer[1] = -1;
    m->kern.head_simd = gemm_f32_supported();
    if (m->mixed) {
        size_t n16 = cpu_kept16_numel(cfg, recompute, B, T);
        m->acts16 = (uint16_t *)xcalloc_bytes(n16 * sizeof(uint16_t));
        *act += n16 * sizeof(uint16_t);
        const ParamLayout *lay = &m->z.lay;
        size_t embed = gpt2_unit_padded(lay, UNIT_EMBED), fin = gpt2_unit_padded(lay, gpt2_final_unit(lay));
        size_t layer = gpt2_unit_padded(lay, 1);
        size_t view_n[NUM_VIEWS] = {embed, fin, layer, layer};
        for (int k = 0; k < NUM_VIEWS; k++) {
            m->view[k] = xcalloc_floats(view_n[k]);
            m->view_unit[k] = -1;
            *work += view_n[k] * sizeof(float);
        }
        m->gacc_embed = xcalloc_floats(embed);
        m->gacc_final = xcalloc_floats(fin);
        m->gacc_layer = xcalloc_floats(layer);
        *work += (embed + fin + layer) * sizeof(float);
        CpuKernels *k = &m->kern;
        k->staging_elems = cpu_bf16_staging_elems(cfg, B, T);
        if (dtype == ZC_BF16) {
            k->staging = (bf16_t *)xcalloc_bytes(k->staging_elems * sizeof(bf16_t));
            *work += k->staging_elems * sizeof(bf16_t);
            size_t scratch = cpu_bf16_matmul_scratch_bytes(cfg, B, T, omp_get_max_threads());
            m->gemm_scratch = xcalloc_bytes(scratch);
            *work += scratch;
            k->gemm = (GemmBf16Ctx){GEMM_BF16_AUTO, m->gemm_scratch, scratch};
            m->batch_rows = (uint8_t *)xcalloc_bytes((size_t)cfg->padded_vocab_size);
            *work += (size_t)cfg->padded_vocab_size;
            gelu_tables_alloc(k);
            *work += CPU_GELU_TABLES_BYTES;
        }
        const char *via = getenv("ZEROC_BF16_MATMUL");
        k->via_sgemm = (via && !strcmp(via, "sgemm")) || gemm_bf16_best_path() == GEMM_BF16_SCALAR;
        if (dtype == ZC_BF16 && rank == 0)
            printf("bf16 matmuls: %s\n", !k->via_sgemm ? (gemm_bf16_best_path() == GEMM_BF16_AMX ? "gemm_bf16 on AMX tiles"
                                                                                                 : "gemm_bf16 on AVX512-BF16")
                                       : via && !strcmp(via, "sgemm") ? "sgemm on bf16-rounded operands (ZEROC_BF16_MATMUL=sgemm)"
                                                                      : "sgemm on bf16-rounded operands (no AMX or AVX512-BF16 here)");
    }
    if (dtype != ZC_BF16) { // fp32 and fp16 runs multiply in fp32: on gemm_f32 where the CPU has AVX-512
        CpuKernels *k = &m->kern;
        size_t scratch = cpu_f32_matmul_scratch_bytes(cfg, B, T, omp_get_max_threads());
        m->gemm_scratch = xcalloc_bytes(scratch);
        *work += scratch;
        k->gemm = (GemmBf16Ctx){GEMM_BF16_AUTO, m->gemm_scratch, scratch};
        const char *via = getenv("ZEROC_F32_MATMUL");
        k->f32_gemm = gemm_f32_supported() && !(via && !strcmp(via, "sgemm"));
    }
    m->bytes_activations = *act;
    m->B = B;
    m->T = T;
    m->inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    m->targets = (int *)xmalloc((size_t)B * T * sizeof(int));
}

static void gpt2_free(GPT2 *m) {
    zero_free(&m->z);
    for (int k = 0; k < NUM_VIEWS; k++) free(m->view[k]);
    free(m->gacc_embed); free(m->gacc_final); free(m->gacc_layer); free(m->kern.staging); free(m->acts16);
    free(m->gemm_scratch); free(m->batch_rows); free(m->kern.gelu16);
    free(m->acts_memory); free(m->inputs); free(m->targets);
}

// --- the storage hooks model.h calls ---

static int view_of(const GPT2 *m, int u) {
    return u == UNIT_EMBED ? VIEW_EMBED : u == gpt2_final_unit(&m->z.lay) ? VIEW_FINAL : VIEW_LAYER0 + u % 2;
}
// Widen one run of a unit's 16-bit parameters into its fp32 view. A bf16 run's matmuls read the
// 16-bit weights, so only what other kernels read is widened: everything but the layers'
// weight matrices, and of the token embedding (the LM head's weights too) only the rows of the
// batch's tokens, which the token lookup reads (wte is unit 0's first tensor: [0, wte_end)).
typedef struct { float *dst; const void *src; size_t base, wte_end; int dtype, skip_matrices; } WidenRun;
static void widen_segment(const ParamSegment *seg, void *ctx) {
    WidenRun *w = (WidenRun *)ctx;
    if (w->skip_matrices && seg->kind == SEG_DECAY) return;
    size_t lo = seg->begin - w->base;
    if (lo < w->wte_end) return; // (a segment never straddles a tensor's end)
    zc_widen(w->dst + lo, (const uint16_t *)w->src + lo, seg->end - seg->begin, w->dtype);
}
static UnitParams gpt2_unit_params(GPT2 *m, int u, int next) {
    Zero *z = &m->z;
    void *p = zero_params(z, u, next);
    UnitParams up = {(float *)p, NULL};
    if (!m->mixed) return up;
    int k = view_of(m, u);
    if (m->view_unit[k] != u || m->view_forward[k] != z->forwards) {
        size_t begin = z->lay.unit_offset[u];
        int bf16_gemm = m->dtype == ZC_BF16 && !m->kern.via_sgemm, rows_only = bf16_gemm && u == UNIT_EMBED;
        size_t C = (size_t)m->cfg.channels;
        WidenRun w = {m->view[k], p, begin, rows_only ? gpt2_tensor_numel(&m->cfg, P_WTE) : 0, m->dtype,
                      bf16_gemm && zero_is_layer(z, u)};
        gpt2_for_each_segment(&z->lay, begin, begin + gpt2_unit_padded(&z->lay, u), widen_segment, &w);
        if (rows_only) // the batch is uploaded before the forward asks for the embeddings
            for (int i = 0; i < m->batch_n; i++) {
                size_t row = (size_t)m->dev_inputs[i] * C;
                zc_widen(m->view[k] + row, (const uint16_t *)p + row, C, m->dtype);
            }
        m->view_unit[k] = u;
        m->view_forward[k] = z->forwards;
    }
    up.f32 = m->view[k];
    up.x16 = m->dtype == ZC_BF16 ? p : NULL;
    return up;
}

// The fp32 accumulator unit u's gradient collects in (16-bit runs)
static float *grad_acc(const GPT2 *m, int u) {
    return u == UNIT_EMBED ? m->gacc_embed : u == gpt2_final_unit(&m->z.lay) ? m->gacc_final : m->gacc_layer;
}
// The weight matrices of the layers and wte go straight into 16 bits (grads16_direct) in bf16
// runs on gemm_bf16.
static int grads_direct(const GPT2 *m, int u) {
    return m->dtype == ZC_BF16 && !m->kern.via_sgemm && (zero_is_layer(&m->z, u) || u == UNIT_EMBED);
}
// The part of unit u's gradient (as the kernels see it: `acc`) that gradients collect in by
// adding: all of it, or, where the weight products write straight into the final gradient
// (16-bit runs whose matrices go straight into 16 bits), all but a layer's matrices
// (SEG_DECAY) and the embeddings' wte, [0, wte_end) (whose rows of the batch's tokens
// gpt2_unit_grads_done adds). Zeroed when the unit's backward starts (op 0); in 16-bit runs
// added (op 1), or on a fresh gradient stored (op 2), into the 16-bit gradient when it is done.
typedef struct { float *acc; void *target; size_t base, wte_end; int dtype, skip_matrices, op; } AccRun;
static void acc_segment(const ParamSegment *seg, void *ctx) {
    AccRun *r = (AccRun *)ctx;
    if (r->skip_matrices && seg->kind == SEG_DECAY) return;
    size_t lo = seg->begin - r->base, n = seg->end - seg->begin;
    if (lo < r->wte_end) return; // (a segment never straddles a tensor's end)
    if (r->op) add_to((char *)r->target + lo * zc_dtype_size(r->dtype), r->acc + lo, n, r->dtype, r->op == 1);
    else zero_bytes(r->acc + lo, n * sizeof(float));
}
static void acc_pass(GPT2 *m, int u, float *acc, int products_write, int op) {
    size_t begin = m->z.lay.unit_offset[u];
    int layer = zero_is_layer(&m->z, u);
    AccRun r = {acc, m->grad_target[u], begin, products_write && u == UNIT_EMBED ? gpt2_tensor_numel(&m->cfg, P_WTE) : 0,
                m->dtype, products_write && layer, op};
    gpt2_for_each_segment(&m->z.lay, begin, begin + gpt2_unit_padded(&m->z.lay, u), acc_segment, &r);
}
static float *gpt2_unit_grads(GPT2 *m, int u) {
    void *g = zero_grads(&m->z, u);
    int fresh = zero_grads_fresh(&m->z, u), pw = m->kern.f32_gemm; // (gemm_f32 products write with beta 0)
    GradsOpen *o = &m->kern.grads[u == UNIT_EMBED ? 0 : 1];
    if (!m->mixed) { // a fresh gradient: zeroed here where the products do not write it. (On OpenBLAS
        // they add to a zeroed buffer: with beta 0 its threads zeroed their shares of each matrix,
        // blocks that are not contiguous, with plain stores: 3.5% of a 2-thread fp32 step, against
        // one memset per thread here. The same sums.)
        if (fresh) acc_pass(m, u, (float *)g, pw, 0);
        *o = (GradsOpen){(const float *)g, gpt2_unit_padded(&m->z.lay, u), fresh && pw, NULL, NULL};
        return (float *)g;
    }
    m->grad_target[u] = g;
    // (fp16 on gemm_f32: the accumulator holds nothing of this micro-step yet, so the products
    // write their parts of it)
    acc_pass(m, u, grad_acc(m, u), grads_direct(m, u) || pw, 0);
    *o = (GradsOpen){grad_acc(m, u), gpt2_unit_padded(&m->z.lay, u), pw, NULL, NULL};
    if (grads_direct(m, u)) {
        o->fresh = fresh;
        o->g16 = (bf16_t *)g;
        if (u == UNIT_EMBED) { // wte: the LM head's weights; the batch was uploaded by the forward
            o->n = gpt2_tensor_numel(&m->cfg, P_WTE);
            memset(m->batch_rows, 0, (size_t)m->cfg.padded_vocab_size);
            for (int i = 0; i < m->batch_n; i++) m->batch_rows[m->dev_inputs[i]] = 1;
            o->rows = m->batch_rows;
        }
    }
    return grad_acc(m, u);
}
static void gpt2_unit_grads_done(GPT2 *m, int u) {
    GradsOpen *o = &m->kern.grads[u == UNIT_EMBED ? 0 : 1];
    if (m->mixed) {
        int fresh = zero_grads_fresh(&m->z, u); // (the micro-step is the one gpt2_unit_grads saw)
        acc_pass(m, u, grad_acc(m, u), grads_direct(m, u), fresh ? 2 : 1);
        if (o->rows) { // wte's rows of the batch's tokens
            size_t C = (size_t)m->cfg.channels;
#pragma omp parallel for schedule(dynamic, 64) // (each add_to then runs on its thread: nesting is off)
            for (int r = 0; r < m->cfg.padded_vocab_size; r++)
                if (o->rows[r]) add_to(o->g16 + (size_t)r * C, o->acc + (size_t)r * C, C, m->dtype, !fresh);
        }
    }
    memset(o, 0, sizeof *o);
    zero_grads_done(&m->z, u);
}

// Layer l's activations in the fp32 block (cpu/workspace.h's slots), at the batch's (B,T).
static LayerActs layer_acts(const GPT2 *m, int l, int B, int T) {
    int slot[NUM_ACTIVATIONS], in = cpu_layer_slots(&m->cfg, m->recompute, m->mixed, l, slot);
    return gpt2_layer_acts_at(&m->acts, &m->cfg, B, T, slot, in);
}
// Where a 16-bit run keeps per-layer tensor i of layer l in 16 bits, or NULL.
static uint16_t *kept16(const GPT2 *m, int i, int l, int B, int T) {
    long at = cpu_kept16_offset(&m->cfg, m->recompute, B, T, i, l);
    return at < 0 ? NULL : m->acts16 + at;
}
static size_t layer_numel(const GPT2Config *c, int i, int B, int T) {
    size_t n[NUM_ACTIVATIONS];
    gpt2_activation_numels(c, B, T, n);
    return n[i] / c->num_layers;
}
// Widens layer l's kept tensor i from 16 bits into x (a recompute's or a backward's input).
static void widen_kept(const GPT2 *m, const LayerActs *x, int i, int l, int B, int T) {
    zc_widen(gpt2_layer_tensor(x, i), kept16(m, i, l, B, T), layer_numel(&m->cfg, i, B, T), m->dtype);
}

// bf16 runs on gemm_bf16: the matmuls read layer l's tensor i from its stored 16 bits, where the
// run keeps it (CpuKernels.stored16: set as each tensor is produced or widened, cleared when
// another layer's pass begins).
static void stored16_set(GPT2 *m, const LayerActs *x, int i, int l, int B, int T) {
    uint16_t *h = m->dtype == ZC_BF16 && !m->kern.via_sgemm ? kept16(m, i, l, B, T) : NULL;
    m->kern.stored16[i].f32 = h ? gpt2_layer_tensor(x, i) : NULL;
    m->kern.stored16[i].x16 = (const bf16_t *)h;
}
static void stored16_clear(GPT2 *m) {
    memset(m->kern.stored16, 0, sizeof m->kern.stored16);
    memset(m->kern.out16, 0, sizeof m->kern.out16);
}
// What the forward and the backward (model.h) read of a layer's tensor i only through its stored
// 16 bits, as a matmul's input or (fch) GELU's: with those there, the fp32 tensor is never read,
// so the forward need not round it in place nor the backward widen it back (attention's
// backward uses atty's slot as scratch, which it writes before reading).
static int reads_stored16_only(int i) { return i == A_LN1 || i == A_ATTY || i == A_LN2 || i == A_FCH || i == A_FCH_GELU; }

static LayerActs gpt2_layer_acts_forward(GPT2 *m, int l, int B, int T) {
    m->slot_layer[l % 2] = l;
    stored16_clear(m);
    LayerActs x = layer_acts(m, l, B, T);
    // the tensors that gpt2_act_rounded would only narrow into their stored 16 bits, for the
    // kernels that write those bits themselves (bf16 runs on gemm_bf16, as stored16_set)
    if (m->dtype == ZC_BF16 && !m->kern.via_sgemm)
        for (int i = 0; i < NUM_ACTIVATIONS; i++) {
            uint16_t *h = gpt2_activation_is_layered(i) && reads_stored16_only(i) ? kept16(m, i, l, B, T) : NULL;
            m->kern.out16[i].f32 = h ? gpt2_layer_tensor(&x, i) : NULL;
            m->kern.out16[i].x16 = (bf16_t *)h;
        }
    return x;
}
// 16-bit runs: the kernel's output is rounded in place, and stored when the run keeps it; only
// stored where its readers read nothing else (reads_stored16_only, with the stored copy there).
static void gpt2_act_rounded(GPT2 *m, const LayerActs *x, int l, int i, int B, int T) {
    if (!m->mixed) return;
    uint16_t *h = kept16(m, i, l, B, T);
    float *p = gpt2_layer_tensor(x, i);
    size_t n = layer_numel(&m->cfg, i, B, T);
    stored16_set(m, x, i, l, B, T);
    if (m->kern.out16[i].done) { // the kernel that produced it wrote its 16 bits (out16)
        m->kern.out16[i].done = 0;
        return;
    }
    if (m->kern.stored16[i].f32 && reads_stored16_only(i)) zc_narrow(h, p, n, m->dtype);
    else zc_round_array(p, h, n, m->dtype);
}
// The forward is done with layer l: without recompute the attention's probabilities are stored
// in 16 bits too (the rest was as it was produced), and rounded in the slot, which the backward
// reads while it still holds the layer.
static void gpt2_layer_store(GPT2 *m, int l, int B, int T) {
    if (!m->mixed || m->recompute.mode != RECOMPUTE_NONE) return;
    LayerActs x = layer_acts(m, l, B, T);
    zc_round_array(x.att, kept16(m, A_ATT, l, B, T), layer_numel(&m->cfg, A_ATT, B, T), m->dtype);
}
static float *gpt2_layers_output(GPT2 *m, int B, int T) { return layer_acts(m, m->cfg.num_layers - 1, B, T).residual3; }
// A recompute of layer l reads what the run kept of it, and its input, from the fp32 block:
// 16-bit runs widen them there (a segment's later layers read the input their predecessor's
// recompute left).
static LayerActs gpt2_layer_acts_recompute(GPT2 *m, int l, int B, int T) {
    LayerActs x = layer_acts(m, l, B, T);
    if (!m->mixed) return x;
    stored16_clear(m);
    if (l > 0 && l == gpt2_segment_start(m->recompute, l)) { // the input: residual3 of layer l - 1
        LayerActs prev = layer_acts(m, l - 1, B, T);
        widen_kept(m, &prev, A_RESIDUAL3, l - 1, B, T);
    }
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (i != A_RESIDUAL3 && kept16(m, i, l, B, T)) {
            widen_kept(m, &x, i, l, B, T);
            stored16_set(m, &x, i, l, B, T);
        }
    return x;
}
static void gpt2_layer_recomputed(GPT2 *m, int l, int B, int T) {
    if (!m->mixed) return;
    LayerActs x = layer_acts(m, l, B, T);
    zc_round_array(x.att, NULL, layer_numel(&m->cfg, A_ATT, B, T), m->dtype);
}
// Layer l's activations for its backward. With recompute they are where the recompute left
// them. Without, 16-bit runs widen them from 16 bits unless the slot still holds them (bf16 runs
// on gemm_bf16 leave out what only the matmuls read: they read the 16 bits), and the layer's
// input (the output of layer l-1) into the other slot's residual3.
static LayerActs gpt2_layer_acts_backward(GPT2 *m, int l, int B, int T) {
    LayerActs x = layer_acts(m, l, B, T);
    if (!m->mixed || m->recompute.mode != RECOMPUTE_NONE) return x;
    stored16_clear(m);
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (gpt2_activation_in_slots(i)) stored16_set(m, &x, i, l, B, T);
    if (m->slot_layer[l % 2] != l) {
        for (int i = 0; i < NUM_ACTIVATIONS; i++)
            if (gpt2_activation_in_slots(i) && !(m->kern.stored16[i].f32 && reads_stored16_only(i)))
                widen_kept(m, &x, i, l, B, T);
        m->slot_layer[l % 2] = l;
    }
    if (l > 0 && m->slot_layer[(l - 1) % 2] != l - 1) {
        LayerActs prev = layer_acts(m, l - 1, B, T);
        widen_kept(m, &prev, A_RESIDUAL3, l - 1, B, T);
        m->slot_layer[(l - 1) % 2] = -1; // holds only that
    }
    return x;
}

// The batch is already where the kernels read it.
static void upload_batch(GPT2 *m, const int *inputs, const int *targets, int N) {
    m->batch_n = N;
    m->dev_inputs = inputs;
    m->dev_targets = targets;
}
// The fused softmax + cross-entropy (+ gradient) over the logits; the mean loss.
static float classifier_loss(GPT2 *m, int N, float dloss) {
    const GPT2Config *c = &m->cfg;
    // bf16 runs on gemm_bf16: the gradient goes straight into the staging as the LM head
    // backward's bf16 dout (matmul_backward finds it there)
    bf16_t *g16 = dloss != 0.0f && m->dtype == ZC_BF16 && !m->kern.via_sgemm ? m->kern.staging : NULL;
    crossentropy_softmax_fused(m->acts.logits, m->acts.losses, m->dev_targets, N, c->vocab_size, c->padded_vocab_size, dloss, g16);
    m->kern.dout16_in_staging = g16 ? m->acts.logits : NULL;
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->acts.losses[i];
    return (float)(sum / N);
}

static void gpt2_backward_done(GPT2 *m) { zero_end_backward(&m->z); }
static Trace *gpt2_trace(GPT2 *m) { return m->z.trace; }
#include "core/model.h" // gpt2_forward, gpt2_backward: the same passes as the GPU trainer's

// The sum of squares of g[i0..i1) (fp32, bf16 or fp16 elements), in double. Widening a bf16 is a
// shift: NaN stays NaN, Inf Inf. The square of a float (24 significant bits) is exact in double
// (53), so fma(x, x, s) rounds once, where x * x + s did: the same sums with one instruction
// fewer per 8 elements, in a pass bound by its arithmetic (the conversions to double).
static double sum_squares_block(const void *g, size_t i0, size_t i1, int dtype) {
    double s = 0.0;
    if (dtype == ZC_F32) {
        const float *f = (const float *)g;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s = fma((double)f[i], (double)f[i], s);
    } else if (dtype == ZC_BF16) {
        const uint16_t *h = (const uint16_t *)g;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) { double x = zc_f32_from_bits((uint32_t)h[i] << 16); s = fma(x, x, s); }
    } else {
        const fp16_t *h = (const fp16_t *)g;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) { double x = fp16_to_f32(h[i]); s = fma(x, x, s); }
    }
    return s;
}

// The same over g[0..n), in an order that does not depend on the thread count: blocks of 64K
// elements, each summed by one thread, the blocks' sums then added in order. (An OpenMP
// reduction adds the threads' partial sums in the order they finish: the sum could differ in
// its last bits from run to run with 2 threads, and between thread counts; rarely visible once
// the norm is rounded to float, but then, through clipping, in every step after it.)
static double sum_squares(const void *g, size_t n, int dtype) {
    enum { BLOCK = 1 << 16, GROUP = 256 };
    double total = 0.0, part[GROUP];
    size_t nb = (n + BLOCK - 1) / BLOCK;
    for (size_t b0 = 0; b0 < nb; b0 += GROUP) {
        size_t cnt = nb - b0 < GROUP ? nb - b0 : GROUP;
#pragma omp parallel for schedule(static) if (cnt > 1)
        for (size_t j = 0; j < cnt; j++) {
            size_t i0 = (b0 + j) * BLOCK, i1 = i0 + BLOCK < n ? i0 + BLOCK : n;
            part[j] = sum_squares_block(g, i0, i1, dtype);
        }
        for (size_t j = 0; j < cnt; j++) total += part[j];
    }
    return total;
}

// The global L2 norm of the gradient (padding and padded vocabulary rows hold zeros). In
// 16-bit runs an Inf or NaN anywhere makes it non-finite on every rank: the overflow signal.
static float gpt2_grad_norm(GPT2 *m) {
    Zero *z = &m->z;
    double sum = 0.0;
    for (int u = 0; u < z->lay.num_units; u++) sum += sum_squares(zero_update_grads(z, u), zero_update_count(z, u), m->dtype);
    return zero_global_grad_norm(z, sum);
}

static void gpt2_update(GPT2 *m, const OptStep *step) { zero_update(&m->z, step); }
// classifier_loss returns every micro-step's loss at once: none is pending (trainer.h)
static double gpt2_pending_losses(GPT2 *m) { (void)m; return 0.0; }
// nothing of its own to report at the end (trainer.h)
static void gpt2_report(GPT2 *m, FILE *out, FILE *log) { (void)m; (void)out; (void)log; }

// The logits (Vp floats) of position t of row 0, on the host: what the sampler draws from.
static const float *gpt2_logits_row(GPT2 *m, int t) { return m->acts.logits + (size_t)t * m->cfg.padded_vocab_size; }

// ----------------------------------------------------------------------------------------
// The run: options, data, the loop, reports, checkpoints (shared with the GPU trainer)

struct Run;
static ZeroBackend trainer_backend(struct Run *r);
#include "run/trainer.h"

// This rank's collectives: MPI, with the watchdog's timeout from the options.
static ZeroBackend trainer_backend(Run *r) {
    MpiBackend *b = (MpiBackend *)r->backend;
    b->comm = MPI_COMM_WORLD;
    b->rank = r->rank;
    b->world = r->world;
    b->nodes = r->nodes;
    b->timeout = r->cfg.comm_timeout;
    b->hang = &r->hang;
    mpi_handle_errors(b);
    MPI_Op_create(mpi_sum_bf16, 1, &b->sum16[ZC_BF16]);
    MPI_Op_create(mpi_sum_fp16, 1, &b->sum16[ZC_FP16]);
    return mpi_backend(b);
}

// Ranks on one machine share its cores, unless the user said otherwise (OMP_NUM_THREADS).
static void share_cores(void) {
    int rank, lrank, nlocal;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    job_local(MPI_COMM_WORLD, &lrank, &nlocal);
    int threads = cpu_threads_per_rank(nlocal); // the cores this rank may run on (its binding), or the user's choice
    // OpenMPI binds each rank to one core when it starts one or two ranks: on a machine with
    // more cores those would sit idle.
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (rank == 0 && (long)omp_get_num_procs() * nlocal < online)
        printf("note: mpirun bound each rank to %d of this machine's %ld cores; with `mpirun --bind-to none` the "
               "ranks here share all of them\n", omp_get_num_procs(), online);
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads); // OpenBLAS keeps its own count: tell it the same
}

#ifndef TESTING
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan")) return planner_main(argc, argv, &cpu_plan_backend); // arithmetic only: no MPI
    if (argc > 1 && !strcmp(argv[1], "--export")) return export_main(argc, argv);
    mpi_heap_huge_pages(argv);
    openblas_pick_threading(argv);
    openblas_pick_core(argv);
    preempt_install(); // (after the re-executions above, which reset it)
    mpi_keep_heap();
    MPI_Init(&argc, &argv);
    share_cores();
    static Run run; // large: keep it off the stack
    static MpiBackend mpi;
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    openblas_report(rank, omp_get_max_threads());
    mpi_heap_report(rank, world);
    run.blas = openblas_description();
    run.backend = &mpi;
    run.plan_backend = &cpu_plan_backend;
    int rc = trainer_run(&run, argc, argv);
    MPI_Finalize();
    return rc;
}
#endif
