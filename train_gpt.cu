// train_gpt.cu: GPT-2 training on NVIDIA GPUs: CUDA kernels, cuBLASLt matmuls, NCCL
// collectives, ZeRO stages 0-3. The GPU twin of train_gpt_cpu.c, which stays the oracle:
// every kernel below has a CPU twin there and must agree with it.
//
// Sections: utilities; kernels (each with its shapes, launch geometry and a review note on
// bounds, occupancy and synchronisation, because the machine this was written on has no GPU);
// cuBLASLt matmuls; the NCCL backend that zero.h drives (host copies included); the model's
// storage and what model.h's shared passes need; the shared run (trainer.h); main.
//
// What is shared, not copied: options and DeepSpeed config (config.h, ds_config.h), the
// dataloader, checkpoints (checkpoint.h), the ZeRO partitioning, schedule and accounting
// (zero.h), AdamW's element update and the LR schedules (optimizer.h, adamw_element runs in
// the update kernel as written there), the planner, the log format and the loop (trainer.h).
//
// Precision: fixed when compiled (as llm.c's), `make train_gpt` bf16, `PRECISION=FP16` or
// `PRECISION=FP32` the others; the binary runs that one only (config.h). Parameters, gradients,
// ZeRO's buffers and collectives and the activations are floatX (below); LayerNorm statistics,
// the losses, the master weights and Adam's moments are fp32. Kernels load floatX, compute in
// fp32 and round once on the store; a kernel that adds into a parameter gradient sums its whole
// contribution in fp32 and rounds into the gradient once. Matmuls: cuBLASLt with floatX inputs
// and outputs and fp32 accumulation (CUBLAS_COMPUTE_32F; fp32 builds get no TF32). fp16 runs
// scale the loss (trainer.h); an overflow shows as a non-finite gradient norm, which the norm
// kernel lets through. The semantics are the CPU trainer's, with these differences (all within
// 16-bit rounding): every activation is rounded as it is produced (the CPU rounds a layer when
// it stores it), so the attention scores, the final LayerNorm's output, the logits and the
// embeddings' output are floatX before the fp32 kernels read them, the backward's activation
// gradients are floatX, and a parameter gradient is rounded after each kernel that adds to it
// rather than once per unit and micro-step.
// Streams: every kernel runs on one compute stream; every collective on one communication
// stream, ordered against compute with events (see the backend); cpu_checkpointing's copies of
// the checkpoints to and from the host on a third, ordered likewise (the storage hooks). The host waits for the
// device only where it needs a number (loss, norm, a logits row, checkpoint staging) and at
// the end of each step, always through gpu_sync(), which is also the watchdog.
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>
#include <omp.h>
// MPI's C API only: its deprecated C++ bindings do not compile warning-free
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <cublasLt.h>
#include <nccl.h>

#include "gpu/floatx.cuh" // floatX: this build's element type, before core/gpt2.h

#include "core/gpt2.h"
#include "run/config.h"
#include "core/optimizer.h"
#include "zero.h"
#include "run/planner.h"
#include "dataloader.h"
#include "data/tokenizer.h"
#include "run/ds_config.h"
#include "run/checkpoint.h"
#include "gpu/layout.h"

static_assert(sizeof(floatX) == (FLOATX_DTYPE == ZC_F32 ? 4 : 2), "floatX is not the size of zero.h's dtype");
#include "gpu/common.cuh"
#include "gpu/profile.cuh"
#include "gpu/kernels.cuh"
#include "gpu/flash_attention.cuh"
#if defined(GPU_ATTENTION_FLASH2)
#include "gpu/flash2.cuh"
#endif
#include "gpu/matmul.cuh"

static void layernorm_forward(GpuKernels *kc, floatX *out, float *mean, float *rstd, const floatX *inp, const floatX *w, const floatX *b,
                              int N, int C) {
    KSpan span(kc->gpu->prof, "layernorm_forward", 0.0, (2.0 * N * C + 2.0 * C) * sizeof(floatX) + 8.0 * N);
    int vec = C % VEC == 0 && vec_ok(out) && vec_ok(inp) && vec_ok(w) && vec_ok(b);
    void (*layernorm_forward_k)(floatX *, float *, float *, const floatX *, const floatX *, const floatX *, int, int) =
        vec ? layernorm_forward_kernel<VEC> : layernorm_forward_kernel<1>;
    layernorm_forward_k<<<ceil_div(N, 8), 256, 0, kc->gpu->compute>>>(out, mean, rstd, inp, w, b, N, C);
    LAUNCH_CHECK();
}
static void layernorm_backward(GpuKernels *kc, floatX *dinp, floatX *dw, floatX *db, const floatX *dout, const floatX *inp,
                               const floatX *w, const float *mean, const float *rstd, int N, int C) {
    // reads dout, inp, dinp and the statistics; writes dinp, dw, db
    KSpan span(kc->gpu->prof, "layernorm_backward", 0.0, (4.0 * N * C + 5.0 * C) * sizeof(floatX) + 8.0 * N);
    column_grads(kc, dinp, dw, db, dout, inp, w, mean, rstd, N, C); // the input gradient in the same pass (gpu/matmul.cuh)
}

// Causal self-attention over one layer. qkv (B,T,3C): q, k, v side by side, each NH heads of
// hs channels; out (B,T,C); att (B,NH,T,T) the probabilities (upper triangle zero). The head
// matrices are read where they lie in qkv (leading dimension 3C): no permute copies. One
// strided-batched matmul covers all (b, h) pairs along one axis: the axis with more entries
// is the batch, the other a host loop, because a strided batch has a single stride.
typedef struct { int outer, batch; long long sq, satt, sy; size_t oq, oatt, oy; } HeadLoop;
static HeadLoop head_loop(int B, int T, int C, int NH) {
    int hs = C / NH;
    HeadLoop h;
    if (B <= NH) { // loop over b, batch over h
        h.outer = B; h.batch = NH; h.sq = hs; h.satt = (long long)T * T; h.sy = hs;
        h.oq = (size_t)T * 3 * C; h.oatt = (size_t)NH * T * T; h.oy = (size_t)T * C;
    } else {       // loop over h, batch over b
        h.outer = NH; h.batch = B; h.sq = (long long)T * 3 * C; h.satt = (long long)NH * T * T; h.sy = (long long)T * C;
        h.oq = hs; h.oatt = (size_t)T * T; h.oy = hs;
    }
    return h;
}
// Whether this build and this head size run the flash kernels (gpt2.h decides, for the
// activations' layout too); then att holds the log-sum-exp rows, (B,NH,T) fp32.
static int flash_attention(int C, int NH) { return gpu_flash_attention(C, NH, sizeof(floatX)); }
// ATTENTION=flash2 builds: whether gpu/flash2.cuh's kernels take this head size (64 or 128; the
// flash kernels above keep the others up to 64, with the same log-sum-exp rows in att).
static int flash2_attention(int C, int NH) {
#if defined(GPU_ATTENTION_FLASH2) && !defined(GPU_PRECISION_FP32)
    return flash_attention(C, NH) && f2_head_size(C / NH);
#else
    (void)C; (void)NH;
    return 0;
#endif
}
// F2_DS_STORE builds: the floats of kernel scratch (after D's B*NH*T, rounded to 16 bytes) that the
// flash2 backward's dS^T tiles take (gpu/flash2.cuh); 0 in other builds and head sizes.
static size_t flash2_ds_floats(int B, int T, int C, int NH) {
#if defined(GPU_ATTENTION_FLASH2) && !defined(GPU_PRECISION_FP32)
    if (flash2_attention(C, NH)) return (f2_ds_elems(B, NH, T) * sizeof(floatX) + 15) / 16 * 4;
#else
    (void)B; (void)T; (void)C; (void)NH;
#endif
    return 0;
}
static size_t round4(size_t n) { return (n + 3) / 4 * 4; }
// The attention's FLOPs as FlashAttention counts them: two (T,T,hs) products per head forward,
// five backward, half of each under the causal mask.
static double attention_flops(int B, int T, int C, int NH, int products) {
    return products * 2.0 * B * NH * (double)T * T * (C / NH) / 2.0;
}
static void attention_forward(GpuKernels *kc, floatX *out, floatX *att, const floatX *qkv, int B, int T, int C, int NH) {
    KSpan span(kc->gpu->prof, "attention_forward", attention_flops(B, T, C, NH, 2),
               4.0 * B * T * C * sizeof(floatX) + 4.0 * B * NH * T);
#if !defined(GPU_PRECISION_FP32)
#if defined(GPU_ATTENTION_FLASH2)
    if (flash2_attention(C, NH)) {
        flash2_forward(out, (float *)(void *)att, qkv, B, T, C, NH, kc->gpu->compute);
        return;
    }
#endif
    if (flash_attention(C, NH)) {
        flash_forward_kernel<<<dim3(B * NH, ceil_div(T, FA_ROWS)), FA_THREADS, 0, kc->gpu->compute>>>(out, (float *)(void *)att, qkv, T, C, NH);
        LAUNCH_CHECK();
        return;
    }
#endif
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    HeadLoop h = head_loop(B, T, C, NH);
    for (int o = 0; o < h.outer; o++) { // S = scale * Q K^T   (T,T) per head
        const floatX *q = qkv + o * h.oq;
        matmul_lt(kc, att + o * h.oatt, q, q + C, NULL, T, T, hs, 0, 1, C3, C3, T, scale, 0.0f, h.batch, h.sq, h.sq, h.satt);
    }
    int rows = B * NH * T;
    softmax_causal_kernel<<<ceil_div(rows, 8), 256, 0, kc->gpu->compute>>>(att, rows, T);
    LAUNCH_CHECK();
    for (int o = 0; o < h.outer; o++) { // Y = P V   (T,hs) per head, written into out (B,T,C)
        const floatX *q = qkv + o * h.oq;
        matmul_lt(kc, out + o * h.oy, att + o * h.oatt, q + 2 * C, NULL, T, hs, T, 0, 0, T, C3, C, 1.0f, 0.0f, h.batch,
                  h.satt, h.sq, h.sy);
    }
}
// dqkv (B,T,3C), OVERWRITTEN, from dout (B,T,C), qkv, the output y (B,T,C) and att, whose
// probabilities are replaced by the scores' gradient on the way (att is not needed again).
static void attention_backward(GpuKernels *kc, floatX *dqkv, floatX *att, const floatX *dout, const floatX *qkv, const floatX *y,
                               int B, int T, int C, int NH) {
    // reads qkv, dout, y and the log-sum-exp rows; writes dqkv
    KSpan span(kc->gpu->prof, "attention_backward", attention_flops(B, T, C, NH, 5),
               8.0 * B * T * C * sizeof(floatX) + 4.0 * B * NH * T + 8.0 * flash2_ds_floats(B, T, C, NH));
#if !defined(GPU_PRECISION_FP32)
    if (flash_attention(C, NH)) {
        // D = rowsum(dY * Y) per (b, h, t), once, into the kernels' scratch (B*NH*T floats: gpt2_build
        // sized it), read by both backward kernels, flash2's or the WMMA flash kernels'
        size_t rows = (size_t)B * NH * T;
        if (round4(rows) + flash2_ds_floats(B, T, C, NH) > kc->scratch_floats)
            gpu_fatal("attention_backward", "the scratch is smaller than B*NH*T floats (and the dS^T tiles)", __FILE__, __LINE__);
        float *D = kc->scratch;
        flash_backward_preprocess_kernel<<<grid_for(kc->gpu, rows, 256), 256, 0, kc->gpu->compute>>>(D, dout, y, B, T, C, NH);
        LAUNCH_CHECK();
        const float *lse = (const float *)(const void *)att;
#if defined(GPU_ATTENTION_FLASH2)
        if (flash2_attention(C, NH)) {
            flash2_backward(dqkv, lse, D, dout, qkv, (floatX *)(void *)(kc->scratch + round4(rows)), B, T, C, NH, kc->gpu->compute);
            return;
        }
#endif
        dim3 grid(B * NH, ceil_div(T, FA_ROWS));
        flash_backward_dq_kernel<<<grid, FA_THREADS, 0, kc->gpu->compute>>>(dqkv, lse, D, dout, qkv, T, C, NH);
        LAUNCH_CHECK();
        flash_backward_dkv_kernel<<<grid, FA_THREADS, 0, kc->gpu->compute>>>(dqkv, lse, D, dout, qkv, T, C, NH);
        LAUNCH_CHECK();
        return;
    }
#endif
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    HeadLoop h = head_loop(B, T, C, NH);
    for (int o = 0; o < h.outer; o++) // dV = P^T dY
        matmul_lt(kc, dqkv + o * h.oq + 2 * C, att + o * h.oatt, dout + o * h.oy, NULL, T, hs, T, 1, 0, T, C, C3, 1.0f, 0.0f,
                  h.batch, h.satt, h.sy, h.sq);
    int rows = B * NH * T;
    attention_softmax_backward_kernel<<<ceil_div(rows, 8), 256, 0, kc->gpu->compute>>>(att, dout, y, qkv, B, T, C, NH, scale);
    LAUNCH_CHECK();
    for (int o = 0; o < h.outer; o++) {
        const floatX *q = qkv + o * h.oq;
        floatX *dq = dqkv + o * h.oq;
        // dQ = dS K,  dK = dS^T Q  (dS carries the scale)
        matmul_lt(kc, dq, att + o * h.oatt, q + C, NULL, T, hs, T, 0, 0, T, C3, C3, 1.0f, 0.0f, h.batch, h.satt, h.sq, h.sq);
        matmul_lt(kc, dq + C, att + o * h.oatt, q, NULL, T, hs, T, 1, 0, T, C3, C3, 1.0f, 0.0f, h.batch, h.satt, h.sq, h.sq);
    }
}

// The elementwise kernels take 16-byte packs where every pointer allows (gpu/kernels.cuh); the grid
// covers the packs (at least one block, for a tail alone).
static void residual_forward(GpuKernels *kc, floatX *out, const floatX *a, const floatX *b, size_t n) {
    KSpan span(kc->gpu->prof, "residual_forward", 0.0, 3.0 * n * sizeof(floatX));
    int vec = vec_ok(out) && vec_ok(a) && vec_ok(b);
    void (*residual_forward_k)(floatX *, const floatX *, const floatX *, size_t) =
        vec ? residual_forward_kernel<VEC> : residual_forward_kernel<1>;
    residual_forward_k<<<grid_for(kc->gpu, vec ? n / VEC : n, 256), 256, 0, kc->gpu->compute>>>(out, a, b, n);
    LAUNCH_CHECK();
}
#if defined(GPU_FUSED_RESIDUAL_LN)
// core/model.h's fused hook (GPT2_FUSED_RESIDUAL_LN; both residual adds of a layer, each with the
// LayerNorm of its sum: ln2, the next layer's ln1 or lnf): res = a + b, out = layernorm(res), in one
// kernel where gpu/kernels.cuh's residual_layernorm_forward_kernel takes the shape (16-byte packs,
// C <= RLN_PACKS * WARP * VEC; 4 packs a lane up to 1,024 channels in 16 bits, fewer registers);
// else the two kernels. The same bits either way.
#define GPT2_FUSED_RESIDUAL_LN
static void residual_layernorm_forward(GpuKernels *kc, floatX *res, floatX *out, float *mean, float *rstd,
                                       const floatX *a, const floatX *b, const floatX *w, const floatX *bias, int N,
                                       int C) {
    if (C % VEC != 0 || C > RLN_PACKS * WARP * VEC || !vec_ok(res) || !vec_ok(out) || !vec_ok(a) || !vec_ok(b) ||
        !vec_ok(w) || !vec_ok(bias)) {
        residual_forward(kc, res, a, b, (size_t)N * C);
        layernorm_forward(kc, out, mean, rstd, res, w, bias, N, C);
        return;
    }
    KSpan span(kc->gpu->prof, "residual_layernorm_forward", 0.0,
               (4.0 * N * C + 2.0 * C) * sizeof(floatX) + 8.0 * N);
    void (*rln_k)(floatX *, floatX *, float *, float *, const floatX *, const floatX *, const floatX *, const floatX *,
                  int, int) =
        C <= 4 * WARP * VEC ? residual_layernorm_forward_kernel<4> : residual_layernorm_forward_kernel<RLN_PACKS>;
    rln_k<<<ceil_div(N, 8), 256, 0, kc->gpu->compute>>>(res, out, mean, rstd, a, b, w, bias, N, C);
    LAUNCH_CHECK();
}
#endif
static void gelu_forward(GpuKernels *kc, floatX *out, const floatX *inp, size_t n) {
    KSpan span(kc->gpu->prof, "gelu_forward", 0.0, 2.0 * n * sizeof(floatX));
    int vec = vec_ok(out) && vec_ok(inp);
    void (*gelu_forward_k)(floatX *, const floatX *, size_t) =
        vec ? gelu_forward_kernel<VEC> : gelu_forward_kernel<1>;
    gelu_forward_k<<<grid_for(kc->gpu, vec ? n / VEC : n, 256), 256, 0, kc->gpu->compute>>>(out, inp, n);
    LAUNCH_CHECK();
}
static void gelu_backward(GpuKernels *kc, floatX *dinp, const floatX *inp, const floatX *dout, size_t n) {
    KSpan span(kc->gpu->prof, "gelu_backward", 0.0, 3.0 * n * sizeof(floatX));
    int vec = vec_ok(dinp) && vec_ok(inp) && vec_ok(dout);
    void (*gelu_backward_k)(floatX *, const floatX *, const floatX *, size_t) =
        vec ? gelu_backward_kernel<VEC> : gelu_backward_kernel<1>;
    gelu_backward_k<<<grid_for(kc->gpu, vec ? n / VEC : n, 256), 256, 0, kc->gpu->compute>>>(dinp, inp, dout, n);
    LAUNCH_CHECK();
}
// matmul_backward, then dinp = gelu'(pre) * dinp (N*C): fused into the dinp product by cuBLASLt's
// DGELU epilogue where it has one (gpu/matmul.cuh), else the two apart.
static void matmul_backward_gelu(GpuKernels *kc, floatX *dinp, floatX *dw, floatX *dbias, const floatX *dout, const floatX *inp,
                                 const floatX *w, const void *w16, const floatX *pre, int N, int C, int OC) {
    (void)w16;
    if (!matmul_backward_pre(kc, dinp, dw, dbias, dout, inp, w, pre, N, C, OC)) gelu_backward(kc, dinp, pre, dinp, (size_t)N * C);
}

#include "gpu/nccl_backend.cuh"

// ----------------------------------------------------------------------------------------
// The model. Parameters, gradients and optimizer state live where zero.h put them (device
// memory, through the backend); the forward and backward ask it unit by unit.

#define STEP_LOSSES 64 // micro-steps' mean losses held on the device (classifier_loss); more are read early, in order
typedef struct {
    GPT2Config cfg;
    Zero z;
    GPT2Recompute recompute;       // what the forward keeps, what the backward recomputes (gpt2.h)
    Activations acts;              // device: floatX, the statistics and losses fp32 (gpu/layout.h)
    void *acts_memory;
    // cpu_checkpointing: full recompute's checkpoints (all but the last two) in pinned host memory,
    // copied on their own stream, ordered against the compute stream with events
    floatX *h_checkpoints;
    cudaStream_t ck_stream;
    cudaEvent_t ck_mark, ck_saved[2], ck_ready[2]; // ck_*[c % 2]: checkpoint c is on the host / back
    size_t bytes_activations;
    size_t bytes_scratch;          // device memory outside the plan: cuBLASLt workspace, norm partials, tokens, kernel scratch
    int B, T;
    int *inputs, *targets;         // host, what the dataloader fills (upload_batch stages them)
    int *d_inputs, *d_targets;     // device copies
    const int *dev_inputs, *dev_targets; // what model.h's kernels read: the device copies
    float *h_row;                  // pinned: one logits row (Vp) widened to fp32
    double *d_step_losses, *h_step_losses; // device / pinned: micro-steps' mean losses (STEP_LOSSES + 1)
    int losses_pending;            // on the device, not yet read (classifier_loss)
    double loss_carry;             // read early: the step had more micro-steps than STEP_LOSSES
    floatX *h_row_x;               // pinned: that row as the device holds it
    int *h_upload[2], *d_groups;   // pinned, two in turn: a batch's inputs, targets and token groups (5*B*T + 1) / device: the groups
    int *token_group, *group_fill; // host: a token's group while grouping (-1 otherwise, Vp); fill cursors (B*T)
    cudaEvent_t upload_sent[2];    // the last upload from h_upload[i] has been read
    int upload_slot;               // the h_upload the next batch goes through
    double *d_partials, *d_sumsq, *h_sumsq;
    GpuKernels kern;               // the kernels' context: device, matmul plans, backend, token groups
    MatmulPlans plans;             // cuBLASLt's descriptors and algorithms, per matmul shape
} GPT2;

// dtype: the element type of parameters, gradients and ZeRO's buffers: floatX's. config.h
// refuses every other precision for this binary; the check is the defence should one ever get
// this far (every kernel and hook below reads floatX).
static void gpt2_build(GPT2 *m, const GPT2Config *cfg, int B, int T, int rank, int world, const ZeroOptions *zo,
                       GPT2Recompute recompute, ZeroBackend be) {
    int dtype = zo->dtype;
    if (dtype != FLOATX_DTYPE) {
        fprintf(stderr, "error: rank %d: this GPU trainer was built for %s, not %s\n", rank, zc_dtype_names[FLOATX_DTYPE],
                dtype >= 0 && dtype < ZC_NUM_DTYPES ? zc_dtype_names[dtype] : "an unknown type");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(m, 0, sizeof(*m));
    m->cfg = *cfg;
    m->recompute = recompute;
    m->kern.comm = (NcclBackend *)be.ctx;
    m->kern.gpu = m->kern.comm->gpu;
    m->kern.plans = &m->plans;
    size_t free0 = 0, free1 = 0, total_dev = 0;
    CUDA_CHECK(cudaMemGetInfo(&free0, &total_dev));
    zero_init(&m->z, cfg, rank, world, zo, be);
    // The activations in floatX (the statistics and losses fp32), each tensor 256-byte aligned,
    // every layer's or what the recompute keeps and its scratch: gpu_activation_bytes
    // (gpu/layout.h), the planner's formula for this trainer, which also gives the offsets. No
    // workspace: the kernels read ZeRO's floatX buffers directly (MEM_WORKSPACE stays 0).
    size_t offset[NUM_ACTIVATIONS];
    m->bytes_activations = gpu_activation_bytes(cfg, B, T, sizeof(floatX), recompute, offset);
    CUDA_CHECK(cudaMalloc(&m->acts_memory, m->bytes_activations));
    CUDA_CHECK(cudaMemset(m->acts_memory, 0, m->bytes_activations));
    m->z.mem[MEM_ACTIVATIONS] = m->bytes_activations;
    gpt2_activations_wire_at(&m->acts, m->acts_memory, offset);
    size_t host_ck = gpu_host_checkpoint_bytes(cfg, B, T, sizeof(floatX), recompute);
    if (host_ck > 0) {
        CUDA_CHECK(cudaMallocHost(&m->h_checkpoints, host_ck));
        m->z.mem[MEM_HOST_ACTIVATIONS] = host_ck;
        CUDA_CHECK(cudaStreamCreateWithFlags(&m->ck_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&m->ck_mark, cudaEventDisableTiming));
        for (int i = 0; i < 2; i++) {
            CUDA_CHECK(cudaEventCreateWithFlags(&m->ck_saved[i], cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&m->ck_ready[i], cudaEventDisableTiming));
        }
    }
    m->B = B;
    m->T = T;
    size_t bt = (size_t)B * T, Vp = (size_t)cfg->padded_vocab_size;
    m->inputs = (int *)xmalloc(bt * sizeof(int)); // the dataloader's; upload_batch stages them
    m->targets = (int *)xmalloc(bt * sizeof(int));
    CUDA_CHECK(cudaMallocHost(&m->h_step_losses, (STEP_LOSSES + 1) * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&m->d_step_losses, (STEP_LOSSES + 1) * sizeof(double)));
    CUDA_CHECK(cudaMallocHost(&m->h_row, Vp * sizeof(float)));
    CUDA_CHECK(cudaMallocHost(&m->h_row_x, Vp * sizeof(floatX)));
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaMallocHost(&m->h_upload[i], (5 * bt + 1) * sizeof(int)));
        CUDA_CHECK(cudaEventCreateWithFlags(&m->upload_sent[i], cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaMallocHost(&m->h_sumsq, sizeof(double)));
    m->token_group = (int *)xmalloc(Vp * sizeof(int));
    for (size_t v = 0; v < Vp; v++) m->token_group[v] = -1;
    m->group_fill = (int *)xmalloc(bt * sizeof(int));
    CUDA_CHECK(cudaMalloc(&m->d_inputs, bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_targets, bt * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_groups, (3 * bt + 1) * sizeof(int)));
    CUDA_CHECK(cudaMalloc(&m->d_partials, (size_t)m->z.lay.num_units * NORM_BLOCKS * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&m->d_sumsq, sizeof(double)));
    // The kernels' scratch (GpuKernels.scratch): the column sums' partials, for the largest of
    // the LayerNorms' (2C columns) and the biases' (qkv 3C, fc 4C, the projections C), and the
    // flash attention backward's D (B*NH*T).
    int sm = m->kern.gpu->sm_count, C = cfg->channels;
    size_t kf = column_scratch_floats(sm, (int)bt, C, 1);
    int bias_cols[3] = {C, 3 * C, 4 * C};
    for (int i = 0; i < 3; i++) {
        size_t f = column_scratch_floats(sm, (int)bt, bias_cols[i], 0);
        if (f > kf) kf = f;
    }
    size_t attn = round4(bt * cfg->num_heads) + flash2_ds_floats(B, T, C, cfg->num_heads);
    if ((flash_attention(C, cfg->num_heads) || flash2_attention(C, cfg->num_heads)) && attn > kf)
        kf = attn; // D for the flash or flash2 backward (and F2_DS_STORE's dS^T tiles)
    CUDA_CHECK(cudaMalloc(&m->kern.scratch, kf * sizeof(float)));
    m->kern.scratch_floats = kf;
    m->bytes_scratch = m->kern.gpu->workspace_bytes + (5 * bt + 1) * sizeof(int) +
                       ((size_t)m->z.lay.num_units * NORM_BLOCKS + 1 + STEP_LOSSES + 1) * sizeof(double) + kf * sizeof(float);
    CUDA_CHECK(cudaMemGetInfo(&free1, &total_dev));
    // The memory log entries carry zero.h's counts and the activations, which are exactly the
    // bytes asked of cudaMalloc; the device's own view (allocation granularity included) and
    // what lies outside the plan are printed beside them.
    size_t states = 0, host = 0;
    for (int k = 0; k < MEM_KINDS; k++) {
        if (m->z.where[k] == LOC_HOST) host += m->z.mem[k];
        else if (k != MEM_ACTIVATIONS && k != MEM_WORKSPACE) states += m->z.mem[k];
    }
    host -= zero_twin_bytes(&m->z.st); // Twin-Flow: the part of the offloaded kinds kept on the device
    states += zero_twin_bytes(&m->z.st);
    if (rank == 0)
        printf("device memory, rank 0: model states + ZeRO buffers %.1f MiB (cudaMalloc'd %.1f MiB), activations %.1f MiB, "
               "outside the plan %.1f MiB (cuBLASLt workspace, norm partials, tokens, kernel scratch); device reports %.1f MiB more in use, "
               "%.1f MiB free; host memory for offloaded states and staging %.1f MiB (allocated %.1f MiB)\n",
               states / 1048576.0, ((NcclBackend *)be.ctx)->allocated / 1048576.0,
               m->bytes_activations / 1048576.0, m->bytes_scratch / 1048576.0, (double)(free0 - free1) / 1048576.0,
               free1 / 1048576.0, host / 1048576.0, ((NcclBackend *)be.ctx)->host_allocated / 1048576.0);
}

static void gpt2_free(GPT2 *m) {
    gpu_sync(m->kern.comm, "the last kernels");
    matmul_plans_free(&m->plans);
    zero_free(&m->z);
    CUDA_CHECK(cudaFree(m->acts_memory));
    CUDA_CHECK(cudaFree(m->d_inputs)); CUDA_CHECK(cudaFree(m->d_targets)); CUDA_CHECK(cudaFree(m->d_groups));
    CUDA_CHECK(cudaFree(m->d_partials)); CUDA_CHECK(cudaFree(m->d_sumsq)); CUDA_CHECK(cudaFree(m->d_step_losses));
    CUDA_CHECK(cudaFree(m->kern.scratch));
    free(m->inputs); free(m->targets);
    CUDA_CHECK(cudaFreeHost(m->h_step_losses)); CUDA_CHECK(cudaFreeHost(m->h_row)); CUDA_CHECK(cudaFreeHost(m->h_row_x));
    CUDA_CHECK(cudaFreeHost(m->h_sumsq));
    for (int i = 0; i < 2; i++) { CUDA_CHECK(cudaFreeHost(m->h_upload[i])); CUDA_CHECK(cudaEventDestroy(m->upload_sent[i])); }
    free(m->token_group); free(m->group_fill);
    if (m->h_checkpoints) {
        CUDA_CHECK(cudaFreeHost(m->h_checkpoints));
        CUDA_CHECK(cudaStreamDestroy(m->ck_stream));
        CUDA_CHECK(cudaEventDestroy(m->ck_mark));
        for (int i = 0; i < 2; i++) { CUDA_CHECK(cudaEventDestroy(m->ck_saved[i])); CUDA_CHECK(cudaEventDestroy(m->ck_ready[i])); }
    }
}

// --- what model.h needs beyond the kernel wrappers above -------------------------------

static void encoder_forward(GpuKernels *kc, floatX *out, const int *inp, const floatX *wte, const floatX *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    KSpan span(kc->gpu->prof, "encoder_forward", 0.0, (2.0 * n + (double)T * C) * sizeof(floatX) + 4.0 * B * T);
    int vec = C % VEC == 0 && vec_ok(out) && vec_ok(wte) && vec_ok(wpe);
    size_t packs = n / (vec ? VEC : 1);
    void (*encoder_forward_k)(floatX *, const int *, const floatX *, const floatX *, int, int, int) =
        vec ? encoder_forward_kernel<VEC> : encoder_forward_kernel<1>;
    encoder_forward_k<<<grid_for(kc->gpu, packs, 256), 256, 0, kc->gpu->compute>>>(out, inp, wte, wpe, B * T, T, C);
    LAUNCH_CHECK();
}
// inp is read through the token groups upload_batch built from the same batch (model.h runs the
// backward right after the forward over the same inputs).
static void encoder_backward(GpuKernels *kc, floatX *dwte, floatX *dwpe, const floatX *dout, const int *inp, int B, int T, int C) {
    (void)inp;
    // reads dout; dwte's rows of the batch's tokens and dwpe's T rows read and written
    KSpan span(kc->gpu->prof, "encoder_backward", 0.0,
               ((double)B * T * C + 2.0 * kc->groups.count * C + 2.0 * T * C) * sizeof(floatX) + 12.0 * B * T);
    if (kc->groups.count > 0) { // whole warps over the channels' packs, up to 8 row groups in 1024 threads
        int vec = C % VEC == 0 && vec_ok(dout) && vec_ok(dwte), V = vec ? VEC : 1;
        int tx = (int)ceil_div(ceil_div((size_t)C, V), WARP) * WARP;
        if (tx > 1024) tx = 1024;
        int rg = 1024 / tx < 8 ? 1024 / tx : 8; // (rg - 1) x tx x V <= 1024 V floats of shared memory
        void (*wte)(floatX *, const floatX *, const int *, const int *, const int *, int) =
            vec ? encoder_backward_wte_kernel<VEC> : encoder_backward_wte_kernel<1>;
        wte<<<kc->groups.count, dim3(tx, rg), 0, kc->gpu->compute>>>(dwte, dout, kc->groups.start, kc->groups.pos, kc->groups.tok, C);
        LAUNCH_CHECK();
    }
    encoder_backward_wpe_kernel<<<grid_for(kc->gpu, (size_t)T * C, 256), 256, 0, kc->gpu->compute>>>(dwpe, dout, B, T, C);
    LAUNCH_CHECK();
}
static void zero_fill(GpuKernels *kc, floatX *p, size_t n) {
    KSpan span(kc->gpu->prof, "zero_fill", 0.0, (double)n * sizeof(floatX));
    CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(floatX), kc->gpu->compute));
}

// The batch's positions grouped by token into groups: start (count+1), then pos (N), then tok
// (count), where group k is token tok[k] at positions pos[start[k]] .. pos[start[k+1]-1] in
// increasing order; groups in order of first appearance. Two passes over the batch, touching
// only the tokens present (token_group is left all -1 again). Returns the number of groups.
static int group_tokens(GPT2 *m, int *groups, const int *inputs, int N) {
    int *start = groups, *pos = start + N + 1, *tok = pos + N, count = 0;
    int Vp = m->cfg.padded_vocab_size;
    for (int n = 0; n < N; n++) {
        int t = inputs[n];
        if (t < 0 || t >= Vp) { // the dataloader and the sampler never produce one: a bug, not bad data
            fprintf(stderr, "error: rank %d: token %d at position %d is outside the vocabulary (%d rows)\n", m->z.rank, t,
                    n, Vp);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (m->token_group[t] < 0) { m->token_group[t] = count; tok[count] = t; start[count + 1] = 0; count++; }
        start[m->token_group[t] + 1]++;
    }
    start[0] = 0;
    for (int k = 0; k < count; k++) { start[k + 1] += start[k]; m->group_fill[k] = start[k]; }
    for (int n = 0; n < N; n++) pos[m->group_fill[m->token_group[inputs[n]]]++] = n;
    for (int k = 0; k < count; k++) m->token_group[tok[k]] = -1;
    return count;
}

// The batch goes to the device on the compute stream, ahead of the kernels that read it, with
// its token groups (for the embedding's backward), through one of two pinned buffers in turn:
// the host fills one while the device may still be reading the other (it runs a micro-step
// ahead, and waits only if the device has not yet started the upload two batches back).
static void upload_batch(GPT2 *m, const int *inputs, const int *targets, int N) {
    cudaStream_t stream = m->kern.gpu->compute;
    int slot = m->upload_slot;
    m->upload_slot ^= 1;
    wait_event_watchdog(m->kern.comm, m->upload_sent[slot], "the upload of the batch before last");
    int *h = m->h_upload[slot], *h_in = h, *h_tg = h + N, *groups = h + 2 * (size_t)N;
    // the whole buffer is written before the first copy from it is enqueued
    memcpy(h_in, inputs, (size_t)N * sizeof(int));
    if (targets) memcpy(h_tg, targets, (size_t)N * sizeof(int));
    int count = group_tokens(m, groups, inputs, N);
    CUDA_CHECK(cudaMemcpyAsync(m->d_inputs, h_in, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (targets) CUDA_CHECK(cudaMemcpyAsync(m->d_targets, h_tg, (size_t)N * sizeof(int), cudaMemcpyHostToDevice, stream));
    m->dev_inputs = m->d_inputs;
    m->dev_targets = m->d_targets;
    size_t ints = (size_t)2 * N + 1 + count;
    CUDA_CHECK(cudaMemcpyAsync(m->d_groups, groups, ints * sizeof(int), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaEventRecord(m->upload_sent[slot], stream));
    TokenGroups *g = &m->kern.groups; // for encoder_backward
    g->start = m->d_groups;
    g->pos = m->d_groups + N + 1;
    g->tok = m->d_groups + 2 * (size_t)N + 1;
    g->count = count;
}
// The fused classifier over the logits, and the mean loss (loss_mean_kernel: the same double sum
// in a fixed order, rounded to float as the CPU trainer's). A training micro-step's mean stays on
// the device, in d_step_losses, and returns 0: gpt2_pending_losses reads the step's all at once
// after its last micro-step (no host wait per micro-step). Validation (dloss 0) reads it at once.
static double gpt2_pending_losses(GPT2 *m) {
    double sum = m->loss_carry;
    if (m->losses_pending > 0) {
        d2h(m->kern.comm, m->h_step_losses, m->d_step_losses, (size_t)m->losses_pending * sizeof(double), "the step's losses");
        for (int i = 0; i < m->losses_pending; i++) sum += m->h_step_losses[i];
    }
    m->losses_pending = 0;
    m->loss_carry = 0.0;
    return sum;
}
static float classifier_loss(GPT2 *m, int N, float dloss) {
    const GPT2Config *c = &m->cfg;
    if (m->losses_pending == STEP_LOSSES) m->loss_carry = gpt2_pending_losses(m);
    double *mean = m->d_step_losses + (dloss != 0.0f ? m->losses_pending : STEP_LOSSES);
    {
        // reads the logits and writes their gradient in place; the losses
        KSpan span(m->kern.gpu->prof, "classifier (softmax, cross-entropy, loss)", 0.0,
                   2.0 * N * c->padded_vocab_size * sizeof(floatX) + 12.0 * N);
        crossentropy_softmax_kernel<<<N, CLS_THREADS, 0, m->kern.gpu->compute>>>(m->acts.logits, m->acts.losses, m->d_targets,
                                                                        c->vocab_size, c->padded_vocab_size, dloss);
        LAUNCH_CHECK();
        loss_mean_kernel<<<1, NORM_THREADS, 0, m->kern.gpu->compute>>>(mean, m->acts.losses, N);
        LAUNCH_CHECK();
    }
    if (dloss != 0.0f) {
        m->losses_pending++;
        return 0.0f;
    }
    d2h(m->kern.comm, m->h_step_losses + STEP_LOSSES, mean, sizeof(double), "the forward pass (loss)");
    return (float)m->h_step_losses[STEP_LOSSES];
}

// The storage hooks. The kernels compute on the storage type, floatX, so they pass zero.h's
// pointers straight through (the CPU trainer converts 16-bit storage here) and need no 16-bit
// copy beside them (x16 NULL); they round every output as they store it (gpt2_act_rounded has
// nothing to do). The activations stay where the forward or a recompute computed them, in the
// layout gpu/layout.h gives; with cpu_checkpointing the checkpoints also travel to the host and
// back (below).
static UnitParams gpt2_unit_params(GPT2 *m, int u, int next) {
    UnitParams up = {(floatX *)zero_params(&m->z, u, next), NULL};
    return up;
}
static floatX *gpt2_unit_grads(GPT2 *m, int u) { return (floatX *)zero_grads(&m->z, u); }
static void gpt2_unit_grads_done(GPT2 *m, int u) { zero_grads_done(&m->z, u); }
static LayerActs layer_acts(const GPT2 *m, int l, int B, int T) {
    int slot[NUM_ACTIVATIONS];
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        slot[i] = gpt2_activation_is_layered(i) ? gpu_activation_slot(&m->cfg, m->recompute, i, l) : 0;
    LayerActs x = gpt2_layer_acts_at(&m->acts, &m->cfg, B, T, slot,
                                     l > 0 ? gpu_activation_slot(&m->cfg, m->recompute, A_RESIDUAL3, l - 1) : -1);
    if (flash_attention(m->cfg.channels, m->cfg.num_heads)) // the layer's log-sum-exp rows, not its (T,T) probabilities
        x.att = (floatX *)(void *)((float *)(void *)m->acts.att + (size_t)slot[A_ATT] * B * m->cfg.num_heads * T);
    return x;
}
static void gpt2_act_rounded(GPT2 *m, const LayerActs *x, int l, int i, int B, int T) {
    (void)m; (void)x; (void)l; (void)i; (void)B; (void)T;
}
static floatX *gpt2_layers_output(GPT2 *m, int B, int T) { return layer_acts(m, m->cfg.num_layers - 1, B, T).residual3; }
static LayerActs gpt2_layer_acts_recompute(GPT2 *m, int l, int B, int T);
static void gpt2_layer_recomputed(GPT2 *m, int l, int B, int T) { (void)m; (void)l; (void)B; (void)T; }
static LayerActs gpt2_layer_acts_backward(GPT2 *m, int l, int B, int T) { return layer_acts(m, l, B, T); }

// cpu_checkpointing. Checkpoint c (segment c's output) is in device slot c % 2. The forward
// sends each of the first gpu_host_checkpoints(...) to the host on ck_stream as soon as the
// compute stream has produced it, and before segment c + 2 overwrites the slot the compute
// stream waits for that copy. The backward, starting segment c (whose output in slot c % 2
// segment c + 1's backward has finished reading), brings checkpoint c - 2 back into that slot
// for segment c - 1, and segment c's recompute waits for its own input, checkpoint c - 1, if it
// came from the host.
static int host_checkpoint(const GPT2 *m, int l) {
    GPT2Recompute r = m->recompute;
    return r.mode == RECOMPUTE_FULL && r.host && l / gpt2_recompute_every(r) < gpu_host_checkpoints(&m->cfg, r);
}
static LayerActs gpt2_layer_acts_forward(GPT2 *m, int l, int B, int T) {
    GPT2Recompute r = m->recompute;
    int c = l / gpt2_recompute_every(r);
    if (r.mode == RECOMPUTE_FULL && r.host && c >= 2 && gpt2_segment_end(r, m->cfg.num_layers, l))
        CUDA_CHECK(cudaStreamWaitEvent(m->kern.gpu->compute, m->ck_saved[c % 2], 0)); // checkpoint c - 2 has left
    return layer_acts(m, l, B, T);
}
static void gpt2_layer_store(GPT2 *m, int l, int B, int T) {
    if (!host_checkpoint(m, l) || !gpt2_segment_end(m->recompute, m->cfg.num_layers, l)) return;
    size_t btc = (size_t)B * T * m->cfg.channels, c = (size_t)(l / gpt2_recompute_every(m->recompute));
    CUDA_CHECK(cudaEventRecord(m->ck_mark, m->kern.gpu->compute));
    CUDA_CHECK(cudaStreamWaitEvent(m->ck_stream, m->ck_mark, 0));
    CUDA_CHECK(cudaMemcpyAsync(m->h_checkpoints + c * btc, layer_acts(m, l, B, T).residual3, btc * sizeof(floatX),
                               cudaMemcpyDeviceToHost, m->ck_stream));
    CUDA_CHECK(cudaEventRecord(m->ck_saved[c % 2], m->ck_stream));
}
static LayerActs gpt2_layer_acts_recompute(GPT2 *m, int l, int B, int T) {
    GPT2Recompute r = m->recompute;
    int K = gpt2_recompute_every(r), c = l / K;
    if (r.mode == RECOMPUTE_FULL && r.host && l % K == 0) {
        size_t btc = (size_t)B * T * m->cfg.channels;
        if (c >= 2) { // checkpoint c - 2 back, into the slot checkpoint c leaves
            CUDA_CHECK(cudaEventRecord(m->ck_mark, m->kern.gpu->compute));
            CUDA_CHECK(cudaStreamWaitEvent(m->ck_stream, m->ck_mark, 0));
            CUDA_CHECK(cudaMemcpyAsync(layer_acts(m, (c - 1) * K - 1, B, T).residual3, m->h_checkpoints + (size_t)(c - 2) * btc,
                                       btc * sizeof(floatX), cudaMemcpyHostToDevice, m->ck_stream));
            CUDA_CHECK(cudaEventRecord(m->ck_ready[c % 2], m->ck_stream));
        }
        if (c >= 1 && host_checkpoint(m, l - 1)) CUDA_CHECK(cudaStreamWaitEvent(m->kern.gpu->compute, m->ck_ready[(c - 1) % 2], 0));
    }
    return layer_acts(m, l, B, T);
}

static void gpt2_backward_done(GPT2 *m) { zero_end_backward(&m->z); }
static Trace *gpt2_trace(GPT2 *m) { return m->z.trace; }
#include "core/model.h" // gpt2_forward, gpt2_backward: the same passes as the CPU trainer's

// The global L2 norm of the floatX gradient: each unit's sum of squares in partials (norm_blocks
// of them, a function of the unit's count alone, packed one unit after another), one fixed-order
// sum, one copy to the host, then zero.h's sum over ranks. An overflowed (fp16) gradient gives an
// Inf or NaN norm on every rank: trainer.h skips the step.
static float gpt2_grad_norm(GPT2 *m) {
    Zero *z = &m->z;
    size_t owned = 0;
    for (int u = 0; u < z->lay.num_units; u++) owned += zero_update_count(z, u);
    KSpan span(m->kern.gpu->prof, "gradient norm", 2.0 * owned, (double)owned * sizeof(floatX));
    size_t off = 0; // <= num_units * NORM_BLOCKS, d_partials' size
    for (int u = 0; u < z->lay.num_units; u++) {
        const floatX *g = (const floatX *)zero_update_grads(z, u);
        size_t n = zero_update_count(z, u);
        unsigned blocks = norm_blocks(n);
        sumsq_kernel<<<blocks, NORM_THREADS, 0, m->kern.gpu->compute>>>(m->d_partials + off, g, n);
        LAUNCH_CHECK();
        off += blocks;
    }
    sum_partials_kernel<<<1, NORM_THREADS, 0, m->kern.gpu->compute>>>(m->d_sumsq, m->d_partials, (int)off);
    LAUNCH_CHECK();
    d2h(m->kern.comm, m->h_sumsq, m->d_sumsq, sizeof(double), "the gradient norm");
    return zero_global_grad_norm(z, *m->h_sumsq);
}

// AdamW over the elements this rank owns, one launch per run of one kind (a partition
// boundary can cut through any tensor; frozen runs, padding and unused vocabulary rows, are
// never touched and stay zero).
static void gpt2_update(GPT2 *m, const OptStep *step) {
    zero_update(&m->z, step);
    gpu_sync(m->kern.comm, "the update"); // the step ends here: its time is the device's, not the launches'
    kprof_step(m->kern.gpu->prof);
}

// --profile-kernels' table, at the end of the run (rank 0).
static void gpt2_report(GPT2 *m, FILE *out, FILE *log) {
    KProf *p = m->kern.gpu->prof;
    if (!p || !p->on) return;
    if (out) kprof_print(p, out);
    if (log) kprof_json(p, log);
}

// The sampler's row: copied as the device holds it, widened on the host (exact; the CPU's own
// conversion code).
static const float *gpt2_logits_row(GPT2 *m, int t) {
    size_t Vp = (size_t)m->cfg.padded_vocab_size;
    d2h(m->kern.comm, m->h_row_x, m->acts.logits + (size_t)t * Vp, Vp * sizeof(floatX), "the sampler's logits");
    zc_widen(m->h_row, m->h_row_x, Vp, FLOATX_DTYPE);
    return m->h_row;
}


// ----------------------------------------------------------------------------------------
// The run: options, data, the loop, reports, checkpoints (shared with the CPU trainer)

struct Run;
static ZeroBackend trainer_backend(struct Run *r);
static void gpu_init(Gpu *gpu);
#include "run/trainer.h"

static void gpu_trace_sync(void *ctx) { gpu_sync((NcclBackend *)ctx, "a traced span"); }

// This rank's collectives: NCCL over all ranks, created here (setup calls this on every rank
// at the same point), with the watchdog's timeout from the options.
static ZeroBackend trainer_backend(Run *r) {
    NcclBackend *b = (NcclBackend *)r->backend;
    if (!b->gpu->lt) gpu_init(b->gpu); // here, not in main: --help and option errors need no GPU
    b->rank = r->rank;
    b->world = r->world;
    b->nodes = r->nodes;
    b->timeout = r->cfg.comm_timeout;
    b->hang = &r->hang;
    // The host runs ahead of the device; the trace's spans wait for it at their ends (the
    // outermost only without --trace), and with --trace the host also waits for each collective
    // it waits for, so that its clock reads the device's times (trace.h's sync, comm_timed).
    b->block_waits = r->cfg.trace_path != NULL;
    r->trace.sync = gpu_trace_sync;
    r->trace.sync_ctx = b;
    r->trace.comm_timed = b->block_waits;
    if (b->gpu->prof && !b->gpu->prof->on && r->cfg.profile_kernels) {
        // the % columns' peaks: the options', else the datasheet's of a card known by name
        double tf = r->cfg.peak_tflops, gb = r->cfg.peak_gbps;
        const char *name = b->gpu->prop.name;
        double sheet_tf = strstr(name, "H100") || strstr(name, "H200") ? 989 : strstr(name, "A100") ? 312 : 0;
        double sheet_gb = strstr(name, "H200") ? 4800 : strstr(name, "H100") ? 3350 : strstr(name, "A100") ? 2039 : 0;
        kprof_init(b->gpu->prof, b->gpu->compute, 1, tf > 0 ? tf : sheet_tf, gb > 0 ? gb : sheet_gb);
    }
    if (!b->comm) {
        ncclUniqueId id;
        if (r->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
        NCCL_CHECK(ncclCommInitRank(&b->comm, r->world, id, r->rank));
        b->host_size = job_host_size(MPI_COMM_WORLD); // ZeRO++'s hosts
        CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaStreamCreateWithFlags(&b->copy_stream, cudaStreamNonBlocking));
        CUDA_CHECK(cudaEventCreateWithFlags(&b->copy_ready, cudaEventDisableTiming));
        for (int h = 0; h < MAX_COPIES; h++) CUDA_CHECK(cudaEventCreateWithFlags(&b->copy_done[h], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming));
        for (int h = 0; h < MAX_PENDING; h++) CUDA_CHECK(cudaEventCreateWithFlags(&b->done[h], cudaEventDisableTiming));
        // room for every report's scalars (checkpoint.h sums 6 per rank + 1): no cudaMalloc mid-run
        b->scalar_cap = 8 * r->world + 64;
        CUDA_CHECK(cudaMalloc(&b->d_scalars, (size_t)b->scalar_cap * sizeof(double)));
        CUDA_CHECK(cudaMallocHost(&b->h_scalars, (size_t)b->scalar_cap * sizeof(double)));
    }
    return nccl_backend(b);
}

// No usable GPU (no NVIDIA driver, or no device) on some rank: every rank learns it, the lowest
// such rank says once what is wrong and what to run instead, and every rank exits 1.
static void gpu_require_device(int rank, int *ndev) {
    cudaError_t e = cudaGetDeviceCount(ndev);
    int world, bad = e != cudaSuccess || *ndev < 1 ? rank : INT_MAX;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (bad == INT_MAX) return;
    if (bad == rank)
        fprintf(stderr, "error: no usable GPU (rank %d: cudaGetDeviceCount: %s): train_gpt needs an NVIDIA GPU "
                        "and its driver; here run the CPU trainer (make train_gpt_cpu && mpirun -np %d ./train_gpt_cpu, "
                        "same options), or check the GPU code on the CUDA emulator (make test/bin/train_gpt_emu_bf16)\n",
                rank, e == cudaSuccess ? "no CUDA device" : cudaGetErrorString(e), world);
    fflush(stderr);
    MPI_Finalize();
    exit(1);
}

// One GPU per process: the process's rank among those on its node picks the device.
static void gpu_init(Gpu *gpu) {
    int rank, lrank, nlocal, ndev = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    job_local(MPI_COMM_WORLD, &lrank, &nlocal);
    gpu_require_device(rank, &ndev);
    // One GPU per process: NCCL refuses two ranks on one device, with an error that names
    // neither. The lowest rank without a GPU of its own says so once, before NCCL starts, and
    // every rank exits 1.
    int world, over = lrank >= ndev ? rank : INT_MAX;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Allreduce(MPI_IN_PLACE, &over, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (over != INT_MAX) {
        if (over == rank) {
            char host[256] = "?";
            gethostname(host, sizeof(host) - 1);
            fprintf(stderr, "error: more processes than GPUs on %s: rank %d is process %d of %d there, which has %d GPU(s); "
                            "train_gpt drives one GPU per process (NCCL refuses two on one device): start at most %d per "
                            "node (mpirun -np %d, or --map-by ppr:%d:node on several)\n",
                    host, rank, lrank + 1, nlocal, ndev, ndev, ndev, ndev);
        }
        fflush(stderr);
        MPI_Finalize();
        exit(1);
    }
    gpu->device = lrank;
    CUDA_CHECK(cudaSetDevice(gpu->device));
    CUDA_CHECK(cudaGetDeviceProperties(&gpu->prop, gpu->device));
    gpu->sm_count = gpu->prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreate(&gpu->compute));
    CUBLAS_CHECK(cublasLtCreate(&gpu->lt));
    gpu->workspace_bytes = (size_t)32 << 20;
    CUDA_CHECK(cudaMalloc(&gpu->workspace, gpu->workspace_bytes));
    if (rank == 0)
        printf("device: %s (sm_%d%d, %d SMs, %.1f GiB); this build: %s parameters, gradients and activations, "
               "cuBLASLt with fp32 accumulation%s\n", gpu->prop.name, gpu->prop.major, gpu->prop.minor, gpu->sm_count,
               gpu->prop.totalGlobalMem / 1073741824.0, zc_dtype_names[FLOATX_DTYPE],
               FLOATX_DTYPE == ZC_F32 ? " (no TF32)" : ", fp32 master weights");
}

static void gpu_shutdown(NcclBackend *b) {
    Gpu *gpu = b->gpu;
    if (!gpu->lt) return;
    if (b->comm) {
        nccl_free_groups(b);
        ncclCommDestroy(b->comm);
        cudaStreamDestroy(b->stream);
        cudaStreamDestroy(b->copy_stream);
    }
    if (gpu->prof) kprof_free(gpu->prof);
    cublasLtDestroy(gpu->lt);
    cudaFree(gpu->workspace);
    cudaStreamDestroy(gpu->compute);
}

// The one precision this binary runs (its kernels are compiled for floatX), for the options.

#ifndef TESTING
int main(int argc, char **argv) {
    PlanBackend plan_backend = gpu_plan_backend(FLOATX_DTYPE);
    const ConfigBuild gpu_build = gpu_config_build(FLOATX_DTYPE);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan")) return planner_main(argc, argv, &plan_backend, &gpu_build); // arithmetic only
    if (argc > 1 && !strcmp(argv[1], "--export")) return export_main(argc, argv);
    preempt_install();
    MPI_Init(&argc, &argv);
    static Run run;
    static Gpu gpu;
    static KProf prof;
    static NcclBackend nccl;
    gpu.prof = &prof;
    nccl.gpu = &gpu;
    run.backend = &nccl;
    run.build = &gpu_build;
    run.plan_backend = &plan_backend;
    int rc = trainer_run(&run, argc, argv);
    gpu_shutdown(&nccl);
    MPI_Finalize();
    return rc;
}
#endif
