// Every kernel's backward in train_gpt_cpu.c checked against finite differences, and the
// whole model's gradient against finite differences of its mean loss.
//
// Method. For a kernel with output out, the scalar objective is J = sum_i r_i * out_i with
// fixed random weights r (accumulated in double); the backward kernel fed dout = r must
// produce dJ/d(every input and parameter). The finite difference is the 6-point central
// stencil (45 d1 - 9 d2 + d3) / 60h, d_k = J(x + kh) - J(x - kh), whose truncation error is
// O(h^6). That allows a step large enough that the fp32 rounding inside the kernels (which
// enters as ~eps32 * |J| / h) stays small: the kernels compute in fp32, and rounding, not
// truncation, is what limits any FD check of them. Every input is drawn on a grid of 2^-16
// with |x| < 8 and h is a power of two, so x + kh is exact in fp32: the step the kernel sees
// is exactly the step the formula divides by (checked, not assumed).
//
// Pass criteria, per gradient tensor, with g the analytic and f the FD gradient:
//   - whole vector:  ||g - f|| / ||f|| < VEC_TOL = 1e-3
//   - every element: |g_i - f_i| / (|f_i| + ELEM_FLOOR * scale) < ELEM_TOL = 1e-3, where
//     scale is max |f| over the tensor (over the whole model in the model test, since there
//     the FD noise is in units of the one loss). That is |g_i - f_i| < 1e-3 |f_i| + 1e-4 scale:
//     the absolute floor, 1e-4 of the gradient's scale, keeps elements near zero from
//     demanding a relative accuracy that fp32 FD cannot give.
// The measured FD error is ~5e-6 of the scale for the kernels and ~2e-5 for the model
// (every line below prints what was achieved; over 40 random seeds the worst element error
// was 7e-5 for a kernel and 2.2e-4 for the model), so the tolerances leave a margin of 4.5x
// or more for noise, while a wrong formula (errors of order the gradient), a missing term, one
// element off by 1%, or a constant factor off by 0.2% all fail: the mutation checks at the
// end feed the checker such gradients and require it to flag them.
//
// Besides the gradients it checks each kernel's contract: forward values against a double
// reference computed here; backward kernels ADDING into parameter gradients (and into dinp
// for layernorm) but OVERWRITING the other input gradients (prefilled with NaN); the
// attention cache's unused upper triangle never being read (NaN there); the fused
// cross-entropy's loss against -log softmax[target] in double, its padded vocabulary columns
// excluded from the softmax and given gradient exactly 0, and dloss = 0 leaving the logits
// alone.
//
// Threads: the analytic passes run with the OpenMP team (OMP_NUM_THREADS); the thousands of
// tiny FD forward passes run on one thread, where waking a team would cost more than the
// work. Both compute the same numbers, so a kernel that depended on the thread count would
// show up as a mismatch.
#define TESTING
// The trainer's main is compiled out, which leaves its helpers unused; that is expected here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "../train_gpt_cpu.c"
#pragma GCC diagnostic pop

// The kernels' context: nothing but the bf16 matmul test sets anything in it.
static CpuKernels kc;

#define VEC_TOL 1e-3
#define ELEM_TOL 1e-3
#define ELEM_FLOOR 0.1
static const float FD_H = 1.0f / 8;        // kernels: inputs and weights are O(1)
static const float FD_H_MODEL = 1.0f / 32; // the model: a larger step meets the curvature of
                                           // the attention and LayerNorms (truncation shows at 1/16)

static int failures = 0;
// --quick (the sanitized build): the model's finite differences are left out: 12,000 forward passes
// of the code its one forward and two backward passes already ran under the sanitizers (the
// optimized build checks them against the gradient)
static int quick = 0;
#define FAIL(...) do { failures++; printf("FAIL "); printf(__VA_ARGS__); printf("\n"); } while (0)

// ----------------------------------------------------------------------------------------
// Random numbers on the 2^-16 grid

static uint64_t rng = 0x7E57C0DEull;
static double unif(void) { return (gpt2_splitmix64(&rng) >> 11) * (1.0 / 9007199254740992.0); }
static float quantize(double x) { return (float)(nearbyint(x * 65536.0) / 65536.0); }
static void fill_uniform(float *p, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) p[i] = quantize(lo + (hi - lo) * unif());
}
static void fill_nan(float *p, size_t n) { for (size_t i = 0; i < n; i++) p[i] = NAN; }
static float *floats(size_t n) { return xcalloc_floats(n); }
static double *doubles(size_t n) {
    double *p = (double *)xmalloc(n * sizeof(double));
    memset(p, 0, n * sizeof(double));
    return p;
}
static float *copy_of(const float *x, size_t n) {
    float *p = floats(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static double weighted_sum(const float *r, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)r[i] * x[i];
    return s;
}
static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

// ----------------------------------------------------------------------------------------
// Finite differences

typedef double (*Objective)(void *ctx);

static double fd_at(Objective J, void *ctx, float *x, float h) {
    static const int k[6] = {1, -1, 2, -2, 3, -3};
    float x0 = *x;
    double f[6];
    for (int j = 0; j < 6; j++) {
        float xs = x0 + k[j] * h;
        if ((double)xs - x0 != k[j] * (double)h) { // inputs are on a grid, so this must hold
            printf("FAIL fd step not exact at x = %.9g (an input off the 2^-16 grid?)\n", x0);
            exit(1);
        }
        *x = xs;
        f[j] = J(ctx);
    }
    *x = x0;
    return (45.0 * (f[0] - f[1]) - 9.0 * (f[2] - f[3]) + (f[4] - f[5])) / (60.0 * h);
}
// out[i] = dJ/dx[i] for each of the n elements of x (on one thread, see the top).
static void fd_grad(Objective J, void *ctx, float *x, size_t n, float h, double *out) {
    int team = omp_get_max_threads();
    omp_set_num_threads(1);
    for (size_t i = 0; i < n; i++) out[i] = fd_at(J, ctx, &x[i], h);
    omp_set_num_threads(team);
}

// ----------------------------------------------------------------------------------------
// The checker

typedef struct { double vec, elem; size_t worst; } GradErr;

// Returns 1 when g matches f by both criteria. scale <= 0: max |f| over this tensor.
static int grad_compare(const double *f, const float *g, size_t n, double scale, GradErr *e) {
    double maxf = 0.0, num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        maxf = fmax(maxf, fabs(f[i]));
        num += (g[i] - f[i]) * (g[i] - f[i]);
        den += f[i] * f[i];
    }
    if (scale <= 0) scale = maxf;
    e->vec = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
    if (isnan(e->vec)) e->vec = INFINITY;
    e->elem = 0.0;
    e->worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(g[i] - f[i]), s = fabs(f[i]) + ELEM_FLOOR * scale;
        double r = !isfinite(g[i]) ? INFINITY : (s > 0 ? d / s : (d > 0 ? INFINITY : 0.0));
        if (r > e->elem || (r == INFINITY && e->elem != INFINITY)) { e->elem = r; e->worst = i; }
    }
    return e->vec < VEC_TOL && e->elem < ELEM_TOL;
}

// One summary line per kernel: the largest errors over all the tensors checked for it.
static const char *cur_kernel = "";
static double kernel_vec, kernel_elem;
static int kernel_checks;
static void kernel_begin(const char *name) {
    cur_kernel = name;
    kernel_vec = kernel_elem = 0.0;
    kernel_checks = 0;
}
static void kernel_end(void) {
    printf("%-30s max ||g-fd||/||fd|| %.2e   max element rel err %.2e   (%d gradient tensors)\n",
           cur_kernel, kernel_vec, kernel_elem, kernel_checks);
}

static void check_grad(const char *tensor, const double *f, const float *g, size_t n, double scale) {
    GradErr e;
    int ok = grad_compare(f, g, n, scale, &e);
    kernel_vec = fmax(kernel_vec, e.vec);
    kernel_elem = fmax(kernel_elem, e.elem);
    kernel_checks++;
    printf("  %-4s %-26s %-9s n=%4zu  ||g-fd||/||fd|| %.2e  element %.2e\n", ok ? "ok" : "FAIL", cur_kernel,
           tensor, n, e.vec, e.elem);
    if (!ok) {
        failures++;
        printf("       worst element %zu: analytic %.9g, fd %.9g\n", e.worst, g[e.worst], f[e.worst]);
    }
}

// Values a kernel computed against a double reference: |x - ref| <= tol * max(1, max |ref|).
static void check_close(const char *what, const float *x, const double *ref, size_t n, double tol) {
    double scale = 1.0, worst = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, isfinite(x[i]) ? fabs(x[i] - ref[i]) : INFINITY);
    if (!(worst <= tol * scale))
        FAIL("%s: %s differs from the double reference by %.3g (tolerance %.3g)", cur_kernel, what, worst, tol * scale);
}

// A backward kernel must ADD into a buffer: started from P it must give P + g, where g is
// what it gave from zero. Rounding differs (P + a + b vs P + (a + b)), hence a small tolerance;
// overwriting would be off by |P| ~ 1.
static void check_accumulated(const char *what, const float *after, const float *P, const float *g, size_t n) {
    double tol = 1e-5 * (max_abs(P, n) + max_abs(g, n)), worst = 0.0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, isfinite(after[i]) ? fabs(after[i] - (P[i] + g[i])) : INFINITY);
    if (!(worst <= tol))
        FAIL("%s: %s does not accumulate (+=): off by %.3g from prefill + gradient", cur_kernel, what, worst);
}
// A backward kernel must OVERWRITE a buffer: started from NaN it must give what it gave from zero.
static void check_overwritten(const char *what, const float *after, const float *g, size_t n) {
    double tol = 1e-6 * max_abs(g, n), worst = 0.0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, isfinite(after[i]) ? fabs(after[i] - g[i]) : INFINITY);
    if (!(worst <= tol))
        FAIL("%s: %s is not simply overwritten (a NaN prefill leaked through, or it differs by %.3g)", cur_kernel, what, worst);
}

// ----------------------------------------------------------------------------------------
// encoder: out (B,T,C) = wte[inp] + wpe[t]

typedef struct { int B, T, C; const int *inp; float *wte, *wpe, *out; const float *r; } EncCtx;
static double enc_J(void *p) {
    EncCtx *c = (EncCtx *)p;
    encoder_forward(&kc, c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
    return weighted_sum(c->r, c->out, (size_t)c->B * c->T * c->C);
}

static void test_encoder(int B, int T, int C, int Vp, int maxT) {
    size_t nwte = (size_t)Vp * C, nwpe = (size_t)maxT * C, nout = (size_t)B * T * C;
    int *inp = (int *)xmalloc((size_t)B * T * sizeof(int));
    for (int i = 0; i < B * T; i++) inp[i] = (int)(unif() * (Vp - 1)); // row Vp-1 unused: gradient 0
    inp[B * T - 1] = inp[1] = inp[0]; // a repeated token: its row must sum all its positions
    float *wte = floats(nwte), *wpe = floats(nwpe), *out = floats(nout), *r = floats(nout);
    fill_uniform(wte, nwte, -1, 1);
    fill_uniform(wpe, nwpe, -1, 1);
    fill_uniform(r, nout, -1, 1);
    EncCtx ctx = {B, T, C, inp, wte, wpe, out, r};

    enc_J(&ctx);
    double *ref = doubles(nout);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                ref[((size_t)b * T + t) * C + c] = (double)wte[(size_t)inp[b * T + t] * C + c] + wpe[(size_t)t * C + c];
    check_close("out", out, ref, nout, 1e-7);

    float *dwte = floats(nwte), *dwpe = floats(nwpe);
    encoder_backward(&kc, dwte, dwpe, r, inp, B, T, C);
    double *fd = doubles(nwte > nwpe ? nwte : nwpe);
    fd_grad(enc_J, &ctx, wte, nwte, FD_H, fd);
    check_grad("wte", fd, dwte, nwte, 0);
    fd_grad(enc_J, &ctx, wpe, nwpe, FD_H, fd);
    check_grad("wpe", fd, dwpe, nwpe, 0);

    float *P1 = floats(nwte), *P2 = floats(nwpe);
    fill_uniform(P1, nwte, -1, 1);
    fill_uniform(P2, nwpe, -1, 1);
    float *a1 = copy_of(P1, nwte), *a2 = copy_of(P2, nwpe);
    encoder_backward(&kc, a1, a2, r, inp, B, T, C);
    check_accumulated("dwte", a1, P1, dwte, nwte);
    check_accumulated("dwpe", a2, P2, dwpe, nwpe);
    free(inp); free(wte); free(wpe); free(out); free(r); free(ref); free(dwte); free(dwpe); free(fd);
    free(P1); free(P2); free(a1); free(a2);
}

// ----------------------------------------------------------------------------------------
// layernorm: out (N,C) = (x - mean) * rstd * w + b

typedef struct { int N, C; float *inp, *w, *b, *out, *mean, *rstd; const float *r; } LnCtx;
static double ln_J(void *p) {
    LnCtx *c = (LnCtx *)p;
    layernorm_forward(&kc, c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return weighted_sum(c->r, c->out, (size_t)c->N * c->C);
}

static void test_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    float *inp = floats(n), *w = floats(C), *b = floats(C), *out = floats(n);
    float *mean = floats(N), *rstd = floats(N), *r = floats(n);
    fill_uniform(inp, n, -2, 2);
    for (int i = 0; i < N; i++) { // a different offset per row: the mean must really be removed
        float off = quantize(4.0 * unif() - 2.0);
        for (int c = 0; c < C; c++) inp[(size_t)i * C + c] += off;
    }
    fill_uniform(w, C, 0.5, 1.5);
    fill_uniform(b, C, -0.5, 0.5);
    fill_uniform(r, n, -1, 1);
    LnCtx ctx = {N, C, inp, w, b, out, mean, rstd, r};

    ln_J(&ctx);
    double *ref = doubles(n), *refm = doubles(N), *refs = doubles(N);
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        double s = 1.0 / sqrt(v / C + 1e-5);
        for (int c = 0; c < C; c++) ref[(size_t)i * C + c] = (x[c] - m) * s * w[c] + b[c];
        refm[i] = m;
        refs[i] = s;
    }
    check_close("out", out, ref, n, 1e-5);
    check_close("mean", mean, refm, N, 1e-6);
    check_close("rstd", rstd, refs, N, 1e-5);

    float *dinp = floats(n), *dw = floats(C), *db = floats(C);
    layernorm_backward(&kc, dinp, dw, db, r, inp, w, mean, rstd, N, C);
    double *fd = doubles(n);
    fd_grad(ln_J, &ctx, inp, n, FD_H, fd);
    check_grad("inp", fd, dinp, n, 0);
    fd_grad(ln_J, &ctx, w, C, FD_H, fd);
    check_grad("w", fd, dw, C, 0);
    fd_grad(ln_J, &ctx, b, C, FD_H, fd);
    check_grad("b", fd, db, C, 0);

    // All three accumulate: dinp too, because the input is the residual stream.
    float *P0 = floats(n), *P1 = floats(C), *P2 = floats(C);
    fill_uniform(P0, n, -1, 1);
    fill_uniform(P1, C, -1, 1);
    fill_uniform(P2, C, -1, 1);
    float *a0 = copy_of(P0, n), *a1 = copy_of(P1, C), *a2 = copy_of(P2, C);
    layernorm_backward(&kc, a0, a1, a2, r, inp, w, mean, rstd, N, C);
    check_accumulated("dinp", a0, P0, dinp, n);
    check_accumulated("dw", a1, P1, dw, C);
    check_accumulated("db", a2, P2, db, C);
    free(inp); free(w); free(b); free(out); free(mean); free(rstd); free(r); free(ref); free(refm); free(refs);
    free(dinp); free(dw); free(db); free(fd); free(P0); free(P1); free(P2); free(a0); free(a1); free(a2);
}

// ----------------------------------------------------------------------------------------
// matmul: out (N,OC) = inp (N,C) . w^T + bias; "accumulate" adds it to a residual stream the
// way the model does, through residual_forward (so that kernel is covered too)

typedef struct { int N, C, OC, accumulate; float *inp, *w, *bias, *out; const float *prev, *r; } MmCtx;
static double mm_J(void *p) {
    MmCtx *c = (MmCtx *)p;
    size_t n = (size_t)c->N * c->OC;
    if (c->accumulate) { // out = prev (what the residual held) + the product
        float *tmp = floats(n);
        matmul_forward(&kc, tmp, c->inp, c->w, NULL, c->bias, c->N, c->C, c->OC);
        residual_forward(&kc, c->out, c->prev, tmp, n);
        free(tmp);
    } else {
        matmul_forward(&kc, c->out, c->inp, c->w, NULL, c->bias, c->N, c->C, c->OC);
    }
    return weighted_sum(c->r, c->out, n);
}

static void test_matmul(int N, int C, int OC, int with_bias, int accumulate) {
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = floats(ni), *w = floats(nw), *bias = with_bias ? floats(OC) : NULL;
    float *out = floats(no), *prev = floats(no), *r = floats(no);
    fill_uniform(inp, ni, -1, 1);
    fill_uniform(w, nw, -1, 1);
    fill_uniform(prev, no, -1, 1);
    fill_uniform(r, no, -1, 1);
    if (bias) fill_uniform(bias, OC, -1, 1);
    MmCtx ctx = {N, C, OC, accumulate, inp, w, bias, out, prev, r};

    if (!accumulate) fill_nan(out, no); // without accumulate, what out held must not matter
    mm_J(&ctx);
    double *ref = doubles(no);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = (accumulate ? prev[(size_t)i * OC + o] : 0.0) + (bias ? bias[o] : 0.0);
            for (int c = 0; c < C; c++) s += (double)inp[(size_t)i * C + c] * w[(size_t)o * C + c];
            ref[(size_t)i * OC + o] = s;
        }
    check_close("out", out, ref, no, 1e-5);

    float *dinp = floats(ni), *dw = floats(nw), *db = bias ? floats(OC) : NULL;
    matmul_backward(&kc, dinp, dw, db, r, inp, w, NULL, N, C, OC);
    double *fd = doubles(ni > nw ? ni : nw);
    fd_grad(mm_J, &ctx, inp, ni, FD_H, fd);
    check_grad("inp", fd, dinp, ni, 0);
    fd_grad(mm_J, &ctx, w, nw, FD_H, fd);
    check_grad("w", fd, dw, nw, 0);
    if (bias) {
        fd_grad(mm_J, &ctx, bias, OC, FD_H, fd);
        check_grad("bias", fd, db, OC, 0);
    }

    // dinp is overwritten; dw and dbias accumulate over micro-steps.
    float *Pw = floats(nw), *Pb = floats(OC), *a0 = floats(ni);
    fill_uniform(Pw, nw, -1, 1);
    fill_uniform(Pb, OC, -1, 1);
    fill_nan(a0, ni);
    float *aw = copy_of(Pw, nw), *ab = bias ? copy_of(Pb, OC) : NULL;
    matmul_backward(&kc, a0, aw, ab, r, inp, w, NULL, N, C, OC);
    check_overwritten("dinp", a0, dinp, ni);
    check_accumulated("dw", aw, Pw, dw, nw);
    if (bias) check_accumulated("dbias", ab, Pb, db, OC);
    // a fresh gradient (the notes mark dw's range, as gpt2_unit_grads does on a step's first
    // micro-step): the product is written over what dw held, NaN included
    fill_nan(aw, nw);
    kc.notes.grads[1] = (GradsOpen){aw, nw, 1, NULL, NULL};
    matmul_backward(&kc, a0, aw, NULL, r, inp, w, NULL, N, C, OC);
    kc.notes.grads[1] = (GradsOpen){NULL, 0, 0, NULL, NULL};
    check_overwritten("fresh dw", aw, dw, nw);
    free(inp); free(w); free(bias); free(out); free(prev); free(r); free(ref); free(dinp); free(dw); free(db);
    free(fd); free(Pw); free(Pb); free(a0); free(aw); free(ab);
}

// ----------------------------------------------------------------------------------------
// attention: out (B,T,C) = causal softmax(q.k / sqrt(hs)) . v, per head

typedef struct { int B, T, C, NH; float *qkv, *out, *att; const float *r; } AttCtx;
static double att_J(void *p) {
    AttCtx *c = (AttCtx *)p;
    attention_forward(&kc, c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
    return weighted_sum(c->r, c->out, (size_t)c->B * c->T * c->C);
}

static void test_attention(int B, int T, int C, int NH) {
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    int hs = C / NH;
    float *qkv = floats(nq), *out = floats(no), *att = floats(na), *r = floats(no);
    // |q.k| / sqrt(hs) up to ~4: the softmax is far from uniform, so its backward matters
    fill_uniform(qkv, nq, -2, 2);
    fill_uniform(r, no, -1, 1);
    fill_nan(att, na); // the forward must write all of it (zeros above the diagonal, which the backward reads)
    fill_nan(out, no);
    AttCtx ctx = {B, T, C, NH, qkv, out, att, r};

    att_J(&ctx);
    double *ref = doubles(no), *p = doubles(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0.0;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double d = 0.0;
                    for (int i = 0; i < hs; i++) d += (double)q[i] * k[i];
                    p[u] = d / sqrt((double)hs);
                    mx = fmax(mx, p[u]);
                }
                for (int u = 0; u <= t; u++) { p[u] = exp(p[u] - mx); sum += p[u]; }
                for (int i = 0; i < hs; i++) {
                    double o = 0.0;
                    for (int u = 0; u <= t; u++) o += p[u] / sum * qkv[((size_t)b * T + u) * 3 * C + 2 * C + h * hs + i];
                    ref[((size_t)b * T + t) * C + h * hs + i] = o;
                }
            }
    check_close("out", out, ref, no, 1e-5);

    float *dqkv = floats(nq);
    attention_backward(&kc, dqkv, att, r, qkv, out, B, T, C, NH);
    double *fd = doubles(nq);
    fd_grad(att_J, &ctx, qkv, nq, FD_H, fd);
    check_grad("qkv", fd, dqkv, nq, 0);

    att_J(&ctx); // the cache again for the unperturbed qkv
    float *a = floats(nq);
    fill_nan(a, nq);
    attention_backward(&kc, a, att, r, qkv, out, B, T, C, NH);
    check_overwritten("dqkv", a, dqkv, nq);
    free(qkv); free(out); free(att); free(r); free(ref); free(p); free(dqkv); free(fd); free(a);
}

// head_gemm (cpu/head_gemm.h) against its contract computed here: each wanted element of C one
// fmaf chain over every k from +0 in order, then times alpha, bit for bit, where A holds zeros
// (+0 and -0) where the mask says (the kernel skips most of those terms: the chain's bits must
// not change); unwanted elements (HG_C_LOWER's) are not compared. Shapes: rows not a multiple
// of 6, columns over one block of 64, diagonal offsets, K = 0, K over HG_MAX_K (transB: the
// sgemm fallback, compared to a tolerance).
static void test_head_gemm(void) {
    static const int shapes[][3] = {{1, 1, 1}, {6, 64, 64}, {7, 5, 3}, {13, 70, 64}, {64, 64, 64}, {20, 130, 33}, {5, 17, 0}, {9, 8, 300}};
    static const float alphas[] = {1.0f, 0.125f, 0.17677669f};
    long checked = 0, bad = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int mask = HG_FULL; mask <= HG_A_UPPER; mask++)
                    for (int d = -3; d <= 5; d += 4) {
                        int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
                        float alpha = alphas[(si + ta + tb + (size_t)mask) % 3];
                        int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
                        float *A = floats((size_t)(ta ? K : M) * lda + 1), *B = floats((size_t)(tb ? N : K) * ldb + 1);
                        float *C = floats((size_t)M * ldc + 1);
                        fill_uniform(A, (size_t)(ta ? K : M) * lda, -2, 2);
                        fill_uniform(B, (size_t)(tb ? N : K) * ldb, -2, 2);
                        int fallback = tb && K > HG_MAX_K;
                        for (int i = 0; i < M; i++) // the terms the mask says are zero: zeros (of both signs)
                            for (int k = 0; k < K; k++)
                                if ((mask == HG_A_LOWER && k > i + d) || (mask == HG_A_UPPER && k < i + d))
                                    A[ta ? (size_t)k * lda + i : (size_t)i * lda + k] = (i + k) % 3 ? 0.0f : -0.0f;
                        fill_nan(C, (size_t)M * ldc + 1);
                        head_gemm(1, ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, mask, d);
                        for (int i = 0; i < M; i++)
                            for (int j = 0; j < N; j++) {
                                if (mask == HG_C_LOWER && j > i + d) continue;
                                float acc = 0.0f; // (over every k, the zeros included: skipping them must change no bit)
                                for (int k = 0; k < K; k++) {
                                    acc = fmaf(A[ta ? (size_t)k * lda + i : (size_t)i * lda + k], B[tb ? (size_t)j * ldb + k : (size_t)k * ldb + j], acc);
                                }
                                float want = alpha * acc, got = C[(size_t)i * ldc + j];
                                checked++;
                                if (fallback ? !(fabsf(got - want) <= 1e-4f * (1.0f + fabsf(want))) : memcmp(&got, &want, 4) != 0) {
                                    if (bad++ < 5)
                                        FAIL("head_gemm transA %d transB %d %dx%dx%d mask %d d %d: C(%d,%d) = %.9g, want %.9g", ta, tb, M, N, K, mask, d,
                                             i, j, got, want);
                                }
                            }
                        free(A); free(B); free(C);
                    }
    printf("head_gemm: %ld elements against the fmaf chain, %ld differ\n", checked, bad);
}

// ----------------------------------------------------------------------------------------
// gelu (tanh approximation), elementwise

typedef struct { size_t n; float *inp, *out; const float *r; } GeluCtx;
static double gelu_J(void *p) {
    GeluCtx *c = (GeluCtx *)p;
    gelu_forward(&kc, c->out, c->inp, c->n);
    return weighted_sum(c->r, c->out, c->n);
}

static void test_gelu(size_t n) {
    float *inp = floats(n), *out = floats(n), *r = floats(n);
    fill_uniform(inp, n, -6, 6); // both tails (where tanh saturates) and the curved middle
    inp[0] = 0.0f;
    fill_uniform(r, n, -1, 1);
    GeluCtx ctx = {n, inp, out, r};

    gelu_J(&ctx);
    double *ref = doubles(n);
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        ref[i] = 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    }
    check_close("out", out, ref, n, 1e-6);

    float *dinp = floats(n);
    fill_nan(dinp, n); // written, not accumulated
    gelu_backward(&kc, dinp, inp, r, n);
    double *fd = doubles(n);
    fd_grad(gelu_J, &ctx, inp, n, FD_H, fd);
    check_grad("inp", fd, dinp, n, 0);

    float *inplace = copy_of(r, n); // the trainer calls it with dinp == dout
    gelu_backward(&kc, inplace, inp, inplace, n);
    check_overwritten("dinp (in place over dout)", inplace, dinp, n);

    // bf16 runs: inp's stored bf16 copy is read instead of inp, which may then hold anything
    // (and the backward looks its derivative up: bf16 runs have the tables); the same bits as
    // the fp32 kernels on the widened copy
    bf16_t *inp16 = (bf16_t *)xmalloc(n * sizeof(bf16_t));
    float *widened = floats(n), *want = floats(n), *got = floats(n);
    float *want_fwd = floats(n), *got_fwd = floats(n);
    f32_to_bf16_array(inp16, inp, n);
    bf16_to_f32_array(widened, inp16, n);
    gelu_backward(&kc, want, widened, r, n);
    gelu_forward(&kc, want_fwd, widened, n);
    fill_nan(inp, n);
    kc.notes.stored[A_FCH].f32 = inp;
    kc.notes.stored[A_FCH].x16 = inp16;
    gelu_tables_alloc(&kc);
    gelu_backward(&kc, got, inp, r, n);
    gelu_forward(&kc, got_fwd, inp, n);
    memset(kc.notes.stored, 0, sizeof kc.notes.stored);
    free(kc.gelu16);
    kc.gelu16 = NULL;
    kc.gelu_grad32 = NULL;
    if (memcmp(got, want, n * sizeof(float)) != 0) FAIL("%s: backward: reading the stored bf16 copy differs from the widened fp32", cur_kernel);
    if (memcmp(got_fwd, want_fwd, n * sizeof(float)) != 0) FAIL("%s: forward: reading the stored bf16 copy differs from the widened fp32", cur_kernel);
    free(want_fwd); free(got_fwd);
    free(inp16); free(widened); free(want); free(got);
    free(inp); free(out); free(r); free(ref); free(dinp); free(fd); free(inplace);
}

// bf16 runs look GELU and its derivative up (gelu_tables_alloc): over every one of the 65536 bf16
// inputs, the looked-up forward (into a stored bf16 output) and backward against the formulas on
// the widened input (the forward's result rounded to bf16), bit for bit, NaN against NaN.
static int same_or_nan(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0; }
static void test_gelu_tables(void) {
    const size_t n = 65536;
    bf16_t *inp16 = (bf16_t *)xmalloc(n * sizeof(bf16_t)), *out16 = (bf16_t *)xmalloc(n * sizeof(bf16_t));
    float *inp = floats(n), *widened = floats(n), *out = floats(n), *r = floats(n), *want = floats(n), *got = floats(n);
    float *want_fwd = floats(n);
    for (size_t i = 0; i < n; i++) inp16[i] = (bf16_t)i;
    bf16_to_f32_array(widened, inp16, n);
    fill_uniform(r, n, -1, 1);
    gelu_backward(&kc, want, widened, r, n);      // the formulas
    gelu_forward(&kc, want_fwd, widened, n);
    gelu_tables_alloc(&kc);
    fill_nan(inp, n);
    kc.notes.stored[A_FCH].f32 = inp;
    kc.notes.stored[A_FCH].x16 = inp16;
    kc.notes.out16[A_FCH_GELU].f32 = out;
    kc.notes.out16[A_FCH_GELU].x16 = out16;
    gelu_backward(&kc, got, inp, r, n);
    gelu_forward(&kc, out, inp, n);
    int done = kc.notes.out16[A_FCH_GELU].done;
    memset(kc.notes.stored, 0, sizeof kc.notes.stored);
    memset(kc.notes.out16, 0, sizeof kc.notes.out16);
    free(kc.gelu16);
    kc.gelu16 = NULL;
    kc.gelu_grad32 = NULL;
    long bad_b = 0, bad_f = 0;
    for (size_t i = 0; i < n; i++) {
        bad_b += !same_or_nan(got[i], want[i]);
        bad_f += !same_or_nan(bf16_to_f32(out16[i]), bf16_to_f32(f32_to_bf16(want_fwd[i])));
    }
    if (!done) FAIL("%s: the looked-up forward did not mark its bf16 output written", cur_kernel);
    if (bad_b) FAIL("%s: backward: %ld of the 65536 bf16 inputs' looked-up derivatives differ from the formula", cur_kernel, bad_b);
    if (bad_f) FAIL("%s: forward: %ld of the 65536 bf16 inputs' looked-up values differ from the formula", cur_kernel, bad_f);
    printf("gelu tables: all 65536 bf16 inputs, forward %ld and backward %ld differ from the formulas\n", bad_f, bad_b);
    free(inp16); free(out16); free(inp); free(widened); free(out); free(r); free(want); free(got); free(want_fwd);
}

// ----------------------------------------------------------------------------------------
// fused softmax + cross-entropy over the first V of Vp columns

typedef struct { int N, V, Vp; float *logits, *losses; const int *targets; double dloss; } CeCtx;
// J = dloss * sum_n loss_n, whose gradient is what the kernel writes over the logits.
static double ce_J(void *p) {
    CeCtx *c = (CeCtx *)p;
    crossentropy_softmax_fused(c->logits, c->losses, c->targets, c->N, c->V, c->Vp, 0.0f, NULL); // logits kept
    double s = 0.0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return c->dloss * s;
}

static void test_crossentropy(int N, int V, int Vp) {
    size_t n = (size_t)N * Vp;
    float *logits = floats(n), *losses = floats(N);
    int *targets = (int *)xmalloc((size_t)N * sizeof(int));
    fill_uniform(logits, n, -3, 3);
    // The padded columns hold a value that would dominate the softmax if it entered it.
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 6.0f;
    for (int i = 0; i < N; i++) targets[i] = (int)(unif() * V);
    targets[0] = 0;
    targets[N - 1] = V - 1; // both ends of the real vocabulary
    const float dloss = 0.375f;
    CeCtx ctx = {N, V, Vp, logits, losses, targets, dloss};

    // dloss = 0 (validation, sampling): the losses only, the logits left exactly as they were
    float *before = copy_of(logits, n);
    ce_J(&ctx);
    if (memcmp(before, logits, n * sizeof(float)) != 0) FAIL("%s: dloss = 0 modified the logits", cur_kernel);
    double *ref = doubles(N);
    for (int i = 0; i < N; i++) { // -log softmax[target] over the real columns, in double
        const float *l = logits + (size_t)i * Vp;
        double mx = -INFINITY, s = 0.0;
        for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
        for (int j = 0; j < V; j++) s += exp(l[j] - mx);
        ref[i] = log(s) + mx - l[targets[i]];
    }
    check_close("losses", losses, ref, N, 2e-6);

    float *g = copy_of(logits, n);
    crossentropy_softmax_fused(g, losses, targets, N, V, Vp, dloss, NULL);
    check_close("losses (dloss != 0)", losses, ref, N, 2e-6);
    // The bf16 runs' form: the gradient rounded straight into 16 bits must be exactly the fp32
    // gradient rounded, and the losses the same bits.
    float *l2 = copy_of(logits, n), *losses2 = floats(N);
    bf16_t *g16 = (bf16_t *)xmalloc(n * sizeof(bf16_t)), *want16 = (bf16_t *)xmalloc(n * sizeof(bf16_t));
    crossentropy_softmax_fused(l2, losses2, targets, N, V, Vp, dloss, g16);
    for (size_t i = 0; i < n; i++) want16[i] = f32_to_bf16(g[i]);
    if (memcmp(g16, want16, n * sizeof(bf16_t)) != 0) FAIL("%s: the bf16 gradient differs from the fp32 one rounded", cur_kernel);
    if (memcmp(losses2, losses, (size_t)N * sizeof(float)) != 0) FAIL("%s: the losses differ when the gradient goes to bf16", cur_kernel);
    free(l2); free(losses2); free(g16); free(want16);
    for (size_t i = 0; i < n; i++)
        if ((int)(i % Vp) >= V && g[i] != 0.0f) {
            FAIL("%s: padded column %d of row %d has gradient %g, not 0", cur_kernel, (int)(i % Vp), (int)(i / Vp), g[i]);
            break;
        }
    // FD over every column, the padded ones too: a padded logit must not move the loss at all.
    double *fd = doubles(n);
    fd_grad(ce_J, &ctx, logits, n, FD_H, fd);
    check_grad("logits", fd, g, n, 0);
    for (size_t i = 0; i < n; i++)
        if ((int)(i % Vp) >= V && fd[i] != 0.0) {
            FAIL("%s: padded column %d of row %d moves the loss (fd %g)", cur_kernel, (int)(i % Vp), (int)(i / Vp), fd[i]);
            break;
        }
    free(logits); free(losses); free(targets); free(before); free(ref); free(g); free(fd);
}

// ----------------------------------------------------------------------------------------
// The whole model: gpt2_forward + gpt2_backward against FD of the mean loss

// Allocation from the trainer's host helpers; a collective here would be a bug in the test's
// setup (stage 0 on one rank has nothing to communicate), so it ends the test.
static int no_collective(void) {
    printf("FAIL model: stage 0 on one rank started a collective\n");
    exit(1);
}
static int no_all_reduce(void *ctx, void *buf, size_t n, int t) { (void)ctx; (void)buf; (void)n; (void)t; return no_collective(); }
static int no_reduce_scatter(void *ctx, void *s, void *r, size_t n, int t) {
    (void)ctx; (void)s; (void)r; (void)n; (void)t;
    return no_collective();
}
static int no_all_gather(void *ctx, const void *s, void *r, size_t n, int t) {
    (void)ctx; (void)s; (void)r; (void)n; (void)t;
    return no_collective();
}
static double no_wait(void *ctx, int h, const char *what) { (void)ctx; (void)h; (void)what; no_collective(); return 0.0; }
static void no_set_step(void *ctx, int step) { (void)ctx; (void)step; }
static void no_sum_doubles(void *ctx, double *x, int n) { (void)ctx; (void)x; (void)n; no_collective(); }
static void no_progress(void *ctx) { (void)ctx; } // nothing in flight to advance
static void local_fatal(void *ctx, const char *msg) { (void)ctx; fprintf(stderr, "error: %s\n", msg); exit(1); }
static ZeroBackend local_backend(void) {
    ZeroBackend be = {.all_reduce = no_all_reduce, .reduce_scatter = no_reduce_scatter, .all_gather = no_all_gather,
                      .wait = no_wait, .set_step = no_set_step, .progress = no_progress, .sum_doubles = no_sum_doubles,
                      .alloc = compute_alloc, .free = compute_free, .zero = compute_zero, .add = compute_add,
                      .to_host = compute_to_host, .from_host = compute_from_host, .update = compute_update, .unified = 1,
                      .fatal = local_fatal, .reduce = compute_reduce};
    return be;
}

enum { MB = 2, MT = 4 };
typedef struct { GPT2 *m; const int *inp, *tgt; } ModelCtx;
static double model_J(void *p) {
    ModelCtx *c = (ModelCtx *)p;
    zero_begin_forward(&c->m->z, 0, 1);
    gpt2_forward(c->m, c->inp, c->tgt, MB, MT, 0.0f);
    double s = 0.0;
    for (int i = 0; i < MB * MT; i++) s += c->m->acts.losses[i];
    return s / (MB * MT);
}

static void test_model(void) {
    GPT2Config cfg = {.max_seq_len = 8, .vocab_size = 13, .padded_vocab_size = 16,
                      .num_layers = 2, .num_heads = 2, .channels = 8};
    int C = cfg.channels, V = cfg.vocab_size, L = cfg.num_layers;
    // ZeRO stage 0 on one rank: the full parameters and gradients in flat buffers, and no
    // collective ever starts, so the backend only allocates.
    GPT2 m;
    ZeroOptions zo = zero_options(0, ZC_F32, OPT_ADAMW);
    GPT2Recompute none = {RECOMPUTE_NONE, 1, 0};
    gpt2_build(&m, &cfg, MB, MT, 0, 1, &zo, none, local_backend());
    ParamLayout *lay = &m.z.lay;
    float *params = (float *)m.z.params, *grads = (float *)m.z.grads;
    for (int u = 0; u < lay->num_units; u++) gpt2_init_unit(lay, u, 1337, params + lay->unit_offset[u]);
    // GPT-2's init (std 0.02, LayerNorm weights 1, biases 0) makes a C=8 model nearly linear:
    // uniform attention, GELU near its origin, so a wrong softmax or GELU backward would
    // barely show. So the matrices are scaled up (std 0.3; the embeddings 0.8, so that the
    // first LayerNorm is not so sharp that FD truncation dominates) and LayerNorm weights and
    // biases get random offsets. The padded vocabulary rows get values too: the softmax must
    // ignore their logits whatever they are, and their gradient must still be exactly 0.
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (int l = 0; l < (gpt2_tensor_is_layered(t) ? L : 1); l++) {
            float *p = params + gpt2_tensor_offset(lay, t, l);
            size_t n = gpt2_tensor_numel(&cfg, t);
            for (size_t i = 0; i < n; i++) {
                double x = p[i];
                if (t == P_WTE || t == P_WPE) x *= 40.0;
                else if (gpt2_tensor_decays(t)) x *= 15.0;
                else x += 0.2 * (2.0 * unif() - 1.0);
                if (t == P_WTE && i >= (size_t)V * C) x = 2.0 * unif() - 1.0;
                p[i] = quantize(x);
            }
        }
    int inp[MB * MT], tgt[MB * MT];
    for (int i = 0; i < MB * MT; i++) {
        inp[i] = (int)(unif() * V);
        tgt[i] = (int)(unif() * V);
    }
    inp[5] = inp[2] = inp[0]; // a token used three times, in both rows: its wte row sums them
    tgt[3] = inp[0];          // and a target too: that row gets both LM-head and encoder gradient
    ModelCtx ctx = {&m, inp, tgt};

    // The trainer does not zero gradients (z.grads_written): a step's first micro-step writes every
    // element, so NaN left in the buffer must not survive anywhere (padding included, below).
    for (size_t i = 0; i < lay->num_flat; i++) grads[i] = NAN;
    zero_begin_step(&m.z, 1);
    zero_begin_forward(&m.z, 0, 2);
    float loss = gpt2_forward(&m, inp, tgt, MB, MT, 1.0f / (MB * MT));
    gpt2_backward(&m, MB, MT);
    float *g = copy_of(grads, lay->num_flat);
    if (fabs(loss - model_J(&ctx)) > 1e-6 * fabs(loss))
        FAIL("model: gpt2_forward returned %.9g, not the mean of its per-position losses %.9g", loss, model_J(&ctx));
    // The encoder's share of dwte, rebuilt from the gradient of the embedding output (which
    // is what dresidual holds when the backward is done).
    float *enc_part = floats((size_t)V * C);
    for (int i = 0; i < MB * MT; i++)
        for (int c = 0; c < C; c++) enc_part[(size_t)inp[i] * C + c] += m.acts.dresidual[(size_t)i * C + c];

    // Gradient accumulation over micro-steps: a second pass must add the same gradient again.
    zero_begin_forward(&m.z, 1, 2);
    gpt2_forward(&m, inp, tgt, MB, MT, 1.0f / (MB * MT));
    gpt2_backward(&m, MB, MT);
    double worst = 0.0, gscale = max_abs(g, lay->num_flat);
    for (size_t i = 0; i < lay->num_flat; i++) worst = fmax(worst, fabs(grads[i] - 2.0 * g[i]));
    if (!(worst <= 1e-5 * gscale))
        FAIL("model: a second forward/backward does not add the same gradient again (off by %.3g)", worst);

    // Exact zeros: the padded vocabulary rows and every unit's alignment padding.
    size_t wte0 = gpt2_tensor_offset(lay, P_WTE, 0);
    for (size_t i = (size_t)V * C; i < gpt2_tensor_numel(&cfg, P_WTE); i++)
        if (g[wte0 + i] != 0.0f) { FAIL("model: padded vocabulary row %zu has gradient %g", i / C, g[wte0 + i]); break; }
    for (int u = 0; u < lay->num_units; u++)
        for (size_t i = lay->unit_offset[u] + lay->unit_numel[u]; i < lay->unit_offset[u + 1]; i++)
            if (g[i] != 0.0f) { FAIL("model: alignment padding of unit %d has gradient %g", u, g[i]); break; }

    if (quick) {
        printf("  (model: finite differences left out, --quick)\n");
        free(g); free(enc_part);
        gpt2_free(&m);
        return;
    }
    // FD of every parameter (cheap at this size: ~2000 parameters x 6 forward passes), then
    // one check per tensor over all its layers. The element floor uses the scale of the whole
    // model's gradient, because the FD noise is in units of the one loss.
    int team = omp_get_max_threads();
    omp_set_num_threads(1);
    double *fd = doubles(lay->num_flat);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++)
        for (int l = 0; l < (gpt2_tensor_is_layered(t) ? L : 1); l++) {
            size_t off = gpt2_tensor_offset(lay, t, l);
            for (size_t i = 0; i < gpt2_tensor_numel(&cfg, t); i++)
                fd[off + i] = fd_at(model_J, &ctx, &params[off + i], FD_H_MODEL);
        }
    omp_set_num_threads(team);
    double fscale = 0.0;
    for (size_t i = 0; i < lay->num_flat; i++) fscale = fmax(fscale, fabs(fd[i]));

    kernel_begin("model (every parameter)");
    double *ft = doubles(lay->num_params);
    float *gt = floats(lay->num_params);
    for (int t = 0; t < NUM_PARAM_TENSORS; t++) {
        size_t k = 0, n = gpt2_tensor_numel(&cfg, t);
        for (int l = 0; l < (gpt2_tensor_is_layered(t) ? L : 1); l++) {
            size_t off = gpt2_tensor_offset(lay, t, l);
            for (size_t i = 0; i < n; i++, k++) { ft[k] = fd[off + i]; gt[k] = g[off + i]; }
        }
        check_grad(gpt2_tensor_names[t], ft, gt, k, fscale);
    }
    kernel_end();

    // The padded rows: FD exactly 0, since their logits never reach the loss.
    for (size_t i = (size_t)V * C; i < gpt2_tensor_numel(&cfg, P_WTE); i++)
        if (fd[wte0 + i] != 0.0) { FAIL("model: padded vocabulary row %zu moves the loss (fd %g)", i / C, fd[wte0 + i]); break; }
    // The tied embedding: dwte passed above, so it holds the LM head's and the encoder's share
    // both; here each share alone must fail, which shows the check could tell.
    size_t nreal = (size_t)V * C;
    float *head = floats(nreal);
    for (size_t i = 0; i < nreal; i++) head[i] = g[wte0 + i] - enc_part[i];
    GradErr e1, e2;
    int head_ok = grad_compare(fd + wte0, head, nreal, fscale, &e1);
    int enc_ok = grad_compare(fd + wte0, enc_part, nreal, fscale, &e2);
    printf("  %-4s tied wte: the LM-head share alone is off by %.2e, the encoder share alone by %.2e (each must fail)\n",
           head_ok || enc_ok ? "FAIL" : "ok", e1.vec, e2.vec);
    if (head_ok || enc_ok) failures++;
    free(head); free(g); free(enc_part); free(fd); free(ft); free(gt);
    gpt2_free(&m);
}

// ----------------------------------------------------------------------------------------
// The checker must be able to fail: feed it gradients with small deliberate errors.

static void expect(int passed, int want_pass, const char *what, const GradErr *e) {
    printf("  %-4s %-44s ||g-fd||/||fd|| %.2e  element %.2e  (must %s)\n", passed == want_pass ? "ok" : "FAIL", what,
           e->vec, e->elem, want_pass ? "pass" : "fail");
    if (passed != want_pass) failures++;
}

static void test_mutations(void) {
    enum { N = 6, C = 8, OC = 12, NW = OC * C };
    float inp[N * C], w[NW], r[N * OC], out[N * OC], dinp[N * C], dw[NW] = {0}, mut[NW];
    fill_uniform(inp, N * C, -1, 1);
    fill_uniform(w, NW, -1, 1);
    fill_uniform(r, N * OC, -1, 1);
    MmCtx ctx = {N, C, OC, 0, inp, w, NULL, out, NULL, r};
    matmul_backward(&kc, dinp, dw, NULL, r, inp, w, NULL, N, C, OC);
    double fd[NW];
    fd_grad(mm_J, &ctx, w, NW, FD_H, fd);
    size_t big = 0, small = 0;
    for (size_t i = 0; i < NW; i++) {
        if (fabs(fd[i]) > fabs(fd[big])) big = i;
        if (fabs(fd[i]) < fabs(fd[small])) small = i;
    }
    GradErr e;
    expect(grad_compare(fd, dw, NW, 0, &e), 1, "matmul dw as computed", &e);
    memcpy(mut, dw, sizeof(mut)); // the largest element 1% off: the hardest place to see it
    mut[big] *= 1.01f;
    expect(grad_compare(fd, mut, NW, 0, &e), 0, "largest element 1% off", &e);
    memcpy(mut, dw, sizeof(mut)); // the smallest element off by 5e-4 of the largest
    mut[small] += (float)(5e-4 * fabs(fd[big]));
    expect(grad_compare(fd, mut, NW, 0, &e), 0, "smallest element off by 5e-4 of the max", &e);
    for (size_t i = 0; i < NW; i++) mut[i] = dw[i] * 1.002f; // a constant factor
    expect(grad_compare(fd, mut, NW, 0, &e), 0, "every element 0.2% too large", &e);
    memcpy(mut, dw, sizeof(mut));
    mut[3] = NAN;
    expect(grad_compare(fd, mut, NW, 0, &e), 0, "one element NaN", &e);
}

// The bf16 matmuls (bf16 runs: w16 given): the AMX/AVX512-BF16 path and the sgemm fallback
// (whole, and in row blocks as when the staging area is small) against a double-precision
// reference on bf16-rounded operands. The products of bf16 values are exact, so both paths
// differ from the reference only by fp32 summation (~1e-7 of the scale); an fp32 product of
// the unrounded operands differs by ~1e-3 (bf16 keeps 8 bits), which the check must see.
static void test_bf16_matmul(int N, int C, int OC) {
    float *inp = floats((size_t)N * C), *w = floats((size_t)OC * C), *bias = floats(OC), *dout = floats((size_t)N * OC);
    fill_uniform(inp, (size_t)N * C, -2, 2);
    fill_uniform(w, (size_t)OC * C, -1, 1);
    fill_uniform(bias, OC, -1, 1);
    fill_uniform(dout, (size_t)N * OC, -1, 1);
    bf16_t *w16 = (bf16_t *)xmalloc((size_t)OC * C * sizeof(bf16_t));
    f32_to_bf16_array(w16, w, (size_t)OC * C);
    bf16_to_f32_array(w, w16, (size_t)OC * C); // the fp32 view: the bf16 weights widened
    double *ref_out = (double *)xmalloc((size_t)N * OC * sizeof(double)), *ref_dinp = (double *)xmalloc((size_t)N * C * sizeof(double));
    double *ref_dw = (double *)xmalloc((size_t)OC * C * sizeof(double));
#define R16(x) ((double)bf16_to_f32(f32_to_bf16(x)))
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = bias[o];
            for (int c = 0; c < C; c++) acc += R16(inp[(size_t)n * C + c]) * w[(size_t)o * C + c];
            ref_out[(size_t)n * OC + o] = acc;
        }
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int o = 0; o < OC; o++) acc += R16(dout[(size_t)n * OC + o]) * w[(size_t)o * C + c];
            ref_dinp[(size_t)n * C + c] = acc;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double acc = 0.5; // dw starts at 0.5: the product is added
            for (int n = 0; n < N; n++) acc += R16(dout[(size_t)n * OC + o]) * R16(inp[(size_t)n * C + c]);
            ref_dw[(size_t)o * C + c] = acc;
        }
#undef R16
    size_t widest = (size_t)(OC + C > 5 * C ? OC + C : 5 * C) * N;
    bf16_t *staging = (bf16_t *)xmalloc(widest * sizeof(bf16_t));
    size_t scratch_bytes = gemm_bf16_linear_scratch_bytes(N, C, OC, omp_get_max_threads()); // as gpt2_build sizes it
    void *scratch = xmalloc(scratch_bytes);
    kc.mm.gemm = (GemmBf16Ctx){GEMM_BF16_AUTO, scratch, scratch_bytes};
    float *out = floats((size_t)N * OC), *dinp = floats((size_t)N * C), *dw = floats((size_t)OC * C);
    const char *names[3] = {"gemm_bf16", "sgemm fallback", "sgemm fallback, 3-row blocks"};
    for (int mode = 0; mode < 4; mode++) {
        kc.mm.staging = staging;
        kc.mm.staging_elems = mode == 2 ? (size_t)2 * (OC + C) * 3 : widest;
        kc.mm.via_sgemm = mode >= 1;
        for (size_t i = 0; i < (size_t)OC * C; i++) dw[i] = 0.5f;
        fill_nan(dinp, (size_t)N * C);
        if (mode < 3) {
            matmul_forward(&kc, out, inp, w, w16, bias, N, C, OC);
            matmul_backward(&kc, dinp, dw, NULL, dout, inp, w, w16, N, C, OC);
        } else { // fp32 products of the unrounded activations: must NOT pass
            matmul_forward(&kc, out, inp, w, NULL, bias, N, C, OC);
            matmul_backward(&kc, dinp, dw, NULL, dout, inp, w, NULL, N, C, OC);
        }
        double worst = 0.0;
        const double *refs[3] = {ref_out, ref_dinp, ref_dw};
        const float *got[3] = {out, dinp, dw};
        size_t n[3] = {(size_t)N * OC, (size_t)N * C, (size_t)OC * C};
        for (int t = 0; t < 3; t++) {
            double scale = 0.0, err = 0.0;
            for (size_t i = 0; i < n[t]; i++) scale = fmax(scale, fabs(refs[t][i]));
            for (size_t i = 0; i < n[t]; i++) err = fmax(err, fabs(got[t][i] - refs[t][i]) / scale);
            worst = fmax(worst, isnan(err) ? INFINITY : err);
        }
        if (mode < 3 && !(worst < 1e-5)) FAIL("bf16 matmul %dx%dx%d (%s): error %.2e of the scale", N, C, OC, names[mode], worst);
        if (mode == 3 && !(worst > 1e-4)) FAIL("bf16 matmul %dx%dx%d: unrounded fp32 passes (%.2e): the check is blind", N, C, OC, worst);
        if (mode < 3) printf("  bf16 matmul %dx%dx%d %-30s max error %.2e of the scale\n", N, C, OC, names[mode], worst);
        else printf("  (unrounded fp32 operands: %.2e, must be > 1e-4)\n", worst);
        if (mode == 3) continue;
        // a fresh gradient (the notes mark dw's range): the product overwrites the NaN there
        fill_nan(dw, (size_t)OC * C);
        kc.notes.grads[1] = (GradsOpen){dw, (size_t)OC * C, 1, NULL, NULL};
        matmul_backward(&kc, dinp, dw, NULL, dout, inp, w, w16, N, C, OC);
        kc.notes.grads[1] = (GradsOpen){NULL, 0, 0, NULL, NULL};
        double scale = 0.0, err = 0.0;
        for (size_t i = 0; i < (size_t)OC * C; i++) scale = fmax(scale, fabs(ref_dw[i] - 0.5));
        for (size_t i = 0; i < (size_t)OC * C; i++) err = fmax(err, fabs(dw[i] - (ref_dw[i] - 0.5)) / scale);
        if (!(err < 1e-5)) FAIL("bf16 matmul %dx%dx%d (%s): a fresh dw is off by %.2e of the scale", N, C, OC, names[mode], err);
    }
    memset(&kc, 0, sizeof(kc));
    free(scratch);
    free(inp); free(w); free(bias); free(dout); free(w16); free(ref_out); free(ref_dinp); free(ref_dw);
    free(staging); free(out); free(dinp); free(dw);
}

int main(int argc, char **argv) {
    quick = argc > 1 && !strcmp(argv[1], "--quick");
    double t0 = now_seconds();
    printf("tolerances: ||g-fd||/||fd|| < %g; every element |g-fd| / (|fd| + %g * max|fd|) < %g\n", VEC_TOL,
           ELEM_FLOOR, ELEM_TOL);
    printf("fd: 6-point central stencil, step %g (kernels), %g (model); %d OpenMP threads\n", FD_H, FD_H_MODEL,
           omp_get_max_threads());

    kernel_begin("encoder");
    test_encoder(2, 5, 8, 16, 6);
    test_encoder(1, 3, 40, 5, 4); // C not a multiple of the 32-channel blocks
    kernel_end();
    kernel_begin("layernorm");
    test_layernorm(10, 8);
    test_layernorm(3, 40);
    kernel_end();
    for (int f32 = 0; f32 < 1 + gemm_f32_supported(); f32++) { // OpenBLAS, then gemm_f32 (AVX-512)
        static const int shapes[3][3] = {{10, 8, 12}, {3, 5, 70}, {64, 32, 96}}; // (the shapes below: N, C, OC)
        size_t scratch_bytes = 0;
        for (int i = 0; i < 3; i++) {
            size_t b = gemm_f32_linear_scratch_bytes(shapes[i][0], shapes[i][1], shapes[i][2], omp_get_max_threads());
            scratch_bytes = b > scratch_bytes ? b : scratch_bytes;
        }
        void *scratch = f32 ? xmalloc(scratch_bytes) : NULL;
        kc.mm.f32_gemm = f32;
        kc.mm.gemm = (GemmBf16Ctx){GEMM_BF16_AUTO, scratch, f32 ? scratch_bytes : 0};
        kernel_begin(f32 ? "matmul (gemm_f32)" : "matmul (OpenBLAS sgemm)");
        test_matmul(10, 8, 12, 1, 0);
        test_matmul(10, 8, 12, 0, 0); // no bias: the tied LM head
        test_matmul(10, 8, 12, 1, 1); // accumulate: the residual projections
        test_matmul(3, 5, 70, 1, 0);  // OC not a multiple of the 64-wide bias blocks
        test_matmul(64, 32, 96, 1, 0); // whole 32 x 32 blocks: gemm_f32 reads the weight and dout in place
        kernel_end();
        memset(&kc, 0, sizeof(kc));
        free(scratch);
    }
    // attention: its products on cpu/head_gemm.h's kernel (where AVX-512 is), and on sgemm
    for (int simd = gemm_f32_supported(); simd >= 0; simd--) {
        kc.head_simd = simd;
        kernel_begin(simd ? "attention (head_gemm)" : "attention (sgemm)");
        test_attention(2, 5, 8, 2);
        test_attention(1, 7, 12, 3);
        test_attention(1, ATT_BLOCK + 13, 4, 2); // two row blocks, the second ragged; datt in 4-row blocks
        test_attention(1, 9, 140, 2);            // hs 70: output columns in two blocks of 64
        kernel_end();
    }
    kc.head_simd = 0;
    if (gemm_f32_supported()) {
        kernel_begin("head_gemm");
        test_head_gemm();
        kernel_end();
    }
    kernel_begin("gelu");
    test_gelu(97);
    kernel_end();
    kernel_begin("gelu (bf16 tables)");
    test_gelu_tables();
    kernel_end();
    kernel_begin("crossentropy_softmax_fused");
    test_crossentropy(10, 11, 16);
    test_crossentropy(3, 2100, 2112); // rows over two of the bf16 form's chunks, targets in the first and the last
    kernel_end();
    printf("bf16 matmuls (bf16 runs):\n");
    test_bf16_matmul(10, 40, 70);
    test_bf16_matmul(33, 96, 200); // edges of the 32x32 tiles
    test_model();
    printf("checker self-test (mutations):\n");
    test_mutations();

    printf("%s: %d failure(s), %.1f s\n", failures ? "FAILED" : "PASSED", failures, now_seconds() - t0);
    return failures ? 1 : 0;
}
