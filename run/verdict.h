// verdict.h: when a job hangs, say which rank and which collective. Each rank's flight recorder
// (core/flight.h) and side channel (run/sidechannel.h), and the verdict a watchdog prints.
//
// Contract
//   hang_start(h, z, comm, nodes, log_path, comm_timeout, check) (collective, once the model is
//   built): the recorder is z->flight from here on, and the side channel is open (a rank that
//   cannot open one says so; the job goes on without verdicts). log_path (--log, or NULL) puts
//   the verdict's JSON next to it: DIR/hang.json.
//   check (--check-collectives): before each collective, every rank's fingerprint of it (number,
//   operation, unit, bytes, element type) is compared: one all-reduce of 10 integers on a
//   communicator of its own (so that a rank whose schedule went astray cannot pair the check
//   with another rank's collective), waited for with the watchdog. When they differ, the lowest
//   rank names the first wrong collective and which ranks start what, and the job ends (exit
//   code 4) before any rank starts it. hang_finish prints its cost on rank 0.
//   hang_verdict(h, what, waited, timeout) is what a backend's watchdog calls when a collective
//   (`what`) did not complete within --comm-timeout (`timeout`; it waited `waited` seconds),
//   before it ends the job (run/job.h). When the watchdog fired far later than it should have
//   (waited > timeout + 1 s + timeout / 4: this process was itself stopped, SIGSTOP then the
//   launcher's SIGCONT as it ends the job) it says so in one line and returns. Otherwise this rank is marked stopping, asks
//   every peer for its recorder's tail and state within SIDE_DEADLINE seconds, and then either
//   prints the verdict (stderr, lines starting "hang: ") and writes the JSON, or leaves that to
//   another rank (hang_run says which) and waits HANG_DEFER seconds so that its abort does not
//   cut the other's verdict short; the rank that printed also waits HANG_DEFER seconds, answering
//   its peers meanwhile, so that one whose watchdog fires a moment later leaves the verdict to it.
//   It returns within SIDE_DEADLINE + HANG_LOWER + HANG_DEFER (8) seconds; h NULL or not started:
//   at once.
//   The verdict names: the collective #n the job is stuck in (the lowest any rank waits in);
//   each rank that has not completed it and why (does not answer: stopped, gone or unreachable;
//   computing; finished); the first collective number at which the ranks' recorders disagree
//   (a divergence of their schedules); hosts none of whose ranks can be reached; and each rank's
//   state.
//   hang_verdict_error(h, msg): the same verdict when the communication library reported an
//   error instead (cpu/mpi_backend.h: a message truncated because the ranks started different
//   collectives is how MPI meets a divergence).
//   hang_finish(h): the run is over (recorder FL_FINISHED); closes the side channel.
//   ZERO_FLIGHT=off in the environment leaves the recorder out (zero.h's calls then do nothing): only
//   to measure what it costs (docs/robustness.md: make bench and make bench-ranks with and without).
//   Test-only fault hook: ZERO_TEST_SKIP=RANK:SEQ in the environment makes rank RANK skip its
//   collective number SEQ (core/flight.h), so that its schedule diverges there (test/test_hang.sh).
// No global state; C11 and CUDA C++.
#ifndef RUN_VERDICT_H
#define RUN_VERDICT_H

#include "run/job.h"
#include "run/sidechannel.h"

#define SIDE_DEADLINE 2.0
#define HANG_DEFER 3.0
#define HANG_TIE 1.0
#define HANG_LOWER 3.0

typedef struct Hang {
    int ready;
    int nodes;
    double timeout;               // --comm-timeout
    MPI_Comm check_comm;          // --check-collectives' own communicator (MPI_COMM_NULL: off)
    long checks;                  // checks made, and the seconds they took
    double check_seconds;
    Flight flight;
    SideChannel sc;
    double started;               // flight_now() of hang_start
    SidePeer *peers;              // world of them: the last query's answers
    Flight snap;                  // scratch
    char json_path[4200];         // "": none
} Hang;

static inline void hang_check(void *ctx, const FlightEntry *e);
static inline int hang_start(Hang *h, Zero *z, MPI_Comm comm, int nodes, const char *log_path, double comm_timeout, int check) {
    memset(h, 0, sizeof(*h));
    h->nodes = nodes;
    h->timeout = comm_timeout;
    h->check_comm = MPI_COMM_NULL;
    if (check && z->world > 1) {
        MPI_Comm_dup(comm, &h->check_comm);
        h->flight.check = hang_check;
        h->flight.check_ctx = h;
    }
    FlightCheck fc = h->flight.check;
    flight_init(&h->flight, gpt2_final_unit(&z->lay));
    h->flight.check = fc;
    h->flight.check_ctx = h;
    // ZERO_FLIGHT=off: no recorder (a measurement's switch: its cost, docs/robustness.md);
    // the side channel and the verdicts go on, with empty recorders, and --check-collectives is off
    const char *fl = getenv("ZERO_FLIGHT");
    z->flight = fl && !strcmp(fl, "off") ? NULL : &h->flight;
    const char *skip = getenv("ZERO_TEST_SKIP"); // test-only (above)
    int srank = -1;
    long long sseq = -1;
    if (skip && sscanf(skip, "%d:%lld", &srank, &sseq) == 2 && srank == z->rank && sseq >= 0) h->flight.skip_seq = sseq;
    if (log_path && *log_path) {
        const char *slash = strrchr(log_path, '/');
        if (slash) snprintf(h->json_path, sizeof(h->json_path), "%.*s/hang.json", (int)(slash - log_path), log_path);
        else snprintf(h->json_path, sizeof(h->json_path), "hang.json");
    }
    h->started = flight_now();
    int rc = -1;
    if (z->world > 1) rc = side_open(&h->sc, &h->flight, comm, nodes); // (one rank: no collectives, no watchdog)
    else h->sc.fd = h->sc.wake[0] = h->sc.wake[1] = -1, h->sc.world = 1;
    h->peers = (SidePeer *)calloc((size_t)h->sc.world, sizeof(SidePeer));
    h->ready = 1;
    return rc;
}

static inline void hang_finish(Hang *h) {
    if (!h->ready) return;
    if (h->check_comm != MPI_COMM_NULL) {
        if (h->sc.rank == 0 && h->checks)
            printf("--check-collectives: %ld checks, %.1f us each, %.1f ms in all on rank 0\n", h->checks,
                   h->check_seconds / (double)h->checks * 1e6, h->check_seconds * 1e3);
        MPI_Comm_free(&h->check_comm);
    }
    flight_set_phase(&h->flight, FL_FINISHED);
    side_close(&h->sc);
    free(h->peers);
    h->peers = NULL;
    h->ready = 0;
}

// ----------------------------------------------------------------------------------------
// Words

static const char *const hang_op_names[3] = {"all_reduce", "reduce_scatter", "all_gather"};
static const char *const hang_phase_names[FL_NUM_PHASES] = {"computing", "waiting", "stopping", "finished"};

// "unit 7 = layer 6"
static inline void hang_unit(char *buf, size_t n, int unit, int final_unit) {
    if (unit < 0) snprintf(buf, n, "scalars");
    else if (unit == 0) snprintf(buf, n, "unit 0 = embeddings");
    else if (unit == final_unit) snprintf(buf, n, "unit %d = final layernorm", unit);
    else snprintf(buf, n, "unit %d = layer %d", unit, unit - 1);
}
// "reduce_scatter #413 (unit 7 = layer 6, step 103)"
static inline void hang_describe(char *buf, size_t n, const FlightEntry *e, int final_unit) {
    char u[48];
    hang_unit(u, sizeof(u), e->unit, final_unit);
    char micro[32] = "";
    if (e->micro > 0) snprintf(micro, sizeof(micro), ", micro-step %d", e->micro);
    snprintf(buf, n, "%s #%lld (%s, step %d%s)", hang_op_names[e->op], (long long)e->seq, u, e->step, micro);
}
// "ranks 0, 2" / "rank 1"
static inline void hang_rank_list(char *buf, size_t n, const int *ranks, int k) {
    size_t at = (size_t)snprintf(buf, n, "rank%s ", k == 1 ? "" : "s");
    for (int i = 0; i < k && at < n; i++) at += (size_t)snprintf(buf + at, n - at, i ? ", %d" : "%d", ranks[i]);
}

static inline const FlightEntry *hang_entry(const SideReply *r, int64_t seq) {
    for (int i = 0; i < r->nentries; i++) if (r->e[i].seq == seq) return &r->e[i];
    return NULL;
}
static inline int hang_same(const FlightEntry *a, const FlightEntry *b) {
    return a->op == b->op && a->unit == b->unit && a->bytes == b->bytes && a->dtype == b->dtype;
}
// The last collective of r that completed before `before` (-1: before none), and how long ago.
static inline const FlightEntry *hang_last_done(const SideReply *r, int64_t before) {
    const FlightEntry *best = NULL;
    for (int i = 0; i < r->nentries; i++)
        if (r->e[i].state == FL_DONE && (before < 0 || r->e[i].seq < before) && (!best || r->e[i].seq > best->seq)) best = &r->e[i];
    return best;
}
static inline const char *hang_silence(int status) {
    return status == SIDE_NO_ANSWER ? "stopped or hung (it took the connection but sent nothing)"
         : status == SIDE_REFUSED ? "gone (nothing listens on its endpoint: its process has exited)"
         : status == SIDE_UNREACHABLE ? "unreachable (no connection to its host)"
         : status == SIDE_BAD_REPLY ? "its reply did not parse"
         : "no side channel";
}

// The ranks that disagree about collective #n (at[r]: what rank r has as #n, NULL: unknown), one
// line each against what most ranks have (ties: the lowest rank's): "rank 1 issued all_gather of
// unit 2 = layer 1 (... bytes) where rank 0 issued ...: the ranks' schedules diverged at #n".
static inline void hang_divergence(const FlightEntry *const *at, int W, int F, const char *prefix, const char *verb,
                                   const char *verb_plural, const char *note) {
    int best = -1, best_n = 0, k = 0;
    for (int r = 0; r < W; r++) {
        if (!at[r]) continue;
        int n = 0;
        for (int q = 0; q < W; q++) n += at[q] && hang_same(at[q], at[r]);
        if (n > best_n) best = r, best_n = n;
    }
    if (best < 0) return;
    int *list = (int *)calloc((size_t)W, sizeof(int));
    for (int r = 0; r < W; r++) if (at[r] && hang_same(at[r], at[best])) list[k++] = r;
    char refs[256], u1[48], u2[48];
    hang_rank_list(refs, sizeof(refs), list, k);
    hang_unit(u2, sizeof(u2), at[best]->unit, F);
    for (int r = 0; r < W; r++) {
        if (!at[r] || hang_same(at[r], at[best])) continue;
        hang_unit(u1, sizeof(u1), at[r]->unit, F);
        fprintf(stderr, "%srank %d %s %s of %s (%.0f bytes) where %s %s %s of %s (%.0f bytes): the ranks' schedules diverged at "
                        "#%lld%s\n", prefix, r, verb, hang_op_names[at[r]->op], u1, at[r]->bytes, refs, k == 1 ? verb : verb_plural,
                hang_op_names[at[best]->op], u2, at[best]->bytes, (long long)at[best]->seq, note);
    }
    free(list);
}

// ----------------------------------------------------------------------------------------
// The verdict

typedef struct {
    int64_t stuck;                // the collective the job is stuck in, or -1
    const FlightEntry *stuck_e;   // its record (some rank's)
    int64_t diverged;             // the first number at which recorders disagree, or -1
    int diverged_first;           // ... whether the recorders' windows begin there (it may be earlier)
} HangFacts;

static inline FILE *hang_json_open(Hang *h) { return h->json_path[0] ? fopen(h->json_path, "w") : NULL; }

static inline void hang_json_entry(FILE *j, const FlightEntry *e, double now) {
    fprintf(j, "{\"seq\":%lld,\"op\":\"%s\",\"unit\":%d,\"bytes\":%.0f,\"dtype\":%d,\"step\":%d,\"micro\":%d,"
               "\"state\":\"%s\",\"issued_ago\":%.3f,\"done_ago\":",
            (long long)e->seq, hang_op_names[e->op], e->unit, e->bytes, e->dtype, e->step, e->micro,
            e->state == FL_DONE ? "done" : e->state == FL_WAITING ? "waiting" : "issued", now - e->issued);
    if (e->state == FL_DONE) fprintf(j, "%.3f}", now - e->done);
    else fprintf(j, "null}");
}

static inline void hang_print(Hang *h, const char *headline) {
    int W = h->sc.world, me = h->sc.rank;
    SidePeer *P = h->peers;
    const SideEndpoint *ep = h->sc.peers;
    const SideReply *mine = &P[me].reply;
    int F = mine->final_unit;
    double now = mine->now;
    HangFacts f = {-1, NULL, -1, 0};
    int *answered = (int *)calloc((size_t)W, sizeof(int));
    for (int r = 0; r < W; r++) answered[r] = P[r].status == SIDE_ANSWERED || P[r].status == SIDE_SELF;
    // the collective the job is stuck in: the lowest any rank waits in
    for (int r = 0; r < W; r++) {
        const SideReply *x = &P[r].reply;
        if (answered[r] && x->wait_seq >= 0 && (x->phase == FL_WAITING_IN || x->phase == FL_STOPPING) &&
            (f.stuck < 0 || x->wait_seq < f.stuck)) f.stuck = x->wait_seq;
    }
    if (f.stuck >= 0)
        for (int r = 0; r < W && !f.stuck_e; r++)
            if (answered[r] && P[r].reply.wait_seq == f.stuck) f.stuck_e = hang_entry(&P[r].reply, f.stuck);
    // the first number at which the recorders disagree
    int64_t lo = -1, hi = -1;
    for (int r = 0; r < W; r++)
        if (answered[r] && P[r].reply.nentries > 0) {
            int64_t a = P[r].reply.e[0].seq, b = P[r].reply.e[P[r].reply.nentries - 1].seq;
            if (lo < 0 || a < lo) lo = a;
            if (b > hi) hi = b;
        }
    const FlightEntry **at = (const FlightEntry **)calloc((size_t)W, sizeof(FlightEntry *));
    for (int64_t s = lo; s >= 0 && s <= hi && f.diverged < 0; s++) {
        const FlightEntry *first = NULL;
        for (int r = 0; r < W; r++) {
            at[r] = answered[r] ? hang_entry(&P[r].reply, s) : NULL;
            if (at[r] && !first) first = at[r];
            if (at[r] && !hang_same(at[r], first)) f.diverged = s;
        }
    }
    int *list = (int *)calloc((size_t)W, sizeof(int));
    char line[512], d1[160], d2[160];
    FILE *j = hang_json_open(h);
    fprintf(stderr, "hang: verdict of rank %d (%s), %s:\n", me, ep[me].host, headline);
    if (j) fprintf(j, "{\"verdict_by\":%d,\"host\":\"%s\",\"why\":\"%s\"", me, ep[me].host, headline);
    // a divergence: name the ranks by what they issued at that number
    if (f.diverged >= 0) {
        int64_t s = f.diverged;
        for (int r = 0; r < W; r++) at[r] = answered[r] ? hang_entry(&P[r].reply, s) : NULL;
        hang_divergence(at, W, F, "hang: ", "issued", "issued", s == lo ? " or before (the recorders hold only their last collectives)" : "");
        if (j) fprintf(j, ",\"diverged_at\":%lld", (long long)s);
    } else if (j) fprintf(j, ",\"diverged_at\":null");
    // who has not completed the collective the job is stuck in (past a divergence, the ranks'
    // numbers name different collectives: the divergence is the verdict)
    if (f.stuck >= 0 && (f.diverged < 0 || f.diverged > f.stuck)) {
        if (f.stuck_e) hang_describe(d1, sizeof(d1), f.stuck_e, F);
        else snprintf(d1, sizeof(d1), "collective #%lld", (long long)f.stuck);
        int k = 0;
        for (int r = 0; r < W; r++)
            if (answered[r] && P[r].reply.wait_seq == f.stuck && P[r].reply.phase != FL_COMPUTING) list[k++] = r;
        char waiters[128];
        hang_rank_list(waiters, sizeof(waiters), list, k);
        const FlightEntry *prev = hang_last_done(mine, f.stuck);
        for (int r = 0; r < W; r++) {
            const SideReply *x = &P[r].reply;
            if (answered[r] && x->wait_seq == f.stuck && x->phase != FL_COMPUTING) continue;
            if (!answered[r]) {
                char ago[96] = "";
                if (prev) snprintf(ago, sizeof(ago), "; the last collective it completed is #%lld, %.1f s ago", (long long)prev->seq,
                                   now - prev->done);
                fprintf(stderr, "hang: rank %d (%s) has not completed its part of %s, which %s wait%s in%s; it does not answer: %s\n",
                        r, ep[r].host, d1, waiters, k == 1 ? "s" : "", ago, hang_silence(P[r].status));
            } else if (x->next <= f.stuck || x->phase == FL_FINISHED || x->phase == FL_COMPUTING) {
                const FlightEntry *last = hang_last_done(x, -1);
                char ago[96] = "";
                if (last) snprintf(ago, sizeof(ago), "; its last collective #%lld completed %.1f s ago", (long long)last->seq,
                                   x->now - last->done);
                if (x->phase == FL_FINISHED) snprintf(line, sizeof(line), "it has finished the run");
                else if (x->phase == FL_COMPUTING) snprintf(line, sizeof(line), "it is computing (step %d, micro-step %d)", x->step, x->micro);
                else snprintf(line, sizeof(line), "it waits in #%lld", (long long)x->wait_seq);
                fprintf(stderr, "hang: rank %d (%s) has %s %s, which %s wait%s in: %s%s\n", r, x->host,
                        x->next > f.stuck ? "started but not completed" : "not entered", d1, waiters, k == 1 ? "s" : "", line, ago);
            } else {
                const FlightEntry *w = hang_entry(x, x->wait_seq);
                if (w) hang_describe(d2, sizeof(d2), w, F);
                else snprintf(d2, sizeof(d2), "#%lld", (long long)x->wait_seq);
                fprintf(stderr, "hang: rank %d (%s) has completed its part of #%lld and waits in %s\n", r, x->host, (long long)f.stuck, d2);
            }
        }
        if (j) {
            fprintf(j, ",\"stuck\":{\"seq\":%lld", (long long)f.stuck);
            if (f.stuck_e) fprintf(j, ",\"op\":\"%s\",\"unit\":%d,\"step\":%d,\"micro\":%d", hang_op_names[f.stuck_e->op],
                                   f.stuck_e->unit, f.stuck_e->step, f.stuck_e->micro);
            fprintf(j, "}");
        }
        int all = 1;
        for (int r = 0; r < W; r++) all &= answered[r] && P[r].reply.wait_seq == f.stuck && P[r].reply.phase != FL_COMPUTING;
        if (all && f.diverged < 0)
            fprintf(stderr, "hang: every rank waits in %s and they agree on it: the collective itself does not complete "
                            "(the network or the communication library)\n", d1);
    } else if (j) fprintf(j, ",\"stuck\":null");
    // hosts none of whose ranks answer (other than this one's)
    if (j) fprintf(j, ",\"unreachable_hosts\":[");
    int nh = 0;
    for (int r = 0; r < W; r++) {
        int first = 1, k = 0, none = 1;
        for (int q = 0; q < W; q++) {
            if (strcmp(ep[q].host, ep[r].host)) continue;
            if (q < r) first = 0;
            list[k++] = q;
            none &= P[q].status == SIDE_UNREACHABLE;
        }
        if (!first || !none || !strcmp(ep[r].host, ep[me].host)) continue;
        char rl[128];
        hang_rank_list(rl, sizeof(rl), list, k);
        fprintf(stderr, "hang: host %s (%s) is unreachable from %s: the network between them is down, or the host is gone\n",
                ep[r].host, rl, ep[me].host);
        if (j) fprintf(j, "%s\"%s\"", nh++ ? "," : "", ep[r].host);
    }
    if (j) fprintf(j, "],\"ranks\":[");
    // every rank's state
    for (int r = 0; r < W; r++) {
        const SideReply *x = &P[r].reply;
        char ipbuf[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &ep[r].addr, ipbuf, sizeof(ipbuf));
        if (!answered[r]) {
            fprintf(stderr, "hang:   rank %d (%s, %s:%u): %s\n", r, ep[r].host, ipbuf, ep[r].port, hang_silence(P[r].status));
        } else {
            const FlightEntry *w = x->wait_seq >= 0 ? hang_entry(x, x->wait_seq) : NULL;
            const FlightEntry *last = hang_last_done(x, -1);
            if (w) hang_describe(d2, sizeof(d2), w, F);
            char lastd[96] = "";
            if (last) snprintf(lastd, sizeof(lastd), ", its last completed #%lld %.1f s ago", (long long)last->seq, x->now - last->done);
            if (w) snprintf(line, sizeof(line), "%s in %s for %.1f s", hang_phase_names[x->phase], d2, x->now - w->issued);
            else snprintf(line, sizeof(line), "%s (step %d, micro-step %d) for %.1f s", hang_phase_names[x->phase], x->step, x->micro,
                          x->now - x->since);
            fprintf(stderr, "hang:   rank %d (%s): %s; %lld collectives started%s\n", r, x->host, line, (long long)x->next, lastd);
        }
        if (j) {
            fprintf(j, "%s{\"rank\":%d,\"host\":\"%s\",\"status\":\"%s\"", r ? "," : "", r, ep[r].host, side_status_names[P[r].status]);
            if (answered[r]) {
                fprintf(j, ",\"phase\":\"%s\",\"step\":%d,\"micro\":%d,\"started\":%lld,\"wait_seq\":%lld,\"dropped\":%llu,\"recorder\":[",
                        hang_phase_names[x->phase], x->step, x->micro, (long long)x->next, (long long)x->wait_seq,
                        (unsigned long long)x->dropped);
                for (int i = 0; i < x->nentries; i++) { if (i) fputc(',', j); hang_json_entry(j, &x->e[i], x->now); }
                fprintf(j, "]");
            }
            fprintf(j, "}");
        }
    }
    if (j) { fprintf(j, "]}\n"); fclose(j); }
    fprintf(stderr, "hang: the job ends now (--comm-timeout)%s%s\n", h->json_path[0] ? "; this verdict as JSON: " : "", h->json_path);
    fflush(stderr);
    free(answered); free(at); free(list);
}

// The watchdog fired on this rank in `what` (the backends' wait, before job_abort).
static inline void hang_run(Hang *h, const char *headline);
static inline void hang_verdict(Hang *h, const char *what, double waited, double timeout) {
    if (!h || !h->ready) return;
    if (waited > timeout + 1.0 + 0.25 * timeout) {
        fprintf(stderr, "hang: rank %d's watchdog fired %.1f s late: this process was itself stopped; no verdict from it\n",
                h->sc.rank, waited - timeout);
        return;
    }
    char headline[256];
    snprintf(headline, sizeof(headline), "whose watchdog fired in %.160s after %.1f s", what, waited);
    hang_run(h, headline);
}
// The communication library failed (msg: its words) on this rank: the same verdict.
static inline void hang_verdict_error(Hang *h, const char *msg) {
    if (!h || !h->ready) return;
    char headline[256];
    snprintf(headline, sizeof(headline), "on which MPI failed (%.200s)", msg);
    hang_run(h, headline);
}
static inline void hang_sleep(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}
// Who prints. Ages (how long ago a rank's watchdog fired) are each rank's own clock's, so they
// compare across hosts. A rank leaves the verdict to a stopping peer whose watchdog fired
// clearly earlier (by HANG_TIE), or to a stopping lower rank that did not fire clearly later;
// a lower rank still waiting in a collective will fire too (ranks stuck in the same collective
// fire within milliseconds of each other), so it is asked again every 0.1 s for up to
// HANG_LOWER seconds (one that stops answering meanwhile has printed and ended the job). The rules agree across ranks unless two watchdogs fire HANG_TIE apart to
// within the ages' error (milliseconds).
static inline void hang_run(Hang *h, const char *headline) {
    flight_set_phase(&h->flight, FL_STOPPING);
    int me = h->sc.rank, W = h->sc.world;
    double *at = (double *)calloc((size_t)W, sizeof(double)); // when each answer came
    int *again = (int *)calloc((size_t)W, sizeof(int));
    double t0 = flight_now(), until = 0.0;
    side_query_all(&h->sc, SIDE_DEADLINE, h->peers, NULL);
    for (int r = 0; r < W; r++) at[r] = t0 + h->peers[r].rtt;
    for (;;) {
        side_make_reply(&h->sc, &h->peers[me].reply, &h->snap);
        double now = flight_now(), my_age = now - h->snap.since;
        if (until == 0.0) until = now + HANG_LOWER;
        int n_again = 0;
        for (int r = 0; r < W; r++) {
            const SideReply *x = &h->peers[r].reply;
            again[r] = 0;
            if (r == me || h->peers[r].status != SIDE_ANSWERED) continue;
            double age = (x->now - x->since) + (now - at[r]);
            if (x->phase == FL_STOPPING && (age > my_age + HANG_TIE || (r < me && age > my_age - HANG_TIE))) {
                fprintf(stderr, "hang: rank %d leaves the verdict to rank %d, whose watchdog fired first\n", me, r);
                fflush(stderr);
                free(at); free(again);
                hang_sleep(HANG_DEFER);
                return;
            }
            if (x->phase == FL_WAITING_IN && r < me) again[r] = 1, n_again++;
        }
        if (!n_again || now > until) break;
        hang_sleep(0.1);
        double t1 = flight_now();
        side_query_all(&h->sc, 0.5, h->peers, again);
        for (int r = 0; r < W; r++) {
            if (!again[r]) continue;
            at[r] = t1 + h->peers[r].rtt;
            if (h->peers[r].status != SIDE_ANSWERED) { // it answered a moment ago: it fired, printed and ended the job
                fprintf(stderr, "hang: rank %d leaves the verdict to rank %d, which is ending the job\n", me, r);
                fflush(stderr);
                free(at); free(again);
                hang_sleep(HANG_DEFER);
                return;
            }
        }
    }
    free(at); free(again);
    hang_print(h, headline);
    // still answering (stopping, fired first) a while: a peer whose watchdog fires a moment later
    // (each rank's fires when its own wait began + --comm-timeout) leaves the verdict to this one
    hang_sleep(HANG_DEFER);
}

// ----------------------------------------------------------------------------------------
// --check-collectives

// Waits for the check's all-reduce as the backends wait for a collective: with the watchdog.
static inline void hang_check_wait(Hang *h, MPI_Request *req, const char *what) {
    double start = flight_now();
    for (int spins = 0;; spins++) {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (done) return;
        double waited = flight_now() - start;
        if (waited > h->timeout) {
            fprintf(stderr, "error: rank %d: %s did not complete within %g s; a peer is stuck or gone (--comm-timeout); "
                            "aborting the job\n", h->sc.rank, what, h->timeout);
            hang_verdict(h, what, waited, h->timeout);
            job_abort(MPI_COMM_WORLD, h->nodes, 3);
        }
        if (spins > 100) { struct timespec ts = {0, 50000}; nanosleep(&ts, NULL); }
    }
}

static inline void hang_check(void *ctx, const FlightEntry *e) {
    Hang *h = (Hang *)ctx;
    double t0 = flight_now();
    long long mine[5] = {(long long)e->seq, e->op, e->unit, (long long)e->bytes, e->dtype}, v[10];
    for (int i = 0; i < 5; i++) v[i] = mine[i], v[5 + i] = -mine[i];
    char what[96];
    snprintf(what, sizeof(what), "the --check-collectives check before collective #%lld", (long long)e->seq);
    MPI_Request req;
    flight_wait(&h->flight, e->seq); // (not started yet: the rank waits "in #seq")
    MPI_Iallreduce(MPI_IN_PLACE, v, 10, MPI_LONG_LONG, MPI_MIN, h->check_comm, &req);
    hang_check_wait(h, &req, what);
    flight_done(&h->flight, e->seq);
    h->checks++;
    h->check_seconds += flight_now() - t0;
    int same = 1;
    for (int i = 0; i < 5; i++) same &= v[i] == -v[5 + i];
    if (same) return;
    // every rank is here: gather the fingerprints, the lowest rank names the difference, and the job ends
    int W = h->sc.world, me = h->sc.rank;
    long long *all = (long long *)malloc((size_t)W * 5 * sizeof(long long));
    MPI_Allgather(mine, 5, MPI_LONG_LONG, all, 5, MPI_LONG_LONG, h->check_comm);
    if (me == 0) {
        FlightEntry *fe = (FlightEntry *)calloc((size_t)W, sizeof(FlightEntry));
        const FlightEntry **at = (const FlightEntry **)calloc((size_t)W, sizeof(FlightEntry *));
        for (int r = 0; r < W; r++) {
            fe[r].seq = all[5 * r]; fe[r].op = (int)all[5 * r + 1]; fe[r].unit = (int)all[5 * r + 2];
            fe[r].bytes = (double)all[5 * r + 3]; fe[r].dtype = (int)all[5 * r + 4];
            fe[r].op = fe[r].op < 0 || fe[r].op > 2 ? 0 : fe[r].op;
            at[r] = &fe[r];
        }
        fprintf(stderr, "error: --check-collectives: the ranks are about to start different collectives (step %d, micro-step %d):\n",
                e->step, e->micro);
        hang_divergence(at, W, h->flight.final_unit, "error: ", "is about to start", "are about to start", "; the job stops before any rank starts it");
        fflush(stderr);
        free(fe); free(at);
    }
    free(all);
    MPI_Barrier(h->check_comm);
    job_abort(MPI_COMM_WORLD, h->nodes, 4);
}

#endif // RUN_VERDICT_H
