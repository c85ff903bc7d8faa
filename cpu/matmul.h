// cpu/matmul.h: the CPU trainer's linear layers, out = inp . wᵀ + bias and its backward, on the
// path that the run's precision and the CPU choose. Shapes: inp (N,C), w (OC,C) as in PyTorch's
// Linear, bias (OC) or NULL, out (N,OC).
//
// Contract
//   - cpu_matmul_setup(mm, cfg, B, T, dtype, rank, &work) picks the path once per run and
//     allocates what it needs, adding the bytes to *work (cpu/workspace.h predicts the same:
//     cpu_bf16_staging_elems, cpu_bf16_matmul_scratch_bytes, cpu_f32_matmul_scratch_bytes);
//     rank 0 prints a bf16 run's path. cpu_matmul_free frees it.
//   - Paths. fp32 and fp16 runs multiply in fp32 (fp16 values widen exactly): gemm_f32
//     (gemm_bf16.h's driver with an FMA kernel) where the CPU has AVX-512, else OpenBLAS sgemm;
//     ZEROC_F32_MATMUL=sgemm chooses OpenBLAS anywhere (the tests compare the two). bf16 runs
//     pass w16, the weight's bf16 copy, and multiply bf16 x bf16 -> fp32: the activation
//     operands are rounded to bf16 into the staging area on the way (the activations' 16-bit
//     storage holds the same values), the products are exact and accumulate in fp32. That is
//     gemm_bf16.h on AMX tiles or AVX512-BF16 where the CPU has them; elsewhere (its scalar path
//     is ~6x slower than sgemm) the same products through sgemm: the rounded operands as fp32 in
//     the same staging bytes (in row blocks where they do not fit at once) against the fp32 view
//     of the weights. ZEROC_BF16_MATMUL=sgemm chooses that fallback anywhere.
//   - Everything a call needs beyond its fp32 operands is passed to it, none of it looked up:
//       inp16     inp's bf16 values where the run stores them already (read instead of rounding
//                 inp again), else NULL
//       out16     (forward) non-NULL: only out's bf16 values are wanted, written there, and out
//                 not at all (the forward returns 1 when it did so: the gemm_bf16 path; else 0,
//                 and it wrote out)
//       dout16    (backward) dout rounded to bf16 already, else NULL; at the start of the
//                 staging (where the loss leaves the LM head's) or outside it. Read only without
//                 a bias: with one, dout is rounded again as its column sums are taken.
//       dw        (backward) the weight gradient, a MatmulGrad (below)
//     The staging is the matmuls': every call may overwrite it.
//   - Errors: a call gemm_bf16 refuses, or one whose packing scratch the workspace does not hold
//     (gemm_bf16 would allocate memory the accounting does not see), is a bug: one line, exit 1.
// CPU trainer only (C11, OpenMP, OpenBLAS); no global state.
#ifndef CPU_MATMUL_H
#define CPU_MATMUL_H

#include <cblas.h>
#include "core/gpt2.h"
#include "cpu/gemm_bf16.h"
#include "cpu/memory.h"
#include "cpu/workspace.h"

// The run's matmul path and working memory.
typedef struct {
    bf16_t *staging;  // bf16 runs: the rounded operands ((B,T) rows of the widest pair a matmul rounds)
    size_t staging_elems;
    int via_sgemm;    // bf16 runs: the products through sgemm on rounded operands (no AMX/AVX512-BF16)
    int f32_gemm;     // fp32 and fp16 runs: the products on gemm_f32 (AVX-512); else OpenBLAS sgemm
    GemmBf16Ctx gemm; // gemm_bf16's (and gemm_f32's) path and packing scratch, owned here
} CpuMatmul;

// The weight gradient dw (OC,C) a backward adds its products to.
// fresh: dw holds nothing yet (a unit's gradient on the first micro-step of an optimizer step:
// zero.h does not zero it, zero_grads_fresh), so the products store their sums (beta 0) instead
// of adding them to a zeroed buffer: that saves zeroing the gradient and reading it back.
// g16 (bf16 runs on gemm_bf16, else NULL): dw's final 16-bit gradient. Each weight's product is
// then rounded straight into it (gemm_bf16_acc16), bit for bit what accumulating it in fp32 and
// rounding that into g16 gives (one product per weight per micro-step), without writing, zeroing
// and re-reading 4 bytes of fp32 per weight. f32 is then written only in rows that
// rows (with g16, else NULL) flags, one flag per row of dw: those keep their fp32 sums in f32
// (gemm_bf16_acc16_split): the tied embedding's rows of the batch's tokens, to which the token
// lookup's gradient adds at the end of the backward; they are rounded in when the unit is done.
typedef struct {
    float *f32;
    int fresh;
    bf16_t *g16;
    const uint8_t *rows;
} MatmulGrad;

static void cpu_matmul_setup(CpuMatmul *mm, const GPT2Config *cfg, int B, int T, int dtype, int rank, size_t *work) {
    memset(mm, 0, sizeof *mm);
    size_t scratch;
    if (dtype == ZC_BF16) {
        mm->staging_elems = cpu_bf16_staging_elems(cfg, B, T);
        mm->staging = (bf16_t *)xcalloc_bytes(mm->staging_elems * sizeof(bf16_t));
        *work += mm->staging_elems * sizeof(bf16_t);
        scratch = cpu_bf16_matmul_scratch_bytes(cfg, B, T, omp_get_max_threads());
        const char *via = getenv("ZEROC_BF16_MATMUL");
        int asked = via && !strcmp(via, "sgemm");
        mm->via_sgemm = asked || gemm_bf16_best_path() == GEMM_BF16_SCALAR;
        if (rank == 0)
            printf("bf16 matmuls: %s\n", !mm->via_sgemm ? (gemm_bf16_best_path() == GEMM_BF16_AMX ? "gemm_bf16 on AMX tiles"
                                                                                                   : "gemm_bf16 on AVX512-BF16")
                                         : asked ? "sgemm on bf16-rounded operands (ZEROC_BF16_MATMUL=sgemm)"
                                                 : "sgemm on bf16-rounded operands (no AMX or AVX512-BF16 here)");
    } else {
        scratch = cpu_f32_matmul_scratch_bytes(cfg, B, T, omp_get_max_threads());
        const char *via = getenv("ZEROC_F32_MATMUL");
        mm->f32_gemm = gemm_f32_supported() && !(via && !strcmp(via, "sgemm"));
    }
    mm->gemm = (GemmBf16Ctx){GEMM_BF16_AUTO, xcalloc_bytes(scratch), scratch};
    *work += scratch;
}
static void cpu_matmul_free(CpuMatmul *mm) {
    free(mm->staging);
    free(mm->gemm.scratch);
}

static void die_gemm(void) { fprintf(stderr, "error: gemm_bf16 refused its arguments\n"); exit(1); }
// The workspace's scratch must serve every call: one it would not serve is a bug in
// cpu_bf16_matmul_scratch_bytes (or cpu_f32_matmul_scratch_bytes).
static void check_gemm_scratch(const CpuMatmul *mm, size_t need) {
    if (need <= mm->gemm.scratch_bytes) return;
    fprintf(stderr, "error: a matmul needs %zu bytes of scratch, the workspace holds %zu\n", need, mm->gemm.scratch_bytes);
    exit(1);
}

// dst = src rounded to bf16 and widened again: bf16 values in fp32 form (n)
static void round_to_bf16(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd
    for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(f32_to_bf16(src[i]));
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

// out (N,OC) = inp (N,C) . wᵀ + bias (each sum starts from its bias); w16: w in bf16, or NULL.
// With out16 on the gemm_bf16 path, out16 (N,OC) = that rounded to bf16 instead (returns 1).
static int cpu_matmul_forward(CpuMatmul *mm, float *out, bf16_t *out16, const float *inp, const bf16_t *inp16, const float *w,
                              const bf16_t *w16, const float *bias, int N, int C, int OC) {
    if (w16 && !mm->via_sgemm) {
        if (!inp16) f32_to_bf16_array(mm->staging, inp, (size_t)N * C), inp16 = mm->staging;
        check_gemm_scratch(mm, gemm_bf16_scratch_bytes_t(0, 1, N, OC, C));
        if (out16) { // (its bf16 values only, as each block is stored)
            if (gemm_bf16_forward_round(&mm->gemm, out, out16, 0, inp16, w16, bias, N, C, OC)) die_gemm();
            return 1;
        }
        if (bias ? gemm_bf16_forward_bias(&mm->gemm, out, inp16, w16, bias, N, C, OC)
                 : gemm_bf16_forward(&mm->gemm, out, inp16, w16, N, C, OC, 0.0f))
            die_gemm();
        return 0;
    }
    if (!w16 && mm->f32_gemm) {
        check_gemm_scratch(mm, gemm_f32_scratch_bytes(0, 1, N, OC, C));
        if (bias ? gemm_f32_forward_bias(&mm->gemm, out, inp, w, bias, N, C, OC) : gemm_f32_forward(&mm->gemm, out, inp, w, N, C, OC, 0.0f))
            die_gemm();
        return 0;
    }
    if (bias) { // start from the bias, and let the product add to it
#pragma omp parallel for
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    }
    if (w16) { // (N*C floats always fit: the staging holds N*5C bf16)
        round_to_bf16((float *)mm->staging, inp, (size_t)N * C);
        inp = (const float *)mm->staging;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, bias ? 1.0f : 0.0f, out, OC);
    return 0;
}

// dinp (N,C) = dout (N,OC) . w;  dw (OC,C) += doutᵀ . inp (= where dw.fresh; into dw.g16 where
// given);  dbias (OC) += the column sums of dout, where non-NULL
static void cpu_matmul_backward(CpuMatmul *mm, float *dinp, MatmulGrad dw, float *dbias, const float *dout, const bf16_t *dout16,
                                const float *inp, const bf16_t *inp16, const float *w, const bf16_t *w16, int N, int C, int OC) {
    const float beta = dw.fresh ? 0.0f : 1.0f;
    if (w16 && !mm->via_sgemm) {
        const bf16_t *d16 = dout16;
        if (dbias) round_bf16_sum_columns(mm->staging, dbias, dout, N, OC), d16 = mm->staging;
        else if (!d16) f32_to_bf16_array(mm->staging, dout, (size_t)N * OC), d16 = mm->staging;
        if (!inp16) f32_to_bf16_array(mm->staging + (size_t)N * OC, inp, (size_t)N * C), inp16 = mm->staging + (size_t)N * OC;
        check_gemm_scratch(mm, gemm_bf16_scratch_bytes_t(0, 0, N, C, OC));
        if (gemm_bf16_backward_data(&mm->gemm, dinp, d16, w16, N, C, OC, 0.0f)) die_gemm();
        check_gemm_scratch(mm, dw.g16 ? gemm_bf16_acc16_scratch_bytes(OC, C, N) : gemm_bf16_scratch_bytes(OC, C, N));
        if (dw.g16 && dw.rows) { // the LM head: the batch's rows stay in fp32
            if (gemm_bf16_backward_weight_split(&mm->gemm, dw.g16, dw.rows, dw.f32, d16, inp16, N, C, OC, beta)) die_gemm();
        } else if (dw.g16) {
            if (gemm_bf16_backward_weight_acc16(&mm->gemm, dw.g16, d16, inp16, N, C, OC, beta)) die_gemm();
        } else if (gemm_bf16_backward_weight(&mm->gemm, dw.f32, d16, inp16, N, C, OC, beta)) die_gemm();
        return; // (the column sums were added while dout was rounded)
    }
    if (w16) { // rows of dout and inp rounded, as many as fit in the staging's bytes as fp32
        int rows = (int)(mm->staging_elems / 2 / ((size_t)OC + C));
        for (int r0 = 0; r0 < N; r0 += rows) {
            int r = N - r0 < rows ? N - r0 : rows;
            float *d32 = (float *)mm->staging, *i32 = d32 + (size_t)r * OC;
            round_to_bf16(d32, dout + (size_t)r0 * OC, (size_t)r * OC);
            round_to_bf16(i32, inp + (size_t)r0 * C, (size_t)r * C);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r, C, OC, 1.0f, d32, OC, w, C, 0.0f, dinp + (size_t)r0 * C, C);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, r, 1.0f, d32, OC, i32, C, r0 ? 1.0f : beta, dw.f32, C);
        }
    } else if (mm->f32_gemm) {
        check_gemm_scratch(mm, gemm_f32_scratch_bytes(0, 0, N, C, OC));
        check_gemm_scratch(mm, gemm_f32_scratch_bytes(1, 0, OC, C, N));
        if (gemm_f32_backward_data(&mm->gemm, dinp, dout, w, N, C, OC, 0.0f) ||
            gemm_f32_backward_weight(&mm->gemm, dw.f32, dout, inp, N, C, OC, beta))
            die_gemm();
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, beta, dw.f32, C);
    }
    if (dbias) round_bf16_sum_columns(NULL, dbias, dout, N, OC);
}

#endif // CPU_MATMUL_H
