/*
dataloader.h: serves training batches from llm.c-format token shards.

A shard is a file: int32 header[256] = {20240520 magic, 1 version, token count, ...}
then that many uint16 tokens, little-endian. data/prepare.mjs writes them.

The model of the data, from which everything else follows:

  - Sequence i of a shard is its tokens [i*T, i*T + T], T+1 tokens: the first T are
    inputs, the last T are targets. Consecutive sequences share one token, so a
    shard of n tokens holds (n-1)/T sequences and wastes at most T-1 at its end.
  - An epoch is one pass over every sequence of every shard. With shuffling, the
    shard order is a permutation drawn from (seed, epoch), and the sequence order
    inside each shard is a permutation drawn from (seed, epoch, shard). Without it,
    shards come in sorted file name order and sequences in file order.
  - Epochs are laid end to end into one endless global stream of sequences. Item g
    of the stream is item g mod S of epoch g / S, where S is the number of
    sequences in an epoch.
  - The k-th call on rank r of world N returns stream items [(k*N + r)*B, +B).
    So N ranks making A calls each consume exactly the items one process makes in
    N*A calls with the same B, disjointly; a batch that crosses a shard or an epoch
    boundary simply continues in the next shard or epoch.

Because the permutations are pure functions of (seed, epoch, shard), the whole
position is one number: the stream index of the next call. DataLoaderState stores
it as (epoch, position within the epoch) plus enough to recognize the data it
belongs to; restoring it replays exactly the batches an uninterrupted run sees, on
any rank count and batch size.

Shards are memory-mapped one at a time, at first use, so a 10 GB shard set costs
one shard of address space and only the pages actually read; the only
per-sequence memory is the current shard's permutation (4 bytes a sequence).
Token ids are checked against the vocabulary as they are copied out, since
checking every token at start would mean reading the whole data set.

Errors print exactly one line "error: <file or pattern>: <reason>" on stderr and
return -1: the caller decides to exit. Nothing here aborts or exits.

Single header, no global state; every function is static inline (inline only so
a program that uses part of the API compiles warning-free). Compiles as C11 and
as CUDA C++; uses POSIX (glob, mmap), so C builds need -D_GNU_SOURCE as the
Makefile passes. Assumes a little-endian host, like the file format.
*/
#ifndef DATALOADER_H
#define DATALOADER_H

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DL_SHARD_MAGIC 20240520
#define DL_SHARD_VERSION 1
#define DL_HEADER_BYTES (256 * 4)
// "ZERODL01": a state from anything else (or a garbled checkpoint) is refused.
#define DL_STATE_MAGIC 0x3130444C4F52455AULL

// The position in the data, written to checkpoints as raw bytes. Only uint64_t
// fields, so the layout has no padding and is the same under every compiler.
typedef struct {
    uint64_t magic;
    uint64_t epoch;         // epochs completed by the global stream
    uint64_t position;      // next stream item within the epoch (the same on every rank)
    // What the position is relative to; restore refuses a state that does not match.
    uint64_t seed;
    uint64_t shuffle;
    uint64_t T;
    uint64_t num_sequences; // per epoch
    uint64_t num_shards;
} DataLoaderState;

typedef struct {
    char *path;
    uint64_t num_tokens;
    uint64_t num_sequences;
} DataLoaderShard;

typedef struct {
    int B, T, rank, world, shuffle, vocab_size;
    uint64_t seed;
    char *pattern;
    int num_shards;
    DataLoaderShard *shards;   // in sorted file name order
    uint64_t num_tokens;       // all shards
    uint64_t num_sequences;    // all shards: the length S of an epoch
    uint64_t next;             // stream index of item 0 of rank 0's next batch
    // The shard order of one epoch, and where each shard's items begin in it.
    uint64_t order_epoch;      // UINT64_MAX until computed
    int *order;                // num_shards
    uint64_t *order_start;     // num_shards + 1
    // The shard in use: its mapping and its sequence permutation.
    int cur;                   // index into order[], -1 when nothing is mapped
    uint64_t cur_epoch;
    void *map;
    size_t map_bytes;
    const uint16_t *tokens;
    uint32_t *perm;            // NULL when not shuffling
    uint64_t perm_cap;
} DataLoader;

// ----------------------------------------------------------------------------
// Randomness: SplitMix64. Permutations are derived from hashes of (seed, epoch,
// shard) rather than from a generator advanced through the run, so any position
// can be reached without replaying what came before it.

static inline uint64_t dl_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t dl_rand64(uint64_t *state) {
    *state += 0x9E3779B97F4A7C15ULL;
    return dl_mix64(*state);
}

// Uniform in [0, n) without modulo bias: reject the top sliver of the 64-bit
// range that does not divide evenly by n.
static inline uint64_t dl_rand_below(uint64_t *state, uint64_t n) {
    uint64_t threshold = (0 - n) % n; // == 2^64 mod n
    for (;;) {
        uint64_t r = dl_rand64(state);
        if (r >= threshold) return r % n;
    }
}

// stream: which permutation of the epoch; the shard order uses UINT64_MAX.
static inline uint64_t dl_perm_seed(uint64_t seed, uint64_t epoch, uint64_t stream) {
    uint64_t h = dl_mix64(seed + 0x9E3779B97F4A7C15ULL);
    h = dl_mix64(h ^ (epoch + 0x632BE59BD9B4E019ULL));
    return dl_mix64(h ^ (stream + 0x85EBCA77C2B2AE63ULL));
}

// strdup is POSIX, not C11; this keeps the header independent of feature macros.
static inline char *dl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

// ----------------------------------------------------------------------------
// Shard files

// Checks one shard's header against its size. 0 ok; -1 with the reason in msg.
// Kept separate from any I/O so the fuzzer and the loader share it.
static inline int dl_check_header(const unsigned char *header, uint64_t file_bytes, int T,
                                  uint64_t *num_tokens, char *msg, size_t msg_len) {
    if (file_bytes < DL_HEADER_BYTES) {
        snprintf(msg, msg_len, "file is %llu bytes, shorter than the %d-byte shard header",
                 (unsigned long long)file_bytes, DL_HEADER_BYTES);
        return -1;
    }
    int32_t h[3];
    memcpy(h, header, sizeof(h));
    if (h[0] != DL_SHARD_MAGIC) {
        snprintf(msg, msg_len, "bad magic %d in header (expected %d): not a token shard", (int)h[0], DL_SHARD_MAGIC);
        return -1;
    }
    if (h[1] != DL_SHARD_VERSION) {
        snprintf(msg, msg_len, "unsupported shard version %d (expected %d)", (int)h[1], DL_SHARD_VERSION);
        return -1;
    }
    uint64_t payload = file_bytes - DL_HEADER_BYTES;
    if (h[2] < 0 || payload != 2 * (uint64_t)h[2]) {
        snprintf(msg, msg_len, "header says %d tokens but the file holds %llu bytes of tokens (%s)", (int)h[2],
                 (unsigned long long)payload, payload % 2 ? "odd byte count" : "truncated or padded");
        return -1;
    }
    if ((uint64_t)h[2] < (uint64_t)T + 1) {
        snprintf(msg, msg_len, "%d tokens, shorter than one sequence of T+1 = %d tokens", (int)h[2], T + 1);
        return -1;
    }
    *num_tokens = (uint64_t)h[2];
    return 0;
}

// Reads and checks a shard's header without mapping it.
static inline int dl_scan_shard(DataLoaderShard *s, int T) {
    char msg[256];
    unsigned char header[DL_HEADER_BYTES];
    int fd = open(s->path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "error: %s: cannot open: %s\n", s->path, strerror(errno));
        return -1;
    }
    struct stat st;
    int rc = -1;
    if (fstat(fd, &st) != 0) {
        snprintf(msg, sizeof(msg), "cannot stat: %s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(msg, sizeof(msg), "not a regular file");
    } else {
        uint64_t size = (uint64_t)st.st_size;
        ssize_t got = size >= DL_HEADER_BYTES ? read(fd, header, DL_HEADER_BYTES) : 0;
        if (size >= DL_HEADER_BYTES && got != DL_HEADER_BYTES) {
            snprintf(msg, sizeof(msg), "cannot read header: %s", got < 0 ? strerror(errno) : "short read");
        } else if (dl_check_header(header, size, T, &s->num_tokens, msg, sizeof(msg)) == 0) {
            s->num_sequences = (s->num_tokens - 1) / (uint64_t)T;
            rc = 0;
        }
    }
    close(fd);
    if (rc != 0) fprintf(stderr, "error: %s: %s\n", s->path, msg);
    return rc;
}

static inline void dl_unmap(DataLoader *dl) {
    if (dl->map) munmap(dl->map, dl->map_bytes);
    dl->map = NULL;
    dl->tokens = NULL;
    dl->cur = -1;
}

// Maps shard order[j] of the current epoch and draws its sequence permutation.
static inline int dl_open_shard(DataLoader *dl, uint64_t epoch, int j) {
    dl_unmap(dl);
    const DataLoaderShard *s = &dl->shards[dl->order[j]];
    int fd = open(s->path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "error: %s: cannot open: %s\n", s->path, strerror(errno));
        return -1;
    }
    // The file was checked at init, but a run lasts days: if it changed since,
    // reading it would run off the end of the mapping.
    struct stat st;
    size_t bytes = DL_HEADER_BYTES + 2 * (size_t)s->num_tokens;
    if (fstat(fd, &st) != 0) st.st_size = -1;
    if ((uint64_t)st.st_size != bytes) {
        fprintf(stderr, "error: %s: file changed size since the loader started (now %lld bytes, expected %llu)\n",
                s->path, (long long)st.st_size, (unsigned long long)bytes);
        close(fd);
        return -1;
    }
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); // the mapping keeps the file alive
    if (map == MAP_FAILED) {
        fprintf(stderr, "error: %s: cannot mmap: %s\n", s->path, strerror(errno));
        return -1;
    }
    // Shuffled reads jump around the file: read-ahead would only waste I/O.
    madvise(map, bytes, dl->shuffle ? MADV_RANDOM : MADV_SEQUENTIAL);
    dl->map = map;
    dl->map_bytes = bytes;
    dl->tokens = (const uint16_t *)((const char *)map + DL_HEADER_BYTES);
    dl->cur = j;
    dl->cur_epoch = epoch;
    if (dl->shuffle) {
        uint64_t n = s->num_sequences;
        if (n > dl->perm_cap) {
            free(dl->perm);
            dl->perm = (uint32_t *)malloc(n * sizeof(uint32_t));
            if (!dl->perm) {
                fprintf(stderr, "error: %s: out of memory for a %llu-sequence permutation\n", s->path,
                        (unsigned long long)n);
                dl->perm_cap = 0;
                dl_unmap(dl);
                return -1;
            }
            dl->perm_cap = n;
        }
        // Fisher-Yates.
        uint64_t rng = dl_perm_seed(dl->seed, epoch, (uint64_t)dl->order[j]);
        for (uint64_t i = 0; i < n; i++) dl->perm[i] = (uint32_t)i;
        for (uint64_t i = n - 1; i > 0; i--) {
            uint64_t k = dl_rand_below(&rng, i + 1);
            uint32_t t = dl->perm[i];
            dl->perm[i] = dl->perm[k];
            dl->perm[k] = t;
        }
    }
    return 0;
}

// The shard order of an epoch and each shard's first item in it.
static inline void dl_set_epoch(DataLoader *dl, uint64_t epoch) {
    int n = dl->num_shards;
    for (int i = 0; i < n; i++) dl->order[i] = i;
    if (dl->shuffle) {
        uint64_t rng = dl_perm_seed(dl->seed, epoch, UINT64_MAX);
        for (int i = n - 1; i > 0; i--) {
            int k = (int)dl_rand_below(&rng, (uint64_t)i + 1);
            int t = dl->order[i];
            dl->order[i] = dl->order[k];
            dl->order[k] = t;
        }
    }
    dl->order_start[0] = 0;
    for (int i = 0; i < n; i++) dl->order_start[i + 1] = dl->order_start[i] + dl->shards[dl->order[i]].num_sequences;
    dl->order_epoch = epoch;
}

// Copies stream item g into one row of inputs and targets.
static inline int dl_copy_item(DataLoader *dl, uint64_t g, int *inputs, int *targets) {
    uint64_t epoch = g / dl->num_sequences, p = g % dl->num_sequences;
    if (epoch != dl->order_epoch) dl_set_epoch(dl, epoch);
    // The shard holding item p: the last j with order_start[j] <= p.
    int lo = 0, hi = dl->num_shards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->order_start[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    if (dl->cur != lo || dl->cur_epoch != epoch) {
        if (dl_open_shard(dl, epoch, lo) != 0) return -1;
    }
    uint64_t local = p - dl->order_start[lo];
    uint64_t seq = dl->shuffle ? dl->perm[local] : local;
    const uint16_t *src = dl->tokens + seq * (uint64_t)dl->T;
    int T = dl->T;
    for (int t = 0; t <= T; t++) {
        if ((int)src[t] >= dl->vocab_size) {
            uint64_t at = seq * (uint64_t)T + (uint64_t)t;
            fprintf(stderr, "error: %s: token %llu (byte offset %llu) has id %d, not below the vocab size %d\n",
                    dl->shards[dl->order[lo]].path, (unsigned long long)at,
                    (unsigned long long)(DL_HEADER_BYTES + 2 * at), (int)src[t], dl->vocab_size);
            return -1;
        }
    }
    for (int t = 0; t < T; t++) {
        inputs[t] = src[t];
        targets[t] = src[t + 1];
    }
    return 0;
}

// ----------------------------------------------------------------------------
// Public API

static inline void dataloader_free(DataLoader *dl) {
    dl_unmap(dl);
    for (int i = 0; i < dl->num_shards; i++) free(dl->shards[i].path);
    free(dl->shards);
    free(dl->order);
    free(dl->order_start);
    free(dl->perm);
    free(dl->pattern);
    memset(dl, 0, sizeof(*dl));
    dl->cur = -1;
}

static inline int dataloader_init(DataLoader *dl, const char *pattern, int B, int T, int rank, int world, int shuffle,
                                  uint64_t seed, int vocab_size) {
    memset(dl, 0, sizeof(*dl));
    dl->cur = -1;
    dl->order_epoch = UINT64_MAX;
    if (!pattern) pattern = "(null)";
    // Bounds keep every size computation below far from overflow.
    if (B < 1 || B > (1 << 24) || T < 1 || T > (1 << 24) || world < 1 || world > (1 << 24) || rank < 0 ||
        rank >= world || vocab_size < 1 || vocab_size > 65536) {
        fprintf(stderr, "error: %s: bad loader arguments B=%d T=%d rank=%d world=%d vocab_size=%d\n", pattern, B, T, rank,
                world, vocab_size);
        return -1;
    }
    dl->B = B;
    dl->T = T;
    dl->rank = rank;
    dl->world = world;
    dl->shuffle = shuffle != 0;
    dl->seed = seed;
    dl->vocab_size = vocab_size;
    dl->pattern = dl_strdup(pattern);
    if (!dl->pattern) {
        fprintf(stderr, "error: %s: out of memory\n", pattern);
        return -1;
    }

    glob_t g;
    int grc = glob(pattern, 0, NULL, &g); // sorted: the file order every rank agrees on
    if (grc != 0) {
        fprintf(stderr, "error: %s: %s\n", pattern,
                grc == GLOB_NOMATCH ? "no files match" : grc == GLOB_NOSPACE ? "out of memory" : "cannot read a directory");
        if (grc != GLOB_NOMATCH) globfree(&g);
        dataloader_free(dl);
        return -1;
    }
    // The order arrays hold shard indices as int.
    if (g.gl_pathc > 1000000) {
        fprintf(stderr, "error: %s: %zu files match, more than the 1000000 supported\n", pattern, (size_t)g.gl_pathc);
        globfree(&g);
        dataloader_free(dl);
        return -1;
    }
    int n = (int)g.gl_pathc;
    dl->shards = (DataLoaderShard *)calloc((size_t)n, sizeof(DataLoaderShard));
    dl->order = (int *)malloc((size_t)n * sizeof(int));
    dl->order_start = (uint64_t *)malloc(((size_t)n + 1) * sizeof(uint64_t));
    if (!dl->shards || !dl->order || !dl->order_start) {
        fprintf(stderr, "error: %s: out of memory\n", pattern);
        globfree(&g);
        dataloader_free(dl);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        dl->shards[i].path = dl_strdup(g.gl_pathv[i]);
        dl->num_shards = i + 1; // so dataloader_free frees what exists so far
        if (!dl->shards[i].path) fprintf(stderr, "error: %s: out of memory\n", g.gl_pathv[i]);
        if (!dl->shards[i].path || dl_scan_shard(&dl->shards[i], T) != 0) {
            globfree(&g);
            dataloader_free(dl);
            return -1;
        }
        dl->num_tokens += dl->shards[i].num_tokens;
        dl->num_sequences += dl->shards[i].num_sequences;
    }
    globfree(&g);
    // Fewer sequences than one global batch would put the same sequence twice
    // into one optimizer step: surely a mistake (say, a validation set made too small).
    uint64_t global_batch = (uint64_t)B * (uint64_t)world;
    if (dl->num_sequences < global_batch) {
        fprintf(stderr, "error: %s: %llu sequences of T+1 = %d tokens in all, fewer than one batch of B*world = %llu\n",
                n == 1 ? dl->shards[0].path : pattern, (unsigned long long)dl->num_sequences, T + 1,
                (unsigned long long)global_batch);
        dataloader_free(dl);
        return -1;
    }
    return 0;
}

static inline int dataloader_next(DataLoader *dl, int *inputs, int *targets) {
    uint64_t first = dl->next + (uint64_t)dl->rank * (uint64_t)dl->B;
    for (int b = 0; b < dl->B; b++) {
        if (dl_copy_item(dl, first + (uint64_t)b, inputs + (size_t)b * dl->T, targets + (size_t)b * dl->T) != 0)
            return -1;
    }
    dl->next += (uint64_t)dl->B * (uint64_t)dl->world;
    return 0;
}

static inline void dataloader_reset(DataLoader *dl) { dl->next = 0; }

static inline DataLoaderState dataloader_state(const DataLoader *dl) {
    DataLoaderState s;
    memset(&s, 0, sizeof(s));
    s.magic = DL_STATE_MAGIC;
    s.epoch = dl->next / dl->num_sequences;
    s.position = dl->next % dl->num_sequences;
    s.seed = dl->seed;
    s.shuffle = (uint64_t)dl->shuffle;
    s.T = (uint64_t)dl->T;
    s.num_sequences = dl->num_sequences;
    s.num_shards = (uint64_t)dl->num_shards;
    return s;
}

static inline int dataloader_restore(DataLoader *dl, const DataLoaderState *s) {
    const char *why = NULL;
    if (s->magic != DL_STATE_MAGIC) why = "not a data loader state";
    else if (s->T != (uint64_t)dl->T) why = "saved with a different sequence length T";
    else if (s->shuffle != (uint64_t)dl->shuffle) why = "saved with shuffling set differently";
    else if (dl->shuffle && s->seed != dl->seed) why = "saved with a different seed";
    else if (s->num_shards != (uint64_t)dl->num_shards || s->num_sequences != dl->num_sequences)
        why = "saved over different data (shard or sequence count differs)";
    else if (s->position >= dl->num_sequences) why = "position beyond the end of an epoch";
    else if (s->epoch > (UINT64_MAX - s->position) / dl->num_sequences) why = "epoch out of range";
    if (why) {
        fprintf(stderr, "error: %s: cannot resume data position: %s\n", dl->pattern, why);
        return -1;
    }
    dl->next = s->epoch * dl->num_sequences + s->position;
    return 0;
}

static inline uint64_t dataloader_num_tokens(const DataLoader *dl) { return dl->num_tokens; }

// Full batches this rank gets per epoch (every rank gets the same count); the
// natural length of a validation pass.
static inline uint64_t dataloader_num_batches(const DataLoader *dl) {
    return dl->num_sequences / ((uint64_t)dl->B * (uint64_t)dl->world);
}

#endif // DATALOADER_H
