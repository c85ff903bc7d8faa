// Unit tests of dataloader.h against facts computed here independently of it.
//
// Synthetic shards make every sequence identifiable: token i of shard s is
// s*4096 + i, so a batch row's first token names the shard and offset it came
// from, and the rest of the row must count up from it. The expected stream in
// file order is built directly from the files written, not from the loader.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dataloader.h"

static int failures = 0;
#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            if (failures > 20) exit(1);                                   \
        }                                                                 \
    } while (0)

enum { T = 4, VOCAB = 65536, MAX_ITEMS = 4096 };
static char dir[256];
static char pattern[300];

// Written out of name order on purpose: the loader must sort.
static const char *names[] = {"shard_c.bin", "shard_a.bin", "shard_b.bin"};
static const int ntok[] = {1 + 3 * T + (T - 1), 1 + 5 * T + 2, 1 + 8 * T}; // 3, 5, 8 sequences
// In sorted name order a, b, c: shard ids (the s in s*4096) and sequence counts.
static const int sorted_id[] = {1, 2, 0};
static const int sorted_nseq[] = {5, 8, 3};
enum { S = 16 };

static void write_shard(const char *path, const uint16_t *tokens, int n) {
    int32_t header[256] = {0};
    header[0] = 20240520;
    header[1] = 1;
    header[2] = n;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(header, 4, 256, f) != 256 || fwrite(tokens, 2, (size_t)n, f) != (size_t)n) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

// An item is identified by its first token; -1 marks a row that is not a
// contiguous run of one shard's tokens.
static int row_id(const int *in, const int *tg) {
    for (int t = 0; t < T; t++) {
        if (in[t] != in[0] + t || tg[t] != in[0] + t + 1) return -1;
    }
    return in[0];
}

// Reads `calls` batches, appending item ids to out. Returns the count.
static int read_items(DataLoader *dl, int calls, int *out) {
    int B = dl->B, n = 0;
    int *in = (int *)malloc(sizeof(int) * B * T), *tg = (int *)malloc(sizeof(int) * B * T);
    for (int c = 0; c < calls; c++) {
        int rc = dataloader_next(dl, in, tg);
        CHECK(rc == 0, "dataloader_next failed at call %d", c);
        for (int b = 0; b < B; b++) {
            int id = row_id(in + b * T, tg + b * T);
            CHECK(id >= 0, "row %d of call %d is not a contiguous sequence", b, c);
            out[n++] = id;
        }
    }
    free(in);
    free(tg);
    return n;
}

static int open_loader(DataLoader *dl, int B, int rank, int world, int shuffle, uint64_t seed) {
    int rc = dataloader_init(dl, pattern, B, T, rank, world, shuffle, seed, VOCAB);
    CHECK(rc == 0, "init failed");
    return rc;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

// -------------------------------------------------------------------------

static void test_file_order(void) {
    int expect[S], k = 0;
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < sorted_nseq[f]; i++) expect[k++] = sorted_id[f] * 4096 + i * T;
    CHECK(k == S, "setup");
    for (int B = 1; B <= 5; B++) {
        DataLoader dl;
        if (open_loader(&dl, B, 0, 1, 0, 0)) return;
        CHECK(dataloader_num_tokens(&dl) == (uint64_t)(ntok[0] + ntok[1] + ntok[2]), "token total");
        static int got[MAX_ITEMS];
        int n = read_items(&dl, 3 * S, got); // three epochs and a bit, crossing boundaries mid-batch
        for (int g = 0; g < n; g++) CHECK(got[g] == expect[g % S], "B=%d item %d: got %d want %d", B, g, got[g], expect[g % S]);
        dataloader_free(&dl);
    }
    // The batch that crosses the epoch boundary, spelled out: B=5, call 3 is items 15..19.
    DataLoader dl;
    if (open_loader(&dl, 5, 0, 1, 0, 0)) return;
    int got[20];
    read_items(&dl, 4, got);
    CHECK(got[15] == 0 * 4096 + 2 * T, "last sequence of shard_c ends epoch 0");
    CHECK(got[16] == 1 * 4096 && got[19] == 1 * 4096 + 3 * T, "epoch 1 starts over at shard_a");
    DataLoaderState st = dataloader_state(&dl);
    CHECK(st.epoch == 1 && st.position == 4, "state after 20 items: epoch %llu position %llu",
          (unsigned long long)st.epoch, (unsigned long long)st.position);
    dataloader_free(&dl);
}

static void test_shuffle(void) {
    enum { EPOCHS = 12 };
    static int a[EPOCHS * S], b[EPOCHS * S], c[EPOCHS * S];
    DataLoader dl;
    if (open_loader(&dl, 1, 0, 1, 1, 1234)) return;
    read_items(&dl, EPOCHS * S, a);
    dataloader_free(&dl);
    if (open_loader(&dl, 1, 0, 1, 1, 1234)) return;
    read_items(&dl, EPOCHS * S, b);
    dataloader_free(&dl);
    if (open_loader(&dl, 1, 0, 1, 1, 1235)) return;
    read_items(&dl, EPOCHS * S, c);
    dataloader_free(&dl);

    CHECK(memcmp(a, b, sizeof(a)) == 0, "same seed, same stream");
    CHECK(memcmp(a, c, sizeof(a)) != 0, "different seed, different stream");
    int file_order[S], k = 0, distinct_epochs = 0, shard_orders = 0;
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < sorted_nseq[f]; i++) file_order[k++] = sorted_id[f] * 4096 + i * T;
    int seen_order[9] = {0};
    for (int e = 0; e < EPOCHS; e++) {
        int *ep = a + e * S, sorted[S];
        memcpy(sorted, ep, sizeof(sorted));
        qsort(sorted, S, sizeof(int), cmp_int);
        int want[S];
        memcpy(want, file_order, sizeof(want));
        qsort(want, S, sizeof(int), cmp_int);
        CHECK(memcmp(sorted, want, sizeof(want)) == 0, "epoch %d is a permutation of all sequences", e);
        if (e > 0 && memcmp(ep, a + (e - 1) * S, sizeof(int) * S) != 0) distinct_epochs++;
        // Shards come whole: the shard id changes exactly twice per epoch.
        int changes = 0;
        for (int i = 1; i < S; i++) changes += ep[i] / 4096 != ep[i - 1] / 4096;
        CHECK(changes == 2, "epoch %d: each shard's sequences are contiguous (%d changes)", e, changes);
        int order = (ep[0] / 4096) * 3 + ep[S - 1] / 4096; // first and last shard name the order
        if (!seen_order[order]) shard_orders++;
        seen_order[order] = 1;
    }
    CHECK(memcmp(a, file_order, sizeof(file_order)) != 0, "shuffled epoch 0 differs from file order");
    CHECK(distinct_epochs == EPOCHS - 1, "every epoch is shuffled anew (%d of %d differ)", distinct_epochs, EPOCHS - 1);
    CHECK(shard_orders >= 3, "shard order varies across epochs (%d distinct)", shard_orders);
}

static void test_distributed(void) {
    for (int shuffle = 0; shuffle <= 1; shuffle++)
        for (int N = 1; N <= 4; N++)
            for (int B = 1; B <= 3; B++) {
                enum { A = 9 }; // calls per rank: N*A*B crosses at least one epoch for N*B >= 2
                static int ref[MAX_ITEMS], mine[MAX_ITEMS], all[MAX_ITEMS], refs[MAX_ITEMS];
                DataLoader one;
                if (open_loader(&one, B, 0, 1, shuffle, 7)) return;
                int nref = read_items(&one, N * A, ref);
                dataloader_free(&one);

                int nall = 0;
                for (int r = 0; r < N; r++) {
                    DataLoader dl;
                    if (open_loader(&dl, B, r, N, shuffle, 7)) return;
                    int n = read_items(&dl, A, mine);
                    // Rank r's k-th batch is the single process's batch k*N + r.
                    for (int k = 0; k < A; k++)
                        for (int b = 0; b < B; b++)
                            CHECK(mine[k * B + b] == ref[(k * N + r) * B + b],
                                  "shuffle=%d N=%d B=%d rank %d call %d row %d", shuffle, N, B, r, k, b);
                    memcpy(all + nall, mine, sizeof(int) * n);
                    nall += n;
                    dataloader_free(&dl);
                }
                // Together: the same multiset of sequences as the single process.
                CHECK(nall == nref, "item counts");
                memcpy(refs, ref, sizeof(int) * nref);
                qsort(refs, nref, sizeof(int), cmp_int);
                qsort(all, nall, sizeof(int), cmp_int);
                CHECK(memcmp(refs, all, sizeof(int) * nall) == 0, "shuffle=%d N=%d B=%d union", shuffle, N, B);

                // Within one epoch the ranks never read the same sequence.
                int steps = S / (N * B), n = 0;
                for (int r = 0; r < N; r++) {
                    DataLoader dl;
                    if (open_loader(&dl, B, r, N, shuffle, 7)) return;
                    n += read_items(&dl, steps, all + n);
                    dataloader_free(&dl);
                }
                qsort(all, n, sizeof(int), cmp_int);
                for (int i = 1; i < n; i++) CHECK(all[i] != all[i - 1], "N=%d B=%d: sequence %d read twice", N, B, all[i]);
            }
}

static void test_save_restore(void) {
    enum { AFTER = 25 }; // 25 calls of B=3 span more than four epochs of 16
    for (int world = 1; world <= 2; world++)
        for (int k = 0; k <= 12; k++) {
            static int want[MAX_ITEMS], got[MAX_ITEMS], scratch[MAX_ITEMS];
            DataLoaderState saved[2];
            unsigned char bytes[sizeof(DataLoaderState)];
            for (int r = 0; r < world; r++) {
                DataLoader dl;
                if (open_loader(&dl, 3, r, world, 1, 99)) return;
                read_items(&dl, k, scratch);
                saved[r] = dataloader_state(&dl);
                read_items(&dl, AFTER, want + r * AFTER * 3);
                dataloader_free(&dl);
            }
            if (world == 2) CHECK(memcmp(&saved[0], &saved[1], sizeof(DataLoaderState)) == 0, "ranks agree on the state");
            // Through bytes, as a checkpoint would carry it.
            memcpy(bytes, &saved[0], sizeof(bytes));
            for (int r = 0; r < world; r++) {
                DataLoader dl;
                if (open_loader(&dl, 3, r, world, 1, 99)) return;
                DataLoaderState s;
                memcpy(&s, bytes, sizeof(s));
                CHECK(dataloader_restore(&dl, &s) == 0, "restore");
                read_items(&dl, AFTER, got + r * AFTER * 3);
                dataloader_free(&dl);
            }
            CHECK(memcmp(want, got, sizeof(int) * world * AFTER * 3) == 0, "world=%d resumed after %d calls", world, k);
        }

    // A state restored mid-run into a loader that has already moved on.
    DataLoader dl;
    if (open_loader(&dl, 2, 0, 1, 1, 5)) return;
    int a[64], b[64];
    read_items(&dl, 7, a);
    DataLoaderState s = dataloader_state(&dl);
    read_items(&dl, 10, a);
    read_items(&dl, 3, b);
    CHECK(dataloader_restore(&dl, &s) == 0, "restore in place");
    read_items(&dl, 10, b);
    CHECK(memcmp(a, b, sizeof(int) * 20) == 0, "restore rewinds");
    dataloader_reset(&dl);
    read_items(&dl, 5, a);
    dataloader_free(&dl);
    if (open_loader(&dl, 2, 0, 1, 1, 5)) return;
    read_items(&dl, 5, b);
    CHECK(memcmp(a, b, sizeof(int) * 10) == 0, "reset returns to the very start");

    // States that do not belong to this loader are refused with a message.
    fprintf(stderr, "(expected error lines follow)\n");
    DataLoaderState bad = s;
    bad.seed++;
    CHECK(dataloader_restore(&dl, &bad) == -1, "other seed refused");
    bad = s;
    bad.T = 8;
    CHECK(dataloader_restore(&dl, &bad) == -1, "other T refused");
    bad = s;
    bad.magic = 0;
    CHECK(dataloader_restore(&dl, &bad) == -1, "garbage refused");
    bad = s;
    bad.position = S;
    CHECK(dataloader_restore(&dl, &bad) == -1, "position past the epoch refused");
    bad = s;
    bad.num_sequences = S + 1;
    CHECK(dataloader_restore(&dl, &bad) == -1, "other data refused");
    dataloader_free(&dl);
}

// A 12 GB shard set (sparse files: all tokens 0) must be served without reading
// it in: time and resident memory stay small.
static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

static void test_huge(void) {
    char path[400], pat[400];
    const int32_t n = 2000000000; // 4 GB of tokens per shard
    int made = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/huge_%d.bin", dir, i);
        int32_t header[256] = {0};
        header[0] = 20240520;
        header[1] = 1;
        header[2] = n;
        FILE *f = fopen(path, "wb");
        if (f && fwrite(header, 4, 256, f) == 256 && ftruncate(fileno(f), 1024 + 2 * (off_t)n) == 0) made++;
        if (f) fclose(f);
    }
    if (made != 3) {
        printf("huge: skipped (cannot make sparse files here)\n");
        return;
    }
    snprintf(pat, sizeof(pat), "%s/huge_*.bin", dir);
    long before = rss_kb();
    clock_t t0 = clock();
    DataLoader dl;
    int Th = 1024, B = 8;
    CHECK(dataloader_init(&dl, pat, B, Th, 0, 1, 1, 3, 50257) == 0, "init on 12 GB");
    int *in = (int *)malloc(sizeof(int) * B * Th), *tg = (int *)malloc(sizeof(int) * B * Th);
    for (int i = 0; i < 50; i++) CHECK(dataloader_next(&dl, in, tg) == 0, "next on 12 GB");
    CHECK(dataloader_num_tokens(&dl) == 3ull * (uint64_t)n, "huge token total");
    long after = rss_kb();
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("huge: 12 GB shard set, 50 batches of 8x1024 in %.2f s CPU, resident memory grew %ld KB\n", secs, after - before);
    // One shard's permutation is 2e9/1024 sequences * 4 bytes = 7.8 MB.
    CHECK(after - before < 64 * 1024, "resident memory grew by %ld KB", after - before);
    free(in);
    free(tg);
    dataloader_free(&dl);
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/huge_%d.bin", dir, i);
        unlink(path);
    }
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/dltest.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 2;
    }
    for (int f = 0; f < 3; f++) {
        static uint16_t tok[4096];
        for (int i = 0; i < ntok[f]; i++) tok[i] = (uint16_t)(f * 4096 + i);
        char path[400];
        snprintf(path, sizeof(path), "%s/%s", dir, names[f]);
        write_shard(path, tok, ntok[f]);
    }
    snprintf(pattern, sizeof(pattern), "%s/shard_*.bin", dir);

    test_file_order();
    test_shuffle();
    test_distributed();
    test_save_restore();
    test_huge();

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    if (failures) {
        printf("test_dataloader: %d checks failed\n", failures);
        return 1;
    }
    printf("test_dataloader: all checks passed\n");
    return 0;
}
