// cublasLt.h, the emulator's (see cuda_runtime.h): the part of cuBLASLt train_gpt.cu uses, with
// the documented semantics, so that the GPU trainer's descriptors (column-major views of its
// row-major matrices, transposes, leading dimensions, strided batches, the bias epilogue,
// alignments promised to the heuristic) are checked by running them:
//   D = alpha * op(A) op(B) + beta * C (+ bias broadcast along D's columns), column-major,
//   op(A) m x k, op(B) k x n, C and D m x n; products in fp32 (OpenBLAS sgemm on the widened
//   inputs: CUBLAS_COMPUTE_32F), D rounded once to its type. The sgemm runs on one OpenMP thread
//   whatever OMP_NUM_THREADS says (OpenBLAS's OpenMP build reads it at each call, and its sums
//   differ in the last bits with the thread count), so an emulated run's numbers do not depend
//   on the threads a rank was given, as a GPU's cuBLASLt results do not.
// EMU_CUBLASLT_MIN_ALIGN=N makes the heuristic find no algorithm when a pointer is promised less
// than N bytes of alignment (what the trainer's fallback kernel is for).
#pragma once
#include "cuda_runtime.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include <cblas.h>
#include <omp.h>

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_INVALID_VALUE = 7,
               CUBLAS_STATUS_NOT_SUPPORTED = 15 } cublasStatus_t;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4, CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
               CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
               CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26 }
    cublasLtMatmulDescAttributes_t;
typedef enum { CUBLASLT_EPILOGUE_DEFAULT = 1, CUBLASLT_EPILOGUE_BIAS = 4, CUBLASLT_EPILOGUE_GELU = 32,
               CUBLASLT_EPILOGUE_GELU_AUX = 160, CUBLASLT_EPILOGUE_GELU_BIAS = 36,
               CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, CUBLASLT_EPILOGUE_DGELU = 192 } cublasLtEpilogue_t;
typedef enum { CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6 }
    cublasLtMatrixLayoutAttribute_t;
typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
               CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8 } cublasLtMatmulPreferenceAttributes_t;

struct EmuLtHandle { int alive; };
struct EmuLtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale, bias_type;
    int bias_type_set;
    cublasOperation_t transa, transb;
    cublasLtEpilogue_t epilogue;
    const void *bias;
    void *aux;
    int64_t aux_ld;
};
struct EmuLtLayout { cudaDataType_t type; uint64_t rows, cols; int64_t ld; int32_t batch; int64_t stride; };
struct EmuLtPref { uint64_t workspace; uint32_t align[4]; };
typedef EmuLtHandle *cublasLtHandle_t;
typedef EmuLtDesc *cublasLtMatmulDesc_t;
typedef EmuLtLayout *cublasLtMatrixLayout_t;
typedef EmuLtPref *cublasLtMatmulPreference_t;
typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t; // data[0..3]: the alignments promised
typedef struct { cublasLtMatmulAlgo_t algo; size_t workspaceSize; cublasStatus_t state; float wavesCount; int reserved[4]; }
    cublasLtMatmulHeuristicResult_t;

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new EmuLtHandle{1}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { emu_drain_all("cublasLtDestroy"); delete h; return CUBLAS_STATUS_SUCCESS; }

static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    *d = new EmuLtDesc();
    (*d)->compute = compute;
    (*d)->scale = scale;
    (*d)->transa = (*d)->transb = CUBLAS_OP_N;
    (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
template <class T> static int emu_lt_get(T *dst, const void *src, size_t size) {
    if (size != sizeof(T)) return 0;
    memcpy(dst, src, size);
    return 1;
}
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *v, size_t size) {
    int32_t i32;
    int ok;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = emu_lt_get(&i32, v, size); d->transa = (cublasOperation_t)i32; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = emu_lt_get(&i32, v, size); d->transb = (cublasOperation_t)i32; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = emu_lt_get(&i32, v, size); d->epilogue = (cublasLtEpilogue_t)i32; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = emu_lt_get(&d->bias, v, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ok = emu_lt_get(&d->aux, v, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = emu_lt_get(&d->aux_ld, v, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = emu_lt_get(&i32, v, size); d->bias_type = (cudaDataType_t)i32; d->bias_type_set = 1; break;
    default: emu_fatal("cublasLtMatmulDescSetAttribute: attribute %d is not emulated", (int)a);
    }
    if (!ok) emu_fatal("cublasLtMatmulDescSetAttribute: attribute %d given %zu bytes, the wrong size", (int)a, size);
    return CUBLAS_STATUS_SUCCESS;
}
static inline size_t emu_lt_size(cudaDataType_t t) {
    switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16F: case CUDA_R_16BF: return 2;
    default: emu_fatal("cuBLASLt: data type %d is not emulated", (int)t);
    }
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld) {
    (void)emu_lt_size(type);
    if (ld < (int64_t)rows || ld < 1) return CUBLAS_STATUS_INVALID_VALUE; // column-major: ld >= rows
    *l = new EmuLtLayout{type, rows, cols, ld, 1, 0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a, const void *v, size_t size) {
    int ok = a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT ? emu_lt_get(&l->batch, v, size)
           : a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET ? emu_lt_get(&l->stride, v, size) : -1;
    if (ok < 0) emu_fatal("cublasLtMatrixLayoutSetAttribute: attribute %d is not emulated", (int)a);
    if (!ok) emu_fatal("cublasLtMatrixLayoutSetAttribute: attribute %d given %zu bytes, the wrong size", (int)a, size);
    return l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) { *p = new EmuLtPref{0, {256, 256, 256, 256}}; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const void *v, size_t size) {
    int ok;
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) ok = emu_lt_get(&p->workspace, v, size);
    else if (a >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES)
        ok = emu_lt_get(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], v, size);
    else emu_fatal("cublasLtMatmulPreferenceSetAttribute: attribute %d is not emulated", (int)a);
    if (!ok) emu_fatal("cublasLtMatmulPreferenceSetAttribute: attribute %d given %zu bytes, the wrong size", (int)a, size);
    return CUBLAS_STATUS_SUCCESS;
}

// The shapes must fit together (as cuBLASLt checks them); returns m, n, k through the pointers.
static inline cublasStatus_t emu_lt_shapes(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                    cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, uint64_t *m, uint64_t *n, uint64_t *k) {
    uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols, ak = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
    uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols, bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
    *m = D->rows; *n = D->cols; *k = ak;
    if (am != D->rows || bn != D->cols || ak != bk || C->rows != D->rows || C->cols != D->cols) return CUBLAS_STATUS_INVALID_VALUE;
    if (A->batch != D->batch || B->batch != D->batch || C->batch != D->batch) return CUBLAS_STATUS_INVALID_VALUE;
    if (A->type != B->type || C->type != D->type) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS && d->epilogue != CUBLASLT_EPILOGUE_GELU &&
        d->epilogue != CUBLASLT_EPILOGUE_GELU_BIAS && d->epilogue != CUBLASLT_EPILOGUE_GELU_AUX &&
        d->epilogue != CUBLASLT_EPILOGUE_GELU_AUX_BIAS && d->epilogue != CUBLASLT_EPILOGUE_DGELU)
        emu_fatal("cuBLASLt: epilogue %d is not emulated", (int)d->epilogue);
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                                     cublasLtMatmulPreference_t p, int requested,
                                                     cublasLtMatmulHeuristicResult_t *res, int *found) {
    if (!h || requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t m, n, k;
    cublasStatus_t st = emu_lt_shapes(d, A, B, C, D, &m, &n, &k);
    *found = 0;
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const char *env = getenv("EMU_CUBLASLT_MIN_ALIGN");
    uint32_t need = env ? (uint32_t)atoi(env) : 1;
    size_t esz[4] = {emu_lt_size(A->type), emu_lt_size(B->type), emu_lt_size(C->type), emu_lt_size(D->type)};
    for (int i = 0; i < 4; i++) {
        if (p->align[i] < esz[i] || (p->align[i] & (p->align[i] - 1)))
            emu_fatal("cuBLASLt heuristic: operand %c promised a %u-byte alignment (not a power of two >= its element size)",
                      "ABCD"[i], p->align[i]);
        if (p->align[i] < need) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(res, 0, sizeof(*res));
    for (int i = 0; i < 4; i++) res->algo.data[i] = p->align[i];
    res->algo.data[4] = 0x5A5A; // a mark: this algo came from the heuristic
    res->state = CUBLAS_STATUS_SUCCESS;
    res->wavesCount = 1.0f;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline float emu_lt_load(const void *p, size_t i, cudaDataType_t t) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return __half2float(((const __half *)p)[i]);
}
static inline void emu_lt_store(void *p, size_t i, cudaDataType_t t, float v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = v;
    else if (t == CUDA_R_16BF) ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else ((__half *)p)[i] = __float2half_rn(v);
}
// The GELU of cuBLASLt's epilogues: the tanh approximation.
static inline float emu_lt_gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))); }
// ... and its derivative (DGELU): 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx, u = k (x + 0.044715 x^3)
static inline float emu_lt_gelu_grad(float x) {
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x), th = tanhf(u);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
}
// A column-major matrix widened to fp32, same leading dimension.
static inline std::vector<float> emu_lt_widen(const void *p, const EmuLtLayout &l) {
    std::vector<float> f((size_t)l.ld * l.cols);
    for (uint64_t c = 0; c < l.cols; c++)
        for (uint64_t r = 0; r < l.rows; r++) f[c * l.ld + r] = emu_lt_load(p, c * l.ld + r, l.type);
    return f;
}
static inline void emu_lt_check_align(const void *p, int64_t stride, size_t esz, int32_t batch, uint64_t promised, char which) {
    uintptr_t a = (uintptr_t)p;
    if (batch > 1) a |= (uintptr_t)(stride * (int64_t)esz);
    if (a % promised)
        emu_fatal("cublasLtMatmul: operand %c (%p, batch stride %lld elements) is less aligned than the %llu bytes promised to "
                  "the heuristic", which, p, (long long)stride, (unsigned long long)promised);
}
static inline void emu_lt_check_extent(const void *p, const EmuLtLayout &l, const char *what) {
    size_t esz = emu_lt_size(l.type), last = (size_t)(l.batch - 1) * (size_t)l.stride + (l.cols - 1) * (size_t)l.ld + l.rows;
    if (l.rows && l.cols) emu_check_range(p, last * esz, 1, "cublasLtMatmul", what);
}
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                     cublasLtMatrixLayout_t Al, const void *B, cublasLtMatrixLayout_t Bl, const void *beta,
                                     const void *C, cublasLtMatrixLayout_t Cl, void *D, cublasLtMatrixLayout_t Dl,
                                     const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t s) {
    if (!h || !algo || algo->data[4] != 0x5A5A) emu_fatal("cublasLtMatmul: no handle, or an algo the heuristic did not return");
    uint64_t m, n, k;
    cublasStatus_t st = emu_lt_shapes(d, Al, Bl, Cl, Dl, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (ws_bytes && !emu_is_device(ws)) emu_fatal("cublasLtMatmul: the workspace is not device memory");
    float a = *(const float *)alpha, b = *(const float *)beta; // host pointers: read now
    const void *ptr[4] = {A, B, C, D};
    const EmuLtLayout *lay[4] = {Al, Bl, Cl, Dl};
    for (int i = 0; i < 4; i++) {
        char what[16];
        snprintf(what, sizeof(what), "operand %c", "ABCD"[i]);
        emu_lt_check_extent(ptr[i], *lay[i], what);
        emu_lt_check_align(ptr[i], lay[i]->stride, emu_lt_size(lay[i]->type), lay[i]->batch, algo->data[i], "ABCD"[i]);
    }
    if (C != D && b != 0.0f) emu_check_range(C, 1, 1, "cublasLtMatmul", "operand C");
    int has_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
                   d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu = d->epilogue == CUBLASLT_EPILOGUE_GELU || d->epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
               d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int aux = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int dgelu = d->epilogue == CUBLASLT_EPILOGUE_DGELU; // D = gelu'(aux) * the product: aux is read
    cudaDataType_t bias_type = d->bias_type_set ? d->bias_type : Dl->type;
    if (has_bias) {
        if (!d->bias) emu_fatal("cublasLtMatmul: a bias epilogue without a bias pointer");
        if (bias_type != Dl->type && bias_type != CUDA_R_32F) emu_fatal("cublasLtMatmul: bias type %d with D of type %d", (int)bias_type, (int)Dl->type);
        emu_check_range(d->bias, m * emu_lt_size(bias_type), 1, "cublasLtMatmul", "bias (D's rows)");
    }
    if (aux || dgelu) {
        if (!d->aux || d->aux_ld < (int64_t)m || d->aux_ld % 8)
            emu_fatal("cublasLtMatmul: a GELU_AUX or DGELU epilogue without an aux pointer, or with ld < rows or not a multiple of 8");
        if (Dl->batch > 1) emu_fatal("cublasLtMatmul: an aux epilogue on a batched matmul is not emulated");
        emu_check_range(d->aux, ((n - 1) * (size_t)d->aux_ld + m) * emu_lt_size(Dl->type), 1, "cublasLtMatmul", "aux");
    }
    EmuLtDesc dd = *d;
    EmuLtLayout la = *Al, lb = *Bl, lc = *Cl, ld = *Dl;
    emu_enqueue(s, [=] {
        std::vector<float> acc(m * n);
        for (int32_t bt = 0; bt < ld.batch; bt++) {
            const char *pa = (const char *)A + (size_t)bt * la.stride * emu_lt_size(la.type);
            const char *pb = (const char *)B + (size_t)bt * lb.stride * emu_lt_size(lb.type);
            const char *pc = (const char *)C + (size_t)bt * lc.stride * emu_lt_size(lc.type);
            char *pd = (char *)D + (size_t)bt * ld.stride * emu_lt_size(ld.type);
            std::vector<float> fa = emu_lt_widen(pa, la), fb = emu_lt_widen(pb, lb);
            if (k > 0) {
                int threads = omp_get_max_threads();
                omp_set_num_threads(1);
                cblas_sgemm(CblasColMajor, dd.transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                            dd.transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, 1.0f, fa.data(),
                            (int)la.ld, fb.data(), (int)lb.ld, 0.0f, acc.data(), (int)m);
                omp_set_num_threads(threads);
            } else std::fill(acc.begin(), acc.end(), 0.0f);
            for (uint64_t j = 0; j < n; j++)
                for (uint64_t i = 0; i < m; i++) {
                    float v = a * acc[j * m + i];
                    if (b != 0.0f) v += b * emu_lt_load(pc, j * lc.ld + i, lc.type);
                    if (has_bias) v += emu_lt_load(dd.bias, i, bias_type);
                    if (aux) emu_lt_store(dd.aux, (size_t)bt * 0 + j * dd.aux_ld + i, ld.type, v);
                    if (gelu) v = emu_lt_gelu(v);
                    if (dgelu) v *= emu_lt_gelu_grad(emu_lt_load(dd.aux, j * dd.aux_ld + i, ld.type));
                    emu_lt_store(pd, j * ld.ld + i, ld.type, v);
                }
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}
