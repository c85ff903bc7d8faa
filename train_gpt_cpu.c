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

static float *xcalloc_floats(size_t n) {
    float *p = (float *)xmalloc(n * sizeof(float));
    memset(p, 0, n * sizeof(float));
    return p;
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
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    if (bias) { // start from the bias, and let sgemm add the product to it
#pragma omp parallel for
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
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
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = gpt2_exp(a[t2] - maxv); sum += a[t2]; }
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

// dqkv (B,T,3C) from dout (B,T,C), the saved qkv and att (left as it is; the GPU version
// reuses it as scratch, hence not const; out, the forward's output, is the GPU's too). Parallel
// over (b, h): each task writes only its own head's columns, so the scatter into dk and dv
// never races. scratch: T floats per thread.
static void attention_backward(float *dqkv, float *att, const float *dout, const float *qkv, const float *out,
                               int B, int T, int C, int NH) {
    (void)out;
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

// GELU elementwise (gpt2_gelu in gpt2.h, shared with the GPU kernels); (n) -> (n)
static void gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) out[i] = gpt2_gelu(inp[i]);
}
// dinp = gelu'(inp) * dout, elementwise; dinp may be the same buffer as dout
static void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dinp[i] = gpt2_gelu_grad(inp[i]) * dout[i];
}

// out = a + b, elementwise (n): the residual connections
static void residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}
static void zero_fill(float *p, size_t n) { memset(p, 0, n * sizeof(float)); }

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
#pragma omp simd reduction(max : maxv)
        for (int i = 0; i < V; i++) maxv = l[i] > maxv ? l[i] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; i++) sum += gpt2_exp(l[i] - maxv);
        int tgt = targets[n];
        losses[n] = logf(sum) + maxv - l[tgt];
        if (dloss != 0.0f) {
            float inv = 1.0f / sum;
#pragma omp simd
            for (int i = 0; i < V; i++) l[i] = gpt2_exp(l[i] - maxv) * inv * dloss;
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
    int rank, world, step;
    double timeout;                 // --comm-timeout: seconds before the watchdog aborts
    MPI_Request req[MAX_PENDING];
    int busy[MAX_PENDING];
    float *move_from[MAX_PENDING], *move_to[MAX_PENDING]; // MPI's in-place reduce-scatter
    size_t move_n[MAX_PENDING];                           // leaves the result at the top
} MpiBackend;

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
static void mpi_wait_request(MpiBackend *b, MPI_Request *req, const char *what) {
    double start = MPI_Wtime();
    for (int spins = 0;; spins++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (MPI_Wtime() - start > b->timeout) {
            fprintf(stderr, "error: rank %d: %s did not complete within %g s at step %d; "
                            "a peer is stuck or gone (--comm-timeout); aborting the job\n",
                    b->rank, what, b->timeout, b->step);
            MPI_Abort(b->comm, 3);
        }
        if (spins > 100) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); }
    }
}
static void mpi_wait(void *ctx, int h, const char *what) {
    MpiBackend *b = (MpiBackend *)ctx;
    mpi_wait_request(b, &b->req[h], what);
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
    mpi_wait_request(b, &req, "all_reduce of scalars (loss, norm, reports)");
}
static void mpi_set_step(void *ctx, int step) { ((MpiBackend *)ctx)->step = step; }
static float *host_alloc_floats(void *ctx, size_t n) { (void)ctx; return xcalloc_floats(n); }
static void host_free_floats(void *ctx, float *p) { (void)ctx; free(p); }
static void host_zero_floats(void *ctx, float *p, size_t n) { (void)ctx; memset(p, 0, n * sizeof(float)); }
static void host_add_floats(void *ctx, float *dst, const float *src, size_t n) {
    (void)ctx;
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void host_copy(void *ctx, float *dst, const float *src, size_t n) { (void)ctx; memcpy(dst, src, n * sizeof(float)); }
// AdamW over one run of elements of one kind (zero.h walks the runs this rank owns)
static void host_adamw(void *ctx, float *p, float *m, float *v, const float *g, size_t n, const AdamWStep *step, int decay) {
    (void)ctx;
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) adamw_element(&p[i], &m[i], &v[i], g[i], step, decay);
}

static ZeroBackend mpi_backend(MpiBackend *b) {
    ZeroBackend be = {b, mpi_all_reduce, mpi_reduce_scatter, mpi_all_gather, mpi_wait, mpi_set_step, mpi_progress, mpi_sum_doubles,
                      host_alloc_floats, host_free_floats, host_zero_floats, host_add_floats, host_copy, host_copy,
                      host_adamw};
    return be;
}

// ----------------------------------------------------------------------------------------
// The model. Where parameters, gradients and optimizer state live is ZeRO's business: the
// forward and backward ask zero.h for each unit's parameters and gradients as they go.


typedef struct {
    GPT2Config cfg;
    Zero z;                        // parameters, gradients, Adam moments, ZeRO buffers
    Activations acts;
    float *acts_memory;
    size_t bytes_activations;
    int B, T;                      // the largest batch the activations hold
    int *inputs, *targets;         // (B,T)
    const int *dev_inputs, *dev_targets; // where the kernels read the batch: here, the same arrays
} GPT2;

static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int stage, int rank, int world, ZeroBackend be) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    zero_init(&m->z, cfg, stage, rank, world, be);
    size_t total = gpt2_activation_floats(cfg, B, T);
    m->acts_memory = xcalloc_floats(total);
    m->bytes_activations = total * sizeof(float);
    m->z.mem[MEM_ACTIVATIONS] = m->bytes_activations;
    gpt2_activations_wire(&m->acts, m->acts_memory, cfg, B, T);
    m->B = B;
    m->T = T;
    m->inputs = (int *)xmalloc((size_t)B * T * sizeof(int));
    m->targets = (int *)xmalloc((size_t)B * T * sizeof(int));
}

static void gpt2_free(GPT2 *m) {
    zero_free(&m->z);
    free(m->acts_memory); free(m->inputs); free(m->targets);
}

// The batch is already where the kernels read it.
static void upload_batch(GPT2 *m, const int *inputs, const int *targets, int N) {
    (void)N;
    m->dev_inputs = inputs;
    m->dev_targets = targets;
}
// The fused softmax + cross-entropy (+ gradient) over the logits; the mean loss.
static float classifier_loss(GPT2 *m, int N, float dloss) {
    const GPT2Config *c = &m->cfg;
    crossentropy_softmax_fused(m->acts.logits, m->acts.losses, m->dev_targets, N, c->vocab_size, c->padded_vocab_size, dloss);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->acts.losses[i];
    return (float)(sum / N);
}

#include "model.h" // gpt2_forward, gpt2_backward: the same passes as the GPU trainer's

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

static void gpt2_update(GPT2 *m, const AdamWStep *step) { zero_update(&m->z, step); }

// The logits (Vp floats) of position t of row 0, on the host: what the sampler draws from.
static const float *gpt2_logits_row(GPT2 *m, int t) { return m->acts.logits + (size_t)t * m->cfg.padded_vocab_size; }

// ----------------------------------------------------------------------------------------
// The run: options, data, the loop, reports, checkpoints (shared with the GPU trainer)

struct Run;
static ZeroBackend trainer_backend(struct Run *r);
#include "trainer.h"

// This rank's collectives: MPI, with the watchdog's timeout from the options.
static ZeroBackend trainer_backend(Run *r) {
    MpiBackend *b = (MpiBackend *)r->backend;
    b->comm = MPI_COMM_WORLD;
    b->rank = r->rank;
    b->world = r->world;
    b->timeout = r->cfg.comm_timeout;
    return mpi_backend(b);
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

// Ranks on one machine share its cores, unless the user said otherwise (OMP_NUM_THREADS).
static void share_cores(void) {
    MPI_Comm local;
    int rank, nlocal;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &nlocal);
    MPI_Comm_free(&local);
    int threads = omp_get_num_procs() / nlocal;
    if (threads < 1) threads = 1;
    if (getenv("OMP_NUM_THREADS")) threads = omp_get_max_threads(); // the user's choice
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads); // OpenBLAS keeps its own count: tell it the same
}

#ifndef TESTING
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan")) return planner_main(argc, argv); // arithmetic only: no MPI
    if (argc > 1 && !strcmp(argv[1], "--export")) return export_main(argc, argv);
    pick_openblas_core(argv);
    MPI_Init(&argc, &argv);
    share_cores();
    static Run run; // large: keep it off the stack
    static MpiBackend mpi;
    run.backend = &mpi;
    int rc = trainer_run(&run, argc, argv);
    MPI_Finalize();
    return rc;
}
#endif
