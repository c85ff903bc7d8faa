// ds_batch_cli WORLD FILE [options...]: resolves the batch triple the way the trainer does
// (config_parse, ds_config_apply, config_validate) for WORLD processes, without training, and
// prints "micro accumulation total_tokens" (exit 0), or the one error line on stderr (exit 1).
// test/test_ds_batch.sh compares it with DeepSpeed's rules written out in Python.
#include <stdio.h>
#include <stdlib.h>
#include "run/ds_config.h"

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s WORLD FILE [options...]\n", argv[0]); return 2; }
    int world = atoi(argv[1]);
    static TrainConfig c;
    config_defaults(&c);
    char *args[64] = {argv[0]}; // config_parse sees: prog options...
    int n = 1;
    for (int i = 3; i < argc && n < 63; i++) args[n++] = argv[i];
    if (config_parse(&c, n, args) != 0) return 1;
    if (ds_config_apply(&c, argv[2], world, 0)) return 1;
    if (config_validate(&c, world)) return 1;
    printf("%d %d %ld\n", c.batch, c.grad_accum, c.total_batch);
    return 0;
}
