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
// as the trainer holds them, and with no memory traffic at all (a cache-sized slice updated over
// and over, as many elements as the model has): the arithmetic's own time.
// Bytes per parameter: fp32 reads g, p, m, v (16) and writes p, m, v (12); bf16 reads the 16-bit
// g, the fp32 master, m, v (14) and writes master, m, v and the 16-bit parameter (14): 28 both.
//
// The bandwidth each case is compared with, the higher of two measures:
//   - "streams": the update's own memory traffic without its arithmetic, on the same arrays, over
//     the same runs, on the same threads with the same split: read g, p, m, v, write p, m, v (and
//     the 16-bit parameter) in place, each element once (p += g, m += g, v += g). Timed with
//     ordinary and with non-temporal stores, the better counted; interleaved with the engine's
//     steps, round by round, so that both see the same machine (this VM's bandwidth moves
//     between readings seconds apart).
//   - "probe": test/membw.h's x = 0.5 x + 0.5 in place over 1 GiB (1 stream read, 1 written),
//     its reading before the cases (printed again after them, to show how far it moved).
//
//   test/bin/bench_optimizer [--steps N] [--model d12|d48|all]
//     prints one line per case, then the probe; each case's line ends "E% of the bandwidth".
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include <immintrin.h>
#include "test/membw.h"
#include <sys/mman.h>
#include "core/gpt2.h"
#include "core/optimizer_engine.h"

static double now(void) { return now_seconds(); }

// What one pass over a run does: the engine, or the streams alone (nt: non-temporal stores).
enum { DO_ENGINE, DO_STREAMS, DO_STREAMS_NT };

// The update's streams without its arithmetic (see the top). Each thread one contiguous share,
// cut at multiples of 16 elements as the engine cuts them.
static void streams(float *p, float *m, float *v, const void *g, void *p16, size_t n, int dtype, int nt) {
#pragma omp parallel if (n >= OPT_ENGINE_OMP_MIN)
    {
        size_t T = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num(), vecs = (n + 15) / 16;
        size_t lo = vecs * t / T * 16, hi = vecs * (t + 1) / T * 16;
        if (hi > n) hi = n;
        size_t es = zc_dtype_size(dtype);
        int aligned = !((((uintptr_t)(p + lo) | (uintptr_t)(m + lo) | (uintptr_t)(v + lo)) & 63) ||
                        (p16 && ((uintptr_t)((char *)p16 + lo * es) & 31)));
        for (size_t i = lo; i < hi; i += 16) {
            __mmask16 k = (__mmask16)(hi - i >= 16 ? 0xFFFF : (1u << (hi - i)) - 1u);
            __m512 gv = dtype == ZC_F32 ? _mm512_maskz_loadu_ps(k, (const float *)g + i)
                                        : _mm512_castsi512_ps(_mm512_slli_epi32(
                                              _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)g + i)), 16));
            __m512 pv = _mm512_add_ps(_mm512_maskz_loadu_ps(k, p + i), gv);
            __m512 mv = _mm512_add_ps(_mm512_maskz_loadu_ps(k, m + i), gv);
            __m512 vv = _mm512_add_ps(_mm512_maskz_loadu_ps(k, v + i), gv);
            __m256i hv = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(pv), 16));
            if (nt && aligned && k == 0xFFFF) {
                _mm512_stream_ps(p + i, pv); _mm512_stream_ps(m + i, mv); _mm512_stream_ps(v + i, vv);
                if (p16) _mm256_stream_si256((__m256i *)((uint16_t *)p16 + i), hv);
            } else {
                _mm512_mask_storeu_ps(p + i, k, pv); _mm512_mask_storeu_ps(m + i, k, mv); _mm512_mask_storeu_ps(v + i, k, vv);
                if (p16) _mm256_mask_storeu_epi16((uint16_t *)p16 + i, k, hv);
            }
        }
        if (nt) _mm_sfence();
    }
}

typedef struct { float *p, *m, *v; void *g, *p16; size_t base; int dtype, what; const OptStep *step; } Run;
static void run_segment(const ParamSegment *seg, void *ctx) {
    Run *r = (Run *)ctx;
    if (seg->kind == SEG_FROZEN) return;
    size_t lo = seg->begin - r->base, es = zc_dtype_size(r->dtype), n = seg->end - seg->begin;
    void *g = (char *)r->g + lo * es, *p16 = r->p16 ? (char *)r->p16 + lo * es : NULL;
    if (r->what != DO_ENGINE) { streams(r->p + lo, r->m + lo, r->v + lo, g, p16, n, r->dtype, r->what == DO_STREAMS_NT); return; }
    float *state[OPT_MAX_SLICES] = {r->m + lo, r->v + lo};
    optimizer_update_host(r->step, r->p + lo, state, g, p16, n, r->dtype, seg->kind == SEG_DECAY);
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
static double step_ms(const ParamLayout *lay, Arrays *a, int dtype, int whole, int t, int what) {
    OptimizerHyper h = {OPT_ADAMW, 0.9f, 0.95f, 1e-8f, 0.1f, 0.9f, 1.0f, 1, 10.0f, 0.01f};
    OptStep s = optimizer_step_begin(&h, 1e-4f, t, 0.5f);
    double t0 = now();
    for (int u = 0; u < lay->num_units; u++) {
        size_t begin = lay->unit_offset[u], off = whole ? begin : 0, es = zc_dtype_size(dtype);
        Run r = {a->p + off, a->m + off, a->v + off, (char *)a->g + off * es, a->p16 ? (char *)a->p16 + off * es : NULL,
                 begin, dtype, what, &s};
        gpt2_for_each_segment(lay, begin, begin + gpt2_unit_padded(lay, u), run_segment, &r);
    }
    return (now() - t0) * 1e3;
}

int main(int argc, char **argv) {
    int steps = 5;
    const char *only = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) only = argv[++i];
        else { fprintf(stderr, "usage: %s [--steps N] [--model d12|d48|all]\n", argv[0]); return 2; }
    }
    if (steps < 1 || (strcmp(only, "all") && strcmp(only, "d12") && strcmp(only, "d48"))) {
        fprintf(stderr, "error: --steps must be >= 1 and --model d12, d48 or all\n");
        return 2;
    }
    double probe0 = bench_memory_gbs();
    printf("threads %d; engine path: %s\n", omp_get_max_threads(),
#ifdef OPT_ENGINE_AVX512
           "AVX-512"
#else
           "OpenMP simd loops"
#endif
    );
    const char *models[2] = {"d12", "d48"};
    for (int mi = 0; mi < 2; mi++) {
        if (strcmp(only, "all") && strcmp(only, models[mi])) continue;
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
                double best = INFINITY, bstream = INFINITY, bstream_nt = INFINITY;
                for (int t = 1; t <= steps + 1; t++) { // round 1 warms the pages and is not counted
                    double ms_s = step_ms(&lay, &a, dtype, whole, t, DO_STREAMS);
                    double ms_nt = step_ms(&lay, &a, dtype, whole, t, DO_STREAMS_NT);
                    double ms = step_ms(&lay, &a, dtype, whole, t, DO_ENGINE);
                    if (t > 1) { best = fmin(best, ms); bstream = fmin(bstream, ms_s); bstream_nt = fmin(bstream_nt, ms_nt); }
                }
                free_arrays(&a);
                double bytes = 28.0 * (double)lay.num_params, gbs = bytes / (best * 1e-3) * 1e-9;
                double sgbs = bytes / (fmin(bstream, bstream_nt) * 1e-3) * 1e-9;
                printf("%s %s %-22s %8.1f ms/step  %5.1f GB/s; streams alone %7.1f ms (%5.1f GB/s; %s stores); %5.1f%% of the bandwidth\n",
                       models[mi], dt ? "bf16" : "fp32", whole ? "(whole-model arrays)" : "(unit by unit)", best, gbs,
                       fmin(bstream, bstream_nt), sgbs, bstream_nt < bstream ? "non-temporal" : "ordinary",
                       100.0 * gbs / fmax(sgbs, probe0));
                fflush(stdout);
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
                    printf("%s %s %-22s %8.1f ms/step  (the same updates on %zu elements in cache, over and over: no memory traffic)\n",
                           models[mi], dt ? "bf16" : "fp32", "(arithmetic alone)", arith, n);
                }
            }
        }
    }
    double probe1 = bench_memory_gbs();
    printf("probe (x = 0.5 x + 0.5 in place over 1 GiB): %.1f GB/s before the cases, %.1f after; "
           "each case's percentage is of the higher of its streams' GB/s and the probe's reading before it\n",
           probe0, probe1);
    return 0;
}
