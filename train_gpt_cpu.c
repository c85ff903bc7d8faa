// train_gpt_cpu.c: GPT-2 training on the CPU, in one file you can read top to bottom.
//
// Sections: the kernels (forward and backward of every op, OpenMP + OpenBLAS; the matmuls' paths
// are cpu/matmul.h's), the model (GPT2 and the storage hooks the passes call, cpu/storage.h; the
// loss; the gradient norm and the update over this rank's partition), and main with the MPI
// backend (cpu/mpi_backend.h). What is not CPU-specific is shared with the GPU trainer: the
// passes over the kernels (model.h), the run with its loop (trainer.h), ZeRO (zero.h), the model
// description (gpt2.h), options, data, checkpoints.
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
#include "cpu/memory.h"
#include "cpu/matmul.h"
#include "cpu/tensor_notes.h"
#include "cpu/mpi_backend.h"

// ----------------------------------------------------------------------------------------
// Kernels. Shapes: B batch, T time, C channels, NH heads, V vocabulary (Vp padded).
// Backward kernels ACCUMULATE (+=) into parameter gradients, because gradients accumulate
// over micro-steps, and OVERWRITE activation gradients unless their comment says otherwise.
// The one exception is matmul_backward's weight gradient in a range the notes mark fresh.

// The kernels' per-run context (model.h hands it to every kernel; most need none of it):
// cpu_kernels_setup fills it, and the storage hooks (cpu/storage.h) leave it their notes.
typedef struct {
    CpuMatmul mm;       // the matmuls' path, staging and packing scratch (cpu/matmul.h)
    TensorNotes notes;  // what the storage hooks say of the tensors beyond their fp32 values (cpu/tensor_notes.h)
    int head_simd;      // the attention heads' products on cpu/head_gemm.h's AVX-512 kernel; else sgemm
    // bf16 runs: GELU of every bf16 value, rounded to bf16, and GELU's derivative of every bf16
    // value (65536 entries each, indexed by the bits; gelu_tables_alloc), else NULL. GELU reads
    // them wherever the notes hold its input's stored bf16 values (only bf16 runs have them).
    bf16_t *gelu16;
    float *gelu_grad32;
} CpuKernels;

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

// out (N,OC) = inp (N,C) . wᵀ + bias, w (OC,C) as in PyTorch's Linear; bias (OC) or NULL; w16: w
// in bf16 (bf16 runs), or NULL. cpu/matmul.h computes it on the run's path, told what the storage
// noted of inp (its stored bf16 values) and of out (wanted in bf16 only).
static void matmul_forward(CpuKernels *k, float *out, const float *inp, const float *w, const void *w16, const float *bias,
                           int N, int C, int OC) {
    Out16 *o16 = notes_out16(&k->notes, out);
    notes_staging_reused(&k->notes);
    if (cpu_matmul_forward(&k->mm, out, o16 ? o16->x16 : NULL, inp, notes_stored16(&k->notes, inp), w, (const bf16_t *)w16,
                           bias, N, C, OC))
        o16->done = 1;
}

// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += doutᵀ . inp;  dbias (OC) += the column sums of dout
// (or NULL). Told what the storage noted: inp's stored bf16 values, dout's where the loss left
// them, and how dw is written (fresh: stored, not added; or straight into its 16-bit gradient).
static void matmul_backward(CpuKernels *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, const void *w16, int N, int C, int OC) {
    const bf16_t *dout16 = notes_take_dout16(&k->notes, dout);
    cpu_matmul_backward(&k->mm, dinp, notes_grad(&k->notes, dw), dbias, dout, dout16, inp, notes_stored16(&k->notes, inp), w,
                        (const bf16_t *)w16, N, C, OC);
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
    const bf16_t *inp16 = notes_stored16(&k->notes, inp); // (as in the backward, below)
    Out16 *o16 = notes_out16(&k->notes, out);
    if (inp16 && o16) { // only its bf16 values (out16), looked up
        bf16_t *h16 = o16->x16;
        const bf16_t *g = k->gelu16;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) h16[i] = g[inp16[i]];
        o16->done = 1;
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
    const bf16_t *inp16 = notes_stored16(&k->notes, inp);
    if (inp16) {
        const float *g = k->gelu_grad32;
#pragma omp parallel for simd
        for (size_t i = 0; i < n; i++) dinp[i] = g[inp16[i]] * dout[i];
        return;
    }
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dinp[i] = gpt2_gelu_grad(inp[i]) * dout[i];
}

// matmul_backward, then the GELU's backward in place: dinp (N,C) = gelu'(pre) * (dout . w)
static void matmul_backward_gelu(CpuKernels *k, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                                 const float *w, const void *w16, const float *pre, int N, int C, int OC) {
    matmul_backward(k, dinp, dw, dbias, dout, inp, w, w16, N, C, OC);
    gelu_backward(k, dinp, pre, dinp, (size_t)N * C);
}

// out = a + b, elementwise (n): the residual connections
static void residual_forward(CpuKernels *k, float *out, const float *a, const float *b, size_t n) {
    (void)k;
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
// p (n) = 0, with every core (cpu/memory.h)
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

// The kernels' context for a run of this precision at batches up to (B,T): the matmul path and
// its memory, the attention heads' kernel, bf16 runs' GELU tables; bytes added to *work.
static void cpu_kernels_setup(CpuKernels *k, const GPT2Config *cfg, int B, int T, int dtype, int rank, size_t *work) {
    cpu_matmul_setup(&k->mm, cfg, B, T, dtype, rank, work);
    k->head_simd = gemm_f32_supported();
    if (dtype == ZC_BF16) {
        gelu_tables_alloc(k);
        *work += CPU_GELU_TABLES_BYTES;
    }
}
static void cpu_kernels_free(CpuKernels *k) {
    cpu_matmul_free(&k->mm);
    free(k->gelu16);
}

// ----------------------------------------------------------------------------------------
// The model: GPT2, its storage and the hooks the passes call (cpu/storage.h), the loss, and the
// passes themselves (core/model.h, the same as the GPU trainer's).
#include "cpu/storage.h"

// The fused softmax + cross-entropy (+ gradient) over the logits; the mean loss.
static float classifier_loss(GPT2 *m, int N, float dloss) {
    const GPT2Config *c = &m->cfg;
    // bf16 runs on gemm_bf16: the gradient goes straight into the staging as the LM head
    // backward's bf16 dout (a note for matmul_backward)
    bf16_t *g16 = dloss != 0.0f && bf16_gemm(m) ? m->kern.mm.staging : NULL;
    crossentropy_softmax_fused(m->acts.logits, m->acts.losses, m->dev_targets, N, c->vocab_size, c->padded_vocab_size, dloss, g16);
    m->kern.notes.dout16.f32 = g16 ? m->acts.logits : NULL;
    m->kern.notes.dout16.x16 = g16;
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
    mpi_find_hosts(b);
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
        if (!strcmp(argv[i], "--plan")) return planner_main(argc, argv, &cpu_plan_backend, &config_cpu_build); // arithmetic only: no MPI
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
    mpi_free_groups(&mpi);
    MPI_Finalize();
    return rc;
}
#endif
