// core/trace.h: what a rank does and when, as spans on a timeline, and each step's time by kind.
//
// Contract
//   One Trace per rank, owned by the run (run/trainer.h) and reached as `z->trace` by everything
//   that holds a Zero (zero.h, the storage hooks, checkpoints, the backends through their
//   trainer). Every call below accepts a NULL Trace and then records nothing: trace_begin still
//   returns the clock and trace_end the seconds since, so a caller can time itself either way.
//   A Trace that is not recording (no --trace) still sums each step's time by category, for the
//   step log; a recording one also keeps every event, and the run writes them at the end as one
//   Chrome-trace JSON file (trace_write_*: Perfetto and chrome://tracing open it), one
//   process row per rank.
//
//   The clock: trace_now(), seconds of CLOCK_MONOTONIC, which the processes of one host share.
//   Each rank's events are stored relative to its epoch (set by trace_init after a barrier).
//   trace_clock(t) is the time a Trace's spans use: trace_now(), or the clock trace_set_clock
//   gave it (the step-time model runs zero.h's schedule in simulated time so); code that takes
//   its own times for trace_span reads trace_clock.
//
//   What a feature calls (one call each; name a short constant string, cat a TRACE_* category,
//   unit zero.h's unit or -1, bytes what the span moved or 0):
//     double t0 = trace_begin(t, name, cat, unit, bytes); ...; trace_end(t, t0);
//         a span of the thread that runs the step (the rank's "compute" lane); spans nest (LIFO).
//         trace_end returns the span's seconds.
//     trace_span(t, name, cat, unit, bytes, start, end);  (trace_span_of(t, step, ...): of that step)
//         work that overlaps that thread, with the times whoever knows them took (a collective
//         from issue to completion, an asynchronous copy, an I/O on a helper thread); drawn on
//         lanes of their own. Safe from any thread.
//     trace_span_split(t, name, cat, unit, bytes, across, start, end);
//         the same, for a collective whose bytes split by where they went: `across` of them
//         across hosts, the rest inside the host (the JSON's inside_host and across_hosts).
//     trace_instant(t, name, cat, unit, value);  a moment (a skipped step, a dropped buffer).
//     trace_device_idle(t, name, start, end);
//         the device had no work from start to end: the step's thread waited in a span of its own
//         (trace_begin/trace_end: with a device `sync` and recording, both sync the device) for work
//         of the host's that queued no kernel (the host's optimizer update). A span of
//         category TRACE_IDLE ("device_idle") on a lane of its own, kept only where that holds (a
//         recording Trace with a `sync`); so s.flight[TRACE_IDLE] is the device's idle time that the
//         host's update caused (the step log's device_idle_flight_ms).
//   Steps: trace_step_begin(t, step) when an optimizer step starts, trace_set_micro(t, micro)
//   at each micro-step, trace_step_end(t, &s) when it ends. TraceStep then holds, per category,
//     s.lane[cat]: the compute lane's time in spans of that category, counting only the outermost
//       (a unit's forward inside the pass's forward is not counted twice);
//     s.flight[cat]: the union of that category's trace_span intervals (time with at least one
//       in flight).
//   The step log reads forward, backward, optimizer from s.lane, comm_ms = s.flight[TRACE_COMM]
//   and exposed_comm_ms = s.lane[TRACE_WAIT]: the time the step's thread was blocked on (or, for
//   MPI, busy inside) communication. Overlap is 1 - exposed/comm.
//
//   A backend that runs ahead of the host (a GPU) sets `sync`: the Trace calls it before reading
//   the clock at the start and end of a span (every span when recording, only the outermost
//   ones otherwise), so that host times are the device's. `comm_timed` says whether collective
//   completion times are real (1; the GPU trainer clears it when not recording, since its host
//   does not wait for collectives then).
//
//   Bounded: at most TRACE_MAX_EVENTS events per rank are kept (56 bytes each); later ones are
//   counted as dropped and the file says so.
// C11 and C++ (the GPU trainer); no global state.
#ifndef CORE_TRACE_H
#define CORE_TRACE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    TRACE_STEP, TRACE_FORWARD, TRACE_BACKWARD, TRACE_RECOMPUTE, TRACE_OPTIMIZER, TRACE_COMM, TRACE_WAIT,
    TRACE_DATA, TRACE_CHECKPOINT, TRACE_OFFLOAD, TRACE_NVME, TRACE_EVAL, TRACE_IDLE, TRACE_NUM_CATS
};
static const char *const trace_cat_names[TRACE_NUM_CATS] = {
    "step", "forward", "backward", "recompute", "optimizer", "comm", "wait", "data", "checkpoint", "offload", "nvme",
    "eval", "device_idle"};

#define TRACE_MAX_EVENTS (1u << 20)
#define TRACE_MAX_NAMES 64
#define TRACE_NAME_LEN 32
#define TRACE_MAX_DEPTH 32
enum { TRACE_KIND_LANE, TRACE_KIND_SPAN, TRACE_KIND_INSTANT };

typedef struct {
    double ts, dur;          // seconds from the epoch; dur < 0 while a lane span is open
    double bytes;            // bytes moved (an instant's value)
    double across;           // of those, across hosts (trace_span_split), or -1: not split
    int32_t name, unit, step;
    int16_t micro;
    int8_t cat, kind;        // TRACE_*, TRACE_KIND_*
    int32_t pad;
} TraceEvent;

typedef struct {
    double lane[TRACE_NUM_CATS];   // seconds of the compute lane, outermost spans per category
    double flight[TRACE_NUM_CATS]; // seconds with at least one trace_span of the category
} TraceStep;

typedef struct { double a, b; int cat; } TraceInterval;

typedef struct Trace {
    int recording, rank, comm_timed;
    double epoch;
    TraceEvent *ev;
    size_t n, cap, dropped;
    char names[TRACE_MAX_NAMES][TRACE_NAME_LEN];
    const char *name_ptr[TRACE_MAX_NAMES];
    int nnames;
    struct { double t0; long ev; int cat; } stack[TRACE_MAX_DEPTH];
    int depth, misnested;
    int step, micro;
    double lane[TRACE_NUM_CATS];   // this step, so far
    TraceInterval *iv;             // this step's trace_span intervals
    size_t niv, civ;
    void (*sync)(void *ctx);
    void *sync_ctx;
    double (*clock)(void *ctx);   // NULL: trace_now
    void *clock_ctx;
    unsigned char lock;
} Trace;

static inline double trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline double trace_clock(const Trace *t) { return t && t->clock ? t->clock(t->clock_ctx) : trace_now(); }
// Another clock for t's spans (the epoch becomes its present reading).
static inline void trace_set_clock(Trace *t, double (*clock)(void *ctx), void *ctx) {
    t->clock = clock;
    t->clock_ctx = ctx;
    t->epoch = trace_clock(t);
}

static inline void trace_lock(Trace *t) { while (__atomic_test_and_set(&t->lock, __ATOMIC_ACQUIRE)) {} }
static inline void trace_unlock(Trace *t) { __atomic_clear(&t->lock, __ATOMIC_RELEASE); }

// recording: keep events (--trace); the epoch: now (call it right after a barrier).
static inline void trace_init(Trace *t, int rank, int recording) {
    memset(t, 0, sizeof(*t));
    t->rank = rank;
    t->recording = recording;
    t->comm_timed = 1;
    t->epoch = trace_now();
}
static inline void trace_free(Trace *t) {
    if (!t) return;
    free(t->ev);
    free(t->iv);
    t->ev = NULL; t->iv = NULL;
    t->n = t->cap = t->niv = t->civ = 0;
}

// The index of a name; names beyond the table share the last slot.
static inline int trace_name_id(Trace *t, const char *name) {
    for (int i = 0; i < t->nnames; i++)
        if (t->name_ptr[i] == name || !strcmp(t->names[i], name)) return i;
    if (t->nnames == TRACE_MAX_NAMES - 1) {
        snprintf(t->names[t->nnames], TRACE_NAME_LEN, "(other)");
        t->name_ptr[t->nnames] = NULL;
        return t->nnames++;
    }
    if (t->nnames == TRACE_MAX_NAMES) return TRACE_MAX_NAMES - 1;
    snprintf(t->names[t->nnames], TRACE_NAME_LEN, "%s", name);
    t->name_ptr[t->nnames] = name;
    return t->nnames++;
}

// Appends an event (under the lock); its index, or -1 when not recording or full.
static inline long trace_push(Trace *t, const char *name, int cat, int kind, int unit, double bytes, double ts, double dur) {
    if (!t->recording) return -1;
    if (t->n == t->cap) {
        if (t->cap >= TRACE_MAX_EVENTS) { t->dropped++; return -1; }
        size_t cap = t->cap ? 2 * t->cap : 4096;
        TraceEvent *ev = (TraceEvent *)realloc(t->ev, cap * sizeof(TraceEvent));
        if (!ev) { t->dropped++; return -1; }
        t->ev = ev;
        t->cap = cap;
    }
    TraceEvent *e = &t->ev[t->n];
    e->ts = ts - t->epoch; e->dur = dur; e->bytes = bytes; e->across = -1.0;
    e->name = trace_name_id(t, name); e->unit = unit; e->step = t->step;
    e->micro = (int16_t)t->micro; e->cat = (int8_t)cat; e->kind = (int8_t)kind; e->pad = 0;
    return (long)t->n++;
}

static inline void trace_sync(Trace *t) {
    if (t->sync && (t->recording || t->depth == 0)) t->sync(t->sync_ctx);
}

// A span of the step's thread begins: returns its start time (pass it to trace_end).
static inline double trace_begin(Trace *t, const char *name, int cat, int unit, double bytes) {
    if (!t) return trace_now();
    trace_sync(t);
    double t0 = trace_clock(t);
    if (t->depth == TRACE_MAX_DEPTH) { t->misnested = 1; return t0; }
    trace_lock(t);
    long e = trace_push(t, name, cat, TRACE_KIND_LANE, unit, bytes, t0, -1.0);
    trace_unlock(t);
    t->stack[t->depth].t0 = t0; t->stack[t->depth].ev = e; t->stack[t->depth].cat = cat;
    t->depth++;
    return t0;
}

// The innermost open span ends; returns its seconds. Adds them to the step's category time
// unless an enclosing open span has the same category.
static inline double trace_end(Trace *t, double t0) {
    if (!t) return trace_now() - t0;
    if (t->depth == 0 || t->stack[t->depth - 1].t0 != t0) { t->misnested = 1; return trace_clock(t) - t0; }
    t->depth--;
    trace_sync(t);
    double t1 = trace_clock(t), s = t1 - t0;
    int cat = t->stack[t->depth].cat, outer = 1;
    for (int d = 0; d < t->depth; d++) outer &= t->stack[d].cat != cat;
    if (outer) t->lane[cat] += s;
    long e = t->stack[t->depth].ev;
    if (e >= 0) { trace_lock(t); t->ev[e].dur = s; trace_unlock(t); }
    return s;
}

// Work with its own times, overlapping the step's thread. Any thread. trace_span_at: of the given
// step (work started in one step and finished in the next: NVMe's writes behind), with the bytes
// of it that crossed hosts (ZeRO++'s split; < 0: not a collective's); trace_span_of: of the given
// step; trace_span_split: of this step, with the bytes across hosts.
static inline void trace_span_at(Trace *t, int step, const char *name, int cat, int unit, double bytes, double across,
                                 double start, double end) {
    if (!t) return;
    if (end < start) end = start;
    trace_lock(t);
    long e = trace_push(t, name, cat, TRACE_KIND_SPAN, unit, bytes, start, end - start);
    if (e >= 0) { t->ev[e].step = step; t->ev[e].across = across; }
    if (t->niv == t->civ) {
        size_t c = t->civ ? 2 * t->civ : 256;
        TraceInterval *iv = (TraceInterval *)realloc(t->iv, c * sizeof(TraceInterval));
        if (iv) { t->iv = iv; t->civ = c; }
    }
    if (t->niv < t->civ) { t->iv[t->niv].a = start; t->iv[t->niv].b = end; t->iv[t->niv].cat = cat; t->niv++; }
    trace_unlock(t);
}

static inline void trace_span(Trace *t, const char *name, int cat, int unit, double bytes, double start, double end) {
    if (t) trace_span_at(t, t->step, name, cat, unit, bytes, -1.0, start, end);
}
// The device idle from start to end (the contract above): only on a recording Trace that syncs a device.
static inline void trace_device_idle(Trace *t, const char *name, double start, double end) {
    if (t && t->recording && t->sync) trace_span(t, name, TRACE_IDLE, -1, 0.0, start, end);
}
static inline void trace_span_of(Trace *t, int step, const char *name, int cat, int unit, double bytes, double start,
                                 double end) {
    trace_span_at(t, step, name, cat, unit, bytes, -1.0, start, end);
}
static inline void trace_span_split(Trace *t, const char *name, int cat, int unit, double bytes, double across,
                                    double start, double end) {
    if (t) trace_span_at(t, t->step, name, cat, unit, bytes, across, start, end);
}

static inline void trace_instant(Trace *t, const char *name, int cat, int unit, double value) {
    if (!t) return;
    trace_lock(t);
    trace_push(t, name, cat, TRACE_KIND_INSTANT, unit, value, trace_clock(t), 0.0);
    trace_unlock(t);
}

static inline void trace_step_begin(Trace *t, int step) {
    if (!t) return;
    t->step = step;
    t->micro = 0;
    memset(t->lane, 0, sizeof(t->lane));
    trace_lock(t);
    t->niv = 0;
    trace_unlock(t);
}
static inline void trace_set_micro(Trace *t, int micro) { if (t) t->micro = micro; }

static inline int trace_interval_cmp(const void *x, const void *y) {
    const TraceInterval *a = (const TraceInterval *)x, *b = (const TraceInterval *)y;
    if (a->cat != b->cat) return a->cat - b->cat;
    return a->a < b->a ? -1 : a->a > b->a;
}
// The step's times by category (see the contract).
static inline void trace_step_end(Trace *t, TraceStep *s) {
    memset(s, 0, sizeof(*s));
    if (!t) return;
    memcpy(s->lane, t->lane, sizeof(s->lane));
    trace_lock(t);
    if (t->niv > 1) qsort(t->iv, t->niv, sizeof(TraceInterval), trace_interval_cmp);
    for (size_t i = 0; i < t->niv;) { // merge each category's sorted intervals
        int cat = t->iv[i].cat;
        double a = t->iv[i].a, b = t->iv[i].b;
        for (i++; i < t->niv && t->iv[i].cat == cat; i++) {
            if (t->iv[i].a > b) { s->flight[cat] += b - a; a = t->iv[i].a; b = t->iv[i].b; }
            else if (t->iv[i].b > b) b = t->iv[i].b;
        }
        s->flight[cat] += b - a;
    }
    trace_unlock(t);
}

// ----------------------------------------------------------------------------------------
// Moving a rank's events to the writer: packed into bytes (names, then events), so that the
// run can gather every rank's on one (MPI_Gatherv in trainer.h), and unpacked there.

typedef struct {
    int32_t rank, nnames;
    int64_t nevents, dropped;
} TracePackHeader;

static inline size_t trace_packed_bytes(const Trace *t) {
    return sizeof(TracePackHeader) + (size_t)t->nnames * TRACE_NAME_LEN + t->n * sizeof(TraceEvent);
}
static inline void trace_pack(const Trace *t, char *out) {
    TracePackHeader h = {t->rank, t->nnames, (int64_t)t->n, (int64_t)t->dropped};
    memcpy(out, &h, sizeof(h));
    out += sizeof(h);
    memcpy(out, t->names, (size_t)t->nnames * TRACE_NAME_LEN);
    out += (size_t)t->nnames * TRACE_NAME_LEN;
    if (t->n) memcpy(out, t->ev, t->n * sizeof(TraceEvent));
}

typedef struct {
    TracePackHeader h;
    const char *names;   // h.nnames x TRACE_NAME_LEN
    TraceEvent *ev;      // h.nevents (a copy: lane assignment sorts it)
} TraceRank;

// One packed rank at p (its bytes from trace_packed_bytes); the copy of its events is the
// caller's to free.
static inline const char *trace_unpack(const char *p, TraceRank *r) {
    memcpy(&r->h, p, sizeof(r->h));
    p += sizeof(r->h);
    r->names = p;
    p += (size_t)r->h.nnames * TRACE_NAME_LEN;
    r->ev = (TraceEvent *)malloc((size_t)(r->h.nevents ? r->h.nevents : 1) * sizeof(TraceEvent));
    if (r->h.nevents) memcpy(r->ev, p, (size_t)r->h.nevents * sizeof(TraceEvent));
    return p + (size_t)r->h.nevents * sizeof(TraceEvent);
}

// ----------------------------------------------------------------------------------------
// Chrome's trace format: {"traceEvents":[...]} with complete events ("ph":"X", ts and dur in
// microseconds), instants ("ph":"i") and names for processes (pid = rank) and threads (tid =
// lane): tid 0 is the rank's compute lane; trace_span's work goes on lanes 1.. for collectives
// ("comm 1", ...) and 100.. for everything else ("async 1", ...), each span on the first lane
// free at its start, so spans of one lane never overlap.

static inline int trace_event_order(const void *x, const void *y) { // by start; ties in recording order (pad)
    const TraceEvent *a = (const TraceEvent *)x, *b = (const TraceEvent *)y;
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    return a->pad < b->pad ? -1 : a->pad > b->pad;
}

#define TRACE_LANES 64
// Lane of each event (sorted by start time): 0 for the compute lane; collectives 1..; others 100..
static inline void trace_assign_lanes(TraceEvent *ev, int64_t n) {
    for (int64_t i = 0; i < n; i++) ev[i].pad = (int32_t)i;
    qsort(ev, (size_t)n, sizeof(TraceEvent), trace_event_order);
    double free_at[2][TRACE_LANES];
    int used[2] = {0, 0};
    for (int64_t i = 0; i < n; i++) {
        TraceEvent *e = &ev[i];
        e->pad = 0;
        if (e->kind != TRACE_KIND_SPAN) continue;
        int g = e->cat == TRACE_COMM ? 0 : 1, lane = 0;
        while (lane < used[g] && free_at[g][lane] > e->ts) lane++;
        if (lane == TRACE_LANES) lane = TRACE_LANES - 1; // (never in practice: overlaps share the last)
        if (lane == used[g]) used[g]++;
        free_at[g][lane] = e->ts + e->dur;
        e->pad = (g == 0 ? 1 : 100) + lane;
    }
}

static inline void trace_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", *s);
        else fputc(*s, f);
    }
    fputc('"', f);
}

// The file, streamed rank by rank (the run gathers one rank's events at a time):
// trace_write_begin, trace_write_rank for each rank, trace_write_end. meta: members of a JSON
// object (no braces) for "otherData", or NULL. Returns 0, or -1 when writing failed.
static inline void trace_write_begin(FILE *f) { fprintf(f, "{\"traceEvents\":["); }

static inline void trace_write_rank(FILE *f, TraceRank *k, int first) {
    int pid = k->h.rank;
    trace_assign_lanes(k->ev, k->h.nevents);
    int lanes[2 * TRACE_LANES + 1] = {0}; // [1, TRACE_LANES]: comm lanes; above: the others
    for (int64_t i = 0; i < k->h.nevents; i++) {
        int l = k->ev[i].pad;
        if (l >= 1 && l <= TRACE_LANES) lanes[l] = 1;
        if (l >= 100 && l < 100 + TRACE_LANES) lanes[TRACE_LANES + 1 + l - 100] = 1;
    }
    fprintf(f, "%s\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", first ? "" : ",",
            pid, pid);
    fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", pid, pid);
    fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"compute\"}}", pid);
    for (int l = 1; l <= 2 * TRACE_LANES; l++) {
        if (!lanes[l]) continue;
        int tid = l <= TRACE_LANES ? l : 100 + l - TRACE_LANES - 1;
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s %d\"}}", pid,
                tid, tid < 100 ? "comm" : "async", tid < 100 ? tid : tid - 99);
    }
    for (int64_t i = 0; i < k->h.nevents; i++) {
        const TraceEvent *e = &k->ev[i];
        if (e->kind == TRACE_KIND_LANE && e->dur < 0) continue; // still open: the run ended inside it
        const char *name = e->name >= 0 && e->name < k->h.nnames ? k->names + (size_t)e->name * TRACE_NAME_LEN : "?";
        fprintf(f, ",\n{\"ph\":\"%s\",\"name\":", e->kind == TRACE_KIND_INSTANT ? "i" : "X");
        trace_json_string(f, name);
        fprintf(f, ",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f", trace_cat_names[e->cat], pid, e->pad, e->ts * 1e6);
        if (e->kind == TRACE_KIND_INSTANT) fprintf(f, ",\"s\":\"t\"");
        else fprintf(f, ",\"dur\":%.3f", e->dur * 1e6);
        fprintf(f, ",\"args\":{\"step\":%d,\"micro\":%d", e->step, e->micro);
        if (e->unit >= 0) fprintf(f, ",\"unit\":%d", e->unit);
        if (e->kind == TRACE_KIND_INSTANT) fprintf(f, ",\"value\":%.17g", e->bytes);
        else if (e->bytes > 0) fprintf(f, ",\"bytes\":%.0f", e->bytes);
        if (e->kind != TRACE_KIND_INSTANT && e->across >= 0)
            fprintf(f, ",\"inside_host\":%.0f,\"across_hosts\":%.0f", e->bytes - e->across, e->across);
        fprintf(f, "}}");
    }
}

static inline int trace_write_end(FILE *f, const char *meta, int64_t dropped) {
    fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{%s%s\"dropped_events\":%lld}}\n", meta ? meta : "",
            meta && *meta ? "," : "", (long long)dropped);
    return ferror(f) ? -1 : 0;
}

#endif // CORE_TRACE_H
