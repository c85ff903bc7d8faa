// nvme.h: asynchronous direct I/O on a few files, through a pool of threads: how zero/store.h keeps
// model states on NVMe (ZeRO-Infinity) without the page cache quietly holding them.
//
// Contract
//   nvme_open(io, dir, threads, block, err): makes the directory `dir` (one per rank and run:
//     the caller names it), probes whether it takes O_DIRECT (tmpfs does not: then the files are
//     opened buffered and io->direct is 0, for the caller to say so) and starts `threads` I/O
//     threads. Returns 0, or -1 with one line of text in err (the culprit named).
//   nvme_file(io, name, bytes): creates the file, sized and allocated (posix_fallocate: a disk
//     that fills up later cannot take its blocks away), and returns its index, or -1 (io->err).
//   nvme_submit(io, file, buf, bytes, offset, writing, tag) -> ticket: one transfer, split into
//     requests of `block` bytes that the threads run in parallel. With O_DIRECT, buf, bytes and
//     offset are multiples of NVME_ALIGN (the caller pads). nvme_wait(io, ticket) blocks until it
//     is done: 0, or -1 with the first error in io->err ("PATH: write of N bytes at offset X
//     failed: No space left on device", a short read of a truncated file, ...).
//   nvme_check(io): the files are still there at their size (a file deleted or truncated under
//     a running job would otherwise go unnoticed until it is read); 0 or -1 (io->err). Each write
//     checks the same first (a write past a truncation would extend the file again over a hole
//     that reads back as zeros), so writes still draining behind the next step cannot hide one.
//   nvme_done(io, ticket): whether the transfer has finished, without blocking (the caller polls
//     to start a transfer that must follow it without waiting for it). nvme_room(io, transfers,
//     bytes, writing): whether that many transfers of that many bytes each would be taken now,
//     without blocking (free tickets and room in their queue): a caller that must not block (a read ahead) asks first.
//   Order: queued reads run first, then queued writes, then background writes (writing = 2:
//     writes nothing will wait for soon); three queues, each FIFO. A caller waits for what it
//     reads; a write only frees its buffer. So a read the caller will wait for never queues
//     behind writes that drain behind it, nor a write whose buffer is needed soon behind a
//     background one. The caller orders a read after a write to the same bytes by waiting for
//     the write first (the stores do).
//   A ticket is a handle: waiting for it again, or for one whose transfer finished long ago,
//     returns at once (its slot's generation says so), whatever the slot now carries.
//   io->trace (core/trace.h; NULL: none): each transfer, when its last request finishes, is a
//     span from its submission ("nvme read"/"nvme write", category nvme, with its bytes and
//     the `tag` nvme_submit was given), drawn by the I/O thread that finished it, in the step
//     that submitted it.
//   Accounting: bytes read and written (counted when submitted: a transfer is its step's even
//     when it finishes in the next), time with any request in flight (busy), and time the
//     caller spent blocked in nvme_wait (exposed); nvme_take_stats() returns and resets them.
//     nvme_count(io, bytes, later) adds reads counted elsewhere (a read ahead's, when its update
//     begins); later: to another thread's, set aside (below).
//   Another thread's I/O (the delayed update's helper, zero/update.h): nvme_defer(io, 1, step)
//     sets what is submitted from then on aside, counted later (bytes, busy time, exposed time; the
//     trace's step of its transfers: `step`); nvme_expose(io) says the caller now waits for that
//     thread: the thread's waits count as exposed from then on (before, they were hidden behind the
//     caller's work), and returns the bytes of its reads submitted so far; nvme_defer(io, 0, 0) adds
//     what was set aside to the counts. Between the two, only that thread submits and waits.
//   A test's knob: ZEROC_NVME_WRITE_DELAY_MS=N in the environment (read once, by nvme_open) makes
//     the I/O threads wait N ms before running each write request, so that writes stay queued
//     long enough for a caller that reads the same bytes without waiting for their write first
//     to read stale ones every time (test_nvme: the stores' ordering; unset or 0 in real runs).
//   nvme_close(io, remove): joins the threads, closes the files, and with remove deletes them
//     and the directory (scratch: removed at a clean exit).
//   A simulated device (io->sim set on a zeroed Nvme, nvme_open not called: the step-time model,
//     run/timemodel.h): no files, threads or data; each transfer's bytes go to sim->submit, which
//     says when it starts and finishes on the simulated clock, and nvme_wait and nvme_done ask
//     sim->wait and sim->done. Accounting and trace spans as above; nvme_room always has room.
// Host only (C11 and C++, pthreads); no global state.
#ifndef NVME_H
#define NVME_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/trace.h"

#define NVME_ALIGN 4096      // bytes: buffers, sizes and offsets of direct I/O
#define NVME_MAX_FILES 8
#define NVME_MAX_THREADS 32
#define NVME_QUEUE 16384     // requests waiting at once, per direction
#define NVME_TICKETS 1024    // transfers in flight at once

typedef struct { int file, ticket, writing; char *buf; size_t bytes; size_t offset; } NvmeRequest;
typedef struct NvmeSim {
    void *ctx;
    int (*submit)(void *ctx, double bytes, int writing, double *start, double *done); // -> ticket (>= 0)
    void (*wait)(void *ctx, int ticket);
    int (*done)(void *ctx, int ticket);
} NvmeSim;
typedef struct {
    char dir[4096];
    int direct;                               // O_DIRECT took
    int nfiles, fd[NVME_MAX_FILES];
    char path[NVME_MAX_FILES][4200];
    size_t size[NVME_MAX_FILES];
    size_t block;                             // bytes per request
    int threads;
    pthread_t th[NVME_MAX_THREADS];
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    NvmeRequest q[3][NVME_QUEUE];             // queued requests: reads [0], writes [1], background writes [2]
    int head[3], count[3], stop, running;     // ...; requests being run
    int pending[NVME_TICKETS];                // requests left per ticket (0: free or done)
    int gen[NVME_TICKETS];                    // each slot's generation: a ticket is gen * NVME_TICKETS + slot
    double submitted[NVME_TICKETS], bytes[NVME_TICKETS]; // each slot's transfer, for the trace:
    int tag[NVME_TICKETS], writing[NVME_TICKETS];        // when, how many bytes, tag, direction,
    int step[NVME_TICKETS];                              // the trace's step then
    Trace *trace;
    int failed;                               // an error happened (err says which)
    char err[1024];                           // the first error (a path in it cut at 800 characters)
    double bytes_read, bytes_written, busy_s, exposed_s, busy_since;
    int defer, defer_step;         // another thread's I/O is set aside (nvme_defer), of that trace step
    double later_read, later_written, later_busy_s, later_exposed_s; // ... its counts so far
    double exposed_from;           // its waits count as exposed from this time (nvme_expose; 0: always)
    int step_ahead;                // steps after the trace's whose update the reads being submitted are for
    double write_delay_s;          // ZEROC_NVME_WRITE_DELAY_MS: a test's wait before each write request
    const NvmeSim *sim;            // a simulated device (the contract); NULL: files
} Nvme;

static inline double nvme_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *nvme_thread(void *arg) {
    Nvme *io = (Nvme *)arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->count[0] && !io->count[1] && !io->count[2] && !io->stop) pthread_cond_wait(&io->work, &io->mu);
        if (!io->count[0] && !io->count[1] && !io->count[2] && io->stop) break;
        int d = io->count[0] ? 0 : io->count[1] ? 1 : 2; // reads first, background writes last
        NvmeRequest r = io->q[d][io->head[d]];
        io->head[d] = (io->head[d] + 1) % NVME_QUEUE;
        io->count[d]--;
        if (io->running++ == 0) io->busy_since = nvme_now();
        pthread_mutex_unlock(&io->mu);
        if (r.writing && io->write_delay_s > 0) { // (the test's knob: writes stay queued behind this one)
            long ns = (long)(io->write_delay_s * 1e9);
            struct timespec ts = {(time_t)(ns / 1000000000L), ns % 1000000000L};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
        }
        size_t done = 0;
        int e = 0;
        // before a write, the file must still be whole: a write past a truncation would extend it
        // again over a hole that reads back as zeros (the next update's reads, silently)
        struct stat st;
        if (r.writing && (fstat(io->fd[r.file], &st) != 0 || st.st_nlink == 0 || (size_t)st.st_size < io->size[r.file]))
            e = st.st_nlink == 0 ? -3 : -2;
        while (!e && done < r.bytes) { // a short transfer is retried from where it stopped; 0 bytes read is the end
            ssize_t k = r.writing ? pwrite(io->fd[r.file], r.buf + done, r.bytes - done, (off_t)(r.offset + done))
                                  : pread(io->fd[r.file], r.buf + done, r.bytes - done, (off_t)(r.offset + done));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) { e = k < 0 ? errno : -1; break; }
            done += (size_t)k;
        }
        pthread_mutex_lock(&io->mu);
        if (e < -1 && !io->failed) {
            io->failed = 1;
            snprintf(io->err, sizeof(io->err), "%.800s: %s under the running job", io->path[r.file], e == -3 ? "deleted" : "truncated");
        } else if (e && !io->failed) {
            io->failed = 1;
            snprintf(io->err, sizeof(io->err), "%.800s: %s of %zu bytes at offset %zu failed: %s", io->path[r.file],
                     r.writing ? "write" : "read", r.bytes, r.offset,
                     e > 0 ? strerror(e) : "the file ends there (truncated under the running job?)");
        }
        if (--io->running == 0) *(io->defer ? &io->later_busy_s : &io->busy_s) += nvme_now() - io->busy_since;
        if (--io->pending[r.ticket] == 0 && io->trace)
            trace_span_of(io->trace, io->step[r.ticket], io->writing[r.ticket] ? "nvme write" : "nvme read", TRACE_NVME,
                          io->tag[r.ticket], io->bytes[r.ticket], io->submitted[r.ticket], nvme_now());
        pthread_cond_broadcast(&io->done);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

static inline int nvme_open(Nvme *io, const char *dir, int threads, size_t block, char *err, size_t errn) {
    memset(io, 0, sizeof(*io));
    snprintf(io->dir, sizeof(io->dir), "%s", dir);
    io->threads = threads < 1 ? 1 : threads > NVME_MAX_THREADS ? NVME_MAX_THREADS : threads;
    io->block = (block + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    if (io->block == 0) io->block = (size_t)1 << 20;
    const char *delay = getenv("ZEROC_NVME_WRITE_DELAY_MS");
    io->write_delay_s = delay ? atof(delay) / 1e3 : 0.0;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errn, "%s: cannot create the NVMe scratch directory (%s)", dir, strerror(errno));
        return -1;
    }
    // does the filesystem take O_DIRECT? (tmpfs does not: open fails with EINVAL)
    char probe[4200];
    snprintf(probe, sizeof(probe), "%s/.direct_probe", dir);
    int fd = open(probe, O_CREAT | O_RDWR | O_DIRECT, 0600);
    io->direct = fd >= 0;
    if (fd < 0 && errno != EINVAL) {
        snprintf(err, errn, "%s: cannot create files here (%s)", dir, strerror(errno));
        return -1;
    }
    if (fd >= 0) {
        void *b = NULL;
        if (posix_memalign(&b, NVME_ALIGN, NVME_ALIGN) == 0) {
            memset(b, 0, NVME_ALIGN);
            io->direct = pwrite(fd, b, NVME_ALIGN, 0) == NVME_ALIGN; // some filesystems take the flag, not the I/O
            free(b);
        }
        close(fd);
    }
    unlink(probe);
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->work, NULL);
    pthread_cond_init(&io->done, NULL);
    for (int i = 0; i < io->threads; i++) pthread_create(&io->th[i], NULL, nvme_thread, io);
    return 0;
}

static inline int nvme_file(Nvme *io, const char *name, size_t bytes) {
    if (io->nfiles == NVME_MAX_FILES) { snprintf(io->err, sizeof(io->err), "too many NVMe files"); return -1; }
    int k = io->nfiles;
    char *path = io->path[k]; // (written in two steps: GCC thinks dir and path may overlap)
    size_t dl = strlen(io->dir);
    memcpy(path, io->dir, dl);
    snprintf(path + dl, sizeof(io->path[k]) - dl, "/%s", name);
    io->fd[k] = open(io->path[k], O_CREAT | O_TRUNC | O_RDWR | (io->direct ? O_DIRECT : 0), 0600);
    if (io->fd[k] < 0) {
        snprintf(io->err, sizeof(io->err), "%.800s: cannot create (%s)", io->path[k], strerror(errno));
        return -1;
    }
    int e = bytes ? posix_fallocate(io->fd[k], 0, (off_t)bytes) : 0;
    if (e) {
        snprintf(io->err, sizeof(io->err), "%.800s: cannot allocate %zu bytes (%s)", io->path[k], bytes, strerror(e));
        close(io->fd[k]);
        unlink(io->path[k]);
        return -1;
    }
    io->size[k] = bytes;
    io->nfiles++;
    return k;
}

static inline int nvme_submit(Nvme *io, int file, void *buf, size_t bytes, size_t offset, int writing, int tag) {
    if (io->sim) {
        double start, done;
        int t = io->sim->submit(io->sim->ctx, (double)bytes, writing, &start, &done);
        double *count = writing ? (io->defer ? &io->later_written : &io->bytes_written)
                                : io->defer ? &io->later_read : &io->bytes_read;
        *count += (double)bytes;
        if (io->trace)
            trace_span_of(io->trace, io->defer ? io->defer_step : io->trace->step + io->step_ahead,
                          writing ? "nvme write" : "nvme read", TRACE_NVME,
                          tag, (double)bytes, start, done);
        return t;
    }
    pthread_mutex_lock(&io->mu);
    int t = -1;
    while (t < 0) {
        for (int k = 0; k < NVME_TICKETS && t < 0; k++) if (!io->pending[k]) t = k;
        if (t < 0) pthread_cond_wait(&io->done, &io->mu); // every ticket in use: wait for one
    }
    io->pending[t] = 1; // held while the requests are queued
    io->gen[t] = (io->gen[t] + 1) % (1 << 22);
    io->submitted[t] = nvme_now(); io->bytes[t] = (double)bytes; io->tag[t] = tag; io->writing[t] = writing != 0;
    // (a read ahead: the step that uses it; another thread's: nvme_defer's)
    io->step[t] = io->defer ? io->defer_step : io->trace ? io->trace->step + io->step_ahead : 0;
    if (writing) *(io->defer ? &io->later_written : &io->bytes_written) += (double)bytes;
    else *(io->defer ? &io->later_read : &io->bytes_read) += (double)bytes;
    int d = writing == 2 ? 2 : writing ? 1 : 0;
    for (size_t at = 0; at < bytes; at += io->block) {
        while (io->count[d] == NVME_QUEUE) pthread_cond_wait(&io->done, &io->mu);
        NvmeRequest *r = &io->q[d][(io->head[d] + io->count[d]) % NVME_QUEUE];
        r->file = file; r->ticket = t; r->writing = writing; r->buf = (char *)buf + at; r->offset = offset + at;
        r->bytes = bytes - at < io->block ? bytes - at : io->block;
        io->count[d]++;
        io->pending[t]++;
        pthread_cond_signal(&io->work);
    }
    if (--io->pending[t] == 0 && io->trace) // (every request already done)
        trace_span_of(io->trace, io->step[t], writing ? "nvme write" : "nvme read", TRACE_NVME, tag, (double)bytes,
                      io->submitted[t], nvme_now());
    pthread_cond_broadcast(&io->work);
    pthread_mutex_unlock(&io->mu);
    return io->gen[t] * NVME_TICKETS + t;
}

static inline int nvme_wait(Nvme *io, int ticket) {
    if (ticket < 0) return 0;
    if (io->sim) { io->sim->wait(io->sim->ctx, ticket); return 0; }
    int t = ticket % NVME_TICKETS, g = ticket / NVME_TICKETS;
    double t0 = nvme_now();
    pthread_mutex_lock(&io->mu);
    while (io->gen[t] == g && io->pending[t]) pthread_cond_wait(&io->done, &io->mu);
    int bad = io->failed;
    double from = t0 > io->exposed_from ? t0 : io->exposed_from, now = nvme_now(); // (another thread's: nvme_expose)
    if (now > from) *(io->defer ? &io->later_exposed_s : &io->exposed_s) += now - from;
    pthread_mutex_unlock(&io->mu);
    return bad ? -1 : 0;
}

static inline int nvme_done(Nvme *io, int ticket) {
    if (ticket < 0) return 1;
    if (io->sim) return io->sim->done(io->sim->ctx, ticket);
    int t = ticket % NVME_TICKETS, g = ticket / NVME_TICKETS;
    pthread_mutex_lock(&io->mu);
    int done = io->gen[t] != g || !io->pending[t];
    pthread_mutex_unlock(&io->mu);
    return done;
}

static inline int nvme_room(Nvme *io, int transfers, size_t bytes, int writing) {
    if (io->sim) return 1;
    size_t requests = (size_t)transfers * ((bytes + io->block - 1) / io->block);
    pthread_mutex_lock(&io->mu);
    int tickets = 0;
    for (int k = 0; k < NVME_TICKETS && tickets < transfers; k++) tickets += !io->pending[k];
    int room = tickets >= transfers && io->count[writing == 2 ? 2 : writing ? 1 : 0] + requests <= NVME_QUEUE;
    pthread_mutex_unlock(&io->mu);
    return room;
}

static inline int nvme_check(Nvme *io) {
    for (int k = 0; k < io->nfiles; k++) {
        struct stat st;
        if (fstat(io->fd[k], &st) != 0 || st.st_nlink == 0 || (size_t)st.st_size < io->size[k]) {
            pthread_mutex_lock(&io->mu); // (another thread's I/O may be failing too: the first error is kept)
            if (!io->failed)
                snprintf(io->err, sizeof(io->err), "%.800s: %s under the running job", io->path[k],
                         st.st_nlink == 0 ? "deleted" : "truncated");
            io->failed = 1;
            pthread_mutex_unlock(&io->mu);
            return -1;
        }
    }
    return 0;
}

// Reads counted here that were submitted uncounted (the contract).
static inline void nvme_count(Nvme *io, double read, int later) {
    if (!io->sim) pthread_mutex_lock(&io->mu);
    *(later ? &io->later_read : &io->bytes_read) += read;
    if (!io->sim) pthread_mutex_unlock(&io->mu);
}
// Another thread's I/O set aside (on: of trace step `step`) or counted now (off); the contract.
static inline void nvme_defer(Nvme *io, int on, int step) {
    if (!io->sim) pthread_mutex_lock(&io->mu);
    if (io->running && !io->sim) { // (the busy time so far is the old setting's)
        *(io->defer ? &io->later_busy_s : &io->busy_s) += nvme_now() - io->busy_since;
        io->busy_since = nvme_now();
    }
    io->defer = on;
    io->defer_step = step;
    io->exposed_from = on ? 1e300 : 0.0; // (on: that thread's waits are hidden until nvme_expose)
    if (!on) {
        io->bytes_read += io->later_read; io->bytes_written += io->later_written;
        io->busy_s += io->later_busy_s; io->exposed_s += io->later_exposed_s;
        io->later_read = io->later_written = io->later_busy_s = io->later_exposed_s = 0.0;
    }
    if (!io->sim) pthread_mutex_unlock(&io->mu);
}
static inline double nvme_expose(Nvme *io) {
    if (!io->sim) pthread_mutex_lock(&io->mu);
    io->exposed_from = nvme_now();
    double read = io->later_read;
    if (!io->sim) pthread_mutex_unlock(&io->mu);
    return read;
}

// Bytes read and written, seconds with I/O in flight and seconds the caller waited, since the
// last call; then zero.
static inline void nvme_take_stats(Nvme *io, double *read, double *written, double *busy_s, double *exposed_s) {
    if (io->sim) { // (one thread: no lock)
        *read = io->bytes_read; *written = io->bytes_written; *busy_s = *exposed_s = 0.0;
        io->bytes_read = io->bytes_written = 0.0;
        return;
    }
    pthread_mutex_lock(&io->mu);
    if (io->running) {
        *(io->defer ? &io->later_busy_s : &io->busy_s) += nvme_now() - io->busy_since;
        io->busy_since = nvme_now();
    }
    *read = io->bytes_read; *written = io->bytes_written; *busy_s = io->busy_s; *exposed_s = io->exposed_s;
    io->bytes_read = io->bytes_written = io->busy_s = io->exposed_s = 0.0;
    pthread_mutex_unlock(&io->mu);
}

static inline void nvme_close(Nvme *io, int remove) {
    if (!io->threads) return;
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    pthread_cond_broadcast(&io->work);
    pthread_mutex_unlock(&io->mu);
    for (int i = 0; i < io->threads; i++) pthread_join(io->th[i], NULL);
    for (int k = 0; k < io->nfiles; k++) {
        close(io->fd[k]);
        if (remove) unlink(io->path[k]);
    }
    if (remove) rmdir(io->dir);
    pthread_mutex_destroy(&io->mu);
    pthread_cond_destroy(&io->work);
    pthread_cond_destroy(&io->done);
    io->threads = 0;
}

#endif // NVME_H
