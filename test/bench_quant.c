// The quantizer's speed (core/quant.h, ZeRO++'s messages): GB/s of zq_quantize, zq_dequantize and
// zq_dequantize_add on the scalar path (the code before the AVX-512 path existed, kept as the
// portable one) and on the SIMD path, in bf16 and fp32, int8 and int4, block 2048, against this
// machine's memory bandwidth (test/membw.h's probe, read before and after the cases).
// Bytes counted per call: quantize reads n elements and writes the message; dequantize reads the
// message and writes n elements; dequantize_add reads the message and reads and writes n fp32.
// The two paths' outputs are also compared byte for byte (a mismatch fails the run).
//
//   test/bin/bench_quant [--n ELEMENTS] [--reps R]     (make bench-quant; OMP_NUM_THREADS applies)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "test/membw.h"
#include "core/quant.h"

typedef struct { double q, d, a; } Times;

static Times run(int path, void *msg, void *src, void *deq, float *acc, size_t n, int dtype, size_t block, int bits,
                 int reps) {
    Times best = {INFINITY, INFINITY, INFINITY};
    for (int r = 0; r < reps; r++) {
        double t0 = membw_now();
        zq_quantize_path(msg, src, n, dtype, block, bits, path);
        double t1 = membw_now();
        zq_dequantize_path(deq, dtype, NULL, msg, n, block, bits, path);
        double t2 = membw_now();
        zq_dequantize_path(NULL, ZC_F32, acc, msg, n, block, bits, path);
        double t3 = membw_now();
        if (t1 - t0 < best.q) best.q = t1 - t0;
        if (t2 - t1 < best.d) best.d = t2 - t1;
        if (t3 - t2 < best.a) best.a = t3 - t2;
    }
    return best;
}

int main(int argc, char **argv) {
    size_t n = (size_t)1 << 25, block = 2048;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else { fprintf(stderr, "bench_quant: unknown argument %s (usage: bench_quant [--n N] [--reps R])\n", argv[i]); return 2; }
    }
    if (n < 1 || reps < 1) { fprintf(stderr, "bench_quant: --n and --reps must be positive\n"); return 2; }
    double bw0 = bench_memory_gbs();
    printf("bench_quant: n %zu, block %zu, %d threads, best of %d; SIMD path: %s; memory probe %.1f GB/s\n", n, block,
           omp_get_max_threads(), reps, zq_simd_path(), bw0);
    float *x32 = (float *)malloc(n * 4), *acc = (float *)malloc(n * 4);
    void *src = malloc(n * 4), *deq = malloc(n * 4), *m0 = malloc(zq_bytes(n, block, 8)), *m1 = malloc(zq_bytes(n, block, 8));
    void *d0 = malloc(n * 4);
    if (!x32 || !acc || !src || !deq || !m0 || !m1 || !d0) { fprintf(stderr, "bench_quant: out of memory for n %zu\n", n); return 1; }
    uint64_t s = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        x32[i] = ((float)(s >> 40) / 16777216.0f - 0.5f) * (float)(1 + (i / block) % 5);
        acc[i] = 0.0f;
    }
    int bad = 0;
    const int dts[2] = {ZC_BF16, ZC_F32};
    for (int t = 0; t < 2; t++)
        for (int bits = 8; bits >= 4; bits -= 4) {
            int dt = dts[t];
            size_t es = zc_dtype_size(dt), mb = zq_bytes(n, block, bits);
            for (size_t i = 0; i < n; i++) zc_store(src, i, x32[i], dt);
            Times sc = run(ZQ_SCALAR, m0, src, d0, acc, n, dt, block, bits, reps);
            Times si = run(ZQ_SIMD, m1, src, deq, acc, n, dt, block, bits, reps);
            if (memcmp(m0, m1, mb) || memcmp(d0, deq, n * es)) { printf("MISMATCH between the paths\n"); bad = 1; }
            double bq = (double)(n * es + mb), bd = (double)(mb + n * es), ba = (double)(mb + 8 * n);
            printf("%-4s int%d  quantize %6.2f -> %6.2f GB/s (%4.1fx)  dequantize %6.2f -> %6.2f GB/s (%4.1fx)  "
                   "dequantize_add %6.2f -> %6.2f GB/s (%4.1fx)   [scalar -> simd]\n",
                   zc_dtype_names[dt], bits, bq / sc.q * 1e-9, bq / si.q * 1e-9, sc.q / si.q, bd / sc.d * 1e-9,
                   bd / si.d * 1e-9, sc.d / si.d, ba / sc.a * 1e-9, ba / si.a * 1e-9, sc.a / si.a);
        }
    printf("memory probe after: %.1f GB/s (x = 0.5x + 0.5 over 1 GiB, read + write)\n", bench_memory_gbs());
    free(x32); free(acc); free(src); free(deq); free(m0); free(m1); free(d0);
    return bad;
}
