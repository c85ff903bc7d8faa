// fuzz_replay.h: main() for a libFuzzer target built without libFuzzer: runs each input file
// named on the command line once through LLVMFuzzerTestOneInput, so the suite replays the
// corpus and the crashes fuzzing ever found (under ASan/UBSan) without clang's fuzzer runtime.
// Include it last in a fuzz target; with -DZERO_LIBFUZZER it is empty.
#ifndef ZERO_LIBFUZZER
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    int n = 0;
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            fprintf(stderr, "cannot open %s\n", argv[i]);
            return 2;
        }
        static uint8_t buf[1 << 21];
        size_t got = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        // A heap copy of the exact size, so ASan sees reads past the end of the input.
        uint8_t *copy = (uint8_t *)malloc(got ? got : 1);
        memcpy(copy, buf, got);
        LLVMFuzzerTestOneInput(copy, got);
        free(copy);
        n++;
    }
    printf("replayed %d inputs without a crash\n", n);
    return 0;
}
#endif
