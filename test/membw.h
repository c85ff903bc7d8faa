// membw.h: this machine's memory bandwidth as the benchmarks compare against it: GB/s of
// x[i] = x[i] * 0.5 + 0.5 over 1 GiB in place (4 bytes read and 4 written per element) on all
// OpenMP threads, best of 3; NAN when 1 GiB cannot be had. For test programs (bench_optimizer,
// test_gemm_bf16's floor); no global state.
#ifndef TEST_MEMBW_H
#define TEST_MEMBW_H

#include <math.h>
#include <stdlib.h>
#include <time.h>

static inline double membw_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline double bench_memory_gbs(void) {
    size_t n = (size_t)1 << 28;
    float *x = (float *)malloc(n * sizeof(float));
    if (!x) return NAN;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    double best = INFINITY;
    for (int r = 0; r < 3; r++) {
        double t0 = membw_now();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) x[i] = x[i] * 0.5f + 0.5f;
        double dt = membw_now() - t0;
        if (dt < best) best = dt;
    }
    free(x);
    return 2.0 * n * sizeof(float) / best * 1e-9;
}

#endif // TEST_MEMBW_H
