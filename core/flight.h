// core/flight.h: the flight recorder: the last FLIGHT_K collectives of a rank, and what the rank
// is doing now, for the verdict a watchdog prints when a job hangs (run/verdict.h).
//
// Contract
//   One Flight per rank, owned by the run and reached as `z->flight` by zero.h, which numbers
//   every collective it starts (the units' gathers and reductions, and the all-reduces of a few
//   scalars) in the order it starts them: the same numbers on every rank as long as the ranks'
//   schedules agree. Each call accepts a NULL Flight and then does nothing.
//     seq = flight_issue(f, op, unit, bytes, dtype, step, micro): a collective was started (op a
//       zero.h ZC_* kind, unit -1 for scalars, bytes its full message); returns its number.
//     flight_wait(f, seq): the thread blocks in it now; flight_done(f, seq): it completed, the
//       thread computes again.
//     flight_set_phase(f, FL_STOPPING / FL_FINISHED): the watchdog fired / the run is over.
//   The entries form a ring: entry seq lives at e[seq % FLIGHT_K] while seq > next - FLIGHT_K.
//   Cost: a few stores and one clock read per call (no allocation, no lock, no system call
//   other than clock_gettime's vDSO).
//   Concurrency: one thread writes (the one that runs the schedule); any other thread (the side
//   channel's server) takes a consistent copy with flight_snapshot: a sequence lock (`gen` odd
//   while a write is under way; the reader retries). GCC's __atomic builtins: C11 and C++ alike.
//   flight_start(f, op, unit, bytes, dtype, step, micro) is called just before a collective is
//   started: it returns 0 when it is not to be started (the fault hook below), 1 otherwise, after
//   f->check (when set: --check-collectives, run/verdict.h) has compared the fingerprint with
//   every rank's (the check does not return when they differ).
//   A device's completions (the GPU trainer: the host only queues a collective and its waits):
//   with f->device set (by the backend), flight_done changes only the rank's phase, and the
//   backend says what the device did: flight_complete(f, seq) when it completed collective seq
//   (in order), flight_complete_all(f) when it is past every collective started so far;
//   flight_device_wait(f, seq) while the host blocks and the device is held up in collective seq
//   (the oldest it has not completed): the rank waits in seq then (or in the collective its host
//   waits in, if that is older), until flight_device_resume(f) puts back what the host did.
//   Test-only fault hook: skip_seq >= 0 makes flight_start return 0 once, when collective
//   number skip_seq is about to be started, and zero.h then does not start it (the rank's
//   schedule diverges from the others' there). run/verdict.h sets it from ZERO_TEST_SKIP.
// C11 and C++ (the GPU trainer); no global state.
#ifndef CORE_FLIGHT_H
#define CORE_FLIGHT_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#define FLIGHT_K 64

// an entry's state
enum { FL_ISSUED = 1, FL_WAITING, FL_DONE };
// the rank's phase
enum { FL_COMPUTING, FL_WAITING_IN, FL_STOPPING, FL_FINISHED, FL_NUM_PHASES };

typedef struct {
    int64_t seq;          // -1: empty
    double bytes;         // the collective's whole message (one rank's full buffer)
    double issued, done;  // flight_now() seconds; done 0 until completed
    int32_t op, unit;     // zero.h's ZC_* and unit (-1: scalars)
    int32_t step, micro;
    int32_t dtype, state; // zero.h's ZC_F32 / ZC_BF16 / ZC_FP16; FL_*
} FlightEntry;

typedef void (*FlightCheck)(void *ctx, const FlightEntry *next);

typedef struct {
    FlightEntry e[FLIGHT_K];
    int64_t next;         // the number the next collective gets (= how many were started)
    int64_t wait_seq;     // phase FL_WAITING_IN (or FL_STOPPING from a wait): the one waited in; else -1
    double since;         // when the phase began
    int32_t phase, step, micro;
    int32_t final_unit;   // the layout's final LayerNorm unit (naming: unit u = layer u - 1)
    int64_t skip_seq;     // test-only (see above); -1: none
    FlightCheck check;    // NULL, or the fingerprint check and its context
    void *check_ctx;
    int32_t device;       // completions are the device's (above); 0: flight_done's
    int32_t dev_waiting;  // flight_device_wait is in force; what it replaced:
    int32_t dev_phase;
    int64_t dev_wait_seq;
    double dev_since;
    uint32_t gen;         // sequence lock
} Flight;

static inline double flight_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void flight_init(Flight *f, int final_unit) {
    memset(f, 0, sizeof(*f));
    for (int i = 0; i < FLIGHT_K; i++) f->e[i].seq = -1;
    f->wait_seq = -1;
    f->skip_seq = -1;
    f->final_unit = final_unit;
    f->since = flight_now();
}

static inline void flight_lock(Flight *f) { __atomic_fetch_add(&f->gen, 1u, __ATOMIC_ACQ_REL); }
static inline void flight_unlock(Flight *f) { __atomic_fetch_add(&f->gen, 1u, __ATOMIC_RELEASE); }

static inline FlightEntry *flight_entry(Flight *f, int64_t seq) {
    FlightEntry *e = &f->e[seq % FLIGHT_K];
    return seq >= 0 && e->seq == seq ? e : NULL;
}

static inline int flight_start(Flight *f, int op, int unit, double bytes, int dtype, int step, int micro) {
    if (!f) return 1;
    if (f->skip_seq >= 0 && f->skip_seq == f->next) { f->skip_seq = -1; return 0; }
    if (f->check) {
        FlightEntry e;
        memset(&e, 0, sizeof(e));
        e.seq = f->next; e.bytes = bytes; e.op = op; e.unit = unit; e.step = step; e.micro = micro; e.dtype = dtype;
        f->check(f->check_ctx, &e);
    }
    return 1;
}

static inline int64_t flight_issue(Flight *f, int op, int unit, double bytes, int dtype, int step, int micro) {
    if (!f) return -1;
    flight_lock(f);
    int64_t seq = f->next;
    FlightEntry *e = &f->e[seq % FLIGHT_K];
    e->seq = seq; e->bytes = bytes; e->issued = flight_now(); e->done = 0.0;
    e->op = op; e->unit = unit; e->step = step; e->micro = micro; e->dtype = dtype; e->state = FL_ISSUED;
    f->next = seq + 1;
    f->step = step; f->micro = micro;
    flight_unlock(f);
    return seq;
}

static inline void flight_wait(Flight *f, int64_t seq) {
    if (!f || seq < 0) return;
    flight_lock(f);
    FlightEntry *e = flight_entry(f, seq);
    if (e && e->state == FL_ISSUED) e->state = FL_WAITING;
    if (f->phase == FL_COMPUTING) { f->phase = FL_WAITING_IN; f->wait_seq = seq; f->since = flight_now(); }
    flight_unlock(f);
}

static inline void flight_done(Flight *f, int64_t seq) {
    if (!f || seq < 0) return;
    flight_lock(f);
    double now = flight_now();
    FlightEntry *e = flight_entry(f, seq);
    if (e && !f->device) { e->state = FL_DONE; e->done = now; }
    if (f->phase == FL_WAITING_IN) { f->phase = FL_COMPUTING; f->wait_seq = -1; f->since = now; }
    flight_unlock(f);
}

// The device completed collective seq / every collective started so far (f->device; above).
static inline void flight_complete(Flight *f, int64_t seq) {
    if (!f || seq < 0) return;
    flight_lock(f);
    FlightEntry *e = flight_entry(f, seq);
    if (e && e->state != FL_DONE) { e->state = FL_DONE; e->done = flight_now(); }
    flight_unlock(f);
}
static inline void flight_complete_all(Flight *f) {
    if (!f) return;
    flight_lock(f);
    double now = flight_now();
    for (int i = 0; i < FLIGHT_K; i++)
        if (f->e[i].seq >= 0 && f->e[i].state != FL_DONE) { f->e[i].state = FL_DONE; f->e[i].done = now; }
    flight_unlock(f);
}
// The host blocks while the device is held up in collective seq (above).
static inline void flight_device_wait(Flight *f, int64_t seq) {
    if (!f || seq < 0) return;
    flight_lock(f);
    if (!f->dev_waiting) { f->dev_waiting = 1; f->dev_phase = f->phase; f->dev_wait_seq = f->wait_seq; f->dev_since = f->since; }
    if (f->phase == FL_COMPUTING || f->phase == FL_WAITING_IN) {
        int64_t host = f->dev_phase == FL_WAITING_IN ? f->dev_wait_seq : -1;
        if (f->phase == FL_COMPUTING) f->since = flight_now();
        f->phase = FL_WAITING_IN;
        f->wait_seq = host >= 0 && host < seq ? host : seq;
    }
    flight_unlock(f);
}
static inline void flight_device_resume(Flight *f) {
    if (!f || !f->dev_waiting) return;
    flight_lock(f);
    if (f->phase == FL_WAITING_IN) { f->phase = f->dev_phase; f->wait_seq = f->dev_wait_seq; f->since = f->dev_since; }
    f->dev_waiting = 0;
    flight_unlock(f);
}

// The step and micro-step being computed (for a rank that computes between collectives).
static inline void flight_set_step(Flight *f, int step, int micro) {
    if (!f) return;
    flight_lock(f);
    f->step = step; f->micro = micro;
    flight_unlock(f);
}

static inline void flight_set_phase(Flight *f, int phase) {
    if (!f) return;
    flight_lock(f);
    f->phase = phase;
    f->since = flight_now();
    flight_unlock(f);
}

// A consistent copy of f into out, from any thread; 0, or -1 when the writer kept it busy.
static inline int flight_snapshot(Flight *f, Flight *out) {
    for (int tries = 0; tries < 10000; tries++) {
        uint32_t g0 = __atomic_load_n(&f->gen, __ATOMIC_ACQUIRE);
        if (g0 & 1u) continue;
        memcpy(out, f, sizeof(*out));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&f->gen, __ATOMIC_RELAXED) == g0) return 0;
    }
    return -1;
}

#endif // CORE_FLIGHT_H
