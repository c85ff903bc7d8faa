// Checks of tokenizer.h against facts that do not come from it.
//
//   tokenizer_roundtrip facts TOKENIZER          known GPT-2 ids and the file's header
//   tokenizer_roundtrip decode TOKENIZER IDS     writes the bytes of the ids in file IDS
//                                                (whitespace-separated) to stdout
//   tokenizer_roundtrip shard TOKENIZER SHARD    writes a shard's tokens decoded to stdout
//   tokenizer_roundtrip print TOKENIZER IDS      the same through tokenizer_print
//
// The shell test compares decode's output byte for byte with the text tiktoken
// encoded, and re-encodes a decoded shard to get the shard back.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer.h"

static int check_piece(const Tokenizer *t, int id, const char *want, int want_len) {
    int len = -1;
    const char *p = tokenizer_decode_len(t, id, &len);
    if (!p || len != want_len || memcmp(p, want, (size_t)len) != 0) {
        fprintf(stderr, "FAIL: token %d decodes to %d bytes, expected \"%s\"\n", id, len, want);
        return 1;
    }
    return 0;
}

static int facts(const Tokenizer *t) {
    int bad = 0;
    if (t->vocab_size != 50257 || t->eot_token != 50256) {
        fprintf(stderr, "FAIL: vocab %d eot %d, expected 50257 and 50256\n", t->vocab_size, t->eot_token);
        bad++;
    }
    // Well-known GPT-2 ids: "Hello world" is [15496, 995]; the first byte-level
    // tokens are the printable bytes from '!'; bytes 0..32 follow at 188..220.
    bad += check_piece(t, 15496, "Hello", 5);
    bad += check_piece(t, 995, " world", 6);
    bad += check_piece(t, 50256, "<|endoftext|>", 13);
    bad += check_piece(t, 0, "!", 1);
    bad += check_piece(t, 188, "\0", 1);
    bad += check_piece(t, 198, "\n", 1);
    bad += check_piece(t, 220, " ", 1);
    bad += check_piece(t, 464, "The", 3);
    if (tokenizer_decode(t, -1) || tokenizer_decode(t, 50257)) {
        fprintf(stderr, "FAIL: out-of-range ids must decode to NULL\n");
        bad++;
    }
    if (!tokenizer_decode(t, 15496) || strcmp(tokenizer_decode(t, 15496), "Hello") != 0) bad++;
    // tokenizer_print drops lone control bytes (id 188 is byte 0) but keeps whitespace.
    char buf[64] = {0};
    FILE *f = fmemopen(buf, sizeof(buf) - 1, "w");
    tokenizer_print(t, 15496, f);
    tokenizer_print(t, 188, f);
    tokenizer_print(t, 198, f);
    tokenizer_print(t, 50257, f);
    tokenizer_print(t, 995, f);
    fclose(f);
    if (strcmp(buf, "Hello\n world") != 0) {
        fprintf(stderr, "FAIL: tokenizer_print wrote \"%s\"\n", buf);
        bad++;
    }
    if (!bad) printf("tokenizer facts: ok\n");
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s facts|decode|shard|print TOKENIZER [FILE]\n", argv[0]);
        return 2;
    }
    Tokenizer t;
    if (tokenizer_init(&t, argv[2]) != 0) return 1;
    int rc = 0;
    if (!strcmp(argv[1], "facts")) {
        rc = facts(&t);
    } else if ((!strcmp(argv[1], "decode") || !strcmp(argv[1], "print")) && argc == 4) {
        FILE *f = fopen(argv[3], "r");
        int id;
        if (!f) return 2;
        while (fscanf(f, "%d", &id) == 1) {
            int len = 0;
            const char *p = tokenizer_decode_len(&t, id, &len);
            if (!p) {
                fprintf(stderr, "id %d out of range\n", id);
                rc = 1;
                break;
            }
            if (argv[1][0] == 'd') fwrite(p, 1, (size_t)len, stdout);
            else tokenizer_print(&t, id, stdout);
        }
        fclose(f);
    } else if (!strcmp(argv[1], "shard") && argc == 4) {
        FILE *f = fopen(argv[3], "rb");
        int32_t header[256];
        if (!f || fread(header, 4, 256, f) != 256) return 2;
        uint16_t tok;
        for (int32_t i = 0; i < header[2] && fread(&tok, 2, 1, f) == 1; i++) {
            int len = 0;
            const char *p = tokenizer_decode_len(&t, tok, &len);
            if (!p) {
                rc = 1;
                break;
            }
            fwrite(p, 1, (size_t)len, stdout);
        }
        fclose(f);
    } else {
        fprintf(stderr, "bad arguments\n");
        rc = 2;
    }
    tokenizer_free(&t);
    return rc;
}
