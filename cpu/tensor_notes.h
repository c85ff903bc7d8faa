// cpu/tensor_notes.h: what the CPU trainer's storage hooks tell its kernels about the tensors the
// passes hand them, beyond their fp32 values.
//
// Contract
//   - The kernels' signatures are model.h's (core/model.h): a kernel gets fp32 pointers and
//     nothing else about them. What it may use beyond them is written here by the storage hooks
//     (cpu/storage.h) as the passes reach each layer and unit, and found by the pointer the
//     kernel is handed, through the lookups below, and nowhere else. An empty TensorNotes (all
//     zero) asks nothing of a kernel: it reads and writes the fp32 tensors, and adds products to
//     weight gradients.
//   - The notes:
//       stored   per activation (A_*): its bf16 values, stored already (bf16 runs on gemm_bf16:
//                what the run keeps in 16 bits, of the layer in progress): a matmul or GELU that
//                reads that tensor reads them instead of rounding it again
//       out16    per activation: a tensor that is only ever read through its stored bf16 values
//                (bf16 runs on gemm_bf16, while the layer's forward runs): a kernel that writes
//                it writes only those (the forward matmul of fc, 3 MB of fp32 a layer at B=4,
//                T=64, and GELU), and not the fp32 tensor at all, and sets `done` (the hook that
//                would round it then leaves it at that)
//       grads    the gradients the backward is writing, by range [acc, acc + n) as the kernels
//                see them: entry 0 the embeddings, entry 1 the layer (or final LayerNorm) in
//                progress; with how a matmul writes its weight gradient there (cpu/matmul.h's
//                MatmulGrad): fresh, and g16, the 16-bit gradient the range maps onto when the
//                products go straight into 16 bits (then the embeddings' entry is wte only, with
//                `rows`: one flag per vocabulary row, set for the batch's tokens), else NULL
//       dout16   the loss's gradient of one tensor (the logits), rounded to bf16 into the
//                matmuls' staging (bf16 runs on gemm_bf16): the LM head backward's dout. Good
//                for one matmul only: any matmul reuses the staging, so taking it clears it.
// CPU trainer only (C11); no global state.
#ifndef CPU_TENSOR_NOTES_H
#define CPU_TENSOR_NOTES_H

#include "core/gpt2.h"
#include "cpu/matmul.h"

typedef struct { const float *acc; size_t n; int fresh; bf16_t *g16; const uint8_t *rows; } GradsOpen;
typedef struct { float *f32; bf16_t *x16; int done; } Out16;

typedef struct {
    struct { const float *f32; const bf16_t *x16; } stored[NUM_ACTIVATIONS]; // (f32 NULL: none)
    Out16 out16[NUM_ACTIVATIONS];                                             // (f32 NULL: none)
    GradsOpen grads[2];                                                       // (acc NULL: none)
    struct { const float *f32; const bf16_t *x16; } dout16;                   // (f32 NULL: none)
} TensorNotes;

// The stored bf16 values of activation p, or NULL
static const bf16_t *notes_stored16(const TensorNotes *t, const float *p) {
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (t->stored[i].f32 == p) return t->stored[i].x16;
    return NULL;
}

// The out16 note of a tensor a kernel is about to write (p), or NULL: the kernel writes the fp32
// tensor, and the hooks round or narrow it afterwards
static Out16 *notes_out16(TensorNotes *t, const float *p) {
    for (int i = 0; i < NUM_ACTIVATIONS; i++)
        if (t->out16[i].f32 == p) return &t->out16[i];
    return NULL;
}

// How a matmul writes the weight gradient dw: from the open range dw lies in, else added to dw
static MatmulGrad notes_grad(const TensorNotes *t, float *dw) {
    for (int i = 0; i < 2; i++) {
        const GradsOpen *g = &t->grads[i];
        uintptr_t at = (uintptr_t)dw, lo = (uintptr_t)g->acc;
        if (g->acc && at >= lo && at < lo + g->n * sizeof(float))
            return (MatmulGrad){dw, g->fresh, g->g16 ? g->g16 + (dw - g->acc) : NULL, g->g16 ? g->rows : NULL};
    }
    return (MatmulGrad){dw, 0, NULL, NULL};
}

// A matmul is about to overwrite the staging: the loss's dout16 is gone
static void notes_staging_reused(TensorNotes *t) {
    t->dout16.f32 = NULL;
    t->dout16.x16 = NULL;
}
// dout's bf16 values, if the loss left them in the staging (else NULL), for a matmul (which
// then reuses the staging)
static const bf16_t *notes_take_dout16(TensorNotes *t, const float *dout) {
    const bf16_t *x16 = t->dout16.f32 && t->dout16.f32 == dout ? t->dout16.x16 : NULL;
    notes_staging_reused(t);
    return x16;
}

#endif // CPU_TENSOR_NOTES_H
