// sidechannel.h: a small TCP endpoint per rank, independent of the job's data path, through which
// a rank whose watchdog fired asks every peer for its flight recorder (core/flight.h) and state.
//
// Contract
//   side_open(sc, flight, comm, nodes) (collective, once at start): each rank listens on an
//   ephemeral TCP port of the address the job's traffic uses (the first local IPv4 address
//   matching OpenMPI's btl_tcp_if_include / oob_tcp_if_include as mpirun passes them on in the
//   environment (OMPI_MCA_*); else 127.0.0.1 when the job is on one host; else the address its
//   host name resolves to, if local; else its first non-loopback IPv4 address). The ranks
//   exchange their endpoints and host names with one MPI_Allgather, and rank 0's 16 random bytes
//   (getrandom) with one MPI_Bcast: the job's token. A server thread then answers queries. If any
//   rank cannot listen, no rank runs one (every rank returns -1 and says so; the job goes on).
//   The server: accept, read exactly SIDE_QUERY_BYTES within 0.5 s; a query whose magic and
//   token (compared in constant time) are the job's gets one reply (SIDE_REPLY_BYTES: this rank's
//   recorder tail and state), anything else (short, slow, wrong magic or token) is dropped and
//   counted (sc->dropped), and the connection closed. It reads nothing more and never writes to
//   a connection it dropped. One connection at a time, each bounded by 0.5 s.
//   side_query_all(sc, deadline, out, ask) asks every other rank (ask NULL) or those with ask[r] set at once (non-blocking connects) and
//   returns within `deadline` seconds: out[r].status says what became of rank r (SIDE_ANSWERED
//   with out[r].reply, or why not: refused (nothing listens there: its process is gone),
//   connected but no answer (stopped, or its host's kernel still holds the socket), unreachable
//   (the connect timed out or the network says so), a reply that does not parse).
//   side_parse_query / side_parse_reply are the only parsers of network input (test/fuzz_side.c).
//   side_close(sc) stops the thread and closes the socket; it reports sc->dropped on stderr when
//   anything was dropped.
//   The wire format is this header's structs, host byte order: every rank of a job runs the same
//   binary on the same architecture.
// No global state; C11 and CUDA C++.
#ifndef RUN_SIDECHANNEL_H
#define RUN_SIDECHANNEL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include "core/flight.h"

#define SIDE_TOKEN 16
#define SIDE_HOST 64

typedef struct {
    char magic[8];                // "zc-hangQ"
    unsigned char token[SIDE_TOKEN];
    int32_t from, zero;           // the asking rank; 0
} SideQuery;

typedef struct {
    char magic[8];                // "zc-hangR"
    unsigned char token[SIDE_TOKEN];
    int32_t rank, phase, step, micro;
    int64_t next, wait_seq;
    double now, since;            // the answering rank's clock: ages are now - t
    uint64_t answered, dropped;   // its server's counts
    char host[SIDE_HOST];
    int32_t final_unit, nentries; // entries e[0..nentries), oldest first
    FlightEntry e[FLIGHT_K];
} SideReply;

#define SIDE_QUERY_BYTES ((int)sizeof(SideQuery))
#define SIDE_REPLY_BYTES ((int)sizeof(SideReply))
typedef char side_query_is_32_bytes[sizeof(SideQuery) == 32 ? 1 : -1];
typedef char side_reply_is_packed[sizeof(SideReply) == 160 + FLIGHT_K * sizeof(FlightEntry) ? 1 : -1];

typedef struct {
    uint32_t addr;                // network order
    uint16_t port, zero;
    char host[SIDE_HOST];
} SideEndpoint;

typedef struct SideChannel {
    int on;                       // listening, thread running
    int fd, wake[2];
    pthread_t thread;
    Flight *flight;
    int rank, world;
    unsigned char token[SIDE_TOKEN];
    SideEndpoint *peers;          // world of them
    uint64_t answered, dropped;   // (atomic: the server thread counts)
    char why[160];                // side_open's failure
    Flight snap;                  // the server thread's scratch
    SideReply reply;
} SideChannel;

enum { SIDE_SELF, SIDE_ANSWERED, SIDE_REFUSED, SIDE_NO_ANSWER, SIDE_UNREACHABLE, SIDE_BAD_REPLY, SIDE_NO_CHANNEL };
static const char *const side_status_names[] = {"self", "answered", "refused", "no answer", "unreachable", "bad reply",
                                                "no side channel"};

typedef struct {
    int status;
    double rtt;                   // seconds until answered
    SideReply reply;
} SidePeer;

// ----------------------------------------------------------------------------------------
// The parsers of network input

static inline int side_token_equal(const unsigned char *a, const unsigned char *b) {
    unsigned char d = 0;
    for (int i = 0; i < SIDE_TOKEN; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}
// 0 for the job's query, -1 for anything else.
static inline int side_parse_query(const void *buf, size_t n, const unsigned char *token) {
    SideQuery q;
    if (n != sizeof(q)) return -1;
    memcpy(&q, buf, sizeof(q));
    if (memcmp(q.magic, "zc-hangQ", 8) != 0 || !side_token_equal(q.token, token)) return -1;
    return 0;
}
static inline int side_finite(double x) { return x == x && x - x == 0.0; }
// 0 when buf is a well-formed reply of rank `rank` of this job (out then holds it, its host name
// terminated, its entries in range); -1 otherwise.
static inline int side_parse_reply(const void *buf, size_t n, const unsigned char *token, int rank, int world, SideReply *out) {
    if (n != sizeof(*out)) return -1;
    memcpy(out, buf, sizeof(*out));
    if (memcmp(out->magic, "zc-hangR", 8) != 0 || !side_token_equal(out->token, token)) return -1;
    if (out->rank != rank || rank < 0 || rank >= world) return -1;
    if (out->phase < 0 || out->phase >= FL_NUM_PHASES || out->nentries < 0 || out->nentries > FLIGHT_K) return -1;
    if (out->next < 0 || out->wait_seq < -1 || out->final_unit < 0 || out->final_unit > 100000) return -1;
    if (!side_finite(out->now) || !side_finite(out->since)) return -1;
    out->host[SIDE_HOST - 1] = 0;
    for (int i = 0; i < out->nentries; i++) {
        const FlightEntry *e = &out->e[i];
        if (e->seq < 0 || e->seq >= out->next || (i > 0 && e->seq <= out->e[i - 1].seq)) return -1;
        if (e->op < 0 || e->op > 2 || e->unit < -1 || e->unit > out->final_unit || e->state < FL_ISSUED || e->state > FL_DONE)
            return -1;
        if (!side_finite(e->bytes) || !side_finite(e->issued) || !side_finite(e->done) || e->bytes < 0) return -1;
    }
    return 0;
}

// ----------------------------------------------------------------------------------------
// The server

// This rank's reply, from a snapshot of its recorder into *snap (the caller's scratch).
static inline void side_make_reply(SideChannel *sc, SideReply *r, Flight *snap) {
    memset(r, 0, sizeof(*r));
    memcpy(r->magic, "zc-hangR", 8);
    memcpy(r->token, sc->token, SIDE_TOKEN);
    r->rank = sc->rank;
    flight_snapshot(sc->flight, snap);
    r->phase = snap->phase; r->step = snap->step; r->micro = snap->micro;
    r->next = snap->next; r->wait_seq = snap->wait_seq;
    r->now = flight_now(); r->since = snap->since;
    r->answered = __atomic_load_n(&sc->answered, __ATOMIC_RELAXED);
    r->dropped = __atomic_load_n(&sc->dropped, __ATOMIC_RELAXED);
    memcpy(r->host, sc->peers[sc->rank].host, SIDE_HOST);
    r->final_unit = snap->final_unit;
    int64_t lo = snap->next - FLIGHT_K < 0 ? 0 : snap->next - FLIGHT_K;
    for (int64_t s = lo; s < snap->next; s++) {
        const FlightEntry *e = &snap->e[s % FLIGHT_K];
        if (e->seq == s) r->e[r->nentries++] = *e;
    }
}

// Reads or writes exactly n bytes of a non-blocking socket before the deadline (flight_now()); 0 or -1.
static inline int side_io(int fd, void *buf, size_t n, double deadline, int writing) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = writing ? send(fd, (char *)buf + got, n - got, MSG_NOSIGNAL) : recv(fd, (char *)buf + got, n - got, 0);
        if (k > 0) { got += (size_t)k; continue; }
        if (k == 0 && !writing) return -1;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
        double left = deadline - flight_now();
        if (left <= 0) return -1;
        struct pollfd p = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        poll(&p, 1, (int)(left * 1000) + 1);
    }
    return 0;
}

static void *side_serve(void *arg) {
    SideChannel *sc = (SideChannel *)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); // the trainer's thread takes the signals
    for (;;) {
        struct pollfd p[2] = {{sc->fd, POLLIN, 0}, {sc->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) { if (errno == EINTR) continue; break; }
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) continue;
        int c = accept4(sc->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (c < 0) continue;
        unsigned char q[sizeof(SideQuery)];
        double deadline = flight_now() + 0.5;
        if (side_io(c, q, sizeof(q), deadline, 0) == 0 && side_parse_query(q, sizeof(q), sc->token) == 0) {
            side_make_reply(sc, &sc->reply, &sc->snap);
            if (side_io(c, &sc->reply, sizeof(sc->reply), deadline + 0.5, 1) == 0) __atomic_fetch_add(&sc->answered, 1, __ATOMIC_RELAXED);
        } else {
            __atomic_fetch_add(&sc->dropped, 1, __ATOMIC_RELAXED);
        }
        close(c);
    }
    return NULL;
}

// ----------------------------------------------------------------------------------------
// Where to listen

static inline int side_cidr_match(const char *spec, uint32_t addr_net) {
    char net[64];
    const char *slash = strchr(spec, '/');
    size_t len = slash ? (size_t)(slash - spec) : strlen(spec);
    if (len >= sizeof(net)) return 0;
    memcpy(net, spec, len);
    net[len] = 0;
    struct in_addr a;
    if (inet_pton(AF_INET, net, &a) != 1) return 0;
    int bits = slash ? atoi(slash + 1) : 32;
    if (bits < 0 || bits > 32) return 0;
    uint32_t mask = bits == 0 ? 0 : 0xffffffffu << (32 - bits);
    return (ntohl(a.s_addr) & mask) == (ntohl(addr_net) & mask);
}
// The first local IPv4 address that an if_include list (comma-separated subnets or interface
// names) names; 0 if none.
static inline uint32_t side_if_include(const char *list) {
    struct ifaddrs *ifs, *i;
    if (!list || !*list || getifaddrs(&ifs) != 0) return 0;
    uint32_t found = 0;
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok && !found; tok = strtok_r(NULL, ",", &save))
        for (i = ifs; i && !found; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            uint32_t a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            if (strchr(tok, '.') ? side_cidr_match(tok, a) : !strcmp(tok, i->ifa_name)) found = a;
        }
    freeifaddrs(ifs);
    return found;
}
static inline int side_is_local(uint32_t a) {
    struct ifaddrs *ifs, *i;
    int yes = 0;
    if (getifaddrs(&ifs) != 0) return 0;
    for (i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr == a) yes = 1;
    freeifaddrs(ifs);
    return yes;
}
static inline uint32_t side_pick_address(int nodes, const char *host) {
    uint32_t a = side_if_include(getenv("OMPI_MCA_btl_tcp_if_include"));
    if (!a) a = side_if_include(getenv("OMPI_MCA_oob_tcp_if_include"));
    if (a) return a;
    if (nodes <= 1) return htonl(INADDR_LOOPBACK);
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    if (getaddrinfo(host, NULL, &hints, &res) == 0) {
        for (struct addrinfo *p = res; p && !a; p = p->ai_next) {
            uint32_t c = ((struct sockaddr_in *)p->ai_addr)->sin_addr.s_addr;
            if ((ntohl(c) >> 24) != 127 && side_is_local(c)) a = c;
        }
        freeaddrinfo(res);
    }
    if (a) return a;
    struct ifaddrs *ifs, *i;
    if (getifaddrs(&ifs) != 0) return 0;
    for (i = ifs; i && !a; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            uint32_t c = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
            if ((ntohl(c) >> 24) != 127) a = c;
        }
    freeifaddrs(ifs);
    return a;
}

// ----------------------------------------------------------------------------------------
// Open, query, close

static inline int side_listen(SideChannel *sc, uint32_t addr, uint16_t *port) {
    sc->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sc->fd < 0) { snprintf(sc->why, sizeof(sc->why), "socket: %s", strerror(errno)); return -1; }
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = addr;
    socklen_t len = sizeof(sa);
    if (bind(sc->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(sc->fd, 64) != 0 ||
        getsockname(sc->fd, (struct sockaddr *)&sa, &len) != 0) {
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &addr, ip, sizeof(ip));
        snprintf(sc->why, sizeof(sc->why), "cannot listen on %s: %s", ip, strerror(errno));
        close(sc->fd);
        sc->fd = -1;
        return -1;
    }
    *port = ntohs(sa.sin_port);
    return 0;
}

static inline int side_open(SideChannel *sc, Flight *flight, MPI_Comm comm, int nodes) {
    memset(sc, 0, sizeof(*sc));
    sc->fd = sc->wake[0] = sc->wake[1] = -1;
    sc->flight = flight;
    MPI_Comm_rank(comm, &sc->rank);
    MPI_Comm_size(comm, &sc->world);
    SideEndpoint me;
    memset(&me, 0, sizeof(me));
    gethostname(me.host, SIDE_HOST - 1);
    me.addr = side_pick_address(nodes, me.host);
    int ok = me.addr != 0;
    if (!ok) snprintf(sc->why, sizeof(sc->why), "no IPv4 address to listen on");
    if (ok) ok = side_listen(sc, me.addr, &me.port) == 0;
    if (ok && pipe(sc->wake) != 0) { snprintf(sc->why, sizeof(sc->why), "pipe: %s", strerror(errno)); ok = 0; }
    if (sc->rank == 0 && ok) {
        if (getrandom(sc->token, SIDE_TOKEN, 0) != SIDE_TOKEN) { snprintf(sc->why, sizeof(sc->why), "getrandom failed"); ok = 0; }
    }
    sc->peers = (SideEndpoint *)calloc((size_t)sc->world, sizeof(SideEndpoint));
    MPI_Allgather(&me, (int)sizeof(me), MPI_BYTE, sc->peers, (int)sizeof(me), MPI_BYTE, comm);
    MPI_Bcast(sc->token, SIDE_TOKEN, MPI_UNSIGNED_CHAR, 0, comm);
    int all = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm);
    if (all) all = pthread_create(&sc->thread, NULL, side_serve, sc) == 0;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm);
    if (all) { sc->on = 1; return 0; }
    if (!ok) fprintf(stderr, "warning: rank %d: no side channel for a hang's verdict (%s)\n", sc->rank, sc->why);
    if (sc->fd >= 0) close(sc->fd);
    sc->fd = -1;
    return -1;
}

static inline void side_close(SideChannel *sc) {
    if (sc->on) {
        ssize_t w = write(sc->wake[1], "x", 1);
        (void)w;
        pthread_join(sc->thread, NULL);
        sc->on = 0;
        uint64_t dropped = __atomic_load_n(&sc->dropped, __ATOMIC_RELAXED);
        if (dropped)
            fprintf(stderr, "note: rank %d: the side channel dropped %llu connection%s that did not carry the job's query\n",
                    sc->rank, (unsigned long long)dropped, dropped == 1 ? "" : "s");
    }
    if (sc->fd >= 0) close(sc->fd);
    if (sc->wake[0] >= 0) { close(sc->wake[0]); close(sc->wake[1]); }
    sc->fd = sc->wake[0] = sc->wake[1] = -1;
    free(sc->peers);
    sc->peers = NULL;
}

// Asks every other rank at once; returns within `deadline` seconds (out: world entries).
static inline void side_query_all(SideChannel *sc, double deadline, SidePeer *out, const int *ask) {
    int W = sc->world;
    int *fd = (int *)malloc((size_t)W * sizeof(int));
    int *stage = (int *)calloc((size_t)W, sizeof(int)); // 0 connecting, 1 reading, 2 finished
    size_t *got = (size_t *)calloc((size_t)W, sizeof(size_t));
    double t0 = flight_now(), end = t0 + deadline;
    for (int r = 0; r < W; r++) {
        fd[r] = -1;
        if (ask && !ask[r]) { stage[r] = 2; continue; } // out[r] as it was
        out[r].status = r == sc->rank ? SIDE_SELF : sc->on ? SIDE_UNREACHABLE : SIDE_NO_CHANNEL;
        out[r].rtt = 0.0;
        if (r == sc->rank || !sc->on) { stage[r] = 2; continue; }
        fd[r] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof(sa));
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = sc->peers[r].addr;
        sa.sin_port = htons(sc->peers[r].port);
        if (fd[r] < 0 || (connect(fd[r], (struct sockaddr *)&sa, sizeof(sa)) != 0 && errno != EINPROGRESS)) {
            out[r].status = errno == ECONNREFUSED ? SIDE_REFUSED : SIDE_UNREACHABLE;
            stage[r] = 2;
        }
    }
    struct pollfd *p = (struct pollfd *)calloc((size_t)W, sizeof(struct pollfd));
    int *who = (int *)calloc((size_t)W, sizeof(int));
    for (;;) {
        int n = 0;
        for (int r = 0; r < W; r++)
            if (stage[r] < 2) { p[n].fd = fd[r]; p[n].events = stage[r] == 0 ? POLLOUT : POLLIN; p[n].revents = 0; who[n++] = r; }
        double left = end - flight_now();
        if (n == 0 || left <= 0) break;
        if (poll(p, (nfds_t)n, (int)(left * 1000) + 1) < 0 && errno != EINTR) break;
        for (int i = 0; i < n; i++) {
            int r = who[i];
            if (!p[i].revents) continue;
            if (stage[r] == 0) {
                int err = 0;
                socklen_t len = sizeof(err);
                getsockopt(fd[r], SOL_SOCKET, SO_ERROR, &err, &len);
                if (err) { out[r].status = err == ECONNREFUSED ? SIDE_REFUSED : SIDE_UNREACHABLE; stage[r] = 2; continue; }
                SideQuery q;
                memset(&q, 0, sizeof(q));
                memcpy(q.magic, "zc-hangQ", 8);
                memcpy(q.token, sc->token, SIDE_TOKEN);
                q.from = sc->rank;
                out[r].status = SIDE_NO_ANSWER; // connected: from here on, silence is the peer's
                if (send(fd[r], &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q)) { stage[r] = 2; continue; }
                stage[r] = 1;
            } else {
                ssize_t k = recv(fd[r], (char *)&out[r].reply + got[r], sizeof(SideReply) - got[r], 0);
                if (k > 0) got[r] += (size_t)k;
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR) || got[r] == sizeof(SideReply)) {
                    stage[r] = 2;
                    if (got[r] == sizeof(SideReply)) {
                        SideReply raw = out[r].reply;
                        out[r].status = side_parse_reply(&raw, sizeof(raw), sc->token, r, W, &out[r].reply) == 0 ? SIDE_ANSWERED
                                                                                                               : SIDE_BAD_REPLY;
                        out[r].rtt = flight_now() - t0;
                    } else if (got[r] > 0) {
                        out[r].status = SIDE_BAD_REPLY;
                    }
                }
            }
        }
    }
    for (int r = 0; r < W; r++) if (fd[r] >= 0) close(fd[r]);
    free(fd); free(stage); free(got); free(p); free(who);
}

#endif // RUN_SIDECHANNEL_H
