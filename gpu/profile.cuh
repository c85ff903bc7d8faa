// gpu/profile.cuh: --profile-kernels, the device time of every kernel wrapper, by CUDA events.
//
// Contract. A wrapper that launches work on the compute stream opens a span for it:
//     KSpan span(gpu, "layernorm_forward", flops, bytes);   // ... launches ...; ends with the scope
// With the profiler off (the default) a span is two compares. With it on, the span records an
// event before and after its launches on the compute stream; spans nest, and only the outermost
// is timed (attention's matmuls count as attention). kprof_step(p) at the end of each optimizer
// step (the host has waited for the device there) reads the events: each span's time goes to its
// row (one row per name: a matmul's name carries its shape), and the step's own device time
// (from the previous step's end to this one's) to the total. The first step is left out (plans,
// caches, first touches). kprof_print writes one table, sorted by time: calls per step, ms per
// step, % of the step, achieved TFLOP/s and GB/s from the FLOPs and the fewest bytes the wrapper
// says it must move (each input read once, each output written once), and their % of the peaks
// given (--peak-tflops, --peak-gbps; the session script passes the card's measured ones) or, for
// a card known by name, of its datasheet's. kprof_json writes the same as one JSON log line.
// The events themselves cost the device a few microseconds each: the table's sum of spans is a
// little above what the kernels take without it, and the step a little slower.
// One profiler per process (the Gpu's); no global state.
#ifndef GPU_PROFILE_CUH
#define GPU_PROFILE_CUH

#define KPROF_ROWS 128
typedef struct {
    char name[64];
    double calls, ms, flops, bytes; // summed over the profiled steps
} KProfRow;
typedef struct KProf {
    int on, depth, steps;
    cudaStream_t stream;
    cudaEvent_t *ev;       // 2 per span: before, after (created as needed, reused every step)
    int *row;              // the row of span i
    int pending, cap, created;
    cudaEvent_t step_mark; // the end of the last step read
    int marked;
    double step_ms;        // the profiled steps' device time
    double peak_tflops, peak_gbps;
    KProfRow rows[KPROF_ROWS];
    int nrows;
} KProf;

static void kprof_init(KProf *p, cudaStream_t stream, int on, double peak_tflops, double peak_gbps) {
    memset(p, 0, sizeof(*p));
    p->on = on;
    p->stream = stream;
    p->peak_tflops = peak_tflops;
    p->peak_gbps = peak_gbps;
    if (on) CUDA_CHECK(cudaEventCreate(&p->step_mark));
}

// The spans recorded so far: their times into their rows (the host has waited for the device).
static void kprof_read(KProf *p, int count) {
    for (int i = 0; i < p->pending; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p->ev[2 * i], p->ev[2 * i + 1]));
        if (count) p->rows[p->row[i]].ms += ms;
    }
    p->pending = 0;
}

static int kprof_row(KProf *p, const char *name) {
    for (int i = 0; i < p->nrows; i++)
        if (!strcmp(p->rows[i].name, name)) return i;
    int i = p->nrows < KPROF_ROWS ? p->nrows++ : KPROF_ROWS - 1; // a full table folds the rest into its last row
    if (i == p->nrows - 1) snprintf(p->rows[i].name, sizeof(p->rows[i].name), "%s", i == KPROF_ROWS - 1 ? "(other)" : name);
    return i;
}

static int kprof_begin(KProf *p, const char *name, double flops, double bytes) {
    if (p->pending == p->cap) { // more spans than ever before in a step: read what is there first
        if (p->pending > 0) {
            CUDA_CHECK(cudaStreamSynchronize(p->stream));
            kprof_read(p, p->marked);
        }
        if (p->cap == 0) {
            p->cap = 8192;
            p->ev = (cudaEvent_t *)xmalloc(2 * sizeof(cudaEvent_t) * (size_t)p->cap);
            p->row = (int *)xmalloc(sizeof(int) * (size_t)p->cap);
        }
    }
    int i = p->pending++;
    if (2 * i + 1 >= p->created) {
        CUDA_CHECK(cudaEventCreate(&p->ev[2 * i]));
        CUDA_CHECK(cudaEventCreate(&p->ev[2 * i + 1]));
        p->created = 2 * i + 2;
    }
    p->row[i] = kprof_row(p, name);
    if (p->marked) {
        KProfRow *r = &p->rows[p->row[i]];
        r->calls += 1; r->flops += flops; r->bytes += bytes;
    }
    CUDA_CHECK(cudaEventRecord(p->ev[2 * i], p->stream));
    return i;
}

// A span over the launches in its scope (C++: the GPU trainer's files are CUDA C++).
struct KSpan {
    KProf *p;
    int i;
    KSpan(KProf *prof, const char *name, double flops, double bytes) : p(prof), i(-1) {
        if (!p || !p->on || p->depth++ > 0) return;
        i = kprof_begin(p, name, flops, bytes);
    }
    ~KSpan() {
        if (!p || !p->on) return;
        p->depth--;
        if (i >= 0) CUDA_CHECK(cudaEventRecord(p->ev[2 * i + 1], p->stream));
    }
};

// The end of an optimizer step; the host has waited for the device.
static void kprof_step(KProf *p) {
    if (!p->on) return;
    if (p->marked) {
        cudaEvent_t now;
        CUDA_CHECK(cudaEventCreate(&now));
        CUDA_CHECK(cudaEventRecord(now, p->stream));
        CUDA_CHECK(cudaEventSynchronize(now));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, p->step_mark, now));
        kprof_read(p, 1);
        p->step_ms += ms;
        p->steps++;
        CUDA_CHECK(cudaEventDestroy(p->step_mark));
        p->step_mark = now;
    } else { // the first step: a warm-up, not counted
        CUDA_CHECK(cudaStreamSynchronize(p->stream));
        p->pending = 0;
        for (int i = 0; i < p->nrows; i++) p->rows[i].calls = p->rows[i].ms = p->rows[i].flops = p->rows[i].bytes = 0.0;
        CUDA_CHECK(cudaEventRecord(p->step_mark, p->stream));
        CUDA_CHECK(cudaEventSynchronize(p->step_mark));
        p->marked = 1;
    }
}

static int kprof_by_time(const void *a, const void *b) {
    double x = ((const KProfRow *)a)->ms, y = ((const KProfRow *)b)->ms;
    return x < y ? 1 : x > y ? -1 : strcmp(((const KProfRow *)a)->name, ((const KProfRow *)b)->name);
}

static void kprof_print(KProf *p, FILE *f) {
    if (!p->on) return;
    if (p->steps == 0) { fprintf(f, "kernel profile: no step after the first (run 2 or more steps)\n"); return; }
    qsort(p->rows, (size_t)p->nrows, sizeof(KProfRow), kprof_by_time);
    double n = p->steps, step = p->step_ms / n, sum = 0.0;
    fprintf(f, "kernel profile, rank 0: %d step(s) after the first, device time by CUDA events around each wrapper\n", p->steps);
    fprintf(f, "  peaks: %.0f TFLOP/s, %.0f GB/s%s\n", p->peak_tflops, p->peak_gbps,
            p->peak_tflops > 0 ? "" : " (unknown: pass --peak-tflops and --peak-gbps for the % columns)");
    fprintf(f, "  %-44s %10s %10s %7s %9s %6s %9s %6s\n", "kernel", "calls/step", "ms/step", "% step", "TFLOP/s", "%peak",
            "GB/s", "%peak");
    for (int i = 0; i < p->nrows; i++) {
        const KProfRow *r = &p->rows[i];
        if (r->calls == 0) continue;
        double tf = r->ms > 0 ? r->flops / (r->ms * 1e-3) / 1e12 : 0.0, gb = r->ms > 0 ? r->bytes / (r->ms * 1e-3) / 1e9 : 0.0;
        sum += r->ms / n;
        char pt[16] = "", pg[16] = "";
        if (p->peak_tflops > 0 && r->flops > 0) snprintf(pt, sizeof(pt), "%.1f", 100.0 * tf / p->peak_tflops);
        if (p->peak_gbps > 0 && r->bytes > 0) snprintf(pg, sizeof(pg), "%.1f", 100.0 * gb / p->peak_gbps);
        fprintf(f, "  %-44s %10.1f %10.3f %7.2f %9.1f %6s %9.1f %6s\n", r->name, r->calls / n, r->ms / n,
                100.0 * r->ms / n / step, tf, pt, gb, pg);
    }
    fprintf(f, "  %-44s %10s %10.3f %7.2f\n", "sum of the spans", "", sum, 100.0 * sum / step);
    fprintf(f, "  %-44s %10s %10.3f %7.2f   (collectives on their own stream, host gaps, launches)\n",
            "rest of the step", "", step - sum, 100.0 * (step - sum) / step);
    fprintf(f, "  %-44s %10s %10.3f %7.2f\n", "step (device time, end to end)", "", step, 100.0);
}

// The table as one JSON line of the log: {"event":"kernel_profile",...,"rows":[...]}.
static void kprof_json(KProf *p, FILE *f) {
    if (!p->on || !f || p->steps == 0) return;
    double n = p->steps;
    fprintf(f, "{\"event\":\"kernel_profile\",\"steps\":%d,\"step_ms\":%.4f,\"peak_tflops\":%.1f,\"peak_gbps\":%.1f,\"rows\":[",
            p->steps, p->step_ms / n, p->peak_tflops, p->peak_gbps);
    int first = 1;
    for (int i = 0; i < p->nrows; i++) {
        const KProfRow *r = &p->rows[i];
        if (r->calls == 0) continue;
        fprintf(f, "%s{\"kernel\":\"%s\",\"calls\":%.2f,\"ms\":%.4f,\"flops\":%.17g,\"bytes\":%.17g}", first ? "" : ",", r->name,
                r->calls / n, r->ms / n, r->flops / n, r->bytes / n);
        first = 0;
    }
    fprintf(f, "]}\n");
}

static void kprof_free(KProf *p) {
    if (!p->on) return;
    for (int i = 0; i < p->created; i++) CUDA_CHECK(cudaEventDestroy(p->ev[i]));
    CUDA_CHECK(cudaEventDestroy(p->step_mark));
    free(p->ev);
    free(p->row);
    p->on = 0;
}

#endif // GPU_PROFILE_CUH
