// A thin command line over dataloader.h, so shell tests can feed it bad files
// and check what a trainer would see: exit status and the error line.
//
//   dataloader_cli PATTERN B T [--batches K] [--world N --rank R] [--shuffle SEED] [--vocab V]
//
// Reads K batches (default: one epoch's worth), prints "ok <batches> <tokens> <checksum>"
// and exits 0, or exits 1 after the loader's one error line.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataloader.h"

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s PATTERN B T [--batches K] [--world N --rank R] [--shuffle SEED] [--vocab V]\n", argv[0]);
        return 2;
    }
    const char *pattern = argv[1];
    int B = atoi(argv[2]), T = atoi(argv[3]), world = 1, rank = 0, shuffle = 0, vocab = 50257;
    long batches = -1;
    uint64_t seed = 0;
    for (int i = 4; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--batches")) batches = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--world")) world = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rank")) rank = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shuffle")) shuffle = 1, seed = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--vocab")) vocab = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    DataLoader dl;
    if (dataloader_init(&dl, pattern, B, T, rank, world, shuffle, seed, vocab) != 0) return 1;
    if (batches < 0) batches = (long)dataloader_num_batches(&dl);
    int *in = (int *)malloc(sizeof(int) * (size_t)B * T), *tg = (int *)malloc(sizeof(int) * (size_t)B * T);
    uint64_t sum = 1469598103934665603ULL; // FNV-1a over the batches, to compare runs
    for (long k = 0; k < batches; k++) {
        if (dataloader_next(&dl, in, tg) != 0) {
            free(in);
            free(tg);
            dataloader_free(&dl);
            return 1;
        }
        for (int i = 0; i < B * T; i++) sum = (sum ^ ((uint64_t)in[i] << 16 | (uint64_t)tg[i])) * 1099511628211ULL;
    }
    printf("ok %ld %llu %016llx\n", batches, (unsigned long long)dataloader_num_tokens(&dl), (unsigned long long)sum);
    free(in);
    free(tg);
    dataloader_free(&dl);
    return 0;
}
