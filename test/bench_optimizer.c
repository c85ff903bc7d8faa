// The CPU optimizer engine's speed (core/optimizer_engine.h): ms per optimizer step of AdamW over
// GPT-2 124M (d12) and 1.5B (d48), in fp32 and in bf16 mixed precision, against this machine's
// memory bandwidth. scripts/bench_optimizer.sh runs it beside torch.optim.AdamW.
//
// A step is what the trainer does: for each unit (the embeddings, each layer, the final
// LayerNorm) the engine over its runs of one kind (decayed, not decayed; frozen padding
// skipped), each array streamed once. The arrays are sized for the largest unit and reused
// unit after unit (every unit is tens of MB, far past any cache, so reuse measures nothing
// cached), which lets the 1.5B model's 25 GB of states be timed on a machine with less memory:
// the step's time is the sum of its units'. d12's step is also timed over whole-model arrays,
// as the trainer holds them, to show the two agree, and with no memory traffic at all (a
// cache-sized slice updated over and over, as many elements as the model has): the
// arithmetic's own time, which bounds the step from below whatever the bandwidth.
// Bytes per parameter: fp32 reads g, p, m, v (16) and writes p, m, v (12); bf16 reads the 16-bit
// g, the fp32 master, m, v (14) and writes master, m, v and the 16-bit parameter (14): 28 both.
//
//   test/bin/bench_optimizer [--steps N]     prints one line per case, then the bandwidth
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "test/membw.h"
#include <sys/mman.h>
#include "core/gpt2.h"
#include "core/optimizer_engine.h"

static double now(void) { return now_seconds(); }


typedef struct { float *p, *m, *v; void *g, *p16; size_t base; int dtype; const OptStep *step; } Run;
static void run_segment(const ParamSegment *seg, void *ctx) {
    Run *r = (Run *)ctx;
    if (seg->kind == SEG_FROZEN) return;
    size_t lo = seg->begin - r->base, es = zc_dtype_size(r->dtype);
    float *state[OPT_MAX_SLICES] = {r->m + lo, r->v + lo};
    optimizer_update_host(r->step, r->p + lo, state, (char *)r->g + lo * es, r->p16 ? (char *)r->p16 + lo * es : NULL,
                          seg->end - seg->begin, r->dtype, seg->kind == SEG_DECAY);
}

// Memory as the CPU trainer allocates its model states: 2 MB-aligned, asked to be backed by
// transparent huge pages (cpu/memory.h's xcalloc_bytes).
static void *huge(size_t bytes) {
    size_t h = (size_t)2 << 20, rounded = (bytes + h - 1) / h * h;
    void *p = NULL;
    if (posix_memalign(&p, h, rounded)) { fprintf(stderr, "error: out of memory\n"); exit(1); }
    madvise(p, rounded, MADV_HUGEPAGE);
    return p;
}
// Arrays of n elements: p (master), m, v fp32; g and p16 of dtype (fp32: no p16).
typedef struct { float *p, *m, *v; void *g, *p16; } Arrays;
static Arrays arrays(size_t n, int dtype) {
    Arrays a;
    size_t es = zc_dtype_size(dtype);
    a.p = (float *)huge(n * 4); a.m = (float *)huge(n * 4); a.v = (float *)huge(n * 4);
    a.g = huge(n * es); a.p16 = dtype == ZC_F32 ? NULL : huge(n * es);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        a.p[i] = 0.02f * (float)((i * 2654435761u) % 1000) / 1000.0f; a.m[i] = 0.0f; a.v[i] = 0.0f;
        zc_store(a.g, i, 1e-3f * (float)((i * 40503u) % 997) / 997.0f - 5e-4f, dtype);
        if (a.p16) zc_store(a.p16, i, 0.0f, dtype);
    }
    return a;
}
static void free_arrays(Arrays *a) { free(a->p); free(a->m); free(a->v); free(a->g); free(a->p16); }

// One step over the model's units. whole: the arrays hold the whole model at its flat offsets;
// else one unit's worth, reused for each unit.
static double step_ms(const ParamLayout *lay, Arrays *a, int dtype, int whole, int t) {
    OptimizerHyper h = {OPT_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1.0f, 1, 10.0f, 0.01f};
    OptStep s = optimizer_step_begin(&h, 1e-4f, t, 0.5f);
    double t0 = now();
    for (int u = 0; u < lay->num_units; u++) {
        size_t begin = lay->unit_offset[u], off = whole ? begin : 0, es = zc_dtype_size(dtype);
        Run r = {a->p + off, a->m + off, a->v + off, (char *)a->g + off * es, a->p16 ? (char *)a->p16 + off * es : NULL,
                 begin, dtype, &s};
        gpt2_for_each_segment(lay, begin, begin + gpt2_unit_padded(lay, u), run_segment, &r);
    }
    return (now() - t0) * 1e3;
}

int main(int argc, char **argv) {
    int steps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else { fprintf(stderr, "usage: %s [--steps N]\n", argv[0]); return 2; }
    }
    double gbs = bench_memory_gbs();
    printf("threads %d; memory, read and write in place: %.1f GB/s\n", omp_get_max_threads(), gbs);
    const char *models[2] = {"d12", "d48"};
    for (int mi = 0; mi < 2; mi++) {
        GPT2Config c;
        gpt2_preset(models[mi], &c);
        ParamLayout lay;
        gpt2_layout_init(&lay, &c, 16); // one rank: units padded to 16 elements, as zero.h does
        size_t largest = 0;
        for (int u = 0; u < lay.num_units; u++) largest = gpt2_unit_padded(&lay, u) > largest ? gpt2_unit_padded(&lay, u) : largest;
        for (int dt = 0; dt < 2; dt++) {
            int dtype = dt ? ZC_BF16 : ZC_F32;
            for (int whole = 0; whole <= (mi == 0); whole++) {
                Arrays a = arrays(whole ? lay.num_flat : largest, dtype);
                double best = INFINITY;
                for (int t = 1; t <= steps + 1; t++) { // the first step warms the pages
                    double ms = step_ms(&lay, &a, dtype, whole, t);
                    if (t > 1 && ms < best) best = ms;
                }
                free_arrays(&a);
                double bytes = 28.0 * (double)lay.num_params;
                printf("%s %s %-30s %8.1f ms/step  %6.1f GB/s  %5.1f%% of the bandwidth  (%zu parameters)\n", models[mi],
                       dt ? "bf16" : "fp32", whole ? "(whole-model arrays)" : "(unit by unit)", best,
                       bytes / (best * 1e-3) * 1e-9, 100.0 * bytes / (best * 1e-3) * 1e-9 / gbs, lay.num_params);
                if (whole) { // the arithmetic alone: one cache-sized slice updated over and over
                    const size_t n = 65536; // 1 MB of arrays: each thread's half in its L2
                    Arrays in = arrays(n, dtype);
                    OptimizerHyper h = {OPT_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1.0f, 1, 10.0f, 0.01f};
                    OptStep st = optimizer_step_begin(&h, 1e-4f, 1, 0.5f);
                    float *state[OPT_MAX_SLICES] = {in.m, in.v};
                    size_t reps = lay.num_params / n;
                    double arith = INFINITY;
                    for (int t = 0; t <= steps; t++) {
                        double t0 = now();
                        for (size_t r = 0; r < reps; r++) optimizer_update_host(&st, in.p, state, in.g, in.p16, n, dtype, 1);
                        double ms = (now() - t0) * 1e3 * (double)lay.num_params / (double)(reps * n);
                        if (t > 0 && ms < arith) arith = ms;
                    }
                    free_arrays(&in);
                    printf("%s %s %-30s %8.1f ms/step  (the same updates on %zu elements in cache, over and over: no memory traffic)\n",
                           models[mi], dt ? "bf16" : "fp32", "(arithmetic alone)", arith, n);
                }
            }
        }
    }
    return 0;
}
