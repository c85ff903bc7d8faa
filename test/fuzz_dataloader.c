// Fuzz target for everything that parses untrusted data files: the shard header
// check, the data loader end to end (init, batches, state save/restore) and the
// tokenizer file reader.
//
// Built two ways:
//   make fuzz                          clang -fsanitize=fuzzer,address,undefined -DZERO_LIBFUZZER:
//                                      libFuzzer drives it; crashing inputs land in test/fuzz_regressions/
//   make test/bin/fuzz_dataloader_asan gcc + sanitizers with the replay main() below, which the
//                                      suite runs over test/fuzz_regressions/ and test/fuzz_seeds/
// Most inputs make the loader print an error line; `make fuzz` passes
// -close_fd_mask=2 so they do not flood the terminal (libFuzzer keeps its own
// output and crash reports on a duplicate of stderr).
//
// Input layout: 8 control bytes, then file contents.
//   [0] bit 0: 0 = loader, 1 = tokenizer; bit 1: split the contents into two shards
//   [1] B - 1 (mod 4)   [2] T - 1 (mod 32)   [3] world - 1 (mod 4), rank = [3]>>2 mod world
//   [4] bit 0: shuffle, the rest the seed   [5] vocab: 0 = 50257, else [5]*256
//   [6..7] where to split the contents (little-endian, mod length)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataloader.h"
#include "data/tokenizer.h"

static char fuzz_dir[256];

static void remove_fuzz_dir(void) {
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0) fprintf(stdout, "could not remove %s\n", fuzz_dir);
}

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(p, 1, n, f) != n) abort();
    fclose(f);
}

static void fuzz_loader(const uint8_t *c, const uint8_t *data, size_t size) {
    int B = (c[1] & 3) + 1, T = (c[2] & 31) + 1, world = (c[3] & 3) + 1, rank = (c[3] >> 2) % world;
    int shuffle = c[4] & 1, vocab = c[5] ? c[5] * 256 : 50257;
    uint64_t seed = c[4] >> 1;
    char a[300], b[300], pattern[300];
    snprintf(a, sizeof(a), "%s/s_0.bin", fuzz_dir);
    snprintf(b, sizeof(b), "%s/s_1.bin", fuzz_dir);
    snprintf(pattern, sizeof(pattern), "%s/s_*.bin", fuzz_dir);
    size_t cut = size;
    if (c[0] & 2) cut = size ? (size_t)(c[6] | c[7] << 8) % size : 0;
    write_file(a, data, cut);
    if (c[0] & 2) write_file(b, data + cut, size - cut);
    else unlink(b);

    // The pure header check on the raw bytes, as if they were one whole file.
    char msg[256];
    uint64_t ntok = 0;
    if (dl_check_header(data, size, T, &ntok, msg, sizeof(msg)) == 0 && 1024 + 2 * ntok != size) abort();

    DataLoader dl;
    if (dataloader_init(&dl, pattern, B, T, rank, world, shuffle, seed, vocab) != 0) return;
    int *in = (int *)malloc(sizeof(int) * (size_t)B * T), *tg = (int *)malloc(sizeof(int) * (size_t)B * T);
    // A bit more than two epochs, so every path (shard switch, epoch roll) runs.
    uint64_t calls = 2 * dataloader_num_batches(&dl) + 2;
    if (calls > 64) calls = 64;
    DataLoaderState mid = dataloader_state(&dl);
    int ok = 1;
    for (uint64_t k = 0; k < calls && ok; k++) {
        if (k == calls / 2) mid = dataloader_state(&dl);
        ok = dataloader_next(&dl, in, tg) == 0;
        for (int i = 0; ok && i < B * T; i++)
            if (in[i] < 0 || in[i] >= vocab || tg[i] < 0 || tg[i] >= vocab) abort(); // a silently wrong batch
    }
    if (ok && dataloader_restore(&dl, &mid) != 0) abort(); // its own state must always fit
    dataloader_free(&dl);
    free(in);
    free(tg);
}

static void fuzz_tokenizer(const uint8_t *data, size_t size) {
    char path[300];
    snprintf(path, sizeof(path), "%s/tok.bin", fuzz_dir);
    write_file(path, data, size);
    Tokenizer t;
    if (tokenizer_init(&t, path) != 0) return;
    static FILE *sink = NULL;
    if (!sink) sink = fopen("/dev/null", "w");
    for (int id = -1; id <= t.vocab_size; id++) {
        int len = -1;
        const char *p = tokenizer_decode_len(&t, id, &len);
        if ((p == NULL) != (id < 0 || id >= t.vocab_size)) abort();
        if (p && (len < 1 || len > 255 || strlen(p) > (size_t)len)) abort();
        tokenizer_print(&t, id, sink);
    }
    tokenizer_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/zero_fuzz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(fuzz_dir)) abort();
        atexit(remove_fuzz_dir);
    }
    if (size < 8) return 0;
    if (data[0] & 1) fuzz_tokenizer(data + 8, size - 8);
    else fuzz_loader(data, data + 8, size - 8);
    return 0;
}

#include "fuzz_replay.h" // main() for replaying inputs in the suite
