// preempt.h: stopping a run cleanly on a signal, every rank after the same step.
//
// Contract
//   preempt_install() catches SIGTERM (what Slurm sends at the time limit, and mpirun to its
//   ranks when it is itself terminated), SIGINT (Ctrl-C), SIGUSR1 and SIGUSR2 (mpirun forwards
//   these two to every rank; Slurm's --signal sends one ahead of the limit). The handler only
//   records the signal. SIGINT's handler is reset as it runs, so a second Ctrl-C ends the process
//   at once, as Ctrl-C does without it.
//   preempt_agree(be) is called by every rank at each step boundary: one sum of one number
//   over the ranks, so that when any rank has been signalled, every rank learns it after the same
//   step (the trainer then saves and exits 0). Returns how many ranks were signalled (0: go on).
//   preempt_signal() is this rank's signal (0: none); preempt_signal_name() names one.
// The one piece of global state is the signal's number: a handler has nowhere else to put it.
#ifndef PREEMPT_H
#define PREEMPT_H

#include <signal.h>
#include <string.h>
#include "zero.h"

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

static inline int preempt_agree(const ZeroBackend *be) {
    double n = preempt_caught ? 1.0 : 0.0;
    be->sum_doubles(be->ctx, &n, 1);
    return (int)n;
}

#endif // PREEMPT_H
