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
#include <omp.h>
#include <cblas.h>

#include "gpt2.h"
#include "config.h"
#include "optimizer.h"
#include "dataloader.h"
#include "tokenizer.h"

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
// The model

typedef struct {
    float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    float *dresidual, *dbtc, *dbt4c, *dqkv;
} Activations;

typedef struct {
    GPT2Config cfg;
    ParamLayout lay;
    float *params, *grads, *m, *v; // flat buffers of lay.num_flat floats
    Activations acts;
    float *acts_memory;
    int B, T;                      // the largest batch the activations hold
    int *inputs, *targets;         // (B,T)
    size_t bytes_params, bytes_grads, bytes_adam_m, bytes_adam_v, bytes_activations;
} GPT2;

static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T) {
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    gpt2_layout_init(&m->lay, cfg, 16); // 16 floats: each unit starts on a cache line
    size_t n = m->lay.num_flat;
    m->params = xcalloc_floats(n);
    m->grads = xcalloc_floats(n);
    m->m = xcalloc_floats(n);
    m->v = xcalloc_floats(n);
    m->bytes_params = m->bytes_grads = m->bytes_adam_m = m->bytes_adam_v = n * sizeof(float);
    size_t numel[NUM_ACTIVATIONS], total = gpt2_activation_floats(cfg, B, T);
    gpt2_activation_numels(cfg, B, T, numel);
    m->acts_memory = xcalloc_floats(total);
    m->bytes_activations = total * sizeof(float);
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
    free(m->params); free(m->grads); free(m->m); free(m->v);
    free(m->acts_memory); free(m->inputs); free(m->targets);
}

static float *unit_params(GPT2 *m, int u) { return m->params + m->lay.unit_offset[u]; }
static float *unit_grads(GPT2 *m, int u) { return m->grads + m->lay.unit_offset[u]; }

// Forward pass over inputs (B,T) with B <= m->B, T <= m->T. With targets it computes the loss
// per position into acts.losses, and with dloss != 0 also the logits' gradient (in place),
// ready for gpt2_backward. dloss is d(total loss)/d(loss at one position): 1/(positions averaged).
// Returns the mean loss over the B*T positions (0 without targets).
static float gpt2_forward(GPT2 *m, const int *inputs, const int *targets, int B, int T, float dloss) {
    const GPT2Config *c = &m->cfg;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T;
    Activations *a = &m->acts;
    EmbedTensors emb = gpt2_embed_tensors(c, unit_params(m, UNIT_EMBED));
    encoder_forward(a->encoded, inputs, emb.wte, emb.wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        LayerTensors w = gpt2_layer_tensors(c, unit_params(m, gpt2_unit_of_layer(l)));
        size_t btc = (size_t)N * C;
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
    FinalTensors fin = gpt2_final_tensors(c, unit_params(m, gpt2_final_unit(&m->lay)));
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->residual3 + (size_t)(L - 1) * N * C,
                      fin.lnfw, fin.lnfb, N, C);
    matmul_forward(a->logits, a->lnf, emb.wte, NULL, N, C, c->padded_vocab_size, 0);
    if (!targets) return 0.0f;
    crossentropy_softmax_fused(a->logits, a->losses, targets, N, c->vocab_size, c->padded_vocab_size, dloss);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += a->losses[i];
    return (float)(sum / N);
}

// Backward pass after gpt2_forward(..., dloss != 0) on the same inputs; gradients accumulate
// into m->grads.
static void gpt2_backward(GPT2 *m, const int *inputs, int B, int T) {
    const GPT2Config *c = &m->cfg;
    int C = c->channels, L = c->num_layers, NH = c->num_heads, N = B * T;
    size_t btc = (size_t)N * C;
    Activations *a = &m->acts;
    EmbedTensors emb = gpt2_embed_tensors(c, unit_params(m, UNIT_EMBED));
    EmbedTensors demb = gpt2_embed_tensors(c, unit_grads(m, UNIT_EMBED));
    FinalTensors fin = gpt2_final_tensors(c, unit_params(m, gpt2_final_unit(&m->lay)));
    FinalTensors dfin = gpt2_final_tensors(c, unit_grads(m, gpt2_final_unit(&m->lay)));
    // LM head (tied to wte): logits = lnf . wte^T
    matmul_backward(a->dbtc, demb.wte, NULL, a->logits, a->lnf, emb.wte, N, C, c->padded_vocab_size);
    memset(a->dresidual, 0, btc * sizeof(float));
    layernorm_backward(a->dresidual, dfin.lnfw, dfin.lnfb, a->dbtc, a->residual3 + (L - 1) * btc,
                       fin.lnfw, a->lnf_mean, a->lnf_rstd, N, C);
    // dresidual is the gradient of the residual stream; each block adds its branches to it.
    for (int l = L - 1; l >= 0; l--) {
        LayerTensors w = gpt2_layer_tensors(c, unit_params(m, gpt2_unit_of_layer(l)));
        LayerTensors g = gpt2_layer_tensors(c, unit_grads(m, gpt2_unit_of_layer(l)));
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
    }
    encoder_backward(demb.wte, demb.wpe, a->dresidual, inputs, B, T, C);
}

// The global L2 norm of the gradient (padding and padded vocabulary rows hold zeros).
static float gpt2_grad_norm(const GPT2 *m) {
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum)
    for (size_t i = 0; i < m->lay.num_flat; i++) sum += (double)m->grads[i] * m->grads[i];
    return (float)sqrt(sum);
}

typedef struct { GPT2 *m; const AdamWStep *step; } UpdateCtx;
static void adamw_segment(const ParamSegment *seg, void *ctx) {
    UpdateCtx *u = (UpdateCtx *)ctx;
    if (seg->kind == SEG_FROZEN) return; // padding and unused vocabulary rows stay zero
    int decay = seg->kind == SEG_DECAY;
    float *p = u->m->params, *g = u->m->grads, *mm = u->m->m, *vv = u->m->v;
#pragma omp parallel for simd
    for (size_t i = seg->begin; i < seg->end; i++) adamw_element(&p[i], &mm[i], &vv[i], g[i], u->step, decay);
}

static void gpt2_update(GPT2 *m, const AdamWStep *step) {
    UpdateCtx ctx = {m, step};
    gpt2_for_each_segment(&m->lay, 0, m->lay.num_flat, adamw_segment, &ctx);
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

// Generates len tokens after an end-of-text token and prints them (as text when a tokenizer
// is loaded, as ids otherwise). Runs the full forward over the growing context with B = 1.
static void gpt2_sample(GPT2 *m, const Tokenizer *tok, int len, uint64_t *rng) {
    int eot = m->cfg.vocab_size == 50257 ? 50256 : m->cfg.vocab_size - 1;
    int *ctx = m->inputs, n = 1; // the context: at most m->T tokens, the oldest dropped first
    ctx[0] = eot;
    printf("sample: ");
    for (int i = 0; i < len; i++) {
        gpt2_forward(m, ctx, NULL, 1, n, 0.0f);
        const float *last = m->acts.logits + (size_t)(n - 1) * m->cfg.padded_vocab_size;
        int next = sample_token(last, m->cfg.vocab_size, rng_f32(rng));
        if (n == m->T) memmove(ctx, ctx + 1, (size_t)(--n) * sizeof(int));
        ctx[n++] = next;
        if (tok) tokenizer_print(tok, next, stdout);
        else printf("%d ", next);
        fflush(stdout);
    }
    printf("\n");
}

// ----------------------------------------------------------------------------------------
// Output for people (stdout) and for programs (--log, JSON lines)

static void print_header(const TrainConfig *c, const GPT2 *m, int accum, uint64_t train_tokens) {
    const GPT2Config *g = &m->cfg;
    printf("+-----------------------+----------------------------------------------+\n");
    printf("| %-21s | %-44s |\n", "model", c->init_path ? c->init_path : (c->model_name ? c->model_name : "from scratch"));
    printf("| %-21s | L=%d C=%d NH=%d maxT=%d V=%d (Vp=%d)%*s |\n", "shape", g->num_layers, g->channels,
           g->num_heads, g->max_seq_len, g->vocab_size, g->padded_vocab_size, 0, "");
    printf("| %-21s | %-44zu |\n", "parameters", m->lay.num_params);
    printf("| %-21s | %-44s |\n", "train data", c->train_data);
    printf("| %-21s | %-44llu |\n", "train tokens", (unsigned long long)train_tokens);
    printf("| %-21s | %-44s |\n", "val data", c->val_every > 0 ? c->val_data : "(off)");
    printf("| %-21s | B=%d T=%d accumulation=%d -> %ld tokens/step%*s |\n", "batch", c->batch, c->seq_len,
           accum, c->total_batch, 0, "");
    printf("| %-21s | %-44d |\n", "steps", c->steps);
    printf("| %-21s | lr %g %s warmup %d min %g wd %g clip %g%*s |\n", "optimizer (AdamW)", c->lr,
           lr_schedule_names[c->lr_schedule], c->warmup, c->min_lr_frac, c->weight_decay, c->grad_clip, 0, "");
    printf("| %-21s | %-44d |\n", "threads", omp_get_max_threads());
    printf("+-----------------------+----------------------------------------------+\n");
    double mib = 1024.0 * 1024.0;
    printf("memory: params %.1f MiB, grads %.1f MiB, adam m %.1f MiB, adam v %.1f MiB, activations %.1f MiB\n",
           m->bytes_params / mib, m->bytes_grads / mib, m->bytes_adam_m / mib, m->bytes_adam_v / mib,
           m->bytes_activations / mib);
}

static void format_eta(char *buf, size_t n, double seconds) {
    long s = (long)(seconds + 0.5);
    snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

// ----------------------------------------------------------------------------------------
// Training

static void die(void) { exit(1); }

// Mean loss over val_steps batches from the start of the validation set.
static float validate(GPT2 *m, DataLoader *val, int steps, int B, int T) {
    dataloader_reset(val);
    double sum = 0.0;
    for (int i = 0; i < steps; i++) {
        if (dataloader_next(val, m->inputs, m->targets)) die();
        sum += gpt2_forward(m, m->inputs, m->targets, B, T, 0.0f);
    }
    return (float)(sum / steps);
}

static void save_checkpoint(const TrainConfig *c, GPT2 *m, int step) {
    char path[4096];
    mkdir(c->out_dir, 0755);
    snprintf(path, sizeof(path), "%s/model_%08d.bin", c->out_dir, step);
    if (gpt2_write_checkpoint(path, &m->lay, m->params)) die();
    printf("saved %s\n", path);
}

static void dump_grads(const char *path, const GPT2 *m) {
    FILE *f = fopen(path, "wb");
    if (!f || gpt2_write_tensors(f, &m->lay, m->grads) || fclose(f)) {
        fprintf(stderr, "error: %s: cannot write gradients\n", path);
        die();
    }
}

#ifndef TESTING
int main(int argc, char **argv) {
    TrainConfig cfg;
    config_defaults(&cfg);
    int r = config_parse(&cfg, argc, argv);
    if (r) return r > 0 ? 0 : 1;

    // The model: its shape from the checkpoint header or the options.
    FILE *init = NULL;
    if (cfg.init_path) {
        GPT2FileInfo info;
        if (!(init = gpt2_open_checkpoint(cfg.init_path, &info))) return 1;
        cfg.model = info.cfg;
    }
    if (config_validate(&cfg, 1)) return 1;
    int B = cfg.batch, T = cfg.seq_len, accum = config_accum_steps(&cfg, 1);
    GPT2 model;
    gpt2_build(&model, &cfg.model, B, T);
    if (init) {
        if (gpt2_read_params(init, cfg.init_path, &model.lay, model.params)) return 1;
        fclose(init);
    } else {
        for (int u = 0; u < model.lay.num_units; u++) gpt2_init_unit(&model.lay, u, cfg.seed, unit_params(&model, u));
    }

    DataLoader train, val;
    if (dataloader_init(&train, cfg.train_data, B, T, 0, 1, cfg.shuffle, cfg.seed, cfg.model.vocab_size)) return 1;
    int do_val = cfg.val_every > 0 && cfg.val_steps > 0;
    if (do_val && dataloader_init(&val, cfg.val_data, B, T, 0, 1, 0, cfg.seed, cfg.model.vocab_size)) return 1;
    Tokenizer tok;
    int have_tok = cfg.sample_len > 0 && cfg.sample_every > 0 && tokenizer_init(&tok, cfg.tokenizer_path) == 0;
    if (cfg.sample_len > 0 && cfg.sample_every > 0 && !have_tok) printf("(no tokenizer: samples print token ids)\n");
    FILE *log = NULL;
    if (cfg.log_path && !(log = fopen(cfg.log_path, "w"))) {
        fprintf(stderr, "error: %s: cannot open log file\n", cfg.log_path);
        return 1;
    }
    print_header(&cfg, &model, accum, dataloader_num_tokens(&train));

    uint64_t sample_rng = cfg.seed ^ 0x5A3C1E;
    double total_ms = 0.0, flops_per_token = 6.0 * model.lay.num_params +
        12.0 * cfg.model.num_layers * cfg.model.channels * T;
    for (int step = 1; step <= cfg.steps; step++) {
        double t0 = now_seconds();
        memset(model.grads, 0, model.lay.num_flat * sizeof(float));
        float dloss = 1.0f / ((float)B * T * accum), loss = 0.0f;
        for (int micro = 0; micro < accum; micro++) {
            if (dataloader_next(&train, model.inputs, model.targets)) die();
            loss += gpt2_forward(&model, model.inputs, model.targets, B, T, dloss) / accum;
            gpt2_backward(&model, model.inputs, B, T);
        }
        float norm = gpt2_grad_norm(&model);
        if (step == 1 && cfg.dump_grads_path) dump_grads(cfg.dump_grads_path, &model);
        float lr = lr_at_step(&cfg, step - 1);
        AdamWStep upd = adamw_step_begin(&cfg, lr, step, norm);
        gpt2_update(&model, &upd);
        double ms = (now_seconds() - t0) * 1e3;
        if (step > 1) total_ms += ms; // the first step warms caches and thread pools
        double tok_s = cfg.total_batch / (ms / 1e3);
        char eta[32];
        format_eta(eta, sizeof(eta), (cfg.steps - step) * (step > 1 ? total_ms / (step - 1) : ms) / 1e3);
        printf("step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %8.1f ms | %8.0f tok/s | %6.1f GFLOP/s | ETA %s\n",
               step, cfg.steps, loss, lr, norm, ms, tok_s, tok_s * flops_per_token / 1e9, eta);
        if (log) {
            fprintf(log, "{\"step\":%d,\"loss\":%.9g,\"lr\":%.9g,\"grad_norm\":%.9g,\"ms\":%.3f,\"tok_s\":%.1f}\n",
                    step, loss, lr, norm, ms, tok_s);
            fflush(log);
        }
        int last = step == cfg.steps;
        if (do_val && (step % cfg.val_every == 0 || last)) {
            float vl = validate(&model, &val, cfg.val_steps, B, T);
            printf("val loss %.6f\n", vl);
            if (log) { fprintf(log, "{\"step\":%d,\"val_loss\":%.9g}\n", step, vl); fflush(log); }
        }
        if (cfg.sample_len > 0 && cfg.sample_every > 0 && (step % cfg.sample_every == 0 || last))
            gpt2_sample(&model, have_tok ? &tok : NULL, cfg.sample_len, &sample_rng);
        if (cfg.out_dir && ((cfg.save_every > 0 && step % cfg.save_every == 0) || last))
            save_checkpoint(&cfg, &model, step);
    }
    if (cfg.steps > 1)
        printf("average step (after the first): %.1f ms, %.0f tok/s\n", total_ms / (cfg.steps - 1),
               cfg.total_batch / (total_ms / (cfg.steps - 1) / 1e3));
    if (log) fclose(log);
    if (have_tok) tokenizer_free(&tok);
    dataloader_free(&train);
    if (do_val) dataloader_free(&val);
    gpt2_free(&model);
    return 0;
}
#endif
