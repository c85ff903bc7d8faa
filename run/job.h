// job.h: the MPI job's lifetime: stopping cleanly on a signal, every rank after the same step;
// and ending a job that cannot go on, also when the network between its hosts is gone.
//
// Contract
//   preempt_install() catches SIGTERM (what Slurm sends at the time limit, and mpirun to its
//   ranks when it is itself terminated), SIGINT (Ctrl-C), SIGUSR1 and SIGUSR2 (mpirun forwards
//   these two to every rank; Slurm's --signal sends one ahead of the limit). The handler only
//   records the signal. SIGINT's handler is reset as it runs, so a second Ctrl-C ends the process
//   at once, as Ctrl-C does without it.
//   preempt_agree(z) is called by every rank at each step boundary: one sum of one number
//   over the ranks, so that when any rank has been signalled, every rank learns it after the same
//   step (the trainer then saves and exits 0). Returns how many ranks were signalled (0: go on).
//   preempt_signal() is this rank's signal (0: none); preempt_signal_name() names one.
//
//   job_local(comm, &local_rank, &local_size): this rank among the ranks on its host;
//   job_nodes(comm) counts the hosts the job spans (both collective). job_host_size(comm)
//   (collective): ZeRO++'s ranks per host, when every host has as many and consecutive ranks fill
//   each, else 0; a host is ZERO_HOST_ID's value when every rank has it set (tests posing as
//   several hosts on one), else the ranks sharing memory (MPI_COMM_TYPE_SHARED). job_abort(comm, nodes, code)
//   ends the job after the watchdog has said why (--comm-timeout). On one host that is
//   MPI_Abort. Across hosts a rank cannot tell a stuck peer from a lost network, and MPI_Abort
//   over a lost network leaves mpirun waiting forever for the daemon it cannot reach (OpenMPI
//   4: it sends that daemon the order to kill its ranks, and TCP then retries for ~15 minutes
//   while the keepalive that would notice the loss is suspended). So: a rank whose parent is an
//   OpenMPI daemon (orted: not on mpirun's host) gives it 2 s to forward what the rank printed,
//   then sends it SIGTERM: it ends its host's ranks and exits, and tells mpirun when it still
//   can. A rank on mpirun's host waits until mpirun's own keepalive must have noticed a lost
//   host and ended the job (job_keepalive: oob_tcp_keepalive_time + _intvl x _probes), and only
//   then calls MPI_Abort (a stuck peer, the network fine).
//   job_check_hosts(nodes, comm_timeout) prints one warning (call it on one rank) when the job
//   spans hosts and mpirun's keepalive, as the environment mpirun passes its MCA parameters in
//   says, would notice a lost host before the watchdog names the collective, or later than
//   --comm-timeout + 30 s; it names the mpirun options that fit (README: several hosts).
// The one piece of global state is the signal's number: a handler has nowhere else to put it.
#ifndef JOB_H
#define JOB_H

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1 // MPI's C API only, also as C++ (nvcc, the emulator's g++)
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include "zero.h"

// ----------------------------------------------------------------------------------------
// Stopping on a signal

static volatile sig_atomic_t preempt_caught;

static void preempt_handler(int sig) {
    if (!preempt_caught) preempt_caught = sig;
}

static inline void preempt_install(void) {
    static const int sigs[4] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (int i = 0; i < 4; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = preempt_handler;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESTART | (sigs[i] == SIGINT ? SA_RESETHAND : 0);
        sigaction(sigs[i], &sa, NULL);
    }
}

static inline int preempt_signal(void) { return preempt_caught; }

static inline const char *preempt_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : sig == SIGUSR2 ? "SIGUSR2" : "a signal";
}

static inline int preempt_agree(Zero *z) {
    double n = preempt_caught ? 1.0 : 0.0;
    zero_sum_doubles(z, &n, 1);
    return (int)n;
}

// ----------------------------------------------------------------------------------------
// Ending a job that cannot go on

// This rank's place among the job's ranks on its host: its rank there, and how many they are.
static inline void job_local(MPI_Comm comm, int *local_rank, int *local_size) {
    MPI_Comm local;
    int rank;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, local_rank);
    MPI_Comm_size(local, local_size);
    MPI_Comm_free(&local);
}
static inline int job_nodes(MPI_Comm comm) {
    int lrank, nlocal;
    job_local(comm, &lrank, &nlocal);
    int first = lrank == 0;
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_SUM, comm);
    return first;
}

// Under OpenMPI's mpirun (which passes its MCA parameters on in the environment): the seconds
// after which its daemons notice a host that stopped answering, at least (lo) and at most (hi).
// 0 when not under OpenMPI; infinite when keepalive is off.
static inline int job_host_size(MPI_Comm comm) {
    int rank, world;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &world);
    const char *env = getenv("ZERO_HOST_ID");
    int id = env && *env ? atoi(env) : -1, all_env = id >= 0;
    MPI_Allreduce(MPI_IN_PLACE, &all_env, 1, MPI_INT, MPI_MIN, comm);
    if (!all_env) { // the lowest rank sharing this rank's memory
        MPI_Comm local;
        MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
        id = rank;
        MPI_Allreduce(MPI_IN_PLACE, &id, 1, MPI_INT, MPI_MIN, local);
        MPI_Comm_free(&local);
    }
    int *ids = (int *)malloc((size_t)world * sizeof(int));
    MPI_Allgather(&id, 1, MPI_INT, ids, 1, MPI_INT, comm);
    int g = 1;
    while (g < world && ids[g] == ids[0]) g++;
    int ok = world % g == 0;
    for (int r = 0; ok && r < world; r++) // each block of g one host, and no host twice
        ok = ids[r] == ids[r - r % g] && (r % g || r == 0 || ids[r] != ids[r - 1]);
    for (int r = 0; ok && r < world; r += g)
        for (int q = 0; ok && q < r; q += g) ok = ids[q] != ids[r];
    free(ids);
    return ok ? g : 0;
}
static inline int job_openmpi(void) { return getenv("OMPI_COMM_WORLD_SIZE") != NULL; }
static inline double job_env(const char *name, double otherwise) {
    const char *v = getenv(name);
    return v && *v ? atof(v) : otherwise;
}
static inline void job_keepalive(double *lo, double *hi) {
    double t = job_env("OMPI_MCA_oob_tcp_keepalive_time", 300), i = job_env("OMPI_MCA_oob_tcp_keepalive_intvl", 20),
           p = job_env("OMPI_MCA_oob_tcp_keepalive_probes", 9); // OpenMPI 4's defaults
    *lo = *hi = 0.0;
    if (!job_openmpi()) return;
    *lo = t > 0 ? i * p : INFINITY;
    *hi = t > 0 ? t + i * p : INFINITY;
}
// The keepalive that fits a --comm-timeout: noticed 10-15 s after the watchdog fires.
static inline int job_keepalive_probes(double comm_timeout) { return (int)ceil((comm_timeout + 10.0) / 5.0); }

static inline void job_check_hosts(int nodes, double comm_timeout) {
    double lo, hi;
    job_keepalive(&lo, &hi);
    if (nodes < 2 || !job_openmpi() || (lo > comm_timeout && hi <= comm_timeout + 30.0)) return;
    fprintf(stderr, "warning: this job spans %d hosts and mpirun notices a lost one after %g-%g s (oob_tcp_keepalive_*): %s; "
                    "for --comm-timeout %g add `--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 5 "
                    "--mca oob_tcp_keepalive_probes %d` to mpirun\n", nodes, lo, hi,
            lo <= comm_timeout ? "before the watchdog could say which collective stopped"
                               : "after a network partition mpirun would wait that long to end",
            comm_timeout, job_keepalive_probes(comm_timeout));
}

static inline void job_sleep(double seconds) { // through signals
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

// The command name of process pid (its /proc comm), "" if unknown.
static inline void job_process_name(int pid, char *name, size_t n) {
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(name, (int)n, f)) name[0] = 0;
    if (f) fclose(f);
    name[strcspn(name, "\n")] = 0;
}
static inline int job_is_daemon(const char *name) { return !strcmp(name, "orted") || !strcmp(name, "prted"); }

static inline void job_abort(MPI_Comm comm, int nodes, int code) {
    fflush(stdout);
    fflush(stderr);
    if (nodes > 1 && job_openmpi()) {
        signal(SIGTERM, SIG_DFL); // the launcher's SIGTERM now ends this rank at once
        char parent[32];
        job_process_name((int)getppid(), parent, sizeof(parent));
        if (job_is_daemon(parent)) {
            job_sleep(2.0);
            kill(getppid(), SIGTERM);
            job_sleep(30.0); // (the daemon ends this rank meanwhile)
        } else {
            double lo, hi;
            job_keepalive(&lo, &hi);
            if (isfinite(hi)) job_sleep(hi + 5.0);
        }
    }
    MPI_Abort(comm, code);
}

#endif // JOB_H
