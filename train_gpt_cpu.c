// train_gpt_cpu.c: GPT-2 training on the CPU, in one file you can read top to bottom.
//
// Sections: kernels (forward and backward of every op, OpenMP + OpenBLAS), the model
// (parameters, activations, forward, backward, AdamW), sampling, logging, and main (the
// training loop). The model description (flat parameter layout, checkpoints, activation list),
// the options, the optimizer math and the dataloader live in shared headers that the GPU
// trainer includes too; this file holds only what is CPU-specific.
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

#include "gpt2.h"
#include "config.h"
#include "optimizer.h"
#include "zero.h"
#include "planner.h"
#include "dataloader.h"
#include "tokenizer.h"
#include "ds_config.h"
#include "checkpoint.h"

// ----------------------------------------------------------------------------------------
// Utilities

static void *xmalloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 1;
    // 64-byte alignment: whole cache lines, and full AVX-512 vectors for the compiler
    if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64) != 0) {
        fprintf(stderr, "error: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}
static float *xcalloc_floats(size_t n) {
    float *p = (float *)xmalloc(n * sizeof(float));
    memset(p, 0, n * sizeof(float));
    return p;
}
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// ----------------------------------------------------------------------------------------
// Kernels. Shapes: B batch, T time, C channels, NH heads, V vocabulary (Vp padded).
// Backward kernels ACCUMULATE (+=) into parameter gradients, because gradients accumulate
// over micro-steps, and OVERWRITE activation gradients unless their comment says otherwise.

// out (B,T,C) = wte[inp[b,t]] + wpe[t]; inp (B,T) token ids; wte (Vp,C); wpe (maxT,C)
static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *we = wte + (size_t)inp[b * T + t] * C, *pe = wpe + (size_t)t * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
}

// dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T, int C) {
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
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
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
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C) {
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

// out (N,OC) = inp (N,C) . w^T + bias, w (OC,C) as in PyTorch's Linear; bias (OC) or NULL.
// accumulate: add to what out already holds (a residual connection) instead of overwriting.
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC, int accumulate) {
    if (bias || accumulate) {
#pragma omp parallel for
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            if (!accumulate) for (int j = 0; j < OC; j++) o[j] = bias[j];
            else if (bias) for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C,
                (bias || accumulate) ? 1.0f : 0.0f, out, OC);
}

// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += dout^T . inp;  dbias (OC) += column sums of dout
static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                            const float *w, int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
#pragma omp parallel for
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
                for (int o = o0; o < o1; o++) dbias[o] += d[o];
            }
        }
    }
}

// Causal self-attention. qkv (B,T,3C) holds q, k, v each (NH heads of hs = C/NH channels);
// out (B,T,C) the heads' outputs side by side; att (B,NH,T,T) the softmax probabilities,
// row t using columns 0..t (the rest is left untouched and never read).
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    a[t2] = dot * scale;
                    if (a[t2] > maxv) maxv = a[t2];
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = expf(a[t2] - maxv); sum += a[t2]; }
                float inv = 1.0f / sum;
                float *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] *= inv;
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                    for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
                }
            }
}

// dqkv (B,T,3C) from dout (B,T,C), the saved qkv and att. Parallel over (b, h): each task
// writes only its own head's columns, so the scatter into dk and dv never races.
// scratch: T floats per thread.
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att,
                               int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *datt = (float *)xmalloc((size_t)T * sizeof(float));
#pragma omp for collapse(2)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) { // zero this head's slice of dq, dk, dv
                    float *d = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                    for (int i = 0; i < hs; i++) d[i] = d[C + i] = d[2 * C + i] = 0.0f;
                }
                for (int t = 0; t < T; t++) {
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    const float *dout_t = dout + ((size_t)b * T + t) * C + h * hs;
                    const float *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                    float *dq = dqkv + ((size_t)b * T + t) * C3 + h * hs;
                    // through out_t = sum_t2 a[t2] v[t2]
                    float weighted = 0.0f;
                    for (int t2 = 0; t2 <= t; t2++) {
                        const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                        float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * hs;
                        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                        for (int i = 0; i < hs; i++) { dot += dout_t[i] * v[i]; }
                        for (int i = 0; i < hs; i++) dv[i] += a[t2] * dout_t[i];
                        datt[t2] = dot;
                        weighted += a[t2] * dot;
                    }
                    // through the softmax, then the scaled dot products q.k
                    for (int t2 = 0; t2 <= t; t2++) {
                        float dpre = a[t2] * (datt[t2] - weighted) * scale;
                        const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                        float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                        for (int i = 0; i < hs; i++) { dq[i] += dpre * k[i]; dk[i] += dpre * q[i]; }
                    }
                }
            }
        free(datt);
    }
}

// GELU, tanh approximation as in GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
#define GELU_SCALE 0.7978845608028654f
static void gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
    }
}
// dinp = gelu'(inp) * dout, elementwise; dinp may be the same buffer as dout
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

// The LM head's loss, fused: for each of N rows of logits (N,Vp), the softmax over the first V
// columns (padded columns never enter it), the cross-entropy against targets (N) into losses (N),
// and, when dloss != 0, the gradient dloss * (softmax - onehot) written over the logits in
// place (padded columns get 0), so no second (N,Vp) buffer is ever needed.
static void crossentropy_softmax_fused(float *logits, float *losses, const int *targets,
                                       int N, int V, int Vp, float dloss) {
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *l = logits + (size_t)n * Vp;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) maxv = l[i] > maxv ? l[i] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) sum += expf(l[i] - maxv);
        int tgt = targets[n];
        losses[n] = logf(sum) + maxv - l[tgt];
        if (dloss != 0.0f) {
            float inv = 1.0f / sum;
#pragma omp simd
            for (int i = 0; i < V; i++) l[i] = expf(l[i] - maxv) * inv * dloss;
            l[tgt] -= dloss;
            for (int i = V; i < Vp; i++) l[i] = 0.0f;
        }
    }
}

// ----------------------------------------------------------------------------------------
// Communication: the MPI backend that zero.h drives. It performs collectives, nothing more.

#define MAX_PENDING (GPT2_MAX_UNITS + 8)
typedef struct {
    MPI_Comm comm;
    int rank, world, step, num_units;
    double timeout;                 // --comm-timeout: seconds before the watchdog aborts
    MPI_Request req[MAX_PENDING];
    int busy[MAX_PENDING];
    float *move_from[MAX_PENDING], *move_to[MAX_PENDING]; // MPI's in-place reduce-scatter
    size_t move_n[MAX_PENDING];                           // leaves the result at the top
} MpiBackend;

static void unit_name(char *buf, size_t n, int u, int num_units) { // " of unit 3 (layer 2)"
    if (u == UNIT_EMBED) snprintf(buf, n, " of unit 0 (embeddings)");
    else if (u == num_units - 1) snprintf(buf, n, " of unit %d (final layernorm)", u);
    else snprintf(buf, n, " of unit %d (layer %d)", u, u - 1);
}
static int mpi_slot(MpiBackend *b) {
    for (int h = 0; h < MAX_PENDING; h++)
        if (!b->busy[h]) { b->busy[h] = 1; b->move_n[h] = 0; return h; }
    fprintf(stderr, "error: rank %d: more than %d collectives in flight\n", b->rank, MAX_PENDING);
    MPI_Abort(b->comm, 1);
    return -1;
}
static int mpi_all_reduce(void *ctx, float *buf, size_t n) {
    MpiBackend *b = (MpiBackend *)ctx;
    int h = mpi_slot(b);
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, b->comm, &b->req[h]);
    return h;
}
static int mpi_reduce_scatter(void *ctx, float *send, float *recv, size_t n) {
    MpiBackend *b = (MpiBackend *)ctx;
    int h = mpi_slot(b);
    if (recv == send + (size_t)b->rank * n) {
        MPI_Ireduce_scatter_block(MPI_IN_PLACE, send, (int)n, MPI_FLOAT, MPI_SUM, b->comm, &b->req[h]);
        b->move_from[h] = send; b->move_to[h] = recv; b->move_n[h] = n;
    } else {
        MPI_Ireduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, b->comm, &b->req[h]);
    }
    return h;
}
static int mpi_all_gather(void *ctx, const float *send, float *recv, size_t n) {
    MpiBackend *b = (MpiBackend *)ctx;
    int h = mpi_slot(b);
    if (send == recv + (size_t)b->rank * n)
        MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, (int)n, MPI_FLOAT, b->comm, &b->req[h]);
    else
        MPI_Iallgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, b->comm, &b->req[h]);
    return h;
}
// Waits by polling, so that a collective that never completes (a peer stuck or gone) ends
// the job with a message instead of a silent hang. Polling sleeps a little between tests so
// that ranks sharing cores leave them to those still computing.
static void mpi_wait_request(MpiBackend *b, MPI_Request *req, const char *what, int unit) {
    double start = MPI_Wtime();
    for (int spins = 0;; spins++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (MPI_Wtime() - start > b->timeout) {
            char name[64] = "";
            if (unit >= 0) unit_name(name, sizeof(name), unit, b->num_units);
            fprintf(stderr, "error: rank %d: %s%s did not complete within %g s at step %d; "
                            "a peer is stuck or gone (--comm-timeout); aborting the job\n",
                    b->rank, what, name, b->timeout, b->step);
            MPI_Abort(b->comm, 3);
        }
        if (spins > 100) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); }
    }
}
static void mpi_wait(void *ctx, int h, const char *what, int unit) {
    MpiBackend *b = (MpiBackend *)ctx;
    mpi_wait_request(b, &b->req[h], what, unit);
    if (b->move_n[h] && b->move_to[h] != b->move_from[h])
        memmove(b->move_to[h], b->move_from[h], b->move_n[h] * sizeof(float));
    b->busy[h] = 0;
}
static void mpi_progress(void *ctx) {
    MpiBackend *b = (MpiBackend *)ctx;
    for (int h = 0; h < MAX_PENDING; h++) {
        int done; // a completed request becomes MPI_REQUEST_NULL; mpi_wait then returns at once
        if (b->busy[h]) MPI_Test(&b->req[h], &done, MPI_STATUS_IGNORE);
    }
}
static void mpi_sum_doubles(void *ctx, double *x, int n) {
    MpiBackend *b = (MpiBackend *)ctx;
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, b->comm, &req);
    mpi_wait_request(b, &req, "all_reduce of the loss or gradient norm", -1);
}
// Rank 0 collects n doubles from every rank (for the reports), under the watchdog too.
static void mpi_gather_doubles(MpiBackend *b, const double *mine, double *all, int n) {
    MPI_Request req;
    MPI_Igather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, b->comm, &req);
    mpi_wait_request(b, &req, "gather of reports", -1);
}
static float *host_alloc_floats(void *ctx, size_t n) { (void)ctx; return xcalloc_floats(n); }
static void host_free_floats(void *ctx, float *p) { (void)ctx; free(p); }
static void host_zero_floats(void *ctx, float *p, size_t n) { (void)ctx; memset(p, 0, n * sizeof(float)); }
static void host_add_floats(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static ZeroBackend mpi_backend(MpiBackend *b) {
    ZeroBackend be = {b, mpi_all_reduce, mpi_reduce_scatter, mpi_all_gather, mpi_wait, mpi_progress, mpi_sum_doubles,
                      host_alloc_floats, host_free_floats, host_zero_floats, host_add_floats};
    return be;
}

// ----------------------------------------------------------------------------------------
// The model. Where parameters, gradients and optimizer state live is ZeRO's business: the
// forward and backward ask zero.h for each unit's parameters and gradients as they go.

typedef struct {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *dresidual, *dbtc, *dbt4c, *dqkv;
} Activations;

typedef struct {
    GPT2Config cfg;
    Zero z;                        // parameters, gradients, Adam moments, ZeRO buffers
    Activations acts;
    float *acts_memory;
    size_t bytes_activations;
    int B, T;                      // the largest batch the activations hold
    int *inputs, *targets;         // (B,T)
} GPT2;

static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int stage, int rank, int world, ZeroBackend be) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    zero_init(&m->z, cfg, stage, rank, world, be);
    size_t numel[NUM_ACTIVATIONS], total = gpt2_activation_floats(cfg, B, T);
    gpt2_activation_numels(cfg, B, T, numel);
    m->acts_memory = xcalloc_floats(total);
    m->bytes_activations = total * sizeof(float);
    m->z.mem[MEM_ACTIVATIONS] = m->bytes_activations;
    float **slots[NUM_ACTIVATIONS] = {
        &m->acts.encoded, &m->acts.ln1, &m->acts.ln1_mean, &m->acts.ln1_rstd, &m->acts.qkv,
        &m->acts.atty, &m->acts.att, &m->acts.residual2, &m->acts.ln2, &m->acts.ln2_mean,
        &m->acts.ln2_rstd, &m->acts.fch, &m->acts.fch_gelu, &m->acts.residual3, &m->acts.lnf,
        &m->acts.lnf_mean, &m->acts.lnf_rstd, &m->acts.logits, &m->acts.losses,
        &m->acts.dresidual, &m->acts.dbtc, &m->acts.dbt4c, &m->acts.dqkv};
    float *p = m->acts_memory;
    for (int i = 0; i < NUM_ACTIVATIONS; i++) { *slots[i] = p; p += numel[i]; }
    m->B = B;
    m->T = T;
    m->inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    m->targets = (int *)xmalloc((size_t)B * T * sizeof(int));
}

static void gpt2_free(GPT2 *m) {
    zero_free(&m->z);
    free(m->acts_memory); free(m->inputs); free(m->targets);
}

// Forward pass over inputs (B,T) with B <= m->B, T <= m->T. With targets it computes the loss
// per position into acts.losses, and with dloss != 0 also the logits' gradient (in place),
// ready for gpt2_backward. dloss is d(objective)/d(loss at one position). Returns the mean
// loss over the B*T positions (0 without targets). Every rank must call it (ZeRO-3 gathers).
static float gpt2_forward(GPT2 *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const GPT2Config *c = &m->cfg;
    Zero *z = &m->z;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T, F = gpt2_final_unit(&z->lay);
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    EmbedTensors emb = gpt2_embed_tensors(c, zero_params(z, UNIT_EMBED, gpt2_unit_of_layer(0)));
    encoder_forward(a->encoded, inputs, emb.wte, emb.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        int u = gpt2_unit_of_layer(l);
        LayerTensors w = gpt2_layer_tensors(c, zero_params(z, u, u + 1)); // u + 1: next layer, or F
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        float *att = a->att + (size_t)l * B * NH * T * T, *residual2 = a->residual2 + l * btc;
        float *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc, *fch_gelu = a->fch_gelu + l * 4 * btc;
        float *residual3 = a->residual3 + l * btc;
        layernorm_forward(ln1, a->ln1_mean + l * N, a->ln1_rstd + l * N, residual, w.ln1w, w.ln1b, N, C);
        matmul_forward(qkv, ln1, w.qkvw, w.qkvb, N, C, 3 * C, 0);
        attention_forward(atty, att, qkv, B, T, C, NH);
        memcpy(residual2, residual, btc * sizeof(float));
        matmul_forward(residual2, atty, w.attprojw, w.attprojb, N, C, C, 1);
        layernorm_forward(ln2, a->ln2_mean + l * N, a->ln2_rstd + l * N, residual2, w.ln2w, w.ln2b, N, C);
        matmul_forward(fch, ln2, w.fcw, w.fcb, N, C, 4 * C, 0);
        gelu_forward(fch_gelu, fch, 4 * btc);
        memcpy(residual3, residual2, btc * sizeof(float));
        matmul_forward(residual3, fch_gelu, w.fcprojw, w.fcprojb, N, 4 * C, C, 1);
    }
    FinalTensors fin = gpt2_final_tensors(c, zero_params(z, F, -1));
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (L - 1) * btc, fin.lnfw, fin.lnfb, N, C);
    matmul_forward(a->logits, a->lnf, emb.wte, NULL, N, C, c->padded_vocab_size, 0); // tied LM head
    if (!targets) return 0.0f;
    crossentropy_softmax_fused(a->logits, a->losses, targets, N, c->vocab_size, c->padded_vocab_size, dloss);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return (float)(sum / N);
}

// Backward pass after gpt2_forward(..., dloss != 0) on the same inputs. Each unit's gradient
// is handed to zero.h as soon as it is complete, so its reduction overlaps the rest.
static void gpt2_backward(GPT2 *m, const int *inputs, int B, int T) {
    const GPT2Config *c = &m->cfg;
    Zero *z = &m->z;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T, F = gpt2_final_unit(&z->lay);
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    // The embeddings are used first and last: their gradient collects the LM head's share now
    // and the token lookup's at the end, and is reduced once, after both.
    EmbedTensors emb = gpt2_embed_tensors(c, zero_params(z, UNIT_EMBED, -1));
    EmbedTensors demb = gpt2_embed_tensors(c, zero_grads(z, UNIT_EMBED));
    FinalTensors fin = gpt2_final_tensors(c, zero_params(z, F, gpt2_unit_of_layer(L - 1)));
    FinalTensors dfin = gpt2_final_tensors(c, zero_grads(z, F));
    matmul_backward(a->dbtc, demb.wte, NULL, a->logits, a->lnf, emb.wte, N, C, c->padded_vocab_size);
    memset(a->dresidual, 0, btc * sizeof(float));
    layernorm_backward(a->dresidual, dfin.lnfw, dfin.lnfb, a->dbtc, a->residual3 + (L - 1) * btc,
                       fin.lnfw, a->lnf_mean, a->lnf_rstd, N, C);
    zero_grads_done(z, F);
    // dresidual is the gradient of the residual stream; each block adds its branches to it.
    for (int l = L - 1; l >= 0; l--) {
        int u = gpt2_unit_of_layer(l);
        LayerTensors w = gpt2_layer_tensors(c, zero_params(z, u, l > 0 ? u - 1 : -1));
        LayerTensors g = gpt2_layer_tensors(c, zero_grads(z, u));
        const float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * btc;
        float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + l * 3 * btc, *atty = a->atty + l * btc;
        float *att = a->att + (size_t)l * B * NH * T * T, *residual2 = a->residual2 + l * btc;
        float *ln2 = a->ln2 + l * btc, *fch = a->fch + l * 4 * btc, *fch_gelu = a->fch_gelu + l * 4 * btc;
        // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2))))
        matmul_backward(a->dbt4c, g.fcprojw, g.fcprojb, a->dresidual, fch_gelu, w.fcprojw, N, 4 * C, C);
        gelu_backward(a->dbt4c, fch, a->dbt4c, 4 * btc);
        matmul_backward(a->dbtc, g.fcw, g.fcb, a->dbt4c, ln2, w.fcw, N, C, 4 * C);
        layernorm_backward(a->dresidual, g.ln2w, g.ln2b, a->dbtc, residual2, w.ln2w,
                           a->ln2_mean + l * N, a->ln2_rstd + l * N, N, C);
        // attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual))))
        matmul_backward(a->dbtc, g.attprojw, g.attprojb, a->dresidual, atty, w.attprojw, N, C, C);
        attention_backward(a->dqkv, a->dbtc, qkv, att, B, T, C, NH);
        matmul_backward(a->dbtc, g.qkvw, g.qkvb, a->dqkv, ln1, w.qkvw, N, C, 3 * C);
        layernorm_backward(a->dresidual, g.ln1w, g.ln1b, a->dbtc, residual, w.ln1w,
                           a->ln1_mean + l * N, a->ln1_rstd + l * N, N, C);
        zero_grads_done(z, u);
    }
    encoder_backward(demb.wte, demb.wpe, a->dresidual, inputs, B, T, C);
    zero_grads_done(z, UNIT_EMBED);
    zero_end_backward(z);
}

// The global L2 norm of the gradient (padding and padded vocabulary rows hold zeros).
static float gpt2_grad_norm(GPT2 *m) {
    Zero *z = &m->z;
    double sum = 0.0;
    for (int u = 0; u < z->lay.num_units; u++) {
        const float *g = zero_update_grads(z, u);
        size_t n = zero_update_count(z, u);
#pragma omp parallel for reduction(+ : sum)
        for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
    }
    return zero_global_grad_norm(z, sum);
}

// AdamW over the elements this rank owns, walked as runs of one kind (decayed, not decayed,
// frozen) because a partition boundary can cut through any tensor.
typedef struct { size_t base; float *p, *g, *m, *v; const AdamWStep *step; } UpdateRange;
static void adamw_segment(const ParamSegment *seg, void *ctx) {
    UpdateRange *r = (UpdateRange *)ctx;
    if (seg->kind == SEG_FROZEN) return; // padding and unused vocabulary rows stay zero
    int decay = seg->kind == SEG_DECAY;
    size_t lo = seg->begin - r->base, hi = seg->end - r->base;
#pragma omp parallel for simd
    for (size_t i = lo; i < hi; i++) adamw_element(&r->p[i], &r->m[i], &r->v[i], r->g[i], r->step, decay);
}

static void gpt2_update(GPT2 *m, const AdamWStep *step) {
    Zero *z = &m->z;
    for (int u = 0; u < z->lay.num_units; u++) {
        size_t begin = zero_update_begin(z, u);
        UpdateRange r = {begin, zero_update_params(z, u), zero_update_grads(z, u),
                         zero_update_moment(z, z->adam_m, u), zero_update_moment(z, z->adam_v, u), step};
        gpt2_for_each_segment(&z->lay, begin, begin + zero_update_count(z, u), adamw_segment, &r);
    }
    zero_gather_updated_params(z);
}

// ----------------------------------------------------------------------------------------
// Parameters in and out: initialisation, checkpoints, gradient dumps, unit by unit, so that
// a ZeRO-3 rank never needs the whole model in memory.

static int gpt2_load_or_init(GPT2 *m, FILE *f, const char *path, int version, uint64_t seed) {
    Zero *z = &m->z;
    float *unit = z->stage == 3 ? xcalloc_floats(gpt2_unit_padded(&z->lay, UNIT_EMBED) > zero_max_layer(z)
                                                 ? gpt2_unit_padded(&z->lay, UNIT_EMBED) : zero_max_layer(z)) : NULL;
    int bad = 0;
    for (int u = 0; u < z->lay.num_units && !bad; u++) {
        float *dst = unit ? unit : z->params + z->lay.unit_offset[u];
        if (f) {
            memset(dst, 0, gpt2_unit_padded(&z->lay, u) * sizeof(float));
            bad = gpt2_unit_file_io(f, &z->lay, u, dst, 0, version) != 0;
        } else {
            gpt2_init_unit(&z->lay, u, seed, dst);
        }
        if (unit) memcpy(z->params + zero_shard_offset(z, u), unit + (size_t)z->rank * zero_slice(z, u),
                         zero_slice(z, u) * sizeof(float));
    }
    free(unit);
    if (bad) fprintf(stderr, "error: %s: read failed\n", path);
    return bad ? -1 : 0;
}

// Every rank calls it (ZeRO-3 gathers each unit); rank 0 writes.
static int gpt2_save(GPT2 *m, const char *path) {
    Zero *z = &m->z;
    FILE *f = z->rank == 0 ? gpt2_begin_checkpoint(path, &m->cfg, 3) : NULL;
    int ok = z->rank != 0 || f != NULL;
    zero_begin_forward(z, 0, 1);
    for (int u = 0; u < z->lay.num_units; u++) {
        float *unit = zero_params(z, u, -1);
        if (f && ok) ok = gpt2_unit_file_io(f, &z->lay, u, unit, 1, 3) == 0;
    }
    if (f) return gpt2_end_checkpoint(f, path, ok);
    return ok ? 0 : -1;
}

// The gradient in checkpoint format: the same header and tensor order as a model file, so any
// tool that reads models reads it (test/reference_gpt2.py does).
static int dump_grads(const char *path, GPT2 *m) {
    Zero *z = &m->z;
    FILE *f = gpt2_begin_checkpoint(path, &m->cfg, 3);
    int ok = f != NULL;
    for (int u = 0; u < z->lay.num_units && ok; u++) ok = gpt2_unit_file_io(f, &z->lay, u, zero_update_grads(z, u), 1, 3) == 0;
    return f ? gpt2_end_checkpoint(f, path, ok) : -1;
}

// ----------------------------------------------------------------------------------------
// Sampling

static uint32_t rng_u32(uint64_t *s) { return (uint32_t)(gpt2_splitmix64(s) >> 32); }
static float rng_f32(uint64_t *s) { return (rng_u32(s) >> 8) / 16777216.0f; }

// Draws from softmax(logits[0..V)) at temperature 1.
static int sample_token(const float *logits, int V, float coin) {
    float maxv = -INFINITY, sum = 0.0f;
    for (int i = 0; i < V; i++) maxv = logits[i] > maxv ? logits[i] : maxv;
    for (int i = 0; i < V; i++) sum += expf(logits[i] - maxv);
    float cdf = 0.0f, r = coin * sum;
    for (int i = 0; i < V; i++) {
        cdf += expf(logits[i] - maxv);
        if (r < cdf) return i;
    }
    return V - 1;
}

// Generates len tokens after an end-of-text token; rank 0 prints them (as text when a
// tokenizer is loaded, as ids otherwise). Every rank runs it: under ZeRO-3 the forward
// needs everyone's shard, and the same rng keeps the ranks' contexts identical.
static void gpt2_sample(GPT2 *m, const Tokenizer *tok, int len, uint64_t *rng) {
    int eot = m->cfg.vocab_size == 50257 ? 50256 : m->cfg.vocab_size - 1, print = m->z.rank == 0;
    int *ctx = m->inputs, n = 1; // the context: at most m->T tokens, the oldest dropped first
    ctx[0] = eot;
    if (print) printf("sample: ");
    for (int i = 0; i < len; i++) {
        zero_begin_forward(&m->z, 0, 1);
        gpt2_forward(m, ctx, NULL, 1, n, 0.0f);
        const float *last = m->acts.logits + (size_t)(n - 1) * m->cfg.padded_vocab_size;
        int next = sample_token(last, m->cfg.vocab_size, rng_f32(rng));
        if (n == m->T) memmove(ctx, ctx + 1, (size_t)(--n) * sizeof(int));
        ctx[n++] = next;
        if (!print) continue;
        if (tok) tokenizer_print(tok, next, stdout);
        else printf("%d ", next);
        fflush(stdout);
    }
    if (print) printf("\n");
}

// ----------------------------------------------------------------------------------------
// A training run: everything main needs, in one place

typedef struct {
    TrainConfig cfg;
    int rank, world, accum;
    MpiBackend mpi;
    GPT2 model;
    DataLoader train, val;
    int have_val, have_tok;
    int first_step;      // 1, or the step after the checkpoint resumed from
    uint64_t sample_rng; // the sampler's generator: part of a checkpoint
    Tokenizer tok;
    FILE *log;         // rank 0 only
} Run;

// Setup failures are agreed on by all ranks, so that every rank exits cleanly together;
// failures once training runs are abrupt: MPI_Abort ends the job.
static int all_ok(int ok) {
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return ok;
}
static void die(void) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (world > 1) MPI_Abort(MPI_COMM_WORLD, 1); // ends every rank (OpenMPI says so at length)
    MPI_Finalize();
    exit(1);
}

// Ranks on one machine share its cores, unless the user said otherwise (OMP_NUM_THREADS).
static void share_cores(int rank) {
    MPI_Comm local;
    int nlocal;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &nlocal);
    MPI_Comm_free(&local);
    if (getenv("OMP_NUM_THREADS")) return;
    int threads = omp_get_num_procs() / nlocal;
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}

// Options, model, data, log. Returns 0 to train, 1 to exit successfully (--help), -1 on error.
static int setup(Run *r, int argc, char **argv) {
    TrainConfig *c = &r->cfg;
    config_defaults(c);
    // Options are the same on every rank: only rank 0 reports what is wrong with them.
    int saved_stderr = dup(2);
    if (r->rank != 0 && !freopen("/dev/null", "w", stderr)) return -1;
    int rc = config_parse(c, argc, argv);
    if (rc == 0 && c->ds_config_path && ds_config_apply(c, c->ds_config_path, r->world, c->ds_strict)) rc = -1;
    FILE *init = NULL;
    GPT2FileInfo info;
    CkptManifest *resume = c->resume_path ? (CkptManifest *)xmalloc(sizeof(CkptManifest)) : NULL;
    if (rc == 0 && c->init_path) {
        if ((init = gpt2_open_checkpoint(c->init_path, &info))) c->model = info.cfg;
        else rc = -1;
    }
    if (rc == 0 && resume) {
        if (ckpt_read_manifest(c->resume_path, resume) == 0) c->model = resume->cfg;
        else rc = -1;
    }
    if (rc == 0 && config_validate(c, r->world)) rc = -1;
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    if (r->rank != 0 && rc == 1) rc = 1;
    if (rc != 0) { if (init) fclose(init); free(resume); return rc; }
    if (r->rank == 0 && c->ds_config_path) config_print_resolved(stdout, c);

    r->accum = config_accum_steps(c, r->world);
    r->mpi.comm = MPI_COMM_WORLD;
    r->mpi.rank = r->rank;
    r->mpi.world = r->world;
    r->mpi.timeout = c->comm_timeout;
    r->mpi.num_units = c->model.num_layers + 2;
    gpt2_build(&r->model, &c->model, c->batch, c->seq_len, c->zero_stage, r->rank, r->world, mpi_backend(&r->mpi));
    r->first_step = 1;
    r->sample_rng = c->seed ^ 0x5A3C1E;
    TrainerState st;
    int ok = resume ? ckpt_load(resume, &r->model.z, 1, NULL, NULL) == 0 && ckpt_read_state(resume, &st) == 0
                    : gpt2_load_or_init(&r->model, init, c->init_path, init ? info.version : 3, c->seed) == 0;
    if (init) fclose(init);
    if (!all_ok(ok)) { free(resume); return -1; }

    ok = dataloader_init(&r->train, c->train_data, c->batch, c->seq_len, r->rank, r->world, c->shuffle, c->seed,
                         c->model.vocab_size) == 0;
    if (ok && resume) { // continue exactly where the checkpointed run was
        ok = dataloader_restore(&r->train, &st.train_data) == 0;
        r->first_step = (int)st.step + 1;
        r->sample_rng = st.sample_rng;
        if (r->rank == 0)
            printf("resuming from %s: step %ld, saved by %d ranks at ZeRO-%d\n", resume->dir, resume->step, resume->world,
                   resume->stage);
    }
    free(resume);
    if (!all_ok(ok)) return -1;
    r->have_val = c->val_every > 0 && c->val_steps > 0;
    ok = !r->have_val || dataloader_init(&r->val, c->val_data, c->batch, c->seq_len, r->rank, r->world, 0, c->seed,
                                         c->model.vocab_size) == 0;
    if (!all_ok(ok)) return -1;
    int sampling = c->sample_len > 0 && c->sample_every > 0;
    r->have_tok = sampling && tokenizer_init(&r->tok, c->tokenizer_path) == 0;
    if (r->rank == 0 && sampling && !r->have_tok) printf("(no tokenizer: samples print token ids)\n");
    if (r->rank == 0 && c->log_path && !(r->log = fopen(c->log_path, "w"))) {
        fprintf(stderr, "error: %s: cannot open log file\n", c->log_path);
        ok = 0;
    }
    if (r->log) config_log_resolved(r->log, c);
    return all_ok(ok) ? 0 : -1;
}

// ----------------------------------------------------------------------------------------
// Reports: stdout for people, --log JSON lines for programs (rank 0 writes for all ranks)

static void print_header(const Run *r) {
    const TrainConfig *c = &r->cfg;
    const GPT2Config *g = &c->model;
    char shape[96], batch[96], opt[128];
    snprintf(shape, sizeof(shape), "L=%d C=%d NH=%d maxT=%d V=%d Vp=%d", g->num_layers, g->channels,
             g->num_heads, g->max_seq_len, g->vocab_size, g->padded_vocab_size);
    snprintf(batch, sizeof(batch), "B=%d T=%d x %d procs x %d accum = %ld tokens/step", c->batch, c->seq_len,
             r->world, r->accum, c->total_batch);
    snprintf(opt, sizeof(opt), "lr %g %s warmup %d min %g wd %g clip %g", c->lr, lr_schedule_names[c->lr_schedule],
             c->warmup, c->min_lr_frac, c->weight_decay, c->grad_clip);
    const char *model = c->init_path ? c->init_path : (c->model_name ? c->model_name : "from scratch");
    printf("+--------------------+-------------------------------------------------------+\n");
    printf("| %-18s | %-53s |\n", "model", model);
    printf("| %-18s | %-53s |\n", "shape", shape);
    printf("| %-18s | %-53zu |\n", "parameters", r->model.z.lay.num_params);
    printf("| %-18s | %-53s |\n", "train data", c->train_data);
    printf("| %-18s | %-53llu |\n", "train tokens", (unsigned long long)dataloader_num_tokens(&r->train));
    printf("| %-18s | %-53s |\n", "val data", r->have_val ? c->val_data : "(off)");
    printf("| %-18s | %-53s |\n", "batch", batch);
    printf("| %-18s | %-53d |\n", "steps", c->steps);
    printf("| %-18s | %-53s |\n", "optimizer (AdamW)", opt);
    printf("| %-18s | %-53d |\n", "zero stage", c->zero_stage);
    printf("| %-18s | %-53d |\n", "threads per rank", omp_get_max_threads());
    printf("+--------------------+-------------------------------------------------------+\n");
}

// What every rank allocated, beside the planner's prediction and the textbook (planner.h).
static void report_memory(Run *r) {
    Zero *z = &r->model.z;
    double mine[MEM_KINDS], *all = (double *)xmalloc(sizeof(double) * MEM_KINDS * r->world);
    for (int k = 0; k < MEM_KINDS; k++) mine[k] = (double)z->mem[k];
    mpi_gather_doubles(&r->mpi, mine, all, MEM_KINDS);
    if (r->rank == 0) {
        PlanInput in = planner_input_from_train_config(&r->cfg, r->world);
        MemoryPlan plan;
        if (planner_plan(&in, &plan) == 0) planner_print_table(stdout, &plan, all, r->world);
        for (int q = 0; q < r->world && r->log; q++) {
            fprintf(r->log, "{\"event\":\"memory\",\"rank\":%d,\"world\":%d,\"zero_stage\":%d,\"num_params\":%zu,"
                            "\"padded_params\":%zu", q, r->world, z->stage, z->lay.num_params, z->lay.num_flat);
            for (int k = 0; k < MEM_KINDS; k++) fprintf(r->log, ",\"%s\":%.0f", zero_memory_names[k], all[q * MEM_KINDS + k]);
            fprintf(r->log, "}\n");
        }
    }
    free(all);
}

// Bytes each rank moved this step, per collective (ring model), beside the textbook figure.
static void report_comm(Run *r, int step) {
    Zero *z = &r->model.z;
    double *all = (double *)xmalloc(sizeof(double) * ZC_NUM_COLLECTIVES * r->world);
    mpi_gather_doubles(&r->mpi, z->comm, all, ZC_NUM_COLLECTIVES);
    if (r->rank == 0) {
        for (int q = 0; q < r->world && r->log; q++) {
            double *x = all + q * ZC_NUM_COLLECTIVES;
            fprintf(r->log, "{\"event\":\"comm\",\"step\":%d,\"rank\":%d,\"all_reduce\":%.0f,\"reduce_scatter\":%.0f,"
                            "\"all_gather\":%.0f}\n", step, q, x[ZC_ALL_REDUCE], x[ZC_REDUCE_SCATTER], x[ZC_ALL_GATHER]);
        }
        if (step == 1 && r->world > 1) {
            double total = all[0] + all[1] + all[2], mib = 1024.0 * 1024.0;
            printf("communication per rank in step 1, MiB: all_reduce %.2f, reduce_scatter %.2f, all_gather %.2f = %.2f "
                   "(textbook for one micro-step: %.2f)\n", all[0] / mib, all[1] / mib, all[2] / mib, total / mib,
                   zero_theory_comm(z->stage, (double)z->lay.num_params, r->world) / mib);
        }
    }
    free(all);
}

static void format_eta(char *buf, size_t n, double seconds) {
    long s = (long)(seconds + 0.5);
    snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

// ----------------------------------------------------------------------------------------
// Training

// One optimizer step: accumulate gradients over the micro-steps, reduce them as zero.h
// schedules, clip, update. Returns the loss averaged over the whole global batch.
static float train_step(Run *r, int step, float *norm, float *lr) {
    const TrainConfig *c = &r->cfg;
    GPT2 *m = &r->model;
    int B = c->batch, T = c->seq_len;
    zero_begin_step(&m->z, step);
    r->mpi.step = step;
    // Each position's loss enters the objective with weight 1/(all positions of all ranks),
    // so summing the ranks' gradients gives the gradient of the global mean loss.
    float dloss = 1.0f / ((float)B * T * r->accum * r->world);
    double loss = 0.0;
    for (int micro = 0; micro < r->accum; micro++) {
        if (dataloader_next(&r->train, m->inputs, m->targets)) die();
        zero_begin_forward(&m->z, micro, r->accum);
        loss += gpt2_forward(m, m->inputs, m->targets, B, T, dloss);
        gpt2_backward(m, m->inputs, B, T);
    }
    m->z.be.sum_doubles(m->z.be.ctx, &loss, 1);
    *norm = gpt2_grad_norm(m);
    if (step == 1 && c->dump_grads_path && r->rank == 0 && dump_grads(c->dump_grads_path, m)) die();
    *lr = lr_at_step(c, step - 1);
    AdamWStep upd = adamw_step_begin(c, *lr, step, *norm);
    gpt2_update(m, &upd);
    return (float)(loss / ((double)r->accum * r->world));
}

// Mean loss over val_steps batches from the start of the validation set, spread over the
// ranks as the dataloader interleaves them: the same batches one process would see.
static float validate(Run *r) {
    GPT2 *m = &r->model;
    int steps = r->cfg.val_steps, per_rank = (steps + r->world - 1) / r->world;
    dataloader_reset(&r->val);
    double sum = 0.0;
    for (int k = 0; k < per_rank; k++) {
        if (dataloader_next(&r->val, m->inputs, m->targets)) die();
        zero_begin_forward(&m->z, 0, 1);
        float l = gpt2_forward(m, m->inputs, m->targets, r->cfg.batch, r->cfg.seq_len, 0.0f);
        if (k * r->world + r->rank < steps) sum += l; // past the end: ran only for ZeRO-3's gathers
    }
    m->z.be.sum_doubles(m->z.be.ctx, &sum, 1);
    return (float)(sum / steps);
}

// A sharded checkpoint to resume from (checkpoint.h), and the model in llm.c's format.
static void save(Run *r, int step) {
    char path[4096];
    TrainerState st;
    memset(&st, 0, sizeof(st));
    st.magic = CKPT_STATE_MAGIC;
    st.step = (uint64_t)step;
    st.adam_t = (uint64_t)step;
    st.sample_rng = r->sample_rng;
    st.train_data = dataloader_state(&r->train);
    if (ckpt_save(r->cfg.out_dir, &r->model.z, &r->cfg.model, &st, "fp32")) die();
    snprintf(path, sizeof(path), "%s/model_%08d.bin", r->cfg.out_dir, step);
    if (gpt2_save(&r->model, path)) die();
    if (r->rank == 0) printf("saved %s/step_%08d and %s\n", r->cfg.out_dir, step, path);
}

// --export CKPT OUT: the model of a sharded checkpoint as one llm.c file, unit by unit, so
// memory stays bounded by one unit (DeepSpeed's zero_to_fp32). No MPI: one process reads all.
typedef struct { FILE *f; ParamLayout lay; int version; } ExportCtx;
static int export_unit(int u, const float *unit, void *ctx) {
    ExportCtx *e = (ExportCtx *)ctx;
    return gpt2_unit_file_io(e->f, &e->lay, u, (float *)unit, 1, e->version);
}
static int export_main(int argc, char **argv) {
    int bf16 = argc == 5 && !strcmp(argv[4], "--bf16");
    if (argc != 4 && !bf16) { fprintf(stderr, "error: usage: %s --export CHECKPOINT_DIR OUT.bin [--bf16]\n", argv[0]); return 1; }
    CkptManifest *m = (CkptManifest *)xmalloc(sizeof(CkptManifest));
    int rc = 1;
    if (ckpt_read_manifest(argv[2], m) == 0) {
        ExportCtx e;
        gpt2_layout_init(&e.lay, &m->cfg, 1);
        e.version = bf16 ? 5 : 3;
        e.f = gpt2_begin_checkpoint(argv[3], &m->cfg, e.version);
        if (e.f) {
            int ok = ckpt_load(m, NULL, 0, export_unit, &e) == 0;
            if (gpt2_end_checkpoint(e.f, argv[3], ok) == 0 && ok) {
                printf("wrote %s from %s (step %ld, %d ranks)\n", argv[3], m->dir, m->step, m->world);
                rc = 0;
            }
        }
    }
    free(m);
    return rc;
}

// Debian's OpenBLAS 0.3.21 predates some CPUs (Sapphire Rapids among them) and falls back to
// its slowest kernels, SSE3 "Prescott", on them: 5x slower matmuls on this project's machines.
// When that happened and the user chose no core type, run again with the best one the CPU has.
static void pick_openblas_core(char **argv) {
    if (getenv("OPENBLAS_CORETYPE") || strcasecmp(openblas_get_corename(), "prescott") != 0) return;
    const char *core = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) core = "Haswell";
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    execv("/proc/self/exe", argv); // returns only on failure: then carry on with Prescott
}

#ifndef TESTING
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan")) return planner_main(argc, argv); // arithmetic only: no MPI
    if (argc > 1 && !strcmp(argv[1], "--export")) return export_main(argc, argv);
    pick_openblas_core(argv);
    MPI_Init(&argc, &argv);
    Run run;
    memset(&run, 0, sizeof(run));
    MPI_Comm_rank(MPI_COMM_WORLD, &run.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &run.world);
    share_cores(run.rank);
    int rc = setup(&run, argc, argv);
    if (rc != 0) { MPI_Finalize(); return rc > 0 ? 0 : 1; }
    const TrainConfig *c = &run.cfg;
    int lead = run.rank == 0;
    if (lead) print_header(&run);
    report_memory(&run);

    double flops_per_token = 6.0 * run.model.z.lay.num_params + 12.0 * c->model.num_layers * c->model.channels * c->seq_len;
    double total_ms = 0.0;
    for (int step = run.first_step; step <= c->steps; step++) {
        double t0 = now_seconds();
        float norm, lr, loss = train_step(&run, step, &norm, &lr);
        double ms = (now_seconds() - t0) * 1e3, tok_s = c->total_batch / (ms / 1e3);
        if (step > run.first_step) total_ms += ms; // the first step warms caches and thread pools
        if (lead) {
            char eta[32];
            int timed = step - run.first_step;
            format_eta(eta, sizeof(eta), (c->steps - step) * (timed > 0 ? total_ms / timed : ms) / 1e3);
            if (step % c->print_every == 0 || step == 1 || step == c->steps) // --print-every, steps_per_print
                printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %8.1f ms | %8.0f tok/s | %6.1f GFLOP/s | ETA %s\n",
                       step, c->steps, loss, lr, norm, ms, tok_s, tok_s * flops_per_token / 1e9, eta);
            if (run.log) fprintf(run.log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,"
                                          "\"tok_s\":%.1f}\n", step, loss, lr, norm, ms, tok_s);
        }
        report_comm(&run, step);
        int last = step == c->steps;
        if (run.have_val && (step % c->val_every == 0 || last)) {
            float vl = validate(&run);
            if (lead) printf("val loss %.6f\n", vl);
            if (lead && run.log) fprintf(run.log, "{\"step\":%d,\"val_loss\":%.9g}\n", step, vl);
        }
        if (c->sample_len > 0 && c->sample_every > 0 && (step % c->sample_every == 0 || last))
            gpt2_sample(&run.model, run.have_tok ? &run.tok : NULL, c->sample_len, &run.sample_rng);
        if (c->out_dir && ((c->save_every > 0 && step % c->save_every == 0) || last)) save(&run, step);
        if (run.log) fflush(run.log);
    }
    int timed = c->steps - run.first_step;
    if (lead && timed > 0)
        printf("average step (after the first): %.1f ms, %.0f tok/s\n", total_ms / timed,
               c->total_batch / (total_ms / timed / 1e3));
    if (run.log) fclose(run.log);
    if (run.have_tok) tokenizer_free(&run.tok);
    dataloader_free(&run.train);
    if (run.have_val) dataloader_free(&run.val);
    gpt2_free(&run.model);
    MPI_Finalize();
    return 0;
}
#endif
