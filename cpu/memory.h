// cpu/memory.h: the CPU trainer's memory: zeroed, aligned allocations for its buffers and a
// zeroing that uses every core.
//
// Contract
//   - xcalloc_bytes(bytes) / xcalloc_floats(n): zeroed memory, freed with free(). Page-aligned
//     (4096: zero.h reads and writes NVMe with direct I/O into it); blocks of 2 MB and more are
//     2 MB-aligned, rounded up to whole 2 MB, and asked to be backed by transparent huge pages
//     (a hint: where the kernel says no, pages stay 4 KB). Out of memory: one line naming the
//     size, exit 1.
//   - zero_bytes(p, bytes): p[0..bytes) = 0, in 1 MB chunks over the OpenMP team.
// CPU trainer only (C11, OpenMP); no global state.
#ifndef CPU_MEMORY_H
#define CPU_MEMORY_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// Why huge pages: the kernels stream through hundreds of MB (AdamW, the LM head's weights and
// logits, whose rows lie 200 KB apart), and with 4 KB pages spend a good part of that in TLB misses.
#define HUGE_PAGE ((size_t)2 << 20)
static void *xcalloc_bytes(size_t bytes) {
    void *p = NULL;
    size_t align = bytes < HUGE_PAGE ? 4096 : HUGE_PAGE;
    size_t rounded = bytes < HUGE_PAGE ? (bytes ? bytes : 1) : (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, align, rounded) != 0) {
        fprintf(stderr, "error: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    if (align == HUGE_PAGE) madvise(p, rounded, MADV_HUGEPAGE);
    memset(p, 0, bytes);
    return p;
}
static float *xcalloc_floats(size_t n) { return (float *)xcalloc_bytes(n * sizeof(float)); }

// Zeroing is memory-bound (gradient accumulators of hundreds of MB): one memset per thread on
// large buffers, so that the second core's bandwidth is not left idle.
static void zero_bytes(void *p, size_t bytes) {
    size_t chunk = (size_t)1 << 20, nchunks = (bytes + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t i = 0; i < nchunks; i++) memset((char *)p + i * chunk, 0, i + 1 < nchunks ? chunk : bytes - i * chunk);
}

#endif // CPU_MEMORY_H
