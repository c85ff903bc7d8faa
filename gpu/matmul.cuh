// gpu/matmul.cuh: matmuls through cuBLASLt, planned once per shape, and the linear layer's forward
// and backward that model.h calls.
#ifndef GPU_MATMUL_CUH
#define GPU_MATMUL_CUH
#include "gpu/colsum.cuh"

// ----------------------------------------------------------------------------------------
// Matmuls through cuBLASLt: floatX inputs and outputs, fp32 accumulation and scaling
// (CUBLAS_COMPUTE_32F; in fp32 builds that is plain fp32, no TF32: the CPU comparison wants fp32
// products). Written in row-major terms:
//   D (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * D, each matrix row-major with its own
//   leading dimension; op(A) = A stored (M,K), or A^T with A stored (K,M) when transA.
// `batch` matrices at the given element strides (strided batch). bias (N), when given, is
// added to every row (beta must be 0 then). matmul_lt_dgelu: D = gelu'(pre) * op(A) op(B), pre
// (M,N) laid out as D, through cuBLASLt's DGELU epilogue (the GELU's backward fused into the
// product that feeds it: one pass over D instead of three). cuBLASLt is column-major, so it computes
// D^T = op(B)^T . op(A)^T: the row-major B is its first operand. With beta != 0 cuBLASLt reads
// D, adds in fp32 and rounds once: parameter gradients (dw +=) get one rounding per call.

// The alignment in bytes (256 at most, one element at least) that a pointer and, in a strided
// batch, every batch's pointer share.
static size_t alignment_of(const void *p, long long stride_elems, int batch) {
    uintptr_t a = (uintptr_t)p;
    if (batch > 1) a |= (uintptr_t)(stride_elems * (long long)sizeof(floatX));
    size_t al = 256;
    while (al > sizeof(floatX) && (a & (al - 1))) al >>= 1;
    return al;
}

// cuBLASLt's descriptors and its heuristic's choice for one shape. A training step asks for the
// same couple of dozen shapes again and again, and asking the heuristic costs more host time
// than many of the kernels it picks, so each shape is planned once (matmul_plan) and its plan
// reused; only the bias pointer changes between calls (set on the descriptor before each one:
// cuBLASLt reads descriptors when the matmul is enqueued). The key is everything the heuristic
// saw: sizes, transposes, leading dimensions, batch and strides, the alignments the pointers
// have and whether the bias goes through the epilogue.
typedef struct {
    int M, N, K, transA, transB, lda, ldb, ldd, batch, bias_epilogue, dgelu;
    long long strideA, strideB, strideD;
    uint32_t al[4];                  // B, A, D, and DGELU's pre: as told to the heuristic
} MatmulKey;
typedef struct {
    MatmulKey key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulHeuristicResult_t heur;
    int found;                       // 0: no cuBLASLt algorithm, the fallback kernel runs
} MatmulPlan;
#define MATMUL_PLANS 64              // GPT-2 uses about 20 shapes (sampler included); more are replaced in turn
typedef struct MatmulPlans { MatmulPlan plan[MATMUL_PLANS]; int used, next; } MatmulPlans;

static void matmul_plan_free(MatmulPlan *p) {
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->la));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->lb));
    CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p->ld));
    CUBLAS_CHECK(cublasLtMatmulDescDestroy(p->desc));
}
static void matmul_plans_free(MatmulPlans *ps) {
    for (int i = 0; i < ps->used; i++) matmul_plan_free(&ps->plan[i]);
    ps->used = ps->next = 0;
}
// (aux: DGELU's pre, whose address cuBLASLt's heuristic reads for its alignment; NULL otherwise)
static const MatmulPlan *matmul_plan(const Gpu *gpu, MatmulPlans *ps, const MatmulKey *k, const void *aux) {
    for (int i = 0; i < ps->used; i++)
        if (!memcmp(&ps->plan[i].key, k, sizeof(*k))) return &ps->plan[i];
    MatmulPlan *p;
    if (ps->used < MATMUL_PLANS) p = &ps->plan[ps->used++];
    else { p = &ps->plan[ps->next]; ps->next = (ps->next + 1) % MATMUL_PLANS; matmul_plan_free(p); }
    memset(p, 0, sizeof(*p));
    p->key = *k;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opA = k->transB ? CUBLAS_OP_T : CUBLAS_OP_N, opB = k->transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
    if (k->bias_epilogue) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        int32_t bias_type = FLOATX_CUDA; // D's type is the default; said explicitly, as the bias is floatX by contract
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    }
    if (k->dgelu) { // pre has D's layout: its leading dimension is D's
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_DGELU;
        int64_t ld_aux = k->ldd;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    }
    // column-major views: first operand = row-major B, second = row-major A, D is (N rows, M cols)
    int M = k->M, N = k->N, K = k->K;
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, FLOATX_CUDA, k->transB ? K : N, k->transB ? N : K, k->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, FLOATX_CUDA, k->transA ? M : K, k->transA ? K : M, k->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld, FLOATX_CUDA, N, M, k->ldd));
    if (k->batch > 1) {
        cublasLtMatrixLayout_t ls[3] = {p->la, p->lb, p->ld};
        long long st[3] = {k->strideB, k->strideA, k->strideD};
        for (int i = 0; i < 3; i++) {
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &k->batch, sizeof(k->batch)));
            CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st[i], sizeof(st[i])));
        }
    }
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                      &gpu->workspace_bytes, sizeof(gpu->workspace_bytes)));
    // Tell the heuristic how aligned the pointers (and every batch's pointer) really are, so
    // it never picks a kernel that needs more: tensor offsets inside a unit, a head's columns
    // inside qkv and the sampler's odd sequence lengths can leave as little as one element.
    cublasLtMatmulPreferenceAttributes_t which[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                     CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    uint32_t vals[4] = {k->al[0], k->al[1], k->al[2], k->al[2]};
    for (int i = 0; i < 4; i++) CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &vals[i], sizeof(vals[i])));
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(gpu->lt, p->desc, p->la, p->lb, p->ld, p->ld, pref, 1, &p->heur, &p->found);
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) CUBLAS_CHECK(hs);
    if (hs != CUBLAS_STATUS_SUCCESS) p->found = 0;
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    return p;
}

// The key of one call: everything the heuristic sees (pre: DGELU's, or NULL).
static MatmulKey matmul_key(floatX *d, const floatX *a, const floatX *b, const floatX *bias, const floatX *pre, int M, int N, int K,
                            int transA, int transB, int lda, int ldb, int ldd, int batch, long long strideA, long long strideB,
                            long long strideD) {
    MatmulKey key;
    memset(&key, 0, sizeof(key)); // the padding too: keys are compared with memcmp
    key.M = M; key.N = N; key.K = K; key.transA = transA; key.transB = transB;
    key.lda = lda; key.ldb = ldb; key.ldd = ldd; key.batch = batch;
    key.strideA = strideA; key.strideB = strideB; key.strideD = strideD;
    key.bias_epilogue = bias && ((uintptr_t)bias % 16) == 0;
    key.dgelu = pre != NULL;
    key.al[0] = (uint32_t)alignment_of(b, strideB, batch);
    key.al[1] = (uint32_t)alignment_of(a, strideA, batch);
    key.al[2] = (uint32_t)alignment_of(d, strideD, batch);
    key.al[3] = pre ? (uint32_t)alignment_of(pre, 0, 1) : 0;
    return key;
}
static void matmul_lt(GpuKernels *kc, floatX *d, const floatX *a, const floatX *b, const floatX *bias, int M, int N, int K, int transA,
                      int transB, int lda, int ldb, int ldd, float alpha, float beta, int batch = 1,
                      long long strideA = 0, long long strideB = 0, long long strideD = 0) {
    MatmulKey key = matmul_key(d, a, b, bias, NULL, M, N, K, transA, transB, lda, ldb, ldd, batch, strideA, strideB, strideD);
    const Gpu *gpu = kc->gpu;
    const MatmulPlan *p = matmul_plan(gpu, kc->plans, &key, NULL);
    if (!p->found) {
        // No cuBLASLt kernel for this shape and these alignments (16-bit operands one element
        // aligned, say): compute it anyway, slowly, and say so once per process, so that a
        // slow shape is visible rather than fatal.
        static int warned = 0;
        if (!warned) {
            warned = 1;
            fprintf(stderr, "warning: no cuBLASLt algorithm for M=%d N=%d K=%d transA=%d transB=%d batch=%d (alignments "
                            "%u/%u/%u bytes): a plain CUDA kernel computes it (slow); further cases are not reported\n",
                    M, N, K, transA, transB, batch, key.al[1], key.al[0], key.al[2]);
        }
        dim3 grid(ceil_div((size_t)M, 16), ceil_div((size_t)N, 16), batch < 65535 ? batch : 65535);
        matmul_fallback_kernel<<<grid, dim3(16, 16), 0, gpu->compute>>>(d, a, b, bias, M, N, K, transA, transB, lda, ldb,
                                                                       ldd, alpha, beta, batch, strideA, strideB, strideD);
        LAUNCH_CHECK();
        return;
    }
    if (key.bias_epilogue)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    CUBLAS_CHECK(cublasLtMatmul(gpu->lt, p->desc, &alpha, b, p->la, a, p->lb, &beta, d, p->ld, d, p->ld, &p->heur.algo,
                                gpu->workspace, gpu->workspace_bytes, gpu->compute));
    if (bias && !key.bias_epilogue) {
        for (int k = 0; k < batch; k++) {
            add_bias_kernel<<<grid_for(gpu, (size_t)M * N, 256), 256, 0, gpu->compute>>>(d + k * strideD, bias, M, N);
            LAUNCH_CHECK();
        }
    }
}
// D (M,N) = gelu'(pre) * op(A) op(B) (one matrix, alpha 1, beta 0), pre (M,N) with D's leading
// dimension: matmul_dgelu_plan gives the plan, or NULL where pre is not 16-byte aligned or cuBLASLt
// has no DGELU algorithm for the shape (the caller then runs the product and the GELU's backward
// apart); matmul_lt_dgelu runs it.
static const MatmulPlan *matmul_dgelu_plan(GpuKernels *kc, floatX *d, const floatX *a, const floatX *b, const floatX *pre, int M,
                                           int N, int K, int transA, int transB, int lda, int ldb, int ldd) {
    if ((uintptr_t)pre % 16 || ldd % 8) return NULL;
    MatmulKey key = matmul_key(d, a, b, NULL, pre, M, N, K, transA, transB, lda, ldb, ldd, 1, 0, 0, 0);
    const MatmulPlan *p = matmul_plan(kc->gpu, kc->plans, &key, pre);
    return p->found ? p : NULL;
}
static void matmul_lt_dgelu(GpuKernels *kc, const MatmulPlan *p, floatX *d, const floatX *a, const floatX *b, const floatX *pre) {
    const Gpu *gpu = kc->gpu;
    float alpha = 1.0f, beta = 0.0f;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &pre, sizeof(pre)));
    CUBLAS_CHECK(cublasLtMatmul(gpu->lt, p->desc, &alpha, b, p->la, a, p->lb, &beta, d, p->ld, d, p->ld, &p->heur.algo,
                                gpu->workspace, gpu->workspace_bytes, gpu->compute));
}

// ----------------------------------------------------------------------------------------
// Column sums of parameter gradients (gpu/colsum.cuh): the LayerNorm backward (dinp, dw, db; x, w,
// mean, rstd given) through column_partials_kernel, and matmul bias gradients (db only; dinp, dw,
// x, w, mean, rstd NULL) through bias_partials_kernel; then column_finish_kernel.
// Grid: blocks over slabs of columns (LayerNorm: 256 threads x V columns, a warp per row in the
// input-gradient part, CS_LN_BLOCKS_PER_SM per SM; bias: CS_BIAS_WARPS warps over 32 x V columns,
// CS_BIAS_BLOCKS_PER_SM per SM, so about 32 warps per SM each with CS_TILE 16-byte loads in
// flight) and row ranges, enough for blocks_per_sm blocks per SM in all: one wave of equal
// blocks. A LayerNorm's row range is a multiple of CS_TILE rows and at least CS_LN_MIN_ROWS, a
// bias's a multiple of CS_BIAS_WARPS (the warps take interleaved rows). More row ranges fill the
// GPU faster but write more partials (parts x columns fp32, written and read again: 2 / rows of
// a LayerNorm's own traffic): at d12, B=16, T=1024 on 132 SMs, 512 x 1536 (3.1 MB) for a
// LayerNorm, 171 x 768, 57 x 2304 and 44 x 3072 (0.5 MB each) for the biases; at d48, B=4,
// 256 x 3200 (3.3 MB; 8 rows a block would be 512 x 3200, 25% more traffic) for a LayerNorm.
typedef struct { int slabs, rows, parts; } ColumnGrid;
static ColumnGrid column_grid(int sm_count, int N, int C, int V, int ln) {
    int slab = ln ? CS_LN_THREADS * V : WARP * V, per_sm = ln ? CS_LN_BLOCKS_PER_SM : CS_BIAS_BLOCKS_PER_SM,
        gran = ln ? CS_TILE : CS_BIAS_WARPS, min_rows = ln ? CS_LN_MIN_ROWS : CS_BIAS_WARPS;
    ColumnGrid g;
    g.slabs = (int)ceil_div((size_t)C, slab);
    size_t want = (size_t)sm_count * per_sm / g.slabs;
    if (want < 1) want = 1;
    g.rows = (int)(ceil_div(ceil_div((size_t)N, want), gran) * gran);
    if (g.rows < min_rows) g.rows = min_rows;
    g.parts = (int)ceil_div((size_t)N, g.rows); // <= want, <= ceil(N / min_rows)
    return g;
}
// The scratch floats a column sum over at most N rows and C columns needs: column_grid's parts
// are at most its `want` (which V = 1, with more slabs, makes no larger than V = VEC does) and at
// most ceil(N / min_rows); both bounds grow with N, so fewer rows (a smaller batch) need no more.
// gpt2_build sizes GpuKernels.scratch with it.
static size_t column_scratch_floats(int sm_count, int N, int C, int ln) {
    ColumnGrid g = column_grid(sm_count, N, C, VEC, ln);
    size_t want = (size_t)sm_count * (ln ? CS_LN_BLOCKS_PER_SM : CS_BIAS_BLOCKS_PER_SM) / g.slabs;
    size_t rows = ceil_div((size_t)N, ln ? CS_LN_MIN_ROWS : CS_BIAS_WARPS);
    if (want < 1) want = 1;
    return (want < rows ? want : rows) * (ln ? 2 : 1) * C;
}
static void column_grads(GpuKernels *kc, floatX *dinp, floatX *dw, floatX *db, const floatX *dout, const floatX *x,
                         const floatX *w, const float *mean, const float *rstd, int N, int C) {
    int ln = x != NULL;
    int vec = C % VEC == 0 && vec_ok(dout) && (!ln || (vec_ok(dinp) && vec_ok(x) && vec_ok(w)));
    ColumnGrid g = column_grid(kc->gpu->sm_count, N, C, vec ? VEC : 1, ln);
    size_t cols = (size_t)(ln ? 2 : 1) * C;
    if ((size_t)g.parts * cols > kc->scratch_floats) {
        char m[128];
        snprintf(m, sizeof(m), "%d x %zu partial sums, scratch for %zu floats", g.parts, cols, kc->scratch_floats);
        gpu_fatal("column_grads", m, __FILE__, __LINE__); // a shape gpt2_build did not size for: a bug
    }
    if (ln) {
        void (*partials)(float *, floatX *, const floatX *, const floatX *, const floatX *, const float *, const float *, int, int,
                         int) = vec ? column_partials_kernel<VEC> : column_partials_kernel<1>;
        partials<<<dim3(g.parts, g.slabs), CS_LN_THREADS, 0, kc->gpu->compute>>>(kc->scratch, dinp, dout, x, w, mean, rstd, N,
                                                                                   C, g.rows);
    } else {
        void (*partials)(float *, const floatX *, int, int, int) = vec ? bias_partials_kernel<VEC> : bias_partials_kernel<1>;
        partials<<<dim3(g.parts, g.slabs), CS_BIAS_WARPS * WARP, 0, kc->gpu->compute>>>(kc->scratch, dout, N, C, g.rows);
    }
    LAUNCH_CHECK();
    column_finish_kernel<<<ceil_div(cols, CS_FINISH_X), dim3(CS_FINISH_X, CS_FINISH_Y), 0, kc->gpu->compute>>>(
        ln ? dw : NULL, db, kc->scratch, g.parts, C);
    LAUNCH_CHECK();
}

// out (N,OC) = inp (N,C) . w^T + bias; w (OC,C) as PyTorch's Linear; bias (OC) or NULL.
// w16: the weight's 16-bit copy (model.h's gpt2_x16), or NULL. Here the weights themselves
// are floatX already, so the storage hooks never hand one over (UnitParams.x16 is NULL): it is
// the CPU trainer's, whose fp32 kernels need a separate 16-bit copy for its bf16 matmuls.
// --profile-kernels' name for one of a linear layer's matmuls: its role and its shape (C->OC).
static const char *matmul_name(char *buf, size_t n, const Gpu *gpu, const char *what, int C, int OC) {
    if (gpu->prof && gpu->prof->on) snprintf(buf, n, "%s %d->%d", what, C, OC);
    return buf;
}
static void matmul_forward(GpuKernels *kc, floatX *out, const floatX *inp, const floatX *w, const void *w16, const floatX *bias, int N,
                           int C, int OC) {
    (void)w16;
    char nm[64] = "";
    KSpan span(kc->gpu->prof, matmul_name(nm, sizeof(nm), kc->gpu, "matmul_forward", C, OC), 2.0 * N * C * OC,
               ((double)N * C + (double)C * OC + (double)N * OC + (bias ? OC : 0)) * sizeof(floatX));
    matmul_lt(kc, out, inp, w, bias, N, OC, C, 0, 1, C, C, OC, 1.0f, 0.0f);
}
// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += dout^T . inp;  dbias (OC) += column sums of dout
// (w16 as in matmul_forward). With pre (N,C) (matmul_backward_gelu's): dinp = gelu'(pre) * dout . w
// where cuBLASLt's DGELU epilogue can: returns 1 then, 0 when dinp is the plain product.
static int matmul_backward_pre(GpuKernels *kc, floatX *dinp, floatX *dw, floatX *dbias, const floatX *dout, const floatX *inp,
                               const floatX *w, const floatX *pre, int N, int C, int OC) {
    char nm[64] = "";
    double nc = (double)N * C, no = (double)N * OC, oc = (double)OC * C;
    const MatmulPlan *fused = pre ? matmul_dgelu_plan(kc, dinp, dout, w, pre, N, C, OC, 0, 0, OC, C, C) : NULL;
    if (fused) {
        KSpan span(kc->gpu->prof, matmul_name(nm, sizeof(nm), kc->gpu, "matmul_backward dinp+dgelu", C, OC), 2.0 * N * C * OC,
                   (no + oc + 2.0 * nc) * sizeof(floatX));
        matmul_lt_dgelu(kc, fused, dinp, dout, w, pre);
    } else {
        KSpan span(kc->gpu->prof, matmul_name(nm, sizeof(nm), kc->gpu, "matmul_backward dinp", C, OC), 2.0 * N * C * OC,
                   (no + oc + nc) * sizeof(floatX));
        matmul_lt(kc, dinp, dout, w, NULL, N, C, OC, 0, 0, OC, C, C, 1.0f, 0.0f);
    }
    {
        KSpan span(kc->gpu->prof, matmul_name(nm, sizeof(nm), kc->gpu, "matmul_backward dweight", C, OC), 2.0 * N * C * OC,
                   (no + nc + 2.0 * oc) * sizeof(floatX));
        matmul_lt(kc, dw, dout, inp, NULL, OC, C, N, 1, 0, OC, C, C, 1.0f, 1.0f);
    }
    if (dbias) {
        KSpan span(kc->gpu->prof, matmul_name(nm, sizeof(nm), kc->gpu, "bias gradient", C, OC), 0.0, (no + 2.0 * OC) * sizeof(floatX));
        column_grads(kc, NULL, NULL, dbias, dout, NULL, NULL, NULL, NULL, N, OC);
    }
    return fused != NULL;
}
static void matmul_backward(GpuKernels *kc, floatX *dinp, floatX *dw, floatX *dbias, const floatX *dout, const floatX *inp,
                            const floatX *w, const void *w16, int N, int C, int OC) {
    (void)w16;
    matmul_backward_pre(kc, dinp, dw, dbias, dout, inp, w, NULL, N, C, OC);
}

#endif // GPU_MATMUL_CUH
