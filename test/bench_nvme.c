// bench_nvme: core/nvme.h's direct I/O against the disk, the way zero.h drives it: a file written
// and then read in pieces, several pieces in flight, each split into block-sized requests that the
// pool's threads run at once.
//
//   test/bin/bench_nvme DIR GBYTES THREADS BLOCK_BYTES [PIECE_BYTES] [INFLIGHT]
// prints one line: write and read GB/s (1 GB = 1e9 bytes), and whether O_DIRECT took.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/nvme.h"

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s DIR GBYTES THREADS BLOCK_BYTES [PIECE_BYTES] [INFLIGHT]\n", argv[0]);
        return 1;
    }
    const char *dir = argv[1];
    size_t total = (size_t)(atof(argv[2]) * 1e9), block = (size_t)atol(argv[4]);
    int threads = atoi(argv[3]);
    size_t piece = argc > 5 ? (size_t)atol(argv[5]) : (size_t)64 << 20;
    int inflight = argc > 6 ? atoi(argv[6]) : 2;
    piece = (piece + NVME_ALIGN - 1) / NVME_ALIGN * NVME_ALIGN;
    total = total / piece * piece;
    if (inflight < 1 || inflight > 16 || !total) { fprintf(stderr, "error: bad sizes\n"); return 1; }
    Nvme io;
    char err[600];
    if (nvme_open(&io, dir, threads, block, err, sizeof(err))) { fprintf(stderr, "error: %s\n", err); return 1; }
    int f = nvme_file(&io, "bench.bin", total);
    if (f < 0) { fprintf(stderr, "error: %s\n", io.err); nvme_close(&io, 1); return 1; }
    char *buf[16];
    for (int i = 0; i < inflight; i++) {
        if (posix_memalign((void **)&buf[i], NVME_ALIGN, piece)) return 1;
        memset(buf[i], i + 1, piece);
    }
    double rate[2];
    for (int writing = 1; writing >= 0; writing--) {
        int ticket[16];
        for (int i = 0; i < inflight; i++) ticket[i] = -1;
        double t0 = nvme_now();
        size_t k = 0;
        for (size_t at = 0; at < total; at += piece, k++) {
            int s = (int)(k % (size_t)inflight);
            if (nvme_wait(&io, ticket[s])) { fprintf(stderr, "error: %s\n", io.err); return 1; }
            ticket[s] = nvme_submit(&io, f, buf[s], piece, at, writing, 0);
        }
        for (int i = 0; i < inflight; i++)
            if (nvme_wait(&io, ticket[i])) { fprintf(stderr, "error: %s\n", io.err); return 1; }
        if (writing) fdatasync(io.fd[f]);
        rate[writing] = (double)total / (nvme_now() - t0) / 1e9;
    }
    printf("threads %2d block %8zu piece %9zu inflight %d: write %.2f GB/s, read %.2f GB/s (%s)\n", threads, block, piece,
           inflight, rate[1], rate[0], io.direct ? "O_DIRECT" : "buffered: no O_DIRECT here");
    for (int i = 0; i < inflight; i++) free(buf[i]);
    nvme_close(&io, 1);
    return 0;
}
