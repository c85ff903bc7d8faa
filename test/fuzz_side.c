// Fuzz target for the side channel's parsers of network input (run/sidechannel.h):
// side_parse_query (what a rank's server reads from anyone who connects) and side_parse_reply
// (what a rank whose watchdog fired reads from its peers). The input's first byte picks which;
// the rest is the message. Beyond "no crash, no sanitizer report", it checks what must hold:
// a query is accepted only when it is the job's query byte for byte, and an accepted reply has
// its host name terminated, its entries in range and in order, its times finite; a valid reply
// with any one byte changed either still parses or is refused, never half-read.
//
// Built two ways:
//   clang -fsanitize=fuzzer,address,undefined -DZERO_LIBFUZZER (libFuzzer drives it)
//   mpicc -fsanitize=address,undefined (test/test_hang.sh): with files as arguments, replays
//   them; without, runs its own generator: random bytes, the valid messages, each with every
//   single-byte change at a few positions, truncated and extended copies.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/sidechannel.h"

static const unsigned char fuzz_token[SIDE_TOKEN] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void fuzz_fail(const char *why) {
    fprintf(stderr, "FAIL: %s\n", why);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *msg = data + 1;
    size_t n = size - 1;
    if (data[0] & 1) {
        int ok = side_parse_query(msg, n, fuzz_token) == 0;
        SideQuery q;
        memset(&q, 0, sizeof(q));
        int good = n == sizeof(q);
        if (good) {
            memcpy(&q, msg, sizeof(q));
            good = !memcmp(q.magic, "zc-hangQ", 8) && !memcmp(q.token, fuzz_token, SIDE_TOKEN);
        }
        if (ok != good) fuzz_fail("side_parse_query disagrees with the format");
    } else {
        SideReply r;
        int rank = data[0] >> 1 & 7, world = 8;
        if (side_parse_reply(msg, n, fuzz_token, rank, world, &r) == 0) {
            if (r.rank != rank || r.nentries < 0 || r.nentries > FLIGHT_K || r.phase < 0 || r.phase >= FL_NUM_PHASES)
                fuzz_fail("accepted reply out of range");
            if (strnlen(r.host, SIDE_HOST) >= SIDE_HOST) fuzz_fail("host name not terminated");
            for (int i = 0; i < r.nentries; i++) {
                if (r.e[i].op < 0 || r.e[i].op > 2 || r.e[i].seq >= r.next || (i && r.e[i].seq <= r.e[i - 1].seq))
                    fuzz_fail("accepted entry out of range");
                if (!side_finite(r.e[i].issued) || !side_finite(r.e[i].done) || !side_finite(r.e[i].bytes))
                    fuzz_fail("accepted entry with a time that is not finite");
            }
        }
    }
    return 0;
}

#ifndef ZERO_LIBFUZZER
static uint64_t fuzz_rng = 0x9E3779B97F4A7C15ull;
static uint32_t fuzz_next(void) {
    fuzz_rng ^= fuzz_rng << 13; fuzz_rng ^= fuzz_rng >> 7; fuzz_rng ^= fuzz_rng << 17;
    return (uint32_t)(fuzz_rng >> 16);
}
static long fuzz_runs;
static void fuzz_one(const uint8_t *buf, size_t n) {
    uint8_t *copy = (uint8_t *)malloc(n ? n : 1); // exact size: ASan sees reads past the end
    memcpy(copy, buf, n);
    LLVMFuzzerTestOneInput(copy, n);
    free(copy);
    fuzz_runs++;
}
int main(int argc, char **argv) {
    static uint8_t buf[1 + sizeof(SideReply) + 64];
    if (argc > 1) {
        for (int i = 1; i < argc; i++) {
            FILE *f = fopen(argv[i], "rb");
            if (!f) { fprintf(stderr, "cannot open %s\n", argv[i]); return 2; }
            size_t got = fread(buf, 1, sizeof(buf), f);
            fclose(f);
            fuzz_one(buf, got);
        }
        printf("replayed %d inputs without a crash\n", argc - 1);
        return 0;
    }
    // the valid messages: a query, and a reply of rank 3 with 40 entries
    SideQuery q;
    memset(&q, 0, sizeof(q));
    memcpy(q.magic, "zc-hangQ", 8);
    memcpy(q.token, fuzz_token, SIDE_TOKEN);
    SideReply r;
    memset(&r, 0, sizeof(r));
    memcpy(r.magic, "zc-hangR", 8);
    memcpy(r.token, fuzz_token, SIDE_TOKEN);
    r.rank = 3; r.phase = FL_WAITING_IN; r.next = 500; r.wait_seq = 499; r.now = 100.0; r.since = 99.0;
    snprintf(r.host, sizeof(r.host), "hostb");
    r.final_unit = 13; r.nentries = 40;
    for (int i = 0; i < 40; i++) {
        FlightEntry *e = &r.e[i];
        e->seq = 460 + i; e->op = i % 3; e->unit = i % 14; e->bytes = 1e6; e->issued = 90.0 + i * 0.1;
        e->done = i < 39 ? e->issued + 0.05 : 0.0; e->state = i < 39 ? FL_DONE : FL_WAITING; e->step = 7; e->micro = i % 4;
    }
    buf[0] = 1;
    memcpy(buf + 1, &q, sizeof(q));
    if (side_parse_query(buf + 1, sizeof(q), fuzz_token) != 0) fuzz_fail("the valid query is refused");
    buf[0] = 3 << 1;
    memcpy(buf + 1, &r, sizeof(r));
    SideReply out;
    if (side_parse_reply(buf + 1, sizeof(r), fuzz_token, 3, 8, &out) != 0) fuzz_fail("the valid reply is refused");
    if (side_parse_reply(buf + 1, sizeof(r), fuzz_token, 2, 8, &out) == 0) fuzz_fail("a reply from the wrong rank is accepted");
    // each valid message: every byte position changed to a few values, truncated, extended
    for (int which = 0; which < 2; which++) {
        size_t n = 1 + (which ? sizeof(r) : sizeof(q));
        buf[0] = which ? 3 << 1 : 1;
        memcpy(buf + 1, which ? (const void *)&r : (const void *)&q, n - 1);
        for (size_t at = 1; at < n; at++) {
            uint8_t keep = buf[at];
            static const uint8_t vals[] = {0x00, 0xff, 0x80, 0x7f, 0x01};
            for (int v = 0; v < 5; v++) { buf[at] = keep ^ vals[v] ^ (uint8_t)(v ? 0 : 0x5a); fuzz_one(buf, n); }
            buf[at] = keep;
        }
        for (size_t len = 0; len < n + 40; len += 1 + len / 8) fuzz_one(buf, len < sizeof(buf) ? len : sizeof(buf));
    }
    // random bytes, and random changes to the valid reply
    for (int it = 0; it < 20000; it++) {
        size_t n = fuzz_next() % sizeof(buf);
        if (it % 2) {
            buf[0] = (uint8_t)(fuzz_next() & ~1u);
            memcpy(buf + 1, &r, sizeof(r));
            n = 1 + sizeof(r);
            for (int k = 1 + (int)(fuzz_next() % 8); k > 0; k--) buf[1 + fuzz_next() % sizeof(r)] = (uint8_t)fuzz_next();
        } else {
            for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)fuzz_next();
        }
        fuzz_one(buf, n);
    }
    printf("fuzz_side: %ld inputs through the side channel's parsers without a crash or a wrong acceptance\n", fuzz_runs);
    return 0;
}
#endif
