// cpu/openblas.h: OpenBLAS's kernels and threading, chosen when the process starts.
//
// Contract
//   - openblas_pick_core(argv): when the user set no OPENBLAS_CORETYPE and the kernels OpenBLAS
//     chose for this CPU leave out vector units it has, runs the program again (cpu_exec_self)
//     with OPENBLAS_CORETYPE naming better ones: "SkylakeX"
//     on a CPU with AVX-512 F/BW/VL/DQ whose chosen kernels have no AVX-512, "Haswell" on one
//     with AVX2 + FMA given the SSE3 "Prescott" ones. Debian's OpenBLAS 0.3.21 predates some
//     CPUs and gives Sapphire Rapids the Prescott kernels (5x slower matmuls). Returns only when
//     nothing needs to change or the execv failed (then the process carries on as it is).
//     An OPENBLAS_CORETYPE in the environment is kept, whatever it costs; openblas_report says
//     what (on this project's Zen 5 machine OPENBLAS_CORETYPE=Haswell made d12 B=4 T=64 fp32
//     steps 1.12 s against 0.68 s with OpenBLAS's own choice, Cooperlake).
//   - openblas_pick_threading(argv): when OpenBLAS is not its OpenMP build (Debian makes the
//     pthread build the default libopenblas.so.0), runs the program again with the OpenMP
//     build's directory first on LD_LIBRARY_PATH, once; ZEROC_OPENBLAS=keep keeps what was
//     loaded. The OpenMP build runs its matmuls on the OpenMP threads the kernels run on, instead
//     of a second pool of threads spinning against them on the same cores (d12 fp32: ~2x slower
//     steps).
//   - openblas_report(rank, threads): rank 0 prints one line when the OpenMP build had to be
//     switched to at run time, or when it is not loaded and two threads or more then compete;
//     and one when the user's OPENBLAS_CORETYPE leaves out vector units the CPU has.
//   - openblas_description(): "OpenBLAS 0.3.21, SkylakeX kernels, OpenMP build" (the trainer's
//     header row; a static buffer).
//   - cpu_exec_self(argv): runs this program again with the same argv and the environment as the
//     caller has set it (execv of the path /proc/self/exe points to: executed through the link
//     itself, the process would be named "exe" in ps and pgrep); returns only if execv failed.
//     The picks above use it, and so does cpu/mpi_backend.h.
// Call both picks before anything else starts (MPI, threads): they re-execute the process.
// CPU backend only (C11, POSIX); no state but the environment it reads and sets.
#ifndef CPU_OPENBLAS_H
#define CPU_OPENBLAS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>

// OpenBLAS's kernel sets that use AVX-512 (the names openblas_get_corename gives them).
static inline int openblas_core_is_avx512(const char *name) {
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    for (size_t i = 0; i < sizeof(avx512) / sizeof(*avx512); i++)
        if (!strcasecmp(name, avx512[i])) return 1;
    return 0;
}

// The OPENBLAS_CORETYPE that the CPU deserves over `chosen` (OpenBLAS's own choice), or NULL.
static inline const char *openblas_better_core(const char *chosen) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        return openblas_core_is_avx512(chosen) ? NULL : "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !strcasecmp(chosen, "prescott")) return "Haswell";
#else
    (void)chosen;
#endif
    return NULL;
}

static inline void cpu_exec_self(char **argv) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return;
    self[len] = 0;
    execv(self, argv);
}

static inline void openblas_pick_core(char **argv) {
    if (getenv("OPENBLAS_CORETYPE")) return; // the user's choice
    const char *core = openblas_better_core(openblas_get_corename());
    if (!core) return;
    setenv("OPENBLAS_CORETYPE", core, 1);
    cpu_exec_self(argv); // returns only on failure: then carry on with what OpenBLAS chose
}

static const char *const openblas_openmp_dirs[] = {"/usr/lib/x86_64-linux-gnu/openblas-openmp",
                                                   "/usr/lib/aarch64-linux-gnu/openblas-openmp"};
static const char *const openblas_threading[3] = {"single-threaded", "pthread", "OpenMP"}; // by openblas_get_parallel()
#define OPENBLAS_OPENMP 2
static inline const char *openblas_threading_name(void) {
    int p = openblas_get_parallel();
    return p >= 0 && p < 3 ? openblas_threading[p] : "unknown";
}

static inline void openblas_pick_threading(char **argv) {
    const char *choice = getenv("ZEROC_OPENBLAS");
    if (openblas_get_parallel() == OPENBLAS_OPENMP || (choice && *choice)) return; // "keep"; or "switched": once
    for (size_t i = 0; i < sizeof(openblas_openmp_dirs) / sizeof(*openblas_openmp_dirs); i++) {
        char lib[256], path[8192];
        snprintf(lib, sizeof(lib), "%s/libopenblas.so.0", openblas_openmp_dirs[i]);
        if (access(lib, R_OK) != 0) continue;
        const char *old = getenv("LD_LIBRARY_PATH");
        snprintf(path, sizeof(path), "%s%s%s", openblas_openmp_dirs[i], old && *old ? ":" : "", old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        setenv("ZEROC_OPENBLAS", "switched", 1);
        setenv("ZEROC_OPENBLAS_WAS", openblas_threading_name(), 1);
        cpu_exec_self(argv); // returns only on failure: then carry on with this one
        return;
    }
}

static inline const char *openblas_description(void) {
    static char buf[96];
    char version[32] = "?";
    sscanf(openblas_get_config(), "OpenBLAS %31s", version);
    snprintf(buf, sizeof(buf), "OpenBLAS %s, %s kernels, %s build", version, openblas_get_corename(), openblas_threading_name());
    return buf;
}

static inline void openblas_report(int rank, int threads) {
    const char *choice = getenv("ZEROC_OPENBLAS"), *was = getenv("ZEROC_OPENBLAS_WAS"), *core = getenv("OPENBLAS_CORETYPE");
    if (rank != 0) return;
    const char *better = core ? openblas_better_core(openblas_get_corename()) : NULL;
    if (better)
        printf("note: OPENBLAS_CORETYPE=%s keeps OpenBLAS's %s kernels, which leave out vector units this CPU has; "
               "unset it to let OpenBLAS choose (or set %s): the fp32 matmuls are faster\n", core, openblas_get_corename(), better);
    if (openblas_get_parallel() == OPENBLAS_OPENMP && choice && !strcmp(choice, "switched"))
        printf("note: OpenBLAS's %s build was loaded; switched to its OpenMP build at run time (a binary built "
               "before libopenblas0-openmp was installed: `make` relinks it)\n", was ? was : "?");
    else if (openblas_get_parallel() != OPENBLAS_OPENMP && threads > 1)
        printf("warning: OpenBLAS is its %s build, not the OpenMP one: its matmuls and the kernels' OpenMP threads "
               "compete for the cores (steps 2-4x slower); install libopenblas0-openmp (`make setup`) and run "
               "`make`%s\n", openblas_threading_name(), choice && !strcmp(choice, "keep") ? ", or unset ZEROC_OPENBLAS" : "");
}

#endif // CPU_OPENBLAS_H
