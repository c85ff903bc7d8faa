/*
tokenizer.h: turns GPT-2 token ids back into bytes, for printing samples.

Decoding only: encoding needs the BPE merges and is done once, offline, by
data/prepare.mjs with tiktoken. Decoding is just a table lookup, because every
GPT-2 token stands for a fixed byte string; concatenating the pieces of a
token sequence gives back the exact bytes of the text.

File (llm.c format, written by data/prepare.mjs): int32 header[256] =
{20240328 magic, version, vocab size, end-of-text id (version 2 only), ...}, then
for each id in order one uint8 length (1..255) and that many bytes.

A piece can be a fragment of a UTF-8 character (tokens split multi-byte
characters), so pieces are bytes, not text: tokenizer_decode_len gives the exact
length, and tokenizer_decode a NUL-terminated copy for the common case.

Single header, no global state, all functions static inline; C11 and CUDA C++.
*/
#ifndef TOKENIZER_H
#define TOKENIZER_H

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_MAGIC 20240328

typedef struct {
    int vocab_size;
    int eot_token;      // end-of-text id, -1 if the file does not say
    char *bytes;        // every piece, each followed by a NUL
    uint32_t *offset;   // vocab_size: where piece i starts in bytes
    uint8_t *length;    // vocab_size: its length, NUL not counted
} Tokenizer;

static inline void tokenizer_free(Tokenizer *t) {
    free(t->bytes);
    free(t->offset);
    free(t->length);
    memset(t, 0, sizeof(*t));
}

// Reads the whole file (about 300 KB for GPT-2) and checks that it parses to
// exactly its end: a truncated or padded file is reported, never half-loaded.
static inline int tokenizer_init(Tokenizer *t, const char *path) {
    memset(t, 0, sizeof(*t));
    char msg[200];
    unsigned char *buf = NULL;
    long size = -1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "error: %s: cannot open tokenizer file\n", path);
        return -1;
    }
    if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size >= 0 && fseek(f, 0, SEEK_SET) == 0 && size <= (1L << 30)) {
        buf = (unsigned char *)malloc((size_t)size + 1);
        if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) size = -1;
    } else {
        size = -1;
    }
    fclose(f);
    if (size < 0 || !buf) {
        free(buf);
        fprintf(stderr, "error: %s: cannot read tokenizer file (unreadable or over 1 GB)\n", path);
        return -1;
    }

    int32_t h[4] = {0, 0, 0, 0};
    uint64_t pos = 1024, n = (uint64_t)size;
    if (n < 1024) {
        snprintf(msg, sizeof(msg), "%llu bytes, shorter than the 1024-byte header", (unsigned long long)n);
        goto fail;
    }
    memcpy(h, buf, sizeof(h));
    if (h[0] != TOKENIZER_MAGIC) {
        snprintf(msg, sizeof(msg), "bad magic %d (expected %d): not a tokenizer file", (int)h[0], TOKENIZER_MAGIC);
        goto fail;
    }
    // Version 1 (llm.c's first) lacks the end-of-text id; 2 has it.
    if (h[1] != 1 && h[1] != 2) {
        snprintf(msg, sizeof(msg), "unsupported tokenizer version %d (expected 1 or 2)", (int)h[1]);
        goto fail;
    }
    if (h[2] < 1 || h[2] > (1 << 24)) {
        snprintf(msg, sizeof(msg), "implausible vocab size %d", (int)h[2]);
        goto fail;
    }
    // Every token takes at least two bytes (length and one byte). Checking that
    // before allocating keeps a tiny file with a huge vocab size from costing
    // 80 MB of tables (found by the fuzzer: test/fuzz_regressions/oom-c877...).
    if ((uint64_t)h[2] > (n - 1024) / 2) {
        snprintf(msg, sizeof(msg), "vocab size %d needs at least %llu bytes of tokens, the file has %llu", (int)h[2],
                 2ull * (unsigned long long)h[2], (unsigned long long)(n - 1024));
        goto fail;
    }
    t->vocab_size = h[2];
    t->eot_token = h[1] == 2 ? h[3] : -1;
    if (h[1] == 2 && (h[3] < 0 || h[3] >= h[2])) {
        snprintf(msg, sizeof(msg), "end-of-text id %d outside the vocab of %d", (int)h[3], (int)h[2]);
        goto fail;
    }
    t->offset = (uint32_t *)malloc((size_t)t->vocab_size * sizeof(uint32_t));
    t->length = (uint8_t *)malloc((size_t)t->vocab_size);
    // Each piece plus its NUL fits in the file's own length byte + payload.
    t->bytes = (char *)malloc((size_t)(n - 1024) + 1);
    if (!t->offset || !t->length || !t->bytes) {
        snprintf(msg, sizeof(msg), "out of memory");
        goto fail;
    }
    {
        uint32_t out = 0;
        for (int i = 0; i < t->vocab_size; i++) {
            if (pos >= n) {
                snprintf(msg, sizeof(msg), "truncated: ends at token %d of %d", i, t->vocab_size);
                goto fail;
            }
            unsigned len = buf[pos++];
            if (len == 0 || pos + len > n) {
                snprintf(msg, sizeof(msg), "token %d: %s", i, len == 0 ? "zero length" : "truncated");
                goto fail;
            }
            t->offset[i] = out;
            t->length[i] = (uint8_t)len;
            memcpy(t->bytes + out, buf + pos, len);
            out += len;
            t->bytes[out++] = '\0';
            pos += len;
        }
    }
    if (pos != n) {
        snprintf(msg, sizeof(msg), "%llu bytes of trailing garbage after the last token", (unsigned long long)(n - pos));
        goto fail;
    }
    free(buf);
    return 0;
fail:
    free(buf);
    tokenizer_free(t);
    fprintf(stderr, "error: %s: %s\n", path, msg);
    return -1;
}

// The piece's bytes and (if len) their count; NULL if id is out of range.
static inline const char *tokenizer_decode_len(const Tokenizer *t, int id, int *len) {
    if (!t->bytes || id < 0 || id >= t->vocab_size) return NULL;
    if (len) *len = t->length[id];
    return t->bytes + t->offset[id];
}

static inline const char *tokenizer_decode(const Tokenizer *t, int id) { return tokenizer_decode_len(t, id, NULL); }

// Writes the piece for a terminal. Single-byte pieces that are control bytes or
// stray high bytes (half a UTF-8 character) would garble it, so they are
// skipped; everything else, including multi-byte UTF-8, is written as is.
static inline void tokenizer_print(const Tokenizer *t, int id, FILE *f) {
    int len = 0;
    const char *p = tokenizer_decode_len(t, id, &len);
    if (!p) return;
    if (len == 1) {
        unsigned char c = (unsigned char)p[0];
        if (c >= 0x80 || !(isprint(c) || isspace(c))) return;
    }
    fwrite(p, 1, (size_t)len, f);
}

#endif // TOKENIZER_H
